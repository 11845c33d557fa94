"""Stage-model job curves (placement/cluster/curves.py, problem_curve): every allocation's value
equals a separate stage-model dp run on that many devices, efficient points, and Piper-format jobs in a
job list get this curve."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os

import numpy as np
import pytest

from graphs.errors import InputError
from placement.cluster.curves import CurveCache, job_curve, problem_curve
from placement.cluster.formats import parse_jobs
from solvers.base import Status
from solvers.dp_stages import solve_problem
from tests.test_dp_stages import random_problem


def _separate(p, counts) -> float:
    sub = p.with_options(kinds=tuple(dataclasses.replace(k, count=c) for k, c in zip(p.kinds, counts)))
    r = solve_problem(sub)
    assert r.status in (Status.OPTIMAL, Status.INFEASIBLE)
    return r.objective if r.status is Status.OPTIMAL else math.inf


@pytest.mark.parametrize("seed", range(3))
def test_curve_equals_separate_runs_per_allocation(seed):
    rng = np.random.default_rng(300 + seed)
    finite = 0
    for _ in range(25):
        p = random_problem(rng)
        c = problem_curve(p)
        assert c.exact and c.method == "stage-dp-per-count"
        assert c.limits == tuple(k.count for k in p.kinds)
        for counts in itertools.product(*(range(k.count + 1) for k in p.kinds)):
            want = math.inf if sum(counts) == 0 else _separate(p, counts)
            assert c.values[counts] == pytest.approx(want, rel=1e-9), counts
            finite += math.isfinite(want)
        for pt in c.points:  # each strictly faster than every allocation with one device fewer
            assert math.isfinite(pt.time_per_sample)
            for t, x in enumerate(pt.counts):
                if x:
                    assert pt.time_per_sample < c.values[pt.counts[:t] + (x - 1,) + pt.counts[t + 1:]]
    assert finite >= 15


def test_curve_maps_onto_the_cluster_kinds():
    rng = np.random.default_rng(7)
    p = random_problem(rng)
    names = ("cpu",) + tuple(k.name for k in p.kinds)
    c = problem_curve(p, kinds=names, base_memory=5.0)
    assert c.kinds == names and c.limits[0] == 0
    assert all(pt.counts[0] == 0 and pt.host_memory == 5.0 for pt in c.points)


def test_piper_job_gets_the_stage_model_curve(workloads, tmp_path):
    path = os.path.join(workloads, "piper", "gnmt.json")
    if not os.path.exists(path):
        pytest.skip("the Piper workloads are not among the shared workloads")
    jl = parse_jobs({"cluster": {"devices": "a100:3,cpu:2"},
                     "jobs": [{"model": path, "samples": 10, "limit": "a100:2"}]})
    cache = CurveCache(tmp_path / "cache")
    c = job_curve(jl.jobs[0], jl.cluster, cache=cache)
    assert c.method == "stage-dp-per-count" and c.kinds == ("a100", "cpu") and c.unit == "s"  # Piper: s
    assert c.limits == (2, 0)
    from graphs.piper import read_piper

    for n in (1, 2):
        want = solve_problem(read_piper(path, devices=n)).objective
        assert c.values[(n, 0)] == pytest.approx(want, rel=1e-9)
    assert job_curve(jl.jobs[0], jl.cluster, cache=cache) is c and cache.hits == 1
    one = parse_jobs({"cluster": {"devices": "a100:2"},
                      "jobs": [{"model": path, "samples": 10, "max_replicas": 1}]})
    c1 = job_curve(one.jobs[0], one.cluster, cache=cache)
    assert c1.values[(2,)] == pytest.approx(
        solve_problem(read_piper(path, devices=2, max_replicas=1)).objective, rel=1e-9)


# --------------------------------------------------------------------------- ONNX jobs
# small_cnn's parameters by hand: conv.w 4x3x3x3, conv.b 4, fc.w 64x10, fc.b 10 float32 values
_CNN_PARAM_BYTES = 4 * (4 * 3 * 3 * 3 + 4 + 64 * 10 + 10)
# and its operators' outputs for one sample (inference memory counts them): conv and relu 4x8x8 each,
# pool and flatten 4x4x4 each, gemm and softmax 10 each, float32
_CNN_OUTPUT_BYTES = 4 * (2 * 4 * 8 * 8 + 2 * 4 * 4 * 4 + 2 * 10)
_CNN_BYTES = _CNN_PARAM_BYTES + _CNN_OUTPUT_BYTES


@pytest.fixture
def cnn(tmp_path):
    from tests.onnx_models import save, small_cnn

    return save(small_cnn(), str(tmp_path / "cnn.onnx"))


def _one_device_ms(path, devices, kind, **frontend) -> float:
    """One device of ``kind`` running the whole model: the sum of its operators' times (ms per run)."""
    from graphs.onnx_workload import onnx_workload

    w = onnx_workload(path, devices, **frontend)
    compute, _ = w.graph.costs_for(w.cluster)
    return float(compute[[k.name for k in w.cluster.kinds].index(kind)].sum())


