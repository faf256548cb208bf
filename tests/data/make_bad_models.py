#!/usr/bin/python3
"""Makes the malformed models tests/cli_bad_inputs.sh feeds to onnx-vplan.

Each file breaks one rule the loader must catch with a clear error and exit code 2.
Run from anywhere: /usr/bin/python3 tests/data/make_bad_models.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad")


def model(nodes, inputs, outputs, inits=(), opset=14):
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_bad_models")


def save(m, name):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(m.SerializeToString())


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def main():
    os.makedirs(HERE, exist_ok=True)
    good = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2, 3])], [vi("y", [2, 3])])
    save(good, "good_relu.onnx")
    data = good.SerializeToString()
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(HERE, "not_onnx.onnx"), "wb") as f:
        f.write(b"this is a text file, not a protobuf\n" * 4)
    open(os.path.join(HERE, "empty.onnx"), "wb").close()

    # external data pointing at a file that is not there
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "missing_weights.bin"), ("offset", "0"), ("length", "24")):
        e = w.external_data.add()
        e.key, e.value = k, v
    save(model([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], [vi("x", [2, 3])], [vi("y", [2, 3])], [w]),
         "missing_external_data.onnx")

    save(model([helper.make_node("Relu", ["nowhere"], ["y"], name="relu_undefined")], [vi("x", [2, 3])],
               [vi("y", [2, 3])]), "undefined_input.onnx")
    save(model([helper.make_node("Add", ["x", "b"], ["a"], name="cyc_a"),
                helper.make_node("Relu", ["a"], ["b"], name="cyc_b"),
                helper.make_node("Identity", ["a"], ["y"], name="out")],
               [vi("x", [2, 3])], [vi("y", [2, 3])]), "cycle.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                helper.make_node("Neg", ["x"], ["y"], name="second")],
               [vi("x", [2, 3])], [vi("y", [2, 3])]), "duplicate_value.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2, -3])], [vi("y", [2, 3])]),
         "negative_dim.onnx")
    # nodes with no named output (a Relu writing to "", a Constant whose output name is empty):
    # dead, left out at load; the rest runs
    save(model([helper.make_node("Relu", ["x"], [""], name="dead_relu"),
                helper.make_node("Constant", [], [""], name="dead_constant",
                                 value=numpy_helper.from_array(np.ones(3, np.float32))),
                helper.make_node("Sigmoid", ["x"], ["y"], name="sigmoid")],
               [vi("x", [2, 3])], [vi("y", [2, 3])]), "unnamed_output.onnx")
    # a MaxPool whose required output 0 is unnamed but whose indices are read: ONNX's
    # checker and ONNX Runtime refuse it; the kernels write output 0, so eval crashed
    save(model([helper.make_node("MaxPool", ["x"], ["", "idx"], name="pool_no_y", kernel_shape=[2, 2])],
               [vi("x", [1, 2, 4, 4])], [vi("idx", [1, 2, 3, 3], TensorProto.INT64)]), "unnamed_first_output.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [vi("x", [1 << 40, 1 << 40, 1 << 40])], [vi("y", None)]), "overflow_dim.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", ["batch", 3])],
               [vi("y", ["batch", 3])]), "symbolic_dim.onnx")
    save(model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example")], [vi("x", [2, 3])],
               [vi("y", [2, 3])]), "unsupported_op.onnx")
    save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2, 3])], [vi("z", [2, 3])]),
         "undefined_output.onnx")

    # training-step inputs: a rank-1 output (no classes axis for ce), an op without a
    # gradient rule between the parameter and the loss
    w = numpy_helper.from_array(np.full((3, 3), 0.5, np.float32), "w")
    save(model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                helper.make_node("ReduceSum", ["h"], ["y"], name="sum_all", keepdims=0)],
               [vi("x", [2, 3])], [vi("y", [])], [w], opset=11), "rank0_output.onnx")
    save(model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                helper.make_node("Mod", ["h", "x"], ["y"], name="mod_it", fmod=1)],
               [vi("x", [2, 3])], [vi("y", [2, 3])], [w]), "no_gradient_rule.onnx")

    # a Loop whose trip count is a graph input: nothing ahead of time says how often it
    # runs, so it cannot be unrolled (inspect lists it, train refuses it, naming it)
    body = helper.make_graph([helper.make_node("MatMul", ["h_in", "w"], ["h_out"], name="step"),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"], name="go_on")], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h_in", [2, 3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("h_out", [2, 3])])
    save(model([helper.make_node("Loop", ["n", "", "x"], ["y"], name="repeat_n", body=body)],
               [vi("x", [2, 3]), vi("n", [], TensorProto.INT64)], [vi("y", [2, 3])], [w], opset=13),
         "loop_data_trip.onnx")
    # three iterations at most, but whether the second runs depends on the first's result:
    # the first is unrolled, then refused and taken back
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    body = helper.make_graph([helper.make_node("MatMul", ["h_in", "w"], ["h_out"], name="step"),
                              helper.make_node("ReduceSum", ["h_out"], ["total"], name="total", keepdims=0),
                              helper.make_node("Less", ["total", "zero"], ["cond_out"], name="still_negative")], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h_in", [2, 3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("h_out", [2, 3])])
    save(model([helper.make_node("Loop", ["three", "", "x"], ["y"], name="while_negative", body=body)],
               [vi("x", [2, 3])], [vi("y", [2, 3])], [w, three, zero], opset=13), "loop_data_cond.onnx")

    # not bad but out of order: the Loop comes before the node making the weight its body
    # reads (no input of the Loop says so); the loader orders it after
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    body = helper.make_graph([helper.make_node("MatMul", ["h_in", "w2"], ["h_out"], name="step"),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"], name="go_on")], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h_in", [2, 3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("h_out", [2, 3])])
    save(model([helper.make_node("Loop", ["three", "", "x"], ["y"], name="repeat_3", body=body),
                helper.make_node("Mul", ["w", "two"], ["w2"], name="double_w")],
               [vi("x", [2, 3])], [vi("y", [2, 3])], [w, three, two], opset=13), "loop_out_of_order.onnx")

    # run-time data errors: an index past the end of the table it gathers from
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    save(model([helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")],
               [vi("ids", [2], TensorProto.INT64)], [vi("y", [2, 3])], [table]), "gather.onnx")
    with open(os.path.join(HERE, "ids_out_of_range.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array([1, 99], np.int64), "ids").SerializeToString())

    # ScatterElements: an index past the end of its axis (at run time), and updates that
    # do not have the indices' shape (at load)
    data = numpy_helper.from_array(np.zeros((4, 3), np.float32), "data")
    upd = numpy_helper.from_array(np.ones((1, 3), np.float32), "upd")
    save(model([helper.make_node("ScatterElements", ["data", "where", "upd"], ["y"], name="put")],
               [vi("where", [1, 3], TensorProto.INT64)], [vi("y", [4, 3])], [data, upd], opset=16),
         "scatter_elements.onnx")
    with open(os.path.join(HERE, "where_out_of_range.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array([[0, 7, 1]], np.int64), "where").SerializeToString())
    upd22 = numpy_helper.from_array(np.ones((2, 2), np.float32), "upd")
    save(model([helper.make_node("ScatterElements", ["data", "where", "upd"], ["y"], name="put_mismatch")],
               [vi("where", [1, 3], TensorProto.INT64)], [vi("y", [4, 3])], [data, upd22], opset=16),
         "scatter_elements_mismatch.onnx")

    # tensors for --input: one that fits good_relu.onnx's x, one of the wrong shape, one of the wrong dtype
    for name, arr in (("x_2x3.pb", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5),
                      ("x_4x4.pb", np.zeros((4, 4), np.float32)),
                      ("x_int64.pb", np.zeros((2, 3), np.int64))):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(numpy_helper.from_array(arr, "x").SerializeToString())


if __name__ == "__main__":
    main()
