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


def fused_qkv_attention(*, op: str = "MatMul", sizes: str = "input", trans_b: bool = False, layers: int = 2,
                        hidden: int = 32, heads: int = 4, seq: int = 8, peek: bool = False,
                        generated: bool = False):
    """``layers`` attention blocks on x [seq, hidden], each with one FUSED QKV projection: weight
    [hidden, 3*hidden] (``trans_b``: stored [3*hidden, hidden], a Gemm with transB) and bias [3*hidden],
    as a ``MatMul`` then a bias ``Add`` (``op="MatMul"``, the TorchScript export's form) or one ``Gemm``
    (``op="Gemm"``), then ``Split`` into q, k, v along the last axis with the sizes given as
    ``sizes``: ``"input"`` (opset 17), ``"attribute"`` (opset 11) or ``"equal"`` (``num_outputs``, opset
    18). Then heads (Reshape [seq, heads, dh], Transpose), scaled scores, Softmax, context, heads merged
    and an output projection ``layer{i}/out`` (same op, bias) with a residual Add. ``peek``: layer 0's
    fused output has a second reader, ``layer0/peek`` (an Identity, a model output). ``generated``: the
    projections' weights are generated by ``ConstantOfShape`` nodes (a fill, as ``weights="generated"``
    models have) instead of stored."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    opset = {"input": 17, "attribute": 11, "equal": 18}[sizes]
    rng = np.random.default_rng(3)
    dh = hidden // heads
    inits, nodes, x, outs = [], [], "x", []

    def init(name, value):
        inits.append(nh.from_array(np.asarray(value), name))
        return name

    def node(typ, ins, name, **attrs):
        nodes.append(h.make_node(typ, ins, [name], name=name, **attrs))
        return name

    def weight(name, value):
        if not generated:
            return init(name, value)
        shape = init(f"{name}_shape", np.array(value.shape, np.int64))
        fill = h.make_tensor("value", T.FLOAT, [1], [0.01])
        nodes.append(h.make_node("ConstantOfShape", [shape], [name], value=fill))
        return name

    def project(L, name, inp, n_out):
        w = (rng.standard_normal((hidden, n_out)) / np.sqrt(hidden)).astype(np.float32)
        b = init(f"{L}/{name}.bias", rng.standard_normal(n_out).astype(np.float32))
        if op == "Gemm":
            wt = weight(f"{L}/{name}.weight", w.T.copy() if trans_b else w)
            return node("Gemm", [inp, wt, b], f"{L}/{name}", transB=int(trans_b))
        y = node("MatMul", [inp, weight(f"{L}/{name}.weight", w)], f"{L}/{name}")
        return node("Add", [y, b], f"{L}/{name}_bias")

    for i in range(layers):
        L = f"layer{i}"
        qkv = project(L, "qkv", x, 3 * hidden)
        if peek and i == 0:
            outs.append(node("Identity", [qkv], f"{L}/peek"))
        parts = [f"{L}/{p}" for p in "qkv"]
        if sizes == "input":
            split = h.make_node("Split", [qkv, init(f"{L}/split_sizes", np.array([hidden] * 3, np.int64))],
                                parts, name=f"{L}/split", axis=-1)
        elif sizes == "attribute":
            split = h.make_node("Split", [qkv], parts, name=f"{L}/split", axis=-1, split=[hidden] * 3)
        else:
            split = h.make_node("Split", [qkv], parts, name=f"{L}/split", axis=-1, num_outputs=3)
        nodes.append(split)
        heads_shape = init(f"{L}/heads_shape", np.array([seq, heads, dh], np.int64))
        q, k, v = (node("Transpose", [node("Reshape", [z, heads_shape], f"{z}_heads")], f"{z}_t",
                        perm=perm) for z, perm in zip(parts, ([1, 0, 2], [1, 2, 0], [1, 0, 2])))
        scores = node("Mul", [node("MatMul", [q, k], f"{L}/scores"),
                              init(f"{L}/scale", np.array(1 / np.sqrt(dh), np.float32))], f"{L}/scaled")
        ctx = node("MatMul", [node("Softmax", [scores], f"{L}/softmax", axis=-1 if opset >= 13 else 2), v],
                   f"{L}/context")
        merged_shape = init(f"{L}/merged_shape", np.array([seq, hidden], np.int64))
        merged = node("Reshape", [node("Transpose", [ctx], f"{L}/context_t", perm=[1, 0, 2]), merged_shape],
                      f"{L}/merge_heads")
        x = node("Add", [x, project(L, "out", merged, hidden)], f"{L}/residual")
    graph = h.make_graph(nodes, "fused_qkv", [h.make_tensor_value_info("x", T.FLOAT, [seq, hidden])],
                         [h.make_tensor_value_info(y, T.FLOAT, [seq, n]) for y, n in
                          [(x, hidden), *((y, 3 * hidden) for y in outs)]], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def save(model, path) -> str:
    import onnx

    onnx.save(model, os.fspath(path))
    return os.fspath(path)
