"""A result file edited by hand is read the one way by every command (a new user's review):

* a stage plan's ``stages[i].devices`` is derived from each stage's kind and degrees (numbered kind by
  kind in stage order, the devices the evaluator scores): a list edited by hand (two stages on one
  device, the stages' devices swapped, a count left behind by an edit of ``d``) was scored on the
  numbering by ``evaluate`` and ``show`` and cut on the list by ``split`` and ``run``; every command
  now refuses it with one error naming the file and ``stages[i].devices``;
* ``show`` says when the file's ``max_load`` is not the plan's, in ``evaluate``'s words, and its "the
  plan is not valid" error names the file;
* a bad field of a stage plan's ``problem`` section (a wrong type, a negative count, an unknown key) is
  an error naming the result file and ``problem.FIELD``, not the model (``batch size must be ...``).
"""

from __future__ import annotations

import json
import os

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.errors import InputError  # noqa: E402
from placement.cli import main  # noqa: E402

#: a hand-written stage plan of the small GPT below: embeddings and layer0 on two replicas, the rest on
#: one, all on cpu; numbered kind by kind in stage order (by hand) stage 0 takes cpu:0 and cpu:1, stage 1
#: cpu:2
HAND = {"schema": "placement-result", "version": 2, "model": "stages", "time_unit": "s",
        "problem": {"devices": "cpu:3", "granularity": "layer", "batch_size": 2, "microbatches": 4},
        "stages": [{"nodes": ["embeddings", "layer0"], "dataParallelDegree": 2, "tensorParallelDegree": 1,
                    "TMPCids": {"embeddings": "vanilla", "layer0": "vanilla"}, "kind": "cpu"},
                   {"nodes": ["layer1", "final_norm", "lm_head"], "dataParallelDegree": 1,
                    "tensorParallelDegree": 1, "kind": "cpu",
                    "TMPCids": {"layer1": "vanilla", "final_norm": "vanilla", "lm_head": "vanilla"}}]}


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> dict:
    """The plan :data:`HAND` written out whole by ``evaluate --out`` (each stage's operators, devices,
    times), and the model it is for."""
    from graphs.transformer import gpt

    folder = tmp_path_factory.mktemp("edits")
    model = str(folder / "gpt.onnx")
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), model)
    hand, full = folder / "hand.json", folder / "plan.json"
    hand.write_text(json.dumps(dict(HAND, workload="gpt.onnx")))
    assert main(["evaluate", model, str(hand), "--out", str(full)]) == 0
    data = json.loads(full.read_text())
    assert [s["devices"] for s in data["stages"]] == [["cpu:0", "cpu:1"], ["cpu:2"]]
    assert all(s.get("operators") for s in data["stages"])
    return {"model": model, "folder": folder, "plan": data}


