"""Device-file (``--device-file``) figures are checked in the unit and under the key the file writes,
before they are converted: an error names the file, the section and the key with the value as written
(``bad.toml: devices.cpu.launch_us must be a number >= 0, got -5``), where it named the internal field in
SI units (``launch must be a non-negative number, got -4.9999999999999996e-06``); inf and nan are refused
where a finite figure is meant, and an ``op_gflops`` key that is no operator type is refused by name."""

from __future__ import annotations

import json
import re

import pytest

from graphs.devices import read_device_file
from graphs.errors import InputError
from placement.cli import main


def _file(tmp_path, body: str, base: str = "cpu", name: str = "bad.toml"):
    f = tmp_path / name
    f.write_text(f'[devices.{base}]\nbase = "{base}"\n{body}\n')
    return f


def _error(f) -> str:
    with pytest.raises(InputError) as e:
        read_device_file(f)
    return str(e.value)


@pytest.mark.parametrize("base, body, message", [
    # the reviewer's four rows
    ("cpu", "launch_us = -5", "devices.cpu.launch_us must be a number >= 0, got -5"),
    ("cpu", "matmul_tflops = -1", "devices.cpu.matmul_tflops must be a number > 0, got -1"),
    ("a100", "memory_gib = -3", "devices.a100.memory_gib must be a number > 0, got -3"),
    ("cpu", "nvlink_gbs = 0", "devices.cpu.nvlink_gbs must be a number > 0, got 0"),
    # non-finite figures
    ("cpu", "fp32_tflops = inf", "devices.cpu.fp32_tflops must be a finite number > 0, got inf"),
    ("cpu", "fp32_tflops = nan", "devices.cpu.fp32_tflops must be a finite number > 0, got nan"),
    ("cpu", "launch_us = inf", "devices.cpu.launch_us must be a finite number >= 0, got inf"),
    ("a100", "nvlink_gbs = inf", "devices.a100.nvlink_gbs must be a finite number > 0, got inf"),
    ("cpu", "op_gflops = { Softmax = nan }",
     "devices.cpu.op_gflops.Softmax must be a finite number > 0, got nan"),
    ("cpu", "depthwise_gflops = [1, inf]\ndepthwise_channel_us = [1, 2]",
     "devices.cpu.depthwise_gflops[1] must be a finite number > 0, got inf"),
    ("cpu", "bandwidth_curve = [[1e4, nan]]",
     "devices.cpu.bandwidth_curve[0][1] must be a finite number > 0, got nan"),
    ("cpu", "transpose_gbs = 50\ntranspose_block_us = -inf",
     "devices.cpu.transpose_block_us must be a finite number >= 0, got -inf"),
    # the rest in the file's own units and words
    ("cpu", "efficiency = 0", "devices.cpu.efficiency must be a number in (0, 1], got 0"),
    ("cpu", "price_per_hour = -0.5", "devices.cpu.price_per_hour must be a number >= 0, got -0.5"),
    ("cpu", "fp16_tflops = true", "devices.cpu.fp16_tflops must be a number > 0, got true"),
    ("cpu", "server_size = 0", "devices.cpu.server_size must be an integer >= 1, got 0"),
    ("cpu", "count = -2", "devices.cpu.count must be an integer >= 0, got -2"),
])
def test_a_bad_figure_is_named_by_its_key_in_the_files_unit(tmp_path, base, body, message):
    err = _error(_file(tmp_path, body, base))
    assert err == f"{tmp_path / 'bad.toml'}: {message}"


def test_inf_is_no_longer_used_as_a_rate(tmp_path):
    """fp32_tflops = inf was accepted, and every operator cost only its memory traffic."""
    err = _error(_file(tmp_path, "fp32_tflops = inf"))
    assert "fp32_tflops must be a finite number > 0, got inf" in err


def test_an_op_gflops_key_that_is_no_operator_type_is_refused_by_name(tmp_path):
    err = _error(_file(tmp_path, "op_gflops = { Softmax = 2, Softmaxx = 1 }"))
    assert "devices.cpu.op_gflops: 'Softmaxx' is not an operator type; did you mean Softmax" in err
    assert "accepted: ONNX operator types" in err and "contrib types" in err
    assert "case-sensitive" in _error(_file(tmp_path, "op_gflops = { softmax = 1 }"))


