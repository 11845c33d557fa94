"""The command line, called in-process through main(argv)."""

import json
import os

import pytest

from placement.cli import main
from tests.tables import one_device_per_stage


@pytest.fixture
def example(tmp_path):
    path = str(tmp_path / "ex.json")
    assert main(["example", path, "--layers", "2", "--accelerators", "3"]) == 0
    return path


def test_example_then_place_prints_a_table_and_writes_json(example, tmp_path, capsys):
    out = str(tmp_path / "res.json")
    assert main(["place", example, "--out", out]) == 0
    text = capsys.readouterr().out
    for column in ("stage  devices", "#nodes", "compute (t/sample)", "comm in (t/sample)",
                   "comm out (t/sample)", "load (t/sample)", "memory / device", "load/max"):
        assert column in text
    assert one_device_per_stage(text)
    assert "status optimal" in text and "max-load" in text
    res = json.load(open(out))
    assert res["schema"] == "placement-result" and res["version"] == 2
    assert res["model"] == "one-device-per-stage" and res["time_unit"] == "t"
    assert res["status"] == "optimal" and res["valid"] and res["contiguous"]
    # the stages are the used devices, one each, in pipeline order; their loads are the devices' loads
    load = {d["name"]: d["load"] for d in res["devices"]}
    assert [s["devices"][0] for s in res["stages"]][:len(res["stage_order"])] == \
        [n for n in res["stage_order"] if any(d["name"] == n and d["nodes"] for d in res["devices"])]
    assert all(s["time_per_sample"] == load[s["devices"][0]] and s["dataParallelDegree"] == 1
               for s in res["stages"])
    assert max(s["time_per_sample"] for s in res["stages"]) == pytest.approx(res["max_load"])
    # reference fields, readable by the reference tooling
    assert res["maxLoad"] == pytest.approx(max(d["load"] for d in res["fpgas"] + res["cpus"]))
    placed = sorted(n for d in res["fpgas"] + res["cpus"] for n in d["nodes"])
    assert placed == sorted(n["id"] for n in json.load(open(example))["nodes"])
    assert res["maxLoad"] == pytest.approx(res["max_load"])
    # every operator appears by name under its device
    names = sorted(n for d in res["devices"] for n in d["nodes"])
    assert names == sorted(n["name"] for n in json.load(open(example))["nodes"])


def test_json_on_stdout(example, capsys):
    assert main(["place", example, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["solver"] == "auto" and res["gap"] == 0.0 and res["stats"]["path"] == "exact"


def test_evaluate_a_split(tmp_path, capsys):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
        "nodes": [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0} for i in (1, 2, 3)],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5}]}))
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"fpgas": [{"nodes": [1, 2]}, {"nodes": [3]}], "cpus": [{"nodes": []}]}))
    out = tmp_path / "r.json"
    assert main(["evaluate", str(wl), str(split), "--out", str(out)]) == 0
    res = json.load(open(out))
    assert res["maxLoad"] == pytest.approx(2.5)
    assert [d["load"] for d in res["fpgas"]] == pytest.approx([2.5, 1.5])


