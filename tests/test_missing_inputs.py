"""A model or result path that names no file, given to ``run``, ``split``, ``evaluate`` or ``show``: one
``error: PATH: no such file`` (or ``is a folder``) line, exit 2, before the file's kind is guessed from
its name (a missing ``nope.onnx`` given as a result was "an ONNX model"); ``split`` leaves no output
folder behind when it fails (a folder that was there before stays); ``show --help`` says that its
front-end options default to what the result records, not to ``place``'s defaults."""

from __future__ import annotations

import os

import pytest

from placement.cli import main

DEVICES = "a100:2,t4:2,cpu:1"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 2-layer model with a stage-plan result and a one-device-per-stage result, a 3-layer model's
    results of both forms (they do not match the first model), missing paths named like a model and
    like a result, and folders named like each."""
    d = tmp_path_factory.mktemp("missing")
    out = {"dir": str(d)}
    for name, layers in (("model", 2), ("other", 3)):
        path = str(d / f"{name}.onnx")
        assert main(["example", path, "--layers", str(layers)]) == 0
        out[name] = path
        out[f"{name}_plan"] = str(d / f"{name}.plan.json")
        out[f"{name}_dev"] = str(d / f"{name}.dev.json")
        assert main(["place", path, "--devices", DEVICES, "--out", out[f"{name}_plan"]]) == 0
        assert main(["place", path, "--devices", DEVICES, "--max-replicas", "1",
                     "--out", out[f"{name}_dev"]]) == 0
    out["result"] = out["model_plan"]
    out["nope_onnx"], out["nope_json"] = str(d / "nope.onnx"), str(d / "nope.json")
    for name in ("models.onnx", "results.json"):
        os.mkdir(d / name)
    out["dir_onnx"], out["dir_json"] = str(d / "models.onnx"), str(d / "results.json")
    return out


def _only_error(capsys) -> str:
    """The one line a refused command printed: on stderr, nothing on stdout, no traceback."""
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and cap.out == "", cap
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), cap.err
    return lines[0]


def _out_dir(files, name: str) -> list[str]:
    return ["--out-dir", os.path.join(files["dir"], name)]


#: per command, (argv, the path said missing): a missing model and a missing result, in the order each
#: command takes (MODEL RESULT) and swapped (run still takes RESULT MODEL; the others say which is which)
MISSING = {
    "run": [(["run", "{model}", "{nope_onnx}"], "nope_onnx"),
            (["run", "{model}", "{nope_json}"], "nope_json"),
            (["run", "{nope_onnx}", "{result}"], "nope_onnx"),
            (["run", "{result}", "{nope_onnx}"], "nope_onnx"),
            (["run", "{nope_json}", "{model}"], "nope_json")],
    "split": [(["split", "{model}", "{nope_onnx}"], "nope_onnx"),
              (["split", "{model}", "{nope_json}"], "nope_json"),
              (["split", "{nope_onnx}", "{result}"], "nope_onnx"),
              (["split", "{result}", "{nope_onnx}"], "nope_onnx"),
              (["split", "{nope_json}", "{model}"], "nope_json")],
    "evaluate": [(["evaluate", "{model}", "{nope_onnx}"], "nope_onnx"),
                 (["evaluate", "{model}", "{nope_json}"], "nope_json"),
                 (["evaluate", "{nope_onnx}", "{result}"], "nope_onnx"),
                 (["evaluate", "{result}", "{nope_onnx}"], "nope_onnx"),
                 (["evaluate", "{nope_json}", "{model}"], "nope_json")],
    "show": [(["show", "{nope_onnx}"], "nope_onnx"),
             (["show", "{nope_json}"], "nope_json"),
             (["show", "{result}", "--workload", "{nope_onnx}", "--no-draw"], "nope_onnx")],
}


@pytest.mark.parametrize("command", sorted(MISSING))
def test_a_missing_model_or_result_is_said_to_be_missing(files, capsys, command):
    """A missing ``nope.onnx`` given as a result was "this is an ONNX model"; given after a result
    (the arguments swapped) "takes MODEL RESULT: the model first", or a deprecation note and then the
    error: now the one line naming the file, whichever its place."""
    capsys.readouterr()
    for argv, missing in MISSING[command]:
        argv = [a.format(**files) for a in argv] + (_out_dir(files, "never") if command == "split" else [])
        assert main(argv) == 2, argv
        assert _only_error(capsys) == f"error: {files[missing]}: no such file", argv
    assert not os.path.exists(os.path.join(files["dir"], "never"))


#: per command, (argv, the folder given): a folder where a model or a result goes, named like either
FOLDERS = {
    "run": [(["run", "{dir_onnx}", "{result}"], "dir_onnx"), (["run", "{model}", "{dir_json}"], "dir_json"),
            (["run", "{model}", "{dir_onnx}"], "dir_onnx")],
    "split": [(["split", "{dir_onnx}", "{result}"], "dir_onnx"),
              (["split", "{model}", "{dir_json}"], "dir_json"),
              (["split", "{model}", "{dir_onnx}"], "dir_onnx")],
    "evaluate": [(["evaluate", "{model}", "{dir_json}"], "dir_json"),
                 (["evaluate", "{model}", "{dir_onnx}"], "dir_onnx"),
                 (["evaluate", "{result}", "{dir_onnx}"], "dir_onnx")],
    "show": [(["show", "{dir_json}"], "dir_json"), (["show", "{dir_onnx}"], "dir_onnx")],
}


@pytest.mark.parametrize("command", sorted(FOLDERS))
def test_a_folder_given_as_a_model_or_result_is_said_to_be_one(files, capsys, command):
    """A folder was "is a directory, not a JSON file", "'DIR' is not an ONNX model (.onnx)" or, named
    like a model, "this is an ONNX model": now ``is a folder``, saying what was expected."""
    capsys.readouterr()
    for argv, folder in FOLDERS[command]:
        argv = [a.format(**files) for a in argv] + (_out_dir(files, "never") if command == "split" else [])
        assert main(argv) == 2, argv
        line = _only_error(capsys)
        assert line.startswith(f"error: {files[folder]}: is a folder; expected "), (argv, line)
    assert not os.path.exists(os.path.join(files["dir"], "never"))


@pytest.mark.parametrize("why, argv", [
    ("missing model", ["split", "{nope_onnx}", "{result}"]),
    ("another model's stage plan", ["split", "{model}", "{other_plan}"]),
    ("another model's one-device-per-stage result", ["split", "{model}", "{other_dev}"]),
])
def test_a_failed_split_leaves_no_folder_it_made(files, tmp_path, capsys, why, argv):
    """``split`` checked (and so made) its output folders before it read the model and matched the
    result to it: a failure left an empty ``--out-dir`` (and the folders above it) behind."""
    capsys.readouterr()
    argv = [a.format(**files) for a in argv]
    out_dir, annotated = tmp_path / "a" / "b" / "stages", tmp_path / "c" / "placed.onnx"
    assert main(argv + ["--out-dir", str(out_dir)]) == 2, why
    _only_error(capsys)
    assert main(argv + ["--out-dir", str(out_dir), "--annotated", str(annotated)]) == 2, why
    _only_error(capsys)
    assert os.listdir(tmp_path) == [], why


@pytest.mark.parametrize("other", ["other_plan", "other_dev"])
def test_a_failed_split_keeps_a_folder_that_was_there(files, tmp_path, capsys, other):
    """Only the folders the failed split made go: an output folder there before it stays, empty or
    not, and so does what is in it."""
    capsys.readouterr()
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    for out_dir in (empty, full):
        assert main(["split", files["model"], files[other], "--out-dir", str(out_dir)]) == 2
        assert "does not match the model" in _only_error(capsys)
    assert empty.is_dir() and os.listdir(empty) == []
    assert os.listdir(full) == ["keep.txt"] and (full / "keep.txt").read_text() == "mine"
    # and the matching result still splits into a folder it makes
    made = tmp_path / "new" / "stages"
    assert main(["split", files["model"], files["model_plan"], "--out-dir", str(made)]) == 0
    assert (made / "manifest.json").is_file()


def _help(command: str) -> str:
    from placement.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return " ".join(sub.choices[command].format_help().split())  # one line: words wrap anywhere


def test_show_help_gives_the_defaults_show_uses():
    """``show --help`` said ``--devices ... (default a100:4,cpu:1)``, ``--costs roofline (default)``,
    ``--batch-size (default 1)``, place's defaults: show re-costs the plan with what the result
    records unless an option is given."""
    text = _help("show")
    assert "a100:4,cpu:1" not in text and "roofline (default)" not in text and "(default 1)" not in text
    assert "default adam" not in text and "place, frontier and provision" not in text
    assert "default: the devices the result records" in text
    assert "default: the cost model the result records" in text
    assert "default: the batch size the result records" in text
    # the other commands keep their own
    for command in ("place", "evaluate"):
        assert "(default a100:4,cpu:1)" in _help(command), command
        assert "roofline (default)" in _help(command), command
