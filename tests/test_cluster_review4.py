"""Regressions from the fourth cluster review: fifo's request (and its default, the knee of the curve)
within the cluster's host memory (a job whose full-cache point needs more memory than the cluster has was
refused); the one-shot command's rho says its N (the number of jobs); the auction's lone bidder on two
identical jobs (as specified, documented); a throughput table above the cluster and max_replicas on a
reference-format workload named by file and field; a cluster without accelerators headlines its CPU
utilisation.

The workload of every test: a reference-format chain of 4 operators, 1 ms each on an A100, 100 ms each on
a CPU core, 1 MB of weights each, no transfer cost."""

import json

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.formats import read_jobs
from placement.cluster.inputs import job_rates
from placement.cluster.policies import default_request

CHAIN = {"maxSizePerFPGA": 16e9, "maxFPGAs": 4, "maxCPUs": 4, "unit": "ms", "accelerator": "a100",
         "nodes": [{"id": i + 1, "name": f"n{i}", "cpuLatency": 100.0, "fpgaLatency": 1.0,
                    "supportedOnFpga": 1, "isBackwardNode": 0, "size": 1e6} for i in range(4)],
         "edges": [{"sourceId": i + 1, "destId": i + 2, "cost": 0.0} for i in range(3)]}
INPUT = {"cpu_ms_per_sample": 2.0, "sample_bytes": 2e6, "dataset_gb": 1}


def _jobs(tmp_path, cluster, jobs, name="jobs.json"):
    (tmp_path / "chain4.json").write_text(json.dumps(CHAIN))
    p = tmp_path / name
    p.write_text(json.dumps({"cluster": cluster, "jobs": jobs}))
    return str(p)


