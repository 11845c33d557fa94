"""Piper's workload format (graphs/piper.py) and Piper's reference table
(shared/workloads/piper/FORMAT.md): our optimum is at most Piper's (equal where its greedy is exact)."""

from __future__ import annotations

import copy
import json
import os

import pytest

from graphs.errors import InputError
from graphs.parallel import Stage, evaluate_plan
from graphs.piper import is_piper, parse_piper, read_piper
from solvers.base import Status
from solvers.dp_stages import solve_problem
from tests.instances import WORKLOADS

PIPER = os.path.join(WORKLOADS, "piper")
GiB = 2 ** 30


@pytest.fixture(scope="module")
def piper_dir() -> str:
    if not os.path.exists(os.path.join(PIPER, "bert32a100.json")):
        pytest.skip(f"Piper workloads not found at {PIPER} (set PLACEMENT_WORKLOADS)")
    return PIPER


def _tiny() -> dict:
    v = {"id": "vanilla", "timePerSample": 1.0, "parameterSize": 4.0, "memoryUsageA": 2.0,
         "memoryUsageB": 8.0,
         "syncTimeFw": {}, "syncTimeBw": {}}
    return {"maxDevices": 4, "maxMemoryPerDevice": 100.0, "bandwidth": 10.0, "mbsInBatch": 4,
            "nodes": [{"id": 0, "name": "a", "TMPCs": {"1": [dict(v)]}},
                      {"id": 1, "name": "b", "TMPCs": {"1": [dict(v, syncTimeFw={"0": 5.0})]}}],
            "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 10.0}]}


def test_tiny_file_costs():
    p = parse_piper(_tiny())
    assert is_piper(_tiny())
    assert p.microbatches == 4 and p.kinds[0].count == 4 and p.kinds[0].memory == 100.0
    ev = evaluate_plan(p, [Stage((0,), 0, 1, 1, (0,)), Stage((1,), 0, 1, 1, (1,))])
    # stage 1: edge 2*(10 + 5)/10 = 3 plus compute 1
    assert ev.stages[1].time_per_sample == pytest.approx(4.0)
    assert ev.stages[0].time_per_sample == pytest.approx(3.0)  # 2*10/10 + 1


def test_overrides_apply():
    p = parse_piper(_tiny(), devices=16, memory=5.0, microbatches=8, bandwidth=20.0, schedule="gpipe",
                    max_replicas=2)
    k = p.kinds[0]
    assert (k.count, k.memory, k.bandwidth, p.microbatches, p.schedule, p.max_replicas) == \
        (16, 5.0, 20.0, 8, "gpipe", 2)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("mbsInBatch"), "missing top-level field 'mbsInBatch'"),
    (lambda d: d.update(maxDevices=2.5), "maxDevices must be an integer"),
    (lambda d: d.update(bandwidth=0), "bandwidth must be positive"),
    (lambda d: d["nodes"][1].update(TMPCs={}), "node 1: missing or empty 'TMPCs'"),
    (lambda d: d["nodes"][1]["TMPCs"].update({"2": []}), "node 1: no variant for tensor-parallel degree 2"),
    (lambda d: d["nodes"][0]["TMPCs"]["1"][0].pop("memoryUsageA"),
     "node 0, TMPCs[1][0]: missing field 'memoryUsageA'"),
    (lambda d: d["nodes"][0]["TMPCs"]["1"][0].update(timePerSample=-1),
     "node 0, variant 'vanilla' (t=1): timePerSample"),
    (lambda d: d["nodes"][1]["TMPCs"]["1"][0].update(syncTimeFw={"7": 3.0}), "syncTimeFw names node 7"),
    (lambda d: d["nodes"][0]["TMPCs"].update({"x": []}), "TMPCs key 'x'"),
    (lambda d: d["edges"].append({"sourceId": 1, "destId": 9, "communicationCost": 1}), "unknown node id 9"),
    (lambda d: d["edges"].append({"sourceId": 1, "destId": 0, "communicationCost": 1}), "cycle"),
    (lambda d: d["nodes"].append({"id": 0, "TMPCs": {}}), "node 0 is defined twice"),
])
def test_bad_input_names_the_field(edit, message):
    d = copy.deepcopy(_tiny())
    edit(d)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        parse_piper(d, source="w.json")


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_piper(tmp_path / "nope.json")


