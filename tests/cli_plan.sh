#!/usr/bin/env bash
# The training and planning commands from a user's seat: the right numbers for the
# bundled models, and clear errors (exit 2) for bad losses, budgets and plan files.
set -u
tool=$1
src=$2
bad=$src/tests/data/bad
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mlp=$src/models/mlp/model.onnx
gpt=$src/models/gpt/model.onnx
cnn=$src/models/cnn/model.onnx
# inspect: torch's parameter counts (models/*/meta.json)
expect 0 "params: 6922 in 6 tensors" -- "$tool" inspect "$mlp" --dim batch=4
expect 0 "19994 trainable, 288 BatchNorm running statistics" -- "$tool" inspect "$src/models/cnn/model.onnx" --dim batch=4
expect 0 '"trainable_params": 19994' -- "$tool" inspect "$src/models/cnn/model.onnx" --dim batch=4 --json
# train: torch's first loss on the fixture batch (models/mlp/fixtures/loss.pb = 2.444989)
expect 0 "step 1  loss 2.444989" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --optimizer momentum --lr 0.1 --steps 2 --data "$src/models/mlp/fixtures"
expect 0 "step 1" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 1 --json "$tmp/t.json"
expect 0 '"losses"' -- cat "$tmp/t.json"
expect 0 "saved trained weights" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 1 --save "$tmp/trained.onnx"
expect 0 "params: 6922" -- "$tool" inspect "$tmp/trained.onnx" --dim batch=4
expect 2 "--loss names 'nope', which the model does not have" -- "$tool" train "$mlp" --dim batch=4 --loss ce:nope
expect 2 "needs logits of rank 2 or more" -- "$tool" train "$bad/rank0_output.onnx" --loss ce:y
expect 2 "node 'mod_it' (Mod): has no gradient rule" -- "$tool" train "$bad/no_gradient_rule.onnx" --loss mse:y
# inspect predicts what train refuses
expect 0 "^  Mod (1): mod_it" -- "$tool" inspect "$bad/no_gradient_rule.onnx"
expect 0 '"no_gradient_rule": \[\]' -- "$tool" inspect "$mlp" --dim batch=4 --json
# Loop: unrolled when its trip count is known once dims are bound (nn.EmbeddingBag,
# tools/scripts/make_arch_models.py: torch's first loss on the fixture batch), else
# listed by inspect and refused by train, both naming the node and why
bag=$src/tests/data/arch/embbag_mean_op13
expect 0 "step 1  loss 1.178219" -- "$tool" train "$bag/model.onnx" --dim batch=2 --loss ce:logits --lr 0.1 --steps 2 --data "$bag/fixtures"
expect 0 "^  Loop (1): repeat_n" -- "$tool" inspect "$bad/loop_data_trip.onnx"
expect 0 "its trip count 'n' depends on the input data" -- "$tool" inspect "$bad/loop_data_trip.onnx"
expect 2 "node 'repeat_n' (Loop): its trip count 'n' depends on the input data" -- "$tool" train "$bad/loop_data_trip.onnx" --loss mse:y
expect 0 "step 2  loss" -- "$tool" train "$bad/loop_out_of_order.onnx" --loss mse:y --steps 2
expect 0 "^  Loop (1): while_negative" -- "$tool" inspect "$bad/loop_data_cond.onnx"
expect 2 "node 'while_negative' (Loop): the condition .* of iteration 1 depends on the input data" -- "$tool" train "$bad/loop_data_cond.onnx" --loss mse:y
expect 0 "warning: --freeze 'nothing_matches' matches no parameter" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --freeze nothing_matches
expect 2 "--optimizer expects sgd, momentum, adam or adamw" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --optimizer lion
expect 2 "--loss is required" -- "$tool" plan "$mlp" --dim batch=4
# fusion before autodiff: exporter patterns and attention cores become one op each
expect 0 "fused 2 attention, 6 Q, K, V read in place of their head transposes, 5 LayerNormalization, 2 Gelu, 9 MatMul of a transposed weight" -- "$tool" plan "$src/models/gpt_ln_decomposed/model.onnx" --dim batch=8 --loss ce:logits --freeze '^causal_mask$'
expect 0 "frozen ^causal_mask\$; fused 2 Gelu, 9 MatMul of a transposed weight, 2 Gelu into its MatMul; 5 norms run again for the backward$" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --attention plain
expect 0 "forward 75," -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --attention plain --no-fuse
expect 2 "--attention expects" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --attention flash
# plan, show, verify, run
expect 0 "arena / bound" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' -o "$tmp/gpt.vplan" --json "$tmp/gpt.json"
expect 0 '"lower_bound_bytes"' -- cat "$tmp/gpt.json"
expect 0 "wrote .*gpt.svg" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --budget 1MiB --dot "$tmp/gpt.dot" --timeline "$tmp/gpt.svg"
expect 0 "" -- dot -Tsvg "$tmp/gpt.dot" -o "$tmp/gpt_dot.svg"
expect 0 "<svg" -- head -c 400 "$tmp/gpt.svg"
expect 0 "sound: " -- "$tool" verify "$tmp/gpt.vplan"
expect 0 "step 2  loss" -- "$tool" run "$tmp/gpt.vplan" --steps 2
expect 0 '"arena_bytes"' -- "$tool" show "$tmp/gpt.vplan" --json
# mixed precision: weight copies in every report, bytes by dtype, the plan runs
expect 0 "precision bf16: .* weight copies" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --precision bf16 -o "$tmp/gpt16.vplan" --json "$tmp/gpt16.json" --dot "$tmp/gpt16.dot" --timeline "$tmp/gpt16.svg"
expect 0 '"weight_copies": [1-9]' -- cat "$tmp/gpt16.json"
expect 0 '"bfloat16": [1-9]' -- cat "$tmp/gpt16.json"
expect 0 "weight_copies" -- cat "$tmp/gpt16.svg"
expect 0 ">bfloat16</text>" -- cat "$tmp/gpt16.svg"
expect 0 ">bytes by dtype</text>" -- cat "$tmp/gpt16.svg"
expect 0 "bf16\", tooltip=.*fillcolor=\"#[0-9a-f]*;0.6:#[0-9a-f]*\", gradientangle=270, .*dashed" -- cat "$tmp/gpt16.dot"
expect 0 "" -- dot -Tsvg "$tmp/gpt16.dot" -o "$tmp/gpt16_dot.svg"
expect 0 "sound: " -- "$tool" verify "$tmp/gpt16.vplan"
expect 0 "step 2  loss" -- "$tool" run "$tmp/gpt16.vplan" --steps 2
# model states per parameter, Adam with fp16 copies: the literature's 16 bytes (master 4, copy 2,
# gradient 2, moments 8) with the gradient reaching the update in float32 (4), as autocast's does
expect 0 "per trainable parameter (6922): parameters 4.00 B, weight copies 2.00 B, gradients 4.00 B, optimizer state 8.00 B; 18.00 B in all" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --optimizer adam --precision fp16 --keep-weight-copies --json "$tmp/mlp16.json"
expect 0 '"bytes_per_trainable_param":{"parameters":4,"weight_copies":2,"gradients":4,"optimizer_state":8\.0' -- tr -d '\n ' < "$tmp/mlp16.json"
# by default each weight the backward reads is cast again there (2 of the MLP's 3): a
# second copy buffer each, never alive with the first, so the arena is no larger; the
# same losses bit for bit
expect 0 "6 weight copies (13844 bytes), 2 cast again for the backward" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --optimizer adam --precision fp16 --json "$tmp/mlp16r.json"
arena_of() { tr -d '\n ' <"$1" | sed -E 's/.*"arena_bytes":([0-9]+).*/\1/'; }
expect 0 "" -- test "$(arena_of "$tmp/mlp16r.json")" -le "$(arena_of "$tmp/mlp16.json")"
expect 0 "memory by dtype: .*float16" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --precision fp16
expect 3 "does NOT fit" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --budget 100KiB --remat none
expect 0 "checkpointing: dp" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --budget 1MiB
expect 0 "max batch under the budget" -- "$tool" plan "$gpt" --loss ce:logits --freeze '^causal_mask$' --budget 2MiB --max-batch batch
expect 2 "--budget expects a size (examples: 16GiB, 800MB, 1.5G, 1073741824), got 'lots'" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --budget lots
expect 2 "--device expects cpu, a100, h100 or h200, got 'tpu'" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --device tpu
# ilp: Checkmate's MILP through GLPK; its plan runs; what it cannot do, it says
# (cnn: with output-based ReluGrad the mlp keeps nothing worth recomputing, so no budget
# below its arena fits and none above makes the MILP run).  On a GPU profile: the CPU
# profile's convolution workspaces are what oneDNN asks for on this machine's ISA, and
# under an SSE4.1 cap the same budget made GLPK run out its time.  The MILP recomputes
# conv1 twice there, and each copy's step gets a workspace buffer of its own (once the
# same one, a plan that its own reader refused: "duplicate name
# '/conv1/Conv/recompute.workspace'"); GLPK proves it optimal in about 1 s
expect 0 "MILP (Checkmate, GLPK): optimal; .* recompute [0-9.]*[1-9][0-9.]* ms" -- "$tool" plan "$cnn" --dim batch=4 --loss ce:logits --optimizer adamw --budget 1190000 --remat ilp --device h100 -o "$tmp/cnn_ilp.vplan"
expect 0 "step 2  loss" -- "$tool" run "$tmp/cnn_ilp.vplan" --steps 2
expect 0 "sound: " -- "$tool" verify "$tmp/cnn_ilp.vplan"
expect 2 "no recompute schedule fits the budget" -- "$tool" plan "$mlp" --dim batch=32 --loss ce:logits --budget 1KiB --remat ilp
expect 2 "GLPK found no schedule within 0.001 s" -- "$tool" plan "$gpt" --dim batch=32 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --budget 2MB --remat ilp --ilp-time-limit 0.001
expect 2 "--ilp-time-limit expects a non-negative number, got 'soon'" -- "$tool" plan "$mlp" --dim batch=32 --loss ce:logits --budget 1MiB --remat ilp --ilp-time-limit soon
expect 2 "applies to --remat ilp only" -- "$tool" plan "$mlp" --dim batch=32 --loss ce:logits --budget 1MiB --ilp-time-limit 5
expect 2 "--remat expects none, sqrtn, dp or ilp" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --remat magic
# optimizer-state offload in a plan file (format version 2): the host block travels with
# the plan, `run` trains to the losses of `train --offload` and of the plan without
# offload bit for bit; codegen refuses it by name; a damaged plan's host block is
# refused by test_offload
losses() { tr -d ' \n' < "$1" | sed -n 's/.*"losses":\[\([^]]*\)\].*/\1/p'; }
same_losses() { # FILE FILE: the same non-empty losses
    local a b
    a=$(losses "$1") b=$(losses "$2")
    echo "$1: $a; $2: $b"
    [[ -n $a && $a == "$b" ]]
}
fix=$src/models/mlp/fixtures
expect 0 "host: .* beside the arena" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --optimizer adamw --offload -o "$tmp/off.vplan"
expect 0 "" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --optimizer adamw -o "$tmp/on.vplan"
expect 0 "sound: " -- "$tool" verify "$tmp/off.vplan"
expect 0 "host: .* beside the arena" -- "$tool" show "$tmp/off.vplan"
expect 0 " host@[0-9]" -- "$tool" show "$tmp/off.vplan" --steps
expect 0 "step 3  loss" -- "$tool" run "$tmp/off.vplan" --steps 3 --data "$fix" --json "$tmp/off.json"
expect 0 "step 3  loss" -- "$tool" run "$tmp/on.vplan" --steps 3 --data "$fix" --json "$tmp/on.json"
expect 0 "step 3  loss" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --optimizer adamw --offload --steps 3 --data "$fix" --json "$tmp/train_off.json"
expect 0 "" -- same_losses "$tmp/off.json" "$tmp/on.json"
expect 0 "" -- same_losses "$tmp/off.json" "$tmp/train_off.json"
expect 2 "keeps [0-9]* bytes on the host (optimizer-state offload, --offload): codegen writes steps on one arena" -- "$tool" codegen "$tmp/off.vplan" -o "$tmp/off_c"
# LoRA on convolutions (A a convolution to r channels, B 1x1 back), trained, saved, reloaded
# and merged; with --tp, a rank --tp does not divide is refused naming the adapter (each pair
# splits along its rank: cli_tp trains it under mpirun)
expect 0 "lora r=2 scale 1: 7 adapted weights" -- "$tool" plan "$cnn" --dim batch=4 --loss ce:logits --lora r=2
expect 0 "saved 7 adapter pairs" -- "$tool" train "$cnn" --dim batch=4 --loss ce:logits --optimizer adamw --lora r=2 --steps 2 --save "$tmp/cnn_lora.onnx" --merge "$tmp/cnn_merged.onnx"
expect 0 "step 1" -- "$tool" train "$cnn" --dim batch=4 --loss ce:logits --lora r=2 --lora-load "$tmp/cnn_lora.onnx" --steps 1
expect 0 "19994 trainable" -- "$tool" inspect "$tmp/cnn_merged.onnx" --dim batch=4
expect 2 "node '.*/lora_A' (com.microsoft.FusedMatMul): --tp 2 does not divide the output features of its weight (3)" -- "$tool" plan "$gpt" --dim batch=8 --loss ce:logits --freeze '^causal_mask$' --lora r=3 --tp 2
# damaged plan files
size=$(stat -c %s "$tmp/gpt.vplan")
head -c $((size / 2)) "$tmp/gpt.vplan" >"$tmp/truncated.vplan"
expect 2 "truncated plan file" -- "$tool" verify "$tmp/truncated.vplan"
cat "$tmp/gpt.vplan" "$tmp/gpt.vplan" >"$tmp/trailing.vplan"
expect 2 "trailing.vplan: corrupt plan file (header says [0-9]* payload bytes, the file has [0-9]*: bytes after the payload)" -- "$tool" verify "$tmp/trailing.vplan"
cp "$tmp/gpt.vplan" "$tmp/flipped.vplan"
printf '\x5a' | dd of="$tmp/flipped.vplan" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect 2 "checksum mismatch" -- "$tool" run "$tmp/flipped.vplan"
cp "$tmp/gpt.vplan" "$tmp/version.vplan"
printf '\x09' | dd of="$tmp/version.vplan" bs=1 seek=6 conv=notrunc status=none
expect 2 "plan format version 9, this onnx-vplan reads versions 1 to 2" -- "$tool" show "$tmp/version.vplan"
expect 2 "not an onnx-vplan plan file" -- "$tool" show "$mlp"
# the arena alone
printf 'id,lower,upper,size\n0,0,2,64\n1,1,3,64\n2,2,4,128\n' >"$tmp/a.csv"
expect 0 "lower bound: 192 bytes" -- "$tool" arena "$tmp/a.csv" -o "$tmp/out.csv"
printf 'id,lower,upper,size\n0,5,2,64\n' >"$tmp/bad.csv"
expect 2 "lifetime \[5, 2)" -- "$tool" arena "$tmp/bad.csv"
# numbers the searches' int64_t sums would overflow are refused, naming the line and field
printf 'id,lower,upper,size\n0,0,5,99999999999999999999\n' >"$tmp/big.csv"
expect 2 "big.csv:2: size is out of range (at most 2^62 bytes)" -- "$tool" arena "$tmp/big.csv"
printf '0,0,5,4611686018427387904\n1,0,5,1\n' >"$tmp/sum.csv"
expect 2 "sum.csv:2: the sizes up to buffer 1 add up past 2^62 bytes" -- "$tool" arena "$tmp/sum.csv"
printf '0,-4611686018427387904,4611686018427387904,8\n' >"$tmp/span.csv"
expect 2 "span.csv:1: lower is out of range (steps within +-2^61)" -- "$tool" arena "$tmp/span.csv"
# -o writes back the file's own ids
printf 'id,lower,upper,size\n17,0,2,64\n5,1,3,64\n' >"$tmp/ids.csv"
expect 0 "lower bound: 128 bytes" -- "$tool" arena "$tmp/ids.csv" -o "$tmp/ids_out.csv"
expect 0 "^5,1,3,64," -- cat "$tmp/ids_out.csv"
printf '0 , 0 , 2 , 64 \r\n1,1,3,64\n' >"$tmp/spaces.csv"
expect 0 "lower bound: 128 bytes" -- "$tool" arena "$tmp/spaces.csv"
# a loss or a parameter that stops being finite stops train and run (exit 1), naming the
# first non-finite value of the step and its node; --allow-nonfinite goes on
expect 1 "step 2: the loss 'loss/softmax_cross_entropy:0' is not finite; the first non-finite value of the step is '/fc2/Gemm_output_0', made by node '/fc2/Gemm' (Gemm)" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 3 --lr 1e30
expect 0 "step 3  loss nan" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 3 --lr 1e30 --allow-nonfinite
expect 0 "" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --lr 1e30 -o "$tmp/nonfinite.vplan"
expect 1 "step 2: the loss is nan, not finite; stopped" -- "$tool" run "$tmp/nonfinite.vplan" --steps 3
expect 0 "step 3  loss nan" -- "$tool" run "$tmp/nonfinite.vplan" --steps 3 --allow-nonfinite
# the pipeline as a list of named passes, and the IR between them
expect 0 " 17  autodiff  " -- "$tool" plan --passes
expect 0 " 32  verify  " -- "$tool" plan --passes
expect 0 "backward  /fc3/Gemm_grad/Gemm_2:0:f32\[10,64\] = Gemm(loss/softmax_cross_entropy_grad" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --dump-after autodiff
expect 0 "# IR after autodiff: 17 nodes" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --dump-after autodiff
# (on a GPU profile: the CPU profile's oneDNN workspaces, and so the plan, depend on the ISA)
expect 0 "recompute .* = Conv(" -- "$tool" plan "$cnn" --dim batch=4 --loss ce:logits --optimizer adamw --budget 1250000 --device h100 --dump-after remat
expect 0 "optimizer .* = vplan.Adam(" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits --optimizer adamw -o "$tmp/tg.onnx" --dump-after optimizer
expect 2 "no pass named 'autodif' (onnx-vplan plan --passes lists them)" -- "$tool" plan "$mlp" --loss ce:logits --dump-after autodif
expect 2 "--dump-after remat: a pass of \`plan\` only" -- "$tool" train "$mlp" --dim batch=4 --loss ce:logits --steps 1 --dump-after remat
expect 2 "--dump-after shows one build of the step; --auto makes many" -- "$tool" plan "$mlp" --dim batch=4 --loss ce:logits --budget 1MiB --auto --dump-after loss
# hostile CSVs: a repeated id, a directory, a FIFO (refused at once, never read), binary
# (shown escaped, never echoed raw), a line longer than the reader's
printf 'id,lower,upper,size\n1,0,2,8\n2,1,3,8\n1,2,4,8\n' >"$tmp/dup.csv"
expect 2 "dup.csv: buffer id 1 appears twice (buffers #1 and #3 in the file)" -- "$tool" arena "$tmp/dup.csv"
expect 2 "$tmp: is a directory, not a regular file" -- "$tool" arena "$tmp"
mkfifo "$tmp/fifo.csv"
expect 2 "fifo.csv: is a FIFO, not a regular file" -- timeout 10 "$tool" arena "$tmp/fifo.csv"
printf 'id,lower,upper,size\n\x01\x9b[31m\xff,2\n' >"$tmp/binary.csv"
expect 2 "binary.csv:2: expected 'id,lower,upper,size', got '\\\\x01\\\\x9b\[31m\\\\xff,2'" -- "$tool" arena "$tmp/binary.csv"
printf '1,0,2,%0600d\n' 7 >"$tmp/long.csv"
expect 2 "long.csv:1: a line of over 510 bytes" -- "$tool" arena "$tmp/long.csv"

