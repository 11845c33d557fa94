"""Every command reads an ONNX file through :func:`graphs.onnx_loader.read_model`; a file that is not a
readable ONNX model is one ``error:`` line naming it (exit 2) on the command line and an
:class:`InputError` naming it from the library, saying what is wrong.

From a new-user review: a model whose external data file (``model.onnx.data``) is missing was "not a
valid ONNX model (truncated or corrupt file?)" wherever the weights are read (split, run, profiling),
and a JSON or text file named ``.onnx`` was "truncated or corrupt" with protobuf's parse error (two
lines for a ``.json`` name). ``calibrate --from-profile`` had its own check of the external data file
(commit 01392c2); it is now ``read_model``'s, for every command. A command that does not read the
weights (place, inspect) still does not need their file (tests/test_onnx_loader.py), and says which
file is missing where the loader needed values from it (a shape tensor).

The small model (tests.onnx_models.small_cnn) keeps three initializers, saved one after the other in
the external data file: conv.w, 4x3x3x3 float32 = 432 bytes at 0..432; conv.b, 4 float32 = 16 bytes at
432..448; fc.w_shape, 2 int64 = 16 bytes at 448..464 (464 bytes in all).
"""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.onnx_loader import load_onnx, read_model
from placement.cli import main
from tests.onnx_models import small_cnn

DATA = "m.onnx.data"
SIZE = 432 + 16 + 16  # conv.w, conv.b, fc.w_shape


def _save_external(folder, name: str = "m.onnx", location: str = DATA) -> str:
    """small_cnn saved in ``folder`` with every initializer in the one external data file ``location``."""
    import onnx

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    onnx.save_model(copy.deepcopy(small_cnn()), path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)
    assert os.path.getsize(os.path.join(folder, location)) == SIZE
    return path


def _errors(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error:")]


def _one_error(capsys, *words: str) -> str:
    errors = _errors(capsys)
    assert len(errors) == 1, errors
    for w in words:
        assert w in errors[0], (w, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def result_file(tmp_path_factory) -> str:
    """A result of ``placement place`` for small_cnn, for ``placement split MODEL RESULT``."""
    import onnx

    folder = tmp_path_factory.mktemp("result")
    model = str(folder / "cnn.onnx")
    onnx.save_model(small_cnn(), model)
    out = str(folder / "cnn.result.json")
    assert main(["place", model, "--devices", "t4:1", "--out", out]) == 0
    return out


# ------------------------------------------------------------------------------- not an ONNX model
def _json_file(path):
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64}))
    return ("JSON text", "model_type", "binary protobuf")


def _text_file(path):
    path.write_text("hello world\nsecond line\n")
    return ("text", "hello world", "binary protobuf")


def _lfs_pointer(path):
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 1234\n")
    return ("Git LFS pointer", "git lfs pull")


def _empty(path):
    path.write_bytes(b"")
    return ("empty",)


