"""onnx_vplan: a front door from PyTorch to the onnx-vplan training-memory planner.

    import onnx_vplan
    onnx_vplan.export(model, args, "model.onnx")        # trainable as torch trains it
    p = onnx_vplan.plan(model, args, budget="24GiB", device="a100", auto=True)
    print(p.report()); p.arena_bytes, p.fits, p.categories, p.candidates
    onnx_vplan.max_batch(model, lambda b: make_inputs(b), dim="batch", budget="24GiB").batch

The C tool `onnx-vplan` stays the product: this package runs it ($ONNX_VPLAN, else
`onnx-vplan` on PATH) and reads its JSON.  Its failures, and arguments it or this package
refuses, raise VplanError(.message, .exit_code)."""
from .exporting import export
from .planning import Plan, max_batch, plan
from .tool import VplanError, tool_path

__all__ = ["export", "plan", "max_batch", "Plan", "VplanError", "tool_path"]
__version__ = "0.1.0"
