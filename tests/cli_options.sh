#!/usr/bin/env bash
# Every subcommand parses its options the same way (tools/cli/cli.c): --help lists
# exactly the options the command has and exits 0; an unknown option, a bad value, a
# missing value or argument exits 2 with a message naming the command and the option;
# --opt=value works as --opt value does.
set -u
tool=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mlp=$src/models/mlp/model.onnx
train_opts="--loss --optimizer --lr --momentum --betas --eps --weight-decay --trainable --freeze --attention --precision --fp32-ops --low-ops --no-cast-fusion --keep-weight-copies --keep-norm-outputs --loss-scale --tp --sp --qat --qat-exclude --qat-freeze-after --lora --lora-load --offload --no-fuse --dump-after --passes --lenient"
declare -A options=(
    [inspect]="--dim --json --lenient"
    [eval]="--data --dim --input --output-dir --seed --lenient"
    [train]="$train_opts --steps --data --dim --seed --json --save --merge --qdq --allow-nonfinite --reference"
    [train-graph]="$train_opts --no-optimizer --dim -o --output"
    [plan]="$train_opts --dim --budget --device --remat --ilp-time-limit --arena-time-limit --no-fused-update --fused-update --auto --max-tp --max-batch -o --dot --timeline --json"
    [show]="--json --steps"
    [verify]=""
    [run]="--backend --allow-nonfinite --reference --tf32 --cuda-device --steps --data --seed --json --save-weights --save --save-inputs"
    [codegen]="-o --output --target --prefix --embed-weights --reference"
    [export]="--weights -o --output --model"
    [compare]="--tolerance --lenient"
    [arena]="-o --all --search-seconds --time-limit"
)
declare -A operand=([inspect]=MODEL [eval]=MODEL [train]=MODEL [train-graph]=MODEL [plan]=MODEL [show]=PLAN
    [verify]=PLAN [run]=PLAN [codegen]=PLAN [export]=PLAN [compare]=A [arena]=FILE.csv)

# the options a help text lists: the first words of its option lines
listed() { sed -nE 's/^  (-[-a-z0-9]+)(, (-[-a-z0-9]+))?.*/\1 \3/p' | tr ' ' '\n' | grep . | sort; }

for cmd in inspect eval train train-graph plan show verify run codegen export compare arena; do
    expect 0 "^  $cmd ${operand[$cmd]}" -- "$tool" --help
    expect 0 "^usage: onnx-vplan $cmd ${operand[$cmd]}" -- "$tool" "$cmd" --help
    expect 0 "^usage: onnx-vplan $cmd" -- "$tool" "$cmd" -h
    want=$(printf '%s\n' ${options[$cmd]} -h --help | sort)
    got=$("$tool" "$cmd" --help | listed)
    if [[ $got == "$want" ]]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $cmd --help lists $(echo $got), want $(echo $want)"
    fi
    # every option it lists is one the parser knows
    for o in ${options[$cmd]}; do
        expect 2 "$cmd: " -- "$tool" "$cmd" "$o" --frobnicate
        if grep -q "unknown option '$o'" <<<"$expect_out"; then
            fail=$((fail + 1))
            echo "FAIL: $cmd --help lists $o, but $cmd does not know it: $expect_out"
        fi
    done
    expect 2 "^onnx-vplan: $cmd: unknown option '--frobnicate' (see onnx-vplan $cmd --help)" -- "$tool" "$cmd" x --frobnicate
    expect 2 "^onnx-vplan: $cmd: missing ${operand[$cmd]} (usage: onnx-vplan $cmd " -- "$tool" "$cmd"
    extra=(one two)
    [[ $cmd == compare ]] && extra=(one two three) # A and B
    expect 2 "^onnx-vplan: $cmd: unexpected argument '${extra[-1]}'" -- "$tool" "$cmd" "${extra[@]}"
done

