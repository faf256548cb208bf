#!/usr/bin/python3
"""Expected outputs of the train family's ops (gradient ops, BatchNormInternal, optimizer
updates), computed by PyTorch, for tests/test_train_ops.c.

Gradients come from torch.autograd in float64 (float32 variants too) on small random
inputs; optimizer updates are three steps of torch.optim (SGD, SGD with momentum and
weight decay, Adam with weight decay, AdamW) on a float32 parameter with given
gradients, each step stored as its own case starting from torch's state.

Each case is a folder tests/data/train_ops/<case>/ holding
  case.txt    "op NAME DOMAIN", "attr NAME i|f|s|ints VALUE...", "declare K" when
              the test must give output K its expected shape before inference (the
              pool gradients, whose dX shape a gradient builder supplies), and
              "expect STATUS" for a case that must be refused (unsupported, invalid)
              or fail while running (runtime)
  in_K.pb     input K as a TensorProto (absent: the optional input is omitted)
  out_K.pb    expected output K (absent: the optional output is omitted)

usage: /usr/bin/python3 tools/scripts/make_train_op_fixtures.py   (torch 1.13, onnx)
"""
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "train_ops")
MS = "com.microsoft"

torch.manual_seed(1234)
np.random.seed(1234)


def np_of(t):
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def write_case(name, op, domain, inputs, outputs, attrs=None, declare=(), expect=None):
    """inputs/outputs: lists of tensors or None (omitted).  expect: the status the case
    must fail with (unsupported, invalid, runtime); its outputs then only shape the node."""
    d = os.path.join(ROOT, name)
    os.makedirs(d, exist_ok=True)
    lines = ["op %s %s" % (op, domain)]
    for key, val in (attrs or {}).items():
        if isinstance(val, str):
            lines.append("attr %s s %s" % (key, val))
        elif isinstance(val, (list, tuple)):
            lines.append("attr %s ints %s" % (key, " ".join(str(int(v)) for v in val)))
        elif isinstance(val, float):
            lines.append("attr %s f %r" % (key, val))
        else:
            lines.append("attr %s i %d" % (key, int(val)))
    for k in declare:
        lines.append("declare %d" % k)
    if expect:
        lines.append("expect %s" % expect)
    with open(os.path.join(d, "case.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for kind, tensors in (("in", inputs), ("out", outputs)):
        for k, t in enumerate(tensors):
            if t is None:
                continue
            proto = numpy_helper.from_array(np.array(np_of(t), order="C"), "%s_%d" % (kind, k))  # 0-d stays 0-d
            with open(os.path.join(d, "%s_%d.pb" % (kind, k)), "wb") as f:
                f.write(proto.SerializeToString())


def rand(*shape, dtype=torch.float64, grad=False):
    return torch.randn(tuple(shape), dtype=dtype).requires_grad_(grad)


def grads_of(out, dy, wrt):
    return torch.autograd.grad(out, wrt, dy, allow_unused=True)


# ---- activations ----

def activations():
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        x = rand(3, 4, 5, dtype=dt, grad=True)
        dy = rand(3, 4, 5, dtype=dt)
        (dx,) = grads_of(F.relu(x), dy, x)
        write_case("relu_grad_" + tag, "ReluGrad", MS, [dy, x], [dx])
        (dx,) = grads_of(F.gelu(x), dy, x)
        write_case("gelu_grad_" + tag, "GeluGrad", MS, [dy, x], [dx])
    x = rand(4, 6, grad=True)
    dy = rand(4, 6)
    (dx,) = grads_of(F.gelu(x, approximate="tanh"), dy, x)
    write_case("fast_gelu_grad_f64", "FastGeluGrad", MS, [dy, x], [dx])
    y = torch.sigmoid(x)
    (dx,) = grads_of(y, dy, x)
    write_case("sigmoid_grad_f64", "SigmoidGrad", MS, [dy, y], [dx])
    y = torch.tanh(x)
    (dx,) = grads_of(y, dy, x)
    write_case("tanh_grad_f64", "TanhGrad", MS, [dy, y], [dx])


def output_based():
    """The activation gradients that read the forward output Y instead of X (ReluGrad
    and LeakyReluGrad as ONNX Runtime builds them).  Drawn after every other case, so
    adding them left the earlier fixtures byte for byte as they were."""
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        x = rand(3, 4, 5, dtype=dt, grad=True)
        dy = rand(3, 4, 5, dtype=dt)
        y = F.relu(x)
        (dx,) = grads_of(y, dy, x)
        write_case("relu_grad_of_y_" + tag, "ReluGrad", MS, [dy, y], [dx])
        for alpha in (0.1, 0.0):
            y = F.leaky_relu(x, alpha)
            (dx,) = grads_of(y, dy, x)
            write_case("leaky_relu_grad_%s_alpha%g" % (tag, alpha), "LeakyReluGrad", MS, [dy, y], [dx],
                       {"alpha": alpha})
    x = rand(2, 3, dtype=torch.float16).double().requires_grad_()
    dy = rand(2, 3, dtype=torch.float16)
    y = F.leaky_relu(x, 0.2)
    (dx,) = grads_of(y, dy.double(), x)
    write_case("leaky_relu_grad_f16", "LeakyReluGrad", MS, [dy, y.half()], [dx.half()], {"alpha": 0.2})


def fused_matmuls():
    """com.microsoft.FusedMatMul (alpha transA(A) transB(B)), which MatMul's gradient
    emits for batched products; drawn last, like output_based()."""
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        a, b = rand(2, 3, 4, 5, dtype=dt), rand(2, 3, 6, 5, dtype=dt)
        write_case("fused_matmul_tb_" + tag, "FusedMatMul", MS, [a, b], [a @ b.transpose(-1, -2)], {"transB": 1})
    a, b = rand(2, 1, 5, 4), rand(3, 5, 6)
    write_case("fused_matmul_ta_bcast_alpha", "FusedMatMul", MS, [a, b], [0.5 * (a.transpose(-1, -2) @ b)],
               {"transA": 1, "alpha": 0.5})
    a, b = rand(4, 3), rand(2, 5, 4)
    write_case("fused_matmul_ta_tb", "FusedMatMul", MS, [a, b], [a.t() @ b.transpose(-1, -2)],
               {"transA": 1, "transB": 1})
    a, b = rand(3, 7, 4), rand(6, 4)
    write_case("fused_matmul_shared_b", "FusedMatMul", MS, [a, b], [a @ b.t()], {"transB": 1})
    write_case("err_fused_matmul_trans_batch", "FusedMatMul", MS, [rand(2, 3, 4), rand(2, 4, 5)], [rand(2, 3, 5)],
               {"transBatchA": 1}, expect="unsupported")


def softmaxes():
    x = rand(2, 3, 4, grad=True)
    dy = rand(2, 3, 4)
    for axis in (-1, 1):
        y = torch.softmax(x, axis)
        (dx,) = grads_of(y, dy, x)
        write_case("softmax_grad13_axis%d" % axis, "SoftmaxGrad_13", MS, [dy, y], [dx], {"axis": axis})
        y = torch.log_softmax(x, axis)
        (dx,) = grads_of(y, dy, x)
        write_case("log_softmax_grad13_axis%d" % axis, "LogSoftmaxGrad_13", MS, [dy, y], [dx], {"axis": axis})
    # opset < 13: softmax over the 2-D coercion [2, 12] at axis 1
    flat = x.reshape(2, 12)
    y = torch.softmax(flat, 1).reshape(2, 3, 4)
    (dx,) = grads_of(y, dy, x)
    write_case("softmax_grad_coerced", "SoftmaxGrad", MS, [dy, y], [dx])
    y = torch.log_softmax(flat, 1).reshape(2, 3, 4)
    (dx,) = grads_of(y, dy, x)
    write_case("log_softmax_grad_coerced", "LogSoftmaxGrad", MS, [dy, y], [dx])
    x32 = rand(5, 7, dtype=torch.float32, grad=True)
    dy32 = rand(5, 7, dtype=torch.float32)
    y = torch.softmax(x32, -1)
    (dx,) = grads_of(y, dy32, x32)
    write_case("softmax_grad13_f32", "SoftmaxGrad_13", MS, [dy32, y], [dx])


def dropout():
    dy = rand(4, 5)
    mask = torch.rand(4, 5) > 0.3
    ratio = torch.tensor(0.3, dtype=torch.float32)
    write_case("dropout_grad_ratio", "DropoutGrad", MS, [dy, mask, ratio, torch.tensor(True)], [dy * mask / (1 - ratio.double())])
    dy32 = rand(6, dtype=torch.float32)
    mask = torch.rand(6) > 0.5
    write_case("dropout_grad_default_f32", "DropoutGrad", MS, [dy32, mask], [dy32 * mask / 0.5])
    write_case("dropout_grad_inference", "DropoutGrad", MS, [dy, torch.ones(4, 5, dtype=torch.bool), ratio,
                                                              torch.tensor(False)], [dy])


# ---- normalisation ----

def layernorm():
    eps = 1e-5
    for shape, axis, dt, tag in (((3, 8), -1, torch.float64, "f64"), ((2, 3, 4), 1, torch.float64, "axis1"),
                                 ((4, 6), 1, torch.float32, "f32")):
        x = rand(*shape, dtype=dt, grad=True)
        norm = shape[axis % len(shape):]
        w = rand(*norm, dtype=dt, grad=True)
        b = rand(*norm, dtype=dt, grad=True)
        dy = rand(*shape, dtype=dt)
        y = F.layer_norm(x, norm, w, b, eps)
        dx, dw, db = grads_of(y, dy, (x, w, b))
        dims = tuple(range(axis % len(shape), len(shape)))
        xd = x.detach().double()
        mean = xd.mean(dims, keepdim=True)
        inv = 1 / torch.sqrt(xd.var(dims, unbiased=False, keepdim=True) + eps)
        stat_dt = torch.float64 if dt == torch.float64 else torch.float32
        write_case("layernorm_grad_" + tag, "LayerNormalizationGrad", MS,
                   [dy, x, w, mean.to(stat_dt), inv.to(stat_dt)], [dx, dw, db], {"axis": axis, "epsilon": eps})


def batchnorm():
    eps = 1e-5
    for shape, dt, tag in (((4, 3, 5, 5), torch.float64, "f64"), ((6, 2, 7), torch.float64, "3d"),
                           ((3, 4, 3, 3), torch.float32, "f32")):
        c = shape[1]
        x = rand(*shape, dtype=dt)
        w, b = rand(c, dtype=dt), rand(c, dtype=dt)
        rm, rv = rand(c, dtype=dt), torch.rand(c, dtype=dt) + 0.5
        torch_momentum = 0.2
        new_rm, new_rv = rm.clone(), rv.clone()
        y = F.batch_norm(x, new_rm, new_rv, w, b, training=True, momentum=torch_momentum, eps=eps)
        axes = [0] + list(range(2, len(shape)))
        xd = x.double()
        mean = xd.mean(axes)
        inv = 1 / torch.sqrt(xd.var(axes, unbiased=False) + eps)
        write_case("bn_internal_" + tag, "BatchNormInternal", MS, [x, w, b, rm, rv],
                   [y, new_rm, new_rv, mean.to(dt), inv.to(dt)],
                   {"epsilon": eps, "momentum": 1 - torch_momentum, "training_mode": 1})
        # the gradient through batch statistics
        xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
        dy = rand(*shape, dtype=dt)
        y = F.batch_norm(xg, None, None, wg, bg, training=True, eps=eps)
        dx, dw, db = grads_of(y, dy, (xg, wg, bg))
        write_case("bn_grad_" + tag, "BatchNormalizationGrad", MS, [dy, x, w, mean.to(dt), inv.to(dt)],
                   [dx, dw, db], {"epsilon": eps})
    x = rand(2, 3, 4)
    w, b, rm, rv = rand(3), rand(3), rand(3), torch.rand(3, dtype=torch.float64) + 0.5
    y = F.batch_norm(x, rm, rv, w, b, training=False, eps=eps)
    write_case("bn_internal_inference", "BatchNormInternal", MS, [x, w, b, rm, rv],
               [y, rm, rv, rm, 1 / torch.sqrt(rv + eps)], {"epsilon": eps, "momentum": 0.9, "training_mode": 0})


# ---- convolution and pooling ----

def conv_case(name, x_shape, w_shape, stride=None, pads=None, dilation=None, group=1, dt=torch.float64,
              outputs=(True, True, True)):
    n_sp = len(x_shape) - 2
    stride = stride or [1] * n_sp
    pads = pads or [0] * (2 * n_sp)
    dilation = dilation or [1] * n_sp
    x = rand(*x_shape, dtype=dt, grad=True)
    w = rand(*w_shape, dtype=dt, grad=True)
    b = rand(w_shape[0], dtype=dt, grad=True)
    torch_pad = []
    for d in reversed(range(n_sp)):  # F.pad lists the last axis first
        torch_pad += [pads[d], pads[n_sp + d]]
    xp = F.pad(x, torch_pad)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n_sp]
    y = conv(xp, w, b, stride=stride, dilation=dilation, groups=group)
    dy = rand(*y.shape, dtype=dt)
    dx, dw, db = grads_of(y, dy, (x, w, b))
    outs = [g if keep else None for g, keep in zip((dx, dw, db), outputs)]
    attrs = {"strides": stride, "pads": pads, "dilations": dilation, "group": group,
             "kernel_shape": list(w_shape[2:])}
    write_case(name, "ConvGrad", MS, [dy, x, w], outs, attrs)


def convs():
    conv_case("conv_grad_3x3_pad1", (2, 3, 6, 6), (4, 3, 3, 3), pads=[1, 1, 1, 1])
    conv_case("conv_grad_stride2_asym", (2, 3, 7, 6), (4, 3, 3, 2), stride=[2, 2], pads=[1, 0, 2, 1])
    conv_case("conv_grad_dilation", (1, 2, 8, 8), (3, 2, 3, 3), dilation=[2, 2], pads=[2, 2, 2, 2])
    conv_case("conv_grad_groups", (2, 4, 5, 5), (6, 2, 3, 3), group=2, pads=[1, 1, 1, 1])
    conv_case("conv_grad_depthwise", (2, 3, 5, 5), (3, 1, 3, 3), group=3, stride=[2, 1], pads=[1, 1, 1, 1])
    conv_case("conv_grad_1x1", (2, 5, 4, 4), (3, 5, 1, 1))
    conv_case("conv_grad_1d", (2, 3, 9), (4, 3, 3), stride=[2], pads=[1, 1])
    conv_case("conv_grad_3d", (1, 2, 4, 4, 4), (2, 2, 2, 2, 2), pads=[1, 0, 0, 0, 1, 0])
    conv_case("conv_grad_f32", (2, 3, 6, 6), (4, 3, 3, 3), stride=[2, 2], pads=[1, 1, 1, 1], dt=torch.float32)
    conv_case("conv_grad_dw_db_only", (2, 3, 5, 5), (2, 3, 3, 3), pads=[1, 1, 1, 1], outputs=(False, True, True))
    conv_case("conv_grad_dx_only", (2, 3, 5, 5), (2, 3, 3, 3), stride=[2, 2], outputs=(True, False, False))


def pools():
    # MaxPoolGrad: ONNX's Indices count over the whole tensor, torch's within a plane
    for name, shape, k, s, p in (("maxpool_grad_2x2", (2, 3, 6, 6), 2, 2, 0),
                                 ("maxpool_grad_overlap", (1, 2, 5, 5), 3, 1, 1)):
        x = rand(*shape, grad=True)
        y, idx = F.max_pool2d(x, k, s, p, return_indices=True)
        dy = rand(*y.shape)
        (dx,) = grads_of(y, dy, x)
        plane = shape[2] * shape[3]
        offsets = torch.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], 1, 1) * plane
        write_case(name, "MaxPoolGrad", MS, [dy, idx + offsets], [dx], {"kernel_shape": [k, k], "strides": [s, s],
                                                                       "pads": [p] * 4}, declare=[0])
    for name, shape, k, s, p, incl, ceil, declare in (
            ("avgpool_grad_k3s2p1", (2, 2, 7, 7), 3, 2, 1, 0, False, [0]),
            ("avgpool_grad_include_pad", (2, 2, 6, 6), 3, 2, 1, 1, False, [0]),
            ("avgpool_grad_ceil", (1, 2, 6, 6), 3, 2, 1, 1, True, [0]),
            ("avgpool_grad_stride1", (1, 3, 5, 5), 3, 1, 1, 0, False, [])):
        x = rand(*shape, grad=True)
        y = F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=bool(incl))
        dy = rand(*y.shape)
        (dx,) = grads_of(y, dy, x)
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "count_include_pad": incl}
        if ceil:
            attrs["ceil_mode"] = 1
        write_case(name, "AveragePoolGrad", MS, [dy], [dx], attrs, declare=declare)
    x = rand(2, 3, 9, grad=True)
    y = F.avg_pool1d(x, 3, 2)
    dy = rand(*y.shape)
    (dx,) = grads_of(y, dy, x)
    write_case("avgpool_grad_1d_onnx_domain", "AveragePoolGrad", "", [dy], [dx],
               {"kernel_shape": [3], "strides": [2]}, declare=[0])


