"""The replicated pipeline model (graphs/parallel.py): hand-computed stage times and memory, every
schedule, topology, and the evaluator's constraint checks."""

from __future__ import annotations

import math

import pytest

from graphs.errors import InputError
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.parallel import (
    ParallelGraph,
    ParallelProblem,
    Stage,
    Variant,
    evaluate_plan,
    from_opgraph,
    in_flight,
    stage_memory,
)


def _chain(schedule="1f1b", N=4, count=4, memory=None, **kind):
    """a -> b -> c, one kind; tensor a->b costs 0.5 s, b->c 0.25 s per side. b has a recompute variant
    and a t=2 split with sync terms."""
    tensors = [(0, [1], [0.5]), (1, [2], [0.25])]
    V = [
        Variant(0, 0, 1, "vanilla", 2.0, params=100.0, a=10.0, b=40.0, w=20.0),
        Variant(1, 0, 1, "vanilla", 4.0, params=200.0, a=30.0, b=50.0, w=25.0),
        Variant(1, 0, 1, "activation recomp", 5.0, params=200.0, a=5.0, b=60.0, w=25.0),
        Variant(1, 0, 2, "vanilla", 2.5, params=100.0, a=15.0, b=25.0, w=12.0, sync_in={0: 0.1},
                sync_out={1: 0.2}),
        Variant(2, 0, 1, "vanilla", 1.0, params=0.0, a=0.0, b=10.0),
        Variant(2, 0, 2, "vanilla", 0.5, params=0.0, a=0.0, b=5.0),
    ]
    g = ParallelGraph.build(ids=["a", "b", "c"], names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=V)
    k = DeviceKind("gpu", count, memory, bandwidth=100.0, **kind)
    return ParallelProblem(g, (k,), N, schedule)


def test_single_stage_replicated_hand_computed():
    p = _chain()
    ev = evaluate_plan(p, [Stage((0, 1, 2), 0, 2, 1, (0, 1, 4))])
    assert ev.valid
    s = ev.stages[0]
    # no crossing tensors; compute (2+4+1)/2; resync 4*(2-1)*(100+200)/2/4/100
    assert s.compute == pytest.approx(3.5)
    assert s.comm == 0
    assert s.resync == pytest.approx(4 * 300 / 2 / 4 / 100)
    assert ev.objective == pytest.approx(3.5 + 1.5)
    # 1f1b: one stage with d=2: y = ceil(2/2) = 1; memory A + B = 40 + 100
    assert s.in_flight == 1 and s.memory == pytest.approx(140.0)


def test_a_replica_limit_broken_leaves_the_plan_scored():
    """Found by a newcomer review: ``evaluate --max-replicas 1`` on a plan of d = 2 printed an empty table
    and max-load inf. The limit is broken (invalid), but the plan is scored as it stands: the figures of
    the test above."""
    p = _chain().with_options(max_replicas=1)
    ev = evaluate_plan(p, [Stage((0, 1, 2), 0, 2, 1, (0, 1, 4))])
    assert not ev.valid and ev.problems == ("stage 0: data-parallel degree 2 exceeds the maximum 1",)
    assert ev.objective == pytest.approx(3.5 + 1.5) and len(ev.stages) == 1


def test_two_stages_comm_sync_and_in_flight():
    p = _chain(N=4, count=6)
    # stage 0: a with d=2; stage 1: b (t=2 split) + c with d=2 -> 4 devices
    ev = evaluate_plan(p, [Stage((0,), 0, 2, 1, (0,)), Stage((1, 2), 0, 2, 2, (3, 5))])
    assert ev.valid, ev.problems
    s0, s1 = ev.stages
    assert s0.comm == pytest.approx(0.5 / 2)  # tensor a->b leaves stage 0
    assert s0.time_per_sample == pytest.approx(0.25 + 2.0 / 2 + 4 * 100 / 2 / 4 / 100)
    # stage 1: tensor a->b enters (0.5) plus b's sync_in on it (0.1); b->c stays inside, so no sync_out
    assert s1.comm == pytest.approx(0.6 / 2)
    assert s1.time_per_sample == pytest.approx(0.3 + 3.0 / 2 + 4 * 100 / 2 / 4 / 100)
    assert ev.objective == pytest.approx(max(s0.time_per_sample, s1.time_per_sample))
    # in flight: stage 0 holds ceil((2+2)/2) = 2, the last ceil(2/2) = 1
    assert (s0.in_flight, s1.in_flight) == (2, 1)
    assert s0.memory == pytest.approx(10 * 2 + 40)
    assert s1.devices == 4


