"""Simulation of replicated plans (placement/simulate.py, simulate_plan) against the evaluator
(graphs.parallel): on random plans under every schedule, the busiest device's time per sample is the
evaluator's, every stage's simulated in-flight peak and peak memory are the evaluator's, and the
simulated period is never below it (equal where the schedule has no bubble); ``placement show`` on a
replicated result."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.model import DeviceKind
from graphs.parallel import SCHEDULES, ParallelGraph, ParallelProblem, Stage, Variant
from placement.cli import main
from placement.simulate import simulate_plan
from solvers.dp_stages import solve_problem as exact
from solvers.pipedream_stages import data_parallel
from solvers.pipedream_stages import solve_problem as pipedream
from tests.test_dp_stages import random_problem
from tests.test_piper import _tiny


def _agrees(problem, plan, schedule, batches=None):
    sim = simulate_plan(problem, plan, schedule=schedule, batches=batches)
    assert sim.bottleneck_per_sample == pytest.approx(sim.model_time_per_sample, rel=1e-9, abs=1e-12)
    for s in sim.stages:
        assert s.busy_per_sample == pytest.approx(s.model_time_per_sample, rel=1e-9, abs=1e-12)
        assert s.peak_in_flight == s.model_in_flight
        assert s.peak_memory == pytest.approx(s.model_memory, rel=1e-9, abs=1e-12)
    assert sim.period_per_sample >= sim.bottleneck_per_sample * (1 - 1e-9) - 1e-12
    assert sim.makespan >= sim.period_per_sample * problem.microbatches * (sim.batches - 1) * (1 - 1e-9)
    return sim


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_simulation_agrees_with_the_evaluator_on_random_plans(schedule):
    rng = np.random.default_rng(SCHEDULES.index(schedule))
    checked = multi = 0
    for _ in range(150):
        p = random_problem(rng).with_options(schedule=schedule)
        for solver in (exact, pipedream):
            r = solver(p)
            if r.plan is None:
                continue
            _agrees(p, r.plan, schedule)
            checked += 1
            multi += len(r.plan) > 1 and max(s.d for s in r.plan) > 1
    assert checked > 100 and multi > 8


def test_no_bubble_where_the_model_has_none():
    # pure data parallelism (one stage): under every schedule a batch takes exactly N/d micro-batches'
    # work plus the all-reduce on each replica, so the period is the evaluator's time per sample
    rng = np.random.default_rng(11)
    seen = 0
    for _ in range(80):
        p = random_problem(rng)
        r = data_parallel(p)
        if r.plan is None:
            continue
        for schedule in SCHEDULES:
            sim = _agrees(p.with_options(schedule=schedule), r.plan, schedule)
            assert sim.period_per_sample == pytest.approx(sim.bottleneck_per_sample, rel=1e-9, abs=1e-12)
            seen += r.plan[0].d > 1
    assert seen > 5


@pytest.mark.parametrize("schedule", ["pipedream", "2bw"])
def test_balanced_chain_without_flush_runs_at_the_model_rate(schedule):
    # S equal stages of one device each: 1F1B with S - i in flight keeps every device busy, so without
    # a flush the period is the stage time; with a flush (1f1b, gpipe) fill and drain show as a bubble
    S, N = 4, 8
    tensors = [(u, [u + 1], [0.5]) for u in range(S - 1)]
    vs = [Variant(u, 0, 1, "v", 2.0, a=1.0, b=1.0) for u in range(S)]
    g = ParallelGraph.build(ids=list(range(S)), names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=vs)
    p = ParallelProblem(g, (DeviceKind("gpu", S),), N, schedule)
    plan = [Stage((u,), 0, 1, 1, (u,)) for u in range(S)]
    sim = _agrees(p, plan, schedule, batches=12)
    assert sim.period_per_sample == pytest.approx(sim.model_time_per_sample, rel=1e-9)
    assert [s.peak_in_flight for s in sim.stages] == [4, 3, 2, 1]
    flushed = _agrees(p, plan, "1f1b")
    assert flushed.period_per_sample > flushed.bottleneck_per_sample * 1.1 and flushed.bubble_fraction > 0.1


def test_invalid_plans_are_refused_and_memory_overflow_is_reported():
    vs = [Variant(0, 0, 1, "v", 1.0, a=1.0, b=1.0)]
    g = ParallelGraph.build(ids=[0], names=None, num_kinds=1, edges=[], tensors=[], variants=vs)
    p = ParallelProblem(g, (DeviceKind("gpu", 2, memory=2.5),), 4)
    with pytest.raises(InputError, match="does not divide"):
        simulate_plan(p, [Stage((0,), 0, 3, 1, (0,))])
    with pytest.raises(InputError, match="schedule"):
        simulate_plan(p, [Stage((0,), 0, 1, 1, (0,))], schedule="zigzag")
    sim = simulate_plan(p, [Stage((0,), 0, 1, 1, (0,))], schedule="gpipe")  # 4 in flight: 5 bytes > 2.5
    assert sim.stages[0].peak_in_flight == 4 and sim.stages[0].peak_memory == 5.0
    assert sim.stages[0].peak_memory > sim.stages[0].capacity


# ---------------------------------------------------------------- placement show
@pytest.fixture()
def placed(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_tiny()))
    out = tmp_path / "r.json"
    assert main(["place", str(path), "-o", str(out), "--json"]) == 0
    return str(path), str(out)


def test_show_simulates_a_replicated_plan(placed, capsys):
    _, result = placed
    capsys.readouterr()
    assert main(["show", result, "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "replicated pipeline" in text and "(equal)" in text and "schedule 1f1b" in text
    assert "model s/sample" in text and "simulated peak/device" in text  # a Piper file's unit: seconds
    for schedule in SCHEDULES:
        assert main(["show", result, "--json", "--schedule", schedule]) == 0
        sim = json.loads(capsys.readouterr().out)["simulation"]
        assert sim["schedule"] == schedule
        assert sim["bottleneck_per_sample"] == pytest.approx(sim["model_time_per_sample"], rel=1e-9)
        for s in sim["stages"]:
            assert s["peak_in_flight"] == s["model_in_flight"]
            assert s["peak_memory"] == pytest.approx(s["model_memory"], rel=1e-9)
    # by default the plan's own schedule: the model's time is the result's objective
    assert main(["show", result, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    data = json.loads(open(result).read())
    setting = data["problem"]
    assert sim["schedule"] == setting["schedule"] and sim["microbatches"] == setting["microbatches"]
    assert sim["model_time_per_sample"] == pytest.approx(data["objective"], rel=1e-9)


def test_show_errors_are_one_line(placed, tmp_path, capsys):
    _, result = placed
    capsys.readouterr()
    assert main(["show", result, "--microbatches", "3", "--no-draw"]) == 2  # d must divide N
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
    assert main(["show", result, "--workload", str(tmp_path / "missing.json"), "--no-draw"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


# ---------------------------------------------------------------- ONNX models
@pytest.fixture(scope="module")
def gpt_path(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from graphs.transformer import gpt

    path = tmp_path_factory.mktemp("gpt") / "gpt.onnx"
    onnx.save(gpt(2, hidden=64, heads=4, seq_len=16, vocab=100, weights="random"), str(path))
    return str(path)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_simulation_agrees_on_onnx_training_plans(gpt_path, schedule):
    """A training graph's gradients flow from later stages back to earlier ones (tensors against the
    stage order): the simulation links them as the forward tensor's pair and agrees with the evaluator,
    on cuts of every node into 2 and 3 stages with replicas, and on the optimum."""
    from graphs.devices import parse_devices
    from graphs.onnx_variants import onnx_parallel_problem
    from graphs.onnx_workload import prepare_onnx
    from graphs.order import topological_order

    ds = parse_devices("a100:4,v100:4")
    og, w = prepare_onnx(gpt_path, ds, training=True, batch_size=4)
    for gran in ("layer", "op"):
        p, _ = onnx_parallel_problem(og, w.graph, ds, microbatches=8, schedule=schedule, granularity=gran)
        g = p.graph
        assert any(g.tensor_src[e] > min(g.consumers(e)) for e in range(g.num_tensors))  # gradients
        order = topological_order(g.num_nodes, g.src, g.dst).tolist()
        n = len(order)
        for cuts, degrees in (([n // 2], (2, 4)), ([n // 3, 2 * n // 3], (1, 4, 2))):
            parts = np.split(np.array(order), cuts)
            plan = [Stage(tuple(int(u) for u in part), i % 2, d, 1,
                          tuple(g.options[(int(u), i % 2, 1)][0] for u in part))
                    for i, (part, d) in enumerate(zip(parts, degrees))]
            _agrees(p, plan, schedule)
        r = exact(p)
        _agrees(p, r.plan, schedule)


def test_show_simulates_a_replicated_onnx_plan(gpt_path, tmp_path, capsys):
    """``placement show`` on an ONNX model's replicated result: the problem rebuilt from the result's
    settings (memory set by --device-memory included), times in ms, the evaluator's values."""
    out = tmp_path / "r.json"
    assert main(["place", gpt_path, "--training", "--devices", "a100:4,v100:4", "--batch-size", "4",
                 "--microbatches", "8", "--device-memory", "4e9", "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "(equal)" in text and "model ms/sample" in text and "simulated peak/device" in text
    shown = float(text.split("bottleneck (busiest device) ")[1].split(" ms per sample")[0])
    assert shown == pytest.approx(data["objective"] * 1e3, rel=1e-8)
    for schedule in SCHEDULES:
        assert main(["show", str(out), "--json", "--schedule", schedule]) == 0
        sim = json.loads(capsys.readouterr().out)["simulation"]
        assert sim["schedule"] == schedule
        assert sim["bottleneck_per_sample"] == pytest.approx(sim["model_time_per_sample"], rel=1e-9)
        for s in sim["stages"]:
            assert s["peak_in_flight"] == s["model_in_flight"] and s["capacity"] == 4e9
            assert s["peak_memory"] == pytest.approx(s["model_memory"], rel=1e-9)
    sim = json.loads((main(["show", str(out), "--json"]), capsys.readouterr().out)[1])["simulation"]
    assert sim["model_time_per_sample"] == pytest.approx(data["objective"], rel=1e-9)
    for st, s in zip(data["stages"], sim["stages"]):
        assert s["model_memory"] == pytest.approx(st["memory"]["peak"], rel=1e-9)
    # a result without its settings: one error line
    del data["problem"]["granularity"]
    out.write_text(json.dumps(data))
    assert main(["show", str(out), "--no-draw"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'granularity'" in err[0]
