"""Simulation of replicated plans (placement/simulate.py, simulate_plan) against the evaluator
(graphs.parallel): on random plans under every schedule, the busiest device's time per sample is the
evaluator's, every stage's simulated in-flight peak and peak memory are the evaluator's, and the
simulated period is never below it (equal where the schedule has no bubble); ``placement show`` on a
replicated result; a one-device-per-stage placement simulated as a stage plan at d = t = 1 agrees with
the pipeline path (``simulate``) on what both define alike."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.parallel import (
    SCHEDULES,
    ParallelGraph,
    ParallelProblem,
    Stage,
    Variant,
    evaluate_plan,
    from_opgraph,
)
from graphs.training import derive_training
from placement.cli import main
from placement.simulate import simulate, simulate_plan
from solvers.dp_stages import solve_problem as exact
from solvers.pipedream_stages import data_parallel
from solvers.pipedream_stages import solve_problem as pipedream
from tests.instances import all_small
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


def test_streaming_with_state_held_is_the_evaluators_gpipe_memory():
    """An LLM's decode streams its steps but keeps every sequence's KV cache between them: the decode
    problem is sized under gpipe (y = N/d), and show simulated stream with one micro-batch held (its
    peak memory below the plan's). ``resident`` holds every micro-batch a replica serves: on random
    plans each stage's simulated y and peak memory are the evaluator's under gpipe, the time per
    sample unchanged; a schedule other than stream refuses it (it holds what it stashes)."""
    rng = np.random.default_rng(5)
    held = 0
    for _ in range(120):
        p = random_problem(rng).with_options(schedule="gpipe")
        r = exact(p)
        if r.plan is None:
            continue
        sim = simulate_plan(p, r.plan, schedule="stream", forward_fraction=1.0, resident=True)
        plain = simulate_plan(p, r.plan, schedule="stream", forward_fraction=1.0)
        assert sim.resident and not plain.resident
        ev = evaluate_plan(p, r.plan)
        for s, se, st in zip(sim.stages, ev.stages, r.plan):
            assert s.peak_in_flight == se.in_flight == p.microbatches // st.d
            assert s.peak_memory == pytest.approx(se.memory, rel=1e-9, abs=1e-12)
        assert sim.bottleneck_per_sample == pytest.approx(plain.bottleneck_per_sample, rel=1e-12)
        held += any(s.peak_in_flight > 1 for s in sim.stages)
        with pytest.raises(InputError, match="stream"):
            simulate_plan(p, r.plan, schedule="1f1b", resident=True)
    assert held > 10


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
    assert "stage pipeline" in text and "(equal)" in text and "schedule 1f1b" in text
    assert "load (s/sample)" in text and "simulated peak/device" in text  # a Piper file's unit: seconds
    for schedule in SCHEDULES:  # the figures only: each schedule's chart is tests/test_draw_scale.py's
        assert main(["show", result, "--json", "--schedule", schedule, "--no-draw"]) == 0
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
    assert "(equal)" in text and "load (ms/sample)" in text and "simulated peak/device" in text
    shown = float(text.split("bottleneck (busiest device) ")[1].split(" ms per sample")[0])
    assert shown == pytest.approx(data["objective"] * 1e3, rel=1e-8)
    for schedule in SCHEDULES:  # the figures only: each schedule's chart is tests/test_draw_scale.py's
        assert main(["show", str(out), "--json", "--schedule", schedule, "--no-draw"]) == 0
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


# ---------------------------------------------------------------- one device per stage, both ways
def _as_stage_plan(graph, cluster, assignment, microbatches):
    """A one-device-per-stage placement as a stage plan at d = t = 1 (:func:`from_opgraph`), its
    stages in the evaluator's stage order (the pipeline path's stage numbers)."""
    problem, item = from_opgraph(graph, cluster, microbatches=microbatches)
    option = {(v.node, v.kind): i for i, v in enumerate(problem.graph.variants)}
    kind = cluster.device_kind()
    plan = []
    for dev in evaluate(graph, cluster, assignment).stage_order:
        items = sorted(set(item[assignment == dev].tolist()))
        k = int(kind[dev])
        plan.append(Stage(tuple(items), k, 1, 1, tuple(option[c, k] for c in items)))
    return problem, plan


def _random_training_chain(rng, devices):
    """A random forward DAG along a chain (its compute random, no communication: so every stage's
    forward is exactly a third of its load, the stage path's ``forward_fraction``), its training graph,
    and a contiguous cut of its items into ``devices`` stages or fewer."""
    n = int(rng.integers(2, 7))
    nodes = [Node(f"n{i}", {"gpu": float(rng.uniform(0.5, 3.0))}, comm=0.0) for i in range(n)]
    edges = [(f"n{i}", f"n{i + 1}") for i in range(n - 1)]
    edges += [(f"n{u}", f"n{v}") for v in range(n) for u in range(v - 1) if rng.random() < 0.3]
    g = derive_training(OpGraph.from_nodes(nodes, edges), activation_bytes=np.ones(n))
    cl = Cluster((DeviceKind("gpu", devices),))
    _, item = from_opgraph(g, cl)
    C = int(item.max()) + 1
    cuts = np.sort(rng.choice(np.arange(1, C), size=min(devices, C) - 1, replace=False))
    return g, cl, np.searchsorted(cuts, np.arange(C), side="right")[item]


def test_stage_path_at_d_1_streams_a_hand_case_like_the_pipeline_path():
    # a (1) -> b (2) -> c (1), no communication: 6 samples leave after 1 + 6 x 2 + 1 (b paces them)
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}), Node("b", {"gpu": 2.0}), Node("c", {"gpu": 1.0})],
                           [("a", "b"), ("b", "c")])
    cl = Cluster((DeviceKind("gpu", 3),))
    a = np.array([0, 1, 2])
    problem, plan = _as_stage_plan(g, cl, a, 3)
    staged = simulate_plan(problem, plan, schedule="stream", forward_fraction=1.0, batches=2)
    piped = simulate(g, cl, a, schedule="stream", microbatches=6)
    assert staged.makespan == pytest.approx(14.0) and piped.makespan == pytest.approx(14.0)
    assert staged.bottleneck_per_sample == pytest.approx(2.0) == piped.steady_time_per_sample
    assert staged.period_per_sample == pytest.approx(2.0)


def test_stage_path_at_d_1_streams_like_the_pipeline_path_on_random_placements():
    """Inference, ``stream``, no overlap: the pipeline path's receive, compute and send of a task run
    back to back on its device, and the stage path's forward is that task whole (its load), waiting
    for the same stages' forwards; so every micro-batch leaves every stage at the same time both ways,
    and the bottleneck (busiest device per sample) is the evaluator's max-load both ways."""
    rng = np.random.default_rng(5)
    checked = 0
    for inst in all_small(5, 60, training=False):
        g, cl = inst.graph, inst.cluster
        _, item = from_opgraph(g, cl)
        for _ in range(6):  # a contiguous placement of whole items on two devices or more
            a = rng.integers(0, cl.num_devices, int(item.max()) + 1)[item]
            ev = evaluate(g, cl, a)
            if ev.contiguous and math.isfinite(ev.max_load) and len(set(a.tolist())) > 1:
                break
        else:
            continue
        N, batches = 4, 3
        problem, plan = _as_stage_plan(g, cl, a, N)
        staged = simulate_plan(problem, plan, schedule="stream", forward_fraction=1.0, batches=batches)
        piped = simulate(g, cl, a, schedule="stream", microbatches=N * batches)
        assert staged.bottleneck_per_sample == pytest.approx(ev.max_load, rel=1e-9)
        assert piped.steady_time_per_sample == pytest.approx(ev.max_load, rel=1e-9)
        leaves = {(t.stage, t.microbatch): t.finish for t in piped.tasks if t.part == "send"}
        assert len(leaves) == len(staged.tasks)
        for t in staged.tasks:
            assert t.start + t.duration == pytest.approx(leaves[t.stage, t.index], rel=1e-9, abs=1e-12)
        assert staged.makespan == pytest.approx(piped.makespan, rel=1e-9)
        checked += 1
    assert checked > 20


def test_stage_path_at_d_1_trains_1f1b_like_the_pipeline_path():
    """Training, ``1f1b``, no overlap, one replica per stage: the stage path admits ``y = S - i``
    micro-batches before a stage's first backward, the pipeline path ``S - s - 1`` warm-up forwards
    and then one more before its first backward: the same order. So the peak in flight is
    ``min(S - s, N)`` both ways (counted along the order by one, in time by the other), the bottleneck
    is the evaluator's max-load, and (forward a third of the load, as the stage path splits it) the
    first batch runs every task at the same time as the pipeline path's one batch of ``N``."""
    rng = np.random.default_rng(1)
    for _ in range(40):
        g, cl, a = _random_training_chain(rng, int(rng.integers(2, 5)))
        S = len(set(a.tolist()))
        N = int(rng.integers(S, S + 5))  # the stage model needs N >= the sum of d
        problem, plan = _as_stage_plan(g, cl, a, N)
        staged = simulate_plan(problem, plan, schedule="1f1b", batches=2)
        piped = simulate(g, cl, a, schedule="1f1b", microbatches=N)
        ev = evaluate(g, cl, a)
        assert [s.peak_in_flight for s in staged.stages] == [min(S - s, N) for s in range(S)]
        assert [r.peak_stashed for r in piped.stages] == [min(S - s, N) for s in range(S)]
        assert staged.bottleneck_per_sample == pytest.approx(ev.max_load, rel=1e-9)
        assert piped.steady_time_per_sample == pytest.approx(ev.max_load, rel=1e-9)
        computed = {(t.stage, t.phase, t.microbatch): (t.start, t.finish) for t in piped.tasks
                    if t.part == "compute"}
        first = [t for t in staged.tasks if t.kind != "R" and t.index < N]
        assert len(first) == len(computed)
        for t in first:
            start, finish = computed[t.stage, t.kind, t.index]
            assert t.start == pytest.approx(start, rel=1e-9, abs=1e-12)
            assert t.start + t.duration == pytest.approx(finish, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- a micro-batch of b samples
def _two_stage_chain(N=4, schedule="gpipe"):
    """Two nodes in a chain, 1 s and 2 s per sample, no communication, no weights."""
    g = ParallelGraph.build(ids=[0, 1], names=None, num_kinds=1, edges=[(0, 1)], tensors=[(0, [1], [0.0])],
                            variants=[Variant(0, 0, 1, "v", 1.0), Variant(1, 0, 1, "v", 2.0)])
    return ParallelProblem(g, (DeviceKind("gpu", 3),), N, schedule)


def test_a_micro_batch_of_b_samples_takes_b_times_the_per_sample_time():
    """The stage model's times are per sample; a micro-batch of an ONNX model is one run at its batch
    size b. show simulated a micro-batch as one sample: its makespan was b times too small. By hand,
    stages of t0 = 1 and t1 = 2 s per sample, one device each, b = 8, N = 4, gpipe (a flush per batch):
    a batch takes b * (t0 + t1) + (N - 1) * b * max(t0, t1) = 24 + 48 = 72 s, three batches 216 s, of
    96 samples; one micro-batch alone 8 * (1 + 2) = 24 s."""
    p = _two_stage_chain()
    plan = [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,))]
    sim = simulate_plan(p, plan, schedule="gpipe", batches=3, forward_fraction=1.0, samples_per_microbatch=8)
    assert sim.makespan == pytest.approx(216.0) and sim.samples == 96
    assert sim.time_per_sample == pytest.approx(2.25) and sim.period_per_sample == pytest.approx(2.25)
    assert sim.bottleneck_per_sample == pytest.approx(2.0) == sim.model_time_per_sample
    assert sim.bubble_fraction == pytest.approx(1 - 2.0 / 2.25)
    assert sim.latency == pytest.approx(24.0) and sim.model_latency == pytest.approx(24.0)
    first = {(t.stage, t.index): (t.start, t.duration) for t in sim.tasks if t.kind == "F"}
    assert first[1, 0] == pytest.approx((8.0, 16.0)) and first[1, 3] == pytest.approx((56.0, 16.0))
    # one sample per micro-batch (a Piper file's): the same per-sample figures, the times / 8
    one = simulate_plan(p, plan, schedule="gpipe", batches=3, forward_fraction=1.0)
    assert one.makespan == pytest.approx(27.0) and one.period_per_sample == pytest.approx(2.25)
    assert one.latency == pytest.approx(3.0)
    # stage 1 on two replicas (each takes a micro-batch whole, 16 s): stage 0 hands them over at 8, 16,
    # 24, 32; replica 0 runs 0 and 2 at 8..24..40, replica 1 runs 1 and 3 at 16..32..48; the flush
    # waits for the last backward: 48 s a batch, 144 s in all; 1 s per sample busy on every device
    p2 = p.with_options(microbatches=4)
    two = simulate_plan(p2, [plan[0], Stage((1,), 0, 2, 1, (1,))], schedule="gpipe", batches=3,
                        forward_fraction=1.0, samples_per_microbatch=8)
    assert two.makespan == pytest.approx(144.0) and two.period_per_sample == pytest.approx(1.5)
    assert two.bottleneck_per_sample == pytest.approx(1.0) == two.model_time_per_sample
    assert two.bubble_fraction == pytest.approx(1 / 3) and two.latency == pytest.approx(24.0)
    with pytest.raises(InputError, match="samples per micro-batch"):
        simulate_plan(p, plan, samples_per_microbatch=0)


