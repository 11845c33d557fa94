"""A progress bar on the stage model: the stage DP and ``auto`` report progress through
``SolveOptions.progress`` (non-decreasing fractions in [0, 1], 1 at the end), the bar changes nothing
in the answer, and ``placement place --progress`` draws it there (no "no bar is drawn" note), and Ctrl-C
still stops the command while it is drawn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from placement.cli import main
from solvers.base import SolveOptions, Status
from solvers.registry import solve
from tests.test_dp_stages import _banded_problem
from tests.test_piper import _tiny

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def problem():
    """22 nodes, edges up to 4 apart: the stage kernel (replicas allowed), its chain pass before the full
    lattice (3,264 ideals), about a second."""
    return _banded_problem(22)


@pytest.mark.parametrize("solver", ["dp", "auto"])
def test_fractions_rise_within_0_and_1_and_end_at_1(problem, solver):
    told: list[float] = []
    sol = solve(problem, solver=solver, options=SolveOptions(progress=told.append))
    assert sol.status is Status.OPTIMAL
    if solver == "dp":
        assert sol.stats["kernel"] == "stage"
    assert len(told) >= 3, told  # between the passes and the phases, not just a final 1
    assert all(0.0 <= f <= 1.0 for f in told), told
    assert all(a <= b for a, b in zip(told, told[1:])), told
    assert told[-1] == 1.0
    assert any(0.0 < f < 1.0 for f in told), told


@pytest.mark.parametrize("solver", ["dp", "auto"])
def test_a_progress_callback_changes_neither_plan_nor_value(problem, solver):
    told: list[float] = []
    with_bar = solve(problem, solver=solver, options=SolveOptions(progress=told.append))
    without = solve(problem, solver=solver, options=SolveOptions(progress=None))
    assert told, "the callback was never called"
    assert with_bar.status is without.status is Status.OPTIMAL
    assert with_bar.objective == without.objective
    assert tuple(with_bar.plan) == tuple(without.plan)


def test_the_registry_says_which_stage_forms_report_progress():
    from solvers.registry import SOLVERS

    assert SOLVERS["dp"].stage_progress and SOLVERS["auto"].stage_progress and SOLVERS["ip"].stage_progress
    assert not SOLVERS["pipedream"].stage_progress


@pytest.fixture(scope="module")
def model(example_onnx):
    return example_onnx


def test_place_draws_a_bar_on_an_onnx_models_stage_model_and_no_note(model, capsys):
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "replicas" in out or "stage" in out
    assert "placing layer nodes [" in err and "100.0%" in err, err
    assert "note: --progress" not in err, err


def test_place_draws_a_bar_on_a_piper_workload(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_tiny()))
    capsys.readouterr()
    assert main(["place", str(path), "--progress", "--solver", "dp"]) == 0
    err = capsys.readouterr().err
    assert "placing [" in err and "100.0%" in err and "note: --progress" not in err, err


def test_a_stage_solver_without_progress_still_says_no_bar_is_drawn(model, capsys):
    capsys.readouterr()
    assert main(["place", model, "--devices", "a100:2", "--progress", "--solver", "pipedream"]) == 0
    err = capsys.readouterr().err
    said = "note: --progress: the pipedream solver reports on the stage model (replicas) no progress"
    assert said in err, err
    assert "placing" not in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a real SIGINT to a child process")
def test_ctrl_c_while_the_stage_bar_is_drawn(tmp_path):
    """SIGINT once the bar is on stderr: the command ends (rc 130 with ``error: interrupted``, or 0 with
    the best plan so far) within seconds, without a traceback."""
    path = str(tmp_path / "m8.onnx")
    assert main(["example", path, "--layers", "8"]) == 0
    out = str(tmp_path / "r.json")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(ROOT)}
    cmd = [sys.executable, "-m", "placement", "place", path, "--devices", "a100:8,t4:8,cpu:1", "--training",
           "--progress", "--out", out]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    end = time.monotonic() + 180
    while time.monotonic() < end and proc.poll() is None and "placing" not in "".join(err):
        time.sleep(0.01)
    assert "placing" in "".join(err), f"no bar drawn before the end; stderr:\n{''.join(err)[-2000:]}"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("no exit within 30 s of Ctrl-C")
    reader.join(5)
    text = "".join(err)
    assert "Traceback" not in text, text[-3000:]
    assert proc.returncode in (0, 130), text[-3000:]
    if proc.returncode == 130:
        assert text.strip().splitlines()[-1] == "error: interrupted", text[-2000:]
    else:
        with open(out, encoding="utf-8") as f:
            assert json.load(f)["status"] in ("optimal", "feasible")
