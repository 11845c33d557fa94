"""The library's one entry point takes the one problem: ``placement.place(problem)`` on a stage-model
:class:`~graphs.parallel.ParallelProblem` (a Piper file's, a random one, an OpGraph's through
``from_opgraph``) and ``placement.evaluate(problem, plan)``. Every expected value comes from a second
method: the brute force over all plans (tests/brute_stages.py), a value worked out by hand, the command
line (``python -m placement place FILE --json``) and Piper's reference table, or the one-device-per-stage
placement of the same graph."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import placement
from graphs.errors import InputError, NoPlacementError
from graphs.evaluate import evaluate as evaluate_assignment
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.parallel import ParallelProblem, Stage, evaluate_plan, from_opgraph
from placement import Placement, evaluate, place, read_piper
from solvers.base import SolveOptions, Status
from solvers.registry import solve
from tests.brute_stages import all_plans
from tests.instances import WORKLOADS, random_instance
from tests.test_dp_stages import random_problem

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PIPER = os.path.join(WORKLOADS, "piper")


def _tiny_piper(memory: float = 100.0) -> dict:
    """Two nodes, ``embed`` (4 s per sample) -> ``block`` (8 s), 1 byte per sample between them at 10
    bytes/s, 4 devices, 4 micro-batches, 60 bytes of B each: both nodes do not fit one device (120 >
    100), so the plan is a pipeline. By hand, with the edge's time 2 * 1 / 10 = 0.2 s paid by each side
    over d: (d1, d2) = (2, 2) gives max((4 + 0.2) / 2, (8 + 0.2) / 2) = 4.1 s; (1, 2) 4.2; (1, 1) 8.2;
    (2, 1) 8.2: the optimum is 4.1 with embed on accelerator:0-1 and block on accelerator:2-3."""
    def node(i, name, time):
        return {"id": i, "name": name, "TMPCs": {"1": [{
            "id": "vanilla", "timePerSample": time, "parameterSize": 0.0, "memoryUsageA": 2.0,
            "memoryUsageB": 60.0, "syncTimeFw": {}, "syncTimeBw": {}}]}}

    return {"maxDevices": 4, "maxMemoryPerDevice": memory, "bandwidth": 10.0, "mbsInBatch": 4,
            "nodes": [node(0, "embed", 4.0), node(1, "block", 8.0)],
            "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 1.0}]}


@pytest.fixture
def tiny(tmp_path) -> ParallelProblem:
    path = tmp_path / "tiny-piper.json"
    path.write_text(json.dumps(_tiny_piper()))
    return read_piper(str(path)).problem


def _plan(p: Placement) -> list[Stage]:
    return [s.stage for s in p.stages]


# ------------------------------------------------------------------------------ place(problem)
@pytest.mark.parametrize("seed", range(6))
def test_place_problem_is_the_registry_solve_and_the_brute_force_optimum(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(8):
        problem = random_problem(rng)
        p = place(problem)
        sol = solve(problem)
        best = min((ev.objective for ev in all_plans(problem)), default=math.inf)  # the second method
        assert p.model == "stages" and p.problem is problem
        assert p.graph is None and p.cluster is None and p.node_of is None and p.evaluation is None
        assert p.status is sol.status and p.solution.solver == "auto"
        if math.isinf(best):
            assert p.status is Status.INFEASIBLE
            assert p.max_load == math.inf and p.assignment is None and p.stages == ()
            assert p.stage_evaluation is None
            with pytest.raises(NoPlacementError, match="there is no placement \\(status infeasible\\)"):
                p.device_of(problem.graph.ids[0])
            continue
        assert p.status is Status.OPTIMAL
        assert p.max_load == pytest.approx(best, rel=1e-9)
        assert p.max_load == pytest.approx(sol.objective, rel=1e-12)
        ev = evaluate_plan(problem, _plan(p))  # re-evaluated by the one evaluator
        assert ev.valid and ev.objective == pytest.approx(p.max_load, rel=1e-12)
        assert evaluate(problem, _plan(p)).objective == ev.objective
        assert evaluate(problem, p.solution.plan).objective == ev.objective  # a tuple plan too
        assert p.stage_evaluation.objective == ev.objective


def test_place_problem_takes_solver_and_options(tiny):
    for name in ("dp", "ip", "pipedream"):
        p = place(tiny, solver=name, options=SolveOptions(time_limit=30))
        assert p.solution.solver == name and p.stage_evaluation.valid
        assert p.max_load >= 4.1 - 1e-12  # no plan beats the optimum worked out by hand
    with pytest.raises(InputError, match="objective 'latency'"):
        place(tiny, options=SolveOptions(objective="latency"))


def test_tiny_piper_file_by_hand(tiny):
    p = place(tiny)
    assert p.status is Status.OPTIMAL
    assert p.max_load == pytest.approx(4.1, rel=1e-12)
    assert [(s.stage.nodes, s.stage.d, s.stage.t) for s in p.stages] == [((0,), 2, 1), ((1,), 2, 1)]
    # nodes by the problem's ids (a Piper file's integer ids)
    assert p.device_of(0) == "accelerator:0-1" and p.device_of(1) == "accelerator:2-3"
    assert p.devices_of(1) == ["accelerator:2", "accelerator:3"]
    assert p.assignment.tolist() == [0, 2]  # the first device of each node's stage, by problem node
    with pytest.raises(KeyError, match="no node with id 'embed'"):
        p.device_of("embed")  # a name is not an id
    with pytest.raises(KeyError, match="no node with id 7"):
        p.device_of(7)
    assert p.latency is None  # the stage model's plans have no latency evaluation here


def test_problem_placement_gives_its_result_document_and_refuses_to_annotate(tiny):
    from placement.inmemory import annotate, placement_result, split
    from placement.stages import plan_from_dict

    p = place(tiny)
    doc = placement_result(p)
    assert doc["model"] == "stages" and doc["objective"] == pytest.approx(4.1)
    assert [s["devices"] for s in doc["stages"]] == [["accelerator:0", "accelerator:1"],
                                                     ["accelerator:2", "accelerator:3"]]
    assert evaluate(tiny, plan_from_dict(tiny, doc)).objective == pytest.approx(4.1)  # it reads back
    for f in (annotate, split):
        with pytest.raises(InputError, match="names no ONNX operators"):
            f("model.onnx", p)


def test_infeasible_problem_is_a_status(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps(_tiny_piper(memory=50.0)))  # 60 bytes of B per node: nothing fits
    p = place(read_piper(str(path)).problem)
    assert p.status is Status.INFEASIBLE and p.max_load == math.inf and p.assignment is None
    with pytest.raises(ValueError, match="no placement"):
        p.devices_of(0)


# --------------------------------------------------------------------- a Piper reference file
@pytest.fixture(scope="module")
def bert() -> str:
    path = os.path.join(PIPER, "bert32a100.json")
    if not os.path.exists(path):
        pytest.skip(f"Piper workloads not found at {PIPER} (set PLACEMENT_WORKLOADS)")
    return path


@pytest.mark.parametrize("flags, overrides, reference", [
    ((), {}, 0.09772736112),  # FORMAT.md's table: Piper's own plan, 10 devices of the file
    (("--max-devices", "8", "--device-memory", str(8 * 2 ** 30), "--bandwidth", str(25 * 2 ** 30)),
     {"devices": 8, "memory": 8 * 2 ** 30, "bandwidth": 25 * 2 ** 30}, 0.16585575),
], ids=["file", "k8-8GiB"])
def test_piper_file_matches_the_command_line(bert, flags, overrides, reference):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-m", "placement", "place", bert, "--json", *flags],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    cli = json.loads(run.stdout)
    problem = read_piper(bert, **overrides).problem
    p = place(problem)
    assert p.status.value == cli["status"] == "optimal"
    assert p.max_load == pytest.approx(cli["objective"], rel=1e-12)
    assert p.max_load == pytest.approx(reference, rel=1e-8)  # Piper's C++ (its greedy is exact here)
    # the command line's plan, read back, scores the same under the library's evaluate
    from placement.stages import plan_from_dict

    assert evaluate(problem, plan_from_dict(problem, cli)).objective == pytest.approx(p.max_load, rel=1e-12)
    ids = problem.graph.ids
    for s, row in zip(p.stages, cli["stages"]):
        for u in s.stage.nodes:
            names = p.devices_of(ids[u])
            assert names == row["devices"]  # both number a kind's devices in stage order


# ------------------------------------------------------------- the d = t = 1 special case
def _chain() -> tuple[OpGraph, Cluster]:
    g = OpGraph.from_nodes(
        [Node("embed", {"gpu": 2.0, "cpu": 9.0}, memory=4e9, comm=0.4),
         Node("block", {"gpu": 5.0, "cpu": 30.0}, memory=6e9, comm=0.4),
         Node("head", {"gpu": 2.0}, memory=2e9)],
        edges=[("embed", "block"), ("block", "head")])
    return g, Cluster((DeviceKind("gpu", count=2, memory=8e9),
                       DeviceKind("cpu", 1, pays_communication=False)))


def test_from_opgraph_problem_places_as_the_graph():
    g, cl = _chain()
    problem, item_of = from_opgraph(g, cl)
    assert problem.max_replicas == 1  # one device per stage: both models coincide
    p, q = place(problem), place(g, cl)
    assert q.max_load == pytest.approx(7.4)  # the README's worked example
    assert p.max_load == pytest.approx(q.max_load, rel=1e-12)
    assert p.status is q.status is Status.OPTIMAL
    # each node by id: from_opgraph keeps an operator's id for an item of one operator
    for name in g.names:
        u = int(item_of[g.names.index(name)])
        if problem.graph.ids[u] == g.ids[g.names.index(name)]:
            assert p.devices_of(problem.graph.ids[u]) == [p.device_of(problem.graph.ids[u])]
            assert p.device_of(problem.graph.ids[u]).split(":")[0] in ("gpu", "cpu")


@pytest.mark.parametrize("seed", range(8))
def test_from_opgraph_random_graphs(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, max_items=5)
    problem, _ = from_opgraph(inst.graph, inst.cluster)
    p, q = place(problem, solver="dp"), place(inst.graph, inst.cluster, solver="dp")
    if q.evaluation is None:
        assert p.max_load == math.inf and p.status is q.status
        return
    assert p.max_load == pytest.approx(q.max_load, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------ evaluate(problem, plan)
def test_evaluate_problem_plan_is_evaluate_plan(tiny):
    # each node's one variant (variants are indices into the graph's list)
    plan = [Stage((0,), 0, 2, 1, tiny.graph.options[(0, 0, 1)]),
            Stage((1,), 0, 2, 1, tiny.graph.options[(1, 0, 1)])]
    ev = evaluate(tiny, plan)
    assert ev.valid and ev.objective == pytest.approx(4.1)  # by hand (the fixture's docstring)
    one = evaluate(tiny, [Stage((0, 1), 0, 4, 1, (0, 1))])  # both on every device: memory 124 > 100
    assert not one.valid and "needs 124 bytes" in one.problems[0]
    bad = evaluate(tiny, [Stage((0,), 0, 1, 1, (0,))])  # a plan missing a node is scored, not raised
    assert not bad.valid and "in no stage" in bad.problems[0]


def test_evaluate_old_form_unchanged():
    g, cl = _chain()
    a = np.array([2, 0, 1])
    assert evaluate(g, cl, a).max_load == evaluate_assignment(g, cl, a).max_load == 9.0  # the README's


@pytest.mark.parametrize("call, error, words", [
    (lambda pr, g, cl: place(pr, cl), TypeError, "takes no cluster; got Cluster"),
    (lambda pr, g, cl: place(pr, "dp"), TypeError, "solver='dp'"),
    (lambda pr, g, cl: place(g), TypeError, "an OpGraph is placed on a Cluster, got None"),
    (lambda pr, g, cl: place(g, pr), TypeError, "got ParallelProblem"),
    (lambda pr, g, cl: place("gnmt.json"), TypeError, "read_piper"),
    (lambda pr, g, cl: place(None), TypeError, "takes an OpGraph with its Cluster or a ParallelProblem"),
    (lambda pr, g, cl: place(pr, solver=3), TypeError, "solver must be"),
    (lambda pr, g, cl: place(pr, options={"time_limit": 1}), TypeError, "SolveOptions"),
    (lambda pr, g, cl: place(pr, solver="nope"), InputError, "unknown solver 'nope'"),
    (lambda pr, g, cl: evaluate(pr), TypeError, "give the plan"),
    (lambda pr, g, cl: evaluate(pr, cl), TypeError, "not a Cluster"),
    (lambda pr, g, cl: evaluate(pr, "plan.json"), TypeError, "got str"),
    (lambda pr, g, cl: evaluate(pr, [(0, 1)]), TypeError, r"plan\[0\] is not a graphs.parallel.Stage"),
    (lambda pr, g, cl: evaluate(pr, [Stage((0, 1), 0, 1, 1, (0, 1))], [0, 0]), TypeError,
     "takes two arguments"),
    (lambda pr, g, cl: evaluate(pr, [Stage(("embed",), 0, 1, 1, (0,))]), InputError,
     r"plan\[0\]: nodes must be a sequence of indices"),
    (lambda pr, g, cl: evaluate(pr, [Stage((0, 1), 0, 1.5, 1, (0, 1))]), InputError,
     r"plan\[0\]: d must be an integer"),
    (lambda pr, g, cl: evaluate(g, cl), TypeError, "give the assignment"),
    (lambda pr, g, cl: evaluate(g, None, [0, 0, 0]), TypeError, "scored on a Cluster"),
    (lambda pr, g, cl: evaluate([0, 1], cl, [0, 0]), TypeError, "got list"),
])
def test_bad_arguments_name_the_mistake(tiny, call, error, words):
    g, cl = _chain()
    with pytest.raises(error, match=words):
        call(tiny, g, cl)


def test_a_workload_is_not_its_problem(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_tiny_piper()))
    w = read_piper(str(path))
    with pytest.raises(TypeError, match=r"its \.problem"):
        place(w)
    with pytest.raises(TypeError, match=r"its \.problem"):
        evaluate(w, [])


def test_placement_needs_a_graph_or_a_problem(tiny):
    sol = solve(tiny)
    with pytest.raises(TypeError, match="needs its graph and cluster"):
        Placement(None, None, sol, None)
    p = Placement(None, None, sol, None, problem=tiny)
    assert p.max_load == pytest.approx(4.1) and p.device_of(1) == "accelerator:2-3"


def test_the_names_are_exported():
    assert placement.read_piper is read_piper
    assert placement.ParallelProblem is ParallelProblem and placement.Stage is Stage
    assert {"read_piper", "ParallelProblem", "Stage"} <= set(placement.__all__)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"devices": 4}, TypeError, "place_model(devices=...) takes a str"),
    ({"devices": "t4:2", "options": {"time_limit": 1}}, TypeError,
     "place_model(options=...) takes a SolveOptions"),
    ({"devices": "t4:2", "training": "yes"}, TypeError, "place_model(training=...) takes a bool"),
    ({"devices": ""}, InputError, "place_model(devices='')"),  # the default devices were used silently
    ({"devices": "t4:2", "optimizer": "sgd"}, InputError, "add training=True"),  # ignored, as the CLI refuses
    ({"devices": "t4:2", "backward_factor": 3.0}, InputError, "add training=True"),
])
def test_place_model_names_a_wrong_argument(kwargs, error, words):
    from graphs.transformer import transformer_model
    from placement import place_model

    with pytest.raises(error) as e:
        place_model(transformer_model(layers=1, hidden=32), **kwargs)
    assert words in str(e.value)


def test_a_one_device_placement_lists_its_stages_as_the_d_t_1_case():
    """One plan view for both models: the README's three operators on two GPUs and a host core. By hand
    (the optimum 7.4): embed on gpu:0, 2.0 + 0.4 sent = 2.4; block and head on gpu:1, 5.0 + 2.0 + 0.4
    received = 7.4. ``stages`` was ``()`` for such a placement; now one d = t = 1 stage per used device
    in pipeline order, each as the device's row says."""
    from placement import Cluster, DeviceKind, Node, OpGraph, place

    g = OpGraph.from_nodes([Node("embed", {"gpu": 2.0, "cpu": 9.0}, memory=4e9, comm=0.4),
                            Node("block", {"gpu": 5.0, "cpu": 30.0}, memory=6e9, comm=0.4),
                            Node("head", {"gpu": 2.0}, memory=2e9)],
                           edges=[("embed", "block"), ("block", "head")])
    cl = Cluster((DeviceKind("gpu", count=2, memory=8e9),
                  DeviceKind("cpu", count=1, pays_communication=False)))
    p = place(g, cl)
    assert p.model == "one-device-per-stage" and p.max_load == pytest.approx(7.4)
    st = p.stages
    assert [[g.names[u] for u in s.stage.nodes] for s in st] == [["embed"], ["block", "head"]]
    assert [(s.stage.kind, s.stage.d, s.stage.t) for s in st] == [(0, 1, 1), (0, 1, 1)]
    assert [s.time_per_sample for s in st] == pytest.approx([2.4, 7.4])
    assert [p.devices_of(g.names[s.stage.nodes[0]]) for s in st] == [["gpu:0"], ["gpu:1"]]
    # the rows agree with the per-device view, stage by stage
    by_device = {d.name: d.load for d in p.evaluation.devices if d.nodes.size}
    assert sorted(by_device.values()) == pytest.approx(sorted(s.time_per_sample for s in st))


