"""The benchmark suite: a tiny configuration end to end, both tables, resuming, and the report."""

import csv
import json
import os

import pytest

from placement.bench import report
from placement.bench.catalog import WorkloadSpec, configuration, example_specs, reference_specs
from placement.bench.suite import Job, ResultStore, build_jobs, execute, main, run_jobs

TINY = ["--config", "tiny", "--only", "example", "--time-limit", "20", "--workers", "2", "--quiet"]


def _lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def test_tiny_configuration_end_to_end_and_resume(tmp_path):
    out = tmp_path / "res"
    assert main(TINY + ["--out", str(out), "--report", str(tmp_path / "RESULTS.md")]) == 0
    recs = _lines(out / "results.jsonl")
    solvers = {r["solver"] for r in recs}
    assert {"dp", "pipedream", "partition", "local-search", "single", "greedy-latency"} <= solvers
    assert all(r["status"] in ("optimal", "feasible") and r["valid"] for r in recs), recs
    for label in ("throughput", "latency"):
        md = (out / f"{label}.md").read_text()
        assert "| example/transformer-L2 |" in md
        with open(out / f"{label}.csv") as f:
            rows = list(csv.DictReader(f))
        assert rows and all(r["value"] and float(r["ratio_to_best"]) >= 1 - 1e-9 for r in rows)
        assert set(report.CSV_FIELDS) <= set(rows[0])
    dp = next(r for r in recs if r["solver"] == "dp")
    assert dp["status"] == "optimal" and dp["gap"] == 0.0 and dp["peak_rss_mb"] > 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## Machine" in text and "## Throughput" in text and "## Latency" in text

    # resuming: nothing runs again; a run missing from the file is the only one redone
    assert main(TINY + ["--out", str(out)]) == 0
    assert len(_lines(out / "results.jsonl")) == len(recs)
    kept = [r for r in recs if r["solver"] != "single"]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert main(TINY + ["--out", str(out)]) == 0
    again = _lines(out / "results.jsonl")
    assert len(again) == len(recs)
    assert {r["solver"] for r in again[len(kept):]} == {"single"}


def test_run_jobs_skips_finished_runs(tmp_path):
    store = ResultStore(str(tmp_path / "r.jsonl"))
    jobs = build_jobs(example_specs(latency=False), time_limit=10, solvers=["single"])
    assert len(jobs) == 1
    first = run_jobs(jobs, store)
    assert len(first) == 1 and first[0]["status"] == "feasible"
    assert run_jobs(jobs, store) == []
    assert len(run_jobs(jobs, store, rerun=True)) == 1


