#!/usr/bin/env bash
# The device check: everything that needs a GPU, in one run of under 10 minutes on one
# H200 with 16 cores.  From the repository root:
#
#   bash tools/gpu-check.sh
#
# 1. installs the build dependencies (tools/install-deps.sh; skipped when present) and
#    builds with CUDA in Release (sm_90 + PTX), the kernels native (VP_CUDA_EMU off);
# 2. runs tests/test_cuda_ops: every op case on the CUDA and the CPU backend on the
#    same inputs (float32 1e-5, TF32 1e-2, float16/bfloat16 against the CPU kernels of
#    the same precision), the train-op fixtures, every value of the models' training
#    steps (fp32, bf16, fp16), their loss curves against the PyTorch fixtures, and the
#    coverage check (every op of every training step has a kernel, the torch.onnx
#    ResNet-18, MobileNet-v2 and SqueezeNet exports too where torchvision is); prints the largest
#    error against the CPU per op (fp32, TF32, 16-bit) and per model step;
# 3. for each model and both fixture optimizers: `onnx-vplan plan` then
#    `onnx-vplan run --backend cuda --steps 5` on the fixture batch, losses compared
#    with models/*/fixtures/train_*.json (1e-4);
# 4. mixed precision: each model's AdamW plan at --precision bf16 and fp16 run on
#    --backend cuda and --backend cpu, losses compared (2e-3; tests/cli_cuda_emu.sh says
#    why);
# 5. convolutions: models/cnn (fp32, bf16, batch 16) run with cuDNN, the steps' planned
#    workspaces in the arena, and again with our kernels (VP_CUDA_NO_CUDNN=1): losses
#    compared (1e-4 / 2e-3 relative), cuDNN must have run; prints the planned workspace
#    bytes beside the arena and the measured peak;
# 5a. features: QAT (cnn), optimizer-state offload, bf16 with and without cast fusion and
#    sqrtn checkpointing (gpt), each plan run on the device and on the CPU, losses within
#    2e-3 relative; and every export of the torch 2.x kit (tests/data/torch2) in fp32
#    and bf16, the same way;
# 5b. where the machine has two GPUs or more (and mpirun): tensor parallelism over NCCL,
#    mpirun -np 2 (and 4 with four GPUs) onnx-vplan run --backend cuda of the torch.onnx
#    GPT export's per-rank plans (tests/data/tp/gpt_qkv), losses against the one-GPU
#    plan (1e-5 relative) and the bytes NCCL was asked to send against the plan's figure;
# 6. benchmarks a training step (AdamW) of the GPT-style model and the ResNet-style CNN,
#    fp32 and bf16, against PyTorch eager on the same GPU (fp32 rows, where python3 has
#    torch with CUDA) and against our own CPU backend, and prints one table: step time
#    ours / PyTorch and CPU / ours, our arena and measured peak / torch.cuda.max_memory_reserved.
# Every command is printed before it runs ("+ ...").  Exit 0 when every check passed;
# where no GPU is (nvidia-smi -L finds none) it says so and exits 0 at once.
#
# Environment: BUILD (build-gpu), PYTHON (python3), BENCH_BATCH (64), BENCH_STEPS (50),
# CPU_STEPS (3: our CPU backend's steps in the benchmark), BACKEND (cuda; "cpu" is a dry
# run of steps 3-5 without a GPU), EMU (1: the whole script on the CUDA backend's host
# emulation, runtime/cuda/emu: a dry run of every step without a GPU; with BENCH_BATCH=4
# BENCH_STEPS=3 it takes a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
PY=${PYTHON:-python3}
BATCH=${BENCH_BATCH:-64}
STEPS=${BENCH_STEPS:-50}
BACKEND=${BACKEND:-cuda}
EMU=${EMU:-0}
CPU_STEPS=${CPU_STEPS:-3}
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
failed=()
t_start=$SECONDS

run() {
    echo "+ $*" >&2
    "$@"
}
section() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - t_start)); }

section "machine"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"
nvcc --version 2>/dev/null | tail -1 || true

if [[ $BACKEND == cuda && $EMU == 0 ]] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no NVIDIA GPU on this machine (nvidia-smi -L finds none): nothing to check on a device."
    echo "      Dry runs without one: BACKEND=cpu (our CPU backend in the GPU's place), or EMU=1 (the"
    echo "      CUDA backend on its host emulation), e.g. EMU=1 BENCH_BATCH=4 BENCH_STEPS=3 bash $0"
    rm -rf "$WORK"
    exit 0