@pytest.mark.parametrize("schedule, y, peak", [
    ("1f1b", 3, 10 * 3 + 40),
    ("gpipe", 6, 10 * 6 + 40),  # N / d = 6 / 1
    ("pipedream", 3, 10 * 3 + 40 + 2 * 20),  # three weight versions
    ("2bw", 3, 10 * 3 + 40 + 20),  # two versions
])
def test_schedules_set_in_flight_and_weight_versions(schedule, y, peak):
    p = _chain(schedule=schedule, N=6, count=3)
    ev = evaluate_plan(p, [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,)),
                           Stage((2,), 0, 1, 1, (4,))])
    assert ev.valid
    assert ev.stages[0].in_flight == y
    assert ev.stages[0].memory == pytest.approx(peak)


def test_memory_helpers():
    assert in_flight("1f1b", 2, 5, 8) == 3
    assert in_flight("gpipe", 2, 5, 8) == 4
    assert stage_memory("2bw", 1, 1.0, 10.0, 4.0) == (4.0, 1.0, 11.0)  # one version when y = 1
    assert stage_memory("pipedream", 4, 1.0, 10.0, 4.0) == (16.0, 4.0, 26.0)


def test_topology_intra_and_inter_server_resync():
    stage = [Stage((0, 1, 2), 0, 4, 1, (0, 1, 4))]
    fits = evaluate_plan(_chain(count=4, server_size=4, intra_bandwidth=1000.0, inter_bandwidth=10.0), stage)
    spans = evaluate_plan(_chain(count=4, server_size=2, intra_bandwidth=1000.0, inter_bandwidth=10.0), stage)
    assert fits.stages[0].resync == pytest.approx(4 * 3 * 300 / 4 / 4 / 1000)
    assert spans.stages[0].resync == pytest.approx(4 * 3 * 300 / 4 / 4 / 10)


def test_memory_limit_and_recompute_variant():
    p = _chain(N=6, count=3, memory=150.0)
    plan = [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,)), Stage((2,), 0, 1, 1, (4,))]
    ev = evaluate_plan(p, plan)  # b vanilla: 30*2 + 50 = 110 fits; a: 10*3+40 = 70
    assert ev.valid
    p = _chain(N=6, count=3, memory=100.0)
    ev = evaluate_plan(p, plan)
    assert not ev.valid and any("stage 1 needs 110" in x for x in ev.problems)
    plan[1] = Stage((1,), 0, 1, 1, (2,))  # recompute: 5*2 + 60 = 70
    assert evaluate_plan(p, plan).valid


@pytest.mark.parametrize("plan, message", [
    ([Stage((0, 1), 0, 1, 1, (0, 1))], "in no stage"),
    ([Stage((1, 2), 0, 1, 1, (1, 4)), Stage((0,), 0, 1, 1, (0,))], "not nested ideals"),
    ([Stage((0, 1, 2), 0, 3, 1, (0, 1, 4))], "does not divide"),
    ([Stage((0, 1, 2), 0, 2, 2, (0, 3, 5))], "is not supported on stage 0 split 2 ways"),
    ([Stage((0,), 0, 4, 1, (0,)), Stage((1, 2), 0, 1, 1, (1, 4))], "uses 5 gpu devices"),
    ([Stage((0, 1, 2), 0, 1, 1, (0, 0, 4))], "is given variant 0 ('vanilla'), which is node"),
    ([Stage((0, 1), 0, 1, 1, (0, 1)), Stage((1, 2), 0, 1, 1, (1, 4))], "is in stage 0 and stage 1"),
])
def test_evaluator_reports_every_broken_constraint(plan, message):
    ev = evaluate_plan(_chain(N=4, count=4), plan)
    assert not ev.valid and any(message in x for x in ev.problems), ev.problems


