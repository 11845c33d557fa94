"""The one clock (placement/clock.py): place's --time-limit is the whole command's, a batch-size sweep's
and a latency target's too. Before, a sweep's limit started at its first solve, after reading the model:
a model that took longer to read than the limit still gave every batch size the whole limit.

Structural checks with a slow step injected (a sleep) and generous margins, not timing benchmarks."""

from __future__ import annotations

import time

import pytest

from placement.clock import LEAST_SOLVE_S, Clock


def test_a_clock_gives_what_is_left_and_says_why_it_halts():
    c = Clock(10.0, started=time.perf_counter() - 4.0, margin=0.5)
    assert 5.9 < c.left() <= 6.0 and 5.9 < c.solve_limit() <= 6.0 and c.halted() == ""
    assert 1.1 < c.budget(0.2) <= 1.2  # a share of what is left
    assert Clock(10.0, started=time.perf_counter() - 9.0, margin=0.5).budget(0.01) == 0.5  # at least
    assert Clock(10.0, started=time.perf_counter() - 9.8, margin=0.5).budget(0.01) <= 0.2  # what is left
    done = Clock(1.0, started=time.perf_counter() - 2.0)
    assert done.left() == 0.0 and done.halted() == "time limit reached"
    assert done.solve_limit() == LEAST_SOLVE_S  # a solve that starts late still gets a little
    assert Clock(0.01, started=time.perf_counter() - 2.0).solve_limit() == 0.01  # never more than the limit
    for none in (None, float("inf")):
        c = Clock(none)
        assert c.left() is None and c.deadline() is None and c.solve_limit() is None and c.budget(0.5) is None
        assert c.halted() == "" and c.words() == ""


def test_compiling_moves_the_deadline_and_a_stop_or_a_solvers_ctrl_c_halts():
    c = Clock(5.0, started=time.perf_counter() - 4.0)
    c.compiled = 3.0  # numba compiling before the solve: not on the clock
    assert 3.9 < c.left() <= 4.0
    hit = []
    s = Clock(None, stop=lambda: bool(hit))
    assert s.halted() == ""
    hit.append(1)
    assert s.halted() == "interrupted" and s.share(1.0).halted() == "interrupted"  # a part stops with it

    class Sol:
        interrupted = True

    t = Clock(None)
    assert t.seen(Sol) is Sol and t.halted() == "interrupted"


def test_a_part_never_outlasts_the_whole():
    c = Clock(2.0)
    assert c.share(10.0).left() <= 2.0 and 0.9 < c.share(1.0).left() <= 1.0
    assert c.share(None).left() <= 2.0 and Clock(None).share(3.0).left() <= 3.0
    assert Clock(None).share(None).left() is None


def test_clock_until_a_deadline():
    end = time.perf_counter() + 3.0
    c = Clock.until(end, margin=0.05)
    assert abs(c.deadline() - end) < 1e-9 and c.margin == 0.05
    assert Clock.until(None).deadline() is None


@pytest.mark.parametrize("model", ["stages", "one device per stage"])
def test_a_sweeps_time_limit_counts_reading_the_model(example_onnx, monkeypatch, capsys, model):
    """Reading the model (made to take 2 s) is past --time-limit 1.5: the first batch size is solved
    with what is left (at least 0.05 s), the others are not tried, and the stopped: line says so.
    Before, the limit started after the reading and every size was tried."""
    import placement.serving as serving
    import placement.serving_stages as serving_stages
    from placement.cli import main

    module, name = (serving_stages, "stage_problem") if model == "stages" else (serving, "batch_workload")
    real = getattr(module, name)
    calls = []

    def slow(*a, **kw):
        if not calls:
            time.sleep(2.0)
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(module, name, slow)
    extra = ["--max-replicas", "1"] if model != "stages" else []
    t0 = time.perf_counter()
    code = main(["place", example_onnx, "--devices", "a100:2", "--batch-size", "1,2,4",
                 "--time-limit", "1.5", *extra])
    out = capsys.readouterr().out
    assert code == 0 and time.perf_counter() - t0 < 30
    assert "time limit reached: batch sizes 2, 4 not tried" in out, out
    assert len(calls) == 1
