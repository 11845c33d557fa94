"""The benchmark suite's options and tables, from a user review: a negative --seed, --limit naming a solver
that is not run, solvers without a form for the objective, several seeds in one results file, and units."""

import json

from placement.bench import report
from placement.bench.catalog import example_specs
from placement.bench.suite import Job, execute, main
from solvers.registry import bench_solvers

# the synthetic example only, one objective, one quick solver: a run takes a fraction of a second
_ONE = ["--config", "tiny", "--only", "example", "--objective", "max-load", "--solvers", "single", "--quiet",
        "--time-limit", "10", "--workers", "1"]


def _lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def test_a_negative_seed_is_refused_before_any_run(tmp_path, capsys):
    # it ran, and local-search crashed inside with "expected non-negative integer" (an error row, rc 1)
    assert main(_ONE + ["--seed", "-5", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --seed must be a non-negative integer, got -5"]
    assert not (tmp_path / "o").exists()


def test_limit_naming_an_unknown_solver_is_refused(tmp_path, capsys):
    # --solvers nosuch was refused, --limit nosuch=3 silently accepted
    assert main(_ONE + ["--limit", "nosuch=3", "--out", str(tmp_path / "o")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --limit 'nosuch=3': unknown solver 'nosuch'") and "single" in line
    assert not (tmp_path / "o").exists()


def test_limit_naming_a_solver_not_in_this_run_is_a_note(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(_ONE + ["--limit", "dp=3", "--limit", "single=7", "--out", str(out)]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note:")]
    assert len(notes) == 1 and "--limit dp" in notes[0] and "single" in notes[0], notes
    (rec,) = _lines(out / "results.jsonl")
    assert rec["solver"] == "single" and rec["time_limit"] == 7.0


def test_solvers_without_a_form_for_the_objective_say_so(tmp_path, capsys):
    # said "no workload matches ... or try --config tiny" although --config tiny was given
    assert main(["--config", "tiny", "--objective", "latency", "--solvers", "dp", "--time-limit", "3",
                 "--out", str(tmp_path / "o")]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("note:")]
    assert line.startswith("error: --solvers dp has no latency form; solvers for latency: ")
    assert line.endswith(", ".join(bench_solvers("latency"))), line  # the registry's list
    assert "no workload matches" not in line and "--config tiny" not in line
    assert not (tmp_path / "o").exists()


def test_no_workload_matching_does_not_suggest_the_config_given(tmp_path, capsys):
    assert main(["--config", "tiny", "--only", "no-such-workload", "--out", str(tmp_path / "o")]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("note:")]
    assert line.startswith("error: no workload matches") and "try --config tiny" not in line


def _rec(seed, status, value, solver="local-search", unit=None):
    r = {"key": f"max-load:W|{solver}|t3|s{seed}", "workload": "W", "objective": "max-load", "solver": solver,
         "status": status, "seed": seed, "value": value, "valid": value is not None, "source": "example",
         "known": {}, "nodes": 24, "wall_s": 0.01}
    if unit:
        r["time_unit"] = unit
    return r


def _table(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith(header_start))
    rows = []
    for x in lines[i:]:
        if not x.startswith("|"):
            break
        rows.append([c.strip() for c in x.strip("|").split("|")])
    return [rows[0]] + rows[2:]


def test_several_seeds_keep_apart_in_the_tables():
    # a seed-0 success was shown as "— (error)" because a later seed -5 run of the same solver failed, and
    # the details showed two identical-looking rows per solver
    recs = [_rec(0, "feasible", 9.0), _rec(0, "optimal", 8.0, "dp"), _rec(3, "feasible", 9.5),
            _rec(3, "optimal", 8.0, "dp"), _rec(5, "error", None)]
    md = report.markdown_tables(recs, "max-load")
    summary = _table(md, "| workload | nodes |")
    (w,) = [r for r in summary[1:] if r[0] == "W"]
    ls = w[summary[0].index("local-search")]
    assert ls.startswith("9 (1.125") and "3 seeds" in ls, ls
    assert "error" not in ls
    details = _table(md, "| workload | solver |")
    head = details[0]
    assert "seed" in head
    got = [(r[head.index("solver")], r[head.index("seed")], r[head.index("status")]) for r in details[1:]]
    assert got == [("dp", "0", "optimal"), ("dp", "3", "optimal"), ("local-search", "0", "feasible"),
                   ("local-search", "3", "feasible"), ("local-search", "5", "error")]
    # no seed gives a placement: the cell says what went wrong, over how many seeds
    md = report.markdown_tables([_rec(0, "error", None), _rec(1, "killed", None)], "max-load")
    assert "— (error/killed; 2 seeds)" in md
    # the headline picks the best valid run too
    recs = [dict(r, source="reference") for r in recs]
    (row,) = report.headline_rows(recs)
    assert row["baselines"]["local-search"][0] == 9.0


def test_one_seed_has_no_seed_column():
    md = report.markdown_tables([_rec(0, "feasible", 9.0), _rec(0, "optimal", 8.0, "dp")], "max-load")
    assert "seed" not in _table(md, "| workload | solver |")[0]
    assert "seeds" not in md.split("| workload | nodes |")[1]


def test_tables_give_the_time_unit():
    rec = execute(Job(example_specs(latency=False)[0], "single", 10))
    assert rec["time_unit"] == "t"  # a reference-format workload's own (unnamed) unit
    md = report.markdown_tables([_rec(0, "feasible", 9.0, unit="ms")], "max-load")
    for head in ("| workload | nodes |", "| workload | solver |"):
        table = _table(md, head)
        assert table[1][table[0].index("unit")] == "ms"
    assert "unit" in md.split("| workload | nodes |")[0]  # the sentence above says what the units are
    md = report.markdown_tables([_rec(0, "feasible", 9.0)], "max-load")  # an older record: not known
    table = _table(md, "| workload | nodes |")
    assert table[1][table[0].index("unit")] == "—"
    assert "time_unit" in report.CSV_FIELDS