def _curve(path, devices, **job):
    jl = parse_jobs({"cluster": {"devices": devices}, "jobs": [{"model": path, "samples": 10, **job}]})
    return job_curve(jl.jobs[0], jl.cluster)


def test_onnx_inference_job_on_k_accelerators_runs_k_replicas(cnn):
    """A model that fits one device: k replicas (k dividing the 4 micro-batches) serve a run every
    T1 / k (no all-reduce in inference), which is also the work bound, so it is the optimum. The curve
    is per sample (7c4a236): a run of the batch of 8 over 8."""
    t1 = _one_device_ms(cnn, "a100:4", "a100", batch_size=8) / 8
    c = _curve(cnn, "a100:4", batch_size=8)
    one = _curve(cnn, "a100:4", batch_size=8, max_replicas=1)
    assert c.unit == "ms" and c.method == "faster of stage-dp-per-count, dp-curve" and c.exact
    assert one.method == "dp-curve"
    for k in (1, 2, 4):
        assert c.values[(k,)] == pytest.approx(t1 / k, rel=1e-9)
    assert t1 / 3 * (1 - 1e-9) <= c.values[(3,)] <= t1 / 2 * (1 + 1e-9)
    assert one.values[(4,)] > 1.5 * c.values[(4,)]  # the pipeline-only curve cannot split 5 operators 4 ways
    for counts, v in one.values.items():
        assert c.values[counts] <= v * (1 + 1e-12), counts
    assert {(1,), (2,), (4,)} <= {p.counts for p in c.points}


def test_onnx_training_curve_is_never_worse_than_one_device_per_stage(cnn):
    c = _curve(cnn, "a100:3,cpu:2", training=True)
    one = _curve(cnn, "a100:3,cpu:2", training=True, max_replicas=1)
    t1 = _one_device_ms(cnn, "a100:3,cpu:2", "a100", training=True)
    assert c.values[(1, 0)] == pytest.approx(t1, rel=1e-9)
    assert c.values[(2, 0)] >= t1 / 2 * (1 - 1e-9)  # the work bound
    assert c.values[(2, 0)] < one.values[(2, 0)]  # replicas beat the pipeline here
    for counts, v in one.values.items():
        assert c.values[counts] <= v * (1 + 1e-12), counts
    for h in (0.0, 15e3, 20e3, 40e3, math.inf):  # and under any host memory
        for counts in one.values:
            a, b = c.best_within(counts, h), one.best_within(counts, h)
            assert b is None or (a is not None and a.time_per_sample <= b.time_per_sample * (1 + 1e-12))


