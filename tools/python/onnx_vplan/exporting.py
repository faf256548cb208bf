"""Exporting a PyTorch module so that onnx-vplan trains exactly what torch trains.

torch 2.x: the dynamo exporter (torch.onnx.export(..., dynamo=True)) with optimize=False:
its optimizer folds and merges parameters into constants of its own, which the tool
refuses.  The exporter writes torch.export's graph signature into the graph's metadata
(`pkg.torch.export.ExportedProgram.graph_signature`): the tool trains its PARAMETERs and
nothing else.  The signature keeps no requires_grad, so a parameter torch does not train
(Marian's and Whisper's sinusoidal position tables) would be trained: its line gets
` requires_grad=False`, which the tool reads (planner/train/signature.h).

torch 1.x: the TorchScript exporter with training=TrainingMode.PRESERVE (EVAL folds
BatchNorm into the convolutions) and do_constant_folding=False (parameters stay
initializers under their names).  In eval() it merges initializers of equal value (every
LayerNorm weight of one width is ones), tying parameters torch keeps apart, so tensors of
equal value are made distinct for the export and their values restored in the file
afterwards.  Then the same graph signature torch 2.x writes is written, in the same place
(GraphProto.metadata_props, field 16, which onnx before 1.16 does not know: it is then
written as the raw field), so that the tool's trainable set is torch's on either version.

Both: the model is exported from eval() (the tool trains BatchNorm in training mode),
unless it drops: both exporters leave an eval() Dropout out of the graph, so a model with a
Dropout module or a dropout probability over 0 is exported from train(), whose Dropout
nodes the tool draws new masks for at every step (mode= chooses).  Its state and mode are
restored afterwards, and the model's
metadata_props gets `onnx_vplan.export`: JSON naming the initializers that are parameters,
buffers and constants, and the parameters that are tied (one tensor under several names:
`{"alias": "name in the graph"}`)."""
import contextlib
import inspect
import io
import json
import os
import sys
import warnings

from .progress import Progress
from .tool import VplanError

SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
EXPORT_KEY = "onnx_vplan.export"
TORCHSCRIPT_OPSET = 17  # LayerNormalization as one op; torch 1.13 exports up to 17
EXTERNAL_DATA_BYTES = 1 << 30  # weights above this go to a .data file beside the model


def torch_major():
    import torch
    return int(torch.__version__.split(".")[0])


def dropping(model):
    """Names of the places where `model` drops in train(): Dropout modules with p > 0, and
    modules holding a dropout probability over 0 that they pass to torch's functional
    dropout or scaled_dot_product_attention (Hugging Face's attention_dropout, dropout_prob)."""
    import torch
    found = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.modules.dropout._DropoutNd):
            if mod.p > 0:
                found.append(name or type(mod).__name__)
            continue
        for attr, v in vars(mod).items():
            if "dropout" in attr.lower() and isinstance(v, float) and not isinstance(v, bool) and v > 0:
                found.append(f"{name}.{attr}" if name else attr)
    return found


