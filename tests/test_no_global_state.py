"""A library call keeps no process-wide state (the project's rule: plain functions and dataclasses, no
global state, no printing). 9e130c3 kept two module-level records: ``graphs.devices._SOURCES``, where each
custom operator name of a kind read from a device file came from, keyed by (kind, field, names, name), so
that two files defining the same kind with the same name shared one entry (the later file's), and
``graphs.costs._TOLD``, so that a model's custom-name warning was logged once a process (a second costing,
even by another command run in the same process, logged nothing). Now where a name came from is the
kind's own ``DeviceSpec.name_origins`` (kept by copies, compared by nothing, left out of a curve's cache
key), the library logs the warning at every costing, and the command line prints each distinct warning
once a command."""

from __future__ import annotations

import dataclasses
import logging

import onnx
from onnx import TensorProto, helper

from graphs.costs import roofline_costs
from graphs.devices import DeviceSet, custom_operator_names, parse_devices, read_device_file
from graphs.onnx_loader import load_onnx
from placement.cli import main
from placement.cluster.curves import _spec_key

VI = helper.make_tensor_value_info
NPU = '[devices.npu]\nbase = "t4"\nunsupported_ops = ["MyPlugin"]\n'  # the review's custom_unsupported.toml


def _told(model: str) -> str:
    """The words after ``where: 'Name' `` when no operator of ``model`` has that name (written by hand)."""
    return (f"is not a standard operator type (ONNX's or onnxruntime's), and no operator of {model} has "
            f"that type: it applies to custom operators of that name only, so to nothing here")


def _plain_model(path) -> str:
    """x -> Relu -> Relu -> y: no custom operator."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="r0"),
                               helper.make_node("Relu", ["a"], ["y"], name="r1")], "g",
                              [VI("x", TensorProto.FLOAT, [1, 64])], [VI("y", TensorProto.FLOAT, [1, 64])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "is not a standard operator type" in r.getMessage()]


def test_two_files_defining_the_same_kind_and_name_each_name_their_own_entry(tmp_path, caplog):
    """a.toml and b.toml both define npu with unsupported_ops = ["MyPlugin"]: each kind names its own
    file. (The old record was keyed by kind, field, names and name, so a.toml's kind named b.toml once
    b.toml was read.)"""
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(NPU)
    b.write_text(NPU)
    spec_a = read_device_file(a)[0]["npu"]
    spec_b = read_device_file(b)[0]["npu"]
    assert [w for w, _, _ in custom_operator_names(spec_a)] == [f"{a}: devices.npu.unsupported_ops[0]"]
    assert [w for w, _, _ in custom_operator_names(spec_b)] == [f"{b}: devices.npu.unsupported_ops[0]"]
    model = _plain_model(tmp_path / "plain.onnx")
    g = load_onnx(model)
    with caplog.at_level(logging.WARNING):
        roofline_costs(g, DeviceSet((spec_a,), (1,)))
    assert _records(caplog) == [f"{a}: devices.npu.unsupported_ops[0]: 'MyPlugin' {_told(model)}"]


def test_the_origins_are_the_specs_kept_by_copies_and_compared_by_nothing(tmp_path):
    f = tmp_path / "npu.toml"
    f.write_text(NPU)
    spec = parse_devices("npu:1", [f]).specs[0]
    assert spec.name_origins == {("unsupported_ops", "MyPlugin"): f"{f}: devices.npu.unsupported_ops[0]"}
    copy = dataclasses.replace(spec, memory=1e9)  # as --device-memory makes
    assert custom_operator_names(copy) == custom_operator_names(spec)
    bare = dataclasses.replace(spec, name_origins={})  # the same figures, built in code
    assert bare == spec and hash(bare) == hash(spec)
    assert "name_origins" not in repr(spec) and str(f) not in repr(spec)
    assert [w for w, _, _ in custom_operator_names(bare)] == ["device 'npu': unsupported_ops"]


def test_a_curves_cache_key_does_not_hold_where_a_name_came_from(tmp_path):
    """The same figures read from two files: one key; a figure changed: another."""
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(NPU)
    b.write_text(NPU)
    spec_a, spec_b = (read_device_file(p)[0]["npu"] for p in (a, b))
    assert spec_a.name_origins != spec_b.name_origins
    assert _spec_key(spec_a) == _spec_key(spec_b)
    assert "name_origins" not in _spec_key(spec_a)
    assert _spec_key(dataclasses.replace(spec_a, memory=1e9)) != _spec_key(spec_a)


def test_costing_twice_logs_twice(tmp_path, caplog):
    """The library logs at each costing (what its caller does with it is the caller's business)."""
    f = tmp_path / "npu.toml"
    f.write_text(NPU)
    model = _plain_model(tmp_path / "plain.onnx")
    g = load_onnx(model)
    devices = parse_devices("npu:1,cpu:1", [f])
    line = f"{f}: devices.npu.unsupported_ops[0]: 'MyPlugin' {_told(model)}"
    with caplog.at_level(logging.WARNING):
        first = roofline_costs(g, devices)
        second = roofline_costs(g, devices)
    assert _records(caplog) == [line, line]
    assert line in first.warnings and line in second.warnings


def _place(tmp_path, *extra: str) -> list[str]:
    return ["place", "plain.onnx", "--devices", "npu:1,cpu:1", "--device-file", "npu.toml", "--out", "r.json",
            *extra]


def test_the_command_line_prints_each_warning_once_a_command(tmp_path, monkeypatch, capsys):
    """A batch-size sweep costs the model at each size: one line. A second command in the same process
    (as a test or a notebook runs them) prints it again, once."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "npu.toml").write_text(NPU)
    _plain_model(tmp_path / "plain.onnx")
    start = "warning: npu.toml: devices.npu.unsupported_ops[0]: 'MyPlugin' is not a standard operator type"
    for extra in (("--batch-size", "1,2,4"), ("--batch-size", "1,2,4"), ()):
        assert main(_place(tmp_path, *extra)) == 0
        err = capsys.readouterr().err
        # (a sweep costs a copy of the model with a symbolic batch, which the line names: not checked here)
        told = [x for x in err.splitlines() if "is not a standard operator type" in x]
        assert len(told) == 1 and told[0].startswith(start), (extra, err)
    assert told == [f"{start} {_told('plain.onnx')[len('is not a standard operator type '):]}"]
