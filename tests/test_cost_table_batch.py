"""A cost table (``--costs TABLE.json``) holds one run's times at the batch size they were measured at,
and they are not scaled to another: a table that says its ``"batch_size"`` is used at that batch only (any
other is an error naming the table and both sizes, a sweep's sizes too); one that says none is used as
given at any batch, with a warning naming the table above batch 1. The times expected are the table's own
(by hand), whatever the batch."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.onnx_workload import onnx_workload
from placement.cli import main

DEVICES = "a100:2,cpu:1"
A100, CPU = 0.01, 0.5  # ms per operator in the tables below


@pytest.fixture(scope="module")
def names(example_onnx) -> tuple[str, ...]:
    return onnx_workload(example_onnx, DEVICES).graph.names


def _table(tmp_path, names, name: str = "t.json", **extra) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"unit": "ms", **extra,
                                "compute": {n: {"a100": A100, "cpu": CPU} for n in names}}))
    return str(path)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "batch_size" in r.getMessage()]


@pytest.mark.parametrize("batch", [1, 8])
def test_a_table_is_used_at_the_batch_it_names(example_onnx, names, tmp_path, caplog, batch):
    table = _table(tmp_path, names, batch_size=batch)
    with caplog.at_level(logging.WARNING, logger="graphs"):
        g = onnx_workload(example_onnx, DEVICES, costs=table, batch_size=batch).graph
    assert g.batch_size == batch
    np.testing.assert_array_equal(g.compute, np.array([[A100] * len(names), [CPU] * len(names)]))
    assert _warnings(caplog) == []


@pytest.mark.parametrize("table_batch, batch", [(1, 8), (8, 1), (8, 4)])
def test_another_batch_is_an_error_naming_the_table_and_both_sizes(example_onnx, names, tmp_path,
                                                                   table_batch, batch):
    table = _table(tmp_path, names, batch_size=table_batch)
    with pytest.raises(InputError) as e:
        onnx_workload(example_onnx, DEVICES, costs=table, batch_size=batch)
    msg = str(e.value)
    assert msg.startswith(f"{table}: ")
    assert f"measured at batch size {table_batch}" in msg and f"placed at batch size {batch}" in msg


def test_a_table_without_a_batch_size_is_used_as_given_with_a_warning_above_1(example_onnx, names, tmp_path,
                                                                              caplog):
    table = _table(tmp_path, names)
    with caplog.at_level(logging.WARNING, logger="graphs"):
        one = onnx_workload(example_onnx, DEVICES, costs=table, batch_size=1).graph
    assert _warnings(caplog) == []  # batch 1, the default: nothing to say
    with caplog.at_level(logging.WARNING, logger="graphs"):
        eight = onnx_workload(example_onnx, DEVICES, costs=table, batch_size=8).graph
    [warning] = _warnings(caplog)
    assert warning.startswith(f"{table}: ") and "used as given at batch size 8" in warning
    assert warning in [f"{table}: {w}" for w in eight.meta["warnings"]]  # recorded with the graph too
    np.testing.assert_array_equal(one.compute, eight.compute)  # as given: the table's times, unscaled
    assert eight.compute[0, 0] == A100 and eight.compute[1, 0] == CPU


@pytest.mark.parametrize("value", [0, -1, 8.0, "8", True])
def test_a_batch_size_that_is_not_a_positive_integer_names_the_table_and_field(example_onnx, names, tmp_path,
                                                                              value):
    table = _table(tmp_path, names, batch_size=value)
    with pytest.raises(InputError) as e:
        onnx_workload(example_onnx, DEVICES, costs=table, batch_size=8)
    assert str(e.value).startswith(f"{table}: ")
    assert '"batch_size"' in str(e.value) and "positive integer" in str(e.value)


def _place(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_the_command_line_warns_once_and_refuses_another_batch(example_onnx, names, tmp_path, capsys):
    bare = _table(tmp_path, names)
    code, out, err = _place(capsys, "place", example_onnx, "--devices", DEVICES, "--costs", bare,
                            "--max-replicas", "1", "--batch-size", "8")
    assert code == 0 and "per batch of 8" in out
    lines = [x for x in err.splitlines() if "batch_size" in x]
    assert lines == [f'warning: {bare}: cost table gives no "batch_size": its times are used as given at '
                     f'batch size 8, unscaled (give the batch size it was measured at, "batch_size": N, to '
                     f'have that checked)']

    one = _table(tmp_path, names, "t1.json", batch_size=1)
    for sizes in ("8", "1,8"):  # a sweep's other sizes too
        code, out, err = _place(capsys, "place", example_onnx, "--devices", DEVICES, "--costs", one,
                                "--max-replicas", "1", "--batch-size", sizes)
        assert code != 0
        assert (f"error: {one}: the table's times were measured at batch size 1 and the model is placed at "
                f"batch size 8") in err
