"""Planning a training step with `onnx-vplan plan` and reading its report as Python.

`plan` builds the command line from keyword arguments (each maps to one option of
`onnx-vplan plan`; the tool checks every value and its message is what a VplanError
carries), runs it with `--json`, and returns a `Plan`: the JSON's figures as attributes,
the text report, and methods that write the plan's DOT graph, SVG timeline or plan file
by running the same command again with one more option (planning is deterministic: the
same options give the same plan).  A torch module is exported first (`export`, into a
temporary folder the Plan keeps).  `max_batch` runs `plan --max-batch DIM`."""
import json
import os
import re
import tempfile

from .tool import EXIT_OK, EXIT_OVER_BUDGET, VplanError, run

LOSSES = ("ce", "mse", "output")


class Plan:
    """What `onnx-vplan plan` reported for one training step.

    arena_bytes      the one allocation the step runs in (bytes)
    fits             whether it fits the budget (True without a budget)
    budget_bytes     the budget, or None
    categories       bytes per category: parameters, gradients, optimizer_state,
                     activations, temporaries, workspace, inputs, constants, ...
    peak_step        the step where the most bytes are live
    estimated_step_seconds   the device profile's estimate of one step
    lower_bound_bytes, arena_outcome, remat, steps, buffers: as in the JSON
    candidates       with auto=True: every combination planned (dicts: tp, precision,
                     fused_update, offload, remat, arena_bytes, estimated_step_seconds,
                     fits, ...); else None.  chosen: the index of the winner; why: the reason
    batch            max_batch's answer (the largest value of its dim that fits), else None
    json             the whole JSON report (dict)
    model_path       the ONNX file planned; command: the command line that planned it"""

    def __init__(self, command, stdout, report, model_path, keep=None, exit_code=EXIT_OK, batch=None):
        self.command = list(command)
        self._stdout = stdout
        self.json = report
        self.model_path = model_path
        self._keep = keep  # the temporary folder of an exported module, alive with the plan
        self.exit_code = exit_code
        self.batch = batch
        self.arena_bytes = report.get("arena_bytes")
        self.fits = bool(report.get("fits", exit_code != EXIT_OVER_BUDGET))
        self.budget_bytes = report.get("budget_bytes")
        self.categories = dict(report.get("categories", {}))
        self.peak_step = report.get("peak_step")
        self.estimated_step_seconds = report.get("estimated_step_seconds")
        self.lower_bound_bytes = report.get("lower_bound_bytes")
        self.arena_outcome = report.get("arena_outcome")
        self.remat = report.get("remat")
        self.steps = report.get("steps")
        self.buffers = report.get("buffers")
        search = report.get("search")
        self.candidates = list(search.get("candidates", [])) if search else None
        self.chosen = search.get("chosen") if search else None
        self.why = search.get("why") if search else None

    def close(self):
        """Removes the temporary export of a module (model_path then no longer exists);
        also done when the Plan is collected."""
        if self._keep is not None:
            self._keep.cleanup()
            self._keep = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def report(self):
        """The tool's text report (with auto=True, the table of candidates first)."""
        return self._stdout

    def __str__(self):
        return self._stdout

    def __repr__(self):
        return f"<Plan {os.path.basename(self.model_path)}: arena {_human(self.arena_bytes)}, fits {self.fits}>"

    def _again(self, *extra):
        run(self.command[1:] + list(extra), accept=(EXIT_OK, EXIT_OVER_BUDGET), progress=False)

    def to_dot(self, path):
        """Writes the plan as a Graphviz graph (`--dot`); returns path."""
        self._again("--dot", os.fspath(path))
        return path

    def timeline(self, path):
        """Writes the SVG of live bytes by category over the steps, with the arena layout
        (`--timeline`); returns path."""
        self._again("--timeline", os.fspath(path))
        return path

    def save(self, path):
        """Writes the plan file (`-o`; run it with `onnx-vplan run PATH`); returns path.
        With tp > 1 the tool writes PATH.<rank> for each rank."""
        self._again("-o", os.fspath(path))
        return path