# a torch 1.13 train-mode export with Dropout (tests/data/tp/gpt_drop): each of its 7
# Dropouts reads the step count the optimizer carries (a new mask every step, as PyTorch
# draws; test_dropout checks the masks), the 2 of the attention probabilities fused into
# their attention cores, so no warning of masks repeated across steps
expect 0 "vplan_step" -- "$tool" plan "$src/tests/data/tp/gpt_drop/model.onnx" --dim batch=2 --loss ce:logits \
    --dump-after optimizer
if [[ $(grep -c "= Dropout(.*, vplan.dropout_step)" <<<"$expect_out") -ne 5 ||
      $(grep -c "= vplan.Attention(.*, vplan.dropout_step)" <<<"$expect_out") -ne 2 ]] ||
    grep -q "stays the same" <<<"$expect_out"; then
    fail=$((fail + 1))
    echo "FAIL: gpt_drop: want 5 Dropouts and 2 attention cores reading the step count and no repeated-mask warning, got: ${expect_out:0:800}"
fi
# the fused attention cores draw the decomposed Dropouts' masks where they read them: 3
# steps train to the decomposed step's losses (within 1e-5; the products sum in another
# order)
drop=$src/tests/data/tp/gpt_drop
expect 0 "fused 2 attention" -- "$tool" train "$drop/model.onnx" --dim batch=2 --loss ce:logits --optimizer adamw \
    --steps 3 --data "$drop/fixtures" --json "$tmp/drop_fused.json"