# ---- indexing and loss ----

def gathers():
    x = rand(5, 3, grad=True)
    idx = torch.tensor([[0, 4, -1], [2, 0, 0]])
    y = x.index_select(0, (idx % 5).flatten()).reshape(2, 3, 3)
    dy = rand(2, 3, 3)
    (dx,) = grads_of(y, dy, x)
    write_case("gather_grad_axis0_dup_neg", "GatherGrad", MS, [torch.tensor([5, 3]), idx, dy], [dx], {"axis": 0})
    x = rand(2, 6, 3, grad=True)
    idx = torch.tensor([5, 1, 1, -6], dtype=torch.int32)
    y = x.index_select(1, (idx.long() % 6))
    dy = rand(*y.shape)
    (dx,) = grads_of(y, dy, x)
    write_case("gather_grad_axis1_int32", "GatherGrad", MS, [torch.tensor([2, 6, 3]), idx, dy], [dx], {"axis": 1})
    w = rand(7, 4, dtype=torch.float32, grad=True)
    tokens = torch.tensor([[1, 3, 3], [6, 0, 1]])
    y = F.embedding(tokens, w)
    dy = rand(*y.shape, dtype=torch.float32)
    (dw,) = grads_of(y, dy, w)
    write_case("gather_grad_embedding_f32", "GatherGrad", MS, [torch.tensor([7, 4]), tokens, dy], [dw], {"axis": 0})


