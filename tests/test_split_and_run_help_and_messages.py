"""``split`` and ``run``'s help and messages, as a new user read them: ``--seed`` gave no default,
``--samples 0`` said "--samples and --threads must be at least 1" (which?), ``--tolerance inf`` said
"must be a non-negative number, got inf" (it is one: it must be finite), and ``run --dim foo=3`` on a
model without a dimension ``foo`` said it was "placed with foo not given" (it now warns that the model
has no such dimension, listing those it has, and ignores it, as docs/cli.md says of such a --dim)."""

from __future__ import annotations

import json

import pytest

from placement.cli import build_parser, main


def _help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return " ".join(sub.choices[command].format_help().split())  # one line: words wrap anywhere


@pytest.mark.parametrize("command", ["split", "run"])
def test_the_seed_help_states_its_default(command):
    text = _help(command)
    seed = text[text.index("--seed SEED "):]
    assert "(default 0)" in seed[:120], seed[:120]


@pytest.mark.parametrize("flag", ["--samples", "--threads"])
def test_run_names_the_count_that_is_below_one(tmp_path, capsys, flag):
    model, result = tmp_path / "m.onnx", tmp_path / "r.json"
    model.write_bytes(b"")
    result.write_text("{}")
    assert main(["run", str(model), str(result), flag, "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: placement run: {flag} must be at least 1, got 0"


def test_split_says_the_tolerance_must_be_finite(tmp_path, capsys):
    assert main(["split", str(tmp_path / "m.onnx"), str(tmp_path / "r.json"), "--verify",
                 "--tolerance", "inf"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --tolerance must be a finite non-negative number, "
                                               "got inf")


def test_run_says_the_model_has_no_such_dimension(tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    model, result = str(tmp_path / "ex.onnx"), str(tmp_path / "r.json")
    assert main(["example", model, "--layers", "1"]) == 0
    assert main(["place", model, "--devices", "cpu:2", "--out", result, "--time-limit", "10"]) == 0
    assert json.loads(open(result).read())["problem"]["dims"] is None
    capsys.readouterr()
    assert main(["run", model, result, "--dim", "foo=3", "--samples", "1"]) == 0
    err = capsys.readouterr().err
    assert "placed with foo not given" not in err
    assert "warning: --dim foo: no input of the model has such a dimension (batch); ignored" in err