# a bad value for every subcommand: named with the value and what was expected
expect 2 "inspect: --dim expects NAME=VALUE .*got 'batch'" -- "$tool" inspect "$mlp" --dim batch
expect 2 "inspect: --dim expects NAME=VALUE with VALUE a non-negative integer .*got 'batch=-4'" -- "$tool" inspect "$mlp" --dim=batch=-4
expect 2 "eval: --seed expects a non-negative integer, got '-1'" -- "$tool" eval "$mlp" --seed -1
expect 2 "eval: --input expects NAME=FILE.pb, got 'x'" -- "$tool" eval "$mlp" --input x
expect 2 "train: --steps expects a non-negative integer, got 'many'" -- "$tool" train "$mlp" --steps many
expect 2 "train: --lr expects a non-negative number, got 'fast'" -- "$tool" train "$mlp" --lr=fast
for cmd in train train-graph plan; do
    expect 2 "$cmd: --precision expects fp32, bf16 or fp16, got 'fp8'" -- "$tool" "$cmd" "$mlp" --loss ce:logits --dim batch=4 --precision fp8
done
expect 2 "plan: --fp32-ops: unknown op 'Frobnicate'" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --precision bf16 --fp32-ops Relu,Frobnicate
expect 2 "--low-ops: unknown op 'Softmaks'" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --precision fp16 --low-ops Softmaks
expect 2 "--fp32-ops: op 'Gemm' is also in the other list" -- "$tool" train-graph "$mlp" -o "$tmp/x.onnx" --loss ce:logits --dim batch=4 --precision bf16 --fp32-ops Gemm --low-ops Gemm
expect 2 "--fp32-ops applies to --precision bf16 or fp16 only" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --fp32-ops Gemm
expect 2 "--loss-scale expects a power of two (such as 65536 or 1099511627776), got 3" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --precision fp16 --loss-scale 3
expect 2 "--loss-scale applies to --precision fp16 only" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --precision bf16 --loss-scale 1024
expect 0 "dynamic loss scaling from scale 1024, 0 clean steps" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --precision fp16 --loss-scale 1024
expect 0 "precision bf16: 0 nodes low" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --precision bf16 --fp32-ops Gemm
expect 0 "precision bf16: .* 6 weight copies" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --precision bf16
# QAT: bad schemes and variants are usage errors; a regex matching nothing warns; a model
# with nothing to quantise says so
for cmd in train plan; do
    expect 2 "^onnx-vplan: --qat: unknown scheme 'int4'" -- "$tool" "$cmd" "$mlp" --loss ce:logits --dim batch=4 --qat int4
done
expect 2 "^onnx-vplan: --qat: unknown scheme 'uint4'" -- "$tool" train-graph "$mlp" -o "$tmp/x.onnx" --loss ce:logits --dim batch=4 --qat uint4:lsq
expect 2 "--qat: unknown variant 'per-row'" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --qat int8:per-row
expect 2 "--qat-exclude applies to --qat only" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --qat-exclude fc
expect 2 "--qat-freeze-after applies to --qat only" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --qat-freeze-after 3
expect 2 "--qat-exclude '(' is not a valid regular expression" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --qat int8 --qat-exclude '('
expect 0 "warning: --qat-exclude 'nomatch' matches no Conv" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --qat int8 --qat-exclude nomatch
expect 2 "nothing to quantise (no Conv, ConvTranspose, Gemm, MatMul or FusedMatMul node)" -- "$tool" train "$src/tests/data/bad/gather.onnx" --loss ce:y --qat int8
expect 2 "nothing to quantise .* left after --qat-exclude" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --qat int8 --qat-exclude .
expect 0 "qat int8:per-tensor:sym:lsq: 3 nodes, 3 weights, 3 activations (0 residual), 0 excluded, 6 learned scales" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --qat int8:per-tensor:lsq --steps 1
expect 2 "--qdq needs --save and --qat" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --qdq --save "$tmp/q.onnx"
expect 0 "QDQ: 3 weights int8, 3 activations quantised, 3 biases int32" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --qat int8 --save "$tmp/q.onnx" --qdq
expect 2 "train: --eps expects a non-negative number, got 'inf'" -- "$tool" train "$mlp" --eps inf
expect 0 "warning: --dim foo: .* has no input dim of that name" -- "$tool" inspect "$mlp" --dim batch=4 --dim foo=3
# values the parser takes but no training step can use; 0 is never read as "not given"
expect 2 "eps must be more than 0" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --optimizer adam --eps 0
expect 2 "eps applies to --optimizer adam or adamw only" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --eps 1e-6
expect 2 "lr must be more than 0 and at most 1e30" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --lr 1e40
expect 2 "tp must be between 1 and 4096" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --tp 0
expect 2 "qat-freeze-after applies to --qat only" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --qat-freeze-after 0
expect 2 "qat-freeze-after must be at least 1 step" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --qat int8 --qat-freeze-after 0
expect 2 "train-graph: --optimizer expects sgd, momentum, adam or adamw, got 'lion'" -- "$tool" train-graph "$mlp" --optimizer=lion
expect 2 "plan: --budget expects a size (examples: 16GiB, 800MB, 1.5G, 1073741824), got '3.5XB'" -- "$tool" plan "$mlp" --budget 3.5XB
# above zero, yet under one byte: refused as given, never planned as a budget of 0
expect 2 "plan: --budget expects a size (examples: 16GiB, 800MB, 1.5G, 1073741824), got '1e-300'" -- "$tool" plan "$mlp" --budget 1e-300
expect 2 "plan: --remat expects none, sqrtn, dp or ilp, got 'magic'" -- "$tool" plan "$mlp" --remat=magic
expect 2 "show: --json takes no value, got '--json=yes'" -- "$tool" show x.vplan --json=yes
expect 2 "run: --backend expects cpu or cuda, got 'tpu'" -- "$tool" run x.vplan --backend tpu
expect 2 "arena: --search-seconds expects a non-negative number, got '-1'" -- "$tool" arena x.csv --search-seconds -1
expect 2 "arena: --time-limit expects a non-negative number, got '-1'" -- "$tool" arena x.csv --time-limit -1
expect 2 "plan: --arena-time-limit expects a non-negative number, got 'x'" -- "$tool" plan "$mlp" --arena-time-limit x
expect 2 "verify: unknown option '--json'" -- "$tool" verify x.vplan --json