def test_a_placement_prints_as_one_line():
    """print(place(...)) dumped the graph's arrays (thousands of characters); now the plan in a line."""
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, comm=0.1), Node("b", {"gpu": 2.0})], edges=[("a", "b")])
    p = place(g, Cluster((DeviceKind("gpu", count=2),)))
    text = repr(p)
    assert "\n" not in text and len(text) < 200, text
    assert text == (f"Placement(model='one-device-per-stage', status='optimal', max_load={p.max_load:.6g}, "
                    f"stages={len(p.stages)}, solver={p.solution.solver!r})")
    # by hand: a and b apart, b's device 2 + 0.1 received (a's 1 + 0.1 sent); together 3
    assert p.max_load == pytest.approx(2.1)


def test_a_placements_stages_and_bound_are_in_its_max_loads_unit():
    """On an ONNX model placed at batch 8, the stage plan's stages read seconds per sample (the stage
    problem's unit) while its max_load read ms per run of the batch, and its bound (only on .solution)
    seconds per sample too: 8000x apart. Now every time a Placement shows is in max_load's unit: the
    slowest stage's time per sample is max_load, and the bound is the solver's scaled by the same
    1e3 * batch; the one-device-per-stage placement (unit 1) reads the same way."""
    pytest.importorskip("onnx")
    from graphs.transformer import transformer_model

    model = transformer_model(layers=2, hidden=64)
    for kw in ({"max_replicas": 1}, {}, {"solver": "ip"}):
        p = placement.place_model(model, devices="a100:2,cpu:1", batch_size=8, **kw)
        assert p.status.value == "optimal", kw
        assert max(s.time_per_sample for s in p.stages) == pytest.approx(p.max_load, rel=1e-12), kw
        assert p.bound is not None and p.bound <= p.max_load * (1 + 1e-9) and p.gap == p.solution.gap
        if p.model == "stages":
            scale = 1e3 * 8  # seconds per sample -> ms per run of the batch
            assert p.stage_evaluation.objective * scale == pytest.approx(p.max_load, rel=1e-12)
            assert p.bound == pytest.approx(p.solution.bound * scale, rel=1e-12)
            for mine, raw in zip(p.stages, p.stage_evaluation.stages):
                assert mine.stage == raw.stage and mine.memory == raw.memory
                assert (mine.compute, mine.comm) == pytest.approx((raw.compute * scale, raw.comm * scale))
        else:
            assert p.bound == p.solution.bound
    # a stage problem placed alone keeps its own unit: nothing to scale
    g = OpGraph.from_nodes([Node("a", {"gpu": 2.0}, comm=0.5), Node("b", {"gpu": 2.0})], [("a", "b")])
    s = placement.place(from_opgraph(g, Cluster((DeviceKind("gpu", 2),)))[0])
    assert s.stages == s.stage_evaluation.stages and s.bound == s.solution.bound


