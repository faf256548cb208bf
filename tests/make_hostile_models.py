#!/usr/bin/env python3
"""Writes the hostile models tests/cli_hostile_inputs.sh feeds the loader, into DIR:

  deep_if.onnx        3000 If nodes, each in the then-branch of the one before (protobuf
                      written by hand: no protobuf library nests that deep)
  if_nested3.onnx     the same 3 deep with both branches (a depth that must still load)
  ext_link.onnx       an initializer whose external data is link.bin (the script makes
                      the link); ext_fifo.onnx the same from fifo.bin
  gemm_transb_float.onnx, gemm_transb_string.onnx   Gemm with transB as FLOAT, STRING
  gemm_ok.onnx        the same with transB an INT
  relu_unknown_attr.onnx   Relu with an attribute 'frobnicate'
  relu_opset999.onnx  a Relu model importing opset 999
  seq_at_range.onnx, seq_split_data.onnx, seq_output.onnx, attention_rank3.onnx,
  attention_heads.onnx, attention_groups.onnx, col2im_runtime.onnx, dft_last_axis.onnx,
  rms_stash16.onnx    sequence, Attention, Col2Im, DFT and RMSNormalization nodes the
                      expansions refuse (hostile_sequences says why)
  dropout_four.onnx, dropout_step_float.onnx   Dropout with a fourth input: ONNX's has
                      three; a vplan_step count (train/train_mode.c's) of float, not int64
  dropout_step_meta.onnx   a Dropout model whose metadata vplan.dropout_step (what
                      train --save records) is no step count

usage: make_hostile_models.py DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def field_int(num, v):
    return varint(num << 3) + varint(v)


def s(t):
    return t.encode()


def deep_if(depth, both_branches):
    """ModelProto bytes: graph -> If(then: graph -> If(then: ... Identity(x))) ."""
    vi_y = field(1, s("y"))
    # innermost graph: y = Identity(x), x from the outermost scope
    g = field(1, field(1, s("x")) + field(2, s("y")) + field(4, s("Identity"))) + field(2, s("leaf")) + field(12, vi_y)
    for d in range(depth):
        attrs = field(5, field(1, s("then_branch")) + field(6, g) + field_int(20, 5))
        if both_branches:
            attrs += field(5, field(1, s("else_branch")) + field(6, g) + field_int(20, 5))
        node = field(1, s("c")) + field(2, s("y")) + field(3, s("if%d" % d)) + field(4, s("If")) + attrs
        g = field(1, node) + field(2, s("g%d" % d)) + field(12, vi_y)
    # the model graph: inputs x (float [2]) and c (bool scalar)
    def vi(name, elem, dims):
        shape = b"".join(field(1, field_int(1, d)) for d in dims)
        return field(1, s(name)) + field(2, field(1, field_int(1, elem) + field(2, shape)))
    g += field(11, vi("x", 1, [2])) + field(11, vi("c", 9, []))
    return field_int(1, 8) + field(8, field_int(2, 13)) + field(7, g)


def save(model, path):
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def relu_model(opset=13, **attrs):
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def gemm_model(trans_b):
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], np.arange(12, dtype=np.float32) / 10)
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def external_model(location):
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([2, 3])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "24")):
        e = w.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def seq_model(name, nodes, inits, outputs, opset=18):
    """A float [4, 6] input x through the given nodes; outputs: (name, elem type, shape)."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                          [helper.make_tensor_value_info(n, t, sh) for n, t, sh in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def hostile_sequences():
    """Sequence, Attention, Col2Im, DFT and RMSNormalization nodes the expansions must refuse by name."""
    i64 = lambda n, v: helper.make_tensor(n, TensorProto.INT64, [len(v)] if isinstance(v, list) else [], v if isinstance(v, list) else [v])
    split = helper.make_node("SplitToSequence", ["x"], ["seq"], name="split", axis=0)
    return {
        # a position past the end of a sequence of 4
        "seq_at_range.onnx": seq_model("g", [split, helper.make_node("SequenceAt", ["seq", "p"], ["y"], name="at")],
                                       [i64("p", 7)], [("y", TensorProto.FLOAT, [1, 6])]),
        # a split that depends on the data: not known ahead of time
        "seq_split_data.onnx": seq_model("g", [helper.make_node("Shape", ["x"], ["sh"], name="shape"),
                                               helper.make_node("Cast", ["x"], ["xi"], name="cast", to=7),
                                               helper.make_node("ReduceMax", ["xi"], ["n"], name="max", keepdims=0),
                                               helper.make_node("SplitToSequence", ["x", "n"], ["seq"], name="split"),
                                               helper.make_node("SequenceAt", ["seq", "p"], ["y"], name="at")],
                                       [i64("p", 0)], [("y", TensorProto.FLOAT, [1, 6])]),
        # a sequence leaving the graph
        "seq_output.onnx": seq_model("g", [split], [], [("seq", TensorProto.FLOAT, None)]),
        # Attention on rank-3 inputs [1, 4, 6] whose 4 heads do not divide the hidden size 6
        "attention_heads.onnx": seq_model("g", [helper.make_node("Unsqueeze", ["x", "ax"], ["x3"], name="u"),
                                                helper.make_node("Attention", ["x3", "x3", "x3"], ["y"], name="attn",
                                                                 q_num_heads=4, kv_num_heads=4)],
                                          [i64("ax", [0])], [("y", TensorProto.FLOAT, [1, 4, 6])], opset=23),
        # Col2Im whose image_shape is an input: a fold of a shape known only at run time
        "col2im_runtime.onnx": helper.make_model(helper.make_graph(
            [helper.make_node("Col2Im", ["x3", "image", "block"], ["y"], name="fold")], "g",
            [helper.make_tensor_value_info("x3", TensorProto.FLOAT, [1, 4, 4]),
             helper.make_tensor_value_info("image", TensorProto.INT64, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [i64("block", [2, 2])]),
            opset_imports=[helper.make_opsetid("", 18)]),
        # rank-3 Attention whose 3 query heads are no multiple of its 2 key/value heads (Q of
        # hidden size 6, K and V of 4: each head 2 wide)
        "attention_groups.onnx": helper.make_model(helper.make_graph(
            [helper.make_node("Attention", ["q", "kv", "kv"], ["y"], name="attn", q_num_heads=3, kv_num_heads=2)], "g",
            [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 6]),
             helper.make_tensor_value_info("kv", TensorProto.FLOAT, [1, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
            opset_imports=[helper.make_opsetid("", 23)]),
        # DFT over its last axis (the real and imaginary parts, not a signal)
        "dft_last_axis.onnx": seq_model("g", [helper.make_node("Unsqueeze", ["x", "ax"], ["x3"], name="u"),
                                              helper.make_node("DFT", ["x3", "", "last"], ["y"], name="dft")],
                                        [i64("ax", [2]), i64("last", -1)], [("y", TensorProto.FLOAT, None)], opset=20),
        # Attention on rank-2 inputs
        "attention_rank3.onnx": seq_model("g", [helper.make_node("Attention", ["x", "x", "x"], ["y"], name="attn",
                                                                 q_num_heads=2, kv_num_heads=2)],
                                          [], [("y", TensorProto.FLOAT, [4, 6])], opset=23),
        # Dropout with a fourth input (ONNX's has three), and one marked as our training
        # steps mark theirs (vplan_step) whose step count is float, not int64
        "dropout_four.onnx": seq_model("g", [helper.make_node("Dropout", ["x", "r", "m", "r"], ["y"], name="drop")],
                                       [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
                                        helper.make_tensor("m", TensorProto.BOOL, [], [True])],
                                       [("y", TensorProto.FLOAT, [4, 6])]),
        "dropout_step_float.onnx": seq_model("g", [helper.make_node("Dropout", ["x", "r", "m", "r"], ["y"], name="drop",
                                                                    vplan_step=1)],
                                             [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
                                              helper.make_tensor("m", TensorProto.BOOL, [], [True])],
                                             [("y", TensorProto.FLOAT, [4, 6])]),
        # RMSNormalization with a float16 stash
        "rms_stash16.onnx": seq_model("g", [helper.make_node("RMSNormalization", ["x", "w"], ["y"], name="rms",
                                                             stash_type=10)],
                                      [helper.make_tensor("w", TensorProto.FLOAT, [6], [1.0] * 6)],
                                      [("y", TensorProto.FLOAT, [4, 6])], opset=23),
    }


def dropout_step_meta():
    """x [4, 6] through Dropout(0.5) and MatMul to y, with a step count that is not one."""
    g = helper.make_graph([helper.make_node("Dropout", ["x", "r"], ["d"], name="drop"),
                           helper.make_node("MatMul", ["d", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                          [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
                           helper.make_tensor("w", TensorProto.FLOAT, [6, 3], [0.1] * 18)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    helper.set_model_props(m, {"vplan.dropout_step": "three"})
    return m


def main():
    out = sys.argv[1]
    save(dropout_step_meta(), os.path.join(out, "dropout_step_meta.onnx"))
    for name, model in hostile_sequences().items():
        save(model, os.path.join(out, name))
    with open(os.path.join(out, "deep_if.onnx"), "wb") as f:
        f.write(deep_if(3000, False))
    with open(os.path.join(out, "if_nested3.onnx"), "wb") as f:
        f.write(deep_if(3, True))
    save(external_model("link.bin"), os.path.join(out, "ext_link.onnx"))
    save(external_model("fifo.bin"), os.path.join(out, "ext_fifo.onnx"))
    save(gemm_model(1.0), os.path.join(out, "gemm_transb_float.onnx"))
    save(gemm_model("1"), os.path.join(out, "gemm_transb_string.onnx"))
    save(gemm_model(1), os.path.join(out, "gemm_ok.onnx"))
    save(relu_model(frobnicate=3), os.path.join(out, "relu_unknown_attr.onnx"))
    save(relu_model(opset=999), os.path.join(out, "relu_opset999.onnx"))


if __name__ == "__main__":
    main()
