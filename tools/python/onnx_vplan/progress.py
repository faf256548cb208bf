"""Progress of exports and of the tool's long runs (a search, a max-batch sweep): a tqdm
bar where tqdm is installed, else plain lines on stderr; nothing with enabled=False."""
import sys
import threading
import time

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # plain text instead
    _tqdm = None

PLAIN_EVERY_S = 10.0  # plain text: at most one line of the tool's progress this often
TICK_S = 1.0  # the bar's clock moves while nothing is printed (a search prints at its end)


class Progress:
    """One task: `update(text)` with what it is doing now, `close(summary)` when done.
    The time spent shows as it passes (the bar ticks; plain text says so every
    PLAIN_EVERY_S seconds without news)."""

    def __init__(self, desc, enabled=True):
        self.desc, self.enabled, self.bar = desc, enabled, None
        self.start = self.last = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        if not enabled:
            return
        if _tqdm is not None:
            self.bar = _tqdm(total=None, desc=desc, file=sys.stderr, leave=True,
                             bar_format="{desc}: {elapsed}{postfix}")
        else:
            print(f"onnx_vplan: {desc} ...", file=sys.stderr, flush=True)
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self):
        while not self.stop.wait(TICK_S):
            with self.lock:
                if not self.enabled:
                    return
                if self.bar is not None:
                    self.bar.refresh()
                elif time.monotonic() - self.last >= PLAIN_EVERY_S:
                    self.last = time.monotonic()
                    print(f"onnx_vplan: {self.desc}: {time.monotonic() - self.start:.0f} s", file=sys.stderr,
                          flush=True)

    def update(self, text):
        if not self.enabled:
            return
        text = " ".join(text.split())
        text = text if len(text) <= 70 else text[:67] + "..."
        with self.lock:
            if not self.enabled:
                return
            if self.bar is not None:
                self.bar.set_postfix_str(text, refresh=True)
            elif time.monotonic() - self.last >= PLAIN_EVERY_S:
                self.last = time.monotonic()
                print(f"onnx_vplan: {self.desc}: {text}", file=sys.stderr, flush=True)

    def close(self, summary=""):
        self.stop.set()
        with self.lock:
            if not self.enabled:
                return
            if self.bar is not None:
                self.bar.set_postfix_str(summary, refresh=False)
                self.bar.close()
                self.bar = None
            else:
                print(f"onnx_vplan: {self.desc}: done{', ' + summary if summary else ''}", file=sys.stderr, flush=True)
            self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