def _run(capsys, *argv):
    assert main(["cluster", *argv, "--no-cache", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _run_text(capsys, *argv):
    assert main(["cluster", *argv, "--no-cache"]) == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------------- fifo within host memory
def _fed(tmp_path, **j1):
    cluster = {"devices": "a100:4,cpu:4", "host_memory_gb": 0.5, "storage_gbps": 0.5}
    return _jobs(tmp_path, cluster, [{"name": "J1", "model": "chain4.json", "samples": 1000, "input": INPUT,
                                      **j1},
                                     {"name": "J2", "model": "chain4.json", "samples": 1000}])


def test_the_knee_is_taken_within_the_clusters_host_memory(tmp_path):
    jl = read_jobs(_fed(tmp_path))
    curve = job_rates(jl.jobs[0], jl.cluster)
    # unlimited memory: the whole dataset cached (1 GB less the a100:4,cpu:2 point's needs: 0.75 GB),
    # 1 ms a sample on a100:4 with 2 cores feeding it; only that point is within 10% of it
    assert default_request(curve) == (4, 2)
    # within 0.5 GB (half the dataset cached): storage gives 0.5e6 B/ms / (0.5 * 2e6 B) = 0.5 samples/ms,
    # 2 ms a sample; a100:2 (2 ms a sample) with one core (1 / 2 ms) matches it: the smallest within 10%
    assert default_request(curve, 0.5e9) == (2, 1)


@pytest.mark.parametrize("request_", [None, "a100:4,cpu:2"])
def test_fifo_runs_a_job_whose_fastest_point_needs_more_memory_than_the_cluster(tmp_path, capsys, request_):
    # before: "job 'J1': its default request (the knee of its curve) {'a100': 4, 'cpu': 2} cannot run it"
    path = _fed(tmp_path, **({"request": request_} if request_ else {}))
    doc = _run(capsys, "simulate", path, "--policy", "fifo")
    j1, j2 = doc["jobs"]
    # on a100:4,cpu:2 with 0.5 GB: min(1 / 1 ms, 2 cores / 2 ms, 0.5e6 / (0.5 * 2e6)) = 0.5 samples/ms
    assert j1["time_per_sample"] == pytest.approx(2.0)
    assert j1["host_memory_gb"] == pytest.approx(0.5)
    assert j1["allocation"] == ({"a100": 4, "cpu": 2} if request_ else {"a100": 2, "cpu": 1})
    assert j1["used"] == {"a100": 2, "cpu": 1}
    assert j1["finish_time"] == pytest.approx(2000.0)  # 1000 samples at 2 ms
    # J2 (its knee: a100:4, 1 ms a sample) starts when J1 leaves: 2000 + 1000 x 1 ms
    assert j2["allocation"] == {"a100": 4, "cpu": 0}
    assert j2["finish_time"] == pytest.approx(3000.0)
    once = _run(capsys, path, "--policy", "fifo")
    assert once["jobs"][0]["time_per_sample"] == pytest.approx(2.0)
    assert main(["cluster", "simulate", path, "--policy", "all", "--no-cache"]) == 0
    capsys.readouterr()


# --------------------------------------------------------------------------- the one-shot's N
def _two(tmp_path, devices="a100:4,cpu:4"):
    return _jobs(tmp_path, {"devices": devices}, [{"name": "A", "model": "chain4.json", "samples": 1000},
                                                  {"name": "B", "model": "chain4.json", "samples": 3000}])


def test_the_one_shot_says_its_rho_takes_n_as_the_number_of_jobs(tmp_path, capsys):
    path = _two(tmp_path)
    doc = _run(capsys, path, "--policy", "ftf")
    assert "number of jobs" in doc["contention_note"]
    assert [j["contention"] for j in doc["jobs"]] == [2.0, 2.0]  # B runs alone after 2000 ms: still 2
    text = _run_text(capsys, path, "--policy", "ftf")
    assert "rho's N = 2, the number of jobs" in text.splitlines()[0]
    # simulate: the average over each job's life, no note. --fairness exact: a100:2 each; A finishes at
    # 2000, B has 2000 samples left and runs them on a100:4 at 1 ms: B's N = (2 x 2000 + 1 x 2000) / 4000
    sim = _run(capsys, "simulate", path, "--policy", "ftf", "--fairness", "exact")
    assert "contention_note" not in sim
    assert [j["finish_time"] for j in sim["jobs"]] == pytest.approx([2000.0, 4000.0])
    assert sim["jobs"][1]["contention"] == pytest.approx(1.5)
    assert main(["cluster", "--help"]) == 0
    assert "number of jobs in the" in " ".join(capsys.readouterr().out.split())


def test_the_auctions_lone_bidder_takes_its_best_allocation(tmp_path, capsys):
    """Two identical jobs, one bidder at the knob's 0.1: both rho_wait 1 (nothing elapsed, no lease), the
    tie goes to A (arrival, then position), which takes a100:4 (1 ms a sample); B runs on cpu:4 (100 ms a
    sample: a stage of one operator per core) until A finishes. As docs/clusters.md describes it."""
    sim = _run(capsys, "simulate", _two(tmp_path), "--policy", "ftf")
    a, b = sim["jobs"]
    assert a["allocation"] == {"a100": 4, "cpu": 0} and b["allocation"] == {"a100": 0, "cpu": 4}
    assert a["finish_time"] == pytest.approx(1000.0)
    # B: 10 samples by 1000 ms on the cores, the other 2990 on a100:4 at 1 ms
    assert b["finish_time"] == pytest.approx(3990.0)
    # A's fair share (N = 2: a100:2, cpu:2) time-slices a100:4 half the time and cpu:4 the other half:
    # 0.5 / 1 ms + 0.5 / 100 ms = 0.505 samples/ms; rho = 1000 / (1000 / 0.505)
    assert a["rho"] == pytest.approx(0.505)


# --------------------------------------------------------------------------- messages
def test_a_throughput_table_above_the_cluster_names_file_and_field(tmp_path, capsys):
    table = {"accelerators": 5, "points": [[1, 0, 10], [2, 0, 20], [1, 1, 10], [2, 1, 20]]}
    path = _jobs(tmp_path, {"devices": "a100:4,cpu:4"},
                 [{"name": "A", "model": "chain4.json", "samples": 1000},
                  {"name": "B", "samples": 3000, "throughput": table}])
    with pytest.raises(InputError, match=r"jobs\[1\] \(B\): throughput.accelerators: the table is measured "
                                         r"at 5 a100, the cluster has 4"):
        read_jobs(path)
    assert main(["cluster", path, "--no-cache"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: jobs[1] (B): throughput.accelerators:")
    table["accelerators"] = 2
    path = _jobs(tmp_path, {"devices": "a100:4,cpu:4"},
                 [{"name": "B", "samples": 3000, "throughput": table, "limit": "a100:1"}])
    with pytest.raises(InputError, match=r"jobs\[0\] \(B\): throughput.accelerators: .* above its limit "
                                         r"\(1 a100"):
        read_jobs(path)


def test_max_replicas_on_a_reference_workload_names_file_and_field(tmp_path, capsys):
    path = _jobs(tmp_path, {"devices": "a100:4,cpu:4"},
                 [{"name": "A", "model": "chain4.json", "samples": 1000, "max_replicas": 2}])
    assert main(["cluster", path, "--no-cache"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: jobs[0] (A): max_replicas: 2 needs")
    path = _jobs(tmp_path, {"devices": "a100:4,cpu:4"},
                 [{"name": "A", "model": "chain4.json", "samples": 1000, "max_replicas": 1}])
    assert read_jobs(path).jobs[0].max_replicas == 1


def test_a_cluster_without_accelerators_headlines_its_cpu_utilisation(tmp_path, capsys):
    path = _two(tmp_path, "a100:0,cpu:4")
    doc = _run(capsys, path, "--policy", "ftf")
    # cpu:2 each at 200 ms a sample (two operators a core): A ends at 2e5, B at 6e5; cores used
    # (4 x 2e5 + 2 x 4e5) / (4 x 6e5) = 2/3
    assert [j["finish_time"] for j in doc["jobs"]] == pytest.approx([2e5, 6e5])
    assert doc["summary"]["utilisation"] == pytest.approx(2 / 3)
    assert "utilisation 67% (cpu 67%)" in _run_text(capsys, path, "--policy", "ftf")