expect 0 "^step 3 " -- "$tool" train "$drop/model.onnx" --dim batch=2 --loss ce:logits --optimizer adamw \
    --steps 3 --data "$drop/fixtures" --attention plain --json "$tmp/drop_plain.json"
losses() { tr -d ' \n' <"$1" | sed -n 's/.*"losses":\(\[[^]]*\]\).*/\1/p'; }
if ! awk -v a="$(losses "$tmp/drop_fused.json")" -v b="$(losses "$tmp/drop_plain.json")" 'BEGIN {
        gsub(/[][]/, "", a); gsub(/[][]/, "", b); n = split(a, x, ","); if (n != 3 || split(b, y, ",") != n) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * (y[i] < 0 ? -y[i] : y[i])) exit 1 }
    }'; then
    fail=$((fail + 1))
    echo "FAIL: gpt_drop: fused losses $(losses "$tmp/drop_fused.json"), decomposed $(losses "$tmp/drop_plain.json")"
fi

# train --save records the step count the masks were drawn for: training the saved model
# counts on from it, so its first step draws what a longer run's next step draws (plain
# SGD: no optimizer state to lose between the runs), bit for bit
expect 0 "^step 3 " -- "$tool" train "$drop/model.onnx" --dim batch=2 --loss ce:logits --optimizer sgd --steps 3 \
    --data "$drop/fixtures" --json "$tmp/drop3.json"