def test_show_of_a_stage_plan_states_each_figure_in_its_unit():
    """The figures show prints for the hand case above, each with its unit: per sample, per
    micro-batch (b samples), the makespan of the run with its samples, throughput in samples/s and one
    micro-batch's latency beside the stage model's (its per-sample latency times b)."""
    from placement.cli.show import format_stage_simulation as format_simulation

    p = _two_stage_chain()
    plan = [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,))]
    sim = simulate_plan(p, plan, schedule="gpipe", batches=3, forward_fraction=1.0, samples_per_microbatch=8)
    text = format_simulation(sim, "s", "sample", "one run of the model at batch size 8")
    assert "4 micro-batches per batch, 3 batches simulated; a micro-batch is one run of the model at batch " \
           "size 8 (8 samples)" in text
    assert "bottleneck (busiest device) 2 s per sample; model 2 s per sample (equal); 16 s per micro-batch " \
           "(8 samples)" in text
    assert "simulated period 2.25 s per sample; 18 s per micro-batch (8 samples) (0.444444 samples/s; " \
           "bubble 11.1%: flush fill and drain)" in text
    assert "makespan 216 s for 3 batches (12 micro-batches, 96 samples): 2.25 s per sample over the run " \
           "(0.444444 samples/s)" in text
    assert "one-micro-batch latency 24 s (8 samples) in this schedule" in text
    assert "the stage model's latency gives 24 s (3 s per sample x 8) (equal)" in text