def sce_case(name, logits, label, reduction, weight=None, ignore=None, dy=None, bias=None, write_ignore=True):
    logits = logits.clone().requires_grad_()
    kw = {"reduction": reduction}
    if weight is not None:
        kw["weight"] = weight
    if ignore is not None:
        kw["ignore_index"] = ignore
    loss = F.cross_entropy(logits, label, **kw)
    if dy is None:
        dy = rand(*loss.shape, dtype=logits.dtype)
    (dl,) = grads_of(loss, dy, logits)
    if bias is not None:
        dl = dl + bias
    attrs = {"reduction": reduction}
    if ignore is not None and write_ignore:
        attrs["ignore_index"] = ignore
    log_prob = F.log_softmax(logits.detach(), 1)
    write_case(name, "SoftmaxCrossEntropyLossGrad", MS, [dy, log_prob, label, weight, bias], [dl], attrs)


def sces():
    label = torch.tensor([0, 3, 1, 3, 2])
    sce_case("sce_grad_mean", rand(5, 4), label, "mean")
    sce_case("sce_grad_mean_weight_ignore", rand(5, 4), label, "mean", weight=torch.rand(4, dtype=torch.float64) + 0.1,
             ignore=3)
    sce_case("sce_grad_sum_ignore", rand(5, 4), label, "sum", ignore=1)
    sce_case("sce_grad_none_nd", rand(2, 4, 3), torch.tensor([[0, 1, 3], [2, 2, -100]]), "none", ignore=-100)
    sce_case("sce_grad_mean_f32", rand(6, 5, dtype=torch.float32), torch.tensor([4, 0, 1, 1, 2, 3]), "mean",
             weight=torch.rand(5) + 0.1)
    sce_case("sce_grad_bias", rand(3, 4), torch.tensor([1, 0, 3]), "mean", bias=rand(3, 4))
    # without the attribute ONNX Runtime's kernel ignores label -1
    sce_case("sce_grad_default_ignore", rand(4, 3), torch.tensor([2, -1, 0, 1]), "mean", ignore=-1, write_ignore=False)


