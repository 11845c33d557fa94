"""Each file a command writes says what it is, and the commands that read results name it: an LLM
``provision --out`` file carries ``"schema": "placement-provision"`` and is refused by name by
``evaluate``, ``show``, ``split`` and ``run``; and ``evaluate``'s note on a max-load that is not the
file's names the unit and the setting given on the command line that made it differ."""

from __future__ import annotations

import json

import pytest

from placement.cli import main
from tests.test_evaluate_inputs import _one_error  # one error line naming every word
from tests.test_llm_goodput import TINY_CONFIG


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small CNN (symbolic batch), an LLM model config, its provisioning file (--out), and the CNN
    placed at batch 8 on the stage model and with one device per stage."""
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    d = tmp_path_factory.mktemp("kinds")
    cnn = str(save(small_cnn(), d / "cnn.onnx"))
    cfg, mix, prices, prov = (str(d / n) for n in ("config.json", "mix.json", "prices.json", "prov.json"))
    with open(cfg, "w") as f:
        json.dump(TINY_CONFIG, f)
    with open(mix, "w") as f:
        json.dump({"buckets": [{"input": 64, "output": 16, "weight": 1}]}, f)
    with open(prices, "w") as f:
        json.dump({"prices": {"a100": 3.0}}, f)
    assert main(["provision", cfg, "--requests", mix, "--available", "a100:1", "--prices", prices,
                 "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "100", "--time-limit", "20",
                 "--out", prov]) == 0
    out = {"cnn": cnn, "cfg": cfg, "mix": mix, "prices": prices, "prov": prov}
    for name, model in (("stages", []), ("pipeline", ["--max-replicas", "1"])):
        out[name] = str(d / f"{name}.json")
        assert main(["place", cnn, "--devices", "a100:1,t4:1", "--batch-size", "8", *model,
                     "--out", out[name]]) == 0
    return out


def test_the_llm_provision_file_says_what_it_is(files, tmp_path, capsys):
    """It had no schema, so that nothing could tell it from another file (the ONNX provisioning's is a
    placement result with a ``provision`` section already)."""
    with open(files["prov"]) as f:
        doc = json.load(f)
    assert doc["schema"] == "placement-provision" and doc["version"] == 1
    assert doc["provision_buckets"]["cost_per_hour"] > 0
    # the file of a provisioning that found no mix (the time limit past before any type was scored)
    none = tmp_path / "none.json"
    assert main(["provision", files["cfg"], "--requests", files["mix"], "--available", "a100:1", "--prices",
                 files["prices"], "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "100",
                 "--time-limit", "1e-9", "--out", str(none)]) == 1
    capsys.readouterr()
    doc = json.loads(none.read_text())
    assert doc["schema"] == "placement-provision" and doc["provision_buckets"]["cost_per_hour"] is None


@pytest.mark.parametrize("argv", [["evaluate", "{cfg}", "{prov}"], ["show", "{prov}", "--no-draw"],
                                  ["split", "{cnn}", "{prov}"], ["run", "{cnn}", "{prov}"]],
                         ids=["evaluate", "show", "split", "run"])
def test_the_llm_provision_file_is_refused_by_name(files, capsys, argv):
    """evaluate said "a plan needs a 'stages' list", show, split and run "not a placement result"."""
    capsys.readouterr()
    assert main([a.format(**files) for a in argv]) == 2
    _one_error(capsys, f"{files['prov']}: this is an LLM provisioning", "placement provision",
               f"placement {argv[0]} takes a result file")


#: the note's words for each model: the file's max-load and its unit
RECORDED = {"pipeline": "ms per batch of 8", "stages": "ms per sample"}


def _notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]


@pytest.mark.parametrize("model", ["stages", "pipeline"])
def test_the_evaluate_note_names_the_setting_that_changed_and_the_unit(files, capsys, model):
    """With one device per stage the note guessed "costs re-measured, or another cost model?", with no
    unit, where --batch-size 1 had changed it; a stage plan was re-scored at batch 1 without a word."""
    capsys.readouterr()
    assert main(["evaluate", files["cnn"], files[model], "--batch-size", "1"]) == 0
    notes = _notes(capsys)
    assert len(notes) == 1, notes
    assert RECORDED[model] in notes[0] and "evaluated at --batch-size 1, the file records batch 8" in notes[0]
    assert "re-measured" not in notes[0]
    if model == "pipeline":
        assert "ms per batch of 1" in notes[0]  # the value now, in its own unit
    # the recorded settings, or the same devices in another order (the same value): no note
    for same in ([], ["--batch-size", "8"], ["--devices", "a100:1,t4:1"], ["--devices", "t4:1, a100:1"]):
        assert main(["evaluate", files["cnn"], files[model], *same]) == 0
        assert _notes(capsys) == [], same


def test_the_evaluate_note_guesses_re_measured_costs_only_when_no_setting_changed(files, tmp_path, capsys):
    """A file whose max-load is not what its own settings give now: the costs, said with the unit."""
    with open(files["pipeline"]) as f:
        doc = json.load(f)
    doc["max_load"] *= 2
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["evaluate", files["cnn"], str(edited)]) == 0
    notes = _notes(capsys)
    assert len(notes) == 1 and "ms per batch of 8" in notes[0] and "costs re-measured" in notes[0], notes
    assert "evaluated at" not in notes[0]
