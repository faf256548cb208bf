#!/usr/bin/env bash
# Hostile input (issue 40) is refused with exit 2 and a message naming the file and the
# reason, never a crash or a hang: a FIFO or a directory as the model or its external data,
# external data through a symlink out of the model's folder, graphs nested 3000 deep,
# regular expressions that would crash regcomp, attributes of the wrong type, unknown
# attributes and opsets (--lenient: warnings).  Models come from make_hostile_models.py,
# written at test time; every command runs under a timeout, so a hang fails, not stalls.
set -u
tool=$1
src=$2
python=${3:-python3}
source "$(dirname "$0")/expect.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" "$src/tests/make_hostile_models.py" "$tmp" || { echo "make_hostile_models.py failed"; exit 1; }
t="timeout 60"
mlp=$src/models/mlp/model.onnx

# 1. graphs nested 3000 deep: refused before protobuf-c's recursive unpacking; 3 deep loads
expect 2 "deep_if.onnx: graphs are nested 3001 deep .*at most 64" -- $t "$tool" inspect "$tmp/deep_if.onnx"
expect 0 "opset 13" -- $t "$tool" inspect "$tmp/if_nested3.onnx"

# 2. not regular files: a FIFO as the model or as its external data, a directory
mkfifo "$tmp/fifo.onnx" "$tmp/fifo.bin"
expect 2 "fifo.onnx: is a FIFO, not a regular file" -- $t "$tool" inspect "$tmp/fifo.onnx"
expect 2 "external data file .*fifo.bin: is a FIFO, not a regular file" -- $t "$tool" inspect "$tmp/ext_fifo.onnx"
mkdir "$tmp/dir.onnx"
expect 2 "dir.onnx: is a directory, not a regular file" -- $t "$tool" inspect "$tmp/dir.onnx"
expect 2 "fifo.onnx: is a FIFO" -- $t "$tool" plan "$tmp/fifo.onnx" --loss output:y

# 3. external data through a symlink: out of the model's folder refused, inside it read
ln -s /etc/passwd "$tmp/link.bin"
expect 2 "location 'link.bin' resolves to '/etc/passwd', outside the model's folder" -- $t "$tool" inspect "$tmp/ext_link.onnx"
rm "$tmp/link.bin"
head -c 24 /dev/zero >"$tmp/zeros.bin"
ln -s zeros.bin "$tmp/link.bin"
expect 0 "y  *float32  *\[2, 3\]" -- $t "$tool" eval "$tmp/ext_link.onnx"

# 4. regular expressions bounded before regcomp (20,000 '(' crashed glibc)
parens=$(printf '(%.0s' $(seq 20000))
expect 2 "--freeze: the regular expression is 20000 bytes long (at most 4096)" -- \
    $t "$tool" train "$mlp" --loss ce:logits --optimizer sgd --steps 1 --dim batch=2 --freeze "$parens"
deep=$(printf '(%.0s' $(seq 100))a$(printf ')%.0s' $(seq 100))
expect 2 "--freeze: the regular expression nests groups 100 deep (at most 64)" -- \
    $t "$tool" train "$mlp" --loss ce:logits --optimizer sgd --steps 1 --dim batch=2 --freeze "$deep"
expect 2 "--qat-exclude: the regular expression nests groups 100 deep" -- \
    $t "$tool" plan "$mlp" --loss ce:logits --dim batch=2 --qat int8 --qat-exclude "$deep"
expect 2 "--lora regex: the regular expression is 20000 bytes long" -- \
    $t "$tool" plan "$mlp" --loss ce:logits --dim batch=2 --lora "r=2:$parens"
expect 2 "--freeze '(' is not a valid regular expression" -- \
    $t "$tool" train "$mlp" --loss ce:logits --optimizer sgd --steps 1 --dim batch=2 --freeze '('
expect 0 "step" -- $t "$tool" train "$mlp" --loss ce:logits --optimizer sgd --steps 1 --dim batch=2 --freeze '((fc1))'

# 5. attributes against ONNX's schema
expect 2 "gemm_transb_float.onnx: node 'fc' (Gemm): attribute 'transB' is FLOAT, but ONNX's Gemm (opset 13) takes INT" -- \
    $t "$tool" inspect "$tmp/gemm_transb_float.onnx"