def test_a_record_after_a_line_cut_short_is_kept(tmp_path):
    """A run interrupted while writing leaves a last line without its newline: the next record starts on
    a line of its own, where it was joined to the cut line and both were lost."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a", "value": 1}\n{"key": "b", "val')
    store = ResultStore(str(path))
    store.append({"key": "c", "value": 3})
    store.append({"key": "d", "value": 4})
    assert [r["key"] for r in store.records()] == ["a", "c", "d"]
    empty = ResultStore(str(tmp_path / "new" / "r.jsonl"))
    empty.append({"key": "e"})
    assert (tmp_path / "new" / "r.jsonl").read_text() == '{"key": "e"}\n'


def test_build_jobs_matches_solvers_to_objectives():
    specs = [WorkloadSpec("a", "max-load", "example", params={"layers": 1}),
             WorkloadSpec("a", "latency", "example", params={"layers": 1}),
             WorkloadSpec("b", "max-load", "example", split="/x.json", params={"layers": 1})]
    jobs = build_jobs(specs, time_limit=5, solvers=["dp", "greedy-latency", "expert", "single"])
    got = {(j.workload.key, j.solver) for j in jobs}
    assert got == {("max-load:a", "dp"), ("max-load:a", "single"), ("latency:a", "greedy-latency"),
                   ("latency:a", "single"), ("max-load:b", "dp"), ("max-load:b", "expert"),
                   ("max-load:b", "single")}
    assert len({j.key for j in jobs}) == len(jobs)
    assert Job.from_json(json.loads(json.dumps(jobs[0].to_json()))).key == jobs[0].key


def test_execute_records_errors_instead_of_raising(tmp_path):
    bad = WorkloadSpec("missing", "max-load", "reference", path=str(tmp_path / "nope.json"))
    rec = execute(Job(bad, "dp", 5))
    assert rec["status"] == "error" and "workload" in rec["message"]
    spec = example_specs(latency=False)[0]
    rec = execute(Job(spec, "expert", 5))  # no split: an input error, recorded
    assert rec["status"] == "error" and "split" in rec["message"]


def test_unknown_solver_is_a_usage_error(tmp_path, capsys):
    assert main(["--config", "tiny", "--solvers", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown solver" in capsys.readouterr().err


def test_best_known_uses_published_values_and_headline_speedups():
    recs = [
        {"key": "1", "workload": "W", "objective": "max-load", "solver": "dp", "status": "optimal",
         "value": 10.0, "valid": True, "source": "reference", "known": {"dp": 10.0}},
        {"key": "2", "workload": "W", "objective": "max-load", "solver": "pipedream", "status": "feasible",
         "value": 15.0, "valid": True, "source": "reference", "known": {"dp": 10.0}},
        {"key": "3", "workload": "W", "objective": "max-load", "solver": "local-search", "status": "feasible",
         "value": 9.0, "valid": True, "source": "reference", "known": {"dp": 10.0}},
        {"key": "4", "workload": "V", "objective": "latency", "solver": "single", "status": "feasible",
         "value": 7.0, "valid": True, "source": "reference", "known": {"greedy-latency": 5.0}},
    ]
    best = report.best_known(recs)
    assert best[("max-load", "W")] == 9.0 and best[("latency", "V")] == 5.0
    (row,) = report.headline_rows(recs)
    assert row["optimum"] == 10.0 and row["by"] == "dp"
    assert row["baselines"]["pipedream"][1] == pytest.approx(1.5)
    assert row["baselines"]["local-search"][1] == pytest.approx(0.9)
    assert "1.50×" in report.headline_markdown(recs)
    assert "1.400" in report.markdown_tables(recs, "latency")  # 7 / 5


def test_configurations_list_reference_workloads(workloads):
    specs, notes = configuration("reference", workloads)
    assert not notes
    names = {(s.objective, s.name) for s in specs}
    assert ("max-load", "LayerGraphs/gnmt_training") in names
    assert ("latency", "OperatorGraphs/bert_l-3_inference") in names
    gnmt = next(s for s in reference_specs(workloads) if s.name == "LayerGraphs/gnmt_training")
    assert gnmt.split and gnmt.known["dp"] == pytest.approx(107.0044140625)
    assert os.path.exists(gnmt.path)


@pytest.mark.slow
def test_ray_executor_runs_the_same_jobs(tmp_path):
    pytest.importorskip("ray")
    store = ResultStore(str(tmp_path / "r.jsonl"))
    jobs = build_jobs(example_specs(), time_limit=10, solvers=["dp", "greedy-latency"])
    recs = run_jobs(jobs, store, use_ray=True)
    assert {r["solver"] for r in recs} == {"dp", "greedy-latency"}
    assert all(r["status"] in ("optimal", "feasible") for r in recs), recs
    assert run_jobs(jobs, store, use_ray=True) == []


def test_placement_bench_delegates_to_the_suite(tmp_path, capsys):
    from placement.cli import main as cli_main

    assert cli_main(["bench", "--help"]) == 0
    assert "--time-limit" in capsys.readouterr().out
    assert cli_main(["bench", "--config", "tiny", "--only", "example", "--solvers", "single",
                     "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "throughput.csv").exists() and (tmp_path / "latency.md").exists()


_ONE = ["--config", "tiny", "--only", "example", "--objective", "max-load", "--solvers", "single", "--quiet"]


_RULE = "must be a positive number of seconds (inf: none), got"


@pytest.mark.parametrize("argv, line", [
    (["--time-limit", "0"], f"error: --time-limit {_RULE} 0.0"),
    (["--time-limit", "nan"], f"error: --time-limit {_RULE} nan"),
    (["--limit", "single=-2"], f"error: --limit single {_RULE} -2.0"),
    (["--limit", "single"], "error: --limit 'single': expected SOLVER=SECONDS, e.g. ip=30"),
    (["--limit", "single=soon"], "error: --limit 'single=soon': expected SOLVER=SECONDS, e.g. ip=30"),
])
def test_time_limits_follow_the_one_rule(tmp_path, capsys, argv, line):
    # the suite kept its own copy of placement.inputs.time_limit_seconds, worded apart
    assert main(_ONE + argv + ["--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not (tmp_path / "o").exists()


def test_time_limit_inf_runs_without_a_limit(tmp_path):
    # inf is "no limit" by the one rule: it crashed the sweep (a pipe polled for inf seconds)
    out = tmp_path / "o"
    assert main(_ONE + ["--time-limit", "inf", "--out", str(out), "--report", str(tmp_path / "R.md")]) == 0
    (rec,) = _lines(out / "results.jsonl")
    assert rec["time_limit"] is None and "|tinf|" in rec["key"] and rec["status"] == "feasible"
    assert "per-run time limits: none: single;" in (tmp_path / "R.md").read_text()
    assert main(_ONE + ["--time-limit", "inf", "--out", str(out)]) == 0  # resumes: the same key
    assert len(_lines(out / "results.jsonl")) == 1


def test_without_out_a_sweep_writes_a_new_folder_here(tmp_path, monkeypatch, capsys):
    # the default was the checkout's benchmarks/results: a tiny sweep rewrote the committed tables
    from placement.bench.suite import ROOT

    committed = os.path.join(ROOT, "benchmarks", "results")
    before = {f: os.path.getmtime(os.path.join(committed, f)) for f in os.listdir(committed)} \
        if os.path.isdir(committed) else {}
    monkeypatch.chdir(tmp_path)
    assert main(_ONE) == 0
    assert main(_ONE) == 0
    made = sorted(p for p in os.listdir(tmp_path) if p.startswith("bench-results-"))
    assert len(made) == 2  # a second sweep in the same second gets its own folder too
    for d in made:
        assert len(_lines(tmp_path / d / "results.jsonl")) == 1 and (tmp_path / d / "throughput.md").exists()
    err = capsys.readouterr().err
    assert all(f"results in {os.path.join('.', d)}" in err for d in made)
    after = {f: os.path.getmtime(os.path.join(committed, f)) for f in os.listdir(committed)} \
        if os.path.isdir(committed) else {}
    assert after == before


def test_without_out_nothing_to_run_makes_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "tiny", "--only", "no-such-workload", "--quiet"]) == 2
    assert "no workload matches" in capsys.readouterr().err and os.listdir(tmp_path) == []
