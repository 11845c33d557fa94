"""``placement run`` predicts the plan as the result file gives it now: a plan edited by hand (a node moved
to another device, a stage changed) is re-scored by the evaluator, not predicted from the figures the
file recorded for the plan it was written with. The expected figures come from ``placement evaluate`` of
the edited file (a second path through the evaluator), and the streaming chain by hand."""

from __future__ import annotations

import json

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from placement.cli import main  # noqa: E402

N = 2  # runs streamed: few, the measurement is not what these tests check


@pytest.fixture(scope="module")
def gpt_path(tmp_path_factory) -> str:
    from graphs.transformer import gpt

    path = tmp_path_factory.mktemp("gpt") / "gpt.onnx"
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), str(path))
    return str(path)


def _place(path: str, out, capsys, *args: str) -> dict:
    assert main(["place", path, "--time-limit", "5", "--out", str(out), *args]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def _run(path: str, result, capsys, samples: int = N) -> tuple[dict, str]:
    assert main(["run", path, str(result), "--samples", str(samples), "--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def _evaluated(path: str, result, capsys) -> dict:
    assert main(["evaluate", path, str(result), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _chain_ms(loads: list[float], n: int) -> float:
    """Mean time per run of ``n`` runs fed at once through a chain of stages: the first run through them
    all, then one per busiest stage's time."""
    return (sum(loads) + (n - 1) * max(loads)) / n


def test_run_predicts_a_hand_edited_one_device_per_stage_plan_as_edited(gpt_path, tmp_path, capsys):
    """The first operator of the second stage moved onto the first stage's device: run split and ran the
    edited plan but printed the recorded loads of the old one."""
    res = _place(gpt_path, tmp_path / "r.json", capsys, "--devices", "cpu:2", "--max-replicas", "1")
    devs = sorted((d for d in res["devices"] if d["nodes"]), key=lambda d: d["stage"])
    assert len(devs) == 2

    # unedited: the plan's loads are the recorded ones, and nothing is noted
    doc, err = _run(gpt_path, tmp_path / "r.json", capsys)
    recorded = [d["load"] for d in devs]
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(recorded, rel=1e-12)
    assert doc["predicted_steady_ms_per_batch"] == pytest.approx(res["max_load"], rel=1e-12)
    assert "recorded load" not in err and doc["notes"] == []

    edited = json.loads(json.dumps(res))
    first, second = sorted((d for d in edited["devices"] if d["nodes"]), key=lambda d: d["stage"])
    moved = second["nodes"].pop(0)
    first["nodes"].append(moved)
    # devices[] edited alone disagrees with stages[]: refused by name (the edit might be ignored)
    (tmp_path / "e.json").write_text(json.dumps(edited))
    assert main(["evaluate", gpt_path, str(tmp_path / "e.json")]) == 2
    assert f"lists node {moved!r}" in capsys.readouterr().err
    # both lists edited: the placement as edited
    stage_on = {st["devices"][0]: st for st in edited["stages"]}
    stage_on[second["name"]]["nodes"].remove(moved)
    stage_on[first["name"]]["nodes"].append(moved)
    (tmp_path / "e.json").write_text(json.dumps(edited))
    ev = _evaluated(gpt_path, tmp_path / "e.json", capsys)
    assert ev["valid"] and ev["contiguous"]
    now = {d["name"]: d["load"] for d in ev["devices"]}
    loads = [now[first["name"]], now[second["name"]]]
    assert loads != pytest.approx(recorded)  # the edit changed the loads (else this test tests nothing)

    doc, err = _run(gpt_path, tmp_path / "e.json", capsys)
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(loads, rel=1e-9)
    assert doc["predicted_steady_ms_per_batch"] == pytest.approx(ev["max_load"], rel=1e-9)
    assert doc["predicted_ms_per_batch"] == pytest.approx(_chain_ms(loads, N), rel=1e-9)
    assert "as it stands" in doc["predicted_by"]
    for d, load in zip((first, second), loads):
        note = (f"note: the result's recorded load of {d['name']} ({d['load']:.6g} ms) is not its plan's "
                f"({load:.6g} ms): predicted from the plan")
        assert note in err
        assert note.removeprefix("note: ") in doc["notes"]


def test_run_of_a_result_without_front_end_says_it_predicts_from_the_recorded_loads(gpt_path, tmp_path,
                                                                                    capsys):
    """A result that records no front end (an older or hand-written file) cannot be re-scored: run
    predicts from its recorded loads, as before, and says so (it said nothing)."""
    res = _place(gpt_path, tmp_path / "r.json", capsys, "--devices", "cpu:2", "--max-replicas", "1")
    del res["frontend"]
    (tmp_path / "old.json").write_text(json.dumps(res))
    doc, err = _run(gpt_path, tmp_path / "old.json", capsys)
    assert "note: predicted from the result's recorded loads" in err
    assert doc["predicted_by"] == "the result's recorded loads"
    devs = sorted((d for d in res["devices"] if d["nodes"]), key=lambda d: d["stage"])
    recorded = [d["load"] for d in devs]
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(recorded, rel=1e-12)
    assert main(["run", gpt_path, str(tmp_path / "old.json"), "--samples", str(N)]) == 0
    text = capsys.readouterr()
    assert "by the result's recorded loads" in text.out
    assert "predicted from the result's recorded loads" in text.err


@pytest.fixture(scope="module")
def stage_plan(gpt_path, tmp_path_factory) -> tuple[str, dict]:
    """A stage plan at layer granularity, batch 2: stage 0 (embeddings, layer0, layer1) on 2 replicas,
    stage 1 (final_norm, lm_head) on one."""
    out = tmp_path_factory.mktemp("stages") / "s.json"
    assert main(["place", gpt_path, "--devices", "cpu:3", "--granularity", "layer", "--batch-size", "2",
                 "--time-limit", "5", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [s["nodes"][-1] for s in data["stages"]] == ["layer1", "lm_head"]  # the edits below move layer1
    return str(out), data


def _move_layer1(data: dict, *, operators: bool = True) -> dict:
    """``data`` with the layer ``layer1`` moved from stage 0 to the front of stage 1 (its nodes, variant
    and, with ``operators``, its operators), stage 0 left on its replicas."""
    e = json.loads(json.dumps(data))
    s0, s1 = e["stages"]
    s0["nodes"].remove("layer1")
    s1["nodes"].insert(0, "layer1")
    s1["TMPCids"]["layer1"] = s0["TMPCids"].pop("layer1")
    if operators:
        ops = [x for x in s0["operators"] if x.startswith("layer1/")]
        s0["operators"] = [x for x in s0["operators"] if x not in ops]
        s1["operators"] = ops + s1["operators"]
    return e


def test_run_predicts_a_hand_edited_stage_plan_as_edited(gpt_path, stage_plan, tmp_path, capsys):
    """A layer moved from one stage to the next and the first stage's replicas cut from 2 to 1: run
    printed the recorded time per sample of each stage, the old plan's."""
    path, data = stage_plan
    batch = 2
    doc, err = _run(gpt_path, path, capsys)  # unedited: the recorded times, no note
    recorded = [1e3 * batch * s["time_per_sample"] for s in data["stages"]]
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(recorded, rel=1e-12)
    assert "recorded time" not in err and doc["notes"] == []

    e = _move_layer1(data)
    e["stages"][0]["dataParallelDegree"] = 1
    e["stages"][0]["devices"], e["stages"][1]["devices"] = ["cpu:0"], ["cpu:1"]  # numbered again with d
    (tmp_path / "e.json").write_text(json.dumps(e))
    ev = _evaluated(gpt_path, tmp_path / "e.json", capsys)
    assert ev["valid"]
    times = [1e3 * batch * s["time_per_sample"] for s in ev["stages"]]
    assert times[0] != pytest.approx(recorded[0]) and times[1] != pytest.approx(recorded[1])

    doc, err = _run(gpt_path, tmp_path / "e.json", capsys, samples=N * batch)  # N runs of the batch
    assert doc["replicas"] == [1, 1]  # what ran: the edited plan
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(times, rel=1e-9)
    assert doc["predicted_steady_ms_per_batch"] == pytest.approx(1e3 * batch * ev["objective"], rel=1e-9)
    assert doc["predicted_ms_per_batch"] == pytest.approx(_chain_ms(times, N), rel=1e-9)  # d = 1: a chain
    for i, (s, t) in enumerate(zip(data["stages"], times)):
        who = f"stage {i} (cpu:{i})"  # the edited plan's devices
        note = (f"the result's recorded time of {who} ({1e3 * batch * s['time_per_sample']:.6g} ms per batch "
                f"of 2) is not its plan's ({t:.6g} ms per batch of 2): predicted from the plan")
        assert f"note: {note}" in err and note in doc["notes"]


def test_run_refuses_a_stage_whose_nodes_and_operators_disagree(gpt_path, stage_plan, tmp_path, capsys):
    """A layer moved in ``nodes`` but not in ``operators``: the split runs the operators, the evaluator
    would score the nodes, so the file is refused by name (run predicted the recorded times, then ran it
    with no prediction)."""
    path, data = stage_plan
    (tmp_path / "e.json").write_text(json.dumps(_move_layer1(data, operators=False)))
    assert main(["run", gpt_path, str(tmp_path / "e.json"), "--samples", str(N), "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "stages[0]: its 'operators' are not the operators of its 'nodes'" in out.err


def test_run_of_a_stage_plan_that_cannot_be_rebuilt_says_it_predicts_from_the_recorded_times(
        gpt_path, stage_plan, tmp_path, capsys):
    """A stage plan whose ``problem`` section lost its device spec: run predicts from the recorded times
    per sample and says so (it said nothing; reading the file's device rows as the spec would crash)."""
    path, data = stage_plan
    e = json.loads(json.dumps(data))
    del e["problem"]["devices"]  # the front end's devices: the problem cannot be rebuilt
    (tmp_path / "e.json").write_text(json.dumps(e))
    doc, err = _run(gpt_path, tmp_path / "e.json", capsys)
    assert "note: predicted from the result's recorded times per sample: its 'problem' section records no " \
           "device spec" in err
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(
        [2e3 * s["time_per_sample"] for s in data["stages"]], rel=1e-12)