def test_op_gflops_takes_onnx_and_contrib_types(tmp_path):
    f = _file(tmp_path, "op_gflops = { Softmax = 2, LayerNormalization = 3, FusedMatMul = 4, FastGelu = 5, "
                        "SkipLayerNormalization = 6, LabelEncoder = 7 }", name="ok.toml")
    s = read_device_file(f)[0]["cpu"]
    assert s.flop_rate("FastGelu") == pytest.approx(5e9) and s.flop_rate("Softmax") == pytest.approx(2e9)


def test_every_operator_type_the_cost_model_prices_is_accepted(tmp_path):
    from graphs import costs
    from graphs.devices import CONV_TYPES, MATMUL_TYPES

    priced = (set(costs._PER_ELEMENT) | set(costs._FORMULAS) | set(costs._REDUCE) | set(costs._MOVE)
              | set(costs._VIEW) | set(costs._CONTROL) | set(costs._SUM_INPUTS) | CONV_TYPES | MATMUL_TYPES)
    f = tmp_path / "all.json"
    rates = dict.fromkeys(sorted(priced), 1)
    f.write_text(json.dumps({"devices": {"cpu": {"base": "cpu", "op_gflops": rates}}}))
    assert len(read_device_file(f)[0]["cpu"].op_flops) == len(priced)


def test_json_files_name_the_section_as_written(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"my gpu": {"base": "a100", "launch_us": float("nan")}}))
    assert _error(f).endswith('"my gpu": a kind name must be non-empty without \':\', \',\', \'@\' or spaces')
    f.write_text('{"devices": {"g": {"base": "a100", "link_gbs": Infinity}}}')
    assert _error(f).endswith("devices.g: an accelerator needs link_gbs (host link bandwidth) "
                              "(devices.g.link_gbs is unlimited: only a host's link is), or set host = true "
                              "for a host CPU core")


def _tiny_model(path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_the_command_line_says_it_in_one_error_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny_model(tmp_path / "m.onnx")
    _file(tmp_path, "launch_us = -5")
    assert main(["place", "m.onnx", "--devices", "cpu:1", "--device-file", "bad.toml"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["error: bad.toml: devices.cpu.launch_us must be a number >= 0, got -5"], err
    assert not re.search(r"e-0\d", err[0])


@pytest.mark.parametrize("key", ["fp32", "fp16", "mem_bandwidth", "intra_bandwidth", "inter_bandwidth"])
def test_a_device_built_in_code_refuses_an_infinite_rate(key):
    """DeviceSpec built directly (not from a file) refused inf only for some rates: an infinite FLOP rate or
    bandwidth made a kind's work free. A host's link may still be unlimited (it pays no transfer)."""
    import dataclasses
    import math

    from graphs.devices import PRESETS

    with pytest.raises(InputError, match=f"{key} must be a positive finite number, got inf"):
        dataclasses.replace(PRESETS["a100"], **{key: math.inf})
    assert PRESETS["cpu"].link_bandwidth == math.inf  # the host preset stands


def test_an_unsupported_op_that_is_no_operator_type_is_refused(tmp_path):
    """unsupported_ops = ["Matmul"] (MatMul misspelt) left the kind running every MatMul without a word."""
    from graphs.devices import parse_devices

    f = tmp_path / "d.toml"
    f.write_text('[devices.cpu]\nbase = "cpu"\nunsupported_ops = ["LRN", "Matmul"]\n')
    with pytest.raises(InputError, match=r"devices\.cpu\.unsupported_ops\[1\]: 'Matmul' is not an operator "
                                         r"type; did you mean MatMul"):
        parse_devices("cpu:1", [str(f)])
    f.write_text('[devices.cpu]\nbase = "cpu"\nunsupported_ops = ["LRN", "MatMul"]\n')
    assert parse_devices("cpu:1", [str(f)]).specs[0].unsupported_ops == {"LRN", "MatMul"}


@pytest.mark.parametrize("value", ["inf", '"unlimited"'])
def test_a_host_link_may_be_unlimited_as_the_cpu_preset_is(tmp_path, value):
    """link_gbs = inf restates the cpu preset's own link (a host's data is in host memory): cbe6584's
    finite check refused it, where the library's DeviceSpec accepts it (found by a diff review)."""
    import math

    from graphs.devices import parse_devices

    f = tmp_path / "d.toml"
    f.write_text(f'[devices.myhost]\nbase = "cpu"\nlink_gbs = {value}\n')
    assert parse_devices("myhost:1", [str(f)]).specs[0].link_bandwidth == math.inf
    f.write_text('[devices.myhost]\nbase = "cpu"\nlink_gbs = nan\n')
    with pytest.raises(InputError, match="link_gbs must be a finite number"):
        parse_devices("myhost:1", [str(f)])