# file, k, memory, N, bandwidth, Piper's tps (None: infeasible), Piper's stages; slow rows marked
_ROWS = [
    ("bert32a100", None, None, None, None, 0.09772736112, 1),
    ("bert32a100", 8, 8 * GiB, 1920, 25 * GiB, 0.16585575, 8),
    ("bert32a100", 8, 2 * GiB, 1920, 25 * GiB, None, 0),
    ("bert32a100", 64, 8 * GiB, 1920, 25 * GiB, 0.0202005502945, 12),
    ("bert32a100", 64, 2 * GiB, 1920, 25 * GiB, 0.0320300812349, 24),
    ("bert32a100", 512, 2 * GiB, 1920, 25 * GiB, 0.00366752625994, 31),
    ("bert32a100", 512, 8 * GiB, 1920, 25 * GiB, 0.00256112784601, 12),
    ("resnet", None, None, None, None, 46.2381019168, 1),
    pytest.param("gnmt", None, None, None, None, 53.4911057249, 2, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name, k, mem, N, bw, tps, stages", _ROWS)
def test_piper_reference_table(piper_dir, name, k, mem, N, bw, tps, stages):
    p = read_piper(os.path.join(piper_dir, name + ".json"), devices=k, memory=mem, microbatches=N,
                   bandwidth=bw)
    r = solve_problem(p)
    if tps is None:
        assert r.status is Status.INFEASIBLE and r.plan is None
        return
    assert r.status is Status.OPTIMAL
    ev = evaluate_plan(p, r.plan)
    assert ev.valid, ev.problems
    # Piper's greedy variant choice is exact on these rows: equal, to Piper's printed precision
    assert ev.objective == pytest.approx(tps, rel=1e-9)
    assert r.objective == pytest.approx(ev.objective, rel=1e-12)


def test_plan_round_trips_through_json(piper_dir):
    p = read_piper(os.path.join(piper_dir, "bert32a100.json"), devices=64, memory=2 * GiB, bandwidth=25 * GiB)
    r = solve_problem(p)
    blob = json.dumps([[list(s.nodes), s.kind, s.d, s.t, list(s.variants)] for s in r.plan])
    plan = [Stage(tuple(a), k, d, t, tuple(v)) for a, k, d, t, v in json.loads(blob)]
    assert evaluate_plan(p, plan).objective == pytest.approx(r.objective)


def test_schedules_order_the_optimum(piper_dir):
    """More memory in flight never helps: 1F1B <= 2BW <= PipeDream, and 1F1B <= GPipe."""
    path = os.path.join(piper_dir, "bert32a100.json")
    val = {}
    for sched in ("1f1b", "2bw", "pipedream", "gpipe"):
        p = read_piper(path, devices=32, memory=4 * GiB, bandwidth=25 * GiB, microbatches=64, schedule=sched)
        r = solve_problem(p)
        val[sched] = r.objective
        if r.plan is not None:
            assert evaluate_plan(p, r.plan).valid
    assert val["1f1b"] <= val["2bw"] * (1 + 1e-12) <= val["pipedream"] * (1 + 1e-9)
    assert val["1f1b"] <= val["gpipe"] * (1 + 1e-12)
    assert val["1f1b"] < val["pipedream"]  # the weight versions bind at 4 GiB


def test_max_replicas_one_is_pipeline_only(piper_dir):
    p = read_piper(os.path.join(piper_dir, "bert32a100.json"), devices=64, memory=8 * GiB, bandwidth=25 * GiB,
                   max_replicas=1)
    r = solve_problem(p)
    assert r.status is Status.OPTIMAL and all(s.d == 1 for s in r.plan)
    free = solve_problem(p.with_options(max_replicas=None))
    assert free.objective < r.objective


def test_grown_bert_has_the_layers_and_reads(piper_dir):
    from benchmarks.bench_stages import grow_bert

    data = json.load(open(os.path.join(piper_dir, "bert32a100.json")))
    big = grow_bert(data, 40)
    assert sum(n["name"] == "ParallelTransformerLayer" for n in big["nodes"]) == 40
    assert len(big["edges"]) == len(data["edges"]) + 2 * 8
    p = parse_piper(big, devices=16, memory=8 * GiB, bandwidth=25 * GiB)
    small = solve_problem(parse_piper(data, devices=16, memory=8 * GiB, bandwidth=25 * GiB))
    r = solve_problem(p)
    assert r.status is Status.OPTIMAL and r.objective > small.objective  # more layers, same devices
