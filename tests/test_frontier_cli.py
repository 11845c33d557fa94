"""The frontier and provision commands' answers: points printed as they are found, one time limit for the
whole command, the throughput end from the exact DP, outputs and values checked before any solving,
errors that name the flag or the target missed, figures labelled per batch."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time

import pytest

from graphs.errors import InputError
from placement.cli import main
from tests.onnx_models import save, small_cnn

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


@pytest.fixture(scope="module")
def gpt2_model(gpt2_4l_onnx):
    return gpt2_4l_onnx  # tests/conftest.py


@pytest.fixture(scope="module")
def llama_model(llama_4l_onnx):
    return llama_4l_onnx  # tests/conftest.py: the DP over every allocation of a100:2,t4:2 takes ~45 s


def _timed_run(argv: list[str], ceiling: float) -> tuple[int, list[tuple[float, str]], str, float]:
    """Run the command; (exit code, stdout lines with the second each came, stderr, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "placement", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    try:
        p.wait(ceiling)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("hang")
    return p.returncode, lines, p.stderr.read(), time.monotonic() - t0


def test_frontier_prints_points_as_found_and_keeps_to_its_time_limit(gpt2_model, tmp_path):
    """A 4-layer GPT-2 torch.onnx export (symbolic batch; the frontier proves none of its points in
    8 s): the first point comes while the command still works, the command ends near its time
    limit with what it found, labelled, and every written plan re-evaluates to its figures. (12 s
    before: the first point comes about 2 s in, the same three points by 6 s, on 2 busy cores.)"""
    out = tmp_path / "f.json"
    limit = 8.0
    rc, lines, err, wall = _timed_run(["frontier", gpt2_model, "--devices", "a100:2,t4:2", "--time-limit",
                                       str(limit), "--out", str(out), "--max-replicas", "1"],
                                      ceiling=limit + 30)
    assert rc == 0, err[-2000:]
    assert "Traceback" not in err
    found = [(t, s) for t, s in lines if s.startswith("found:")]
    assert found, lines
    assert found[0][0] < lines[-1][0] - 1.0  # printed as found, not with the final table
    assert wall < limit + 10  # ends at the limit (a program may overrun it by its reaction time)
    text = "\n".join(s for _, s in lines)
    assert "NOT complete or not all proven" in text and "time limit" in text
    data = json.loads(out.read_text())
    assert data["points"] and data["proven"] is False and "time limit" in data["stopped"]
    from graphs.evaluate import evaluate
    from graphs.latency import latency
    from placement.results import assignment_from_result
    from placement.serving import batch_workload

    w = batch_workload(gpt2_model, "a100:2,t4:2", 1)
    for p in data["points"]:
        assert p["proven"] is False  # nothing is proven in 8 s on this model
        plan = json.loads(open(p["plan_file"]).read())
        a = assignment_from_result(plan, w.graph, w.cluster, source=p["plan_file"])
        assert evaluate(w.graph, w.cluster, a).max_load == pytest.approx(p["max_load_ms"], rel=1e-9)
        assert latency(w.graph, w.cluster, a).total == pytest.approx(p["latency_ms"], rel=1e-9)
        assert p["samples_per_s"] == pytest.approx(1e3 / p["max_load_ms"], rel=1e-9)
    pts = data["points"]
    for p in pts:  # mutually non-dominated
        assert not any(q is not p and q["samples_per_s"] >= p["samples_per_s"] and
                       q["latency_ms"] <= p["latency_ms"] for q in pts)


def test_frontier_throughput_end_is_the_throughput_optimum(cnn, tmp_path, capsys):
    """Without host cores the top point's max-load is the contiguous optimum; the contiguous MILP
    (``--solver ip``, proven optimal), a second method, gives the same."""
    out = tmp_path / "f.json"
    assert main(["frontier", cnn, "--devices", "t4:1,l4:1", "--out", str(out), "--max-replicas", "1"]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["proven"] and data["stopped"] is None
    ip = tmp_path / "ip.json"
    # the frontier's plans have one device per stage, so the MILP of that model is the second method
    assert main(["place", cnn, "--devices", "t4:1,l4:1", "--solver", "ip", "--gap", "0", "--max-replicas",
                 "1", "--out", str(ip)]) == 0
    res = json.loads(ip.read_text())
    assert res["status"] == "optimal"
    assert data["points"][0]["max_load_ms"] == pytest.approx(res["max_load"], rel=1e-6)
    assert data["points"][0]["proven"]


def test_frontier_output_paths_are_checked_before_solving(cnn, tmp_path, capsys):
    png = tmp_path / "missing" / "dir" / "f.png"
    assert main(["frontier", cnn, "--devices", "t4:1", "--plot", str(png)]) == 0
    cap = capsys.readouterr()
    assert png.exists() or "matplotlib" in cap.err
    regular = tmp_path / "file"
    regular.write_text("x")
    for flag, name in (("--plot", "f.png"), ("--out", "f.json")):
        assert main(["frontier", cnn, "--devices", "t4:1", flag, str(regular / name)]) == 2
        cap = capsys.readouterr()
        err = cap.err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {flag} {regular / name}: cannot write there"), err
        assert cap.out == ""  # nothing was solved (or printed) first
    assert main(["frontier", cnn, "--plot", str(tmp_path / "f.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--plot" in err[0] and ".png" in err[0]


@pytest.mark.parametrize("command", ["place", "frontier", "provision"])
def test_batch_size_zero_names_the_flag(command, cnn, capsys):
    assert main([command, cnn, "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batch-size" in err[0] and "batch_size_arg" not in err[0], err


@pytest.mark.parametrize("flag,value", [("--time-limit", "0"), ("--time-limit", "nan"),
                                        ("--time-limit", "-1"), ("--gap", "-1"), ("--gap", "1.5"),
                                        ("--threads", "0"),
                                        ("--max-points", "0")])
def test_bad_values_name_the_flag(flag, value, cnn, capsys):
    assert main(["frontier", cnn, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag} must be"), err


def test_help_names_every_default(capsys):
    for command, wanted in (("frontier", ["--time-limit", "default 60", "default 50", "default 1e-4",
                                          "default 1)", "up to 1024"]),
                            ("provision", ["--time-limit", "default 60", "default 200", "(required)"])):
        with pytest.raises(SystemExit):
            from placement.cli import build_parser

            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for w in wanted:
            assert w in text, (command, w)
        assert "seconds for the whole command" in text


def test_the_serving_commands_do_not_import_the_command_line_entry():
    """No import circle between the command line's entry (placement/cli/__init__.py: main, the parser)
    and the serving commands it dispatches to (placement/cli/serving.py): the output checks come from
    placement.outputs, what the commands share from placement.cli.common."""
    path = os.path.join(ROOT, "placement", "cli", "serving.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    siblings = {f[:-3] for f in os.listdir(os.path.join(ROOT, "placement", "cli")) if f.endswith(".py")}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x: a sibling module only
                assert all(a.name in siblings for a in node.names), ast.dump(node)
            assert node.module != "placement.cli"
            assert not (node.level == 2 and node.module == "cli"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert all(a.name != "placement.cli" for a in node.names)


def test_output_file(tmp_path):
    from placement.outputs import output_dir, output_file

    target = tmp_path / "a" / "b" / "r.json"
    assert output_file(str(target), "--out") == str(target) and target.parent.is_dir()
    assert not target.exists()  # checked, not written
    regular = tmp_path / "plain"
    regular.write_text("x")
    with pytest.raises(InputError, match=r"^--out .*plain/r.json: cannot write there \(.*plain is a file"):
        output_file(str(regular / "r.json"), "--out")
    with pytest.raises(InputError, match="is a folder"):
        output_file(str(tmp_path), "--out")
    assert output_dir(str(tmp_path / "d"), "--out-dir") and (tmp_path / "d").is_dir()
    with pytest.raises(InputError, match="^--out-dir"):
        output_dir(str(regular / "d"), "--out-dir")


def test_batch_figures_are_labelled_per_batch(cnn, capsys):
    assert main(["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "8", "--latency-slo", "1000",
                 "--max-replicas", "1"]) == 0
    out = capsys.readouterr().out
    assert "(one batch of 8 samples, latency model)" in out and "one sample" not in out
    assert "latency ms/batch" in out and "ms per batch" in out
    assert main(["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "8", "--latency-slo", "1000"]) == 0
    out = capsys.readouterr().out  # the default: the stage model, its figures per batch too
    assert "latency ms/batch" in out and "ms per batch" in out and "one sample" not in out
    assert main(["frontier", cnn, "--devices", "t4:1", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "latency ms/batch" in out and "max-load ms/batch" in out and "per batch" in out


def test_provision_names_an_unmeetable_latency_target(cnn, tmp_path, capsys):
    """No allocation meets 1e-6 ms: the error says so, with the lowest latency of the available devices.
    One device per stage: the latency IP (one subgraph per accelerator, a second method) confirms it.
    With replicas (the default): a brute force over every stage plan of the available devices does."""
    prices = tmp_path / "prices.toml"
    assert main(["provision", "--example-prices", str(prices)]) == 0
    capsys.readouterr()
    assert main(["provision", cnn, "--available", "t4:2,cpu:2", "--prices", str(prices),
                 "--target-throughput", "10", "--latency-slo", "1e-6"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "meets the latency target of 1e-06 ms" in err[0], err
    low = float(err[0].split("the lowest latency achievable is ")[1].split(" ms")[0])
    from placement import serving_stages as ss
    from tests.brute_stages import all_plans

    problem, _, _, fine = ss.stage_problem(cnn, {"devices": "t4:2,cpu:2"}, 1)
    plans = all_plans(fine()[0] if fine is not None else problem)
    assert low == pytest.approx(min(e.latency for e in plans) * 1e3, rel=1e-5)
    assert main(["provision", cnn, "--available", "t4:2,cpu:2", "--prices", str(prices),
                 "--target-throughput", "10", "--latency-slo", "1e-6", "--max-replicas", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "meets the latency target of 1e-06 ms" in err[0], err
    assert "samples/s is unreachable" not in err[0]
    low = float(err[0].split("the lowest latency achievable is ")[1].split(" ms")[0])
    from placement.serving import batch_workload
    from solvers import latency_ip
    from solvers.base import SolveOptions, Status

    w = batch_workload(cnn, "t4:2,cpu:2", 1)
    ref = latency_ip.solve(w.graph, w.cluster, SolveOptions(objective="latency", gap=1e-9))
    assert ref.status == Status.OPTIMAL
    assert low == pytest.approx(ref.objective, rel=1e-5)


def test_provision_time_limit_bounds_the_command(llama_model, tmp_path, capsys):
    """The DP over every allocation of the Llama export cannot finish in 4 s: the command says so at
    its limit (exit 1, one error line naming --time-limit) instead of running on."""
    prices = tmp_path / "prices.toml"
    assert main(["provision", "--example-prices", str(prices)]) == 0
    capsys.readouterr()
    t0 = time.monotonic()
    code = main(["provision", llama_model, "--available", "a100:2,t4:2", "--prices", str(prices),
                 "--target-throughput", "100", "--time-limit", "4", "--max-replicas", "1"])
    wall = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    err = [e for e in err if not e.startswith("warning:")]
    assert code == 1 and len(err) == 1 and "--time-limit 4" in err[0] and "did not finish" in err[0], err
    assert wall < 4 + 10  # a hang catcher; the limit itself counts from the command's start


def test_slo_ip_stop_skips_the_program(cnn):
    """``stop`` true after the starts: the best start, feasible (nothing proven), no integer program."""
    from placement.serving import batch_workload
    from solvers import slo_ip
    from solvers.base import SolveOptions, Status

    w = batch_workload(cnn, "t4:2,cpu:1", 1)
    sol = slo_ip.solve(w.graph, w.cluster, SolveOptions(), stop=lambda: True)
    assert sol.status == Status.FEASIBLE and sol.assignment is not None
    assert "mip_status" not in sol.stats and "stopped" in sol.message
    assert math.isfinite(sol.stats["max_load"]) and sol.bound is None


def test_frontier_says_how_far_the_stage_frontier_is_proven(tmp_path, capsys):
    """On a model with layer nodes whose operator-node frontier does not close in the time: the
    layer-node plans' frontier is complete and said to be so, each of its points proven among layer
    plans only, never called a frontier point of the stage model. (A 2 s limit already completes the
    layer-node frontier on 2 busy cores; the limit, 10 s before, is 5 s: the time past that goes to the
    one-device-per-stage search, which is not what is checked here.)"""
    model = str(tmp_path / "bert.onnx")
    assert main(["example", model, "--layers", "2"]) == 0
    out = tmp_path / "f.json"
    assert main(["frontier", model, "--devices", "a100:1,t4:1,cpu:2", "--time-limit", "5",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    report = data["stage_frontier"]["1"]
    if report["complete"]:  # the operator nodes closed after all: then every stage point is proven
        assert "stage model, batch 1: frontier complete, every point proven" in text
        return
    assert report["layer_nodes_complete"] is True, report
    assert "the layer-node plans' frontier complete, each point proven among them" in text
    assert "stage plan, not proven (frontier point of the layer-node plans)" in text  # as found
    assert "frontier point of the stage model, proven" not in text
    assert not any(p["proven"] for p in data["points"] if p.get("model") == "stages")


def test_a_point_found_again_is_printed_only_with_a_stronger_proof(tmp_path, capsys):
    """The stage optimum reappears under each replica cap; 'found:' printed it once per cap, four
    identical lines. Now each plan's figures are printed once, again only with a stronger proof
    (proven, or a frontier point among the layer-node plans)."""
    from placement.cli import main

    model = str(tmp_path / "bert.onnx")
    assert main(["example", model, "--layers", "2"]) == 0
    capsys.readouterr()
    assert main(["frontier", model, "--devices", "a100:1,t4:1,cpu:2", "--batch-size", "1,8",
                 "--time-limit", "6"]) == 0
    found = [s for s in capsys.readouterr().out.splitlines() if s.startswith("found:")]
    assert found
    seen: dict = {}
    for s in found:
        figures = s.split(", max-load")[0], "one device per stage" in s
        strength = 2 if "not proven" not in s else 1 if "(frontier point" in s else 0
        assert strength > seen.get(figures, -1), s
        seen[figures] = strength


def test_max_points_holds_for_both_models_together(tmp_path, capsys):
    """--max-points 1 ("points per batch size at most") gave two: one per model, merged."""
    from placement.cli import main

    model = str(tmp_path / "bert.onnx")
    assert main(["example", model, "--layers", "2"]) == 0
    out = tmp_path / "f.json"
    assert main(["frontier", model, "--devices", "a100:1,t4:1,cpu:2", "--batch-size", "1,8", "--time-limit",
                 "6", "--max-points", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    sizes = [p["batch_size"] for p in data["points"]]
    assert sizes and all(sizes.count(b) == 1 for b in sizes), sizes


def test_a_frontier_plan_file_states_its_own_objective_bound_and_gap(example_onnx, tmp_path, capsys):
    """A frontier point's plan file said objective_name "max-load" with the latency program's objective,
    bound and gap: bound 0.386 above the file's max-load 0.281, a gap computed from the latency. A point
    the latency program gave now says "latency", and every file's bound is at most its objective."""
    out = tmp_path / "f.json"
    assert main(["frontier", example_onnx, "--devices", "a100:1,t4:1", "--max-replicas", "1", "--time-limit",
                 "10", "--out", str(out)]) == 0
    capsys.readouterr()
    files = sorted(tmp_path.glob("f.*.json"))
    assert files
    for f in files:
        r = json.loads(f.read_text())
        value = r["objective"]
        assert value == pytest.approx(r["max_load"] if r["objective_name"] == "max-load" else r["latency"])
        if r.get("bound") is not None:
            assert r["bound"] <= value * (1 + 1e-9)
            assert r["gap"] == pytest.approx((value - r["bound"]) / value, abs=1e-9)
    assert main(["evaluate", example_onnx, str(files[0])]) == 0  # re-scored by the objective it names
