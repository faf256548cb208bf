#!/usr/bin/env python3
"""dp's blocks are the model's layers where the exporter names its modules (issue 39).

In:  ONNX_VPLAN SOURCE_DIR.  The torch 2.x kit's optimize=False exports
     (tests/data/torch2/*/eval_opt0.onnx), whose nodes carry torch's module stack in
     metadata_props (pkg.torch.onnx.name_scopes), and the bundled GPT (models/gpt, from
     torch 1.x: no module paths).
Out: exit 0 when, for every kit export, `plan --budget 1 --remat dp --json` reports as
     many layers as this script counts in the file, each of them one block of its own
     ("layers" = "layer_blocks" = the count), and every transformer of the kit has two
     layers or more; and when the GPT without module paths is still cut into blocks by
     its structure ("layers" 0, "blocks" > 1).  Exit 1 naming the model otherwise.
Keeps: the count here reads the file's bytes itself (protobuf's wire format, walked by
     the Python package's wire_fields: the onnx package of Debian, 1.12, predates
     NodeProto.metadata_props) and needs no third-party module; a layer is an element of the outermost module list with two elements or more
     ("m.model.layers.3"), the planner's rule (planner/remat/remat_layers.c), computed
     here independently from the file.
"""
import ast
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python"))
from onnx_vplan.exporting import wire_fields  # noqa: E402

TRANSFORMERS = {"gpt2", "llama", "llama_mha", "qwen2", "gemma", "gemma2", "xglm", "bert", "roberta", "t5", "vit", "wav2vec2", "opt", "bloom",
                "deberta_v2", "funnel", "gpt_neo"}


def name_scopes(path):
    """Per node of the main graph, its name_scopes list (None when it has none)."""
    with open(path, "rb") as f:
        buf = f.read()
    out = []
    for num, graph in wire_fields(buf):
        if num != 7:  # ModelProto.graph
            continue
        for gnum, node in wire_fields(graph):
            if gnum != 1:  # GraphProto.node
                continue
            scopes = None
            for nnum, entry in wire_fields(node):
                if nnum != 9:  # NodeProto.metadata_props
                    continue
                kv = dict(wire_fields(entry))
                if kv.get(1) == b"pkg.torch.onnx.name_scopes":
                    scopes = ast.literal_eval(kv.get(2, b"[]").decode())
            out.append(scopes)
    return out


def module(scopes):
    """The innermost module: each module's path extends its parent's by a dot."""
    best, parent = None, None
    for e in scopes or []:
        if parent is not None and parent != "" and not e.startswith(parent + "."):
            break
        parent = e
        best = e or best
    return best


def count_layers(path):
    paths = [module(s) for s in name_scopes(path)]
    lists = {}  # list prefix -> indices seen
    for p in paths:
        parts = (p or "").split(".")
        for i, c in enumerate(parts):
            if p and c.isdigit():
                lists.setdefault(".".join(parts[:i]), set()).add(c)
    layers = set()
    for p in paths:
        parts = (p or "").split(".")
        for i, c in enumerate(parts):
            if p and c.isdigit() and len(lists[".".join(parts[:i])]) > 1:
                layers.add(".".join(parts[:i + 1]))
                break
    return len(layers), sum(s is not None for s in name_scopes(path))


def plan(tool, args, tmp):
    out = os.path.join(tmp, "plan.json")
    r = subprocess.run([tool, "plan", *args, "--optimizer", "adamw", "--device", "h100", "--budget", "1",
                        "--remat", "dp", "--json", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode not in (0, 3):  # 3: planned, over the budget (as intended: the smallest peak)
        raise RuntimeError(f"exit {r.returncode}: {r.stdout.strip().splitlines()[-1:]}")
    with open(out) as f:
        return json.load(f)


def main():
    tool, src = sys.argv[1], sys.argv[2]
    kit = os.path.join(src, "tests", "data", "torch2")
    bad = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(kit)):
            path = os.path.join(kit, name, "eval_opt0.onnx")
            if not os.path.exists(path):
                continue
            want, tagged = count_layers(path)
            if tagged == 0:
                print(f"FAIL: {name}: no node carries pkg.torch.onnx.name_scopes (the kit is torch 2.x's)")
                bad += 1
                continue
            if name in TRANSFORMERS and want < 2:
                print(f"FAIL: {name}: {want} layers found in the file's module paths, a transformer has 2 or more")
                bad += 1
                continue
            try:
                j = plan(tool, [path, "--loss", "ce:logits"], tmp)
            except RuntimeError as e:
                print(f"FAIL: {name}: {e}")
                bad += 1
                continue
            got = (j.get("layers"), j.get("layer_blocks"))
            checked += 1
            if got != (want, want) or j.get("blocks", 0) < want:
                print(f"FAIL: {name}: the file has {want} layers; dp reports layers {got[0]}, {got[1]} of them one "
                      f"block each, {j.get('blocks')} blocks")
                bad += 1
            else:
                print(f"ok: {name}: {want} layers, one block each ({j['blocks']} blocks in all)")
        # without module paths: blocks from the graph's structure alone
        gpt = os.path.join(src, "models", "gpt", "model.onnx")
        try:
            j = plan(tool, [gpt, "--dim", "batch=8", "--loss", "ce:logits", "--freeze", "^causal_mask$"], tmp)
            if j.get("layers") != 0 or j.get("blocks", 0) < 2:
                print(f"FAIL: models/gpt (no module paths): layers {j.get('layers')}, blocks {j.get('blocks')}")
                bad += 1
            else:
                print(f"ok: models/gpt: no module paths, {j['blocks']} blocks by structure")
        except RuntimeError as e:
            print(f"FAIL: models/gpt: {e}")
            bad += 1
    if checked < len(TRANSFORMERS):
        print(f"FAIL: {checked} kit exports checked, the kit has {len(TRANSFORMERS)} transformers")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
