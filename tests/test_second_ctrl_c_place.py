"""A second Ctrl-C on ``placement place`` after the first one kept a result: it changes nothing, in every
mode of ``place`` (and in an LLM's ``provision``), as on a Helix cluster file
(tests/test_helix_second_interrupt.py). The first Ctrl-C decides how the command ends: one a search
took gives its result so far (exit 0, written and said interrupted); later ones, while the command ends
with that, are dropped (:func:`placement._interrupt.stopping`).

Was: with a first Ctrl-C taken by the search and a second while ``--out`` was written, the goodput
search, the stage model's place (its operator search cut short: the layer plan kept), the batch-size
sweeps, the one-device-per-stage place and an LLM's provision wrote the file, said interrupted, and
then ended with 130 and ``error: interrupted`` (the output's deferred block delivered the second Ctrl-C
at its end), so that a script read 'interrupted' beside a result file.

A Ctrl-C that comes, with none before it, while a complete result is written still lets it be written
whole and then ends with 130 (:func:`placement.export.emit`): checked here too, on the stage model.

The moments are pinned by a ``sitecustomize``: the first Ctrl-C is a real SIGINT sent by the shared
runner (:func:`tests.pinned_interrupt.ctrl_c_at_marker`) while the search waits at a chosen solve; the
second a real SIGINT the process sends itself as ``--out`` is written. Where the first cannot be pinned
in Python code a search takes it from (one device per stage: in the solvers' own code), the search's
result is made to say it took one ("took"), and the second is the real SIGINT as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from placement.cli import main
from solvers.base import INTERRUPTED
from tests.pinned_interrupt import ROOT, ctrl_c_at_marker
from tests.test_llm_interrupt import MIX, TINY_CONFIG

posix = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process (POSIX)")

# PIN_FIRST = "module:name:N": the N-th call of module.name writes PIN_FILE and waits there for the
# runner's Ctrl-C (raised there, in Python code the search catches); "module:name:N:took": the N-th call's
# result is made to say the solve took a Ctrl-C (a placement's solution, or serving_point's (point,
# solution)). PIN_SECOND = "module:name": its first call once the first Ctrl-C was taken (or at its
# first call, without PIN_FIRST) sends this process a SIGINT, given 0.2 s to land there.
_SITE = r'''
import dataclasses, importlib, os, signal, time

_first = os.environ.get("PIN_FIRST", "")
_second = os.environ.get("PIN_SECOND", "")
_marker = os.environ.get("PIN_FILE", "")
_taken = []
_SAID = "interrupted (Ctrl-C); the best plan so far (not proven optimal)"


def _patch(spec, wrap):
    module, name = spec.split(":")[:2]
    mod = importlib.import_module(module)
    setattr(mod, name, wrap(getattr(mod, name)))


def _said(out):
    if isinstance(out, tuple):  # placement.serving.serving_point: (point, solution)
        return out[0], dataclasses.replace(out[1], message=_SAID)
    return dataclasses.replace(out, solution=dataclasses.replace(out.solution, message=_SAID))


def _first_pin(real):
    parts = _first.split(":")
    n, took, calls = int(parts[2]), parts[3:] == ["took"], []

    def pinned(*args, **kwargs):
        calls.append(1)
        if len(calls) != n:
            return real(*args, **kwargs)
        if took:
            _taken.append("first")
            return _said(real(*args, **kwargs))
        try:  # the runner may send its Ctrl-C as soon as the marker exists: taken here all the same
            with open(_marker, "w") as f:
                f.write("here")
            time.sleep(60)
        except KeyboardInterrupt:
            _taken.append("first")
            raise
        return real(*args, **kwargs)

    return pinned


def _second_pin(real):
    def pinned(*args, **kwargs):
        if (_taken or not _first) and "second" not in _taken:
            _taken.append("second")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        return real(*args, **kwargs)

    return pinned


if _second:
    _patch(_second, _second_pin)
if _first:
    _patch(_first, _first_pin)
'''

WRITE = "placement.export:write_json"  # the second Ctrl-C: as --out is written
SOLVE = "placement.stages:solve_args"  # the stage model's solves (a goodput search's, a stage sweep's)


def _pinned(argv, tmp_path, first: str, second: str = WRITE):
    """The first Ctrl-C a real SIGINT at the moment ``first`` pins, the second at ``second``."""
    marker = tmp_path / "moment"
    rc, out, err, _ = ctrl_c_at_marker(argv, tmp_path, _SITE, marker,
                                       {"PIN_FIRST": first, "PIN_SECOND": second, "PIN_FILE": str(marker)})
    return rc, out, err


def _unpinned(argv, tmp_path, first: str = "", second: str = WRITE):
    """No SIGINT from outside: ``first`` a ``took`` moment (or none), the second a real SIGINT at
    ``second``."""
    (tmp_path / "sitecustomize.py").write_text(_SITE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), PIN_FIRST=first,
               PIN_SECOND=second, PIN_FILE=str(tmp_path / "moment"))
    p = subprocess.run([sys.executable, "-m", "placement", *argv], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr[-3000:]
    return p.returncode, p.stdout, p.stderr


def _kept(rc: int, text: str, err: str, out) -> dict:
    """Exit 0, no ``error: interrupted``, the result written (and said so): the file's document."""
    assert rc == 0, (rc, err[-3000:])
    assert "error: interrupted" not in err, err[-3000:]
    assert f"written to {out}" in text, text[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    """A 2-layer encoder (tests.test_stage_sweep_interrupt's): layer nodes first, refined to operators."""
    path = str(tmp_path_factory.mktemp("second_ctrl_c") / "bert.onnx")
    assert main(["example", path, "--layers", "2"]) == 0
    return path


@pytest.fixture
def llm_files(tmp_path):
    cfg, mix, prices = tmp_path / "config.json", tmp_path / "mix.json", tmp_path / "prices.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    mix.write_text(json.dumps({"buckets": [MIX["buckets"][0]]}))
    prices.write_text(json.dumps({"prices": {"a100": 3.0, "t4": 0.5}}))
    return cfg, mix, prices


@posix
def test_goodput_place_a_second_ctrl_c_as_the_plan_is_written_changes_nothing(tmp_path, llm_files):
    """``place config.json --objective goodput``: the first Ctrl-C as batch size 2 is solved (batch 1's
    plan kept, 2 and 4 not tried), the second as ``--out`` is written: exit 0, the plan written with the
    ``stopped`` line. It ended with 130 after writing the file."""
    cfg, mix, _ = llm_files
    out = tmp_path / "plan.json"
    argv = ["place", str(cfg), "--devices", "a100:2,t4:2", "--objective", "goodput", "--requests", str(mix),
            "--ttft-slo", "1000", "--tpot-slo", "1000", "--batch-size", "1,2,4", "--out", str(out)]
    doc = _kept(*_pinned(argv, tmp_path, f"{SOLVE}:2"), out)
    assert doc["goodput"]["stopped"] == f"{INTERRUPTED}: batch sizes 2, 4 not tried"
    assert [p["batch_size"] for p in doc["goodput"]["sweep"]] == [1] and doc["goodput"]["goodput_rps"] > 0


@posix
def test_llm_provision_a_second_ctrl_c_as_the_mix_is_written_changes_nothing(tmp_path, llm_files):
    """``provision config.json``: the first Ctrl-C as the third batch size's solve starts (the a100's
    capacity that of batch sizes 1 and 2: 2 requests/s served at 3.0 an hour), the second as ``--out``
    is written: exit 0, the mix written, said stopped. It ended with 130 after writing the file."""
    cfg, mix, prices = llm_files
    out = tmp_path / "prov.json"
    argv = ["provision", str(cfg), "--requests", str(mix), "--available", "a100:1", "--prices", str(prices),
            "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "1000", "--out", str(out)]
    doc = _kept(*_pinned(argv, tmp_path, "solvers.registry:solve:3"), out)["provision_buckets"]
    assert doc["stopped"].startswith(INTERRUPTED) and not doc["proven_cheapest"]
    assert doc["cost_per_hour"] == 3.0


@posix
def test_stage_place_a_second_ctrl_c_as_the_layer_plan_is_written_changes_nothing(tmp_path, bert):
    """The stage model's ``place`` (an ONNX model, its default): the first Ctrl-C in the operator
    search (the second solve; the layer plan kept), the second as ``--out`` is written: exit 0, the
    layer plan written, said interrupted. It ended with 130 after writing the file."""
    out = tmp_path / "plan.json"
    argv = ["place", bert, "--devices", "a100:1,t4:1", "--max-replicas", "2", "--out", str(out)]
    rc, text, err = _pinned(argv, tmp_path, f"{SOLVE}:2")
    doc = _kept(rc, text, err, out)
    assert doc["problem"]["granularity"] == "layer" and doc["status"] == "feasible"
    assert "operator granularity interrupted: the layer plan" in doc["message"]


@posix
def test_stage_sweep_a_second_ctrl_c_as_the_plan_is_written_changes_nothing(tmp_path, bert):
    """``place --batch-size 1,2`` on the stage model: the first Ctrl-C in batch 1's operator search
    (its layer plan kept, batch 2 not tried), the second as ``--out`` is written: exit 0, batch 1's plan
    written, the sweep said stopped. It ended with 130 after writing the file."""
    out = tmp_path / "plan.json"
    argv = ["place", bert, "--devices", "a100:1,t4:1", "--batch-size", "1,2", "--out", str(out)]
    doc = _kept(*_pinned(argv, tmp_path, f"{SOLVE}:2"), out)
    sv = doc["serving"]
    assert [s["batch_size"] for s in sv["batch_sizes"]] == [1]
    assert sv["stopped"] == f"{INTERRUPTED}: batch size 2 not tried"


@posix
def test_one_device_per_stage_sweep_a_second_ctrl_c_as_the_plan_is_written_changes_nothing(tmp_path, bert):
    """``place --max-replicas 1 --batch-size 1,2,4`` (one device per stage): batch 2's solve says it
    took a Ctrl-C (its plan kept, batch 4 not tried), the second comes as ``--out`` is written: exit 0,
    the best plan written, the sweep said stopped. It ended with 130 after writing the file."""
    out = tmp_path / "plan.json"
    argv = ["place", bert, "--devices", "a100:1,t4:1", "--max-replicas", "1", "--batch-size", "1,2,4",
            "--out", str(out)]
    doc = _kept(*_unpinned(argv, tmp_path, "placement.serving:serving_point:2:took"), out)
    sv = doc["serving"]
    assert [s["batch_size"] for s in sv["batch_sizes"]] == [1, 2]
    assert sv["stopped"] == f"{INTERRUPTED}: batch size 4 not tried"


@posix
def test_one_device_per_stage_place_a_second_ctrl_c_as_the_plan_is_written_changes_nothing(tmp_path, bert):
    """``place --max-replicas 1`` (one device per stage): the solve says it took a Ctrl-C (its best
    placement kept), the second comes as ``--out`` is written: exit 0, the placement written, said
    interrupted. It ended with 130 after writing the file."""
    out = tmp_path / "plan.json"
    argv = ["place", bert, "--devices", "a100:1,t4:1", "--max-replicas", "1", "--out", str(out)]
    doc = _kept(*_unpinned(argv, tmp_path, "placement.api:place:1:took"), out)
    assert doc["message"].startswith(INTERRUPTED)


@posix
def test_one_ctrl_c_while_a_complete_plan_is_written_still_ends_130_with_the_file(tmp_path, bert):
    """No Ctrl-C before: one as the stage model's complete plan is written lets it be written whole, then
    the command ends with 130 and ``error: interrupted`` (unchanged)."""
    out = tmp_path / "plan.json"
    argv = ["place", bert, "--devices", "a100:1,t4:1", "--max-replicas", "2", "--out", str(out)]
    rc, text, err = _unpinned(argv, tmp_path)
    assert rc == 130 and err.strip().splitlines()[-1] == "error: interrupted", (rc, err[-3000:])
    doc = json.loads(out.read_text())
    assert INTERRUPTED not in (doc.get("message") or "") and doc["valid"]