def test_replicas_on_host_cores_hold_the_weights_once_each(cnn):
    """Two host cores as two replicas: half the one-core time, each core holding all the parameters
    and outputs; the pipeline over the two cores, holding them once, stays a point for a tighter host
    memory."""
    t1 = _one_device_ms(cnn, "cpu:2", "cpu")
    c = _curve(cnn, "cpu:2", host_memory_gb=1e-6)  # 1000 bytes of base memory
    one = _curve(cnn, "cpu:2", max_replicas=1, host_memory_gb=1e-6)
    assert c.host == (True,)
    fast = c.best_within((2,))
    assert fast.time_per_sample == pytest.approx(t1 / 2, rel=1e-9)
    assert fast.host_memory == pytest.approx(1000 + 2 * _CNN_BYTES)
    tight = 1000 + 1.5 * _CNN_BYTES
    assert c.best_within((2,), tight) == one.best_within((2,), tight)
    assert one.best_within((2,), tight).host_memory == pytest.approx(1000 + _CNN_BYTES)
    assert c.best_within((1,)).host_memory == pytest.approx(1000 + _CNN_BYTES)


def test_max_replicas_caps_the_data_parallel_degree(cnn):
    t1 = _one_device_ms(cnn, "a100:4", "a100")
    two = _curve(cnn, "a100:4", max_replicas=2)
    assert two.values[(2,)] == pytest.approx(t1 / 2, rel=1e-9)
    assert two.values[(4,)] > t1 / 4 * (1 + 1e-6)  # four replicas are not allowed


def test_max_replicas_is_validated_and_refused_where_it_means_nothing(cnn, workloads):
    ok = {"cluster": {"devices": "a100:2"}, "jobs": [{"model": cnn, "samples": 1}]}
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InputError, match=r"jobs\[0\]: max_replicas must be a positive integer"):
            parse_jobs({**ok, "jobs": [{"model": cnn, "samples": 1, "max_replicas": bad}]})
    table = {"accelerators": 1, "points": [[1, 0, 5]]}
    with pytest.raises(InputError, match="max_replicas need a model"):
        parse_jobs({"cluster": {"devices": "a100:2,cpu:2"},
                    "jobs": [{"samples": 1, "throughput": table, "max_replicas": 2}]})
    three = parse_jobs({**ok, "jobs": [{"model": cnn, "samples": 1, "max_replicas": 3}]})
    assert three.jobs[0].max_replicas == 3
    ref = os.path.join(workloads, "throughput-inputs", "LayerGraphs", "bert24_inference.json")
    jl = parse_jobs({"cluster": {"devices": "v100:2,cpu:1"},
                     "jobs": [{"model": ref, "samples": 1, "max_replicas": 2}]})
    # the one message of check_max_replicas, as the command's (which names the job list file)
    with pytest.raises(InputError, match=r"^jobs\[0\] \(job0\): max_replicas: 2 needs an ONNX, Piper-format "
                                         r"or LLM model; a reference-format workload \(.*bert24_inference"
                                         r"\.json\) has one device per stage \(give 1 or leave it out\)$"):
        job_curve(jl.jobs[0], jl.cluster)


# a reference-format chain of two operators (1 ms each on the accelerator) and a Piper-format workload of
# two nodes (tests/test_piper.py's tiny file)
_CHAIN = {"maxSizePerFPGA": 16e9, "maxFPGAs": 2, "maxCPUs": 2, "unit": "ms",
          "nodes": [{"id": i + 1, "name": f"n{i}", "cpuLatency": 100.0, "fpgaLatency": 1.0,
                     "supportedOnFpga": 1, "isBackwardNode": 0, "size": 1e6} for i in range(2)],
          "edges": [{"sourceId": 1, "destId": 2, "cost": 0.0}]}


def _tiny_piper() -> dict:
    from tests.test_piper import _tiny

    return _tiny()