def _human(n):
    """Bytes as the tool prints them (KiB, MiB, GiB)."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def _is_module(obj):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.nn.Module)


def _model_file(model, args, export_kw, progress):
    """(path of the ONNX file, temporary folder to keep or None)."""
    if _is_module(model):
        if args is None:
            raise VplanError("plan: a torch module needs args (its example inputs) to be exported")
        from .exporting import export
        keep = tempfile.TemporaryDirectory(prefix="onnx_vplan_")
        path = os.path.join(keep.name, type(model).__name__ + ".onnx")
        export(model, args, path, progress=progress, **export_kw)
        return path, keep
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), None
    raise VplanError(f"plan: want a torch.nn.Module or the path of an ONNX file, got {type(model).__name__}")


def _loss_spec(loss, path, dims=None, free_dim=None):
    """--loss: 'ce', 'mse' or 'output' name the model's output `logits` where it has one,
    else its first output (`inspect --json`, with the dims bound, free_dim at 1);
    'KIND:NAME' is the tool's own form."""
    if not isinstance(loss, str):
        raise VplanError(f"plan: loss must be a string (ce, mse, output or KIND:OUTPUT), got {loss!r}")
    if ":" in loss or loss not in LOSSES:
        return loss  # the tool names what is wrong with it
    bind = dict(dims) if isinstance(dims, dict) else {}
    if free_dim is not None:
        bind.setdefault(free_dim, 1)
    dim_args = [a for k, v in bind.items() for a in ("--dim", f"{k}={v}")]
    _, out, _ = run(["inspect", path, "--json"] + dim_args, progress=False)
    outputs = json.loads(out).get("outputs") or []
    if not outputs:
        raise VplanError(f"{path}: the model has no output to take a {loss} loss of", 2)
    names = [o["name"] for o in outputs]
    return f"{loss}:{'logits' if 'logits' in names else names[0]}"


def _size(v, what):
    """A size for the tool: an int of bytes, or a string it parses (16GiB, 1.5G)."""
    if isinstance(v, bool):
        raise VplanError(f"plan: {what} must be a size (bytes or a string such as '24GiB'), got {v!r}")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def _options(loss_spec, optimizer, lr, budget, device, precision, remat, auto, tp, lora, offload, dims, trainable,
             freeze, max_tp, extra_args):
    a = ["--loss", loss_spec]
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        lr = repr(float(lr))
    valued = (("--optimizer", optimizer), ("--lr", lr), ("--budget", None if budget is None else _size(budget, "budget")),
              ("--device", device), ("--precision", precision), ("--remat", remat), ("--max-tp", max_tp),
              ("--tp", tp), ("--lora", None if lora is None else _lora_spec(lora)), ("--trainable", trainable),
              ("--freeze", freeze))
    for opt, value in valued:  # the tool checks each value
        if value is not None:
            a += [opt, str(value)]
    a += ["--auto"] * bool(auto) + ["--offload"] * bool(offload)
    if dims:
        if not isinstance(dims, dict):
            raise VplanError(f"plan: dims must be a dict of symbolic dim names to values, got {type(dims).__name__}")
        for k, v in dims.items():
            a += ["--dim", f"{k}={v}"]
    return a + [str(x) for x in extra_args]


def _lora_spec(lora):
    """--lora: the tool's string ('r=8,alpha=16:REGEX'), or a dict {r, alpha, regex}."""
    if isinstance(lora, dict):
        kv = ",".join(f"{k}={v}" for k, v in lora.items() if k != "regex")
        return kv + (f":{lora['regex']}" if lora.get("regex") else "")
    if isinstance(lora, int) and not isinstance(lora, bool):
        return f"r={lora}"
    return str(lora)


def _plan_run(path, opts, keep, progress, desc, batch_dim=None):
    with tempfile.TemporaryDirectory(prefix="onnx_vplan_json_") as tmp:
        jpath = os.path.join(tmp, "plan.json")
        args = ["plan", path] + opts + ["--json", jpath]
        code, stdout, _ = run(args, accept=(EXIT_OK, EXIT_OVER_BUDGET), progress=progress, desc=desc)
        if not os.path.exists(jpath) and os.path.exists(jpath + ".0"):
            jpath += ".0"  # --tp N: one report a rank; rank 0's
        with open(jpath) as f:
            report = json.load(f)
    batch = None
    if batch_dim is not None:
        m = re.search(r"^max %s under the budget: (\d+)" % re.escape(batch_dim), stdout, re.M)
        batch = int(m.group(1)) if m else None
    command = ["onnx-vplan"] + args[:-2]
    return Plan(command, stdout, report, path, keep, code, batch)