def export(model, args, path, *, dynamic_shapes=None, input_names=None, output_names=None, opset_version=None,
           external_data=None, mode=None, progress=True):
    """Exports `model` called on `args` to the ONNX file `path` so that onnx-vplan trains
    what torch trains; returns `path`.

    args: a tensor or a tuple of positional tensors.  dynamic_shapes: torch 2.x's form (a
    tuple aligned with args, or a dict by forward's argument names, of {axis: Dim or
    name}); a name (a str) is the symbolic dim the tool's `--dim NAME=VALUE` binds; on
    torch 1.x only names (and Dims, by their names) are taken, as dynamic_axes.
    input_names / output_names: the graph's (default: forward's argument names; the
    exporter's output names).  external_data: weights in PATH.data beside the model
    (default: only above 1 GiB of weights).  mode: "train" or "eval", the module mode
    exported from; default: "train" where the model drops (dropping(model): an eval()
    export has no Dropout, so the tool would train without it), else "eval"; a train()
    export that torch's exporter fails, or that draws with random ops the tool does not
    run (stochastic depth's RandomUniformLike), is made again from eval(), with a
    warning.  A train() export's Dropouts drop: it is a training graph, not one to serve.
    progress: a line or bar on stderr."""
    import torch
    if not isinstance(model, torch.nn.Module):
        raise VplanError(f"export: model must be a torch.nn.Module, got {type(model).__name__}")
    args = args if isinstance(args, tuple) else (args,)
    path = os.fspath(path)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    if input_names is None:
        input_names = _forward_names(model, len(args))
    records = _tensors(model)
    weight_bytes = sum(r["tensor"].numel() * r["tensor"].element_size() for r in _unique(records))
    if external_data is None:
        external_data = weight_bytes > EXTERNAL_DATA_BYTES
    if mode not in (None, "train", "eval"):
        raise VplanError(f"export: mode must be 'train' or 'eval', got {mode!r}")
    drops = dropping(model)
    chosen = mode or ("train" if drops else "eval")
    major = torch_major()
    how = "dynamo, optimize=False" if major >= 2 else "TorchScript, PRESERVE, no constant folding"
    bar = Progress(f"export {type(model).__name__} from {chosen}() with torch {torch.__version__} ({how})",
                   enabled=progress)
    saved = [(r["tensor"], r["tensor"].detach().clone()) for r in _unique(records)]
    was_training = model.training

    def once(train):
        model.train(train)
        try:
            with warnings.catch_warnings():  # train() is what the step runs: no news
                warnings.filterwarnings("ignore", message="Exporting a model while it is in training mode")
                return _export(major, model, args, path, dynamic_shapes, input_names, output_names, opset_version,
                               external_data, records, bar)
        finally:
            with torch.no_grad():  # a train() forward moves BatchNorm's running statistics
                for t, v in saved:
                    t.copy_(v)

    def fall_back(why):
        print(f"onnx_vplan: warning: {why}; exported from eval(), which leaves out its dropout ({len(drops)} places, "
              f"first {drops[0]}): the tool trains without it", file=sys.stderr)
        return once(False)

    try:
        try:
            info = once(chosen == "train")
        except VplanError:
            raise
        except Exception as e:  # torch's exporter: some models export from eval() only
            if mode or chosen != "train":
                raise
            info = fall_back(f"torch's exporter failed on {type(model).__name__} in train() ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})")
        else:
            random = _random_ops(path) if chosen == "train" and not mode else []
            if random:  # stochastic depth and the like: random ops the tool does not draw
                info = fall_back(f"{type(model).__name__} from train() draws with {', '.join(random)} beside its "
                                 f"Dropouts, which onnx-vplan does not run")
    finally:
        with torch.no_grad():
            for t, v in saved:
                t.copy_(v)
        model.train(was_training)
        bar.close()
    missing = info.get("missing")
    if missing:
        print(f"onnx_vplan: warning: {len(missing)} parameters are not initializers of {path} under their names "
              f"nor tied to one (first: {missing[0]}): the tool will not train them", file=sys.stderr)
    return path


RANDOM_OPS = ("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial")


def _random_ops(path):
    """The random ops (other than Dropout) in the model at path, its subgraphs and
    functions included, sorted, each once."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    found, graphs = set(), [m.graph] + [f for f in m.functions]
    while graphs:
        g = graphs.pop()
        for n in g.node:
            if n.op_type in RANDOM_OPS:
                found.add(n.op_type)
            for a in n.attribute:  # If's and Loop's bodies
                graphs.extend([a.g] if a.HasField("g") else [])
                graphs.extend(a.graphs)
    return sorted(found)


def _export(major, model, args, path, dynamic_shapes, input_names, output_names, opset_version, external_data,
            records, bar):
    if major >= 2:
        return _export_dynamo(model, args, path, dynamic_shapes, input_names, output_names, opset_version,
                              external_data, records, bar)
    return _export_torchscript(model, args, path, dynamic_shapes, input_names, output_names, opset_version,
                               external_data, records, bar)


def _forward_names(model, n):
    """forward's positional argument names for n arguments, else x0, x1, ... (x for one)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) >= n:
        return names[:n]
    return ["x"] if n == 1 else [f"x{i}" for i in range(n)]


