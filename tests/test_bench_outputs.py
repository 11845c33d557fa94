"""What ``placement bench`` writes into a results folder that holds other runs, from a user review: a tiny
sweep with ``--out benchmarks/results`` replaced the committed tables by its own rows (no warning, exit 0),
``--report`` overwrote the report the same way, and the "best known" column was the best of the run's rows
rather than the best known value."""

import csv
import json

import pytest

from placement.bench import report
from placement.bench.suite import main

# the synthetic example only, one objective, one quick solver: a run takes a fraction of a second
_ONE = ["--config", "tiny", "--only", "example", "--objective", "max-load", "--solvers", "single", "--quiet",
        "--time-limit", "10", "--workers", "1"]
_EXAMPLE = "example/transformer-L2"


def _rec(workload, solver, value, *, objective="max-load", status="feasible", known=None, limit=120.0):
    return {"key": f"{objective}:{workload}|{solver}|t{limit:g}|s0", "workload": workload,
            "objective": objective, "source": "reference", "solver": solver, "status": status, "value": value,
            "valid": True, "known": known or {}, "seed": 0, "time_limit": limit, "nodes": 32,
            "time_unit": "t", "wall_s": 0.1}


def _folder(path, records, *, log=None):
    """A results folder as a sweep leaves it: ``log`` (default: ``records``) in results.jsonl and the tables
    made from ``records``."""
    path.mkdir()
    log = records if log is None else log
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    report.write_tables(records, str(path))
    return path


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _files(path):
    return {p.name: p.read_bytes() for p in path.iterdir()}


# BERT-24 inference: the reference's exact DP optimum, and its PipeDream and expert values (6 digits)
_BERT = {"dp": 17.78990625, "pipedream": 17.7899, "expert": 20.084}


def test_a_run_of_one_workload_keeps_the_other_workloads_rows(tmp_path, capsys):
    other = _rec("LayerGraphs/bert24_inference", "dp", 17.78990625, status="optimal", known=_BERT)
    stale = _rec(_EXAMPLE, "single", 99.0, limit=3.0)  # this sweep's slot, from an earlier pass
    out = _folder(tmp_path / "results", [other, stale])
    assert main(_ONE + ["--out", str(out)]) == 0
    err = capsys.readouterr().err
    log = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert log[:2] == [other, stale] and len(log) == 3  # appended, nothing rewritten
    assert (f"appended 1 run to {out / 'results.jsonl'} (1 replacing in the tables an earlier run of the "
            f"same workload, solver and seed: max-load {_EXAMPLE}: single); the tables are rebuilt from all "
            "3 records in it (2 max-load workloads)") in err
    rows = {(r["workload"], r["solver"]): r for r in _csv(out / "throughput.csv")}
    assert set(rows) == {("LayerGraphs/bert24_inference", "dp"), (_EXAMPLE, "single")}
    assert float(rows[(_EXAMPLE, "single")]["value"]) == pytest.approx(log[2]["value"]) != 99.0
    md = (out / "throughput.md").read_text()
    assert "| LayerGraphs/bert24_inference | 32 | t | 17.7899 (reference optimum) | 17.7899 (1.000) |" in md


