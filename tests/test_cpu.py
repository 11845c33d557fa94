"""The default thread count leaves the cores that other work keeps busy (solvers/_cpu.py)."""

from __future__ import annotations

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