def _tensors(model):
    """Every parameter and buffer under every name it has: [{name, kind, tensor,
    persistent}] (a tied tensor once per name)."""
    out = []
    for mname, m in model.named_modules(remove_duplicate=False):
        pre = mname + "." if mname else ""
        for n, p in m._parameters.items():
            if p is not None:
                out.append({"name": pre + n, "kind": "PARAMETER", "tensor": p, "persistent": True})
        non_persistent = getattr(m, "_non_persistent_buffers_set", set())
        for n, b in m._buffers.items():
            if b is not None:
                out.append({"name": pre + n, "kind": "BUFFER", "tensor": b, "persistent": n not in non_persistent})
    # a module reached twice gives its tensors twice under one name
    seen, uniq = set(), []
    for r in out:
        if r["name"] not in seen:
            seen.add(r["name"])
            uniq.append(r)
    return uniq


def _storage_key(t):
    return (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride())) if t.numel() else ("empty", id(t))


def _unique(records):
    """One record per tensor (the first name of a tied group)."""
    seen, out = set(), []
    for r in records:
        k = _storage_key(r["tensor"])
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _aliases(records):
    """{storage key: [names]} of every tensor, in module order."""
    groups = {}
    for r in records:
        groups.setdefault(_storage_key(r["tensor"]), []).append(r["name"])
    return groups


def _signature_text(records, input_names, output_names):
    """torch.export's graph signature as torch 2.x's exporter writes it (what
    planner/train/signature.c reads): every parameter and buffer under every name."""
    lines = ["", "# inputs"]
    for r in records:
        flat = r["name"].replace(".", "_")
        if r["kind"] == "PARAMETER":
            frozen = "" if r["tensor"].requires_grad else " requires_grad=False"
            lines.append(f"p_{flat}: PARAMETER target='{r['name']}'{frozen}")
        else:
            extra = "" if r["persistent"] else " persistent=False"
            lines.append(f"b_{flat}: BUFFER target='{r['name']}'{extra}")
    lines += [f"{n}: USER_INPUT" for n in input_names]
    lines += ["", "# outputs"] + [f"{n}: USER_OUTPUT" for n in output_names] + [""]
    return "\n".join(lines)


def _parse_signature(text):
    """{target: kind} from torch.export's signature text."""
    kinds, inputs = {}, False
    for line in text.splitlines():
        if line.startswith("#"):
            inputs = line.startswith("# inputs")
            continue
        if inputs and ": " in line and "target='" in line:
            kind = line.split(": ", 1)[1].split(" ", 1)[0]
            target = line.split("target='", 1)[1].split("'", 1)[0]
            kinds[target] = kind
    return kinds


def _ld(field, data):
    """A length-delimited protobuf field: tag, length, bytes."""
    def varint(v):
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)
    return varint(field << 3 | 2) + varint(len(data)) + data


def graph_metadata(model_proto, key):
    """The value of GraphProto.metadata_props[key], or None, with any onnx version."""
    g = model_proto.graph
    if hasattr(g, "metadata_props"):
        for p in g.metadata_props:
            if p.key == key:
                return p.value
        return None
    # onnx < 1.16 keeps field 16 among the unknown fields: find it in the serialized graph
    for field, entry in wire_fields(g.SerializeToString()):
        if field == 16:
            kv = dict(wire_fields(entry))
            if kv.get(1, b"").decode() == key:
                return kv.get(2, b"").decode()
    return None