fi

section "build"
run bash tools/install-deps.sh || echo "warning: tools/install-deps.sh failed; building with what is installed"
if [[ $EMU == 1 ]]; then
    # the same kernels compiled for the host (onnx-vplan-cuda-emu: run --backend cuda on them)
    run cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVP_CUDA=OFF -DVP_CUDA_EMU=ON >/dev/null
    run cmake --build "$BUILD" -j "$(nproc)" --target onnx-vplan-cuda-emu test_cuda_ops
    VP="$BUILD/onnx-vplan-cuda-emu"
else
    # native kernels: the emulation off even where the build would choose it
    run cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVP_CUDA=ON -DVP_CUDA_EMU=OFF >/dev/null
    run cmake --build "$BUILD" -j "$(nproc)" --target onnx-vplan test_cuda_ops
    VP="$BUILD/onnx-vplan"
fi

section "CUDA against CPU, op by op and model by model"
# the torch.onnx training exports, for test_cuda_ops' coverage check (where torchvision is)
if [[ ! -f $BUILD/torch_models/resnet18-op17-train.onnx ]] && "$PY" -c 'import torch, torchvision' 2>/dev/null; then
    run "$PY" tools/scripts/export_torch_models.py "$BUILD/torch_models" --training \
        --models resnet18,mobilenet_v2,squeezenet1_1 >/dev/null || echo "warning: the torch.onnx exports failed"
fi
rc=0
VP_TORCH_MODELS="$BUILD/torch_models" run "$BUILD/tests/test_cuda_ops" >"$WORK/test_cuda_ops.log" 2>&1 || rc=$?
grep -v '^ok ' "$WORK/test_cuda_ops.log" || true # failures, skips and the summary
echo "($(grep -c '^ok ' "$WORK/test_cuda_ops.log") cases ok; the full log: $BUILD/test_cuda_ops.log)"
cp "$WORK/test_cuda_ops.log" "$BUILD/test_cuda_ops.log"
if [[ $rc -ne 0 ]]; then failed+=(test_cuda_ops); fi
"$PY" tools/bench/gpu_check_tables.py errors "$WORK/test_cuda_ops.log"

# the plan options that reproduce a fixture curve
plan_opts() { # FIXTURE_JSON
    "$PY" - "$1" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
if c["optimizer"] == "adamw":
    b1, b2 = c.get("betas", [0.9, 0.999])
    print("--optimizer adamw --lr %r --betas %r,%r --eps %r --weight-decay %r"
          % (c["lr"], b1, b2, c.get("eps", 1e-8), c.get("weight_decay", 0.01)))
else:
    print("--optimizer momentum --lr %r --momentum %r --weight-decay %r"
          % (c["lr"], c.get("momentum", 0.9), c.get("weight_decay", 0)))
EOF
}

# the model's torch buffers, frozen (not parameters in torch)
freeze_of() { # META_JSON
    "$PY" -c 'import json,sys,re; b=[x for x in json.load(open(sys.argv[1])).get("buffers",[]) if "running_" not in x]; print("^(" + "|".join(re.escape(x) for x in b) + ")$" if b else "")' "$1"
}

