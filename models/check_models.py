#!/usr/bin/python3
"""Independent check of models/*/model.onnx against fixtures/output.pb.

onnx 1.12 has no reference evaluator and onnxruntime is not installed, so this is a tiny
float64 numpy interpreter for exactly the ops these models use. It runs every graph on
fixtures/x.pb and compares with the eval-mode torch output. make_models.py calls it; it
also runs alone:  /usr/bin/python3 models/check_models.py
"""

import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
_erf = np.vectorize(math.erf)


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _conv(x, w, b, strides, pads, group, dilations):
    assert group == 1 and all(d == 1 for d in dilations)
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    sh, sw = strides
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - kh) // sh + 1
    ow = (x.shape[3] - kw) // sw + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
    y = np.einsum("nckloq,mckl->nmoq", cols, w)
    if b is not None:
        y = y + b.reshape(1, m, 1, 1)
    return y


def run(model, feeds):
    env = {t.name: numpy_helper.to_array(t).astype(np.float64)
           if numpy_helper.to_array(t).dtype == np.float32 else numpy_helper.to_array(t)
           for t in model.graph.initializer}
    env.update(feeds)
    for node in model.graph.node:
        a = _attrs(node)
        i = [env[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Constant":
            v = numpy_helper.to_array(a["value"])
            out = [v.astype(np.float64) if v.dtype == np.float32 else v]
        elif op == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
            out = [y]
        elif op == "MatMul":
            out = [np.matmul(i[0], i[1])]
        elif op == "Relu":
            out = [np.maximum(i[0], 0)]
        elif op in ("Add", "Sub", "Mul", "Div", "Pow"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                 "Div": np.divide, "Pow": np.power}[op]
            out = [f(i[0], i[1])]
        elif op == "Sqrt":
            out = [np.sqrt(i[0])]
        elif op == "Erf":
            out = [_erf(i[0])]
        elif op == "Softmax":
            ax = a.get("axis", -1)
            e = np.exp(i[0] - i[0].max(axis=ax, keepdims=True))
            out = [e / e.sum(axis=ax, keepdims=True)]
        elif op == "ReduceMean":
            out = [i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))]
        elif op == "LayerNormalization":
            ax = a.get("axis", -1)
            axes = tuple(range(ax % i[0].ndim, i[0].ndim))
            mu = i[0].mean(axis=axes, keepdims=True)
            var = ((i[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1]
            out = [y + i[2] if len(i) > 2 and i[2] is not None else y]
        elif op == "BatchNormalization":
            assert a.get("training_mode", 0) == 0 and len(node.output) == 1
            x, s, b, m, v = i
            sh = (1, -1) + (1,) * (x.ndim - 2)
            out = [(x - m.reshape(sh)) / np.sqrt(v.reshape(sh) + a.get("epsilon", 1e-5))
                   * s.reshape(sh) + b.reshape(sh)]
        elif op == "Conv":
            k = i[1].ndim - 2
            out = [_conv(i[0], i[1], i[2] if len(i) > 2 else None,
                         a.get("strides", [1] * k), a.get("pads", [0] * 2 * k),
                         a.get("group", 1), a.get("dilations", [1] * k))]
        elif op == "GlobalAveragePool":
            out = [i[0].mean(axis=tuple(range(2, i[0].ndim)), keepdims=True)]
        elif op == "Flatten":
            ax = a.get("axis", 1)
            out = [i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)]
        elif op == "Gather":
            out = [np.take(i[0], i[1], axis=a.get("axis", 0))]
        elif op == "Shape":
            out = [np.array(i[0].shape, dtype=np.int64)]
        elif op == "Unsqueeze":
            out = [np.expand_dims(i[0], tuple(int(d) for d in i[1]))]
        elif op == "Concat":
            out = [np.concatenate(i, axis=a["axis"])]
        elif op == "Reshape":
            shape = [d if d != 0 else i[0].shape[k] for k, d in enumerate(i[1])]
            out = [i[0].reshape(shape)]
        elif op == "Transpose":
            out = [np.transpose(i[0], a.get("perm"))]
        elif op == "Split":
            ax = a.get("axis", 0)
            idx = np.cumsum(i[1])[:-1]
            out = np.split(i[0], idx, axis=ax)
        else:
            raise NotImplementedError(op)
        for n, v in zip(node.output, out):
            env[n] = v
    return [env[o.name] for o in model.graph.output]


def check(name, rtol=1e-4, atol=1e-5):
    d = os.path.join(HERE, name)
    model = onnx.load(os.path.join(d, "model.onnx"))
    x = onnx.load_tensor(os.path.join(d, "fixtures", "x.pb"))
    xa = numpy_helper.to_array(x)
    if xa.dtype == np.float32:
        xa = xa.astype(np.float64)
    want = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "fixtures", "output.pb")))
    got = run(model, {x.name: xa})[0]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    err = float(np.max(np.abs(got - want)))
    ok = np.allclose(got, want, rtol=rtol, atol=atol)
    if not any(n.op_type == "BatchNormalization" for n in model.graph.node):
        # no train/eval difference: the train-mode loss fixture is the CE of this output
        labels = numpy_helper.to_array(
            onnx.load_tensor(os.path.join(d, "fixtures", "labels.pb"))).reshape(-1)
        z = got.reshape(-1, got.shape[-1])
        zmax = z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(z - zmax).sum(axis=1)) + zmax[:, 0]
        ce = float(np.mean(lse - z[np.arange(len(labels)), labels]))
        loss = float(numpy_helper.to_array(
            onnx.load_tensor(os.path.join(d, "fixtures", "loss.pb"))))
        ok = ok and abs(ce - loss) < 1e-5
    return ok, err


def main():
    names = sorted(n for n in os.listdir(HERE)
                   if os.path.isfile(os.path.join(HERE, n, "model.onnx")))
    bad = 0
    for n in names:
        ok, err = check(n)
        print(f"numpy check {n:<20} max|onnx - torch| = {err:.2e} {'ok' if ok else 'MISMATCH'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