def _truncated_protobuf(path):
    data = small_cnn().SerializeToString()
    path.write_bytes(data[: len(data) // 2])  # cut in the middle of the graph
    return ("not a valid ONNX model", "truncated or corrupt")


def _folder(path):
    path.mkdir()
    return ()


BAD = {"json": _json_file, "text": _text_file, "lfs": _lfs_pointer, "empty": _empty,
       "truncated": _truncated_protobuf, "folder": _folder}
OLD_WORDS = {"json", "text", "lfs"}  # the cases whose message was protobuf's "Wire format was corrupt"


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["place", "inspect", "split"])
def test_a_file_that_is_no_onnx_model_is_one_error_line_naming_it(tmp_path, capsys, result_file, case,
                                                                   command):
    path = tmp_path / "x.onnx"
    words = BAD[case](path)
    argv = {"place": ["place", str(path), "--devices", "t4:1"], "inspect": ["inspect", str(path)],
            "split": ["split", str(path), result_file, "--out-dir", str(tmp_path / "stages")]}[command]
    capsys.readouterr()
    assert main(argv) == 2
    line = _one_error(capsys, str(path), *words)
    if case in OLD_WORDS:
        assert "corrupt" not in line and "DecodeError" not in line, line
    assert not (tmp_path / "stages").exists()


@pytest.mark.parametrize("case", sorted(BAD))
def test_place_model_of_a_file_that_is_no_onnx_model_is_an_input_error_naming_it(tmp_path, case):
    import placement

    path = tmp_path / "x.onnx"
    words = BAD[case](path)
    with pytest.raises(InputError) as e:
        placement.place_model(str(path), "t4:1")
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_a_json_file_named_json_is_one_line_too(tmp_path):
    """``onnx.load`` parses a ``.json`` name as ONNX's JSON form: its error was two lines."""
    path = tmp_path / "config.json"
    _json_file(path)
    with pytest.raises(InputError) as e:
        read_model(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "JSON text" in msg and "ParseError" not in msg


def test_a_zip_archive_is_said_to_be_one(tmp_path):
    import zipfile

    path = tmp_path / "model.onnx"
    with zipfile.ZipFile(path, "w") as z:  # as torch.save writes a checkpoint
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(InputError, match="zip archive") as e:
        read_model(path)
    assert str(path) in str(e.value)


def test_a_file_it_may_not_read_is_an_input_error_naming_it(tmp_path, capsys):
    import onnx

    path = tmp_path / "locked.onnx"
    onnx.save_model(small_cnn(), str(path))
    os.chmod(path, 0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("this user reads a file without read permission (root)")
        with pytest.raises(InputError, match="cannot read") as e:
            read_model(path)
        assert str(path) in str(e.value)
        assert main(["inspect", str(path)]) == 2
        _one_error(capsys, str(path), "cannot read")
    finally:
        os.chmod(path, 0o644)


def test_an_unreadable_model_file_is_said_so_whoever_runs(tmp_path, monkeypatch):
    """As the test above, for a user (root) who reads any file: onnx's ``open`` refused."""
    import onnx

    path = str(tmp_path / "locked.onnx")
    onnx.save_model(small_cnn(), path)

    def refuse(f, *args, **kwargs):
        raise PermissionError(13, "Permission denied", f)

    monkeypatch.setattr(onnx, "load", refuse)
    with pytest.raises(InputError) as e:
        read_model(path)
    assert str(e.value) == f"{path}: cannot read: Permission denied"


# ------------------------------------------------------------------------------- external data
def test_a_missing_external_data_file_is_named_where_the_weights_are_read(tmp_path, capsys, result_file):
    import placement

    path = _save_external(tmp_path / "models")
    os.remove(tmp_path / "models" / DATA)
    expected = str(tmp_path / "models" / DATA)
    with pytest.raises(InputError) as e:
        read_model(path, load_external_data=True)
    msg = str(e.value)
    assert msg.startswith(f"{path}: the external data file {DATA} is missing: ")
    assert "'conv.w' and 2 more" in msg and expected in msg
    assert "truncated" not in msg and "corrupt" not in msg
    with pytest.raises(InputError) as e:
        placement.split(path, result_file)
    assert str(e.value) == msg
    capsys.readouterr()
    assert main(["split", path, result_file, "--out-dir", str(tmp_path / "stages")]) == 2
    line = _one_error(capsys, path, f"the external data file {DATA} is missing", expected)
    assert "truncated" not in line and "corrupt" not in line
    assert not (tmp_path / "stages").exists()


def test_place_and_inspect_do_not_need_the_weights_but_name_the_missing_file_they_needed(tmp_path, capsys):
    """Placing reads shapes, not weights: the file is not needed (tests/test_onnx_loader.py). Here it
    also holds fc.w_shape, the shape of the Gemm's weight, so the sizes after it are estimated: the
    warning now says which file is missing and where it was expected."""
    path = _save_external(tmp_path)
    os.remove(tmp_path / DATA)
    g = load_onnx(path)
    said = [w for w in g.warnings if DATA in w]
    assert len(said) == 1 and "is missing" in said[0] and "'fc.w_shape'" in said[0]
    assert str(tmp_path / DATA) in said[0]
    capsys.readouterr()
    assert main(["inspect", path]) == 0
    err = capsys.readouterr().err
    assert f"the external data file {DATA} is missing" in err and "error:" not in err


@pytest.mark.parametrize("keep, first, begin, end, more", [
    (232, "conv.w", 0, 432, 2),  # half of it: conv.w is cut, conv.b and fc.w_shape lie past the end
    (440, "conv.b", 432, 448, 1),  # conv.w whole; conv.b cut, fc.w_shape past the end
    (448, "fc.w_shape", 448, 464, 0),  # only the last tensor lies past the end
])
def test_a_truncated_external_data_file_is_named_with_the_bytes_it_lacks(tmp_path, capsys, result_file,
                                                                          keep, first, begin, end, more):
    import placement

    path = _save_external(tmp_path / "models")
    with open(tmp_path / "models" / DATA, "r+b") as f:
        f.truncate(keep)
    with pytest.raises(InputError) as e:
        read_model(path, load_external_data=True)
    msg = str(e.value)
    assert msg.startswith(f"{path}: the external data file {DATA} is truncated")
    assert f"it holds {keep} bytes, and the model keeps its tensor {first!r} at bytes {begin} to {end}" in msg
    assert (f"({more} more tensors lie past its end too)" in msg) == (more > 0)
    assert str(tmp_path / "models" / DATA) in msg and "corrupt" not in msg
    with pytest.raises(InputError, match="is truncated"):
        placement.split(path, result_file)
    capsys.readouterr()
    assert main(["split", path, result_file, "--out-dir", str(tmp_path / "stages")]) == 2
    _one_error(capsys, path, f"the external data file {DATA} is truncated", f"'{first}'")


def test_an_external_data_file_that_is_a_folder_or_unreadable_is_said_so(tmp_path, monkeypatch):
    path = _save_external(tmp_path / "a")
    os.remove(tmp_path / "a" / DATA)
    os.mkdir(tmp_path / "a" / DATA)
    with pytest.raises(InputError, match=f"the external data file {DATA} is not a file: "):
        read_model(path, load_external_data=True)

    path = _save_external(tmp_path / "b")
    real_access = os.access
    data = str(tmp_path / "b" / DATA)
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: p != data and real_access(p, mode, **kw))
    with pytest.raises(InputError, match=f"the external data file {DATA} cannot be read "
                                         f"\\(permission denied\\)"):
        read_model(path, load_external_data=True)


def test_a_model_with_external_data_loads_from_another_working_directory(tmp_path, monkeypatch, capsys):
    """The data file's location is relative to the model's folder, not to the working directory."""
    from onnx import numpy_helper

    _save_external(tmp_path / "models")
    elsewhere = tmp_path / "work" / "deeper"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    rel = os.path.join("..", "..", "models", "m.onnx")
    model = read_model(rel, load_external_data=True)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    original = {t.name: numpy_helper.to_array(t) for t in small_cnn().graph.initializer}
    assert weights.keys() == original.keys()
    for name, value in original.items():
        np.testing.assert_array_equal(weights[name], value)
    g = load_onnx(rel, batch_size=2)  # fc.w_shape [64, 10] read from the data file
    assert g.warnings == ()
    assert g.parameters == 108 + 4 + 640 + 10  # conv.w, conv.b, fc.w (64 x 10), fc.b
    capsys.readouterr()
    assert main(["place", rel, "--devices", "t4:1", "--out", "r.json"]) == 0
    assert main(["split", rel, "r.json", "--out-dir", "stages"]) == 0
    assert _errors(capsys) == []
    assert os.path.isfile(os.path.join("stages", "manifest.json"))
