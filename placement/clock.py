"""The one clock of a command or a search: a time limit from a start, the caller's ``stop`` (Ctrl-C on
the command line), and what both leave to the step about to run.

``place``, its batch-size sweeps and latency targets, ``frontier`` and ``provision`` each hold one
:class:`Clock`: ``--time-limit`` is the whole command's, from its start (reading the model and loading
the solver's kernels count; numba compiling them on a first run does not, :meth:`Clock.for_solve`). A
search hands each step :meth:`Clock.left` (or a share of it, :meth:`Clock.budget`), ends when
:meth:`Clock.halted` says why, and gives a part of itself to a sub-search with :meth:`Clock.share`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

__all__ = ["Clock", "LEAST_SOLVE_S"]

#: seconds a solve gets where what came before it took the whole limit (the limit itself, if less): it
#: returns what it found by then
LEAST_SOLVE_S = 0.05


def _now() -> float:
    return time.perf_counter()


class Clock:
    """``limit`` seconds (``None`` or inf: none) from ``started`` (``time.perf_counter()``; default now), and
    ``stop`` (a callable, true once the caller wants the work to end; ``None``: never). ``margin``: with
    less than this left no step starts (:meth:`halted`), and a step's :meth:`budget` is at least this.

    Numba compiling a solver's kernels before a solve (:meth:`for_solve`) is not on the clock: the
    deadline moves by the seconds it took (:attr:`compiled`). A solver that took a Ctrl-C itself and
    returned what it had (:meth:`seen`) ends the work as ``stop`` does."""

    def __init__(self, limit: float | None = None, *, started: float | None = None,
                 stop: Callable[[], bool] | None = None, margin: float = 0.0):
        self.limit = None if limit is None or math.isinf(limit) else limit
        self.started = _now() if started is None else started
        self.stop = stop
        self.margin = margin
        self.compiled = 0.0  # numba compiling before a solve: not on the clock
        self.took = False  # a solver took a Ctrl-C (it returned what it had): the work ends
        self.loaded: float | None = None  # seconds from the start to the first solve (compiling left out)
        self.given: float | None = None  # seconds that solve was given
        self.solves = 0  # solves started on this clock (:meth:`solve_limit`)

    @classmethod
    def until(cls, deadline: float | None, stop: Callable[[], bool] | None = None, *,
              margin: float = 0.0) -> Clock:
        """A clock ending at ``deadline`` (``time.perf_counter()``; ``None``: none)."""
        now = _now()
        return cls(None if deadline is None else deadline - now, started=now, stop=stop, margin=margin)

    def deadline(self) -> float | None:
        """The end of the limit on ``time.perf_counter()``'s clock (``None``: none), the compiling before
        a solve added."""
        return None if self.limit is None else self.started + self.compiled + self.limit

    def left(self) -> float | None:
        """Seconds to the deadline, at least 0 (``None``: no limit)."""
        end = self.deadline()
        return None if end is None else max(0.0, end - _now())

    def budget(self, share: float) -> float | None:
        """Seconds for the next step: ``share`` of the time left, at least :attr:`margin` (or what is
        left); ``None`` without a limit."""
        left = self.left()
        return None if left is None else min(left, max(self.margin, share * left))

    def share(self, seconds: float | None) -> Clock:
        """A clock for a part of the work: ``seconds`` from now (``None``: all that is left), never past
        this one's deadline, with the same ``stop`` and margin."""
        left = self.left()
        limit = seconds if left is None else (left if seconds is None else min(left, seconds))
        return Clock(limit, stop=self.stop, margin=self.margin)

    def seen(self, sol):
        """``sol`` (a :class:`~solvers.base.Solution`), noting a Ctrl-C it took
        (:attr:`~solvers.base.Solution.interrupted`): without a ``stop`` that says so (the library's
        calls) the work would go on."""
        self.took = self.took or bool(sol.interrupted)
        return sol

    def interrupted(self) -> bool:
        """A Ctrl-C ended the work: a solver took one (:meth:`seen`), or ``stop`` says so."""
        return self.took or (self.stop is not None and bool(self.stop()))

    def halted(self) -> str:
        """Why the work must end now (``""`` while it may go on): ``"interrupted"`` or ``"time limit
        reached"`` (less than :attr:`margin` left)."""
        if self.interrupted():
            return "interrupted"
        end = self.deadline()
        if end is not None and end - _now() < self.margin:
            return "time limit reached"
        return ""

    def load(self, solver: str | None = None, form: str = "pipeline", *, threads: int | None = None) -> None:
        """Load ``solver``'s (default ``auto``) kernels of ``form`` for ``threads`` (``None``: numba's),
        off the clock where numba compiles them (:func:`solvers.registry.prepare`): a search's first
        solve then neither compiles nor loads on it. Nothing without a limit (a solve loads its own)."""
        if self.limit is None:
            return
        from solvers.kernels import compile_seconds
        from solvers.registry import prepare

        with compile_seconds() as spent:
            prepare(solver, form, threads=threads)
        self.compiled += spent()

    def for_solve(self, solver: str | None = None, form: str = "pipeline", *,
                  threads: int | None = None) -> float | None:
        """The time limit of the solve about to start (``None``: no limit): what is left once the
        solver's kernels are loaded (:meth:`load`), as :meth:`solve_limit` says."""
        self.load(solver, form, threads=threads)
        return self.solve_limit()

    def solve_limit(self) -> float | None:
        """The time limit of a solve that starts now (``None``: no limit): what is left, at least
        :data:`LEAST_SOLVE_S` (or the limit, if less); the first is what :meth:`words` reports."""
        if self.limit is None:
            return None
        given = max(min(LEAST_SOLVE_S, self.limit), self.left())
        self.solves += 1
        if self.given is None:
            self.loaded = _now() - self.started - self.compiled
            self.given = given
        return given

    def credited(self, solution):
        """``solution`` (a :class:`~solvers.base.Solution`) with the compiling before its solve
        (:meth:`for_solve`) in its ``stats["compile_s"]``, which the result and the summary report."""
        if self.compiled <= 0:
            return solution
        stats = dict(solution.stats or {})
        stats["compile_s"] = stats.get("compile_s", 0.0) + self.compiled
        return dataclasses.replace(solution, stats=stats)

    def words(self) -> str:
        """What the limit covered, for a command's summary (``""`` without a limit or before the first
        solve)."""
        if self.given is None:
            return ""
        which = "the first solve" if self.solves > 1 else "the solve"
        return (f"--time-limit {self.limit:g} s is the whole command's: reading the model and loading the "
                f"solver took {self.loaded:.2f} s, {which} was given {self.given:.2f} s")