def test_best_known_is_the_best_known_value_not_the_best_row(tmp_path):
    recs = [
        # no run reaches the reference's optimum: the column still gives it, and the ratios are to it
        _rec("LayerGraphs/bert24_inference", "ip", 18.5, known=_BERT),
        # a non-contiguous run beats the contiguous optimum: the best known value is the run's
        _rec("LayerGraphs/bert24_training", "ip-noncontig", 41.0, known={"dp": 41.7458125}),
        _rec("LayerGraphs/bert24_training", "dp", 41.7458125, status="optimal", known={"dp": 41.7458125}),
        # only a rounded published value, lower than every run
        _rec("LayerGraphs/gnmt_inference", "single", 120.0, objective="latency",
             known={"greedy-latency": 100.219}),
    ]
    out = tmp_path / "t"
    report.write_tables(recs, str(out))
    rows = {(r["workload"], r["solver"]): r for r in _csv(out / "throughput.csv") + _csv(out / "latency.csv")}
    ip = rows[("LayerGraphs/bert24_inference", "ip")]
    # 17.7899, the PipeDream value printed to 6 digits, is not below the exact optimum beyond its rounding
    assert float(ip["best_known"]) == 17.78990625 and ip["best_known_source"] == "reference optimum"
    assert float(ip["ratio_to_best"]) == pytest.approx(18.5 / 17.78990625)
    dp = rows[("LayerGraphs/bert24_training", "dp")]
    assert float(dp["best_known"]) == 41.0 and dp["best_known_source"] == "ip-noncontig"
    assert float(dp["ratio_to_best"]) == pytest.approx(41.7458125 / 41.0)
    single = rows[("LayerGraphs/gnmt_inference", "single")]
    assert float(single["best_known"]) == 100.219
    assert single["best_known_source"] == "reference greedy-latency"
    md = (out / "throughput.md").read_text()
    assert "| best known (from) |" in md and "reference optimum" in md.split("| workload |")[0]
    line = next(x for x in md.splitlines() if x.startswith("| LayerGraphs/bert24_inference | 32 |"))
    assert line.startswith("| LayerGraphs/bert24_inference | 32 | t | 17.7899 (reference optimum) |")
    assert "| 18.5 (1.040) |" in line
    assert "| LayerGraphs/bert24_training | 32 | t | 41 (ip-noncontig) |" in md
    # a tie: the reference's optimum is named before a run that reached it
    best = report.best_known_sources([_rec("W", "dp", 17.78990625, status="optimal", known=_BERT)])
    assert best[("max-load", "W")] == (17.78990625, "reference optimum")


def test_tables_with_rows_the_results_file_lacks_are_refused(tmp_path, capsys):
    gone = _rec("LayerGraphs/bert24_inference", "dp", 17.78990625, status="optimal", known=_BERT)
    kept = _rec("LayerGraphs/gnmt_inference", "dp", 32.9106582, status="optimal")
    out = _folder(tmp_path / "results", [gone, kept], log=[kept])
    before = _files(out)
    assert main(_ONE + ["--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --out {out}: its tables hold 1 row that its results.jsonl does not "
                           "(max-load LayerGraphs/bert24_inference: dp)"), line
    assert "--replace" in line and "Nothing was run" in line
    assert _files(out) == before  # nothing run, nothing written

    assert main(_ONE + ["--out", str(out), "--replace"]) == 0
    assert "note: --replace: --out" in capsys.readouterr().err
    assert {r["workload"] for r in _csv(out / "throughput.csv")} == {"LayerGraphs/gnmt_inference", _EXAMPLE}


def test_report_is_overwritten_only_when_it_is_this_commands_own(tmp_path, capsys):
    out, results_md = tmp_path / "results", tmp_path / "RESULTS.md"
    results_md.write_text("# Benchmark results\n\nedited by hand: a note the results file does not hold\n")
    assert main(_ONE + ["--out", str(out), "--report", str(results_md)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --report {results_md}: it was not written by placement bench"), line
    assert not out.exists() and "edited by hand" in results_md.read_text()

    assert main(_ONE + ["--out", str(out), "--report", str(results_md), "--replace"]) == 0
    text = results_md.read_text()
    assert "edited by hand" not in text and f"| {_EXAMPLE} |" in text
    assert text.splitlines()[-1].startswith("<!-- placement bench report from results/results.jsonl; sha256 ")
    assert report.report_conflict(str(results_md), str(out / "results.jsonl")) is None  # may be rewritten

    why = report.report_conflict(str(results_md), str(tmp_path / "other" / "results.jsonl"))
    assert why.startswith(f"it was written from {out / 'results.jsonl'}, not from this run's results file")
    assert "a new folder" in report.report_conflict(str(results_md), None)  # a sweep without --out
    results_md.write_text(text.replace("## Machine", "## Machine (a note)"))
    assert report.report_conflict(str(results_md), str(out / "results.jsonl")) == \
        "it has been edited since placement bench wrote it"


def test_help_says_what_out_and_report_keep(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "appended to DIR/results.jsonl" in text
    assert "rebuilt from every run in it, of every workload" in text
    assert "--replace" in text and "only if it is this command's report of the same results file" in text
