"""``placement run --samples N`` counts samples, as its name says: at a batch size B > 1 it streamed N
batches (N x B samples; the help said "runs of the model", the report "N batches of B samples"). It
now streams N samples in whole batches, N rounded up to a multiple of B with a note; without it, 50
batches as before."""

from __future__ import annotations

import json

import pytest

from placement.cli import build_parser, main
from placement.cli.split_run import DEFAULT_RUNS, runs_for_samples


def test_samples_become_whole_batches():
    assert runs_for_samples(9, 3) == (3, None)
    assert runs_for_samples(50, 1) == (50, None)
    whole = "as the model runs whole batches"
    assert runs_for_samples(10, 3) == (4, f"--samples 10 at batch size 3: 4 batches (12 samples), {whole}")
    assert runs_for_samples(1, 8) == (1, f"--samples 1 at batch size 8: 1 batch (8 samples), {whole}")
    assert runs_for_samples(None, 4) == (DEFAULT_RUNS, None) and DEFAULT_RUNS == 50


def test_the_help_says_samples_in_whole_batches():
    (run,) = [a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
              if "--samples" in a.option_strings]
    assert run.default is None
    assert run.help.startswith("samples to stream, fed in whole batches of the batch size")
    assert "default 50 batches" in run.help


@pytest.fixture(scope="module")
def batch3(tmp_path_factory) -> tuple[str, str]:
    """A small GPT (symbolic batch) placed one device per stage at batch size 3: (model, result)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from graphs.transformer import gpt

    folder = tmp_path_factory.mktemp("batch3")
    model, result = str(folder / "gpt.onnx"), str(folder / "r.json")
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), model)
    assert main(["place", model, "--devices", "cpu:2", "--time-limit", "5", "--batch-size", "3",
                 "--max-replicas", "1", "--out", result]) == 0
    return model, result


def test_run_streams_the_samples_asked_for_at_a_batch_size_above_one(batch3, capsys):
    model, result = batch3
    capsys.readouterr()
    assert main(["run", model, result, "--samples", "6", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert (doc["batch_size"], doc["batches"], doc["samples"]) == (3, 2, 6)  # it streamed 6 batches, 18
    assert doc["replica_samples"] == [[2], [2]]  # batches per replica
    assert "note:" not in out.err
    # a count that is not a whole number of batches: rounded up, and said
    assert main(["run", model, result, "--samples", "4"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("2 batches of 3 samples (6 samples) through 2 stage(s)"), out.out
    assert "note: --samples 4 at batch size 3: 2 batches (6 samples), as the model runs whole" in out.err
    assert "for these 2 batches" in out.out  # the prediction is for what ran