@pytest.mark.parametrize("variants", [(0, 0, 4), (0, 1, 99), (0, -1, 4), (0, 3, 4)],
                         ids=["another node's", "out of range", "none chosen", "its own at t=2"])
def test_a_plan_with_a_variant_not_its_nodes_is_not_scored(variants):
    """A node given another node's variant, an index out of range, none, or its own variant for another
    degree has no time in the stage: the plan is not scored (inf), where it was scored without that
    node's time (0.0 for a whole plan of wrong indices, found by a review: a pass picking the least
    objective would have chosen it)."""
    ev = evaluate_plan(_chain(N=4, count=4), [Stage((0, 1, 2), 0, 1, 1, variants)])
    assert not ev.valid and ev.objective == math.inf and ev.latency == math.inf, ev.problems


def test_a_cycle_is_named_along_its_nodes():
    """A stage graph with a cycle (a Piper file with a back edge) names the nodes along it, as an operator
    graph's CycleError does; it said only "the graph has a cycle"."""
    from graphs.errors import CycleError

    V = [Variant(u, 0, 1, "vanilla", 1.0) for u in range(3)]
    with pytest.raises(CycleError, match=r"cycle: (b -> c -> b|c -> b -> c)") as e:
        ParallelGraph.build(ids=["a", "b", "c"], names=None, num_kinds=1, edges=[(0, 1), (1, 2), (2, 1)],
                            tensors=[], variants=V)
    assert sorted(e.value.cycle) == ["b", "c"]


def test_sum_of_degrees_must_not_exceed_microbatches():
    p = _chain(N=2, count=8)
    ev = evaluate_plan(p, [Stage((0,), 0, 2, 1, (0,)), Stage((1, 2), 0, 2, 1, (1, 4))])
    assert any("sum to 4 > 2" in x for x in ev.problems)


def test_bad_problem_inputs_raise():
    p = _chain()
    with pytest.raises(InputError, match="schedule"):
        p.with_options(schedule="zigzag")
    with pytest.raises(InputError, match="micro-batches"):
        p.with_options(microbatches=0)
    with pytest.raises(InputError, match="weight bytes"):
        ParallelGraph.build(ids=["a"], names=None, num_kinds=1, edges=[], tensors=[],
                            variants=[Variant(0, 0, 1, "v", 1.0, b=1.0, w=2.0)])
    with pytest.raises(InputError, match="cycle"):
        ParallelGraph.build(ids=["a", "b"], names=None, num_kinds=1, edges=[(0, 1), (1, 0)], tensors=[],
                            variants=[])


def test_from_opgraph_keeps_the_pipeline_loads():
    """d = t = 1: a stage's time equals the reference evaluator's device load."""
    from graphs.evaluate import evaluate

    nodes = [Node("x", {"gpu": 1.0, "cpu": 3.0}, memory=2.0, comm=0.5),
             Node("y", {"gpu": 2.0, "cpu": 1.0}, memory=1.0, comm={"gpu": 0.25}),
             Node("z", {"gpu": 1.5}, memory=1.0, comm=0.0)]
    g = OpGraph.from_nodes(nodes, [("x", "y"), ("x", "z"), ("y", "z")])
    cl = Cluster((DeviceKind("gpu", 2, 3.0), DeviceKind("cpu", 1, None, pays_communication=False)))
    prob, item = from_opgraph(g, cl)
    assert prob.max_replicas == 1
    opt = {(v.node, v.kind): i for i, v in enumerate(prob.graph.variants)}
    plan = [Stage((int(item[0]),), 0, 1, 1, (opt[int(item[0]), 0],)),
            Stage((int(item[1]),), 1, 1, 1, (opt[int(item[1]), 1],)),
            Stage((int(item[2]),), 0, 1, 1, (opt[int(item[2]), 0],))]
    ev = evaluate_plan(prob, plan)
    ref = evaluate(g, cl, [0, 2, 1])
    assert ev.valid and ref.valid
    loads = sorted(d.load for d in ref.devices if d.nodes.size)
    assert sorted(s.time_per_sample for s in ev.stages) == pytest.approx(loads)
    assert ev.objective == pytest.approx(ref.max_load)
    assert math.isfinite(ev.objective)


