#!/usr/bin/env bash
# onnx-vplan train-graph: writes a training graph that the tool loads and runs again
# (its loss equals the one `train` prints), and refuses bad usage with exit code 2 and
# a message naming the problem.
set -u
tool=$1
models=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mlp=$models/mlp/model.onnx
fx=$models/mlp/fixtures
expect 0 "usage: onnx-vplan train-graph" -- "$tool" train-graph --help
expect 0 "train-graph MODEL" -- "$tool" --help
expect 2 "usage: onnx-vplan train-graph" -- "$tool" train-graph
expect 2 "-o OUT.onnx is required" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits
expect 2 "--loss is required" -- "$tool" train-graph "$mlp" --dim batch=4 -o "$tmp/x.onnx"
expect 2 "--optimizer and --no-optimizer exclude each other" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits --optimizer adam --no-optimizer -o "$tmp/x.onnx"
expect 2 "unknown option '--frobnicate'" -- "$tool" train-graph "$mlp" --frobnicate
expect 2 "symbolic dim 'batch'" -- "$tool" train-graph "$mlp" --loss ce:logits -o "$tmp/x.onnx"
expect 2 "nope.*cannot create" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits -o "$tmp/nope/x.onnx"

# with an optimizer: the file loads, runs, and gives train's first loss
expect 0 "wrote $tmp/mlp_train.onnx: 6 parameters" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits --optimizer momentum --lr 0.1 -o "$tmp/mlp_train.onnx"
expect 0 "Momentum  *6" -- "$tool" inspect "$tmp/mlp_train.onnx"
want=$("$tool" train "$mlp" --dim batch=4 --loss ce:logits --optimizer momentum --lr 0.1 --data "$fx" | awk '/^step 1 /{print $4}')
got=$("$tool" eval "$tmp/mlp_train.onnx" --input "x=$fx/x.pb" --input "labels=$fx/labels.pb" --output-dir "$tmp/out" |
    awk '$1 == "loss/softmax_cross_entropy:0" {print $5}')
if [[ -n $want && -n $got ]] && awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }'; then
    pass=$((pass + 1))
    echo "PASS: eval of the written graph gives loss $got, train says $want"
else
    fail=$((fail + 1))
    echo "FAIL: eval of the written graph gives loss '$got', train says '$want'"
fi
expect 0 "fc1.weight_update" -- ls "$tmp/out"

# without: standard ONNX plus com.microsoft, the gradients as outputs
expect 0 "outputs: the loss and 6 gradients" -- "$tool" train-graph "$mlp" --dim batch=4 --loss ce:logits --no-optimizer -o "$tmp/mlp_grads.onnx"
expect 0 "ReluGrad  *2" -- "$tool" inspect "$tmp/mlp_grads.onnx"
expect 0 "fc1.weight_grad" -- "$tool" inspect "$tmp/mlp_grads.onnx"
expect 0 "wrote .*cnn.onnx: 20 parameters" -- "$tool" train-graph "$models/cnn/model.onnx" --dim batch=4 --loss ce:logits --optimizer adamw -o "$tmp/cnn.onnx"
expect 0 "BatchNormInternal" -- "$tool" inspect "$tmp/cnn.onnx"
# BatchNormalization exported in training mode (tools/scripts/make_bn_train_export.py):
# BatchNormInternal forward, one BatchNormalizationGrad each, no decomposed statistics
bn=$(dirname "$0")/data/bn_train_export/opset14/model.onnx
expect 0 "22 forward, 1 loss, 26 backward" -- "$tool" train-graph "$bn" --dim batch=4 --loss ce:logits --no-optimizer -o "$tmp/bn.onnx"
expect 0 "BatchNormalizationGrad  *6" -- "$tool" inspect "$tmp/bn.onnx"
expect 0 "BatchNormInternal  *6" -- "$tool" inspect "$tmp/bn.onnx"
expect 0 "unsupported: none" -- "$tool" inspect "$tmp/bn.onnx"

expect_summary
