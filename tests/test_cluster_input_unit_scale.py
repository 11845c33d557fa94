"""An ``input`` section's figures (CPU ms per sample, storage GB/s) are converted into the stage curve's own
time unit. A Piper-format workload's curve is in seconds; its stage times used to be compared against
the section's milliseconds as they were, so its input pipeline ran 1000x too slow (a CPU-bound job fed
0.25 samples per *second* where it should get 250). The same stage curve in ms and in s now gives the same
samples per second, the same host cores and the same cache memory."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest

from placement.cluster.curves import CurvePoint, JobCurve, job_curve
from placement.cluster.formats import GB, InputSpec, parse_jobs
from placement.cluster.inputs import job_rates, pipeline_curve
from tests.test_cluster_policies import table_curve as stage_table

# 4 ms of CPU per sample; 1 MB samples from 0.5 GB/s storage: 0.5 samples per ms (500 per s) uncached
INP = InputSpec(cpu_ms_per_sample=4.0, sample_bytes=1e6, dataset_bytes=10 * GB, storage_bytes_per_s=0.5 * GB)


def _stage(unit: str, per_ms: float) -> JobCurve:
    """(accelerators, host cores) up to (2, 4): 1 accelerator 2 ms per sample, 2 accelerators 1 ms, in
    ``unit`` (``per_ms`` of it per ms)."""
    ms = stage_table({(1, 0): 2.0, (2, 0): 1.0}, limits=(2, 4))
    return dataclasses.replace(
        ms, unit=unit, values={c: v * per_ms for c, v in ms.values.items()},
        points=tuple(CurvePoint(p.counts, p.time_per_sample * per_ms, p.host_memory) for p in ms.points))


MS, S = _stage("ms", 1.0), _stage("s", 1e-3)


# counts, memory, samples per ms, used devices, used memory (hand-computed from the module's formulas)
CASES = [
    # CPU-bound: 1 acc 0.5/ms, 1 feeding core 1/4 = 0.25/ms, storage 0.5/ms -> 0.25/ms (250/s), 1 core
    ((1, 1), 0.0, 0.25, (1, 1), 0.0),
    # storage-bound, no cache: 2 acc 1/ms, 4 cores 1/ms, storage 0.5/ms; 1 acc and 2 cores keep 0.5/ms
    ((2, 4), 0.0, 0.5, (1, 2), 0.0),
    # storage-bound with 2.5 GB cached (f = 1/4): 0.5 / 0.75 = 2/3 per ms (666.7/s); it needs
    # ceil(2/3 * 4) = 3 cores and dataset * (1 - 0.5 / (2/3)) = 2.5 GB of cache
    ((2, 4), 2.5 * GB, 2 / 3, (2, 3), 2.5 * GB),
    # half cached: storage 1/ms, as fast as 2 acc and 4 cores; the cache it needs is 10 * (1 - 0.5) GB
    ((2, 4), 8 * GB, 1.0, (2, 4), 5 * GB),
]


@pytest.mark.parametrize("counts, memory, per_ms, used, used_memory", CASES)
def test_same_samples_per_second_cores_and_memory_in_ms_and_in_s(counts, memory, per_ms, used, used_memory):
    p_ms = pipeline_curve(MS, INP).best_within(counts, memory)
    p_s = pipeline_curve(S, INP).best_within(counts, memory)
    # the ms curve's figures are the hand-computed ones, as before the fix
    assert 1.0 / p_ms.time_per_sample == pytest.approx(per_ms, rel=1e-12)
    assert p_ms.counts == used and p_ms.host_memory == pytest.approx(used_memory, rel=1e-12)
    # the s curve: 1000x the rate per unit, i.e. the same samples per second; same cores and memory
    assert 1.0 / p_s.time_per_sample == pytest.approx(per_ms * 1e3, rel=1e-12)
    assert p_s.time_per_sample * 1e3 == pytest.approx(p_ms.time_per_sample, rel=1e-12)
    assert p_s.counts == used and p_s.host_memory == pytest.approx(used_memory, rel=1e-12)


def test_one_value_by_hand_in_seconds():
    """(2 acc, 4 cores, 2.5 GB) on the s curve: storage 0.5e9 B/s / ((1 - 2.5/10) * 1e6 B) = 666.67
    samples/s (acc 1/0.001 = 1000/s, CPU 4 cores / 0.004 s = 1000/s); cores ceil(666.67 * 0.004) = 3;
    cache 10 GB * (1 - 0.5e9 / (666.67 * 1e6)) = 2.5 GB. Before: 0.667 samples per s."""
    c = pipeline_curve(S, INP)
    p = c.best_within((2, 4), 2.5 * GB)
    want = 0.5e9 / ((1 - 2.5 / 10) * 1e6)
    assert want == pytest.approx(666.666666, rel=1e-6)
    assert 1.0 / p.time_per_sample == pytest.approx(want, rel=1e-12)
    assert p.counts == (2, math.ceil(want * 0.004)) == (2, 3)
    assert p.host_memory == pytest.approx(10 * GB * (1 - 0.5e9 / (want * 1e6)), rel=1e-9)
    b = c.rate.breakdown((2, 4), 2.5 * GB)  # per second, the curve's unit
    assert b["accelerator"] == pytest.approx(1000.0) and b["cpu"] == pytest.approx(1000.0)
    assert b["storage"] == pytest.approx(want, rel=1e-12)


def test_every_point_and_value_and_breakdown_scale_by_the_unit():
    c_ms, c_s = pipeline_curve(MS, INP), pipeline_curve(S, INP)
    assert c_ms.unit == "ms" and c_s.unit == "s"
    assert len(c_ms.points) == len(c_s.points) > 1
    for a, b in zip(c_ms.points, c_s.points):
        assert a.counts == b.counts and b.host_memory == pytest.approx(a.host_memory, rel=1e-12, abs=1e-3)
        assert b.time_per_sample * 1e3 == pytest.approx(a.time_per_sample, rel=1e-12)
    for k, v in c_ms.values.items():
        assert c_s.values[k] * 1e3 == pytest.approx(v, rel=1e-12)
    for counts, memory, *_ in CASES:
        bm, bs = c_ms.rate.breakdown(counts, memory), c_s.rate.breakdown(counts, memory)
        for key in bm:
            assert bs[key] == pytest.approx(bm[key] * 1e3, rel=1e-12)


def test_a_curve_without_a_unit_is_read_as_ms():
    bare = dataclasses.replace(MS, unit="")
    a, b = pipeline_curve(MS, INP), pipeline_curve(bare, INP)
    assert [(p.counts, p.time_per_sample, p.host_memory) for p in a.points] == \
        [(p.counts, p.time_per_sample, p.host_memory) for p in b.points]
    assert any("says no time unit" in n for n in b.notes)


def test_a_piper_job_in_seconds_is_fed_at_its_storage_rate(workloads, tmp_path):
    """End to end: a Piper-format job (its curve in s) whose storage binds gets the storage's samples per
    second (before: that many per ms, read as per s: 1000x slower)."""
    path = os.path.join(workloads, "piper", "gnmt.json")
    if not os.path.exists(path):
        pytest.skip("the Piper workloads are not among the shared workloads")
    plain = parse_jobs({"cluster": {"devices": "a100:1"}, "jobs": [{"model": path, "samples": 10}]})
    stage = job_curve(plain.jobs[0], plain.cluster)
    assert stage.unit == "s"
    t1 = stage.values[(1,)]
    # storage sustains half the accelerator's rate: sample_bytes = B * 2 * t1 (bytes per s * s)
    gbps = 1.0
    job = {"model": path, "samples": 10,
           "input": {"cpu_ms_per_sample": 0, "sample_bytes": gbps * GB * 2 * t1, "dataset_gb": 100,
                     "storage_gbps": gbps}}
    jl = parse_jobs({"cluster": {"devices": "a100:1"}, "jobs": [job]})
    c = job_rates(jl.jobs[0], jl.cluster)
    assert c.unit == "s"
    p = c.best_within((1,), 0.0)
    assert 1.0 / p.time_per_sample == pytest.approx(0.5 / t1, rel=1e-9)  # before: 0.5 / t1 / 1000
    q = c.best_within((1,), math.inf)  # the whole dataset cached: the accelerator binds
    assert q.time_per_sample == pytest.approx(t1, rel=1e-9)
    # half the dataset cached doubles the storage rate to the accelerator's: it uses 50 GB
    h = c.best_within((1,), 60 * GB)
    assert h.time_per_sample == pytest.approx(t1, rel=1e-9) and h.host_memory == pytest.approx(50 * GB)