def test_latency_hand_computed_d_does_not_help_t_does():
    """One sample end to end: per stage its variants' time plus its crossing tensors and sync terms, not
    divided by d, no resync (docs/model.md)."""
    p = _chain(N=4, count=6)
    one = evaluate_plan(p, [Stage((0, 1, 2), 0, 1, 1, (0, 1, 4))])
    assert one.latency == pytest.approx(2.0 + 4.0 + 1.0)
    replicated = evaluate_plan(p, [Stage((0, 1, 2), 0, 4, 1, (0, 1, 4))])
    assert replicated.objective < one.objective and replicated.latency == pytest.approx(one.latency)
    # stage 0: a (2.0) + a->b leaving (0.5); stage 1: b t=2 (2.5) + c t=2 (0.5) + a->b entering (0.5)
    # + b's sync_in on it (0.1)
    ev = evaluate_plan(p, [Stage((0,), 0, 2, 1, (0,)), Stage((1, 2), 0, 2, 2, (3, 5))])
    assert [s.latency for s in ev.stages] == pytest.approx([2.5, 3.6])
    assert ev.latency == pytest.approx(6.1)
    assert evaluate_plan(p, [Stage((0, 1), 0, 1, 1, (0, 1))]).latency == math.inf  # c in no stage


def test_latency_of_a_chain_pipeline_is_the_latency_models():
    """d = t = 1, one accelerator per stage, a chain: the latency model of graphs.latency."""
    from graphs.latency import latency

    nodes = [Node("x", {"gpu": 1.0}, memory=1.0, comm=0.5),
             Node("y", {"gpu": 2.0}, memory=1.0, comm=0.25),
             Node("z", {"gpu": 1.5}, memory=1.0, comm=0.125)]
    g = OpGraph.from_nodes(nodes, [("x", "y"), ("y", "z")])
    cl = Cluster((DeviceKind("gpu", 3, 3.0),))
    prob, item = from_opgraph(g, cl)
    opt = {(v.node, v.kind): i for i, v in enumerate(prob.graph.variants)}
    for assignment in ([0, 1, 2], [0, 0, 1], [0, 1, 1], [0, 0, 0]):
        stages: list[list[int]] = []
        for u, dev in enumerate(assignment):
            if u == 0 or dev != assignment[u - 1]:
                stages.append([])
            stages[-1].append(int(item[u]))
        plan = [Stage(tuple(s), 0, 1, 1, tuple(opt[c, 0] for c in s)) for s in stages]
        ev = evaluate_plan(prob, plan)
        assert ev.valid
        assert ev.latency == pytest.approx(latency(g, cl, assignment).total), assignment


def test_non_contiguous_problems_report_contiguity_and_an_order():
    """A problem that does not require a pipeline takes any assignment; the evaluation says whether the
    stages can be ordered (and gives the order), and the same plan breaks a pipeline problem."""
    p = _chain()
    free = p.with_options(contiguous=False)
    back = [Stage((1, 2), 0, 1, 1, (1, 4)), Stage((0,), 0, 1, 1, (0,))]
    ev = evaluate_plan(free, back)
    assert ev.valid and ev.contiguous and ev.stage_order == (1, 0)
    assert evaluate_plan(p, back).problems and "not nested ideals" in evaluate_plan(p, back).problems[0]
    # a -> b -> c with a and c together: no order exists
    ev = evaluate_plan(free, [Stage((0, 2), 0, 1, 1, (0, 4)), Stage((1,), 0, 1, 1, (1,))])
    assert ev.valid and not ev.contiguous and ev.stage_order is None