def test_max_replicas_refusal_is_one_message_on_both_paths(tmp_path, capsys):
    """The library's curve and the command refuse max_replicas on a reference-format workload with the
    one message, naming the job list file (the library's said "job 'A': max_replicas 2 needs an ONNX or
    Piper-format model", without the file or 'LLM')."""
    import json

    from placement.cli import main
    from placement.cluster.formats import read_jobs

    (tmp_path / "chain.json").write_text(json.dumps(_CHAIN))
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"cluster": {"devices": "a100:2,cpu:2"},
                                "jobs": [{"name": "A", "model": "chain.json", "samples": 10,
                                          "max_replicas": 2}]}))
    want = (f"{path}: jobs[0] (A): max_replicas: 2 needs an ONNX, Piper-format or LLM model; a "
            f"reference-format workload ({tmp_path / 'chain.json'}) has one device per stage (give 1 or "
            f"leave it out)")
    jl = read_jobs(path)
    with pytest.raises(InputError) as e:
        job_curve(jl.jobs[0], jl.cluster)
    assert str(e.value) == want
    assert main(["cluster", str(path), "--no-cache"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"error: {want}"


def test_a_piper_file_is_decoded_once_for_the_check_and_the_curve(tmp_path, monkeypatch, capsys):
    """With max_replicas above 1 the command's check tells a Piper file from a reference one, and the curve
    then uses that decode (it read the file again)."""
    import json

    import placement.cluster.curves as curves
    from placement.cli import main

    (tmp_path / "tiny.json").write_text(json.dumps(_tiny_piper()))
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"cluster": {"devices": "a100:2"},
                                "jobs": [{"name": "P", "model": "tiny.json", "samples": 10,
                                          "max_replicas": 2}]}))
    decoded = []
    real = curves._piper_data
    monkeypatch.setattr(curves, "_piper_data", lambda p: decoded.append(p) or real(p))
    assert main(["cluster", str(path), "--no-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"][0]["name"] == "P"
    assert decoded == [str(tmp_path / "tiny.json")]


def test_onnx_curves_are_cached_per_replica_limit(cnn, tmp_path, monkeypatch):
    import placement.cluster.curves as curves

    def jobs(**extra):
        return parse_jobs({"cluster": {"devices": "a100:2,cpu:1"},
                           "jobs": [{"model": cnn, "samples": 1, **extra}]})

    cache = CurveCache(tmp_path / "cache")
    a = jobs()
    c = job_curve(a.jobs[0], a.cluster, cache=cache)
    assert (cache.hits, cache.misses) == (0, 1)
    disk = CurveCache(tmp_path / "cache")  # another process reads the file
    d = job_curve(a.jobs[0], a.cluster, cache=disk)
    assert disk.hits == 1 and d.values == c.values and d.points == c.points and d.method == c.method
    one = jobs(max_replicas=1)
    assert job_curve(one.jobs[0], one.cluster, cache=disk).method == "dp-curve" and disk.misses == 1
    # a curve cached by the previous format is recomputed, not read
    monkeypatch.setattr(curves, "CURVE_FORMAT", 1)
    old = CurveCache(tmp_path / "old")
    job_curve(a.jobs[0], a.cluster, cache=old)
    monkeypatch.setattr(curves, "CURVE_FORMAT", 2)
    new = CurveCache(tmp_path / "old")
    job_curve(a.jobs[0], a.cluster, cache=new)
    assert (new.hits, new.misses) == (0, 1) and len(os.listdir(tmp_path / "old")) == 2


def test_cluster_simulate_runs_an_onnx_job_on_its_replicas(cnn, tmp_path, capsys):
    """One job alone on a100:4 runs its 4 replicas from arrival to the end: it finishes after
    samples * T1 / 4 ms."""
    import json

    from placement.cli import main

    t1 = _one_device_ms(cnn, "a100:4", "a100")
    doc = {"cluster": {"devices": "a100:4"}, "jobs": [{"name": "cnn", "model": cnn, "samples": 1000}]}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(doc))
    cache = str(tmp_path / "cache")
    assert main(["cluster", "simulate", str(path), "--policy", "ftf", "--json", "--cache-dir", cache]) == 0
    res = json.loads(capsys.readouterr().out)
    (job,) = res["jobs"]
    assert job["curve"]["method"] == "faster of stage-dp-per-count, dp-curve"
    assert job["finish_time"] == pytest.approx(1000 * t1 / 4, rel=1e-9)
    assert main(["cluster", "simulate", str(path), "--policy", "ftf", "--json", "--cache-dir", cache]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["jobs"][0]["finish_time"] == job["finish_time"]
