"""Running the `onnx-vplan` command: where it is, how it is called, how it fails.

The command is found through the environment variable ONNX_VPLAN (a path), else on PATH.
Every call goes through `run`, which turns a failure (exit 1 runtime failure, 2 bad input
or usage; any other code but those a caller accepts) into one exception, `VplanError`,
carrying the tool's own message and its exit code."""
import os
import shutil
import subprocess
import threading
import time

from .progress import Progress

# the tool's exit codes (tools/cli/cli.h)
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_OVER_BUDGET = 0, 1, 2, 3


class VplanError(Exception):
    """A failure of onnx-vplan or a bad argument, with the tool's message.

    `.message`: what the tool printed on stderr (its "onnx-vplan: ..." line, without the
    prefix), or the reason this package refused an argument before running it.
    `.exit_code`: the tool's exit code (1 a failure while running, 2 bad input or usage;
    an argument refused in Python is a usage error, 2)."""

    def __init__(self, message, exit_code=EXIT_USAGE, command=None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.command = command

    def __str__(self):
        return f"{self.message} (exit {self.exit_code})"


def tool_path():
    """The onnx-vplan executable: $ONNX_VPLAN, else `onnx-vplan` on PATH."""
    env = os.environ.get("ONNX_VPLAN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise VplanError(f"ONNX_VPLAN={env}: not an executable file", EXIT_FAILURE)
        return env
    found = shutil.which("onnx-vplan")
    if not found:
        raise VplanError("onnx-vplan not found: install it (cmake --install) or set ONNX_VPLAN to its path", EXIT_FAILURE)
    return found


def _message(stderr, stdout):
    """The tool's error line(s): those it prefixes with "onnx-vplan: " (cli_report, the
    option parser), warnings only where nothing else is, else the last lines it wrote."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    tagged = [ln[len("onnx-vplan: "):] for ln in lines if ln.startswith("onnx-vplan: ")]
    errors = [ln for ln in tagged if not ln.startswith("warning: ")]
    tagged = errors or tagged
    if tagged:
        return "\n".join(tagged)
    if lines:
        return "\n".join(lines[-3:])
    out = [ln.rstrip() for ln in stdout.splitlines() if ln.strip()]
    return "\n".join(out[-3:]) or "no message"


def run(args, *, accept=(EXIT_OK,), progress=True, desc=None):
    """Runs `onnx-vplan ARGS...`; returns (exit code, stdout, stderr).

    An exit code outside `accept` raises VplanError with the tool's message.  With
    `progress`, a line (or a tqdm bar) shows the seconds spent and the tool's last line
    of output while it runs."""
    cmd = [tool_path()] + [str(a) for a in args]
    bar = Progress(desc or f"onnx-vplan {args[0]}", enabled=progress)
    out_lines, err_chunks = [], []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise VplanError(f"{cmd[0]}: {e.strerror}", EXIT_FAILURE, cmd) from e

    def drain_err():  # the tool's progress (max-batch's tries) and messages come on stderr
        for line in proc.stderr:
            err_chunks.append(line)
            if line.strip() and not line.startswith("onnx-vplan: warning"):
                bar.update(line.strip())

    t = threading.Thread(target=drain_err, daemon=True)
    t.start()
    start = time.monotonic()
    try:
        for line in proc.stdout:
            out_lines.append(line)
            if line.strip():
                bar.update(line.strip())
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        t.join()
        proc.stdout.close()
        proc.stderr.close()
        bar.close(f"{time.monotonic() - start:.1f} s")
    stdout, stderr = "".join(out_lines), "".join(err_chunks)
    if proc.returncode not in accept:
        raise VplanError(_message(stderr, stdout), proc.returncode, cmd)
    return proc.returncode, stdout, stderr