section "plan + run --backend $BACKEND against the PyTorch fixtures"
for dir in models/*/; do
    m=$(basename "$dir")
    [[ -f $dir/meta.json && -f $dir/fixtures/x.pb ]] || continue
    input=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["input"])' "$dir/meta.json")
    mkdir -p "$WORK/data-$m"
    ln -sf "$PWD/$dir/fixtures/x.pb" "$WORK/data-$m/$input.pb"
    ln -sf "$PWD/$dir/fixtures/labels.pb" "$WORK/data-$m/labels.pb"
    freeze=$(freeze_of "$dir/meta.json")
    for fx in "$dir"/fixtures/train_*.json; do
        f=$(basename "$fx" .json)
        # the autocast curves (train_*_bf16.json) hold our CPU in test_precision; the
        # mixed-precision section below holds CUDA to our CPU
        [[ $f == *_bf16 || $f == *_fp16 ]] && continue
        read -r -a opts <<<"$(plan_opts "$fx")"
        extra=()
        [[ -n $freeze ]] && extra=(--freeze "$freeze")
        plan="$WORK/$m-$f.vplan"
        if ! run "$VP" plan "$dir/model.onnx" --loss ce:logits "${opts[@]}" "${extra[@]}" --dim batch=4 --device h200 \
            -o "$plan" >"$WORK/$m-$f.plan.log"; then
            cat "$WORK/$m-$f.plan.log"
            failed+=("plan $m $f")
            continue
        fi
        if ! run "$VP" run "$plan" --backend "$BACKEND" --steps 5 --data "$WORK/data-$m" --json "$WORK/$m-$f.json" \
            >"$WORK/$m-$f.run.log" 2>&1; then
            cat "$WORK/$m-$f.run.log"
            failed+=("run $m $f")
            continue
        fi
        if ! "$PY" - "$WORK/$m-$f.json" "$fx" "$m $f" <<'EOF'; then failed+=("curve $m $f"); fi
import json, sys
got = json.load(open(sys.argv[1]))["losses"]
want = json.load(open(sys.argv[2]))["losses"]
worst = max(abs(a - b) for a, b in zip(got, want))
ok = len(got) == len(want) and worst <= 1e-4
print("%s %s: losses %s, torch %s, worst difference %.2g"
      % ("ok  " if ok else "FAIL", sys.argv[3], " ".join("%.5f" % x for x in got),
         " ".join("%.5f" % x for x in want), worst))
sys.exit(0 if ok else 1)
EOF
        grep -E '^device ' "$WORK/$m-$f.run.log" || true
    done
done

# plans models/MODEL (AdamW, batch 4, h200) with OPTIONS, runs the plan 3 steps on
# $BACKEND and on cpu, compares the losses (2e-3 relative); failures go to failed[]
plan_both_backends() { # LABEL MODEL OPTIONS... (MODEL: a models/ name, or an .onnx file of static shapes)
    local label=$1 m=$2 dir=models/$2 plan="$WORK/$1.vplan" freeze b file
    shift 2
    local extra=()
    if [[ $m == *.onnx ]]; then
        file=$m
    else
        file=$dir/model.onnx
        freeze=$(freeze_of "$dir/meta.json")
        [[ -n $freeze ]] && extra=(--freeze "$freeze")
        extra+=(--dim batch=4)
    fi
    if ! run "$VP" plan "$file" --loss ce:logits --optimizer adamw "$@" "${extra[@]}" \
        --device h200 -o "$plan" >"$WORK/$label.plan.log"; then
        cat "$WORK/$label.plan.log"
        failed+=("plan $label")
        return
    fi
    for b in "$BACKEND" cpu; do
        if ! run "$VP" run "$plan" --backend "$b" --steps 3 --json "$WORK/$label.$b.json" >"$WORK/$label.$b.log" 2>&1; then
            cat "$WORK/$label.$b.log"
            failed+=("run $label $b")
            return
        fi
    done
    if ! "$PY" tools/bench/gpu_check_tables.py losses "$WORK/$label.$BACKEND.json" "$WORK/$label.cpu.json" "$label ($m)"; then
        failed+=("losses $label")
    fi
}

section "mixed precision: plan --precision bf16|fp16, run --backend $BACKEND against --backend cpu"
for dir in models/*/; do
    m=$(basename "$dir")
    [[ -f $dir/meta.json ]] || continue
    for p in bf16 fp16; do
        plan_both_backends "$m-$p" "$m" --precision "$p"
    done
done

section "convolutions: cuDNN against our kernels (VP_CUDA_NO_CUDNN=1), planned workspaces"
# the same plan twice on the device: cuDNN with the steps' planned workspaces, then our
# own convolution kernels; fp32 losses within 1e-4 relative, bf16 within 2e-3
for p in fp32 bf16; do
    dir=models/cnn
    freeze=$(freeze_of "$dir/meta.json")
    extra=()
    [[ -n $freeze ]] && extra=(--freeze "$freeze")
    plan="$WORK/cudnn-$p.vplan"
    if ! run "$VP" plan "$dir/model.onnx" --loss ce:logits --optimizer adamw --precision "$p" "${extra[@]}" --dim batch=16 \
        --device h200 -o "$plan" >"$WORK/cudnn-$p.plan.log"; then
        cat "$WORK/cudnn-$p.plan.log"
        failed+=("cudnn plan $p")
        continue
    fi
    grep -E '^workspaces:|^arena:' "$WORK/cudnn-$p.plan.log" || true
    if ! run "$VP" run "$plan" --backend "$BACKEND" --steps 5 --json "$WORK/cudnn-$p.on.json" >"$WORK/cudnn-$p.on.log" 2>&1 ||
        ! VP_CUDA_NO_CUDNN=1 run "$VP" run "$plan" --backend "$BACKEND" --steps 5 --json "$WORK/cudnn-$p.off.json" \
            >"$WORK/cudnn-$p.off.log" 2>&1; then
        cat "$WORK/cudnn-$p.on.log" "$WORK/cudnn-$p.off.log" 2>/dev/null
        failed+=("cudnn run $p")
        continue
    fi
    if ! "$PY" - "$WORK/cudnn-$p.on.json" "$WORK/cudnn-$p.off.json" "$p" "$BACKEND" "$EMU" <<'EOF'; then failed+=("cudnn $p"); fi