# a missing value; a misspelt option gets the near one suggested
expect 2 "plan: --budget needs a value (--budget SIZE)" -- "$tool" plan "$mlp" --budget
expect 2 "budget 0: a budget must be more than 0 bytes (leave --budget out for none)" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --budget 0
expect 2 "loss reads 'logits' of shape \[0, 10\], which has no elements" -- "$tool" plan "$mlp" --dim batch=0 --loss ce:logits
expect 2 "loss reads 'logits' of shape \[0, 10\], which has no elements" -- "$tool" train "$mlp" --dim batch=0 --loss mse:logits --steps 1
expect 2 "run: --backend needs a value (--backend cpu|cuda)" -- "$tool" run x.vplan --backend
expect 2 "unknown option '--bugdet'; did you mean --budget?" -- "$tool" plan "$mlp" --bugdet 1MiB
expect 2 "unknown option '--outptu'; did you mean --output?" -- "$tool" train-graph "$mlp" --outptu x.onnx
expect 2 "unknown option '--jsn'; did you mean --json?" -- "$tool" show x.vplan --jsn
expect 2 "unknown option '--frobnicate' (see" -- "$tool" plan "$mlp" --frobnicate

# --opt=value and --opt value give the same plan
"$tool" plan "$mlp" --dim batch=4 --loss ce:logits --budget 200KiB --optimizer adamw --json "$tmp/a.json" >/dev/null
expect 0 "arena / bound" -- "$tool" plan "$mlp" --dim=batch=4 --loss=ce:logits --budget=200KiB --optimizer=adamw --json="$tmp/b.json"
expect 0 "" -- cmp <(grep -v planning_seconds "$tmp/a.json") <(grep -v planning_seconds "$tmp/b.json")
expect 0 "wrote $tmp/g.onnx" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits --output="$tmp/g.onnx"

# LoRA: bad specs, the adapters saved apart, reloaded, the merged model written
expect 2 "--lora expects r=RANK" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --lora 8
expect 2 "--merge needs --lora" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --merge "$tmp/m.onnx"
expect 2 "--lora-load applies to --lora only" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --lora-load "$tmp/a.onnx"
expect 2 "matches no float32 weight" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --lora 'r=2:nothing'
expect 0 "saved 3 adapter pairs to $tmp/ad.onnx" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --optimizer adam \
    --lr 0.05 --steps 3 --lora r=4,alpha=8 --save "$tmp/ad.onnx" --merge "$tmp/merged.onnx"
expect 0 "lora r=4 scale 2: 3 adapted weights, 1192 adapter parameters" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 \
    --lora r=4,alpha=8 --lora-load "$tmp/ad.onnx"
expect 2 "is not float32 \\[2, 32\\] (another rank" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --lora r=2 --lora-load "$tmp/ad.onnx"
expect 0 "step 1" -- "$tool" train "$tmp/merged.onnx" --loss ce:logits --dim batch=4

