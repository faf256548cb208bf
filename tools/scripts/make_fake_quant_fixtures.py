#!/usr/bin/python3
"""Expected outputs of the quant family (vplan FakeQuant, FakeQuantGrad, QuantObserver,
QuantParams), computed by PyTorch, for tests/test_train_ops.c (run as
`test_train_ops --dir tests/data/fake_quant`).

- FakeQuant per tensor and per channel: torch.fake_quantize_per_tensor_affine /
  per_channel_affine, forward, and their clipped straight-through gradient from autograd.
- LSQ (learned scale): a reference written here in torch (the scale's gradient scaled by
  grad_factor = 1 / sqrt(numel * quant_max) through an identity whose backward multiplies,
  rounding through a straight-through round), checked against torch's own
  _fake_quantize_learnable_per_tensor_affine before it is written.
- QuantObserver: torch.ao.quantization MovingAverageMinMaxObserver and
  MovingAveragePerChannelMinMaxObserver (averaging constant 0.01) over two batches;
  QuantParams: their calculate_qparams().

Case folders as make_train_op_fixtures.py writes them (case.txt, in_K.pb, out_K.pb).
usage: /usr/bin/python3 tools/scripts/make_fake_quant_fixtures.py   (torch 1.13, onnx)
"""
import os
import shutil

import torch
import torch.ao.quantization as tq

import make_train_op_fixtures as mtf

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "fake_quant")
V = "vplan"
torch.manual_seed(4321)


def f32(*shape, scale=1.0):
    return (torch.randn(shape) * scale).float()


def case_pair(name, x, scale, zp, qmin, qmax, axis, fq):
    """FakeQuant forward and FakeQuantGrad (dX) of one configuration; fq(x) is torch's op."""
    x = x.clone().requires_grad_(True)
    y = fq(x)
    dy = f32(*x.shape)
    (dx,) = torch.autograd.grad(y, x, dy)
    attrs = {"quant_min": qmin, "quant_max": qmax, "axis": axis}
    s, z = scale.float().reshape(-1), zp.float().reshape(-1)
    mtf.write_case(name, "FakeQuant", V, [x, s, z], [y], attrs)
    mtf.write_case(name + "_grad", "FakeQuantGrad", V, [dy, x, s, z], [dx], attrs)


def fake_quants():
    # per tensor, affine uint8 range, some values clipped at both ends
    x = f32(4, 5, 6, scale=3.0)
    case_pair("fq_tensor_affine", x, torch.tensor([0.05]), torch.tensor([37]), 0, 255, 0,
              lambda t: torch.fake_quantize_per_tensor_affine(t, 0.05, 37, 0, 255))
    # per tensor, symmetric int8
    x = f32(3, 7, scale=2.0)
    case_pair("fq_tensor_sym", x, torch.tensor([0.013]), torch.tensor([0]), -128, 127, 0,
              lambda t: torch.fake_quantize_per_tensor_affine(t, 0.013, 0, -128, 127))
    # exact ties (a power-of-two scale): nearbyint rounds half to even
    x = (torch.arange(-20, 20, dtype=torch.float32) + 0.5) * 0.25
    case_pair("fq_tensor_ties", x, torch.tensor([0.25]), torch.tensor([0]), -8, 7, 0,
              lambda t: torch.fake_quantize_per_tensor_affine(t, 0.25, 0, -8, 7))
    # the byte-mask form: torch's cachemask variant gives Y and the mask; the gradient
    # read from the mask equals the one rebuilt from X
    x = f32(3, 4, 5, scale=3.0)
    y, mask = torch.ops.aten.fake_quantize_per_tensor_affine_cachemask(x, 0.04, 20, 0, 255)
    dy = f32(3, 4, 5)
    attrs = {"quant_min": 0, "quant_max": 255, "axis": 0}
    s1, z1 = torch.tensor([0.04]), torch.tensor([20.0])
    mtf.write_case("fq_mask", "FakeQuant", V, [x, s1, z1], [y, mask], attrs)
    mtf.write_case("fq_mask_grad", "FakeQuantGrad", V, [dy, mask, s1, z1], [dy * mask], attrs)
    # per channel on axis 0 (a Conv weight [O, I, kh, kw]), symmetric
    x = f32(4, 3, 2, 2)
    s = x.abs().amax(dim=(1, 2, 3)) / 127.5 * 0.8  # a little clipping in every channel
    z = torch.zeros(4, dtype=torch.int32)
    case_pair("fq_channel_axis0", x, s, z, -128, 127, 0,
              lambda t: torch.fake_quantize_per_channel_affine(t, s, z, 0, -128, 127))
    # per channel on axis 1 with zero points (NCHW activations), affine
    x = f32(2, 3, 4, 5, scale=2.0)
    s = torch.tensor([0.02, 0.03, 0.015])
    z = torch.tensor([128, 100, 140], dtype=torch.int32)
    case_pair("fq_channel_axis1", x, s, z, 0, 255, 1,
              lambda t: torch.fake_quantize_per_channel_affine(t, s, z, 1, 0, 255))