def plan(model_or_path, args=None, *, loss="ce", optimizer="adamw", lr=None, budget=None, device="h100",
         precision=None, remat=None, auto=False, tp=None, lora=None, offload=False, dims=None, trainable=None,
         freeze=None, max_tp=None, extra_args=(), dynamic_shapes=None, input_names=None, output_names=None,
         progress=True):
    """Plans the training step of a torch module (exported first with `export`, on `args`)
    or of an ONNX file; returns a Plan.

    loss: 'ce' (cross-entropy of the output `logits`, else of the first output, against an
    int64 input `labels` the tool adds), 'mse', 'output', or the tool's 'KIND:OUTPUT'.  optimizer: sgd, momentum, adam, adamw.
    budget: bytes or a size string ('24GiB').  device: cpu, a100, h100, h200.  precision:
    fp32, bf16, fp16.  remat: none, sqrtn, dp, ilp.  auto: choose the free knobs together
    under the budget (Plan.candidates).  tp: tensor-parallel degree.  lora: 'r=8[,alpha=16]
    [:REGEX]', an int rank, or {r, alpha, regex}.  offload: Adam's state on the host.
    dims: {symbolic dim: value}.  trainable / freeze: regexes of initializer names.
    extra_args: more options for `onnx-vplan plan`, as given.  A plan over the budget is
    returned with fits=False; a failure raises VplanError with the tool's message."""
    export_kw = {"dynamic_shapes": dynamic_shapes, "input_names": input_names, "output_names": output_names}
    path, keep = _model_file(model_or_path, args, export_kw, progress)
    opts = _options(_loss_spec(loss, path, dims), optimizer, lr, budget, device, precision, remat, auto, tp, lora,
                    offload, dims, trainable, freeze, max_tp, extra_args)
    desc = "onnx-vplan plan" + (" --auto" if auto else "")
    return _plan_run(path, opts, keep, progress, desc)


def max_batch(model, make_args=None, *, dim="batch", budget, loss="ce", optimizer="adamw", lr=None, device="h100",
              precision=None, remat=None, auto=False, tp=None, lora=None, offload=False, dims=None, trainable=None,
              freeze=None, max_tp=None, extra_args=(), example_batch=2, input_names=None, output_names=None,
              progress=True):
    """The largest value of the symbolic dim `dim` (a batch size) whose plan fits `budget`:
    `onnx-vplan plan --max-batch DIM`.  Returns the Plan at that value; Plan.batch is it.

    model: a torch module, exported with axis 0 of every tensor argument made the dynamic
    dim `dim`, on make_args(example_batch) (torch.export needs an example of at least 2);
    or the path of an ONNX file whose inputs have that symbolic dim (make_args unused).
    With auto=True the knobs may change with the batch (`--max-batch DIM --auto`).  The
    other arguments are plan's."""
    if _is_module(model):
        if make_args is None:
            raise VplanError("max_batch: a torch module needs make_args(batch) -> its example inputs at that batch")
        ex = make_args(example_batch)
        ex = ex if isinstance(ex, tuple) else (ex,)
        shapes = tuple({0: dim} if hasattr(t, "shape") and len(t.shape) else None for t in ex)
        export_kw = {"dynamic_shapes": shapes, "input_names": input_names, "output_names": output_names}
        path, keep = _model_file(model, ex, export_kw, progress)
    else:
        path, keep = _model_file(model, None, {}, progress)
    opts = _options(_loss_spec(loss, path, dims, str(dim)), optimizer, lr, budget, device, precision, remat, auto, tp,
                    lora, offload, dims, trainable, freeze, max_tp, extra_args)
    opts += ["--max-batch", str(dim)]
    return _plan_run(path, opts, keep, progress, f"onnx-vplan plan --max-batch {dim}", batch_dim=str(dim))
