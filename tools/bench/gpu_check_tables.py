#!/usr/bin/python3
"""The tables of tools/gpu-check.sh.

usage: gpu_check_tables.py errors TEST_CUDA_OPS_LOG
           per op: cases, the largest error against the CPU in fp32, with TF32 and in
           float16/bfloat16 (from the "ok   ops/NAME [Op]: largest error X" lines);
           per model step: every value against the CPU (the "models/..._values" lines)
       gpu_check_tables.py losses GOT_JSON WANT_JSON LABEL
           the losses of two `run --json` files within 2e-3 relative (exit 1 if not)
       gpu_check_tables.py bench BATCH "NAME|OURS_JSON|CPU_JSON|TORCH_JSON" ...
           step time ours / PyTorch and our CPU / ours, arena, measured peak / torch's
           max_memory_reserved (TORCH_JSON may be empty)
"""
import json
import re
import statistics
import sys


def errors(log):
    ops, models = {}, []
    for line in open(log):
        m = re.match(r"(ok  |FAIL) ops/(\S+) \[(\S+)\]: (.*)", line)
        if m:
            word, name, op, detail = m.groups()
            kind = "tf32" if name.endswith("_tf32") else "16" if re.search(r"(^|_)b?f16(_|$)", name) else "fp32"
            e = re.search(r"largest error (\S+)", detail)
            err = float(e.group(1)) if e and word == "ok  " else float("inf")
            row = ops.setdefault(op, {"cases": 0})
            row["cases"] += 1
            row[kind] = max(row.get(kind, 0.0), err)
            continue
        m = re.match(r"(ok  |FAIL) models/(\S+)_values: (.*)", line)
        if m:
            models.append((m.group(2), m.group(3) if m.group(1) == "ok  " else "FAIL: " + m.group(3)))

    def fmt(v):
        return "-" if v is None else "FAIL" if v == float("inf") else "%.2g" % v

    print()
    print("| op | cases | fp32 max error | TF32 max error | fp16/bf16 max error |")
    print("|---|---|---|---|---|")
    for op in sorted(ops):
        r = ops[op]
        print("| %s | %d | %s | %s | %s |" % (op, r["cases"], fmt(r.get("fp32")), fmt(r.get("tf32")), fmt(r.get("16"))))
    print()
    print("| model step | every value against the CPU |")
    print("|---|---|")
    for name, detail in models:
        print("| %s | %s |" % (name, detail))
    return 0


def losses(got_path, want_path, label):
    got = json.load(open(got_path))["losses"]
    want = json.load(open(want_path))["losses"]
    worst = max((abs(a - b) / max(abs(b), 1) for a, b in zip(got, want)), default=float("inf"))
    ok = len(got) == len(want) and worst <= 2e-3
    print("%s %s: losses %s, cpu %s, worst relative difference %.2g"
          % ("ok  " if ok else "FAIL", label, " ".join("%.6f" % x for x in got), " ".join("%.6f" % x for x in want), worst))
    return 0 if ok else 1


def median_ms(run):
    secs = run.get("step_seconds", [])
    tail = secs[len(secs) // 5:] or secs  # past the first fifth: warm
    return statistics.median(tail) * 1e3 if tail else float("nan")


def mib(b):
    return "%.2f MiB" % (b / 2**20) if b else "-"


def bench(batch, rows):
    print()
    print("| model | batch | ours ms | our CPU ms | CPU / ours | torch ms | ours / torch | our arena | "
          "our measured peak | torch max_memory_reserved | peak / torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        name, ours_path, cpu_path, torch_path = row.split("|")
        ours = json.load(open(ours_path))
        ours_ms, cpu_ms = median_ms(ours), median_ms(json.load(open(cpu_path)))
        peak = ours.get("measured_peak_bytes", 0)
        t = json.load(open(torch_path)) if torch_path else None
        t_ms = t["step_ms_median"] if t else None
        t_mem = t["max_memory_reserved"] if t else 0
        print("| %s | %s | %.3f | %.1f | %.3g | %s | %s | %s | %s | %s | %s |" % (
            name, batch, ours_ms, cpu_ms, cpu_ms / ours_ms, "%.3f" % t_ms if t_ms else "-",
            "%.2f" % (ours_ms / t_ms) if t_ms else "-", mib(ours["arena_bytes"]), mib(peak), mib(t_mem),
            "%.2f" % (peak / t_mem) if peak and t_mem else "-"))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "errors" and len(sys.argv) == 3:
        sys.exit(errors(sys.argv[2]))
    if cmd == "losses" and len(sys.argv) == 5:
        sys.exit(losses(*sys.argv[2:]))
    if cmd == "bench":
        sys.exit(bench(sys.argv[2] if len(sys.argv) > 2 else "-", sys.argv[3:]))
    sys.exit(__doc__)
