"""A custom (non-standard) operator name in a device kind's ``unsupported_ops`` or ``op_gflops`` is told
where the kind meets the model, when the model is costed (graphs.costs: the roofline model, and the
profile and table models built on it), not when the device file is read: a name an operator of the model
has gets no warning at all (4745e6f warned of it at parse time, "... and to nothing in a model without
one", for a model that has one); a name no operator has gets exactly one line a command (the library logs
it at each costing), naming the device file and the entry it came from (a kind built in code: the kind
and the field). The review's reproducer: Relu -> MyPlugin (domain my.domain) -> Relu, and
``unsupported_ops = ["MyPlugin"]`` on a t4-based npu."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from graphs.costs import compute_costs, roofline_costs
from graphs.devices import PRESETS, DeviceSet, parse_devices
from graphs.onnx_loader import load_onnx
from placement.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REVIEW_FILE = '[devices.npu]\nbase = "t4"\nunsupported_ops = ["MyPlugin"]\n'  # custom_unsupported.toml
VI = helper.make_tensor_value_info


def _told(model: str) -> str:
    """The words after ``where: 'Name' `` when no operator of ``model`` has that name (written by hand)."""
    return (f"is not a standard operator type (ONNX's or onnxruntime's), and no operator of {model} has "
            f"that type: it applies to custom operators of that name only, so to nothing here")


def _save(path, nodes, domains=()):
    graph = helper.make_graph(nodes, "g", [VI("x", TensorProto.FLOAT, [1, 64])],
                              [VI("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                              + [helper.make_opsetid(d, 1) for d in domains])
    onnx.save(model, str(path))
    return str(path)


def _custom_model(path):
    """mkcustom.py's model: x -> Relu -> MyPlugin (my.domain) -> Relu -> y."""
    return _save(path, [helper.make_node("Relu", ["x"], ["a"], name="r0"),
                        helper.make_node("MyPlugin", ["a"], ["b"], name="custom0", domain="my.domain"),
                        helper.make_node("Relu", ["b"], ["y"], name="r1")], ["my.domain"])


def _plain_model(path):
    """x -> Relu -> Relu -> y: no custom operator."""
    return _save(path, [helper.make_node("Relu", ["x"], ["a"], name="r0"),
                        helper.make_node("Relu", ["a"], ["y"], name="r1")])


def _told_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "is not a standard operator type" in line]


def _told_records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "is not a standard operator type" in r.getMessage()]


def _place(tmp_path, monkeypatch, capsys, model: str, *extra: str) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "custom_unsupported.toml").write_text(REVIEW_FILE)
    code = main(["place", model, "--devices", "npu:1,cpu:1", "--device-file", "custom_unsupported.toml",
                 "--out", "r.json", *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def test_the_reviewers_model_with_myplugin_gets_no_warning(tmp_path, monkeypatch, capsys):
    _custom_model(tmp_path / "custom.onnx")
    err = _place(tmp_path, monkeypatch, capsys, "custom.onnx", "--costs", "roofline")
    assert _told_lines(err) == [], err
    (stage,) = [s for s in json.loads((tmp_path / "r.json").read_text())["stages"] if "custom0" in s["nodes"]]
    assert stage["kind"] == "cpu", stage  # the name still applies: MyPlugin cannot run on the npu


@pytest.mark.parametrize("costs", ["roofline", "profile", "table.json"])
def test_a_model_without_myplugin_gets_one_warning_naming_file_and_field(tmp_path, monkeypatch, capsys,
                                                                          costs):
    """Each cost model (the profile and table ones cost the roofline first): the one line."""
    _plain_model(tmp_path / "plain.onnx")
    (tmp_path / "table.json").write_text('{"compute": {"r0": {"cpu": 0.01, "npu": 0.01}}}')
    err = _place(tmp_path, monkeypatch, capsys, "plain.onnx", "--costs", costs)
    assert _told_lines(err) == ["warning: custom_unsupported.toml: devices.npu.unsupported_ops[0]: "
                                f"'MyPlugin' {_told('plain.onnx')}"], err


def test_a_copy_of_the_kind_still_names_the_file(tmp_path, monkeypatch, capsys):
    """--device-memory replaces the accelerator kinds by copies with that memory (dataclasses.replace):
    the names they keep still came from the file's entry."""
    _plain_model(tmp_path / "plain.onnx")
    err = _place(tmp_path, monkeypatch, capsys, "plain.onnx", "--device-memory", "1000000000")
    assert _told_lines(err) == ["warning: custom_unsupported.toml: devices.npu.unsupported_ops[0]: "
                                f"'MyPlugin' {_told('plain.onnx')}"], err


def test_op_gflops_names_its_table(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _plain_model(tmp_path / "plain.onnx")
    _custom_model(tmp_path / "custom.onnx")
    (tmp_path / "rate.toml").write_text('[devices.npu]\nbase = "t4"\n'
                                        'op_gflops = { Relu = 5, MyPlugin = 2 }\n')
    for model, lines in (("custom.onnx", []), ("plain.onnx", [
            f"warning: rate.toml: devices.npu.op_gflops: 'MyPlugin' {_told('plain.onnx')}"])):
        args = ["place", model, "--devices", "npu:1", "--device-file", "rate.toml", "--out", "r.json"]
        assert main(args) == 0
        assert _told_lines(capsys.readouterr().err) == lines, model


def test_a_name_in_a_control_flow_body_is_the_models(tmp_path, caplog):
    """The kinds' names apply inside If/Loop bodies (an unsupported MyPlugin in a branch makes the If inf):
    a model whose only MyPlugin is in a branch has one."""
    branch = helper.make_graph([helper.make_node("MyPlugin", ["x"], ["t"], name="inner", domain="my.domain")],
                               "then", [], [VI("t", TensorProto.FLOAT, [1, 64])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="inner2")], "else", [],
                              [VI("e", TensorProto.FLOAT, [1, 64])])
    path = str(tmp_path / "if.onnx")
    true = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], name="c0", value=true),
         helper.make_node("If", ["c"], ["y"], name="if0", then_branch=branch, else_branch=other)],
        "g", [VI("x", TensorProto.FLOAT, [1, 64])], [VI("y", TensorProto.FLOAT, [1, 64])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("my.domain", 1)]), path)
    f = tmp_path / "custom_unsupported.toml"
    f.write_text(REVIEW_FILE)
    g = load_onnx(path)
    with caplog.at_level(logging.WARNING):
        c = roofline_costs(g, parse_devices("npu:1,cpu:1", [f]))
    assert c.compute[0, g.index("if0")] == float("inf")  # the name did apply, inside the branch
    assert _told_records(caplog) == []


