"""Small ONNX models built inline with ``onnx.helper`` for the front-end tests, and the zoo files."""

from __future__ import annotations

import os

import numpy as np


def zoo_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def zoo(name: str) -> str:
    return os.path.join(zoo_dir(), f"light_{name}.onnx")


def small_cnn(batch="N"):
    """x [batch,3,8,8] -> Conv(4, 3x3, pad 1) -> Relu -> MaxPool 2 -> Flatten -> Gemm(10) -> Softmax.

    The Gemm's weight comes from a ConstantOfShape generator and its bias from a Constant node, so the
    model also exercises constant folding."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w"),
             nh.from_array(np.zeros(4, np.float32), "conv.b"),
             nh.from_array(np.array([64, 10], np.int64), "fc.w_shape")]
    nodes = [
        h.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                    kernel_shape=[3, 3]),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Flatten", ["p"], ["f"], name="flatten"),
        h.make_node("ConstantOfShape", ["fc.w_shape"], ["fc.w"],
                    value=h.make_tensor("value", T.FLOAT, [1], [0.01])),
        h.make_node("Constant", [], ["fc.b"], value=nh.from_array(np.zeros(10, np.float32))),
        h.make_node("Gemm", ["f", "fc.w", "fc.b"], ["g"], name="fc"),
        h.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    graph = h.make_graph(nodes, "small_cnn", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [batch, 10])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def control_flow_model():
    """x [B,64] -> MatMul(W) -> If(then: Relu, else: MatMul W2) -> Loop x5 (MatMul W2) -> Scan over
    rows (Add) -> out. W2 lives in the outer scope and is read by the bodies."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)
    W = nh.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W")
    W2 = nh.from_array(rng.standard_normal((32, 32)).astype(np.float32) * 0.1, "W2")
    cond = nh.from_array(np.array(True), "cond")
    M = nh.from_array(np.array(5, dtype=np.int64), "M")
    then_g = h.make_graph([h.make_node("Relu", ["y"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, ["B", 32])])
    else_g = h.make_graph([h.make_node("MatMul", ["y", "W2"], ["e"])], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, ["B", 32])])
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("MatMul", ["s_in", "W2"], ["s_out"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("s_in", T.FLOAT, ["B", 32])],
        [h.make_tensor_value_info("c_out", T.BOOL, []),
         h.make_tensor_value_info("s_out", T.FLOAT, ["B", 32])])
    scan_body = h.make_graph(
        [h.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         h.make_node("Identity", ["acc_out"], ["row_out"])],
        "scan_body",
        [h.make_tensor_value_info("acc_in", T.FLOAT, [32]), h.make_tensor_value_info("row", T.FLOAT, [32])],
        [h.make_tensor_value_info("acc_out", T.FLOAT, [32]),
         h.make_tensor_value_info("row_out", T.FLOAT, [32])])
    acc0 = nh.from_array(np.zeros(32, np.float32), "acc0")
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["y"], name="proj"),
        h.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
        h.make_node("Loop", ["M", "cond", "z"], ["zz"], name="loop", body=body),
        h.make_node("Scan", ["acc0", "zz"], ["acc", "rows"], name="scan", body=scan_body, num_scan_inputs=1),
        h.make_node("Add", ["rows", "acc"], ["out"], name="final"),
    ]
    graph = h.make_graph(nodes, "control_flow", [h.make_tensor_value_info("x", T.FLOAT, ["B", 64])],
                         [h.make_tensor_value_info("out", T.FLOAT, ["B", 32])], [W, W2, cond, M, acc0])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save(model, path) -> str:
    import onnx

    onnx.save(model, os.fspath(path))
    return os.fspath(path)
