#!/usr/bin/python3
"""The QDQ export (train --qat int8 --save OUT --qdq) in ONNX Runtime.

For models/cnn and models/gpt (and the GPT with learned scales, int8:lsq): 20 AdamW
steps of QAT on a fixed batch, saved twice from
the same (deterministic) run: as a QDQ model and with the same trained weights in float.
Then, on ONNX Runtime's CPU provider:
  1. the QDQ model passes onnx.checker and loads; its weights are int8 initializers
     behind DequantizeLinear (per output channel: the axis attribute), the CNN's biases
     int32; every QuantizeLinear has its DequantizeLinear;
  2. its output on the training batch equals our runtime's on the same QDQ model
     (onnx-vplan eval) within one quantisation step of the output scale (the output's
     range / 255);
  3. its output equals the training step's own fake-quantised forward (train --json's
     qdq_reference) within that step where the step's forward is the inference forward:
     the GPT.  The CNN's BatchNorm normalises with the batch's statistics in training
     and the running ones in the exported model, so its difference is printed only;
  4. top-1 agreement with the float model of the same weights on a held batch of fresh
     random inputs is printed, and must be at least 90% with observed ranges (LSQ's is
     printed only: 20 steps from scratch with learned scales fit the weights to their own
     grids, and the float model of those weights is not what that model approximates).
Checks run ONNX Runtime at ORT_ENABLE_BASIC (Q/DQ as ONNX defines them); the numbers
with its fused int8 kernels (ORT_ENABLE_ALL) are printed beside them.
Exit 77 (ctest's skip) when onnxruntime or onnx is missing.

usage: qdq_ort.py ONNX_VPLAN SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

TOOL, SRC = sys.argv[1], sys.argv[2]
failures = 0


def check(ok, msg):
    global failures
    print("%s %s" % ("PASS" if ok else "FAIL", msg))
    failures += not ok


def run(*args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise SystemExit("FAIL %s exited %d: %s" % (" ".join(args), r.returncode, r.stdout[-2000:]))
    return r.stdout


def save_pb(arr, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(arr).SerializeToString())


def session(path, fuse=False):
    """ONNX Runtime at ORT_ENABLE_BASIC runs QuantizeLinear and DequantizeLinear as ONNX
    defines them; at ORT_ENABLE_ALL it fuses Q/DQ around Conv and MatMul into its int8
    kernels (QLinearConv, MatMulIntegerToFloat), which round and saturate on their own."""
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if fuse else
                                   ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def case(model_name, tmp, data, feed_name, feed, held, extra, scheme="int8"):
    model = os.path.join(SRC, "models", model_name, "model.onnx")
    name = model_name if scheme == "int8" else "%s %s" % (model_name, scheme)
    stem = os.path.join(tmp, name.replace(" ", "_").replace(":", "_"))
    q, f, js = (stem + s for s in (".int8.onnx", ".fp32.onnx", ".json"))
    common = ["train", model, "--dim", "batch=4", "--loss", "ce:logits", "--optimizer", "adamw", "--steps", "20",
              "--data", data, "--qat", scheme] + extra
    run(TOOL, *common, "--save", q, "--qdq", "--json", js)
    run(TOOL, *common, "--save", f)

    m = onnx.load(q)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    n_q, n_dq = ops.count("QuantizeLinear"), ops.count("DequantizeLinear")
    inits = {t.name: t for t in m.graph.initializer}
    int8_w = [t for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT8 and t.name.endswith("_quantized")]
    int32_b = [t for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT32 and t.name.endswith("_quantized")]
    per_axis = sum(1 for n in m.graph.node if n.op_type == "DequantizeLinear" and any(a.name == "axis" for a in n.attribute))
    check(n_q > 0 and int8_w and per_axis >= len(int8_w) and (model_name != "cnn" or int32_b),
          "%s: QDQ model valid, %d QuantizeLinear, %d DequantizeLinear, %d int8 weights, %d per-channel, %d int32 biases, "
          "opset %d" % (name, n_q, n_dq, len(int8_w), per_axis, len(int32_b),
                        max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))))
    del inits

    y_ort = session(q).run(None, {feed_name: feed})[0]
    out_dir = stem + "_eval"
    os.makedirs(out_dir, exist_ok=True)
    run(TOOL, "eval", q, "--dim", "batch=4", "--input", "%s=%s" % (feed_name, os.path.join(data, feed_name + ".pb")),
        "--output-dir", out_dir)
    y_ours = numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "logits.pb")))
    step = float(y_ours.max() - y_ours.min()) / 255
    d = float(np.abs(y_ort - y_ours).max())
    check(d <= step, "%s: ONNX Runtime vs onnx-vplan on the QDQ model: max |difference| %.3g, one output step %.3g" %
          (name, d, step))
    d_fused = float(np.abs(session(q, fuse=True).run(None, {feed_name: feed})[0] - y_ours).max())
    print("info %s: ONNX Runtime with its int8 kernels (ORT_ENABLE_ALL) vs onnx-vplan: max |difference| %.3g (%.1f steps)" %
          (name, d_fused, d_fused / step))

    ref = json.load(open(js))["qdq_reference"]
    y_fq = np.array(ref["values"], dtype=np.float32).reshape(ref["shape"])
    d = float(np.abs(y_ort - y_fq).max())
    step = float(y_fq.max() - y_fq.min()) / 255
    line = "%s: ONNX Runtime vs the training step's fake-quantised forward: max |difference| %.3g, one output step %.3g" % (
        name, d, step)
    if model_name == "cnn":
        print("info %s (BatchNorm: batch statistics in training, running statistics exported)" % line)
    else:
        check(d <= step, line)

    yf = session(f).run(None, {feed_name: held})[0]
    agree = [float((session(q, fuse).run(None, {feed_name: held})[0].argmax(-1) == yf.argmax(-1)).mean())
             for fuse in (False, True)]
    line = "%s: top-1 agreement with the float model of the same weights on a held batch of %d: %.1f%% " \
           "(%.1f%% with ONNX Runtime's int8 kernels)" % (name, yf.argmax(-1).size, 100 * agree[0], 100 * agree[1])
    if scheme == "int8":
        check(agree[0] >= 0.9, line)
    else:  # learned scales trained from scratch: the weights fit their own grids, not the float model
        print("info " + line)


def main():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        cnn_data = os.path.join(SRC, "models", "cnn", "fixtures")
        x = numpy_helper.to_array(onnx.load_tensor(os.path.join(cnn_data, "x.pb")))
        case("cnn", tmp, cnn_data, "x", x, rng.standard_normal((256, 3, 16, 16)).astype(np.float32), [])
        gdata = os.path.join(tmp, "gpt_data")
        os.makedirs(gdata)
        tokens = rng.integers(0, 64, (4, 16)).astype(np.int64)
        save_pb(tokens, os.path.join(gdata, "tokens.pb"))
        save_pb(np.roll(tokens, -1, axis=1), os.path.join(gdata, "labels.pb"))
        held = rng.integers(0, 64, (32, 16)).astype(np.int64)
        case("gpt", tmp, gdata, "tokens", tokens, held, ["--freeze", "^causal_mask$"])
        case("gpt", tmp, gdata, "tokens", tokens, held, ["--freeze", "^causal_mask$"], "int8:lsq")
    print("%s" % ("all passed" if not failures else "%d failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