def test_a_split_that_breaks_a_constraint_is_invalid_not_feasible(tmp_path, capsys):
    """Found by a newcomer's review: evaluate printed and wrote ``feasible`` (which promises a valid plan)
    for a split that overflows a device, and show simulated that file without a word. By hand: nodes of
    memory 6 + 6 on one device of 10 bytes."""
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
        "nodes": [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "size": 6.0}
                  for i in (1, 2)],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}]}))
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"fpgas": [{"nodes": [1, 2]}, {"nodes": []}], "cpus": [{"nodes": []}]}))
    out = tmp_path / "r.json"
    assert main(["evaluate", str(wl), str(split), "--out", str(out)]) == 1
    assert "status invalid" in capsys.readouterr().out
    res = json.load(open(out))
    assert res["status"] == "invalid" and res["valid"] is False and res["maxLoad"] == pytest.approx(2.0)
    assert main(["show", str(out), "--no-draw"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {out}: the plan is not valid: accelerator:0 needs 12 bytes" in err


def test_user_errors_give_one_line_and_exit_2(tmp_path, capsys):
    assert main(["place", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.json: no such file" in err and "Traceback" not in err
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    assert main(["place", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["place", str(bad), "--solver", "nonsense"]) == 2
    assert main(["frobnicate"]) == 2
    assert main([]) == 2
    assert main(["place"]) == 2
    assert "required" in capsys.readouterr().err


def test_infeasible_exits_1_with_the_reason(tmp_path, capsys):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 0,
        "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 1.0, "size": 50},
                  {"id": 2, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 1.0}],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}]}))
    out = tmp_path / "r.json"
    assert main(["place", str(wl), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no device can hold node 1" in err and "needs 50 B" in err  # bytes in the table's units
    res = json.load(open(out))
    assert res["status"] == "infeasible" and res["valid"] is False


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "place" in capsys.readouterr().out


def test_the_command_runs_as_a_program():
    # through the interpreter running the tests, so that it never skips for want of a console script
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..")
    r = subprocess.run([sys.executable, "-m", "placement", "place", os.devnull], capture_output=True,
                       text=True, cwd=root)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1


def test_console_script_entry_point_is_declared():
    import importlib
    import re

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), encoding="utf-8") as f:
        module, func = re.search(r'^placement = "([\w.]+):(\w+)"', f.read(), re.M).groups()
    assert callable(getattr(importlib.import_module(module), func))


def test_readme_flow_onnx_example_placed_on_a_mixed_cluster(tmp_path, capsys):
    model, out = str(tmp_path / "model.onnx"), str(tmp_path / "result.json")
    assert main(["example", model, "--layers", "2"]) == 0
    assert main(["place", model, "--devices", "a100:2,t4:2,cpu:1", "--out", out]) == 0
    text = capsys.readouterr().out
    # replicas by default: the stage table, its devices named as the cluster numbers them
    assert "status optimal" in text and "a100:0-1" in text and "layer0" in text
    res = json.load(open(out))
    assert (res["schema"], res["version"], res["model"]) == ("placement-result", 2, "stages")
    assert res["problem"]["devices"] == "a100:2,t4:2,cpu:1" and res["valid"] and res["contiguous"]
    assert {d["kind"] for d in res["devices"]} <= {"a100", "t4", "cpu"} and len(res["devices"]) >= 2
    # the device rows are the stages' devices, each once
    assert sorted(d["name"] for d in res["devices"]) == sorted(n for s in res["stages"] for n in s["devices"])


def test_solver_options_are_validated(example):
    assert main(["place", example, "--memory-limit", "0"]) == 2
    assert main(["place", example, "--restarts", "0", "--solver", "local-search"]) == 2
    assert main(["place", example, "--time-limit", "-1"]) == 2


def test_results_carry_latency_and_the_latency_objective_writes_the_reference_format(tmp_path, capsys):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
        "nodes": [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0} for i in (1, 2, 3)],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5}]}))
    out = tmp_path / "r.json"
    assert main(["place", str(wl), "--out", str(out)]) == 0
    res = json.load(open(out))
    assert res["objective_name"] == "max-load" and res["totalLatency"] == res["latency"] > 0
    assert main(["place", str(wl), "--objective", "latency", "--solver", "ip", "--out", str(out)]) == 0
    assert "latency 3" in capsys.readouterr().out  # everything on one accelerator: 3 x 1.0, no transfer
    res = json.load(open(out))
    assert res["objective_name"] == "latency" and res["totalLatency"] == pytest.approx(3.0)
    assert [sorted(f["nodes"]) for f in res["fpgas"]] == [[1, 2, 3]] and res["cpus"] == [{"nodes": []}]


