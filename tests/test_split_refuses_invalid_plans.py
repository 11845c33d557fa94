"""``placement split`` and ``placement run`` cut and run the plan ``placement evaluate`` scores, or refuse
the file as evaluate refuses it: the same ``error:`` line and exit code 2. They checked nothing, so a
hand-edited result was cut by its stale ``operators`` lists, an unknown or missing node, a device count
the cluster lacks, an unknown kind, a data-parallel degree that does not divide the micro-batches, or a
one-device-per-stage result whose ``devices[]`` and ``stages[]`` disagree were split (and run, with no
prediction) with exit 0."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from placement.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> dict:
    """The example model, placed as a stage plan (t4 with d = 2, then a100 with d = 2, 8 micro-batches)
    and one device per stage (t4, then a100)."""
    folder = tmp_path_factory.mktemp("placed")
    model = str(folder / "ex.onnx")
    assert main(["example", model, "--layers", "2"]) == 0
    stages, devices = folder / "r.json", folder / "p1.json"
    assert main(["place", model, "--devices", "a100:2,t4:2,cpu:1", "--out", str(stages),
                 "--time-limit", "20"]) == 0
    assert main(["place", model, "--devices", "a100:1,t4:1,cpu:1", "--max-replicas", "1",
                 "--out", str(devices), "--time-limit", "10"]) == 0
    plan = json.loads(stages.read_text())
    assert [(s["kind"], s["dataParallelDegree"]) for s in plan["stages"]] == [("t4", 2), ("a100", 2)]
    assert plan["problem"]["microbatches"] == 8
    one = json.loads(devices.read_text())
    assert [s["devices"] for s in one["stages"]] == [["t4:0"], ["a100:0"]]
    return {"model": model, "folder": folder, "stages": plan, "devices": one}


def _moved(r: dict) -> dict:
    """Stage 0's last node moved to stage 1 in ``nodes`` and ``TMPCids``, not in ``operators``."""
    s0, s1 = r["stages"]
    x = s0["nodes"].pop()
    s1["nodes"].insert(0, x)
    s1["TMPCids"][x] = s0["TMPCids"].pop(x)
    return r


def _unknown(r: dict) -> dict:
    r["stages"][0]["nodes"].append("bogus/node")
    r["stages"][0]["TMPCids"]["bogus/node"] = "vanilla"
    return r


def _removed(r: dict) -> dict:
    x = r["stages"][0]["nodes"].pop()
    del r["stages"][0]["TMPCids"][x]
    return r


def _four_a100(r: dict) -> dict:
    r["stages"][1].update(dataParallelDegree=4, devices=[f"a100:{i}" for i in range(4)])
    return r


def _v100(r: dict) -> dict:
    r["stages"][1]["kind"] = "v100"
    return r


def _three_microbatches(r: dict) -> dict:
    r["problem"]["microbatches"] = 3
    return r


def _three_replicas(r: dict) -> dict:
    r["stages"][0].update(dataParallelDegree=3, devices=[f"t4:{i}" for i in range(3)])
    return r


def _disagree(r: dict) -> dict:
    """One device per stage: a node moved from the first stage to the second in ``stages[]`` alone."""
    s0, s1 = r["stages"]
    s1["nodes"].append(s0["nodes"].pop())
    return r


#: edits evaluate refuses (exit 2), and the words of its error
REFUSED = {"unknown node": ("stages", _unknown, "unknown node 'bogus/node'"),
           "node in no stage": ("stages", _removed, "1 of its node(s) are in no stage"),
           "unknown kind": ("stages", _v100, "unknown device kind 'v100'"),
           "devices[] and stages[] disagree": ("devices", _disagree, "edit both lists")}
#: edits evaluate scores as invalid (exit 1) and show refuses (exit 2), and the words of show's error
INVALID = {"4 of 2 a100": (_four_a100, "the plan uses 4 a100 devices, there are 2"),
           "d = 2 on 3 micro-batches": (_three_microbatches, "does not divide 3 micro-batches"),
           "d = 3 on 8 micro-batches": (_three_replicas, "data-parallel degree 3 does not divide 8")}


def _write(placed: dict, which: str, edit, name: str) -> str:
    path = placed["folder"] / f"{name.replace(' ', '_').replace('[]', '')}.json"
    path.write_text(json.dumps(edit(json.loads(json.dumps(placed[which])))))
    return str(path)