class GradScale(torch.autograd.Function):
    """The identity whose gradient is multiplied by factor: LSQ's grad_scale."""

    @staticmethod
    def forward(ctx, s, factor):
        ctx.factor = factor
        return s.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


def lsq(x, s, z, qmin, qmax, factor, axis=None):
    """LSQ fake quantisation with a learned scale s (one element or one per channel of
    axis).  The value is torch's fake quantisation; the gradients come from a surrogate
    whose value is subtracted out: dX = dY inside the range (the clipped straight-through
    estimator), dS = (q - z) - X / s inside and (qmin - z) or (qmax - z) outside (LSQ's
    d/ds with round() passed straight through), times factor."""
    s = GradScale.apply(s, factor)
    if axis is not None:
        shape = [1] * x.dim()
        shape[axis] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    v = (x * (1.0 / s)).detach()
    q = torch.round(v) + z  # half to even, as nearbyint
    inside = ((q >= qmin) & (q <= qmax)).float()
    qc = torch.clamp(q, qmin, qmax)
    value = ((qc - z) * s).detach()
    surrogate = (qc - z) * s + inside * (x - s * v)
    return value + (surrogate - surrogate.detach())


def lsqs():
    for name, shape, qmin, qmax, zp, axis in (("lsq_tensor_sym", (4, 6, 5), -128, 127, 0, None),
                                              ("lsq_tensor_affine", (3, 8), 0, 255, 40, None),
                                              ("lsq_channel_axis0", (5, 4, 3), -128, 127, 0, 0)):
        x = f32(*shape, scale=2.0).requires_grad_(True)
        n_scale = shape[axis] if axis is not None else 1
        s = (torch.rand(n_scale) * 0.02 + 0.01).requires_grad_(True)
        z = torch.full((n_scale,), float(zp))
        factor = 1.0 / (x.numel() * qmax) ** 0.5
        y = lsq(x, s, z, qmin, qmax, factor, axis)
        dy = f32(*shape)
        dx, ds = torch.autograd.grad(y, (x, s), dy)
        if axis is None:  # torch's own learnable fake quant agrees
            x2, s2 = x.detach().clone().requires_grad_(True), s.detach().clone().requires_grad_(True)
            y2 = torch._fake_quantize_learnable_per_tensor_affine(x2, s2, z, qmin, qmax, factor)
            dx2, ds2 = torch.autograd.grad(y2, (x2, s2), dy)
            assert torch.equal(y, y2) and torch.equal(dx, dx2), name
            assert torch.allclose(ds, ds2, rtol=1e-4, atol=1e-6), (name, ds, ds2)
        attrs = {"quant_min": qmin, "quant_max": qmax, "axis": axis or 0, "grad_factor": factor}
        mtf.write_case(name, "FakeQuant", V, [x, s, z], [y], attrs)
        mtf.write_case(name + "_grad", "FakeQuantGrad", V, [dy, x, s, z], [dx, ds], attrs)


def observers():
    for name, obs, shape, axis, sym in (
            ("obs_tensor_affine", tq.MovingAverageMinMaxObserver(averaging_constant=0.01, dtype=torch.quint8,
                                                                  qscheme=torch.per_tensor_affine),
             (4, 8), None, 0),
            ("obs_tensor_sym", tq.MovingAverageMinMaxObserver(averaging_constant=0.01, dtype=torch.qint8,
                                                               qscheme=torch.per_tensor_symmetric),
             (2, 3, 5), None, 1),
            ("obs_channel_sym", tq.MovingAveragePerChannelMinMaxObserver(averaging_constant=0.01, ch_axis=0,
                                                                          dtype=torch.qint8,
                                                                          qscheme=torch.per_channel_symmetric),
             (4, 3, 3), 0, 1)):
        n = shape[axis] if axis is not None else 1
        lo, hi, count = torch.zeros(n), torch.zeros(n), torch.tensor(0.0)
        attrs = {"axis": axis or 0, "averaging_constant": 0.01}
        for step in (1, 2):
            x = f32(*shape, scale=float(step))
            obs(x)
            lo2, hi2 = obs.min_val.reshape(-1).clone(), obs.max_val.reshape(-1).clone()
            mtf.write_case("%s_step%d" % (name, step), "QuantObserver", V, [x, lo, hi, count],
                           [lo2, hi2, count + 1], attrs)
            lo, hi, count = lo2, hi2, count + 1
        # frozen: the range stays once count reaches freeze_after
        mtf.write_case(name + "_frozen", "QuantObserver", V, [f32(*shape, scale=5.0), lo, hi, count],
                       [lo, hi, count + 1], dict(attrs, freeze_after=2))
        scale, zp = obs.calculate_qparams()
        mtf.write_case(name + "_qparams", "QuantParams", V, [lo, hi], [scale.float().reshape(-1), zp.float().reshape(-1)],
                       {"quant_min": obs.quant_min, "quant_max": obs.quant_max, "symmetric": sym})


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    mtf.ROOT = ROOT
    fake_quants()
    lsqs()
    observers()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ROOT) for f in fs)
    print("wrote %d cases, %d bytes, to %s" % (len(os.listdir(ROOT)), total, os.path.normpath(ROOT)))


if __name__ == "__main__":
    main()
