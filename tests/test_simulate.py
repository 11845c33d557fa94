"""Pipeline simulation: hand cases (bubbles, utilisation, stash), and the simulated steady state equals
the evaluator's max-load on random placements."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.contract import colocation_items
from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.training import derive_training
from placement.simulate import StageCosts, simulate, simulate_costs, stage_costs
from tests.instances import all_small


def equal_chain(stages: int, *, training: bool, fwd: float = 1.0, comm: float = 0.0):
    """``stages`` equal nodes in a chain, one per device (backward = 2 x forward)."""
    g = OpGraph.from_nodes([Node(f"n{i}", {"gpu": fwd}, comm=comm) for i in range(stages)],
                           [(f"n{i}", f"n{i + 1}") for i in range(stages - 1)])
    if training:
        g = derive_training(g, activation_bytes=np.full(stages, 100.0))
    cl = Cluster((DeviceKind("gpu", stages),))
    a = np.arange(g.num_nodes) % stages
    return g, cl, a


def test_gpipe_bubble_four_equal_stages_eight_microbatches():
    g, cl, a = equal_chain(4, training=True)
    s = simulate(g, cl, a, schedule="gpipe", microbatches=8, stash_bytes=np.where(g.backward, 0.0, 100.0))
    # (S - 1) / (M + S - 1) idle, every stage busy M x (F + B) = 24 of 33
    assert s.bubble_fraction == pytest.approx(3 / 11)
    assert s.makespan == pytest.approx(11 * 3.0)
    for r in s.stages:
        assert r.utilisation == pytest.approx(8 / 11)
        assert r.busy == pytest.approx(24.0)
        assert r.peak_stashed == 8  # GPipe holds every micro-batch until the backward pass
        assert r.peak_stash_bytes == pytest.approx(800.0)
    assert s.latency == pytest.approx(12.0)  # 4 forwards + 4 backwards of one micro-batch
    assert s.steady_time_per_sample == pytest.approx(3.0) == pytest.approx(s.max_load)


def test_1f1b_same_bubble_less_stash():
    g, cl, a = equal_chain(4, training=True)
    s = simulate(g, cl, a, schedule="1f1b", microbatches=8)
    assert s.bubble_fraction == pytest.approx(3 / 11)
    assert [r.peak_stashed for r in s.stages] == [4, 3, 2, 1]
    assert s.steady_time_per_sample == pytest.approx(s.max_load)
    assert s.throughput == pytest.approx(8 / 33)


def test_task_order_of_1f1b_on_first_stage():
    g, cl, a = equal_chain(3, training=True)
    s = simulate(g, cl, a, schedule="1f1b", microbatches=4)
    first = sorted((t for t in s.tasks if t.stage == 0 and t.part == "compute"), key=lambda t: t.start)
    assert [(t.phase, t.microbatch) for t in first] == [
        ("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("B", 2), ("B", 3)]


def test_streaming_inference_hand_case():
    # three stages of compute 1, 2, 1, no communication
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}), Node("b", {"gpu": 2.0}), Node("c", {"gpu": 1.0})],
                           [("a", "b"), ("b", "c")])
    cl = Cluster((DeviceKind("gpu", 3),))
    s = simulate(g, cl, [0, 1, 2], microbatches=10)
    assert s.schedule == "stream"
    assert s.makespan == pytest.approx(1 + 10 * 2 + 1)
    assert s.latency == pytest.approx(4.0)
    assert s.steady_time_per_sample == pytest.approx(2.0) == pytest.approx(s.max_load)
    assert s.stages[1].utilisation == pytest.approx(20 / 22)
    assert s.stages[0].utilisation == pytest.approx(10 / 22)
    assert s.bubble_fraction == pytest.approx(1 - 40 / 66)
    assert all(r.peak_stashed is None for r in s.stages)


def test_communication_is_paid_by_both_ends_and_overlap_hides_it():
    # a (2) -> b (2), a's output costs 1 to send and 1 to receive
    g = OpGraph.from_nodes([Node("a", {"gpu": 2.0}, comm=1.0), Node("b", {"gpu": 2.0}, comm=1.0)],
                           [("a", "b")])
    cl = Cluster((DeviceKind("gpu", 2),))
    st = stage_costs(g, cl, [0, 1])
    assert (st[0].comm_out_f, st[1].comm_in_f) == (1.0, 1.0)
    plain = simulate(g, cl, [0, 1], microbatches=16)
    assert plain.max_load == 3.0
    assert plain.steady_time_per_sample == pytest.approx(3.0)
    assert plain.latency == pytest.approx(6.0)
    over = simulate(g, cl, [0, 1], microbatches=16, overlap=True)
    assert over.steady_time_per_sample == pytest.approx(2.0)  # compute bound: the copy engine hides comm
    assert over.latency == pytest.approx(6.0)  # one sample still waits for its transfer
    assert {t.engine for t in over.tasks} == {"recv", "compute", "send"}
    # utilisation in overlap mode is the compute engine's
    assert over.stages[0].utilisation == pytest.approx(over.stages[0].compute / over.makespan)


def test_gpipe_phases_add_their_bottlenecks():
    # forward bottleneck on stage 0, backward bottleneck on stage 1
    st = [StageCosts(0, 0, "d0", "g", 3.0, 1.0, 0, 0, 0, 0, deps=(("B", 1, "B"),)),
          StageCosts(1, 1, "d1", "g", 1.0, 3.0, 0, 0, 0, 0, deps=(("F", 0, "F"),))]
    gp = simulate_costs(st, schedule="gpipe", microbatches=8)
    ff = simulate_costs(st, schedule="1f1b", microbatches=8)
    assert ff.steady_time_per_sample == pytest.approx(4.0) == pytest.approx(ff.max_load)
    assert 4.0 < gp.steady_time_per_sample <= 6.0 + 1e-9


def _random_contiguous(seed: int, count: int, training=None):
    rng = np.random.default_rng(seed)
    for inst in all_small(seed, count, training=training):
        g, cl = inst.graph, inst.cluster
        cls, C = colocation_items(g)
        for _ in range(4):
            a = rng.integers(0, cl.num_devices, C)[cls]
            ev = evaluate(g, cl, a)
            if ev.contiguous and math.isfinite(ev.max_load):
                yield g, cl, a, ev
                break


def test_phase_costs_add_up_to_the_evaluator():
    for g, cl, a, ev in _random_contiguous(11, 60):
        by_dev = {d.device: d for d in ev.devices}
        for st in stage_costs(g, cl, a):
            d = by_dev[st.device]
            assert st.compute == pytest.approx(d.compute)
            assert st.comm_in_f + st.comm_in_b == pytest.approx(d.comm_in)
            assert st.comm_out_f + st.comm_out_b == pytest.approx(d.comm_out)
            assert st.load == pytest.approx(d.load)


def test_steady_state_equals_max_load_on_random_placements():
    checked = 0
    for g, cl, a, ev in _random_contiguous(5, 80):
        schedules = ("1f1b", "gpipe") if g.is_training else ("stream",)
        for sch in schedules:
            s = simulate(g, cl, a, schedule=sch, microbatches=8)
            stages = stage_costs(g, cl, a)
            assert s.max_load == pytest.approx(ev.max_load)
            if sch == "gpipe":
                top = max(x.forward for x in stages) + max(x.backward for x in stages)
                assert ev.max_load - 1e-9 <= s.steady_time_per_sample <= top + 1e-9
            else:
                assert s.steady_time_per_sample == pytest.approx(ev.max_load, rel=1e-9, abs=1e-12)
            # every stage is busy its load per micro-batch; nobody is busier than the wall clock
            for r, st in zip(s.stages, stages):
                assert r.busy == pytest.approx(8 * st.load)
                assert r.utilisation <= 1 + 1e-9
            assert 0 <= s.bubble_fraction < 1
            o = simulate(g, cl, a, schedule=sch, microbatches=8, overlap=True)
            engines = max(max(x.comm_in_f + x.comm_in_b, x.compute, x.comm_out_f + x.comm_out_b)
                          for x in stages)
            if sch == "stream":
                assert o.steady_time_per_sample == pytest.approx(engines, rel=1e-9, abs=1e-12)
            else:  # 1F1B's in-flight limit can keep a round trip on the critical path
                assert o.steady_time_per_sample >= engines * (1 - 1e-9) - 1e-12
            assert o.steady_time_per_sample <= s.steady_time_per_sample * (1 + 1e-9) + 1e-12
            assert o.makespan <= s.makespan * (1 + 1e-9) + 1e-12  # overlap only removes waits
            checked += 1
    assert checked >= 40


def test_long_simulations_settle_into_the_steady_period():
    """The event loop, run long, runs at the period the cycle-time computation predicts."""
    from placement.simulate import _run, steady_period

    checked = 0
    for g, cl, a, _ev in _random_contiguous(7, 24):
        st = stage_costs(g, cl, a)
        for sch in (("1f1b", "gpipe") if g.is_training else ("stream",)):
            for overlap in (False, True):
                t1 = _run(st, sch, 150, overlap)[1]
                t2 = _run(st, sch, 300, overlap)[1]
                assert (t2 - t1) / 150 == pytest.approx(steady_period(st, sch, overlap), rel=1e-6, abs=1e-9)
                checked += 1
    assert checked >= 20


def test_not_contiguous_is_refused_with_the_cycle():
    g = OpGraph.from_nodes([Node(x, {"gpu": 1.0}, comm=0.1) for x in "abc"], [("a", "b"), ("b", "c")])
    cl = Cluster((DeviceKind("gpu", 2),))
    with pytest.raises(InputError, match=r"cycle \(gpu:0 -> gpu:1 -> gpu:0\)"):
        simulate(g, cl, [0, 1, 0])


def test_bad_arguments():
    g, cl, a = equal_chain(2, training=True)
    with pytest.raises(InputError, match="schedule"):
        simulate(g, cl, a, schedule="zigzag")
    with pytest.raises(InputError, match="inference"):
        simulate(g, cl, a, schedule="stream")
    with pytest.raises(InputError, match="micro-batches"):
        simulate(g, cl, a, microbatches=0)


def test_summary_is_plain_json():
    import json

    g, cl, a = equal_chain(3, training=True)
    d = simulate(g, cl, a, microbatches=4).summary()
    json.dumps(d)
    assert d["schedule"] == "1f1b" and len(d["stages"]) == 3


def test_the_engine_runs_each_lane_in_order_and_a_collective_when_all_reach_it():
    from placement.simulate import Action, run_actions

    a1, a2, b1, b2 = Action(0, "F", 0), Action(0, "F", 1), Action(1, "F", 0), Action(1, "F", 1)
    ar = Action(0, "R", 0)  # on both lanes: starts once b1 (the later) is done
    dur = {a1: 2.0, a2: 1.0, b1: 3.0, b2: 2.0, ar: 1.0}
    tl = run_actions({"x": [a1, ar, a2], "y": [b1, ar, b2]}, dur, {b2: [a2]})
    assert [(tl.start[v], tl.finish[v]) for v in (a1, b1, ar, a2, b2)] == [
        (0.0, 2.0), (0.0, 3.0), (3.0, 4.0), (4.0, 5.0), (5.0, 7.0)]  # b2 waits for a2, not only ar
    assert tl.makespan == 7.0
    with pytest.raises(InputError, match="deadlocks: 2 action"):
        run_actions({"x": [a1, b1], "y": [b1, a1]}, dur, {})
    with pytest.raises(InputError, match="0F0 waits for 1F1"):
        run_actions({"x": [a1]}, dur, {a1: [b2]})
