"""``solvers.registry.prepare`` (the kernels loaded before a caller's clock starts) leaves out the
multi-threaded DP kernels (``*_parallel``, 5-8 s to compile cold on 2 cores) when the solve runs on one
thread, by the same rule as the warm-up inside :func:`solvers.registry.solve`: before, ``prepare``
compiled them whatever the thread count, so ``--threads 1 --time-limit ...`` paid for kernels it never
ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numba
import pytest

from solvers import kernels, registry
from solvers.base import SolveOptions

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture
def warmed(monkeypatch) -> list[tuple[tuple[str, ...], bool]]:
    """Each call of :func:`solvers.kernels.warm` as ``(kernels, parallel)``, compiling nothing."""
    calls: list[tuple[tuple[str, ...], bool]] = []

    def record(names, *, load: bool = False, parallel: bool = True) -> None:
        assert load
        calls.append((tuple(names), parallel))

    monkeypatch.setattr(kernels, "warm", record)
    return calls


def _through_prepare(threads: int | None) -> None:
    registry.prepare("dp", threads=threads)


def _through_solve_warm_up(threads: int | None) -> None:
    registry._warm_before_the_clock(("solvers.dp",), SolveOptions(time_limit=1.0, threads=threads))


@pytest.mark.parametrize("entry", [_through_prepare, _through_solve_warm_up], ids=["prepare", "solve"])
@pytest.mark.parametrize(("threads", "numba_threads", "parallel"), [
    (1, 4, False),  # held to one thread: numba's own count does not matter
    (2, 1, True),
    (8, 4, True),
    (None, 1, False),  # None: numba's NUMBA_NUM_THREADS
    (None, 4, True),
])
def test_the_multi_threaded_kernels_are_warmed_only_for_more_than_one_thread(
        warmed, monkeypatch, entry, threads, numba_threads, parallel):
    """``prepare(threads=...)`` and the solve's own warm-up ask :func:`solvers.kernels.warm` for the
    ``*_parallel`` kernels exactly when the solve runs on more than one thread."""
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", numba_threads)
    entry(threads)
    assert warmed == [(("solvers.dp",), parallel)]


@pytest.mark.parametrize(("solver", "form", "modules"), [
    ("auto", "stages", ("solvers.dp_stages", "solvers.dp")),
    ("dp", "pipeline", ("solvers.dp",)),
])
def test_prepare_passes_threads_in_either_form(warmed, solver, form, modules):
    """The stage form (``serving_stages``' sweep, ``place`` on the stage model) as the pipeline form."""
    registry.prepare(solver, form, threads=1)
    registry.prepare(solver, form, threads=3)
    assert warmed == [(modules, False), (modules, True)]


def test_prepare_warms_nothing_for_a_solver_without_kernels(warmed):
    registry.prepare("single", threads=1)
    assert warmed == []


_COLD_PREPARE = """
import json

from solvers import dp
from solvers.registry import prepare

parallel = ("_dp_chunk_parallel", "_tie_chunk_parallel")
serial = ("_dp_chunk", "_tie_chunk", "_dp_ideal")


def compiled(names):
    return {n: len(getattr(dp, n).overloads) for n in names}


prepare("dp", threads=1)
print("ONE", json.dumps([compiled(serial), compiled(parallel)]))
prepare("dp", threads=2)
print("TWO", json.dumps([compiled(serial), compiled(parallel)]))
"""


@pytest.mark.parametrize("cache", ["shared", pytest.param("empty", marks=pytest.mark.slow)])
def test_prepare_on_one_thread_compiles_no_multi_threaded_kernel(tmp_path, cache):
    """``prepare("dp", threads=1)`` gives the DP's serial kernels machine code and none of its
    ``*_parallel`` ones (numba's dispatchers hold none for them); ``threads=2`` then gives them theirs.

    ``empty`` (slow): with an empty numba cache, so "gives" is "compiles", about 20 s on 2 cores (10 s of
    it the multi-threaded kernels). ``shared`` (default run): numba's cache of the test run (``__pycache__``
    or ``NUMBA_CACHE_DIR``), which the solves of earlier tests have usually filled, so "gives" is mostly
    "loads", well under a second; ``prepare`` on one thread that still asked for the parallel kernels
    loads them, and fails the first assertion just the same (a cold cache compiles, as ``empty``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if cache == "empty":
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_COLD_PREPARE)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = {word: json.loads(rest) for word, _, rest in (s.partition(" ") for s in r.stdout.splitlines())
            if word in ("ONE", "TWO")}
    serial = {"_dp_chunk": 1, "_tie_chunk": 1, "_dp_ideal": 1}
    assert seen["ONE"] == [serial, {"_dp_chunk_parallel": 0, "_tie_chunk_parallel": 0}], r.stdout
    assert seen["TWO"] == [serial, {"_dp_chunk_parallel": 1, "_tie_chunk_parallel": 1}], r.stdout