def wire_fields(raw):
    """(field number, bytes) of each length-delimited field of a serialized message, in
    order (protobuf's wire format); fields of other wire types are skipped, and a
    malformed tail ends the walk."""
    pos = 0
    while pos < len(raw):
        tag, pos = _read_varint(raw, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _read_varint(raw, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            n, pos = _read_varint(raw, pos)
            yield field, raw[pos:pos + n]
            pos += n
        else:
            return


def _read_varint(b, pos):
    v, shift = 0, 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, pos
        shift += 7


def _set_graph_metadata(model_proto, key, value):
    g = model_proto.graph
    if hasattr(g, "metadata_props"):
        keep = [p for p in g.metadata_props if p.key != key]
        del g.metadata_props[:]
        g.metadata_props.extend(keep)
        e = g.metadata_props.add()
        e.key, e.value = key, value
    else:  # onnx < 1.16: the field as raw bytes, kept by protobuf as an unknown field
        g.MergeFromString(_ld(16, _ld(1, key.encode()) + _ld(2, value.encode())))


def _set_model_metadata(model_proto, key, value):
    keep = [p for p in model_proto.metadata_props if p.key != key]
    del model_proto.metadata_props[:]
    model_proto.metadata_props.extend(keep)
    e = model_proto.metadata_props.add()
    e.key, e.value = key, value


def _record_export(model_proto, records, kinds_in_graph, exporter):
    """The onnx_vplan.export metadata: initializers by kind, tied names, what is missing.
    kinds_in_graph: {initializer name: PARAMETER | BUFFER | CONSTANT}."""
    import torch
    inits = {i.name for i in model_proto.graph.initializer}
    tied, missing = {}, []
    for names in _aliases(records).values():
        present = [n for n in names if n in inits]
        for n in names:
            if n not in inits and present:
                tied[n] = present[0]
        kind = next(r["kind"] for r in records if r["name"] == names[0])
        if not present and kind == "PARAMETER":
            missing.append(names[0])
    by_kind = {"parameters": [], "buffers": [], "constants": []}
    for i in model_proto.graph.initializer:
        k = kinds_in_graph.get(i.name)
        if k == "PARAMETER":
            by_kind["parameters"].append(i.name)
        elif k == "BUFFER":
            by_kind["buffers"].append(i.name)
        else:
            by_kind["constants"].append(i.name)
    info = {"exporter": exporter, "torch": torch.__version__, **by_kind, "tied": tied, "missing": missing}
    _set_model_metadata(model_proto, EXPORT_KEY, json.dumps(info, sort_keys=True))
    return info


class _Lines(io.TextIOBase):
    """stdout of the exporter, its lines shown as progress."""

    def __init__(self, bar):
        self.bar, self.buf = bar, ""

    def write(self, s):
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line.strip():
                self.bar.update(line.strip())
        return len(s)


def _export_dynamo(model, args, path, dynamic_shapes, input_names, output_names, opset_version, external_data,
                   records, bar):
    import onnx
    import torch
    kw = {}
    if opset_version is not None:
        kw["opset_version"] = opset_version
    if dynamic_shapes is not None:
        kw["dynamic_shapes"] = _dynamo_shapes(dynamic_shapes)
    with contextlib.redirect_stdout(_Lines(bar)):
        torch.onnx.export(model, args, path, input_names=list(input_names), output_names=output_names, dynamo=True,
                          optimize=False, external_data=bool(external_data), verbose=False, **kw)
    bar.update("recording the trainable set")
    m = onnx.load(path, load_external_data=False)
    text = graph_metadata(m, SIGNATURE_KEY)
    if text is None:
        raise VplanError(f"export: torch {torch.__version__}'s exporter wrote no graph signature into {path}", 1)
    kinds = _parse_signature(text)
    frozen = {r["name"] for r in records if r["kind"] == "PARAMETER" and not r["tensor"].requires_grad}
    if frozen:
        _set_graph_metadata(m, SIGNATURE_KEY, _mark_frozen(text, frozen))
    in_graph = {i.name: ("CONSTANT" if kinds.get(i.name) == "CONSTANT_TENSOR" else kinds.get(i.name, "CONSTANT"))
                for i in m.graph.initializer}
    info = _record_export(m, records, in_graph, "dynamo")
    onnx.save(m, path)
    return info


def _mark_frozen(text, frozen):
    """The signature text with ` requires_grad=False` after each PARAMETER line whose target
    is in `frozen` (the parameters torch does not train)."""
    out = []
    for line in text.split("\n"):
        t = line.split("target='", 1)
        if ": PARAMETER " in line and len(t) == 2 and t[1].split("'", 1)[0] in frozen and "requires_grad" not in line:
            line += " requires_grad=False"
        out.append(line)
    return "\n".join(out)


def _dynamo_shapes(ds):
    """dynamic_shapes with names (str) as torch.export.Dim of that name."""
    import torch

    def conv(spec):
        if isinstance(spec, dict):
            return {a: (torch.export.Dim(d) if isinstance(d, str) else d) for a, d in spec.items()}
        return spec
    if isinstance(ds, dict):
        return {k: conv(v) for k, v in ds.items()}
    return type(ds)(conv(v) for v in ds)


def _dynamic_axes(ds, input_names):
    """torch 1.x: dynamic_shapes (names or Dims) as dynamic_axes by input name."""
    if ds is None:
        return None
    items = ds.items() if isinstance(ds, dict) else zip(input_names, ds)
    axes = {}
    for name, spec in items:
        if not spec:
            continue
        if not isinstance(spec, dict):
            raise VplanError(f"export: dynamic_shapes for {name}: want {{axis: name}}, got {spec!r}")
        axes[name] = {int(a): (d if isinstance(d, str) else getattr(d, "__name__", f"{name}_dim{a}"))
                      for a, d in spec.items()}
    return axes


def _distinct_values(records, bar):
    """torch 1.x: tensors of equal value (different storage) made distinct, so that the
    exporter does not merge their initializers; returns {storage key: exported bytes}."""
    import torch
    uniq = [r for r in _unique(records) if r["tensor"].is_floating_point() and r["tensor"].numel()]
    g = torch.Generator().manual_seed(20240607)
    for _ in range(4):
        groups = {}
        for r in uniq:
            t = r["tensor"].detach()
            groups.setdefault((t.dtype, tuple(t.shape), hash(t.cpu().contiguous().numpy().tobytes())), []).append(r)
        dup = [rs for rs in groups.values() if len(rs) > 1]
        if not dup:
            break
        n = 0
        with torch.no_grad():
            for rs in dup:
                for r in rs[1:]:
                    t = r["tensor"]
                    scale = float(t.detach().abs().max()) or 1.0
                    t.add_(torch.randn(t.shape, generator=g).to(t.dtype) * scale * 1e-2 + scale * 1e-3)
                    n += 1
        bar.update(f"{n} tensors of equal value made distinct")
    return {_storage_key(r["tensor"]): _value_key(r["tensor"].detach().cpu().numpy()) for r in uniq}


def _value_key(arr):
    """What identifies an array by value: dtype, shape, bytes."""
    import numpy as np
    return (str(arr.dtype), tuple(arr.shape), np.ascontiguousarray(arr).tobytes())


def _export_torchscript(model, args, path, dynamic_shapes, input_names, output_names, opset_version, external_data,
                        records, bar):
    import onnx
    import torch
    from onnx import numpy_helper
    original = {_storage_key(r["tensor"]): r["tensor"].detach().cpu().clone() for r in _unique(records)}
    exported = _distinct_values(records, bar)  # {storage key: value key}
    bar.update("tracing")
    torch.onnx.export(model, args, path, input_names=list(input_names), output_names=output_names,
                      dynamic_axes=_dynamic_axes(dynamic_shapes, input_names),
                      opset_version=opset_version or TORCHSCRIPT_OPSET, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False, export_params=True, keep_initializers_as_inputs=False)
    bar.update("restoring the values and recording the trainable set")
    m = onnx.load(path)
    by_name = {r["name"]: r for r in records}
    by_value = {}
    for r in _unique(records):
        k = _storage_key(r["tensor"])
        if k in exported:
            by_value[exported[k]] = r
    aliases = _aliases(records)
    taken = {i.name for i in m.graph.initializer}
    renames, kinds = {}, {}
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        r = by_name.get(init.name)
        if r is None or tuple(r["tensor"].shape) != arr.shape:
            r = by_value.get(_value_key(arr))
        if r is None:
            kinds[init.name] = "CONSTANT"
            continue
        k = _storage_key(r["tensor"])
        names = aliases[k]
        if init.name not in names:  # the exporter named it otherwise: its torch name
            new = next((n for n in names if n not in taken), None)
            if new:
                renames[init.name] = new
                taken.add(new)
        value = original[k].numpy().reshape(arr.shape).astype(arr.dtype, copy=False)
        init.CopyFrom(numpy_helper.from_array(value, renames.get(init.name, init.name)))
        kinds[init.name] = r["kind"]
    if renames:
        _rename_inputs(m.graph, renames)
        kinds = {renames.get(n, n): k for n, k in kinds.items()}
    outs = [o.name for o in m.graph.output]
    _set_graph_metadata(m, SIGNATURE_KEY, _signature_text(records, input_names, outs))
    info = _record_export(m, records, kinds, "torchscript")
    if external_data:
        onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=os.path.basename(path) + ".data")
    else:
        onnx.save(m, path)
    return info


def _rename_inputs(graph, renames):
    """Node inputs (also in subgraphs) and value_info renamed."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]
        for a in node.attribute:
            if a.HasField("g"):
                _rename_inputs(a.g, renames)
            for sub in a.graphs:
                _rename_inputs(sub, renames)
    for vi in list(graph.value_info) + list(graph.input):
        if vi.name in renames:
            vi.name = renames[vi.name]