import json, sys
on, off = (json.load(open(a)) for a in sys.argv[1:3])
tol = 1e-4 if sys.argv[3] == "fp32" else 2e-3
worst = max((abs(a - b) / max(abs(b), 1) for a, b in zip(on["losses"], off["losses"])), default=float("inf"))
conv = on.get("convolutions", "")
used = conv.startswith("cuDNN") or sys.argv[4] != "cuda" or sys.argv[5] == "1"  # the emulation has no cuDNN
ok = len(on["losses"]) == len(off["losses"]) and worst <= tol and used
print("%s cnn %s: cuDNN losses %s, our kernels %s, worst relative difference %.2g (tolerance %g)"
      % ("ok  " if ok else "FAIL", sys.argv[3], " ".join("%.6f" % x for x in on["losses"]),
         " ".join("%.6f" % x for x in off["losses"]), worst, tol))
print("     convolutions: %s | without: %s" % (conv or "-", off.get("convolutions", "-")))
print("     planned workspace (the largest, one step's at a time) %s B; arena %s B, measured peak %s B"
      % (on.get("planned_workspace_bytes", "-"), on.get("arena_bytes"), on.get("measured_peak_bytes", "-")))
if not used:
    print("FAIL: cuDNN did not run the convolutions")
sys.exit(0 if ok else 1)
EOF
done

section "features: QAT, offload, cast fusion, checkpointing on $BACKEND against cpu"
# each feature's plan run on the device and on the CPU backend, losses within 2e-3
# relative: fake-quant (cnn), optimizer-state offload (pinned memory and the copy stream;
# gpt), bf16 with and without cast fusion (gpt), checkpointing under sqrtn (gpt)
features=(
    "qat cnn --qat int8"
    "offload gpt --offload"
    "castfuse gpt --precision bf16"
    "nocastfuse gpt --precision bf16 --no-cast-fusion"
    "remat gpt --remat sqrtn"
)
for spec in "${features[@]}"; do
    read -r name m fopts <<<"$spec"
    read -r -a fopts <<<"$fopts"
    plan_both_backends "feat-$name" "$m" "${fopts[@]}"
done

