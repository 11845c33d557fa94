"""Job throughput curves: one DP run equals separate solves at every allocation; efficient points, host
memory, the job front ends (ONNX, reference format) and the curve cache."""

import json
import math
import os

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.model import Cluster, DeviceKind
from placement.cluster.curves import CurveCache, JobCurve, graph_curve, job_curve
from placement.cluster.formats import parse_jobs
from solvers.base import Status
from solvers.dp import solve
from tests.instances import random_instance


def _sub(cluster, counts):
    return Cluster(tuple(DeviceKind(k.name, n, k.memory, k.pays_communication)
                         for k, n in zip(cluster.kinds, counts)))


def _random_instances(seed, count, **kw):
    rng = np.random.default_rng(seed)
    return [random_instance(rng, max_items=5, **kw) for _ in range(count)]


def test_curve_values_equal_separate_dp_runs_and_points_are_the_efficient_ones():
    for inst in _random_instances(11, 15):
        c = graph_curve(inst.graph, inst.cluster)
        assert c.method == "dp-curve" and c.exact
        assert c.kinds == tuple(k.name for k in inst.cluster.kinds)
        assert c.limits == tuple(k.count for k in inst.cluster.kinds)
        shape = [k.count + 1 for k in inst.cluster.kinds]
        assert len(c.values) == int(np.prod(shape))
        for counts in np.ndindex(*shape):
            v = c.values[counts]
            if sum(counts) == 0:
                assert math.isinf(v)
                continue
            sol = solve(inst.graph, _sub(inst.cluster, counts))
            expected = sol.objective if sol.status is Status.OPTIMAL else math.inf
            assert v == pytest.approx(expected, rel=1e-9), counts
            # the best efficient point within an allocation gives its value
            p = c.best_within(counts)
            assert (p is None and math.isinf(v)) or p.time_per_sample == pytest.approx(v, rel=1e-12)
        for p in c.points:  # each strictly faster than every allocation with one device fewer
            for t, x in enumerate(p.counts):
                if x:
                    smaller = p.counts[:t] + (x - 1,) + p.counts[t + 1:]
                    assert p.time_per_sample < c.values[smaller]


def test_host_memory_of_a_point_is_what_its_placement_holds_on_host_cores():
    checked = 0
    for inst in _random_instances(3, 25, kinds=2):
        host = [not k.pays_communication for k in inst.cluster.kinds]
        c = graph_curve(inst.graph, inst.cluster, base_memory=7.0)
        for p in c.points:
            if not any(x and h for x, h in zip(p.counts, host)):
                assert p.host_memory == 7.0
                continue
            sol = solve(inst.graph, _sub(inst.cluster, p.counts))
            kind_of = np.repeat(np.arange(len(p.counts)), p.counts)[sol.assignment]
            on_host = np.array(host)[kind_of]
            assert p.host_memory == pytest.approx(7.0 + inst.graph.memory[on_host].sum())
            checked += 1
    assert checked > 0


def test_per_count_fallback_agrees_with_the_one_run_curve():
    for inst in _random_instances(8, 8):
        a = graph_curve(inst.graph, inst.cluster)
        b = graph_curve(inst.graph, inst.cluster, force_fallback=True)
        assert b.method == "per-count-auto"
        assert a.values.keys() == b.values.keys()
        for k in a.values:
            assert b.values[k] == pytest.approx(a.values[k], rel=1e-9), k
        assert [p.counts for p in a.points] == [p.counts for p in b.points]


def test_a_curve_too_expensive_for_one_run_falls_back_and_says_so():
    inst = _random_instances(2, 1)[0]
    c = graph_curve(inst.graph, inst.cluster, max_ideals=1)
    assert c.method == "per-count-auto" and any("too expensive" in n for n in c.notes)
    ref = graph_curve(inst.graph, inst.cluster)
    for k, v in ref.values.items():
        assert c.values[k] == pytest.approx(v, rel=1e-9)


def test_curve_round_trips_through_json():
    inst = _random_instances(4, 1)[0]
    c = graph_curve(inst.graph, inst.cluster)
    d = JobCurve.from_dict(json.loads(json.dumps(c.to_dict())))
    assert d.values == c.values and d.points == c.points and d.kinds == c.kinds and d.host == c.host


# --------------------------------------------------------------------------- jobs and the cache
@pytest.fixture
def cnn(tmp_path):
    from tests.onnx_models import save, small_cnn

    return save(small_cnn(), str(tmp_path / "cnn.onnx"))


def _jobs(cluster, jobs):
    return parse_jobs({"cluster": cluster, "jobs": jobs})


