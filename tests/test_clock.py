"""The one clock (placement/clock.py): place's --time-limit is the whole command's, a batch-size sweep's
and a latency target's too. Before, a sweep's limit started at its first solve, after reading the model:
a model that took longer to read than the limit still gave every batch size the whole limit.

Structural checks with a slow step injected (a sleep) and generous margins, not timing benchmarks."""

from __future__ import annotations

import os
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
    """Reading the model (made to take 1 s) is past --time-limit 0.5: the first batch size is solved
    with what is left (at least 0.05 s), the others are not tried, and the stopped: line says so.
    Before, the limit started after the reading and every size was tried. (2 s past 1.5 before: what
    counts is only that the reading outlasts the limit.)"""
    import placement.serving as serving
    import placement.serving_stages as serving_stages
    from placement.cli import main

    module, name = (serving_stages, "stage_problem") if model == "stages" else (serving, "batch_workload")
    real = getattr(module, name)
    calls = []

    def slow(*a, **kw):
        if not calls:
            time.sleep(1.0)
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(module, name, slow)
    extra = ["--max-replicas", "1"] if model != "stages" else []
    t0 = time.perf_counter()
    code = main(["place", example_onnx, "--devices", "a100:2", "--batch-size", "1,2,4",
                 "--time-limit", "0.5", *extra])
    out = capsys.readouterr().out
    assert code == 0 and time.perf_counter() - t0 < 30
    assert "time limit reached: batch sizes 2, 4 not tried" in out, out
    assert len(calls) == 1


COMPILE_S, LIMIT_S = 1.0, 0.9  # the compiling outlasts the limit


@pytest.mark.parametrize("command", ["frontier", "provision"])
def test_frontier_and_provision_leave_compiling_off_their_clock(example_onnx, monkeypatch, capsys, command):
    """numba compiling the solvers' kernels (a first run: a minute on 2 cores) ate frontier's and
    provision's --time-limit: the search found nothing. The kernels are now loaded before the search,
    and compiling them moves the deadline (as place's). Compiling made to take COMPILE_S here (a sleep
    counted as numba's), past --time-limit LIMIT_S (2 s past 1.5 before): the deadline is the limit after
    it, and the search finds a point."""
    import contextlib

    import solvers.kernels as kernels
    import solvers.registry as registry
    from placement.cli import main

    @contextlib.contextmanager
    def compiling():
        t0 = time.perf_counter()
        yield lambda: time.perf_counter() - t0

    import placement.cli.serving as serving_commands

    monkeypatch.setattr(kernels, "compile_seconds", compiling)
    monkeypatch.setattr(registry, "prepare", lambda *a, **k: time.sleep(COMPILE_S))
    real, seen = serving_commands._loaded, []

    def loaded(args, clock):
        seen.append((real(args, clock), clock.started))
        return seen[-1][0]

    monkeypatch.setattr(serving_commands, "_loaded", loaded)
    if command == "frontier":
        args = ["frontier", example_onnx, "--devices", "a100:2", "--max-replicas", "1"]
    else:
        args = ["provision", example_onnx, "--available", "a100:2", "--max-replicas", "1",
                "--target-throughput", "1", "--prices", "", "--json"]
    if command == "provision":
        prices = os.path.join(os.path.dirname(example_onnx), "prices.toml")
        with open(prices, "w") as f:
            f.write("[prices]\na100 = 1.0\n")
        args[args.index("--prices") + 1] = prices
    assert main([*args, "--time-limit", str(LIMIT_S)]) == 0
    out = capsys.readouterr().out
    (deadline, started), = seen
    assert deadline - started >= COMPILE_S + LIMIT_S - 1e-6  # the limit after the compiling
    if command == "frontier":
        assert "found: batch 1:" in out, out
    else:
        assert '"count"' in out or "a100" in out, out


def test_a_frontier_whose_loading_took_the_limit_still_gives_its_throughput_end(example_onnx, capsys):
    """`frontier --time-limit 1.5` on a 2-layer model printed no point at all (loading the model and the
    kernels took the limit, and the search stopped before the DP's first run, which takes milliseconds).
    As place's solve, the first batch size's throughput end is now always sought (with at least 0.05 s),
    and given, not proven, where the time ran out."""
    from placement.cli import main

    assert main(["frontier", example_onnx, "--devices", "a100:2", "--max-replicas", "1", "--time-limit",
                 "0.01"]) == 0
    out = capsys.readouterr().out
    assert "found: batch 1:" in out and "time limit reached" in out, out
    assert main(["frontier", example_onnx, "--devices", "a100:2", "--max-replicas", "2", "--time-limit",
                 "0.01", "--batch-size", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "found: batch 1:" in out and "found: batch 2:" not in out, out


def _spent_before_the_solve(out: str) -> float:
    words = out.split("reading the model and loading the solver took ", 1)
    assert len(words) == 2, out
    return float(words[1].split(" s", 1)[0])


def test_place_counts_its_time_limit_from_the_commands_first_line(example_onnx, capsys):
    """--time-limit is the whole command's. The clock started in `place`'s own code, after Python had
    imported the command line and parsed the options (0.7-0.9 s on 2 busy cores), so `--time-limit 3`
    took 4.1-4.3 s of wall clock. It now starts where the command starts (``main(started=...)``): a
    start 100 s ago leaves the solve nothing but its least share."""
    from placement.cli import main

    code = main(["place", example_onnx, "--devices", "a100:2", "--max-replicas", "1", "--time-limit", "30"],
                started=time.perf_counter() - 100)
    out = capsys.readouterr().out
    assert code == 0 and _spent_before_the_solve(out) >= 100
    assert f"the solve was given {LEAST_SOLVE_S:.2f} s" in out, out


def test_the_console_script_starts_the_clock_on_its_first_line(example_onnx):
    """The console entry point (``placement``, ``python -m placement``) hands the command the time of its
    own first line: made 100 s earlier here, the command sees those 100 s as spent."""
    import subprocess
    import sys

    code = ("import sys, placement._console as c; c._STARTED -= 100; "
            f"sys.argv = ['placement', 'place', {example_onnx!r}, '--devices', 'a100:2', "
            "'--max-replicas', '1', '--time-limit', '30']; c.main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _spent_before_the_solve(proc.stdout) >= 100


def test_a_library_solve_that_compiles_says_so_on_its_logger(caplog):
    """A cold kernel cache made a library call wait minutes without a word (the command line's note is
    the command line's). The solve wrapper now logs it, at INFO on the ``solvers`` logger, when numba
    starts compiling, and how long it took; nothing is printed. A fresh jitted function stands for a
    kernel not yet in the cache."""
    import logging

    import numba

    import solvers.registry as registry

    @numba.njit(cache=False)
    def fresh(x):
        return x + 1

    with caplog.at_level(logging.INFO, logger="solvers"):
        with registry._compiling(True) as spent:
            assert fresh(1) == 2
    said = [r.getMessage() for r in caplog.records if r.name == "solvers"]
    assert said[0] == registry.COMPILING and said[1].startswith("compiled the solvers' kernels in ")
    assert spent() > 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="solvers"):
        with registry._compiling(True):
            assert fresh(2) == 3  # compiled already: nothing to say
    assert not [r for r in caplog.records if r.name == "solvers"]
