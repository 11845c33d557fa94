"""A device file (or a DeviceSpec built in code) may name a custom operator in ``unsupported_ops`` and
``op_gflops``: the ONNX front end loads custom-domain operators (``MyPlugin`` of domain ``my.domain``),
and d7a8f38 / cbe6584 refused every name that is not a standard type, so a kind could no longer be told it
cannot run one, nor given its rate (found by a diff review: exit 2 where the model used to be placed with
MyPlugin on the CPU). A typo of a standard type (the same but for case, or one letter apart) is still
refused with the suggestion; any other name is taken as a custom operator's, without a word when the file
is read: the cost model tells of one that no operator of the model has, at each costing (the command
line prints it once a command), naming the file, the field and the name (tests/test_custom_ops_in_model.py
has more of that)."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphs.costs import roofline_costs
from graphs.devices import PRESETS, DeviceSet, DeviceSpec, parse_devices, read_device_file
from graphs.errors import InputError
from graphs.onnx_loader import load_onnx
from placement.cli import main

NPU = '[devices.npu]\nbase = "t4"\n'


def _custom(model: str) -> str:
    """What the cost model says after ``where: 'Name'`` of a custom name no operator of ``model`` has."""
    return (f"is not a standard operator type (ONNX's or onnxruntime's), and no operator of {model} has that "
            f"type: it applies to custom operators of that name only, so to nothing here")


def _custom_model(path):
    """The review's model: x -> Relu -> MyPlugin (domain my.domain) -> Relu -> y, all [1, 64] float."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("MyPlugin", ["a"], ["b"], name="custom0", domain="my.domain"),
             helper.make_node("Relu", ["b"], ["y"], name="r1")]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 64])],
                              [vi("y", TensorProto.FLOAT, [1, 64])],
                              value_info=[vi(v, TensorProto.FLOAT, [1, 64]) for v in ("a", "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.domain", 1)])
    onnx.save(model, str(path))
    return path


