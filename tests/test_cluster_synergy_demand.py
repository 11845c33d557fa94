"""Synergy's GPU demand of a job that gives no request is the knee of its curve within the cluster's host
memory, as fifo's default request: it was the knee of the whole curve, which may be a point needing more
host memory than the cluster has (a GPU count no allocation could give the speed it was chosen for).

The workload of every test, a reference-format graph of two operators joined by a free edge: ``a`` takes
1 ms on an A100 and 100 ms on a CPU core and holds 1 MB; ``b`` takes 1 ms on either and holds 10 GB (so
on a core it puts 10 GB in host memory). By hand, on ``a100:2,cpu:2``: one A100 runs both in 2 ms a
sample; one A100 and one core (``a`` on the A100, ``b`` on the core) 1 ms, holding 10 GB of host memory;
two A100s (one operator each) 1 ms, holding none. The whole curve's knee (fewest accelerators within 10%
of its best, 1 ms) is therefore one A100 and a core, which needs 10 GB; the cluster has 5 GB, so the knee
within it is two A100s."""

import dataclasses
import json

import pytest

from graphs.errors import InfeasibleError
from placement.cli import main
from placement.cluster.command import synergy_jobs
from placement.cluster.formats import read_jobs
from placement.cluster.inputs import job_rates
from placement.cluster.synergy import allocate_rounds_once, gpu_demand

TWO = {"maxSizePerFPGA": 16e9, "maxFPGAs": 2, "maxCPUs": 2, "unit": "ms", "accelerator": "a100",
       "nodes": [{"id": 1, "name": "a", "cpuLatency": 100.0, "fpgaLatency": 1.0, "supportedOnFpga": 1,
                  "isBackwardNode": 0, "size": 1e6},
                 {"id": 2, "name": "b", "cpuLatency": 1.0, "fpgaLatency": 1.0, "supportedOnFpga": 1,
                  "isBackwardNode": 0, "size": 10e9}],
       "edges": [{"sourceId": 1, "destId": 2, "cost": 0.0}]}


def _jobs(tmp_path, **job):
    (tmp_path / "two.json").write_text(json.dumps(TWO))
    p = tmp_path / "jobs.json"
    p.write_text(json.dumps({"cluster": {"devices": "a100:2,cpu:2", "host_memory_gb": 5},
                             "jobs": [{"name": "A", "model": "two.json", "samples": 1000, **job}]}))
    return str(p)


def test_the_demand_is_the_knee_within_the_clusters_host_memory(tmp_path):
    jl = read_jobs(_jobs(tmp_path))
    curve = job_rates(jl.jobs[0], jl.cluster)
    points = {p.counts: (p.time_per_sample, p.host_memory) for p in curve.points}
    assert points[(1, 1)] == pytest.approx((1.0, 10e9))  # the whole curve's knee, 10 GB of 5
    assert points[(2, 0)] == pytest.approx((1.0, 0.0))
    assert gpu_demand(curve, None, 0) == 1  # host memory unbounded: the library's default
    assert gpu_demand(curve, None, 0, 5e9) == 2
    assert gpu_demand(curve, (1, 0), 0, 5e9) == 1  # a request is the demand, as before
    assert [j.gpus for j in synergy_jobs(jl, jl.cluster)] == [2]  # the command's: the cluster's memory


@pytest.mark.parametrize("policy", ["proportional", "tune"])
def test_a_lone_job_gets_the_gpus_of_its_reachable_knee(tmp_path, capsys, policy):
    """It held one A100 and ran at 2 ms a sample (1000 samples: 2000 ms, rho 2) with the other A100 idle;
    fifo, on the same default request, runs it on both at 1 ms (1000 ms)."""
    path = _jobs(tmp_path)
    for p in ("fifo", policy):
        assert main(["cluster", path, "--policy", p, "--no-cache", "--json"]) == 0
        job = json.loads(capsys.readouterr().out)["jobs"][0]
        assert job["allocation"]["a100"] == 2 and job["used"] == {"a100": 2, "cpu": 0}
        assert (job["time_per_sample"], job["finish_time"], job["rho"]) == pytest.approx((1.0, 1000.0, 1.0))


def test_a_demand_whose_share_cannot_hold_the_job_is_no_longer_chosen(tmp_path):
    """With 3 GB of base host memory, one A100's proportional share (half of 5 GB) cannot run the job, two
    A100s' (all 5 GB) can: the old demand (one A100) was refused, the new one runs it in 1000 ms."""
    jl = read_jobs(_jobs(tmp_path, host_memory_gb=3))
    jobs = synergy_jobs(jl, jl.cluster)
    assert jobs[0].gpus == 2
    r = allocate_rounds_once(jobs, jl.cluster, "proportional")
    assert r.jobs[0].finish == pytest.approx(1000.0)
    with pytest.raises(InfeasibleError, match="cannot run on its GPU-proportional share"):
        allocate_rounds_once([dataclasses.replace(jobs[0], gpus=1)], jl.cluster, "proportional")
