#!/usr/bin/env python3
"""Structured mutations of ONNX's node conformance models, each run through `onnx-vplan eval`.

What the byte fuzzer (tests/test_fuzz_loader.c) rarely reaches: models that parse, but whose
one node is wrong the way a hand-edited or truncated export is.  For each single-node model
under ONNX-TESTS/node, the variants are: the last input dropped; each input made "" (absent);
each output of a multi-output node made "" (its graph output dropped); the first input
repeated as an extra input; graph input 0 one rank lower, one rank higher, or with a zero
first dim.  Every variant must give exit 0, 1 or 2 (a result, a runtime error, or a refused
input, each with a message); anything else (a signal, a sanitizer report, a hang) is printed
and the variant kept under --keep.  Exit status: 1 when any variant failed so, else 0.

Run it against the sanitizer build to see memory errors that do not crash:
    tools/scripts/mutate_node_tests.py --tool build-asan/onnx-vplan
It found the unnamed-output-0 crashes (MaxPool, BatchNormalization, Dropout,
LayerNormalization) that tests/data/bad/unnamed_first_output.onnx now covers.
"""
import argparse
import copy
import glob
import os
import subprocess
import sys

import onnx

SANITIZERS = {"ASAN_OPTIONS": "exitcode=99:detect_leaks=1",
              "UBSAN_OPTIONS": "halt_on_error=1:exitcode=98:print_stacktrace=1"}


def variants(m):
    node = m.graph.node[0]
    if len(node.input) > 1:
        v = copy.deepcopy(m)
        del v.graph.node[0].input[-1]
        yield "drop_last_input", v
    for k in range(len(node.input)):
        v = copy.deepcopy(m)
        v.graph.node[0].input[k] = ""
        yield f"empty_input{k}", v
    if len(node.output) > 1:
        for k in range(len(node.output)):
            v = copy.deepcopy(m)
            v.graph.node[0].output[k] = ""
            keep = [o for o in v.graph.output if o.name != node.output[k]]
            del v.graph.output[:]
            v.graph.output.extend(keep)
            if keep:
                yield f"empty_output{k}", v
    v = copy.deepcopy(m)
    v.graph.node[0].input.append(node.input[0] if node.input else "x")
    yield "extra_input", v
    if m.graph.input and m.graph.input[0].type.tensor_type.shape.dim:
        v = copy.deepcopy(m)
        del v.graph.input[0].type.tensor_type.shape.dim[-1]
        yield "rank_minus_1", v
        v = copy.deepcopy(m)
        v.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
        yield "rank_plus_1", v
        v = copy.deepcopy(m)
        v.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
        yield "dim0_zero", v


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default=os.path.join(here, "../../build/onnx-vplan"), help="the onnx-vplan to run")
    ap.add_argument("--onnx-tests", default=os.path.join(here, "../../../shared/onnx-tests"),
                    help="ONNX's backend test data (default: ../shared/onnx-tests beside the repository)")
    ap.add_argument("--keep", default="mutated-failures", help="folder for the variants that failed")
    ap.add_argument("--timeout", type=float, default=60, help="seconds a variant may run (default 60)")
    ap.add_argument("--match", default="", help="only node tests whose name contains this")
    a = ap.parse_args()
    models = sorted(glob.glob(os.path.join(a.onnx_tests, "node", "*", "model.onnx")))
    if not models:
        sys.exit(f"mutate_node_tests: no node tests under {a.onnx_tests}/node")
    env = dict(os.environ, **SANITIZERS)
    os.makedirs(a.keep, exist_ok=True)
    runs, bad = 0, []
    for i, path in enumerate(models):
        name = os.path.basename(os.path.dirname(path))
        if a.match not in name:
            continue
        try:
            m = onnx.load(path)
        except Exception:  # a test model this onnx cannot read is not ours to judge
            continue
        if len(m.graph.node) != 1:
            continue
        for tag, v in variants(m):
            out = os.path.join(a.keep, f"{name}.{tag}.onnx")
            onnx.save(v, out)
            try:
                rc = subprocess.run([a.tool, "eval", out], capture_output=True, timeout=a.timeout, env=env).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            runs += 1
            if rc in (0, 1, 2):
                os.remove(out)
            else:
                bad.append(out)
                print(f"{out}: {rc}", flush=True)
        if i % 200 == 0:
            print(f"mutate_node_tests: {i}/{len(models)} node tests, {runs} variants, {len(bad)} failed",
                  file=sys.stderr, flush=True)
    print(f"mutate_node_tests: {runs} variants, {len(bad)} failed (kept in {a.keep})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