expect 0 "^step 2 " -- "$tool" train "$drop/model.onnx" --dim batch=2 --loss ce:logits --optimizer sgd --steps 2 \
    --data "$drop/fixtures" --save "$tmp/drop2.onnx"
expect 0 "^step 1 " -- "$tool" train "$tmp/drop2.onnx" --dim batch=2 --loss ce:logits --optimizer sgd --steps 1 \
    --data "$drop/fixtures" --json "$tmp/drop_resumed.json"
# and so does `run PLAN --save`, from the plan's own step count
expect 0 "^wrote " -- "$tool" plan "$drop/model.onnx" --dim batch=2 --loss ce:logits --optimizer sgd -o "$tmp/drop.vplan"
expect 0 "with 38 trained initializers" -- "$tool" run "$tmp/drop.vplan" --steps 2 --data "$drop/fixtures" \
    --save "$tmp/drop_run2.onnx"
expect 0 "^step 1 " -- "$tool" train "$tmp/drop_run2.onnx" --dim batch=2 --loss ce:logits --optimizer sgd --steps 1 \
    --data "$drop/fixtures" --json "$tmp/drop_run_resumed.json"
third=$(losses "$tmp/drop3.json" | tr -d '[]' | cut -d, -f3)
for r in drop_resumed drop_run_resumed; do
    resumed=$(losses "$tmp/$r.json" | tr -d '[]')
    if [[ -z $third || $third != "$resumed" ]]; then
        fail=$((fail + 1))
        echo "FAIL: gpt_drop resumed ($r): step 1 loss $resumed, the 3-step run's third $third"
    fi
done

expect_summary
