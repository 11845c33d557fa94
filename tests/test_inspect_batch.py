"""``placement inspect -o`` at ``--batch-size N`` records ``"batch_size": N`` in the reference-format file it
writes, and the readers honour it as they honour the ONNX model at that batch: its times are per run of
the batch (``graph.meta["batch_size"]``), and ``place``, ``evaluate`` and ``show`` of the file print what
they print for the model at ``--batch-size N``. The expected lines come from the ONNX model placed at the
same batch (a second path to the same figures), and the per-sample figures from the max-load by hand. A
file without the field is per sample, as before; a field that is not a positive integer is an error
naming the file and the field."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.reference import parse_workload, read_workload
from placement.cli import main

DEVICES = "t4:2,cpu:1"


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _line(out: str, start: str) -> str:
    """The printed line that starts with ``start``, without the solve time (it varies)."""
    [line] = [x for x in out.splitlines() if x.startswith(start)]
    return re.sub(r", time \d+(\.\d+)? s", "", line)


@pytest.fixture(scope="module")
def graph4(example_onnx, tmp_path_factory) -> str:
    """``inspect -o`` of the example model at batch 4."""
    path = tmp_path_factory.mktemp("inspect") / "g4.json"
    assert main(["inspect", example_onnx, "--devices", DEVICES, "--batch-size", "4", "-o", str(path)]) == 0
    return str(path)


def test_the_file_records_its_batch_and_reads_back_as_the_model_at_that_batch(example_onnx, graph4):
    from graphs.onnx_workload import onnx_workload

    with open(graph4, encoding="utf-8") as f:
        assert json.load(f)["batch_size"] == 4
    ref = read_workload(graph4).graph
    onnx = onnx_workload(example_onnx, DEVICES, batch_size=4).graph
    assert ref.batch_size == onnx.batch_size == 4
    assert ref.kinds == onnx.kinds == ("t4", "cpu")
    np.testing.assert_array_equal(ref.compute, onnx.compute)


def test_inspect_says_its_times_are_per_batch(example_onnx, graph4, tmp_path, capsys):
    code, out, _ = _run(capsys, "inspect", example_onnx, "--devices", DEVICES, "--batch-size", "4", "-o",
                        tmp_path / "again.json")
    assert code == 0 and "costs in ms per batch of 4," in out
    code, out, _ = _run(capsys, "inspect", example_onnx, "--devices", DEVICES, "-o", tmp_path / "g1.json")
    assert code == 0 and "costs in ms," in out  # batch 1: per sample, as before
    with open(tmp_path / "g1.json", encoding="utf-8") as f:
        assert json.load(f)["batch_size"] == 1


def test_place_evaluate_and_show_print_the_file_as_the_model_at_its_batch(example_onnx, graph4, tmp_path,
                                                                          capsys):
    mine, theirs = tmp_path / "ref.json", tmp_path / "onnx.json"
    code, out_ref, _ = _run(capsys, "place", graph4, "--out", mine)
    assert code == 0
    code, out_onnx, _ = _run(capsys, "place", example_onnx, "--devices", DEVICES, "--batch-size", "4",
                             "--max-replicas", "1", "--out", theirs)
    assert code == 0
    line = _line(out_ref, "max-load")
    assert line == _line(out_onnx, "max-load")
    # by hand: per sample = max-load / 4, samples/s = 4 x 1000 / max-load (ms)
    m, per, rate = map(float, re.match(r"max-load (\S+) ms per batch of 4 \((\S+) ms per sample, (\S+) "
                                       r"samples/s\)", line).groups())
    assert per == pytest.approx(m / 4, rel=1e-8) and rate == pytest.approx(4e3 / m, rel=1e-5)
    assert "latency" in line and "(one batch of 4 samples, latency model)" in line

    code, ev_ref, _ = _run(capsys, "evaluate", graph4, mine)
    assert code == 0
    code, ev_onnx, _ = _run(capsys, "evaluate", example_onnx, theirs)
    assert code == 0
    assert _line(ev_ref, "max-load") == _line(ev_onnx, "max-load")
    assert "per batch of 4" in _line(ev_ref, "max-load")

    code, show_ref, _ = _run(capsys, "show", mine)
    assert code == 0
    code, show_onnx, _ = _run(capsys, "show", theirs)
    assert code == 0
    assert _line(show_ref, "steady state") == _line(show_onnx, "steady state")
    assert "per batch (4 samples)" in _line(show_ref, "steady state")

    with open(mine, encoding="utf-8") as f:
        stages = json.load(f)["stages"]
    assert stages and all(s["batch_size"] == 4 for s in stages)
    for s in stages:
        assert s["time_per_sample"] == pytest.approx(s["time_per_batch"] / 4, rel=1e-12)


def test_a_file_without_the_field_is_per_sample(graph4, tmp_path, capsys):
    with open(graph4, encoding="utf-8") as f:
        doc = json.load(f)
    del doc["batch_size"]
    graph = parse_workload(doc, source="g.json").graph
    assert graph.batch_size == 1 and "batch_size" not in graph.meta
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    code, out, _ = _run(capsys, "place", path)
    assert code == 0
    line = _line(out, "max-load")
    m, rate = re.match(r"max-load (\S+) ms per sample \((\S+) samples/s\)", line).groups()
    # its times (per run of a batch of 4) read as per sample, as before the field
    assert float(rate.replace(",", "")) == pytest.approx(1e3 / float(m), rel=1e-5)
    doc["batch_size"] = None  # as the kind names: null is no field
    assert parse_workload(doc, source="g.json").graph.batch_size == 1


@pytest.mark.parametrize("value", [0, -2, 4.0, "4", True, [4]])
def test_a_batch_size_that_is_not_a_positive_integer_names_the_file_and_field(graph4, value):
    with open(graph4, encoding="utf-8") as f:
        doc = json.load(f)
    doc["batch_size"] = value
    with pytest.raises(InputError) as e:
        parse_workload(doc, source="bad.json")
    assert str(e.value).startswith("bad.json: ")
    assert '"batch_size"' in str(e.value) and "positive integer" in str(e.value)


def test_the_command_line_names_the_file_too(graph4, tmp_path, capsys):
    with open(graph4, encoding="utf-8") as f:
        doc = json.load(f)
    doc["batch_size"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, _, err = _run(capsys, "place", path)
    assert code != 0
    assert f'error: {path}: "batch_size"' in err and "got 0" in err