def _plain_model(path):
    """x -> Relu -> y, [1, 64] float: a model without a custom operator."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r0")], "g",
                              [vi("x", TensorProto.FLOAT, [1, 64])], [vi("y", TensorProto.FLOAT, [1, 64])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _warnings(caplog) -> list[str]:
    """The warnings about custom operator names, on whatever logger."""
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "is not a standard operator type" in r.getMessage()]


def test_the_reviewers_file_places_the_custom_operator_on_the_cpu(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _custom_model(tmp_path / "custom.onnx")
    (tmp_path / "custom_unsupported.toml").write_text(NPU + 'unsupported_ops = ["MyPlugin"]\n')
    code = main(["place", "custom.onnx", "--devices", "npu:1,cpu:1", "--device-file",
                 "custom_unsupported.toml", "--costs", "roofline", "--out", "r.json"])
    err = capsys.readouterr().err
    assert code == 0, err
    placed = json.loads((tmp_path / "r.json").read_text())
    (stage,) = [s for s in placed["stages"] if "custom0" in s["nodes"]]  # wherever the Relus go
    assert stage["kind"] == "cpu" and all(d.startswith("cpu:") for d in stage["devices"]), stage
    assert "is not a standard operator type" not in err, err  # the model has MyPlugin: nothing to tell


def test_the_custom_operator_costs_inf_on_that_kind_and_finite_on_the_cpu(tmp_path):
    g = load_onnx(_custom_model(tmp_path / "custom.onnx"))
    f = tmp_path / "d.toml"
    f.write_text(NPU + 'unsupported_ops = ["MyPlugin"]\n')
    c = roofline_costs(g, parse_devices("npu:1,cpu:1", [f]))
    k = g.index("custom0")
    assert np.isinf(c.compute[0, k]) and np.isfinite(np.delete(c.compute[0], k)).all()
    assert np.isfinite(c.compute[1]).all()


def test_op_gflops_of_a_custom_operator_is_its_rate(tmp_path):
    """MyPlugin has no FLOP formula: the conservative estimate charges 16 FLOPs per input and output
    element (64 + 64: 2048 FLOPs) and moves 64 x 4 bytes in and 64 x 4 out (512 bytes), with no overlap.
    At 0.001 GFLOP/s on a t4 (320 GB/s, 5 us launch): 2048 / 1e6 s + 512 / 320e9 s + 5e-6 s."""
    g = load_onnx(_custom_model(tmp_path / "custom.onnx"))
    f = tmp_path / "rate.toml"
    f.write_text(NPU + 'op_gflops = { MyPlugin = 0.001 }\n')
    devices = parse_devices("npu:1", [f])
    assert devices.specs[0].flop_rate("MyPlugin") == pytest.approx(1e6)
    c = roofline_costs(g, devices)
    expected_s = 2048 / 1e6 + 512 / 320e9 + 5e-6
    assert c.compute[0, g.index("custom0")] == pytest.approx(expected_s * 1e3, rel=1e-9)  # ms
    # the two Relus stay at the t4's figures: 64 FLOPs, 512 bytes, bandwidth-bound, + launch
    relu_s = max(64 / 8.1e12, 512 / 320e9) + 5e-6
    assert c.compute[0, g.index("r0")] == pytest.approx(relu_s * 1e3, rel=1e-9)


@pytest.mark.parametrize("body, where, typo, meant", [
    ('unsupported_ops = ["LRN", "Matmul"]', "devices.npu.unsupported_ops[1]", "Matmul", "MatMul"),  # case
    ('unsupported_ops = ["Tranpose"]', "devices.npu.unsupported_ops[0]", "Tranpose", "Transpose"),  # dropped
    ('unsupported_ops = ["Softmaxx"]', "devices.npu.unsupported_ops[0]", "Softmaxx", "Softmax"),  # added
    ('unsupported_ops = ["Transopse"]', "devices.npu.unsupported_ops[0]", "Transopse", "Transpose"),  # swap
    ('unsupported_ops = ["Sigmoud"]', "devices.npu.unsupported_ops[0]", "Sigmoud", "Sigmoid"),  # replaced
    ("op_gflops = { softmax = 1 }", "devices.npu.op_gflops", "softmax", "Softmax"),
    ("op_gflops = { LayerNormalizaton = 1 }", "devices.npu.op_gflops", "LayerNormalizaton",
     "LayerNormalization"),
])
def test_a_typo_of_a_standard_type_is_still_refused_with_the_suggestion(tmp_path, body, where, typo, meant):
    f = tmp_path / "typo.toml"
    f.write_text(f'{NPU}{body}\n')
    with pytest.raises(InputError) as e:
        read_device_file(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: {where}: '{typo}' is not an operator type; did you mean {meant}?"), msg
    assert "case-sensitive" in msg and "custom operator" in msg


def test_the_command_line_refuses_a_typo_in_one_error_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _custom_model(tmp_path / "custom.onnx")
    (tmp_path / "typo.toml").write_text(NPU + 'unsupported_ops = ["Matmul"]\n')
    assert main(["place", "custom.onnx", "--devices", "npu:1,cpu:1", "--device-file", "typo.toml"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("error: typo.toml: devices.npu.unsupported_ops[0]: 'Matmul' is not an operator "
                             "type; did you mean MatMul?"), err


@pytest.mark.parametrize("name", ["MyPlugin", "Relu6", "grid_sampler", "InstanceNormalization_TRT", "MyRelu"])
def test_a_custom_name_is_accepted_and_told_at_costing_naming_file_field_and_name(tmp_path, caplog, name):
    """Names of real custom operators (mmcv's grid_sampler, a TensorRT plugin's, a Relu6 plugin) are no
    typos: a digit or '_' added is none, nor are two or more letters. Reading the file says nothing; costing
    a model without such an operator says it once a field (the kind that inherits it: not again), at
    each costing."""
    f = tmp_path / f"custom-{name}.toml"
    f.write_text(NPU + f'unsupported_ops = ["LRN", "{name}"]\n'
                 f'op_gflops = {{ "{name}" = 2 }}\n'
                 f'[devices.npu2]\nbase = "npu"\n')  # inherits the names: no second warning
    with caplog.at_level(logging.WARNING):
        specs, _ = read_device_file(f)
    assert specs["npu"].unsupported_ops == {"LRN", name} and specs["npu2"].unsupported_ops == {"LRN", name}
    assert specs["npu"].flop_rate(name) == pytest.approx(2e9)
    assert _warnings(caplog) == []  # not at parse time
    model = str(_plain_model(tmp_path / "plain.onnx"))
    g = load_onnx(model)
    with caplog.at_level(logging.WARNING):
        roofline_costs(g, parse_devices("npu:1,npu2:1", [f]))
    got = _warnings(caplog)
    assert len(got) == 2, got  # (each may end naming standard types it resembles: the next test)
    assert got[0].startswith(f"{f}: devices.npu.unsupported_ops[1]: {name!r} {_custom(model)}"), got
    assert got[1].startswith(f"{f}: devices.npu.op_gflops: {name!r} {_custom(model)}"), got
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the same model costed again: the library says it again (the
        roofline_costs(g, parse_devices("npu:1", [f]))  # command line prints it once a command)
    assert _warnings(caplog) == got


def test_a_custom_name_near_a_standard_one_says_which_it_resembles(tmp_path, caplog):
    f = tmp_path / "near.toml"
    f.write_text(NPU + 'unsupported_ops = ["MyRelu"]\n')
    g = load_onnx(_plain_model(tmp_path / "plain.onnx"))
    with caplog.at_level(logging.WARNING):
        roofline_costs(g, parse_devices("npu:1", [f]))
    (w,) = _warnings(caplog)
    assert w.endswith("(if a standard type was meant: Relu)"), w


def test_a_device_built_in_code_follows_the_same_rule(tmp_path, caplog):
    """DeviceSpec(unsupported_ops=..., op_flops=...) was not checked at all: 'Matmul' left the kind running
    every MatMul. Now the one check: a typo is refused, a custom name accepted (and told, naming the kind
    and the field, when a model without it is costed)."""
    t4 = PRESETS["t4"]
    with pytest.raises(InputError, match=r"device 'npu': unsupported_ops: 'Matmul' is not an operator type; "
                                         r"did you mean MatMul\?"):
        dataclasses.replace(t4, name="npu", unsupported_ops=frozenset({"Matmul"}))
    with pytest.raises(InputError, match=r"device 'npu': op_flops: 'Softmaxx' is not an operator type; did "
                                         r"you mean Softmax\?"):
        dataclasses.replace(t4, name="npu", op_flops=(("Softmaxx", 1e9),))
    with pytest.raises(InputError, match="unsupported_ops must be a collection of operator types, got the "
                                         "string 'LRN'"):
        dataclasses.replace(t4, name="npu", unsupported_ops="LRN")
    with caplog.at_level(logging.WARNING):
        spec = dataclasses.replace(t4, name="codenpu", unsupported_ops={"CodePlugin"},
                                   op_flops=(("CodePlugin", 3e9),))
        dataclasses.replace(spec, memory=1e9)
    assert spec.unsupported_ops == {"CodePlugin"} and spec.flop_rate("CodePlugin") == 3e9
    assert _warnings(caplog) == []  # told at costing, where the model is known
    model = str(_plain_model(tmp_path / "plain.onnx"))
    with caplog.at_level(logging.WARNING):
        roofline_costs(load_onnx(model), DeviceSet((spec,), (1,)))
    assert _warnings(caplog) == [f"device 'codenpu': unsupported_ops: 'CodePlugin' {_custom(model)}",
                                 f"device 'codenpu': op_flops: 'CodePlugin' {_custom(model)}"]
    assert isinstance(DeviceSpec("x", 1e12, 1e12, 1e11, None, 1e10, 0, 0, unsupported_ops=["MatMul", "LRN"]),
                      DeviceSpec)