def accumulators():
    buf, val = rand(3, 4), rand(3, 4)
    write_case("inplace_accumulator_v2_add", "InPlaceAccumulatorV2", MS, [buf, val, torch.tensor([False])],
               [torch.tensor([True]), buf + val])
    write_case("inplace_accumulator_v2_overwrite", "InPlaceAccumulatorV2", MS, [buf, val, torch.tensor([True])],
               [torch.tensor([True]), val])
    write_case("zero_gradient", "ZeroGradient", MS, [buf, torch.tensor(True)], [torch.zeros(3, 4, dtype=torch.float64)])


# ---- optimizers: 3 steps of torch.optim on a float32 parameter ----

def optimizer_cases(name, make, op, attrs, state_keys, dt=torch.float32, steps=3):
    w0 = torch.randn(4, 5, dtype=dt)
    p = torch.nn.Parameter(w0.clone())
    opt = make([p])
    for step in range(1, steps + 1):
        g = torch.randn(4, 5, dtype=dt)
        st = opt.state[p]
        before = [p.detach().clone(), g.clone()]
        for key in state_keys:
            before.append(st[key].clone() if key in st else torch.zeros_like(p.detach()))
        if op == "Adam":
            before.append(st["step"].clone() if "step" in st else torch.tensor(0.0))
        p.grad = g.clone()
        opt.step()
        st = opt.state[p]
        after = [p.detach().clone()] + [st[key].clone() for key in state_keys]
        if op == "Adam":
            after.append(st["step"].clone())
        write_case("%s_step%d" % (name, step), op, "vplan", before, after, attrs)