def test_a_kind_based_on_another_names_where_the_name_came_from(tmp_path, caplog):
    """npu2 inherits npu's unsupported_ops: the warning names npu's entry, once for the two kinds. npu3
    writes its own list: its entry is named, and the inherited MyPlugin is no longer its."""
    f = tmp_path / "a.toml"
    f.write_text(REVIEW_FILE + '[devices.npu2]\nbase = "npu"\n[devices.npu3]\nbase = "npu"\n'
                 'unsupported_ops = ["LRN", "OtherPlugin"]\n')
    model = _plain_model(tmp_path / "plain.onnx")
    g = load_onnx(model)
    with caplog.at_level(logging.WARNING):
        roofline_costs(g, parse_devices("npu:1,npu2:1,npu3:1", [f]))
    assert _told_records(caplog) == [f"{f}: devices.npu.unsupported_ops[0]: 'MyPlugin' {_told(model)}",
                                     f"{f}: devices.npu3.unsupported_ops[1]: 'OtherPlugin' {_told(model)}"]


def test_a_kind_built_in_code_is_named_by_kind_and_field(tmp_path, caplog):
    spec = dataclasses.replace(PRESETS["t4"], name="codenpu", unsupported_ops={"CodePlugin", "LRN"},
                               op_flops=(("CodePlugin", 3e9),))
    model = _plain_model(tmp_path / "plain.onnx")
    g = load_onnx(model)
    with caplog.at_level(logging.WARNING):
        c = compute_costs(g, DeviceSet((spec,), (1,)))
    told = [f"device 'codenpu': unsupported_ops: 'CodePlugin' {_told(model)}",
            f"device 'codenpu': op_flops: 'CodePlugin' {_told(model)}"]
    assert _told_records(caplog) == told  # (LRN is a standard type: no word)
    assert all(w in c.warnings for w in told), c.warnings
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the same model again: logged again (the library keeps no
        compute_costs(g, DeviceSet((spec,), (1,)))  # record; the command line prints it once a command)
    assert _told_records(caplog) == told


def test_a_library_call_prints_nothing(tmp_path):
    model = _plain_model(tmp_path / "plain.onnx")
    code = ("import dataclasses, sys\n"
            "from graphs.costs import roofline_costs\n"
            "from graphs.devices import PRESETS, DeviceSet\n"
            "from graphs.onnx_loader import load_onnx\n"
            "spec = dataclasses.replace(PRESETS['t4'], name='codenpu', unsupported_ops={'CodePlugin'})\n"
            f"c = roofline_costs(load_onnx({model!r}), DeviceSet((spec,), (1,)))\n"
            "assert any('CodePlugin' in w for w in c.warnings), c.warnings\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