# plan --auto: the candidates weighed, the winner and why, the table in the JSON report
expect 2 "--auto needs --budget" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --auto
expect 2 "--max-tp applies to --auto only" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --budget 1MiB --max-tp 2
expect 2 "it does not take --remat" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --budget 1MiB --auto --remat dp
expect 0 "won: the least estimated step time" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --budget 1MiB --auto \
    --optimizer adam --json "$tmp/auto.json"
expect 0 "" -- grep -q '"candidates"' "$tmp/auto.json"
expect 0 "  2   2  fp32  fused" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --budget 1MiB --auto --precision fp32 --max-tp 2
expect 0 "max batch under the budget" -- "$tool" plan "$mlp" --loss ce:logits --budget 100KiB --auto --max-batch batch
# the plan --auto prints is the search's own (handed back, not planned again): the same
# arena and checkpointing as planning the winner's knobs without --auto
gpt=$src/models/gpt/model.onnx
gpt_opts=(--dim batch=16 --loss ce:logits --optimizer adam --freeze '^causal_mask$' --device h100 --budget 1500000)
expect 0 "fp32  fused     no       dp .*<- chosen" -- "$tool" plan "$gpt" "${gpt_opts[@]}" --auto
auto_plan=$(grep -E "^(arena|checkpointing):" <<<"$expect_out")
expect 0 "^arena:" -- "$tool" plan "$gpt" "${gpt_opts[@]}" --precision fp32 --fused-update --remat dp
if [[ -n $auto_plan && $auto_plan == "$(grep -E "^(arena|checkpointing):" <<<"$expect_out")" ]]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "FAIL: plan --auto's winner differs from its knobs planned alone: '$auto_plan' against '$(grep -E "^(arena|checkpointing):" <<<"$expect_out")'"
fi
# candidates of different builds are planned side by side (VP_SEARCH_THREADS, default
# the processors online): the same winner, table and plan on one thread and on four
for t in 1 4; do
    VP_SEARCH_THREADS=$t "$tool" plan "$gpt" "${gpt_opts[@]}" --auto 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +(fp32|bf16|fp16) |won:|^(arena|checkpointing):" |
        sed 's/not checkpointed: .*/-/' >"$tmp/auto$t.txt"
done
expect 0 "<- chosen" -- cat "$tmp/auto4.txt"
expect 0 "" -- cmp "$tmp/auto1.txt" "$tmp/auto4.txt"
expect 0 "VP_SEARCH_THREADS='two' is not a positive number; planning on the [0-9]* processors online" -- \
    env VP_SEARCH_THREADS=two "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --budget 1MiB --auto

# --offload: Adam's state on the host, the same losses; plan files carry the host block (version 2)
expect 2 "--offload applies to --optimizer adam or adamw only" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --offload
expect 0 "offload: 6 Adam updates on the host, 55400 bytes" -- "$tool" train "$mlp" --loss ce:logits --dim batch=4 --optimizer adam --offload
expect 0 "host: .* beside the arena" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --optimizer adam --offload
expect 0 "host: .* beside the arena" -- "$tool" plan "$mlp" --loss ce:logits --dim batch=4 --optimizer adam --offload -o "$tmp/o.vplan"
expect 0 "step 1  loss" -- "$tool" run "$tmp/o.vplan"

# compare: two models' weights; a trained one against where it started, a model of other
# weights named; --tolerance decides the exit
expect 0 "compared 6 float initializers (.* elements): largest absolute difference 0 " -- "$tool" compare "$mlp" "$mlp" --tolerance 0
expect 0 "" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 1 --save "$tmp/t1.onnx"
expect 0 "largest relative [0-9.e-]* ('.*', to its largest magnitude)" -- "$tool" compare "$tmp/t1.onnx" "$mlp"
expect 1 "differs by more than --tolerance 1e-09 both absolutely and relatively" -- "$tool" compare "$tmp/t1.onnx" "$mlp" --tolerance 1e-9
expect 1 "float initializers of .*mlp/model.onnx not in .*gpt/model.onnx" -- "$tool" compare "$mlp" "$src/models/gpt/model.onnx"
expect 2 "compare: --tolerance expects a non-negative number, got 'x'" -- "$tool" compare "$mlp" "$mlp" --tolerance x

expect_summary
