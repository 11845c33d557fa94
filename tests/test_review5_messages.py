"""A new user's review (5): refusals that told the user to do something that does not work, a solver
named by ``bench --solvers`` dropped without a word, and a refusal worded for an empty set."""

from __future__ import annotations

import json

import pytest

from placement.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A reference-format operator graph (maxSizePerFPGA, maxFPGAs, maxCPUs, nodes, edges)."""
    path = str(tmp_path_factory.mktemp("ref") / "tiny.json")
    assert main(["example", path]) == 0
    return path


def _error(capsys) -> str:
    lines = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# ------------------------------------------------------------------ 1. the stage model's device options
@pytest.mark.parametrize("flag, field", [("--max-devices", "maxFPGAs"), ("--device-memory", "maxSizePerFPGA"),
                                         ("--bandwidth", "edge's cost")])
def test_reference_graph_device_options_say_the_file_sets_them(tiny, capsys, flag, field):
    # said "set a device kind's memory in a device file (--device-file)", which this file refuses, and
    # spoke of memory for --max-devices and --bandwidth too
    assert main(["place", tiny, flag, "3"]) == 2
    line = _error(capsys)
    assert line.startswith(f"error: {flag} does not apply to a reference-format operator graph: "), line
    assert field in line and "from the file itself" in line and "no option changes that" in line
    assert "--device-file" not in line and "--devices" not in line
    # the advice it no longer gives is indeed refused on such a file
    assert main(["place", tiny, "--device-file", "x.toml"]) == 2
    assert "only applies to ONNX models" in _error(capsys)


@pytest.mark.parametrize("flag, says", [
    ("--max-devices", "applies to stage-model plans only (of Piper-format workloads), not to this "
                      "one-device-per-stage placement (--max-replicas 1): set the device counts with "
                      "--devices"),
    ("--device-memory", "applies to stage-model plans only (of Piper-format workloads and ONNX models), "
                        "not to this one-device-per-stage placement (--max-replicas 1): set a device kind's "
                        "memory in a device file (--device-file FILE, memory_gib)"),
    ("--bandwidth", "applies to stage-model plans only (of Piper-format workloads), not to this "
                    "one-device-per-stage placement (--max-replicas 1): set a device kind's link bandwidth "
                    "in a device file (--device-file FILE, link_gbs)"),
])
def test_onnx_one_device_per_stage_device_options_point_to_what_works(example_onnx, capsys, flag, says):
    assert main(["place", example_onnx, "--max-replicas", "1", flag, "3"]) == 2
    line = _error(capsys)
    assert line.startswith(f"error: {flag} ") and says in line, line
    # --max-devices and --bandwidth were said to apply to "ONNX models without --max-replicas 1"
    assert "ONNX models without" not in line


@pytest.mark.parametrize("flag", ["--max-devices", "--bandwidth"])
def test_onnx_stage_model_agrees_these_are_piper_options(example_onnx, capsys, flag):
    # without --max-replicas 1 (the stage model) the same flags are refused as Piper-format options, as
    # --max-devices' help says ("Piper files") and the one-device-per-stage refusal now says
    assert main(["place", example_onnx, flag, "3"]) == 2
    assert _error(capsys).startswith(f"error: {flag} is for Piper-format workloads")


def test_the_advice_for_one_device_per_stage_works(example_onnx, tmp_path, capsys):
    # what the refusals point to: --devices counts and a device file's memory_gib and link_gbs
    dev = tmp_path / "dev.toml"
    dev.write_text('[devices.g]\nbase = "a100"\nmemory_gib = 30\nlink_gbs = 8\n')
    out = tmp_path / "r.json"
    assert main(["place", example_onnx, "--max-replicas", "1", "--devices", "g:3,cpu:1",
                 "--device-file", str(dev), "--time-limit", "20", "--out", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["schema"] == "placement-result"


# ------------------------------------------------------------------ 2. bench --solvers
def test_bench_refuses_a_named_solver_it_would_drop(tmp_path, capsys):
    from placement.bench.suite import main as bench
    from solvers.registry import bench_solvers

    # dp was silently dropped and only ip ran
    out = tmp_path / "o"
    assert bench(["--config", "tiny", "--out", str(out), "--solvers", "dp,ip", "--objective", "latency",
                  "--quiet", "--time-limit", "5"]) == 2
    line = _error(capsys)
    assert line.startswith("error: --solvers dp,ip: dp has no latency form; solvers for latency: "), line
    assert ", ".join(bench_solvers("latency")) in line and "nothing was run" in line
    assert not out.exists()
    # two dropped: both named, with one verb
    assert bench(["--config", "tiny", "--out", str(out), "--solvers", "dp,local-search,ip", "--objective",
                  "latency", "--quiet"]) == 2
    assert "dp and local-search have no latency form" in _error(capsys)
    assert not out.exists()


def test_bench_writes_no_table_for_an_objective_without_runs(tmp_path, capsys):
    # a latency-only sweep wrote throughput.md reading "_no runs_" (and an empty throughput.csv)
    from placement.bench.suite import main as bench

    out = tmp_path / "o"
    assert bench(["--config", "tiny", "--out", str(out), "--solvers", "single", "--objective", "latency",
                  "--only", "example", "--quiet", "--time-limit", "5"]) == 0
    err = capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["latency.csv", "latency.md", "results.jsonl"]
    assert "throughput" not in err


def test_write_tables_removes_a_left_empty_pair(tmp_path):
    from placement.bench import report

    rec = {"key": "latency:W|single|t5|s0", "workload": "W", "objective": "latency", "source": "example",
           "solver": "single", "status": "feasible", "value": 3.0, "valid": True, "known": {}, "seed": 0,
           "time_limit": 5.0, "nodes": 4, "time_unit": "ms", "wall_s": 0.1}
    (tmp_path / "throughput.md").write_text("# Throughput\n\n_no runs_\n")
    (tmp_path / "throughput.csv").write_text("")
    paths = report.write_tables([rec], str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latency.csv", "latency.md"]
    assert sorted(paths) == sorted(str(tmp_path / n) for n in ("latency.md", "latency.csv"))


# ------------------------------------------------------------------ 3. an option no solver form reads
def test_gap_for_pipedream_reads_well(tiny, capsys):
    # said "(it reads: no such option)"
    assert main(["place", tiny, "--solver", "pipedream", "--gap", "0.1"]) == 2
    line = _error(capsys)
    assert line == ("error: --gap does not apply to the pipedream solver (it reads none of these options: "
                    "--gap, --threads, --seed, --backend, --subgraphs-per-device, a warm start)"), line
    # a solver reading some of them still lists those
    assert main(["place", tiny, "--solver", "dp", "--gap", "0.1"]) == 2
    assert _error(capsys) == "error: --gap does not apply to the dp solver (it reads: --threads)"
