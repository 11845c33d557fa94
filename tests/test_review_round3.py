"""Review round 3: the stage model names the nodes no device kind runs (never a memory shortfall of
``inf`` bytes), and a one-device-per-stage result's stage fields that are scored nowhere (``d``, ``t``,
``kind``, a stage's devices) are refused when edited, by ``evaluate``, ``show`` and ``split``."""

from __future__ import annotations

import json

import pytest

from placement.cli import main

DEVICES = "a100:2,t4:2,cpu:1"


def _error(capsys) -> str:
    # (a cold kernel cache adds the note that numba compiled them: not what is checked here)
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("note: compil")]
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def _infeasible(model: str, tmp_path, capsys, kinds: str, devices: str, *extra: str) -> str:
    """The one error line of placing ``model`` on ``devices`` defined by the device file ``kinds``."""
    toml = tmp_path / "kinds.toml"
    toml.write_text(kinds)
    assert main(["place", model, "--devices", devices, "--device-file", str(toml), "--time-limit", "30",
                 *extra]) == 1
    return _error(capsys)


def test_stage_model_names_the_nodes_no_kind_runs(example_onnx, tmp_path, capsys):
    """No kind present runs MatMul: the message names the nodes and the kinds, not memory (an unlimited
    CPU's 'inf bytes'), as the one-device-per-stage model's does."""
    kinds = ('[devices.cpu]\nbase = "cpu"\nunsupported_ops = ["MatMul"]\n'
             '[devices.t4]\nbase = "t4"\nunsupported_ops = ["MatMul"]\n')
    for extra in ([], ["--granularity", "op"]):
        err = _infeasible(example_onnx, tmp_path, capsys, kinds, "cpu:1,t4:1", *extra)
        assert err.startswith("error: infeasible:") and "no device can hold node(s) " in err
        assert "not supported on cpu; not supported on t4" in err
        assert "inf" not in err.replace("infeasible", "") and "fits a device alone" not in err
    # at operator granularity the operators themselves are named
    assert "layer0/attn/q_proj" in err


def test_stage_model_without_memory_limits_blames_the_counts(example_onnx, tmp_path, capsys):
    """Every node runs on one of two unlimited-memory kinds, but MatMul and Softmax alternate between
    them: no split into two stages exists, and memory is not why."""
    err = _infeasible(example_onnx, tmp_path, capsys,
                      '[devices.cpu]\nbase = "cpu"\nunsupported_ops = ["MatMul"]\n'
                      '[devices.cpu2]\nbase = "cpu"\nunsupported_ops = ["Softmax"]\n',
                      "cpu:1,cpu2:1", "--granularity", "op")
    assert "no plan fits the devices' counts" in err and "no device's memory is limited" in err
    assert "inf bytes" not in err and "micro-batches in flight" not in err


def test_stage_model_node_too_large_where_it_runs(example_onnx, tmp_path, capsys):
    """MatMul runs only on a t4 too small for it; the CPU's unlimited memory does not make it fit."""
    err = _infeasible(example_onnx, tmp_path, capsys,
                      '[devices.cpu]\nbase = "cpu"\nunsupported_ops = ["MatMul"]\n'
                      '[devices.t4]\nbase = "t4"\nmemory_gib = 0.000001\n',
                      "cpu:1,t4:1", "--granularity", "op")
    assert "layer0/attn/q_proj (1.25 MiB)" in err
    assert "fit no device even alone (largest memory 1.05 KiB)" in err
    assert "inf" not in err.replace("infeasible", "")


@pytest.fixture(scope="module")
def one_device_result(example_onnx, tmp_path_factory):
    out = tmp_path_factory.mktemp("mr1") / "mr1.json"
    assert main(["place", example_onnx, "--devices", DEVICES, "--max-replicas", "1", "--time-limit", "30",
                 "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _other(kind: str) -> str:
    return "t4" if kind != "t4" else "a100"


EDITS = {
    "stages[0].dataParallelDegree": lambda r: r["stages"][0].update(dataParallelDegree=2),
    "stages[0].tensorParallelDegree": lambda r: r["stages"][0].update(tensorParallelDegree=2),
    "stages[0].kind": lambda r: r["stages"][0].update(kind=_other(r["stages"][0]["kind"])),
    "stages[0].devices": lambda r: r["stages"][0].update(devices=[*r["stages"][0]["devices"], "cpu:0"]),
    "devices[0].kind": lambda r: r["devices"][0].update(kind=_other(r["devices"][0]["kind"])),
}


@pytest.mark.parametrize("command", ["evaluate", "show", "split"])
@pytest.mark.parametrize("field", list(EDITS))
def test_edited_one_device_stage_fields_are_refused(example_onnx, one_device_result, tmp_path, capsys,
                                                    command, field):
    edited = json.loads(json.dumps(one_device_result))
    EDITS[field](edited)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    argv = {"evaluate": ["evaluate", example_onnx, str(path), "--devices", DEVICES],
            "show": ["show", str(path), "--workload", example_onnx, "--devices", DEVICES, "--no-draw"],
            "split": ["split", example_onnx, str(path), "--out-dir", str(tmp_path / "split")]}[command]
    capsys.readouterr()
    assert main(argv) == 2
    err = _error(capsys)
    assert field in err and "edited.json" in err
    assert not (tmp_path / "split").exists()


def test_unedited_one_device_result_still_reads(example_onnx, one_device_result, tmp_path, capsys):
    path = tmp_path / "mr1.json"
    path.write_text(json.dumps(one_device_result))
    capsys.readouterr()
    assert main(["evaluate", example_onnx, str(path), "--devices", DEVICES, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["objective"] == pytest.approx(one_device_result["objective"])