def test_onnx_job_curve_is_over_the_cluster_kinds_and_cached(cnn, tmp_path):
    jl = _jobs({"devices": "a100:3,cpu:2"}, [{"model": cnn, "samples": 10, "training": True}])
    cache = CurveCache(tmp_path / "cache")
    c = job_curve(jl.jobs[0], jl.cluster, cache=cache)
    assert c.kinds == ("a100", "cpu") and c.limits == (3, 2) and c.host == (False, True)
    assert c.unit == "ms" and c.points and (cache.hits, cache.misses) == (0, 1)
    assert job_curve(jl.jobs[0], jl.cluster, cache=cache) is c and cache.hits == 1
    assert len(os.listdir(tmp_path / "cache")) == 1
    disk = CurveCache(tmp_path / "cache")  # a new process: read from the file
    d = job_curve(jl.jobs[0], jl.cluster, cache=disk)
    assert disk.hits == 1 and d.values == c.values and d.points == c.points
    # a different option is a different curve
    jl2 = _jobs({"devices": "a100:3,cpu:2"}, [{"model": cnn, "samples": 10, "training": False}])
    job_curve(jl2.jobs[0], jl2.cluster, cache=disk)
    assert disk.misses == 1


def test_changing_the_model_file_invalidates_its_cached_curve(tmp_path):
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "m.onnx"))
    jl = _jobs({"devices": "a100:2,cpu:1"}, [{"model": path, "samples": 10}])
    cache = CurveCache(tmp_path / "cache")
    job_curve(jl.jobs[0], jl.cluster, cache=cache)
    save(small_cnn(batch=4), path)
    os.utime(path, ns=(1, 1))  # even with an old mtime, the content hash differs
    job_curve(jl.jobs[0], jl.cluster, cache=CurveCache(tmp_path / "cache"))
    assert len(os.listdir(tmp_path / "cache")) == 2


def test_limit_bounds_the_curve(cnn):
    jl = _jobs({"devices": "a100:4,cpu:2"}, [{"model": cnn, "samples": 10, "limit": "a100:2"}])
    c = job_curve(jl.jobs[0], jl.cluster)
    assert c.limits == (2, 2) and all(p.counts[0] <= 2 for p in c.points)
    assert c.time_per_sample((4, 2)) == c.values[(2, 2)]


def test_reference_job_maps_accelerator_and_cpu_to_the_cluster_kinds(workloads, tmp_path):
    path = os.path.join(workloads, "throughput-inputs", "LayerGraphs", "bert24_inference.json")
    jl = _jobs({"devices": "v100:3,cpu:2"}, [{"model": path, "samples": 5}])
    c = job_curve(jl.jobs[0], jl.cluster)
    assert c.kinds == ("v100", "cpu") and c.limits == (3, 2) and c.unit == ""
    from graphs.reference import read_workload

    w = read_workload(path)
    sol = solve(w.graph, _sub(w.cluster, (3, 0)))
    assert c.values[(3, 0)] == pytest.approx(sol.objective, rel=1e-9)
    two = _jobs({"devices": "v100:2,a100:2,cpu:2"}, [{"model": path, "samples": 5}])
    with pytest.raises(InputError, match="several accelerator kinds"):
        job_curve(two.jobs[0], two.cluster)
    pick = _jobs({"devices": "v100:2,a100:2,cpu:2"}, [{"model": path, "samples": 5, "accelerator": "a100"}])
    c2 = job_curve(pick.jobs[0], pick.cluster)
    assert c2.kinds == ("v100", "a100", "cpu") and c2.limits == (0, 2, 2)
    assert c2.values[(0, 2, 0)] == pytest.approx(c.values[(2, 0)], rel=1e-12)


def test_ctrl_c_in_the_curve_dp_stops_the_curve_not_falls_back(monkeypatch):
    """A Ctrl-C stops the DP between chunks (it returns, interrupted); a curve has no best-so-far, so
    it is a KeyboardInterrupt (``cluster simulate`` exits 130), not "too expensive" and a fallback to
    per-allocation solves that ran on for seconds (benchmarks/bench_interrupt.py found it)."""
    import dataclasses

    from solvers import dp

    real = dp.run_dp

    def interrupted(*a, **kw):
        return dataclasses.replace(real(*a, **kw), complete=False, interrupted=True)

    monkeypatch.setattr(dp, "run_dp", interrupted)
    inst = _random_instances(2, 1)[0]
    with pytest.raises(KeyboardInterrupt):
        graph_curve(inst.graph, inst.cluster)


def test_a_ctrl_c_auto_took_ends_the_per_count_curve(monkeypatch):
    """auto takes a Ctrl-C and returns what it has ("interrupted"): the per-count curve went on to the
    next allocation (the Ctrl-C lost). It must stop: one solve, then KeyboardInterrupt."""
    import dataclasses

    from solvers import auto

    inst = _random_instances(2, 1)[0]
    real, calls = auto.solve, []

    def interrupted(graph, cluster, options=None):
        calls.append(1)
        return dataclasses.replace(real(graph, cluster, options), message="interrupted (Ctrl-C)")

    monkeypatch.setattr(auto, "solve", interrupted)
    with pytest.raises(KeyboardInterrupt):
        graph_curve(inst.graph, inst.cluster, force_fallback=True)
    assert calls == [1]