section "torch 2.x exports (tests/data/torch2) on $BACKEND against cpu"
# every export of the fixture kit, float32 and bf16, run on the device and on the CPU
# backend, losses within 2e-3 relative (cli_cuda_emu holds float32 to 1e-5 on the
# emulation, whose products are OpenBLAS's): each architecture's whole step, its Pad,
# CumSum, InstanceNormalization, Tile and gather kernels included
for k in tests/data/torch2/*/eval_opt0.onnx; do
    m=$(basename "$(dirname "$k")")
    for p in fp32 bf16; do
        plan_both_backends "kit-$m-$p" "$k" --precision "$p"
    done
done

section "tensor parallel over NCCL"
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ $BACKEND != cuda || ${n_gpus:-0} -lt 2 ]] || ! command -v mpirun >/dev/null; then
    echo "skipped: needs two GPUs or more and mpirun (found ${n_gpus:-0} GPUs)"
else
    qkv=tests/data/tp/gpt_qkv
    qopts=(--loss ce:logits --dim batch=2 --freeze '^mask$' --optimizer momentum --lr 0.05 --device h200)
    run "$VP" plan "$qkv/model.onnx" "${qopts[@]}" -o "$WORK/tp1.vplan" >/dev/null || failed+=("tp plan 1")
    run "$VP" run "$WORK/tp1.vplan" --backend cuda --steps 5 | sed -nE 's/^step [0-9]+  loss ([0-9.]+).*/\1/p' >"$WORK/tp1.losses"
    for n in 2 4; do
        ((n <= n_gpus)) || continue
        run "$VP" plan "$qkv/model.onnx" "${qopts[@]}" --tp $n -o "$WORK/tp$n.vplan" >/dev/null || failed+=("tp plan $n")
        if ! run mpirun --allow-run-as-root -np $n "$VP" run "$WORK/tp$n.vplan" --backend cuda --steps 5 >"$WORK/tp$n.log" 2>&1; then
            cat "$WORK/tp$n.log"
            failed+=("tp run $n")
            continue
        fi
        sed -nE 's/^step [0-9]+  loss ([0-9.]+).*/\1/p' "$WORK/tp$n.log" >"$WORK/tp$n.losses"
        grep '^rank ' "$WORK/tp$n.log"
        worst=$(paste "$WORK/tp$n.losses" "$WORK/tp1.losses" | awk '{d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d} END {print w + 0}')
        bytes_ok=$(sed -nE 's/^rank [0-9]+ of [0-9]+: sent ([0-9]+) bytes .*nccl\); planned ([0-9]+)$/\1 \2/p' "$WORK/tp$n.log" |
            awk -v n=$n '$1 != $2 {bad = 1} END {print (bad || NR != n) ? "no" : "yes"}')
        echo "tp $n over NCCL: losses within $worst of one GPU's; bytes counted = planned on every rank: $bytes_ok"
        awk -v w="$worst" 'BEGIN {exit !(w < 1e-5)}' && [[ $bytes_ok == yes ]] || failed+=("tp $n")
    done
fi

section "benchmark: one AdamW training step, batch $BATCH, median of $STEPS steps ($CPU_STEPS on our CPU backend)"
have_torch=0
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then have_torch=1; fi
[[ $BACKEND == cpu ]] && "$PY" -c 'import torch' 2>/dev/null && have_torch=2
[[ $have_torch == 0 ]] && echo "PyTorch with CUDA is not installed for $PY: our side only"
rows=()
for mp in gpt:fp32 cnn:fp32 gpt:bf16 cnn:bf16; do
    m=${mp%:*} p=${mp#*:}
    dir=models/$m
    freeze=$(freeze_of "$dir/meta.json")
    extra=()
    [[ -n $freeze ]] && extra=(--freeze "$freeze")
    plan="$WORK/bench-$m-$p.vplan"
    if ! run "$VP" plan "$dir/model.onnx" --loss ce:logits --optimizer adamw --precision "$p" "${extra[@]}" \
        --dim "batch=$BATCH" --device h200 -o "$plan" >"$WORK/bench-$m-$p.plan.log"; then
        cat "$WORK/bench-$m-$p.plan.log"
        failed+=("bench plan $m $p")
        continue
    fi
    if ! run "$VP" run "$plan" --backend "$BACKEND" --steps "$STEPS" --json "$WORK/bench-$m-$p.json" \
        >"$WORK/bench-$m-$p.run.log" 2>&1; then
        cat "$WORK/bench-$m-$p.run.log"
        failed+=("bench run $m $p")
        continue
    fi
    if ! run "$VP" run "$plan" --backend cpu --steps "$CPU_STEPS" --json "$WORK/bench-$m-$p.cpu.json" \
        >"$WORK/bench-$m-$p.cpu.log" 2>&1; then
        cat "$WORK/bench-$m-$p.cpu.log"
        failed+=("bench cpu run $m $p")
        continue
    fi
    tjson=""
    if [[ $have_torch != 0 && $p == fp32 ]]; then
        dev=cuda
        [[ $have_torch == 2 ]] && dev=cpu
        if run "$PY" tools/bench/torch_step.py --model "$m" --batch "$BATCH" --steps "$STEPS" --device "$dev" \
            --json "$WORK/torch-$m.json"; then
            tjson="$WORK/torch-$m.json"
        else
            failed+=("torch $m")
        fi
    fi
    rows+=("$m $p|$WORK/bench-$m-$p.json|$WORK/bench-$m-$p.cpu.json|$tjson")
done
"$PY" tools/bench/gpu_check_tables.py bench "$BATCH" "${rows[@]}"

section "done"
rm -rf "$WORK"
if ((${#failed[@]})); then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
fi
echo "all device checks passed"
