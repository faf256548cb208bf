#!/usr/bin/env bash
# Bad input must give a clear message naming the file, node or value and the reason,
# and exit code 2; never a crash.  Models come from tests/data/make_bad_models.py.
set -u
tool=$1
data=$2
source "$(dirname "$0")/expect.sh"

expect 2 "truncated or corrupt" -- "$tool" inspect "$data/truncated.onnx"
expect 2 "not an ONNX model" -- "$tool" inspect "$data/not_onnx.onnx"
expect 2 "empty file" -- "$tool" inspect "$data/empty.onnx"
expect 2 "external data file .*missing_weights.bin: cannot open: No such file" -- "$tool" inspect "$data/missing_external_data.onnx"
expect 2 "node 'relu_undefined' (Relu): input 'nowhere' is used but never defined" -- "$tool" inspect "$data/undefined_input.onnx"
expect 2 "cycle through node 'cyc_a'" -- "$tool" inspect "$data/cycle.onnx"
expect 2 "value 'y' is defined twice: by node 'first' (Relu) and node 'second' (Neg)" -- "$tool" inspect "$data/duplicate_value.onnx"
expect 2 "graph input 'x' has negative dim -3" -- "$tool" inspect "$data/negative_dim.onnx"
expect 0 "y  *float32  *\[2, 3\]" -- "$tool" eval "$data/unnamed_output.onnx"
expect 2 "node 'pool_no_y' (MaxPool): output 0 has no name, but ONNX requires it" -- "$tool" eval "$data/unnamed_first_output.onnx"
expect 2 "graph input 'x' of shape .* is too large" -- "$tool" inspect "$data/overflow_dim.onnx"
expect 2 "symbolic dim 'batch'; bind it with --dim batch=VALUE" -- "$tool" inspect "$data/symbolic_dim.onnx"
expect 0 "x .*float32 .*\[7, 3\]" -- "$tool" inspect "$data/symbolic_dim.onnx" --dim batch=7
expect 2 "graph output 'z' is never defined" -- "$tool" inspect "$data/undefined_output.onnx"
expect 2 "node 'fancy' (com.example.FancyOp): op com.example.FancyOp is not supported" -- "$tool" eval "$data/unsupported_op.onnx"
expect 0 "com.example.FancyOp (1): fancy" -- "$tool" inspect "$data/unsupported_op.onnx"
expect 0 '"unsupported": \[' -- "$tool" inspect "$data/unsupported_op.onnx" --json
expect 2 "cannot open" -- "$tool" inspect "$data/no_such_file.onnx"
expect 2 "--dim expects NAME=VALUE" -- "$tool" inspect "$data/good_relu.onnx" --dim batch
expect 2 "non-negative integer" -- "$tool" inspect "$data/good_relu.onnx" --dim batch=-4
expect 2 "unknown option '--frobnicate'" -- "$tool" inspect "$data/good_relu.onnx" --frobnicate
expect 2 "unknown command 'frobnicate'" -- "$tool" frobnicate
expect 2 "usage" -- "$tool"
expect 0 "usage: onnx-vplan inspect" -- "$tool" inspect --help
expect 2 "no graph input named 'nope'" -- "$tool" eval "$data/good_relu.onnx" --input "nope=$data/x_2x3.pb"
expect 2 "input 'x' has shape \[2, 3\], the data given has shape \[4, 4\]" -- "$tool" eval "$data/good_relu.onnx" --input "x=$data/x_4x4.pb"
expect 2 "input 'x' is float32, the data given is int64" -- "$tool" eval "$data/good_relu.onnx" --input "x=$data/x_int64.pb"
expect 2 "not a valid TensorProto" -- "$tool" eval "$data/good_relu.onnx" --input "x=$data/not_onnx.onnx"

expect 1 "node 'lookup' (Gather).*99" -- "$tool" eval "$data/gather.onnx" --input "ids=$data/ids_out_of_range.pb"
expect 1 "node 'put' (ScatterElements): index 7 (element 1 of the indices) is out of range for axis 0 of size 4" -- \
    "$tool" eval "$data/scatter_elements.onnx" --input "where=$data/where_out_of_range.pb"
expect 2 "node 'put_mismatch' (ScatterElements): updates (input 2) \\[2, 2\\] must have the indices' shape \\[1, 3\\]" -- \
    "$tool" inspect "$data/scatter_elements_mismatch.onnx"

expect_summary