def test_device_of_an_unknown_name_is_a_key_error_in_both_models():
    """A one-device-per-stage placement's device_of("zz") raised tuple.index's bare ValueError ("x not
    in tuple"), where a stage plan's says which name is missing (KeyError)."""
    g = OpGraph.from_nodes([Node("a", {"gpu": 2.0}, comm=0.5), Node("b", {"gpu": 2.0})], [("a", "b")])
    p = placement.place(g, Cluster((DeviceKind("gpu", 2),)))
    assert p.device_of("a").startswith("gpu:")
    with pytest.raises(KeyError, match="no node called 'zz'"):
        p.device_of("zz")
    with pytest.raises(KeyError, match="no node called 'zz'"):
        p.devices_of("zz")


def test_an_empty_graph_is_called_empty():
    """place() on a graph without nodes said "the graph has no costs for device kind 'gpu' (it has costs
    for: none)"; what is missing is the graph."""
    with pytest.raises(InputError, match="the graph is empty: it has no nodes to place"):
        placement.place(OpGraph.from_nodes([], []), Cluster((DeviceKind("gpu", 2),)))


def test_a_plan_of_numpy_arrays_is_the_plan_of_lists(tiny):
    """evaluate read Stage(np.array([0]), ...) as an empty stage (an array's truth value), and a longer
    array raised a bare ValueError: the same plan as lists now gives the same value."""
    lists = [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,))]
    arrays = [Stage(np.array([0]), 0, 1, 1, (0,)), Stage(np.array([1]), np.int64(0), 1, 1, np.array([1]))]
    assert evaluate(tiny, arrays).objective == evaluate(tiny, lists).objective < math.inf
    one = [Stage(np.array([0, 1]), 0, 1, 1, np.array([0, 1]))]
    assert evaluate(tiny, one).objective == evaluate(tiny, [Stage((0, 1), 0, 1, 1, (0, 1))]).objective


@pytest.mark.parametrize("value", [2.0, 1.5, "2", True])
def test_max_replicas_must_be_an_integer(value, tmp_path):
    """read_piper(max_replicas=2.0) failed later with a bare TypeError; True was read as 1."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_tiny_piper()))
    with pytest.raises(InputError, match="max replicas must be a positive integer or None"):
        read_piper(str(path), max_replicas=value)