def _stream_makespan(stages, M, b):
    """The stream schedule of a chain of stages by its recurrence: replica ``m mod d`` of stage ``i``
    takes micro-batch ``m`` whole (``d * (compute + comm) * b``, the result's per-sample figures) once
    stage ``i - 1`` is done with it and the replica with its previous one."""
    done = [0.0] * M
    for st in stages:
        d, work = st["dataParallelDegree"], st["dataParallelDegree"] * (st["compute"] + st["comm"]) * b
        free = [0.0] * d
        for m in range(M):
            done[m] = free[m % d] = max(done[m], free[m % d]) + work
    return max(done)


def test_show_simulates_an_onnx_stage_plan_at_its_batch_size(gpt_path, tmp_path, capsys):
    """A stage plan placed at batch size 4: show simulates each micro-batch as one run of 4 samples.
    Its makespan is the stream recurrence's over the result's stage figures, its one-micro-batch
    latency the latency `place` reports for that batch size (ms per batch), and the text names the
    batch size; the old simulation counted a micro-batch as one sample (makespan and latency / 4)."""
    out = tmp_path / "r.json"
    assert main(["place", gpt_path, "--devices", "a100:2,t4:2", "--batch-size", "4", "--latency-slo", "50",
                 "--time-limit", "10", "-o", str(out), "--json"]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["problem"]["batch_size"] == 4 and data["problem"]["training"] is False
    assert main(["show", str(out), "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    M = sim["batches"] * sim["microbatches"]
    assert sim["makespan"] >= 4 * M * data["objective"] * (1 - 1e-9)  # the busiest device's work fits
    assert sim["makespan"] == pytest.approx(_stream_makespan(data["stages"], M, 4), rel=1e-9)
    assert sim["schedule"] == "stream" and sim["samples_per_microbatch"] == 4 and sim["samples"] == 4 * M
    chain = sum(st["dataParallelDegree"] * (st["compute"] + st["comm"]) for st in data["stages"]) * 4
    served = next(x for x in data["serving"]["batch_sizes"] if x["batch_size"] == 4)["latency_ms"]
    assert sim["latency_per_microbatch"] == pytest.approx(chain, rel=1e-9)
    assert sim["latency_per_microbatch"] * 1e3 == pytest.approx(served, rel=1e-9)
    assert sim["model_latency_per_microbatch"] * 1e3 == pytest.approx(served, rel=1e-9)
    assert sim["samples_per_s"] == pytest.approx(sim["samples"] / sim["makespan"], rel=1e-12)
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "a micro-batch is one run of the model at batch size 4 (4 samples)" in text
    assert f"makespan {sim['makespan'] * 1e3:.6g} ms for {sim['batches']} batches ({M} micro-batches, " \
           f"{4 * M} samples)" in text
    assert f"one-micro-batch latency {served:.6g} ms (4 samples) in this schedule" in text
    assert f"({1 / data['objective']:,.6g} samples/s; bubble" in text  # place's samples/s at the period


def test_a_stage_plans_summary_gives_its_latency_as_show_simulates_it(gpt_path, tmp_path, capsys):
    """An inference plan's summary gave no latency on the stage model, where a one-device-per-stage
    placement's gives one. It gives one batch's now: the stages' times (compute and communication, not
    divided by the replicas) added up by hand from the result, and the simulated micro-batch alone in the
    pipeline (show), both per run of the batch of 4."""
    out = tmp_path / "r.json"
    assert main(["place", gpt_path, "--devices", "a100:2,t4:2", "--batch-size", "4", "--time-limit", "10",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    shown = float(re.search(r"latency ([\d.]+) ms \(one batch of 4 samples, the stages one after another\)",
                            text).group(1))
    data = json.loads(out.read_text())
    chain = sum(st["dataParallelDegree"] * (st["compute"] + st["comm"]) for st in data["stages"]) * 4
    assert shown == pytest.approx(chain * 1e3, rel=1e-8)
    assert main(["show", str(out), "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["latency_per_microbatch"] * 1e3 == pytest.approx(shown, rel=1e-8)
    assert main(["place", gpt_path, "--devices", "a100:2,t4:2", "--training", "--time-limit", "10"]) == 0
    assert "latency" not in capsys.readouterr().out.split("status")[0]  # training: no one-sample latency
    # a batch-size sweep's best plan says it too (its summary was printed without it)
    sweep = ["--batch-size", "2,4", "--time-limit", "20"]
    assert main(["place", gpt_path, "--devices", "a100:2,t4:2", *sweep]) == 0
    text = capsys.readouterr().out
    summary = text[text.index("max-load "):]
    assert re.search(r"latency [\d.]+ ms \(one batch of \d samples, the stages one after another\)", summary)


@pytest.mark.parametrize("batch", [1, 8])
def test_show_of_a_one_device_plan_gives_throughput_in_samples_per_second(gpt_path, tmp_path, capsys, batch):
    """show printed "throughput 1.77302 per ms" (and "batches per ms" at a batch above 1): now samples/s
    (and batches/s), from the makespan of the micro-batches (each one run of the batch), and at the
    steady state (streaming: the max-load) the result's samples/s, batch * 1000 / max-load in ms."""
    import re

    out = tmp_path / "r.json"
    assert main(["place", gpt_path, "--devices", "a100:2,t4:2", "--batch-size", str(batch), "--max-replicas",
                 "1", "--time-limit", "10", "-o", str(out)]) == 0
    capsys.readouterr()
    placed = batch * 1e3 / json.loads(out.read_text())["max_load"]  # ms per run of the batch
    assert main(["show", str(out), "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]  # ms, per micro-batch (one run)
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert " per ms" not in text
    shown = re.search(r"\(throughput ([\d,.]+) samples/s(, ([\d,.]+) batches/s)?\)", text)
    rate = sim["microbatches"] / sim["makespan"] * 1e3  # runs per second
    assert float(shown.group(1).replace(",", "")) == pytest.approx(batch * rate, rel=1e-5)
    if batch > 1:
        assert float(shown.group(3).replace(",", "")) == pytest.approx(rate, rel=1e-5)
        assert f"8 micro-batches (each a batch of {batch} samples: one run of the model)" in text
    else:
        assert shown.group(2) is None
    steady = re.search(r"steady state: [\d.]+ ms per \w+(?: \(\d+ samples\))? \(([\d,.]+) samples/s", text)
    assert float(steady.group(1).replace(",", "")) == pytest.approx(placed, rel=1e-5)
