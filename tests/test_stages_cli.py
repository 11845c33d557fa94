"""``placement place`` / ``placement evaluate`` on Piper-format workloads (placement/stages.py)."""

from __future__ import annotations

import json
import os

import pytest

from placement.cli import main
from tests.test_piper import _tiny


@pytest.fixture()
def tiny(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_tiny()))
    return str(path)


def test_place_prints_stages_and_writes_the_result(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["place", tiny, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stage" in text and "memory / device" in text and "load (s/sample)" in text and "optimal" in text
    data = json.loads(out.read_text())
    assert data["status"] == "optimal" and data["objective"] > 0
    st = data["stages"]
    assert sum(len(s["devices"]) for s in st) <= 4
    for s in st:
        assert set(s) >= {"nodes", "dataParallelDegree", "tensorParallelDegree", "TMPCids", "kind", "devices",
                          "time_per_sample", "memory", "in_flight"}
        assert set(s["TMPCids"]) == {str(x) for x in s["nodes"]}
    assert max(s["time_per_sample"] for s in st) == pytest.approx(data["objective"])
    # evaluate re-scores the same plan
    assert main(["evaluate", tiny, str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["objective"] == pytest.approx(data["objective"])


def test_options_change_the_model(tiny, capsys):
    assert main(["place", tiny, "--max-replicas", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert all(s["dataParallelDegree"] == 1 for s in one["stages"])
    assert main(["place", tiny, "--schedule", "gpipe", "--microbatches", "2", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert g["problem"]["schedule"] == "gpipe" and g["problem"]["microbatches"] == 2
    for s in g["stages"]:
        assert s["in_flight"] == 2 // s["dataParallelDegree"]


def test_infeasible_memory_is_one_error_line_exit_1(tiny, capsys):
    assert main(["place", tiny, "--device-memory", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: infeasible:")
    assert "node(s) 0 (10 B), 1 (10 B) fit no device even alone" in err[0]


def test_bad_plan_is_one_error_line_exit_2(tiny, tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"stages": [{"nodes": [0, 1], "dataParallelDegree": 1,
                                           "tensorParallelDegree": 1,
                                           "TMPCids": {"0": "vanilla", "1": "fancy"}}]}))
    assert main(["evaluate", tiny, str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node 1 has no variant 'fancy'" in err[0]


def test_plan_whose_degree_does_not_divide_is_invalid_exit_1(tiny, tmp_path, capsys):
    """A degree that does not divide the micro-batches breaks one of the model's rules, as too many
    replicas or devices do: the plan is INVALID (exit 1, the problem listed), not a malformed file (it
    was an error line, exit 2), and its devices are not listed as idle."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"stages": [{"nodes": [0, 1], "dataParallelDegree": 3,
                                            "tensorParallelDegree": 1,
                                            "TMPCids": {"0": "vanilla", "1": "vanilla"}}]}))
    assert main(["evaluate", tiny, str(plan)]) == 1
    out = capsys.readouterr().out
    assert "status INVALID" in out and "problem: stage 0: data-parallel degree 3 does not divide 4 " \
        "micro-batches" in out
    assert "the plan cannot be scored (its problems below)" in out and "idle" not in out
    # a plan that is well-formed but does not fit (more replicas than devices) is scored invalid, exit 1
    plan.write_text(json.dumps({"stages": [{"nodes": [0, 1], "dataParallelDegree": 4,
                                            "tensorParallelDegree": 1,
                                            "TMPCids": {"0": "vanilla", "1": "vanilla"}}]}))
    assert main(["evaluate", tiny, str(plan), "--max-devices", "2"]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_zero_devices_is_one_error_line_naming_the_field(tmp_path, capsys):
    d = _tiny()
    d["maxDevices"] = 0
    assert main(["place", _write(tmp_path, d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "maxDevices must be positive" in err[0]


def test_bad_piper_file_is_one_error_line(tmp_path, capsys):
    d = _tiny()
    del d["nodes"][0]["TMPCs"]["1"][0]["memoryUsageB"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    assert main(["place", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memoryUsageB" in err[0] and "bad.json" in err[0]


def test_onnx_training_model_replicated(tmp_path, capsys):
    """An ONNX training graph takes the replicated model by default (graphs/onnx_variants.py);
    ``--max-replicas 1`` keeps the pipeline output; an inference graph takes it with ``--max-replicas``
    above 1."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    args = ["place", path, "--devices", "a100:4,cpu:2", "--batch-size", "64", "--training",
            "--microbatches", "8", "--granularity", "op", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "optimal" and data["problem"]["microbatches"] == 8
    nodes = {n for s in data["stages"] for n in s["nodes"]}
    assert nodes == {"conv", "relu", "pool", "flatten", "fc", "softmax"}
    pipeline = ["place", path, "--devices", "a100:4,cpu:2", "--batch-size", "64", "--training", "--json"]
    assert main(pipeline + ["--max-replicas", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "one-device-per-stage"
    assert main(["place", path, "--devices", "a100:2", "--max-replicas", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "stages"
    # the old switch is gone: --max-replicas says it
    assert main(["place", path, "--replicated", "--devices", "a100:2"]) == 2
    assert "--replicated" in capsys.readouterr().err


def test_a_time_limit_before_any_plan_is_one_error_line_exit_1(tiny, capsys):
    assert main(["place", tiny, "--time-limit", "1e-9"]) == 1
    # a cold kernel cache adds the compile note (the kernels compile before the limit's clock starts)
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("note: compiling")]
    assert len(err) == 1 and err[0].startswith("error:") and "tiny.json" in err[0]
    assert "no plan found" in err[0] and "stopped" in err[0] and "infeasible" not in err[0]


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_time_limit_is_positive_on_every_command(tiny, value, capsys):
    # one rule with frontier and provision: zero is a usage error (exit 2), not a search stopped at once
    assert main(["place", tiny, "--time-limit", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --time-limit must be a positive number of seconds (inf: none), got "
                   f"{float(value)!r}"], err


def _write(tmp_path, d) -> str:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_infeasible_messages_say_what_does_not_fit(tmp_path, capsys):
    """Every node fits a device alone: the message gives the least memory all nodes need against what the
    devices hold, or (when that fits) the largest node and why the split into stages does not."""
    d = _tiny()
    for node in d["nodes"]:
        node["TMPCs"]["1"][0].update(memoryUsageA=6.0, memoryUsageB=4.0)  # 10 bytes at one micro-batch
    d.update(maxDevices=1, maxMemoryPerDevice=15.0)
    assert main(["place", _write(tmp_path, d)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: infeasible:")
    assert "needs 20 B in all, the 1 device(s) hold 15 B" in err[0]
    # two devices hold 30 bytes, but the first of two stages keeps 2 micro-batches (16 bytes) under 1F1B,
    # and one stage needs 20 bytes per replica
    d.update(maxDevices=2)
    assert main(["place", _write(tmp_path, d)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every node fits a device alone (the largest, 0, needs 10 B" in err[0]
    assert "under 1f1b" in err[0]
    # GPipe keeps all 4 micro-batches of a one-replica stage: one more message of the first kind
    d.update(maxDevices=1, maxMemoryPerDevice=25.0)
    assert main(["place", _write(tmp_path, d), "--schedule", "gpipe"]) == 1
    assert "under gpipe" in capsys.readouterr().err


def test_stage_device_options_are_refused_by_the_one_device_per_stage_placement(tmp_path, capsys):
    """``--device-memory`` (and ``--max-devices``, ``--bandwidth``) on a pipeline-only ONNX placement is
    one error line, not silently ignored."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    for opt in (["--device-memory", "1e3"], ["--max-devices", "2"], ["--bandwidth", "1e9"]):
        assert main(["place", path, "--devices", "a100:2", "--max-replicas", "1", *opt]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {opt[0]} applies to stage-model plans only")


def test_other_objectives_keep_the_pipeline_placement_or_are_refused(tiny, tmp_path, capsys):
    """The replicated model minimises the time per sample: ``--objective split-max`` on an ONNX training
    model gives the pipeline placement (which has that objective), not a silently throughput-optimal plan;
    with ``--max-replicas`` above 1, or on a Piper file, it is one error line."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    args = ["place", path, "--training", "--devices", "a100:2", "--objective", "split-max", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "one-device-per-stage" and "devices" in doc
    for args in (["place", path, "--devices", "a100:2", "--max-replicas", "2", "--objective", "latency"],
                 ["place", tiny, "--objective", "split-max"]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "objective" in err[0] and "max-load" in err[0]


def test_onnx_replicated_baselines_on_the_cli(tmp_path, capsys):
    """The replicated model of an ONNX training graph takes the same solvers as a Piper file: the exact
    DP and the baselines, never better than it, each judged by the evaluator (evaluate re-scores it)."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    base = ["place", path, "--training", "--devices", "a100:4,v100:2", "--batch-size", "16", "--json"]
    values = {}
    for solver in ("dp", "ip", "auto", "pipedream", "data-parallel"):
        out = tmp_path / f"{solver}.json"
        assert main(base + ["--solver", solver, "-o", str(out)]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["model"] == "stages" and doc["solver"] == solver
        # auto takes the exact path on a small graph; the MILP is optimal when it proves it
        allowed = {"dp": {"optimal"}, "auto": {"optimal"},
                   "ip": {"optimal", "feasible"}}.get(solver, {"feasible"})
        assert doc["status"] in allowed
        values[solver] = doc["objective"]
        assert main(["evaluate", path, str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["objective"] == pytest.approx(doc["objective"], rel=1e-12)
    assert min(values.values()) == pytest.approx(values["dp"], rel=1e-12)
    assert len(json.loads((tmp_path / "data-parallel.json").read_text())["stages"]) == 1


def test_piper_file_takes_every_replicated_solver(tiny, capsys):
    values = {}
    for solver in ("dp", "ip", "auto", "pipedream", "data-parallel"):
        assert main(["place", tiny, "--solver", solver, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["solver"] == solver
        values[solver] = doc["objective"]
    best = values["dp"]
    assert values["ip"] == pytest.approx(best) and values["auto"] == pytest.approx(best)
    assert min(values.values()) == pytest.approx(best)
    # the old names are aliases, with a note
    assert main(["place", tiny, "--solver", "dp-replicated", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solver"] == "dp" and "is now 'dp'" in doc["message"]
    assert doc["objective"] == pytest.approx(best)
    # a solver without a stage form is refused by name
    assert main(["place", tiny, "--solver", "local-search"]) == 2
    assert "the local-search solver places one device per stage, and this stage-model problem is not that " \
        "model (data-parallel degrees" in capsys.readouterr().err


def test_evaluate_rebuilds_the_problem_the_plan_was_solved_on(tiny, tmp_path, capsys):
    """A plan placed with device, memory, bandwidth and schedule options re-scores to the same value
    with no flags (before, evaluate silently used the file's defaults)."""
    out = tmp_path / "plan.json"
    flags = ["--max-devices", "8", "--device-memory", "60", "--bandwidth", "25", "--schedule", "pipedream",
             "--microbatches", "8"]
    assert main(["place", tiny, *flags, "-o", str(out), "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert main(["evaluate", tiny, str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["objective"] == placed["objective"]
    assert (again["problem"]["schedule"], again["problem"]["microbatches"]) == ("pipedream", 8)
    assert again["problem"]["kinds"][0]["count"] == 8 and again["problem"]["kinds"][0]["memory"] == 60
    # the file's defaults give another value: the recorded settings are what made it equal
    assert main(["evaluate", tiny, str(out), "--json", "--bandwidth", "10"]) in (0, 1)
    other = json.loads(capsys.readouterr().out)
    assert other["objective"] != placed["objective"]


def test_options_reach_the_solver_or_are_refused(tiny, capsys):
    """--gap, --threads, --seed and --backend reach the stage solvers that read them; another solver
    refuses them by name (before, only the time limit reached the solver)."""
    assert main(["place", tiny, "--solver", "ip", "--gap", "0.5", "--threads", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] in ("optimal", "feasible")
    for flags, flag in ((["--solver", "dp", "--gap", "0.1"], "--gap"),
                        (["--solver", "dp", "--seed", "3"], "--seed"),
                        (["--solver", "ip", "--backend", "pulp"], "--backend")):
        assert main(["place", tiny, *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{flag} does not apply" in err[0], err


def test_serving_options_are_taken_or_refused_on_the_stage_model_not_dropped(tiny, tmp_path, capsys):
    """--latency-slo and a --batch-size sweep with replicas: an ONNX model takes them on the stage model
    (placement/serving_stages.py; values checked in tests/test_serving_stages.py), a Piper file refuses
    them in one error naming the option (before, the target was silently ignored, and 'auto' failed
    with a message for another command)."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    for args in (["place", path, "--devices", "a100:2", "--max-replicas", "2", "--latency-slo", "5"],
                 ["place", path, "--devices", "a100:2", "--max-replicas", "2", "--batch-size", "1,2"]):
        assert main(args + ["--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["model"] == "stages" and doc["serving"]["model"] == "stages"
    assert main(["place", tiny, "--latency-slo", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --latency-slo") and "stage model" in err[0], err


def _as_version_1(doc: dict) -> dict:
    """A result file as the tool wrote stage plans before schema version 2 (``"format":
    "placement-replicated"``, the settings at the top level, ``devices`` a count per stage), written
    out here field by field rather than by the code under test."""
    old = {"format": "placement-replicated", "version": 1, "workload": doc["workload"],
           "solver": doc["solver"], "status": doc["status"], "message": doc["message"],
           "time": doc["solve_time_s"], "bound": doc["bound"], "time_unit": "s",
           "objective": doc["objective"], "valid": doc["valid"], "problems": doc["problems"]}
    old.update(doc["problem"])
    old["stages"] = [{k: (len(v) if k == "devices" else v) for k, v in s.items()
                      if k not in ("compute", "comm", "resync")} for s in doc["stages"]]
    return old


def test_version_1_result_files_are_read_and_rescored_to_the_same_value(tiny, tmp_path, capsys):
    """Every stage-plan file the tool wrote before version 2 still evaluates and shows, to the value
    it records, under the settings it records."""
    out = tmp_path / "plan.json"
    flags = ["--max-devices", "8", "--device-memory", "60", "--bandwidth", "25", "--schedule", "pipedream",
             "--microbatches", "8"]
    assert main(["place", tiny, *flags, "-o", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert (doc["schema"], doc["version"], doc["model"]) == ("placement-result", 2, "stages")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_version_1(doc)))
    assert main(["evaluate", tiny, str(old), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["objective"] == doc["objective"] and again["version"] == 2
    assert main(["show", str(old), "--workload", tiny, "--json", "--no-draw"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["model_time_per_sample"] == pytest.approx(doc["objective"], rel=1e-12)


def _placed_cnn(tmp_path, capsys, *options):
    """A small CNN placed as an ONNX model with ``options``: the model's path, the result file's, and the
    result written there."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    out = tmp_path / "plan.json"
    assert main(["place", path, *options, "-o", str(out)]) == 0
    capsys.readouterr()
    return path, out, json.loads(out.read_text())


def test_version_1_onnx_result_files_are_read_and_rescored(tmp_path, capsys):
    path, out, doc = _placed_cnn(tmp_path, capsys, "--devices", "a100:2,t4:2", "--device-memory", "1e9")
    assert doc["model"] == "stages" and doc["problem"]["granularity"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_version_1(doc)))
    assert main(["evaluate", path, str(old), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objective"] == doc["objective"]


@pytest.mark.parametrize("option", [["--devices", "a100:2"], ["--costs", "profile"], ["--batch-size", "4"],
                                    ["--batch-size", "auto"], ["--training"], ["--optimizer", "adam"],
                                    ["--granularity", "op"], ["--dim", "seq=8"], ["--device-file", "d.toml"]])
@pytest.mark.parametrize("command", ["place", "evaluate"])
def test_a_piper_file_refuses_the_onnx_front_end_options(tiny, tmp_path, capsys, option, command):
    """A Piper-format workload carries its own devices and costs: an ONNX front-end option is one error
    line naming it, exit 2 (it used to be ignored without a word), before any advice on combining the
    front end's options (``--optimizer`` without ``--training``, a sweep of batch sizes)."""
    args = ["place", tiny]
    if command == "evaluate":
        plan = tmp_path / "plan.json"
        assert main(["place", tiny, "-o", str(plan)]) == 0
        capsys.readouterr()
        args = ["evaluate", tiny, str(plan)]
    assert main(args + option) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option[0] in err[0] and "Piper-format workload" in err[0]


def test_evaluate_rescores_an_onnx_plan_under_the_device_memory_it_was_placed_with(tmp_path, capsys):
    """``--device-memory`` is recorded in the result's kinds, and ``evaluate`` (and ``show``) rebuild the
    problem with it unless given again: before, ``evaluate`` checked the plan against the kinds' default
    memory (40 GiB for an A100), not the 200 MB it was placed under."""
    path, out, doc = _placed_cnn(tmp_path, capsys, "--devices", "a100:2,t4:2", "--device-memory", "2e8")
    assert {k["name"]: k["memory"] for k in doc["problem"]["kinds"]} == {"a100": 2e8, "t4": 2e8}
    assert main(["evaluate", path, str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [s["memory"]["capacity"] for s in again["stages"]] == [2e8] * len(doc["stages"])
    assert again["objective"] == doc["objective"]
    assert main(["evaluate", path, str(out), "--device-memory", "1e9", "--json"]) == 0  # given again: that
    assert {s["memory"]["capacity"] for s in json.loads(capsys.readouterr().out)["stages"]} == {1e9}


def test_evaluate_takes_a_device_file_given_again_over_the_recorded_memory(tmp_path, capsys):
    """Devices given again on ``evaluate`` (``--device-file``) are the ones scored, their memory too: the
    recorded per-kind memory stands in only for ``--device-memory`` when the devices are the result's."""
    small, big = tmp_path / "g1.toml", tmp_path / "g80.toml"
    small.write_text('[devices.mygpu]\nbase = "a100"\nmemory_gib = 1\n')
    big.write_text('[devices.mygpu]\nbase = "a100"\nmemory_gib = 80\n')
    path, out, _ = _placed_cnn(tmp_path, capsys, "--devices", "mygpu:2", "--device-file", str(small),
                               "--max-replicas", "2")
    assert main(["evaluate", path, str(out), "--json"]) == 0
    assert {s["memory"]["capacity"] for s in json.loads(capsys.readouterr().out)["stages"]} == {2**30}
    assert main(["evaluate", path, str(out), "--device-file", str(big), "--json"]) == 0
    assert {s["memory"]["capacity"] for s in json.loads(capsys.readouterr().out)["stages"]} == {80 * 2**30}


def test_a_stage_result_records_its_workload_beside_it_and_show_finds_it_from_any_folder(
        tmp_path, capsys, monkeypatch):
    """``place --out`` records the workload relative to the result file (as a one-device-per-stage
    result does), so ``show`` works from another folder; before, the path as typed was recorded and
    ``show`` failed there ("its workload 'cnn.onnx' was not found")."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    save(small_cnn(), str(work / "cnn.onnx"))
    monkeypatch.chdir(work)
    assert main(["place", "cnn.onnx", "--devices", "a100:2", "--max-replicas", "2", "-o", "out/r.json"]) == 0
    capsys.readouterr()
    assert json.loads((work / "out" / "r.json").read_text())["workload"] == os.path.join("..", "cnn.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["show", "work/out/r.json", "--no-draw", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["simulation"]


def test_a_training_pipeline_says_its_samples_per_second_is_the_steady_state(tmp_path, capsys):
    """A flushing schedule's batch fills and drains the pipeline, which the model's time per sample
    leaves out (as Piper's does): place says so for a training pipeline, and not for inference (no
    flush) or one stage (nothing to fill)."""
    import onnx

    from graphs.transformer import gpt

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), path)
    said = "the time per sample is the pipeline's steady state"
    import re

    for devices in ("a100:1,t4:1", "t4:2,cpu:4", "t4:1"):
        assert main(["place", path, "--devices", devices, "--training", "--microbatches", "4"]) == 0
        out = capsys.readouterr().out
        stages = int(re.search(r"^(\d+) stage\(s\) on", out, re.M)[1])
        assert (said in out) == (stages > 1), (devices, out)
        assert "each batch of 4 micro-batches under 1f1b" in out or stages == 1
    assert main(["place", path, "--devices", "a100:1,t4:1", "--training", "--schedule", "pipedream"]) == 0
    assert said not in capsys.readouterr().out  # no flush
    assert main(["place", path, "--devices", "a100:1,t4:1", "--max-replicas", "2"]) == 0
    assert said not in capsys.readouterr().out  # inference: no flush


def test_a_solvers_message_reads_in_the_tables_unit():
    # the summary printed "bound 0.674996702" (ms) and then "bound 0.000674996702 s per sample"
    from placement.report import in_cli_units

    def ms(t):
        return f"{t * 1e3:.9g} ms"

    msg = "not proven optimal; bound 0.000674996702 s per sample (total work), gap 45.959%"
    assert in_cli_units(msg, ms) == \
        "not proven optimal; bound 0.674996702 ms per sample (total work), gap 45.959%"
    assert in_cli_units(msg) == msg
    assert in_cli_units("bound 6.5e-05 s per sample", ms) == "bound 0.065 ms per sample"


def test_one_rewrite_gives_a_message_both_units():
    # stage summaries rewrote times only and the command line's errors bytes only: two regex rewrites
    # of the same messages. 2 ** 30 bytes is 1 GiB; 3e-4 s is 0.3 ms
    from placement.report import in_cli_units

    msg = "needs 1073741824 bytes, bound 3e-4 s per sample"
    assert in_cli_units(msg, lambda t: f"{t * 1e3:.9g} ms") == "needs 1 GiB, bound 0.3 ms per sample"
    assert in_cli_units(msg) == "needs 1 GiB, bound 3e-4 s per sample"


@pytest.mark.parametrize("flag, value", [("--device-memory", "0"), ("--device-memory", "-1"),
                                         ("--device-memory", "nan"), ("--bandwidth", "0")])
def test_device_options_of_a_piper_file_are_checked_as_usage(tiny, capsys, flag, value):
    # --device-memory 0 on a Piper file was solved and answered "infeasible", exit 1
    assert main(["place", tiny, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag} must be a positive number"), err


def test_a_stage_plan_at_a_batch_size_says_what_a_micro_batch_is(tmp_path, capsys):
    # "8 micro-batches per batch" alone did not say that each is one run of the model at batch size 8
    model, out = str(tmp_path / "m.onnx"), str(tmp_path / "r.json")
    assert main(["example", model, "--layers", "2"]) == 0
    assert main(["place", model, "--devices", "a100:2", "--batch-size", "8", "--out", out]) == 0
    assert "a micro-batch is one run at batch size 8" in capsys.readouterr().out
    assert main(["evaluate", model, out]) == 0
    assert "a micro-batch is one run at batch size 8" in capsys.readouterr().out
    assert main(["place", model, "--devices", "a100:2"]) == 0
    assert "a micro-batch is one run" not in capsys.readouterr().out  # batch size 1: a run is a sample