def optimizers():
    optimizer_cases("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False), "SGD",
                    {"lr": 0.1, "weight_decay": 0.0}, [])
    optimizer_cases("sgd_wd", lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=0.01, foreach=False), "SGD",
                    {"lr": 0.05, "weight_decay": 0.01}, [])
    optimizer_cases("momentum", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=0.01,
                                                           foreach=False),
                    "Momentum", {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.01}, ["momentum_buffer"])
    adam_attrs = {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
    optimizer_cases("adam", lambda ps: torch.optim.Adam(ps, lr=0.001, weight_decay=0.01, foreach=False), "Adam",
                    dict(adam_attrs, decoupled=0), ["exp_avg", "exp_avg_sq"])
    optimizer_cases("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.001, weight_decay=0.01, foreach=False), "Adam",
                    dict(adam_attrs, decoupled=1), ["exp_avg", "exp_avg_sq"])
    optimizer_cases("adam_f64", lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                                            foreach=False),
                    "Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.0,
                             "decoupled": 0}, ["exp_avg", "exp_avg_sq"], dt=torch.float64, steps=2)


# ---- half precision: computed in float32 and rounded, compared within 1e-2 ----

def half_precision():
    h = torch.float16
    x = rand(3, 8).to(h)
    dy = rand(3, 8).to(h)
    xd = x.double().requires_grad_()
    (dx,) = grads_of(F.gelu(xd), dy.double(), xd)
    write_case("gelu_grad_f16", "GeluGrad", MS, [dy, x], [dx.to(h)])
    x = rand(2, 3, 5, 5).to(h)
    w = rand(4, 3, 3, 3).to(h)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(xd, wd, padding=1)
    dy = rand(*y.shape).to(h)
    dx, dw = grads_of(y, dy.double(), (xd, wd))
    write_case("conv_grad_f16", "ConvGrad", MS, [dy, x, w], [dx.to(h), dw.to(h)],
               {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]})