def test_a_training_placement_has_no_inference_latency_and_says_its_max_load_is_steady(tmp_path, capsys):
    # two forward nodes and their backward twins (colour classes), one pair per accelerator: a pipeline
    # of two stages. The latency model is an inference model (the latency objective refuses backward
    # nodes), so a training placement carries no latency from it; its summary says the max-load is the
    # steady state a flushing schedule adds fill and drain to, as a stage plan's does.
    def node(i, back, colour):
        return {"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "isBackwardNode": back,
                "colorClass": colour, "size": 6.0}

    wl = tmp_path / "t.json"
    wl.write_text(json.dumps({
        "maxSizePerFPGA": 12.0, "maxFPGAs": 2, "maxCPUs": 0,
        "nodes": [node(1, 0, 1), node(2, 0, 2), node(3, 1, 2), node(4, 1, 1)],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.5},
                  {"sourceId": 3, "destId": 4, "cost": 0.5}, {"sourceId": 1, "destId": 4, "cost": 0.5}]}))
    out = tmp_path / "r.json"
    assert main(["place", str(wl), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "latency" not in text.split("\n\n")[-1].splitlines()[0]  # the summary line: max-load, status
    assert "the max-load is the pipeline's steady state" in text
    res = json.load(open(out))
    assert res["latency"] is None and "totalLatency" not in res
    # each device: 2 x 1.0 compute + 0.5 sent + 0.5 received (node 1's output, node 2's output)
    assert res["maxLoad"] == pytest.approx(3.0) and len(res["stages"]) == 2
    assert main(["show", str(out), "--no-draw"]) == 0
    assert "latency model of `place`" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, prog", [(["frontier", "m.onnx", "--training"], "placement frontier"),
                                        (["place", "m.onnx", "--bogus", "3"], "placement place"),
                                        (["--bogus"], "placement")])
def test_an_unknown_option_is_named_with_its_command(capsys, argv, prog):
    # argparse named the top-level program: "placement: unrecognized arguments: --training"
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {prog}: unrecognized arguments: {' '.join(argv[2:] or argv)}"], err


@pytest.mark.parametrize("message, shown", [
    ("needs 6.25091e+07 bytes but one t4 holds 1.7e+10", "needs 59.61 MiB but one t4 holds 15.83 GiB"),
    # a capacity with its unit already is left alone (it became "98 B KiB")
    ("needs 6.25091e+07 bytes but one t4 holds 100000 bytes", "needs 59.61 MiB but one t4 holds 97.66 KiB"),
    ("its capacity is 2048", "its capacity is 2 KiB"),
])
def test_byte_counts_in_messages_read_in_binary_units(message, shown):
    from placement.cli.common import cli_words

    assert cli_words(message) == shown


def test_a_one_device_per_stage_plan_of_an_onnx_model_gives_its_samples_per_second(tmp_path, capsys):
    # the stage summary gave samples/s; this one only "max-load 0.4187 ms" (now nine digits, as that one)
    import re

    model, out = str(tmp_path / "m.onnx"), str(tmp_path / "r.json")
    assert main(["example", model, "--layers", "2"]) == 0
    assert main(["place", model, "--devices", "a100:1,t4:1", "--max-replicas", "1", "--out", out]) == 0
    m = re.search(r"max-load ([\d.]+) ms per sample \(([\d,.]+) samples/s\)", capsys.readouterr().out)
    assert m, "no samples/s beside the max-load"
    max_load = json.load(open(out))["max_load"]  # ms per run of the model at batch 1: one sample
    assert float(m.group(2).replace(",", "")) == pytest.approx(1e3 / max_load, rel=1e-5)


def test_the_flush_line_is_for_pipelines_only(tmp_path, capsys):
    """A training placement's summary says that a flushing schedule fills and drains the pipeline, and
    that `show` simulates it; a placement that is no pipeline (local search's) got the line too, though
    `show` refuses such a placement. Its devices line says what it is instead."""
    path = str(tmp_path / "t.json")
    assert main(["example", path, "--layers", "2", "--accelerators", "3", "--training"]) == 0
    capsys.readouterr()
    assert main(["place", path]) == 0
    text = capsys.readouterr().out
    assert "fills and drains it every batch" in text and "3 stage(s) on 3 of 4 devices (idle: cpu:0)" in text
    assert main(["place", path, "--solver", "local-search", "--seed", "0"]) == 0
    text = capsys.readouterr().out
    assert "contiguous: no" in text and "not a pipeline" in text
    assert "fills and drains" not in text
