"""A new user's trial of the command line: every option honoured or refused by name (or, where it
changes the model, said in a note), and a file given in the wrong place named for what it is and what
was expected, not for the first field the wrong reader misses."""

from __future__ import annotations

import json

import pytest

from placement.cli import main
from tests.tables import one_device_per_stage
from tests.test_evaluate_inputs import _one_error  # one error line naming every word


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A reference-format workload, a result placed on it, a frontier file, a job list, a model config
    missing a field, and a file named like an ONNX model (what it holds is never read here)."""
    d = tmp_path_factory.mktemp("files")
    tiny = str(d / "tiny.json")
    assert main(["example", tiny]) == 0
    result = str(d / "result.json")
    assert main(["place", tiny, "--solver", "dp", "--out", result]) == 0
    frontier = d / "frontier.json"
    frontier.write_text(json.dumps({"schema": "placement-frontier", "version": 1, "proven": True,
                                    "points": [{"plan_file": "frontier.0.json"}]}))
    jobs = str(d / "jobs.json")
    assert main(["example", jobs]) == 0
    cfg = d / "badcfg.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    onnx = d / "model.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch\xff\xfe")
    return {"tiny": tiny, "result": result, "frontier": str(frontier), "jobs": jobs, "cfg": str(cfg),
            "onnx": str(onnx)}


@pytest.mark.parametrize("argv, words", [
    # a result file where a workload goes said "missing top-level field 'maxSizePerFPGA'"
    # (its workload as a path from here: relative below the current directory, else absolute)
    (["place", "{result}"], ["{result}: this is a placement result", "not a workload",
                             "placement evaluate", "tiny.json {result}", "placement show {result}"]),
    (["evaluate", "{result}", "{result}"], ["this is a placement result", "not a workload"]),
    # a model config missing a field it needs: the same
    (["place", "{cfg}"], ["{cfg}: this looks like an LLM model config", "'num_hidden_layers'"]),
    (["place", "{frontier}"], ["this is a frontier", "not a workload", "frontier.0.json"]),
    (["place", "{jobs}"], ["this is a shared-cluster job list", "placement cluster {jobs}"]),
    # an ONNX model where a result goes said "not a UTF-8 text file"
    (["show", "{onnx}"], ["{onnx}: this is an ONNX model", "placement show takes a result file"]),
    (["split", "{result}", "{onnx}"], ["placement split takes MODEL RESULT",
                                       "placement split {onnx} {result}"]),
    # a frontier where a result goes said "a split must be an object with 'fpgas' and/or 'cpus' lists"
    (["evaluate", "{tiny}", "{frontier}"], ["{frontier}: this is a frontier", "not one result",
                                            "frontier.0.json"]),
    (["show", "{tiny}"], ["{tiny}: this is a reference-format operator graph, a workload",
                          "placement place {tiny} --out"]),
    (["evaluate", "{tiny}", "{jobs}"], ["this is a shared-cluster job list", "takes a result file"]),
])
def test_a_file_in_the_wrong_place_is_named_for_what_it_is(files, capsys, argv, words):
    capsys.readouterr()
    assert main([a.format(**files) for a in argv]) == 2
    _one_error(capsys, *(w.format(**files) for w in words))


def test_the_workload_reader_names_a_result_too(files):
    """load_workload (show --workload, evaluate) reads a workload; a result there is named as one."""
    from graphs.errors import InputError
    from placement.load import load_workload

    with pytest.raises(InputError, match="this is a placement result"):
        load_workload(files["result"])


def test_the_policy_comparison_has_one_utilisation_for_every_row(capsys):
    """fifo's one allocation held leaves jobs waiting forever: its utilisation "while the allocation
    holds" (100%) sat in the comparison beside the others' over their makespan (26%). Not comparable:
    "-", and the header says which figure the column is."""
    import math
    from types import SimpleNamespace

    from placement.cluster.command import format_comparison

    def r(policy, makespan, util):
        return SimpleNamespace(policy=policy, max_rho=math.nan if math.isinf(makespan) else 2.0,
                               avg_jct=makespan, makespan=makespan, utilisation=util, unit="ms", bound=False)

    text = format_comparison([r("ftf", 1000.0, 0.26), r("fifo", math.inf, 1.0)])
    head, ftf, fifo = text.splitlines()
    assert "utilisation over makespan" in head
    assert ftf.endswith("26%") and fifo.split()[-1] == "-" and "100%" not in fifo


@pytest.fixture(scope="module")
def model(example_onnx):
    return example_onnx


def test_memory_limit_on_an_onnx_model_says_it_selects_one_device_per_stage(model, capsys):
    """--memory-limit (auto's one-device-per-stage DP's) switched an ONNX model off the stage model
    without a word: the per-device table came back, slower than the default's replicas."""
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", "--memory-limit", "100"]) == 0
    out, err = capsys.readouterr()
    assert one_device_per_stage(out)  # one device per stage, as the note says
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "--memory-limit" in notes[0] and "one device per stage" in notes[0]
    # asked for in so many words (--max-replicas 1): no note
    assert main(["place", model, "--devices", "a100:2", "--memory-limit", "100", "--max-replicas", "1"]) == 0
    assert "--memory-limit" not in capsys.readouterr().err


