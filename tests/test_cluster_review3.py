"""Regressions from the third cluster review: an LLM model config as a job (read as the reference graph
format before), Synergy-OPT's rows labelled as a bound (table and JSON), and a fifo request the library
used to clip refused as the command line refuses it."""

import json

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.formats import read_jobs
from placement.cluster.policies import Capacity, JobState, allocate
from placement.cluster.simulate import BOUND_NOTE, SimJob, allocate_once, simulate
from tests.test_cluster_policies import linear
from tests.test_cluster_review2 import TWO_JOBS, _write

CAP = Capacity(("acc", "cpu"), (4, 0), (False, True))

# a small decoder (4 blocks of width 1024), as tests/test_llm_decode.py writes them
CONFIG = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
          "num_key_value_heads": 8, "intermediate_size": 2816, "vocab_size": 32000, "torch_dtype": "float16"}


# --------------------------------------------------------------------------- an LLM model config as a job
def _llm_jobs(tmp_path, **job):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    doc = {"cluster": {"devices": "a100:2"},
           "jobs": [{"name": "chat", "model": "config.json", "samples": 1000, **job}]}
    return _write(tmp_path, doc)


def test_an_llm_config_job_gets_the_decode_problems_curve(tmp_path, capsys):
    # before: "error: .../config.json: missing top-level field 'maxSizePerFPGA'" (the reference format)
    path = _llm_jobs(tmp_path, batch_size=2, context=512)
    assert main(["cluster", path, "--policy", "fifo", "--no-cache", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    job = doc["jobs"][0]
    assert doc["unit"] == "ms" and job["curve"]["method"] == "stage-dp-per-count, best micro-batch count"
    # the same time per token as placement place config.json on the devices the job holds
    devices = ",".join(f"{k}:{n}" for k, n in job["allocation"].items() if n)
    assert main(["place", str(tmp_path / "config.json"), "--devices", devices, "--batch-size", "2",
                 "--context", "512", "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert job["time_per_sample"] == pytest.approx(placed["objective"] * 1e3, rel=1e-9)


def test_an_llm_job_is_rated_at_its_best_micro_batch_count(tmp_path, capsys):
    """A job of 8 sequences on a100:4,cpu:8 was rated at the default's 8 micro-batches of one sequence
    each on every allocation, 6.4x slower per token than place on the A100 it was given. Its time now
    equals the best of place --microbatches N over N = 8, 4, 2, 1 on the devices it holds (a second
    method: each count solved on its own)."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    doc = {"cluster": {"devices": "a100:4,cpu:8"},
           "jobs": [{"name": "chat", "model": "config.json", "samples": 1000, "batch_size": 8,
                     "context": 1024, "request": "a100:1"}]}
    path = _write(tmp_path, doc)
    assert main(["cluster", path, "--policy", "fifo", "--no-cache", "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["jobs"][0]
    assert job["allocation"] == {"a100": 1, "cpu": 0}
    each = []
    for n in (8, 4, 2, 1):
        assert main(["place", str(tmp_path / "config.json"), "--devices", "a100:1", "--batch-size", "8",
                     "--context", "1024", "--microbatches", str(n), "--json"]) == 0
        each.append(json.loads(capsys.readouterr().out)["objective"] * 1e3)
    assert job["time_per_sample"] == pytest.approx(min(each), rel=1e-9)
    assert max(each) > 2 * min(each)  # the count matters here


def test_an_llm_jobs_curve_is_the_fastest_micro_batch_count_at_every_allocation(tmp_path):
    """The curve solves each count only on the allocations whose own default count is at least it (more
    micro-batches than that never help); at every allocation it equals the least over every count of
    that count's curve solved everywhere (a second method, no allocation skipped)."""
    from graphs.llm import decode_problem, microbatch_counts, read_config
    from placement.cluster.curves import job_devices, llm_curve, problem_curve

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    job = {"name": "chat", "model": "config.json", "samples": 1000, "batch_size": 8, "context": 512}
    doc = {"cluster": {"devices": "a100:2,t4:3,cpu:2"}, "jobs": [job]}
    jl = read_jobs(_write(tmp_path, doc))
    job, cluster = jl.jobs[0], jl.cluster
    devices = job_devices(job, cluster)
    curve = llm_curve(job, cluster)
    cfg = read_config(job.model)
    each = [problem_curve(decode_problem(cfg, devices, batch=8, context=512, microbatches=n),
                          kinds=cluster.kinds, host=[s.host for s in devices.specs], scale=1e3).values
            for n in microbatch_counts(8, devices)]
    assert len(each) == 4 and curve.values.keys() == each[0].keys()
    for c, v in curve.values.items():
        assert v == pytest.approx(min(e[c] for e in each), rel=1e-12), c


def test_an_llm_config_job_reads_batch_and_context():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        jl = read_jobs(_llm_jobs(Path(d), batch_size=4, context=256, max_replicas=2))
    job = jl.jobs[0]
    assert job.llm and (job.batch_size, job.context, job.max_replicas) == (4, 256, 2)


@pytest.mark.parametrize("field, value, words", [
    ("training", True, "training only applies to ONNX models; an LLM model config"),
    ("optimizer", "adam", "optimizer only applies to ONNX models; an LLM model config"),
    ("context", 0, "context must be a positive integer"),
])
def test_an_llm_config_job_refuses_what_does_not_apply_by_name(tmp_path, capsys, field, value, words):
    path = _llm_jobs(tmp_path, **{field: value})
    assert main(["cluster", path, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "jobs[0] (chat)" in err and words in err


def test_context_is_refused_on_other_models(tmp_path, capsys):
    doc = {**TWO_JOBS, "jobs": [{**TWO_JOBS["jobs"][0], "model": "m.onnx", "context": 128}]}
    doc["jobs"][0].pop("throughput")
    assert main(["cluster", _write(tmp_path, doc), "--no-cache"]) == 2
    assert "jobs[0] (a): context applies to LLM model configs" in capsys.readouterr().err


# --------------------------------------------------------------------------- Synergy-OPT: a bound
def test_opt_is_labelled_a_bound_in_its_table_and_the_comparison(tmp_path, capsys):
    assert main(["cluster", _write(tmp_path, TWO_JOBS), "--policy", "all", "--no-cache"]) == 0
    out = capsys.readouterr().out
    opt = out[out.index("policy fifo+opt"):]
    head = opt.splitlines()[:3]
    assert head[1] == f"note: {BOUND_NOTE}"
    assert "bound time/sample" in head[2] and "bound JCT" in head[2] and "bound rho" in head[2]
    assert "\nbound: max rho" in opt
    table = out[out.index("\npolicy  "):]
    assert "fifo+opt (bound)" in table and "fifo+tune (bound)" not in table
    assert f"(bound): {BOUND_NOTE}" in table
    tune = out[out.index("policy fifo+tune"):out.index("policy fifo+opt")]
    assert "bound" not in tune


@pytest.mark.parametrize("mode", [[], ["simulate"]])
def test_opt_is_a_bound_in_the_json(tmp_path, capsys, mode):
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", *mode, path, "--policy", "all", "--no-cache", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    bound = {r["policy"]: r["bound"] for r in results}
    assert bound.pop("fifo+opt") is True and not any(bound.values())
    assert [r["bound_note"] for r in results if "bound_note" in r] == [BOUND_NOTE]


# --------------------------------------------------------------------------- fifo requests: never clipped
def test_allocate_fifo_refuses_a_request_above_the_curve_instead_of_clipping_it():
    # before: allocated acc:2, the request (3, 0) silently clipped to the curve's limits
    with pytest.raises(InputError, match=r"job 'A': its request .* asks for more than it can use"):
        allocate("fifo", [JobState("A", linear(2), 100, 100, request=(3, 0))], CAP)


def test_allocate_fifo_refuses_a_request_above_the_capacity_instead_of_waiting():
    # before: the job waited for good, said nowhere
    small = Capacity(("acc", "cpu"), (2, 0), (False, True))
    with pytest.raises(InputError, match=r"asks for 3 acc, the cluster has 2"):
        allocate("fifo", [JobState("A", linear(4), 100, 100, request=(3, 0))], small)


@pytest.mark.parametrize("request_", [(1,), (-1, 0), (1.5, 0)])
def test_allocate_fifo_refuses_a_malformed_request(request_):
    with pytest.raises(InputError, match="one non-negative whole count per kind"):
        allocate("fifo", [JobState("A", linear(2), 100, 100, request=request_)], CAP)


@pytest.mark.parametrize("run", [simulate, allocate_once])
def test_simulate_and_allocate_once_refuse_it_with_the_same_words(run):
    small = Capacity(("acc", "cpu"), (2, 0), (False, True))
    with pytest.raises(InputError, match="asks for 3 acc, the cluster has 2"):
        run([SimJob("A", linear(4), 100, 0.0, (3, 0))], small, "fifo")


def test_a_request_within_everything_still_runs_as_asked():
    d = allocate("fifo", [JobState("A", linear(4), 100, 100, request=(3, 0))], CAP)
    assert d.allocations[0].devices == (3, 0) and d.allocations[0].running


def test_a_job_list_mixing_time_units_is_refused_naming_each_jobs_unit(workloads, tmp_path, capsys):
    """A reference-format workload (times in its own unit) beside a throughput table (samples/s: ms)
    was scheduled as if one unit, its rho and finish times mixing the two; a Piper file's curve is in
    seconds, said so."""
    import os

    from placement.cli import main

    ref = os.path.join(workloads, "throughput-inputs", "LayerGraphs", "bert24_training.json")
    doc = {"cluster": {"devices": "v100:4,cpu:8"},
           "jobs": [{"name": "bert", "model": ref, "samples": 1000, "accelerator": "v100"},
                    {"name": "m", "samples": 1000,
                     "throughput": {"accelerators": 1, "points": [[1, 0, 100], [4, 0, 200]]}}]}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(doc))
    assert main(["cluster", str(path), "--policy", "ftf", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {path}: the jobs measure time in different units (a reference workload's own "
                   f"unit: bert; ms: m), so their times cannot share one schedule: give one list jobs of "
                   f"one unit")