def _write(placed: dict, name: str, edit) -> str:
    data = json.loads(json.dumps(placed["plan"]))
    edit(data)
    path = placed["folder"] / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _error(capsys, argv: list[str]) -> tuple[int, str]:
    """``main(argv)``'s exit code and its one ``error:`` line (no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, err
    return code, lines[0]


def _every_command_refuses(placed: dict, path: str, tmp_path, capsys) -> str:
    """The one error line evaluate, show, split and run all give on ``path`` (exit 2), split writing
    nothing."""
    model = placed["model"]
    lines = set()
    for argv in (["evaluate", model, path], ["show", path, "--no-draw"],
                 ["split", model, path, "--out-dir", str(tmp_path / "cut")],
                 ["run", model, path, "--samples", "2"]):
        code, line = _error(capsys, argv)
        assert code == 2, (argv, line)
        lines.add(line)
    assert not os.path.exists(tmp_path / "cut")
    assert len(lines) == 1, lines
    return lines.pop()


def _devices_error(path: str, i: int, listed: str, takes: str) -> str:
    return (f"error: {path}: stages[{i}].devices lists {listed}, but the stage takes {takes}: each stage "
            f"takes the next dataParallelDegree x tensorParallelDegree devices of its kind, numbered kind "
            f"by kind in stage order (the devices evaluate scores the plan on and split and run cut it "
            f"for); the list follows from kind and the degrees and is not a choice: write {takes}, or drop "
            f"'devices'")


def _same_device(data: dict) -> None:
    data["stages"][1]["devices"] = ["cpu:1"]  # stage 0's second replica's device


def _swapped(data: dict) -> None:
    data["stages"][0]["devices"], data["stages"][1]["devices"] = ["cpu:1", "cpu:2"], ["cpu:0"]


def _one_replica(data: dict) -> None:
    data["stages"][0]["dataParallelDegree"] = 1  # its list of two left behind


#: hand edits of a stage's devices, and (stage, what it lists, what it takes) by hand
EDITS = {"two stages on one device": (_same_device, 1, "cpu:1", "cpu:2"),
         "devices swapped": (_swapped, 0, "cpu:1, cpu:2", "cpu:0, cpu:1"),
         "d edited, devices left": (_one_replica, 0, "cpu:0, cpu:1", "cpu:0")}


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_stage_devices_list_is_refused_by_every_command_alike(placed, name, tmp_path, capsys):
    edit, i, listed, takes = EDITS[name]
    path = _write(placed, name.replace(" ", "_").replace(",", ""), edit)
    assert _every_command_refuses(placed, path, tmp_path, capsys) == _devices_error(path, i, listed, takes)


@pytest.mark.parametrize("name", list(EDITS))
def test_the_librarys_split_and_annotate_refuse_an_edited_devices_list(placed, name):
    """``placement.split`` and ``placement.annotate`` of the edited result mapping cut and annotated the
    stages on the list (split: a stage on cpu:1 twice, "not one stage of a pipeline")."""
    import re

    import placement

    edit, i, listed, takes = EDITS[name]
    data = json.loads(json.dumps(placed["plan"]))
    edit(data)
    model = onnx.load(placed["model"])
    for fn in (placement.split, placement.annotate):
        with pytest.raises(InputError, match=re.escape(f"stages[{i}].devices lists {listed}, but the stage "
                                                       f"takes {takes}: ")):
            fn(model, data)


def test_without_the_lists_every_command_numbers_the_stages_devices_alike(placed, tmp_path, capsys):
    """The fix the error offers: the lists dropped, evaluate, show and split name the devices of the
    edited plan (stage 0 on one replica now) the same way, numbered kind by kind: cpu:0, then cpu:1."""
    def edit(data: dict) -> None:
        _one_replica(data)
        for s in data["stages"]:
            del s["devices"]

    path = _write(placed, "dropped", edit)
    model = placed["model"]
    capsys.readouterr()
    assert main(["evaluate", model, path, "--json"]) == 0
    assert [s["devices"] for s in json.loads(capsys.readouterr().out)["stages"]] == [["cpu:0"], ["cpu:1"]]
    assert main(["show", path, "--no-draw", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["simulation"]["stages"]
    assert [r["devices"] for r in rows] == [["cpu:0"], ["cpu:1"]]
    assert main(["split", model, path, "--out-dir", str(tmp_path / "cut")]) == 0
    manifest = json.loads((tmp_path / "cut" / "manifest.json").read_text())
    assert [s["replica_devices"] for s in manifest["submodels"]] == [[["cpu:0"]], [["cpu:1"]]]
    assert sorted(os.listdir(tmp_path / "cut"))[-2:] == ["stage0_cpu_0.onnx", "stage1_cpu_1.onnx"]


# ----------------------------------------------------------------------------- show and max_load
_WHY = "with the settings it records (the plan edited, costs re-measured, or another cost model?)"


def _note(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("note: the max-load")]


def test_show_says_when_a_stage_plans_max_load_is_not_the_files_as_evaluate_does(placed, capsys):
    path = placed["folder"] / "plan.json"
    capsys.readouterr()
    assert main(["show", str(path), "--no-draw"]) == 0
    assert _note(capsys.readouterr().err) == []  # unedited: nothing to say
    model = placed["model"]
    path = _write(placed, "max_load", lambda d: d.update(max_load=1e-9))
    assert main(["evaluate", model, path, "--json"]) == 0
    out = capsys.readouterr()
    ms = json.loads(out.out)["objective"] * 1e3  # the plan's time per sample, in ms
    want = f"note: the max-load {ms:.6g} ms per sample is not the file's 1e-06 ms per sample: {_WHY}"
    assert _note(out.err) == [want]
    assert main(["show", path, "--no-draw"]) == 0
    assert _note(capsys.readouterr().err) == [want]


def test_show_says_when_a_one_device_per_stage_max_load_is_not_the_files_as_evaluate_does(placed, tmp_path,
                                                                                         capsys):
    out = tmp_path / "one.json"
    assert main(["place", placed["model"], "--devices", "cpu:2", "--max-replicas", "1", "--batch-size", "2",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    data["max_load"] = 5.0
    out.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["evaluate", placed["model"], str(out), "--json"]) == 0
    res = capsys.readouterr()
    ms = json.loads(res.out)["max_load"]  # ms per run of the batch of 2
    want = f"note: the max-load {ms:.6g} ms per batch of 2 is not the file's 5 ms per batch of 2: {_WHY}"
    assert _note(res.err) == [want]
    assert main(["show", str(out), "--no-draw"]) == 0
    assert _note(capsys.readouterr().err) == [want]


def test_shows_error_on_a_plan_that_is_not_valid_names_the_file(placed, capsys):
    """The stages listed against the data flow (their device lists dropped): evaluate scores the plan
    invalid, show refuses to simulate it, naming the file."""
    def reverse(data: dict) -> None:
        data["stages"].reverse()
        for s in data["stages"]:
            del s["devices"]

    path = _write(placed, "reversed", reverse)
    assert main(["evaluate", placed["model"], path]) == 1
    capsys.readouterr()
    code, line = _error(capsys, ["show", path, "--no-draw"])
    assert code == 2
    assert line.startswith(f"error: {path}: the plan is not valid: edge ")
    assert "goes from stage 1 back to stage 0: the stages are not nested ideals" in line


# ----------------------------------------------------------------------------- the problem section
def _set(key: str, value):
    def edit(data: dict) -> None:
        data["problem"][key] = value
    return edit


def _kind(key: str, value):
    def edit(data: dict) -> None:
        data["problem"]["kinds"][0][key] = value
    return edit


#: bad values of the problem section's fields, and the start of the error after the file's name
BAD = [("batch_size", "4", "problem.batch_size: must be a positive integer"),
       ("batch_size", -2, "problem.batch_size: must be a positive integer"),
       ("batch_size", True, "problem.batch_size: must be a positive integer"),
       ("microbatches", "4", "problem.microbatches: must be a positive integer"),
       ("microbatches", 0, "problem.microbatches: must be a positive integer"),
       ("max_replicas", -1, "problem.max_replicas: must be a positive integer"),
       ("schedule", "fifo", "problem.schedule: must be one of 1f1b, gpipe, pipedream, 2bw"),
       ("devices", 3, "problem.devices: must be a device spec"),
       ("device_files", "cpu.toml", "problem.device_files: must be a list of file paths"),
       ("costs", 5, "problem.costs: must be a cost model's name"),
       ("training", "false", "problem.training: must be true or false"),
       ("optimizer", 1, "problem.optimizer: must be an optimizer's name"),
       ("dims", ["seq"], "problem.dims: must be an object of symbolic input dimensions"),
       ("dims", {"seq": -8}, "problem.dims: must be an object of symbolic input dimensions"),
       ("granularity", 2, "problem.granularity: must be a granularity"),
       ("kinds", "cpu", "problem.kinds: must be a non-empty list of device kinds"),
       ("batchsize", 4, "problem.batchsize: not a field of a stage plan's problem section"),
       ("kinds.count", -3, "problem.kinds[0].count: must be a non-negative integer"),
       ("kinds.memory", "big", "problem.kinds[0].memory: must be a positive number of bytes"),
       ("kinds.speed", 2, "problem.kinds[0].speed: not a field of a device kind")]


@pytest.mark.parametrize("key, value, words", BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_evaluate_names_the_result_file_and_field_of_a_bad_problem_setting(placed, key, value, words,
                                                                          capsys):
    edit = _kind(key.split(".")[1], value) if key.startswith("kinds.") else _set(key, value)
    path = _write(placed, "bad", edit)
    code, line = _error(capsys, ["evaluate", placed["model"], path])
    assert code == 2 and line.startswith(f"error: {path}: {words}"), line
    assert line.endswith(f", got {json.dumps(value)}") or "not a field" in words


def test_a_bad_batch_size_is_named_alike_by_every_command(placed, tmp_path, capsys):
    """A batch size written as a string: the error named the model (``gpt.onnx: batch size must be a
    positive integer, got '2'``), and split and run each said something else."""
    path = _write(placed, "bs_string", _set("batch_size", "2"))
    assert _every_command_refuses(placed, path, tmp_path, capsys) == (
        f"error: {path}: problem.batch_size: must be a positive integer (the samples in one run of the "
        f"model), got \"2\"")


def test_a_problem_section_that_is_not_an_object_is_named_alike_by_every_command(placed, tmp_path, capsys):
    path = _write(placed, "problem_list", lambda d: d.update(problem=[4]))
    assert _every_command_refuses(placed, path, tmp_path, capsys) == (
        f"error: {path}: problem: must be an object (the settings that rebuild the problem), got [4]")


def test_the_library_split_names_a_bad_dims_field(placed):
    """``placement.split`` of a result mapping whose ``problem.dims`` is a list raised AttributeError."""
    import placement

    data = json.loads(json.dumps(placed["plan"]))
    data["problem"]["dims"] = ["seq"]
    with pytest.raises(InputError, match=r"problem\.dims: must be an object of symbolic input dimensions"):
        placement.split(onnx.load(placed["model"]), data)
