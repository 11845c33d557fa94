"""What a new user ran into, each now a clear answer: one ``error:`` line and a non-zero exit, never a
traceback, never an option silently ignored."""

from __future__ import annotations

import re

import pytest

from placement.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("onnx")
    path = str(tmp_path_factory.mktemp("m") / "model.onnx")
    assert main(["example", path]) == 0
    return path


def _one_error(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    for w in words:
        assert w in err[0], err
    return err[0]


@pytest.mark.parametrize("flags, words", [
    (["--solver", "local-search", "--seed", "-1"], ["--seed", "non-negative"]),
    (["--max-replicas", "0"], ["--max-replicas", "positive"]),
    (["--microbatches", "0"], ["--microbatches", "positive"]),
    (["--schedule", "gpipe", "--max-replicas", "1"], ["--schedule", "stage-model"]),
    (["--granularity", "op", "--max-replicas", "1"], ["--granularity", "stage-model"]),
])
def test_place_refuses_bad_or_inapplicable_options(model, capsys, flags, words):
    assert main(["place", model, "--devices", "a100:2", *flags]) == 2
    _one_error(capsys, *words)


def test_evaluate_with_its_arguments_swapped_says_so(model, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["place", model, "--devices", "a100:2", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), model]) == 2
    _one_error(capsys, "WORKLOAD RESULT", f"placement evaluate {model} {out}")


def test_bench_with_no_workloads_is_an_error_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["bench", "--workloads", str(tmp_path / "none"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: no workloads found" in err
    assert not out.exists() or not any(p.suffix in (".md", ".csv") for p in out.rglob("*"))


def test_a_baseline_with_no_placement_is_unknown_not_feasible(tmp_path, capsys):
    """local-search or partition finding nothing used to report 'feasible' with max_load null."""
    from graphs import Cluster, DeviceKind, Node, OpGraph
    from solvers.base import SolveOptions, Status
    from solvers.registry import solve

    # two nodes that each fill a device: no device holds both, and there is one device
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, memory=3.0), Node("b", {"gpu": 1.0}, memory=3.0)],
                           [("a", "b")])
    cl = Cluster((DeviceKind("gpu", 1, memory=4.0),))
    for name in ("local-search", "partition", "single", "pipedream"):
        sol = solve(g, cl, solver=name, options=SolveOptions(time_limit=5))
        assert sol.assignment is None and sol.status is Status.UNKNOWN, (name, sol.status)
    exact = solve(g, cl, solver="dp")
    assert exact.status is Status.INFEASIBLE


def test_a_batch_plan_is_labelled_per_batch(model, capsys):
    """``place --batch-size 8`` prints one batch's latency: before, it said 'one sample'. A stage plan
    (replicas, the default) divides its times by the batch: they are per sample, and say so."""
    assert main(["place", model, "--devices", "a100:2", "--batch-size", "8", "--max-replicas", "1"]) == 0
    out = capsys.readouterr().out
    assert "(one batch of 8 samples, latency model)" in out and "(one sample" not in out
    batch = float(re.search(r"max-load ([\d.]+) ms", out).group(1))
    assert main(["place", model, "--devices", "a100:1", "--batch-size", "8"]) == 0
    one = float(re.search(r"max-load ([\d.]+) ms per sample", capsys.readouterr().out).group(1))
    assert main(["place", model, "--devices", "a100:1", "--batch-size", "8", "--max-replicas", "1"]) == 0
    single = float(re.search(r"max-load ([\d.]+) ms", capsys.readouterr().out).group(1))
    assert one == pytest.approx(single / 8, rel=1e-3) and batch > 0  # one A100: the batch's time / 8


def test_show_of_a_batch_plan_says_per_batch(model, tmp_path, capsys):
    out = tmp_path / "b8.json"
    assert main(["place", model, "--devices", "a100:2", "--batch-size", "8", "--max-replicas", "1",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "per batch (8 samples)" in text and "one-batch latency" in text and "per sample" not in text