@pytest.mark.parametrize("workload, flags, what", [
    ("model", ["--solver", "pipedream"], "the pipedream solver reports on the stage model"),  # ONNX's default
    ("tiny", ["--objective", "latency", "--time-limit", "2"], "the latency objective's integer program"),
    ("tiny", ["--solver", "local-search"], "the local-search solver"),
])
def test_progress_where_no_bar_can_be_drawn_says_so(model, files, capsys, workload, flags, what):
    """--progress drew nothing, and said nothing, on the default stage model and the latency objective."""
    path = model if workload == "model" else files["tiny"]
    extra = ["--devices", "a100:2"] if workload == "model" else []
    capsys.readouterr()
    assert main(["place", path, *extra, "--progress", *flags]) == 0
    err = capsys.readouterr().err
    assert f"note: --progress: {what}" in err and "no bar is drawn" in err


def test_progress_on_the_one_device_per_stage_dp_draws_a_bar_and_no_note(files, capsys):
    capsys.readouterr()
    assert main(["place", files["tiny"], "--progress"]) == 0
    err = capsys.readouterr().err
    assert "placing [" in err and "note: --progress" not in err


def test_gap_reaches_autos_stage_integer_program(monkeypatch):
    """--gap was refused for auto on the stage model ("it reads: --threads") while its integer program
    runs there: now it is passed to that program (and its default, 1e-6, kept when none is given)."""
    from graphs.parallel import from_opgraph
    from solvers import ip_stages
    from solvers.base import SolveOptions
    from solvers.registry import solve
    from tests.instances import random_instance

    seen = []
    real = ip_stages.solve_problem

    def spy(problem, **kw):
        seen.append(kw.get("gap"))
        return real(problem, **kw)

    monkeypatch.setattr(ip_stages, "solve_problem", spy)
    import numpy as np

    inst = random_instance(np.random.default_rng(5), max_items=6, training=False)
    problem, _ = from_opgraph(inst.graph, inst.cluster)
    raw = {"max_ideals": 1}  # the exact DP is not run: the integer program refines the coarse plan
    solve(problem, solver="auto", options=SolveOptions(gap=0.05, raw=raw))
    solve(problem, solver="auto", options=SolveOptions(raw=raw))
    assert seen == [0.05, 1e-6]


def test_gap_on_the_default_stage_model_is_accepted(model, capsys):
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", "--gap", "0.01"]) == 0
    assert "--gap" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def llm_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("llm") / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512,
                                "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000}))
    return str(path)


def test_a_bad_context_is_named_by_its_flag(llm_config, capsys):
    assert main(["place", llm_config, "--devices", "a100:2", "--context", "-5"]) == 2
    _one_error(capsys, "--context must be a positive integer")


def test_one_micro_batch_is_singular(llm_config, capsys):
    capsys.readouterr()
    assert main(["place", llm_config, "--devices", "a100:2"]) == 0
    out = capsys.readouterr().out
    assert "1 micro-batch per batch" in out and "1 micro-batches" not in out


def test_a_frontier_interrupted_before_any_plan_says_nothing_was_found(capsys):
    """Ctrl-C before the first plan printed "0 non-dominated plan(s) over batch sizes none"."""
    from types import SimpleNamespace

    from placement.cli.serving import _frontier_report
    from placement.serving import Frontier

    search = SimpleNamespace(result=lambda: Frontier((), {}, False, ""))
    args = SimpleNamespace(max_replicas=1, out=None, json=False, plot=None, max_points=50, time_limit=None)
    capsys.readouterr()
    assert _frontier_report(args, search, "", interrupted=True) == 130
    out = capsys.readouterr().out
    assert "nothing found before the interrupt" in out and "0 non-dominated" not in out


@pytest.mark.parametrize("argv, words", [
    # named only what was given (it said "drop --objective and --training" to --training alone)
    (["--training", "--batch-size", "1,2"], ["drop --training (", "maximise inference throughput"]),
    (["--objective", "latency", "--batch-size", "1,2"], ["drop --objective latency ("]),
    # the stage model is an ONNX model's default: the refusal says why this placement is not one
    (["--max-replicas", "1", "--schedule", "gpipe"], ["the default for ONNX models", "(--max-replicas 1)"]),
    (["--objective", "latency", "--microbatches", "4"], ["--microbatches applies to stage plans",
                                                         "(--objective latency)"]),
])
def test_refusals_name_what_was_given_and_why(model, capsys, argv, words):
    """Found by a newcomer review: these refusals named options not given, or described the stage model
    as what --max-replicas above 1 asks for (it is an ONNX model's default)."""
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", *argv]) == 2
    err = _one_error(capsys, *words)
    assert "--max-replicas above 1" not in err and "drop --objective and --training" not in err


def test_sizes_that_run_for_minutes_are_refused(files, tmp_path, capsys):
    """Found by a newcomer review: example --layers 100000 and show --microbatches 1000000 ran for
    minutes without a word. Both have a bound, named in their help and error."""
    capsys.readouterr()
    assert main(["example", str(tmp_path / "m.onnx"), "--layers", "1001"]) == 2
    _one_error(capsys, "--layers must be from 1 to 1000, got 1001")
    assert main(["show", files["result"], "--no-draw", "--microbatches", "10001"]) == 2
    _one_error(capsys, "--microbatches must be at most 10000, got 10001")
    assert main(["show", files["result"], "--no-draw", "--microbatches", "16"]) == 0