def _error(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, lines
    return code, lines[0]


def _split_and_run_refuse(placed: dict, path: str, tmp_path, capsys) -> str:
    """The one ``error:`` line split and run both give on ``path`` (exit 2), split writing nothing."""
    out = tmp_path / "s"
    code, split_err = _error(capsys, ["split", placed["model"], path, "--out-dir", str(out)])
    assert code == 2
    assert not os.path.exists(out)  # nothing written, not even the folder
    code, run_err = _error(capsys, ["run", placed["model"], path, "--samples", "1"])
    assert code == 2
    assert run_err == split_err
    return split_err


@pytest.mark.parametrize("name", list(REFUSED))
def test_split_and_run_refuse_what_evaluate_refuses_with_its_error(placed, name, tmp_path, capsys):
    which, edit, words = REFUSED[name]
    path = _write(placed, which, edit, name)
    code, evaluate_err = _error(capsys, ["evaluate", placed["model"], path])
    assert code == 2 and words in evaluate_err
    assert _split_and_run_refuse(placed, path, tmp_path, capsys) == evaluate_err


@pytest.mark.parametrize("name", list(INVALID))
def test_split_and_run_refuse_an_invalid_plan_as_show_does(placed, name, tmp_path, capsys):
    edit, words = INVALID[name]
    path = _write(placed, "stages", edit, name)
    assert main(["evaluate", placed["model"], path]) == 1  # scored, status invalid
    capsys.readouterr()
    code, show_err = _error(capsys, ["show", path, "--no-draw"])
    assert code == 2 and words in show_err
    err = _split_and_run_refuse(placed, path, tmp_path, capsys)
    assert err == show_err  # show names the file too


def test_a_stage_whose_operators_are_stale_is_refused_and_without_them_split_cuts_what_evaluate_scores(
        placed, tmp_path, capsys):
    """A node moved in ``nodes`` alone: evaluate scores the moved plan, split cut the stale
    ``operators`` (25 and 36 operators where evaluate scored 24 and 37). Refused by name; with the
    ``operators`` lists dropped, the split's stages hold the nodes evaluate scores."""
    path = _write(placed, "stages", _moved, "moved")
    err = _split_and_run_refuse(placed, path, tmp_path, capsys)
    assert err == (f"error: {path}: stages[0]: its 'operators' are not the operators of its 'nodes' (edit "
                   f"both, or drop 'operators'): the run splits the operators, the cost model scores the "
                   f"nodes")

    data = json.loads(open(path).read())
    for s in data["stages"]:
        del s["operators"]
    with open(path, "w") as f:
        json.dump(data, f)
    assert main(["evaluate", placed["model"], path, "--json"]) == 0
    scored = [len(s["nodes"]) for s in json.loads(capsys.readouterr().out)["stages"]]
    assert scored == [len(s["nodes"]) for s in data["stages"]]
    assert main(["split", placed["model"], path, "--out-dir", str(tmp_path / "cut")]) == 0
    capsys.readouterr()
    manifest = json.loads((tmp_path / "cut" / "manifest.json").read_text())
    assert [s["nodes"] for s in manifest["submodels"]] == scored


def test_a_plan_that_records_no_problem_is_cut_unchecked_and_says_so(placed, tmp_path, capsys):
    """A stage plan whose ``problem`` section lost its device spec cannot be rebuilt: it is cut as the
    file lists it (as run predicts it from its recorded times), and a note says it was not checked."""
    data = json.loads(json.dumps(placed["stages"]))
    del data["problem"]["devices"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    assert main(["split", placed["model"], str(path), "--out-dir", str(tmp_path / "s")]) == 0
    assert ("note: the plan is not checked against the cost model: its 'problem' section records no device "
            "spec") in capsys.readouterr().out


def test_a_stage_forced_to_a_degree_the_cost_model_does_not_price_is_refused_as_evaluate_refuses_it(
        tmp_path, capsys):
    """A stage forced by hand to t = 2 where the cost model has no variant of its nodes at that degree (cpu
    pays no communication: no tensor-parallel variants): evaluate refuses it, naming the stage, the node
    and the degree, and split and run give its error line and exit code 2, writing nothing (they cut it 2
    ways unscored, with a note that it was not checked)."""
    import onnx

    from graphs.transformer import gpt

    model = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(2, hidden=32, heads=4, seq_len=8, vocab=50, weights="generated"), model)
    res = tmp_path / "r.json"
    assert main(["place", model, "--devices", "cpu:2", "-o", str(res), "--granularity", "layer",
                 "--max-replicas", "2"]) == 0
    data = json.loads(res.read_text())
    for s in data["stages"]:
        s["tensorParallelDegree"], s["dataParallelDegree"] = 2, 1
        del s["devices"]
    res.write_text(json.dumps(data))
    capsys.readouterr()
    code, evaluate_err = _error(capsys, ["evaluate", model, str(res)])
    assert (code, evaluate_err) == (2, f"error: {res}: stages[0]: node embeddings has no variant 'vanilla' "
                                       f"for tensor-parallel degree 2")
    assert _split_and_run_refuse({"model": model}, str(res), tmp_path, capsys) == evaluate_err