def test_comm_split_into_received_and_sent_and_backward_time():
    """comm_in / comm_out: tensors entering / leaving (with their sync terms), over d; the backward
    pass's part of the compute kept apart."""
    p = _chain(N=4, count=6)
    ev = evaluate_plan(p, [Stage((0,), 0, 2, 1, (0,)), Stage((1, 2), 0, 2, 2, (3, 5))])
    s0, s1 = ev.stages
    assert (s0.comm_in, s0.comm_out) == pytest.approx((0.0, 0.25))  # a->b leaves: 0.5 / d=2
    assert (s1.comm_in, s1.comm_out) == pytest.approx(((0.5 + 0.1) / 2, 0.0))  # enters, b's sync_in
    assert s0.comm_in + s0.comm_out == pytest.approx(s0.comm)
    g = ParallelGraph.build(ids=["f"], names=None, num_kinds=1, edges=[], tensors=[],
                            variants=[Variant(0, 0, 1, "vanilla", 3.0, backward_time=2.0)])
    ev = evaluate_plan(ParallelProblem(g, (DeviceKind("gpu", 2),), 2), [Stage((0,), 0, 2, 1, (0,))])
    assert (ev.stages[0].compute, ev.stages[0].compute_backward) == pytest.approx((1.5, 1.0))
    with pytest.raises(InputError, match="backward_time"):
        ParallelGraph.build(ids=["f"], names=None, num_kinds=1, edges=[], tensors=[],
                            variants=[Variant(0, 0, 1, "vanilla", 1.0, backward_time=2.0)])


def test_colocation_classes_must_share_a_stage():
    g = ParallelGraph.build(ids=["f", "b"], names=None, num_kinds=1, edges=[], tensors=[(0, [1], [0.5])],
                            variants=[Variant(0, 0, 1, "v", 1.0), Variant(1, 0, 1, "v", 2.0)],
                            tensor_edges=False, colocation=[4, 4])
    p = ParallelProblem(g, (DeviceKind("gpu", 2),), 2, contiguous=False)
    ev = evaluate_plan(p, [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,))])
    assert any("colocation class 4 is split across stages: f@stage 0, b@stage 1" in x for x in ev.problems)
    assert evaluate_plan(p, [Stage((0, 1), 0, 1, 1, (0, 1))]).valid


def test_host_kinds_pay_no_communication():
    """A kind that pays no communication (host memory) carries no tensor times: a graph that gives it
    some is refused, and from_opgraph keeps the host CPU's semantics."""
    g = ParallelGraph.build(ids=["x", "y"], names=None, num_kinds=2, edges=[], tensors=[(0, [1], [0.5, 0.5])],
                            variants=[Variant(0, 0, 1, "v", 1.0), Variant(1, 1, 1, "v", 1.0)])
    with pytest.raises(InputError, match="pays no communication"):
        ParallelProblem(g, (DeviceKind("gpu", 1), DeviceKind("cpu", 1, pays_communication=False)), 1)
    nodes = [Node("x", {"gpu": 1.0, "cpu": 3.0}, comm=0.5), Node("y", {"gpu": 2.0, "cpu": 1.0}, comm=0.25)]
    og = OpGraph.from_nodes(nodes, [("x", "y")])
    cl = Cluster((DeviceKind("gpu", 1), DeviceKind("cpu", 1, pays_communication=False)))
    prob, item = from_opgraph(og, cl)
    assert prob.kinds[1].pays_communication is False
    assert not prob.graph.tensor_time[1].any()


def test_in_flight_follows_the_pipeline_order_not_the_list_order():
    """On a problem that does not require a pipeline, a plan may list its stages out of pipeline order.
    The micro-batches a stage holds in flight under 1F1B depend on its place in the pipeline (ceil of the
    replicas from it to the end over its own d), so {a} listed after {b, c} still holds 2 (1 + 1) and
    {b, c} 1. Before, the list order was used: 1 and 2, and the memory figures were swapped with them.
    By hand, peak = A*y + B: {a}: 10*2 + 40 = 60; {b, c}: (30 + 0)*1 + (50 + 10) = 90."""
    free = _chain(N=2).with_options(contiguous=False)
    listed = [Stage((1, 2), 0, 1, 1, (1, 4)), Stage((0,), 0, 1, 1, (0,))]
    ev = evaluate_plan(free, listed)
    assert ev.valid and ev.stage_order == (1, 0)
    assert [s.in_flight for s in ev.stages] == [1, 2]
    assert [s.memory for s in ev.stages] == pytest.approx([90.0, 60.0])
    # the same stages in pipeline order give the same figures, per stage
    ordered = evaluate_plan(free, listed[::-1])
    assert [s.in_flight for s in ordered.stages] == [2, 1]
    assert ordered.objective == pytest.approx(ev.objective)
