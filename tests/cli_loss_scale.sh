#!/usr/bin/env bash
# fp16 dynamic loss scaling from a user's seat (`train --precision fp16`, issue #13):
# - a forced overflow (--loss-scale 2^24, far past float16's range for models/mlp's
#   gradients) skips steps, each halving the scale, and training goes on;
# - the skipped steps leave parameters AND optimizer state bit-identical: the run's
#   losses after the last skip are, to the last bit, those of a run that starts at the
#   scale the skips reached.  Adam's moments and its step count (the bias correction)
#   enter every later update, so a skipped step that touched any of them would show;
# - `--save` writes the scale and its clean-step count into the model's metadata, and
#   training the saved model resumes from them (unless --loss-scale says otherwise).
set -u
tool=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mlp=$src/models/mlp/model.onnx
opts=(--dim batch=4 --loss ce:logits --optimizer adam --precision fp16 --data "$src/models/mlp/fixtures")

# The elements of the JSON array KEY in FILE (train --json writes one a line), one a line.
arr() { sed -n "/\"$2\": \[/,/\]/p" "$1" | sed '1d;$d' | tr -d ' ,'; }

expect 0 "step 1 .*overflow: step skipped, loss scale 16777216 -> 8388608" -- \
    "$tool" train "$mlp" "${opts[@]}" --loss-scale 16777216 --steps 12 --json "$tmp/a.json" --save "$tmp/a.onnx"
skipped=$(arr "$tmp/a.json" skipped_steps | wc -l)
scales=($(arr "$tmp/a.json" loss_scales))
losses=($(arr "$tmp/a.json" losses))
[[ $skipped -ge 2 && $skipped -le 8 ]] && expect 0 "" -- true ||
    expect 0 "between 2 and 8 leading steps skipped, got $skipped" -- false
expect 0 "^1 2 3" -- echo "$(arr "$tmp/a.json" skipped_steps | tr '\n' ' ')"
# every skipped step saw the same parameters: the same loss to the last bit
same=1
for ((k = 1; k <= skipped; k++)); do [[ ${losses[k]} == "${losses[0]}" ]] || same=0; done
expect 0 "1" -- echo "$same"
# after the skips: a float16 training curve that goes down
expect 0 "1" -- awk -v a="${losses[skipped]}" -v b="${losses[11]}" 'BEGIN { print (b < a - 0.1) }'

# the same training started at the scale the skips reached: bit-identical losses
reached=${scales[skipped]}
expect 0 "from scale $reached, 0 clean steps" -- \
    "$tool" train "$mlp" "${opts[@]}" --loss-scale "$reached" --steps $((12 - skipped)) --json "$tmp/b.json"
expect 0 "^${losses[*]:skipped} \$" -- echo "$(arr "$tmp/b.json" losses | tr '\n' ' ')"
expect 0 '"skipped_steps":\[\]' -- tr -d '\n ' < "$tmp/b.json"

# --save keeps the scale and the count of clean steps since the last change (12 steps, the
# last `skipped` of them skipped: 12 - skipped clean ones); the saved model resumes there
expect 0 "from scale $reached, $((12 - skipped)) clean steps" -- "$tool" train "$tmp/a.onnx" "${opts[@]}" --steps 1
expect 0 "from scale 1024, 0 clean steps" -- "$tool" train "$tmp/a.onnx" "${opts[@]}" --steps 1 --loss-scale 1024
# bf16 and fp32 need no scaling and ignore what fp16 saved
expect 0 "step 1  loss" -- "$tool" train "$tmp/a.onnx" --dim batch=4 --loss ce:logits --precision bf16 --steps 1
# the model's first loss resumed is the 13th of the run that saved it (the weights are saved)
expect 0 "step 13  loss $(awk 'NR == 1 { print $4 }' <("$tool" train "$tmp/a.onnx" "${opts[@]}" --steps 1 | grep '^step 1 '))" -- \
    "$tool" train "$mlp" "${opts[@]}" --loss-scale 16777216 --steps 13

expect_summary
