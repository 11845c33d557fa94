"""The default thread count leaves the cores that other work keeps busy (solvers/_cpu.py)."""

from __future__ import annotations

import os

import pytest

from solvers import _cpu


@pytest.mark.parametrize("cores, readings, want", [
    (2, [1, 1, 1], 2),  # only this reader runs: both cores free
    (2, [3, 2, 3], 1),  # one other runnable thread at the quietest reading: one core left
    (2, [6, 5, 7], 1),  # more work than cores: never below one
    (8, [4, 9, 4], 5),  # a passing burst (9) is not load: the fewest seen counts
])
def test_idle_cores(monkeypatch, cores, readings, want):
    it = iter(readings)
    monkeypatch.setattr(_cpu, "usable_cores", lambda: cores)
    monkeypatch.setattr(_cpu, "_running", lambda: next(it))
    assert _cpu.idle_cores(samples=len(readings), interval=0) == want


def test_without_proc_loadavg_every_core_is_used(monkeypatch):
    monkeypatch.setattr(_cpu, "usable_cores", lambda: 4)
    monkeypatch.setattr(_cpu, "_running", lambda: None)
    assert _cpu.idle_cores() == 4


def test_the_dp_default_follows_the_idle_cores(monkeypatch):
    from numba import config

    from solvers import dp

    monkeypatch.setattr(_cpu, "idle_cores", lambda *a, **k: 1)
    assert dp._thread_count(None, 10**6) == 1
    assert dp._thread_count(2, 10**6) == min(2, config.NUMBA_NUM_THREADS)  # an explicit count stands


def test_the_command_line_lets_openmp_threads_sleep_and_the_library_does_not(monkeypatch):
    """OMP_WAIT_POLICY=PASSIVE is a process setting: the command line sets it for its own process (unless
    the environment gives one), a library import never does."""
    import subprocess
    import sys

    from placement.cli import main

    monkeypatch.setenv("OMP_WAIT_POLICY", "unset")  # recorded, so the test's changes are undone after it
    monkeypatch.delenv("OMP_WAIT_POLICY")
    code = "import os, placement, solvers.dp; print(os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
    assert main(["--version"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice stands
    assert main(["--version"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
