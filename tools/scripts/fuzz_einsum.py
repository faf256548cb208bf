#!/usr/bin/env python3
"""Random Einsum models against numpy.einsum, for hostile and odd input (stop 49).

Each case: 1 to 3 operands of random terms over a few letters (upper case too), ellipses
now and then, an explicit or implicit output, and one case in five corrupted (a size, a
term count, an output label, a rank).  `onnx-vplan eval` runs it (build it with
-DVP_SANITIZE=ON to run under ASan and UBSan); every run must exit 0 or 2 with no
sanitizer report, a valid equation must give numpy's values (1e-5), and a refused one is
listed.  Equations numpy rejects but torch accepts (an ellipsis summed away, no '...' in
the output) are printed as ACCEPTED-BAD: onnx-vplan takes them as torch.einsum does.
usage: python3 tools/scripts/fuzz_einsum.py ONNX_VPLAN [CASES] [SEED]   (numpy, onnx)
"""
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    tool = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    random.seed(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    work = tempfile.mkdtemp(prefix="fuzz_einsum.")
    letters = "abcdeABij"
    bad_runs = 0
    for it in range(n):
        nops = random.randint(1, 3)
        sizes = {c: random.choice([1, 2, 3]) for c in letters}
        terms, shapes = [], []
        ell = random.random() < 0.3
        ell_dims = [random.choice([1, 2]) for _ in range(random.randint(0, 2))]
        for k in range(nops):
            t = "".join(random.choice(letters) for _ in range(random.randint(0, 3)))
            shp = [sizes[c] for c in t]
            if ell and random.random() < 0.7:
                pos = random.randint(0, len(t))
                e = ell_dims[len(ell_dims) - random.randint(0, len(ell_dims)):] if ell_dims else []
                t = t[:pos] + "..." + t[pos:]
                shp = shp[:pos] + e + shp[pos:]
            terms.append(t); shapes.append(shp)
        if random.random() < 0.5:
            eq = ",".join(terms)
        else:
            used = sorted(set(c for t in terms for c in t if c != "."))
            out = "".join(random.sample(used, random.randint(0, len(used))))
            if any("..." in t for t in terms) and random.random() < 0.7: out = "..." + out
            eq = ",".join(terms) + "->" + out
        # sometimes corrupt
        corrupt = random.random() < 0.2
        if corrupt:
            kind = random.randint(0, 3)
            if kind == 0 and shapes[0]: shapes[0][0] += 1
            elif kind == 1: eq = eq.replace(",", "", 1) if "," in eq else eq + ",a"
            elif kind == 2: eq = eq + "->x" if "->" not in eq else eq + "z"
            else: shapes[0] = shapes[0] + [2]
        ins = [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, s) for k, s in enumerate(shapes)]
        node = helper.make_node("Einsum", [f"x{k}" for k in range(nops)], ["y"], equation=eq)
        g = helper.make_graph([node], "e", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        d = work
        onnx.save(m, d + "/m.onnx")
        xs = [np.random.uniform(-1, 1, s).astype(np.float32) for s in shapes]
        args = [tool, "eval", d + "/m.onnx", "--output-dir", d]
        for k, x in enumerate(xs):
            with open(f"{d}/x{k}.pb", "wb") as f: f.write(numpy_helper.from_array(x, f"x{k}").SerializeToString())
            args += ["--input", f"x{k}={d}/x{k}.pb"]
        try:
            want = np.einsum(eq, *xs)
        except Exception:
            want = None
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode not in (0, 2) or "runtime error" in r.stderr or "AddressSanitizer" in r.stderr:
            print("CRASH", eq, shapes, r.returncode, r.stderr[-400:]); bad_runs += 1; continue
        if want is None:
            if r.returncode == 0: print("ACCEPTED-BAD", eq, shapes); bad_runs += 1
            continue
        if r.returncode != 0:
            print("REFUSED-GOOD", eq, shapes, r.stderr.strip()[-200:]); bad_runs += 1; continue
        got = numpy_helper.to_array(onnx.load_tensor(d + "/y.pb"))
        if got.shape != np.asarray(want).shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            print("WRONG", eq, shapes, got.shape, np.asarray(want).shape); bad_runs += 1
    print("done", n, "bad", bad_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