# ---- refusals and runtime errors ----

def errors():
    dy, idx = rand(1, 1, 2, 2), torch.tensor([[[[0, 1], [2, 3]]]])
    write_case("err_maxpool_grad_unknown_shape", "MaxPoolGrad", MS, [dy, idx], [rand(1, 1, 4, 4)],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, expect="unsupported")
    write_case("err_maxpool_grad_storage_order", "MaxPoolGrad", MS, [dy, idx], [rand(1, 1, 4, 4)],
               {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}, declare=[0], expect="unsupported")
    write_case("err_maxpool_grad_index_range", "MaxPoolGrad", MS, [dy, idx * 9], [rand(1, 1, 4, 4)],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, declare=[0], expect="runtime")
    write_case("err_maxpool_grad_declared_mismatch", "MaxPoolGrad", MS, [dy, idx], [rand(1, 1, 6, 6)],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, declare=[0], expect="invalid")
    write_case("err_avgpool_grad_ambiguous", "AveragePoolGrad", MS, [dy], [rand(1, 1, 4, 4)],
               {"kernel_shape": [2, 2], "strides": [2, 2]}, expect="unsupported")
    write_case("err_gather_grad_index_range", "GatherGrad", MS, [torch.tensor([5, 3]), torch.tensor([1, 5]),
                                                                 rand(2, 3)], [rand(5, 3)], expect="runtime")
    write_case("err_sce_grad_label_range", "SoftmaxCrossEntropyLossGrad", MS,
               [rand(), F.log_softmax(rand(2, 4), 1), torch.tensor([1, 4])], [rand(2, 4)], expect="runtime")
    write_case("err_sce_grad_reduction", "SoftmaxCrossEntropyLossGrad", MS,
               [rand(), F.log_softmax(rand(2, 4), 1), torch.tensor([1, 2])], [rand(2, 4)], {"reduction": "avg"},
               expect="invalid")
    write_case("err_conv_grad_dy_shape", "ConvGrad", MS, [rand(1, 2, 4, 4), rand(1, 3, 5, 5), rand(2, 3, 3, 3)],
               [rand(1, 3, 5, 5)], expect="invalid")
    write_case("err_dropout_grad_ratio", "DropoutGrad", MS, [rand(3), torch.tensor([True, False, True]),
                                                             torch.tensor(1.0)], [rand(3)], expect="runtime")
    write_case("err_layernorm_grad_broadcast_scale", "LayerNormalizationGrad", MS,
               [rand(2, 4), rand(2, 4), rand(1), rand(2, 1), rand(2, 1)], [rand(2, 4)], expect="unsupported")
    write_case("err_sgd_int_param", "SGD", "vplan", [torch.tensor([1, 2], dtype=torch.int32),
                                                     torch.tensor([1, 1], dtype=torch.int32)],
               [torch.tensor([1, 2], dtype=torch.int32)], {"lr": 0.1}, expect="unsupported")
    write_case("err_adam_beta_range", "Adam", "vplan", [rand(2), rand(2), rand(2), rand(2), torch.tensor(0.0)],
               [rand(2), rand(2), rand(2), torch.tensor(1.0)], {"lr": 0.1, "beta1": 1.0}, expect="invalid")


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    activations()
    softmaxes()
    dropout()
    layernorm()
    batchnorm()
    convs()
    pools()
    gathers()
    sces()
    accumulators()
    optimizers()
    half_precision()
    errors()
    output_based()
    fused_matmuls()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ROOT) for f in fs)
    print("wrote %d cases, %d bytes, to %s" % (len(os.listdir(ROOT)), total, os.path.normpath(ROOT)))


if __name__ == "__main__":
    main()