expect 2 "node 'fc' (Gemm): attribute 'transB' is STRING, but ONNX's Gemm (opset 13) takes INT" -- \
    $t "$tool" eval "$tmp/gemm_transb_string.onnx" --lenient
expect 0 "y  *float32  *\[2, 3\]" -- $t "$tool" eval "$tmp/gemm_ok.onnx"
expect 2 "node 'relu' (Relu): unknown attribute 'frobnicate'.*--lenient" -- $t "$tool" inspect "$tmp/relu_unknown_attr.onnx"
expect 0 "warning: .*unknown attribute 'frobnicate'" -- $t "$tool" eval "$tmp/relu_unknown_attr.onnx" --lenient
expect 2 "relu_opset999.onnx: imports ONNX opset 999; onnx-vplan implements opsets up to" -- \
    $t "$tool" inspect "$tmp/relu_opset999.onnx"
expect 0 "warning: .*imports ONNX opset 999" -- $t "$tool" inspect "$tmp/relu_opset999.onnx" --lenient
expect 2 "imports ONNX opset 999" -- $t "$tool" train-graph "$tmp/relu_opset999.onnx" --loss output:y --optimizer sgd -o "$tmp/tg.onnx"
expect 0 "^  --lenient" -- "$tool" plan --help

# sequence, Attention and RMSNormalization nodes the expansions refuse, naming the node
expect 2 "seq_at_range.onnx: node 'at' (SequenceAt): position 7 is out of range for a sequence of 4 tensors" -- \
    "$tool" eval "$tmp/seq_at_range.onnx"
expect 2 "node 'split' (SplitToSequence): its split 'n' is not known ahead of time" -- "$tool" eval "$tmp/seq_split_data.onnx"
expect 2 "seq_output.onnx: graph output 'seq' is a sequence" -- "$tool" eval "$tmp/seq_output.onnx"
expect 0 "but it cannot be planned: .*graph output 'seq' is a sequence" -- "$tool" inspect "$tmp/seq_output.onnx"
expect 2 "node 'attn' (Attention): has Q, K, V of ranks 2, 2, 2: .* (rank 4) or .* (rank 3, with q_num_heads and kv_num_heads) are supported" -- \
    "$tool" eval "$tmp/attention_rank3.onnx"
expect 2 "node 'attn' (Attention): has rank-3 Q, K, V of hidden sizes 6, 6, 6 and q_num_heads 4, kv_num_heads 4: the heads must be given, kv_num_heads divide q_num_heads and each divide its hidden sizes" -- \
    "$tool" eval "$tmp/attention_heads.onnx"
expect 2 "node 'attn' (Attention): has rank-3 Q, K, V of hidden sizes 6, 4, 4 and q_num_heads 3, kv_num_heads 2" -- \
    "$tool" eval "$tmp/attention_groups.onnx"
expect 2 "node 'fold' (Col2Im): has image_shape 'image' that is not a constant int64 vector of 1 to 3 values" -- \
    "$tool" eval "$tmp/col2im_runtime.onnx"
expect 2 "node 'dft' (DFT): has axis 2: the signal axis must be one of the first 2 of X's 3" -- \
    "$tool" eval "$tmp/dft_last_axis.onnx"
expect 2 "node 'rms' (RMSNormalization): has stash_type 10: only float32 (1) is supported" -- "$tool" eval "$tmp/rms_stash16.onnx"
# Dropout's fourth input is our training steps' own step count, int64, and only theirs
expect 2 "dropout_four.onnx: node 'drop' (Dropout): has 4 inputs, expected 1 to 3" -- "$tool" eval "$tmp/dropout_four.onnx"
expect 2 "node 'drop' (Dropout): unknown attribute 'vplan_step'" -- "$tool" eval "$tmp/dropout_step_float.onnx"
expect 2 "node 'drop' (Dropout): input 3 (the step count) must be one int64, got float32" -- \
    "$tool" eval "$tmp/dropout_step_float.onnx" --lenient
expect 2 "dropout_step_meta.onnx: metadata vplan.dropout_step is 'three', not a step count" -- \
    "$tool" train "$tmp/dropout_step_meta.onnx" --loss mse:y --steps 1

expect_summary
