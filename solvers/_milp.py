"""Mixed-integer programs as arrays, and the two ways to solve them: HiGHS directly, or through PuLP.

A :class:`MilpModel` is built in blocks of numpy arrays (``add_cols`` / ``add_rows`` with coordinate
triplets), never one expression at a time: at 100k rows that is what keeps building cheap. It is then
handed to HiGHS in one ``passModel`` call (column-wise sparse matrix), or, for users of CBC, Gurobi or
CPLEX, rebuilt as a PuLP problem.

Both backends answer with a :class:`MipResult` that says what the solver actually proved: ``optimal``
only when the solver closed the gap it was given, ``time limit`` with the incumbent, its bound and gap
otherwise, ``infeasible`` when proven so. (PuLP's summary status calls a time-limited incumbent
"Optimal"; the solution status and the solver's own bound are read instead.)
"""

from __future__ import annotations

import _thread
import math
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix

from graphs.errors import InputError

from .base import BACKENDS, BOUND_TOLERANCE_REL, DEFAULT_BACKEND, INTERRUPTED, ProgressTeller, check_bound

__all__ = ["MilpModel", "MipResult", "solve_mip", "BACKENDS"]

INF = math.inf

OPTIMAL = "optimal"
TIME_LIMIT = "time limit"
INFEASIBLE = "infeasible"
ERROR = "error"


class MilpModel:
    """minimise ``cost · x`` subject to ``row_lo <= A x <= row_hi``, ``col_lo <= x <= col_hi`` and
    integrality, assembled from blocks of arrays."""

    def __init__(self) -> None:
        self._cols: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []
        self._coo: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.num_cols = 0
        self.num_rows = 0

    def add_cols(self, n: int, *, lb=0.0, ub=1.0, integer: bool = False, cost=0.0) -> np.ndarray:
        """Add ``n`` columns; returns their indices. ``lb``, ``ub``, ``cost`` are scalars or arrays."""
        n = int(n)
        idx = np.arange(self.num_cols, self.num_cols + n, dtype=np.int64)
        self._cols.append((np.broadcast_to(np.asarray(lb, float), (n,)).copy(),
                           np.broadcast_to(np.asarray(ub, float), (n,)).copy(),
                           np.broadcast_to(np.asarray(cost, float), (n,)).copy(),
                           np.full(n, bool(integer))))
        self.num_cols += n
        return idx

    def tighten(self, cols, *, lb=None, ub=None) -> None:
        """Raise lower bounds / lower upper bounds of existing columns (never loosen them)."""
        if len(self._cols) > 1:
            self._cols = [tuple(np.concatenate(p) for p in zip(*self._cols))]
        clb, cub = self._cols[0][0], self._cols[0][1]
        cols = np.asarray(cols, np.int64)
        if lb is not None:
            clb[cols] = np.maximum(clb[cols], lb)
        if ub is not None:
            cub[cols] = np.minimum(cub[cols], ub)

    def set_cost(self, cols, cost) -> None:
        """Replace the objective coefficients of existing columns."""
        if len(self._cols) > 1:
            self._cols = [tuple(np.concatenate(p) for p in zip(*self._cols))]
        self._cols[0][2][np.asarray(cols, np.int64)] = cost

    def add_rows(self, lo, hi, rows, cols, vals) -> np.ndarray:
        """Add ``len(lo)`` rows ``lo <= sum(vals * x[cols]) <= hi``; ``rows`` numbers the new rows
        from 0. Duplicate (row, col) entries are summed. Returns the rows' indices."""
        lo = np.atleast_1d(np.asarray(lo, float))
        hi = np.broadcast_to(np.asarray(hi, float), lo.shape).copy()
        k = lo.size
        rows = np.asarray(rows, np.int64)
        cols = np.asarray(cols, np.int64)
        vals = np.broadcast_to(np.asarray(vals, float), rows.shape).copy()
        if rows.size and (rows.min() < 0 or rows.max() >= k):
            raise ValueError("row index out of range in add_rows")
        if cols.size and (cols.min() < 0 or cols.max() >= self.num_cols):
            raise ValueError("column index out of range in add_rows")
        idx = np.arange(self.num_rows, self.num_rows + k, dtype=np.int64)
        self._rows.append((lo, hi))
        self._coo.append((rows + self.num_rows, cols, vals))
        self.num_rows += k
        return idx

    def arrays(self):
        """``(col_lo, col_hi, cost, integer, row_lo, row_hi, A)`` with ``A`` in CSC form."""
        if self._cols:
            lb, ub, cost, integer = (np.concatenate(p) for p in zip(*self._cols))
        else:
            lb = ub = cost = np.zeros(0)
            integer = np.zeros(0, bool)
        if self._rows:
            rlo, rhi = (np.concatenate(p) for p in zip(*self._rows))
            r, c, v = (np.concatenate(p) for p in zip(*self._coo))
        else:
            rlo = rhi = np.zeros(0)
            r = c = np.zeros(0, np.int64)
            v = np.zeros(0)
        keep = v != 0
        A = coo_matrix((v[keep], (r[keep], c[keep])), shape=(self.num_rows, self.num_cols)).tocsc()
        A.sum_duplicates()
        A.eliminate_zeros()
        return lb, ub, cost, integer, rlo, rhi, A

    def check(self, x: np.ndarray, tol: float = 1e-6) -> list[str]:
        """Which bounds and rows ``x`` violates (for tests and warm-start checks)."""
        lb, ub, _, integer, rlo, rhi, A = self.arrays()
        bad = []
        if (x < lb - tol).any() or (x > ub + tol).any():
            j = int(np.flatnonzero((x < lb - tol) | (x > ub + tol))[0])
            bad.append(f"column {j} = {x[j]} outside [{lb[j]}, {ub[j]}]")
        frac = integer & (np.abs(x - np.round(x)) > tol)
        if frac.any():
            bad.append(f"column {int(np.flatnonzero(frac)[0])} is fractional")
        ax = A @ x
        viol = (ax < rlo - tol * (1 + np.abs(rlo))) | (ax > rhi + tol * (1 + np.abs(rhi)))
        if viol.any():
            i = int(np.flatnonzero(viol)[0])
            bad.append(f"row {i}: {ax[i]} outside [{rlo[i]}, {rhi[i]}] ({int(viol.sum())} rows violated)")
        return bad


@dataclass
class MipResult:
    """What a MIP solver proved. ``x`` is the incumbent (``None`` if none was found)."""

    status: str  # OPTIMAL | TIME_LIMIT | INFEASIBLE | ERROR
    x: np.ndarray | None
    objective: float
    bound: float | None
    time: float
    message: str = ""
    stats: dict = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        """Whether the search took a Ctrl-C (``KeyboardInterrupt``): it returned what it had then, with
        or without a solution, whatever its status (a search that ended as the Ctrl-C came says
        ``optimal`` or ``infeasible`` and this too). The caller's work must end there, as for
        :attr:`solvers.base.Solution.interrupted`, which reads the same word in ``message``."""
        return "interrupted" in (self.message or "")


@dataclass(frozen=True)
class Verdict:
    """What a :class:`MipResult` proves about a placement the evaluator scored (:func:`judge`)."""

    bound: float | None
    gap: float | None
    proven: bool  # the solver closed the requested gap on the evaluated value, with a trusted bound
    message: str
    mismatch: float | None  # the solver's bound, when it exceeds the evaluated value (not trusted)


def judge(res: MipResult, value: float, fallback: float | None, gap: float, *, what: str,
          kept: str) -> Verdict:
    """Judge ``res``'s bound against ``value``, the evaluator's ``what`` (e.g. "objective") of its
    placement, with ``fallback`` the model-free bound (``kept`` names it in the message): the one rule
    every integer program of the project reports by."""
    checked = check_bound(res.bound, value, fallback=fallback)
    # a program's bound its model disagrees on is dropped by check_bound: the gap is then the model-free
    # fallback's, which proves the placement as well as any bound
    proven = (res.status == OPTIMAL and checked.gap is not None
              and checked.gap <= gap + BOUND_TOLERANCE_REL)
    if not checked.consistent:
        # the program's bound is above the evaluator's value of a valid placement: its model and the
        # evaluator disagree, so nothing it proved is trusted
        msg = (f"the integer program's bound {checked.claimed:.6g} exceeds the evaluated {what} "
               f"{value:.6g} (its model disagrees with the evaluator); "
               + (f"only {kept} is kept" if fallback is not None else "no bound is kept"))
    elif res.status == OPTIMAL and not proven:
        # the solver stopped on its own gap but ours (on the evaluator's value) is not closed
        msg = "the MIP solver reported optimality, but the gap on the evaluated placement is not closed"
    else:
        msg = res.message
    if res.interrupted and "interrupted" not in msg:  # the caller's work ends on it: keep saying so
        msg = f"{msg}; {INTERRUPTED}" if msg else INTERRUPTED
    return Verdict(checked.bound, checked.gap, proven, msg,
                   None if checked.consistent else checked.claimed)


#: seconds between two reports of an integer program's progress at least (a bar redraws no faster)
PROGRESS_EVERY = 0.2


def solve_mip(model: MilpModel, *, backend: str = DEFAULT_BACKEND, time_limit: float | None = None,
              gap: float = 1e-4, threads: int | None = None, start: np.ndarray | None = None, raw=None,
              seed: int | None = None, progress: Callable[[float], None] | None = None) -> MipResult:
    """Solve with the named backend (``"highs"`` or ``"pulp"``). ``start`` is a full feasible
    solution to start from; ``seed`` the solver's random seed (HiGHS ``random_seed``; the bundled
    CBC's ``randomCbcSeed``, as ``seed + 1`` since CBC reads 0 as "seed from the clock"); ``raw`` holds
    backend options (``log``: print the solver's log; ``pulp_solver``: a PuLP solver name, default
    ``PULP_CBC_CMD``). ``progress``: a callable taking the fraction of the search done
    (:class:`~solvers.base.ProgressTeller`'s rule, at most every :data:`PROGRESS_EVERY` seconds; under
    HiGHS, while it runs, the larger of the part of the time limit spent and :func:`gap_closed`), 1 once
    the search ends, not after a Ctrl-C; PuLP's solvers tell only that 1."""
    raw = dict(raw or {})
    teller = ProgressTeller(progress, time_limit, every=PROGRESS_EVERY)
    if backend == "highs":
        res = _solve_highs(model, time_limit, gap, threads, start, raw, seed,
                           teller if progress is not None else None)
    elif backend == "pulp":
        res = _solve_pulp(model, time_limit, gap, threads, start, raw, seed)
    else:
        raise InputError(f"unknown MIP backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if not res.interrupted:
        teller.tell(1.0)
    return res


def gap_closed(first: float | None, now: float, target: float) -> float:
    """The part of the search's first relative gap (``first``: HiGHS's ``mip_gap`` once it had an
    incumbent; ``None`` before) closed ``now``, measured down to the ``target`` gap it stops at: 0 until
    there is a gap, 1 at the target."""
    if first is None or not math.isfinite(now):
        return 0.0
    if first <= target:
        return 1.0
    return min(1.0, max(0.0, (first - now) / (first - target)))


# --------------------------------------------------------------------------- HiGHS
_SCHEDULER: dict = {"threads": None}  # size the process's HiGHS thread pool was started with
class _quiet_stdout:
    """Silence the process's standard output (file descriptor 1, where C code writes, whatever
    ``sys.stdout`` is: a caller's capture replaces that object, not the descriptor) for a moment."""

    def __enter__(self):
        import sys

        try:
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError):
            pass
        self.fd = 1
        try:
            self.saved = os.dup(self.fd)
        except OSError:  # no descriptor 1 (closed): nothing to hide
            self.fd = None
            return self
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.fd)
        os.close(devnull)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.dup2(self.saved, self.fd)
            os.close(self.saved)
        return False


# HiGHS reacts to its own limit and to cancelSolve only between steps of its search: up to 0.8 s late on
# a 16k-column model without presolve (the stage ip on InceptionV3), during the root node's cut rounds.
# So it is given the limit less this reserve (at most a quarter of the limit), and the answer comes
# within the limit instead of up to 0.8 s after it.
_HIGHS_LATE = 0.8
# HiGHS 1.16 can also miss both for minutes: stuck in the presolve of a RINS sub-MIP
# (HPresolve::strengthenInequalities), seen on ip-noncontig for onnx/inception_v2 from a good start.
# Past this many seconds after cancelling, the search is abandoned (its thread is a daemon and may keep
# one core busy until it ends) and the best solution its callbacks reported is returned.
_HIGHS_ABANDON = 2.0
_HIGHS_ABANDON_INTERRUPTED = 0.5  # the same after Ctrl-C
# ... but never past the caller's time limit (:func:`solve_mip`'s ``time_limit`` from its call) once this
# many seconds have passed since the cancel: the limit is a promise (``--time-limit`` the whole command's).
# HiGHS's MIP presolve looks at the cancel not at all and at its own limit only now and then: on the latency
# program of ResNet-50's operator graph with two subgraphs per device (119k rows, 43k columns) it ran past
# both for over 2 s, and `place --time-limit 10` took 11.4-11.7 s from its start, waiting out this grace.
_HIGHS_ABANDON_LEAST = 0.1
_POLL_S = 0.05  # how often the waiting thread looks at the clock (and draws progress)
_ABANDONED: list = []  # (solver, thread) of abandoned searches, kept alive while their threads may run


def _solve_highs(model, time_limit, gap, threads, start, raw, seed=None,
                 teller: ProgressTeller | None = None) -> MipResult:
    """:func:`solve_mip` on HiGHS; ``teller`` (``None``: no progress asked for) is told the search's
    progress while it runs."""
    import highspy

    t0 = time.perf_counter()
    end = None  # the caller's limit: the answer comes by then, HiGHS stopped or abandoned
    if time_limit is not None:
        end = t0 + float(time_limit)
        time_limit = max(0.01, float(time_limit) - min(_HIGHS_LATE, 0.25 * float(time_limit)))
    lb, ub, cost, integer, rlo, rhi, A = model.arrays()
    if raw.get("log", False):
        h = highspy.Highs()
    else:
        with _quiet_stdout():  # HiGHS prints a banner from its constructor, before options can be set
            h = highspy.Highs()
    h.setOptionValue("output_flag", bool(raw.get("log", False)))
    h.setOptionValue("mip_rel_gap", float(gap))
    h.setOptionValue("mip_abs_gap", float(raw.get("abs_gap", 1e-9)))
    if seed is not None:
        h.setOptionValue("random_seed", int(seed) % 2147483647)
    resize = threads is not None and _SCHEDULER["threads"] not in (None, int(threads))
    if resize and _abandoned_running():
        threads = None  # the pool cannot be restarted under an abandoned search: run on it as it is
    if threads is not None:
        # HiGHS keeps one thread pool per process and refuses a different size later: restart it
        if resize:
            highspy.Highs.resetGlobalScheduler(True)
        h.setOptionValue("threads", int(threads))
        _SCHEDULER["threads"] = int(threads)
    elif _SCHEDULER["threads"] is None:
        _SCHEDULER["threads"] = "default"
    for key, value in raw.get("highs_options", {}).items():
        h.setOptionValue(key, value)
    inf = highspy.kHighsInf

    def fin(a):
        return np.clip(np.asarray(a, np.float64), -inf, inf)

    def finite(v) -> float | None:
        """A bound HiGHS reported, or None where it has none (infinite)."""
        v = float(v)
        return v if math.isfinite(v) and abs(v) < inf else None

    nc, nr = model.num_cols, model.num_rows
    integrality = np.where(integer, int(highspy.HighsVarType.kInteger.value),
                           int(highspy.HighsVarType.kContinuous.value)).astype(np.int32)
    st = h.passModel(nc, nr, int(A.nnz), int(highspy.MatrixFormat.kColwise.value),
                     int(highspy.ObjSense.kMinimize.value), 0.0,
                     cost.astype(np.float64), fin(lb), fin(ub), fin(rlo), fin(rhi),
                     A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(np.float64),
                     integrality)
    if st == highspy.HighsStatus.kError:
        return MipResult(ERROR, None, INF, None, time.perf_counter() - t0, "HiGHS rejected the model")
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, np.float64).tolist()
        sol.value_valid = True
        h.setSolution(sol)
    # the best solution and bound so far, from HiGHS's callbacks: all there is if the search must be
    # abandoned (_run_interruptible); and, for progress, the relative gap now and when first finite
    seen = {"x": None, "obj": INF, "bound": None, "gap": INF, "first_gap": None}

    def improving(e) -> None:
        out = e.data_out
        obj = float(out.objective_function_value)
        if obj < seen["obj"]:
            seen["x"], seen["obj"] = np.array(out.mip_solution, np.float64), obj
        b = finite(out.mip_dual_bound)
        if b is not None:
            seen["bound"] = b if seen["bound"] is None else max(seen["bound"], b)

    def searching(e) -> None:
        # called thousands of times a second: only note the gap; the waiting thread tells it
        g = e.data_out.mip_gap
        seen["gap"] = g
        if seen["first_gap"] is None and g < INF:
            seen["first_gap"] = g

    h.cbMipImprovingSolution.subscribe(improving)
    tell = None
    if teller is not None:
        # the interrupt callback HandleUserInterrupt turns on for cancelSolve anyway carries the gap
        h.cbMipInterrupt.subscribe(searching)

        def tell() -> None:
            teller.tell(gap_closed(seen["first_gap"], seen["gap"], float(gap)))

    build = time.perf_counter() - t0
    stats = {"build_s": build, "cols": nc, "rows": nr, "nonzeros": int(A.nnz)}
    if time_limit is not None and "time_limit" not in raw.get("highs_options", {}):
        # HiGHS's clock starts with its run: what building and passing the model took is off its limit
        h.setOptionValue("time_limit", max(0.01, time_limit - build))
    # past HiGHS's limit (the reserve above taken off) plus a small margin the search is cancelled from
    # here, in case HiGHS misses its own check for long (with a short limit, earlier: in time to leave
    # it the least grace before the caller's limit, never before its own limit)
    deadline = None if time_limit is None else \
        min(t0 + time_limit + 0.1, max(t0 + time_limit, end - _POLL_S - _HIGHS_ABANDON_LEAST))
    # abandoned, if it must be, one poll before the caller's limit: reading the answer takes a moment
    abandon_by = None if end is None else end - _POLL_S
    interrupted, overran, abandoned = _run_interruptible(h, deadline, tell=tell, abandon_by=abandon_by)
    if abandoned:
        what = f"{INTERRUPTED}; best placement so far" if interrupted else "time limit reached"
        return MipResult(TIME_LIMIT, seen["x"], seen["obj"], seen["bound"], time.perf_counter() - t0,
                         f"{what}; HiGHS did not stop in time once cancelled (its search was abandoned; "
                         "best solution it reported kept)",
                         {**stats, "abandoned": True})
    ms = h.getModelStatus()
    info = h.getInfo()
    elapsed = time.perf_counter() - t0
    S = highspy.HighsModelStatus
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    x = np.array(h.getSolution().col_value) if has_sol else None
    obj = float(info.objective_function_value) if has_sol else INF
    bound = finite(info.mip_dual_bound)
    stats = {"nodes": int(info.mip_node_count), **stats}
    # a Ctrl-C that came as the search ended (or that HiGHS did not see before it ended) is still said:
    # the result stands, and the caller's work ends on it (MipResult.interrupted)
    if ms == S.kOptimal:
        return MipResult(OPTIMAL, x, obj, bound, elapsed,
                         f"{INTERRUPTED} as the search ended optimal" if interrupted else "", stats)
    if ms == S.kInfeasible:
        return MipResult(INFEASIBLE, None, INF, None, elapsed, "the integer program is infeasible"
                         + (f"; {INTERRUPTED} as that was proven" if interrupted else ""), stats)
    if ms in (S.kTimeLimit, S.kInterrupt, S.kIterationLimit, S.kSolutionLimit, S.kMemoryLimit,
              S.kObjectiveBound, S.kObjectiveTarget):
        what = ("time limit reached" if ms == S.kTimeLimit or overran
                else f"HiGHS stopped: {h.modelStatusToString(ms)}")
        if interrupted:
            what = f"{INTERRUPTED}; " + ("best placement so far" if x is not None else "no solution yet")
        return MipResult(TIME_LIMIT, x, obj, bound, elapsed, what, stats)
    if interrupted:  # cancelled before HiGHS settled on a status ("Unknown"): a Ctrl-C, not an error
        what = "best placement so far" if x is not None else "no solution yet"
        return MipResult(TIME_LIMIT, x, obj, bound, elapsed, f"{INTERRUPTED}; {what}", stats)
    return MipResult(ERROR, x, obj, bound, elapsed, f"HiGHS: {h.modelStatusToString(ms)}", stats)


def _abandoned_running() -> bool:
    """Whether a search abandoned by :func:`_run_interruptible` may still be running."""
    return any(thread.is_alive() for _, thread in _ABANDONED)


class _Search:
    """``h.run()`` in a thread of its own (``_run``), started with ``_thread.start_new_thread``, which
    returns at once. ``threading.Thread.start`` waits on an Event for the thread to begin, and a Ctrl-C
    taken in that wait escaped :func:`_run_interruptible` with HiGHS running unattended; when the
    interpreter then exited (130, after the Ctrl-C), the thread came back from HiGHS into a finalising
    Python and the process died in ``std::terminate`` ("terminate called without an active exception",
    exit 134). ``ended`` is a plain lock held until ``h.run()`` returns (see :func:`_run_interruptible`),
    and ``finished`` says so too. A daemon, as threads of ``_thread`` are: the process never waits for
    it. ``is_alive`` and ``join`` are those of a ``threading.Thread`` (:data:`_ABANDONED` holds these)."""

    def __init__(self, h) -> None:
        self.h = h
        self.ended = threading.Lock()
        self.ended.acquire()
        self.finished = False

    def _run(self) -> None:
        try:
            self.h.run()
        finally:
            self.finished = True
            self.ended.release()

    def is_alive(self) -> bool:
        """Whether HiGHS's run has not yet returned (the thread's last Python lines may still run)."""
        return not self.finished

    def join(self, timeout: float | None = None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.finished and (end is None or time.monotonic() < end):
            time.sleep(0.005)


def _run_interruptible(h, deadline: float | None = None, grace: float | None = None,
                       tell: Callable[[], None] | None = None,
                       abandon_by: float | None = None) -> tuple[bool, bool, bool]:
    """Run HiGHS in its own thread so that Ctrl-C stops the search (the incumbent is kept) instead of
    waiting for the time limit, and so does passing ``deadline`` (``time.perf_counter()``). Returns
    whether it was interrupted, whether the deadline cancelled it, and whether it was *abandoned*:
    still running ``grace`` seconds (:data:`_HIGHS_ABANDON`) after being cancelled, or past
    ``abandon_by`` (``time.perf_counter()``; ``None``: no such end) once cancelled
    :data:`_HIGHS_ABANDON_LEAST` seconds before. Then the caller must leave ``h`` alone (its thread, a
    daemon, still owns it) and use what the callbacks reported.
    ``tell`` (no argument; ``None``: nothing) is called from this, the caller's thread, while it waits:
    a progress bar is drawn where it always is, and a KeyboardInterrupt it raises is a Ctrl-C.

    A Ctrl-C (``KeyboardInterrupt``) from the moment the thread starts is taken here, wherever it lands,
    so that it never leaves while HiGHS runs; anything else that escapes (a second Ctrl-C between two
    steps of taking the first) leaves the search cancelled and kept as an abandoned one."""
    grace = _HIGHS_ABANDON if grace is None else grace
    h.HandleUserInterrupt = True  # lets cancelSolve() stop the search (through HiGHS's callbacks)
    # our own thread, not highspy's startSolve: that one holds a lock shared by every Highs object, so
    # after an abandoned search no other could start in this process
    # a plain lock held until the search ends, and a flag: not an Event, whose Condition.wait keeps
    # Python-side lock state that a KeyboardInterrupt can leave half done ("RuntimeError: release
    # unlocked lock", CPython gh-118433; it escaped this loop with HiGHS still running and ended the
    # process in std::terminate). A raw lock's acquire has no such state; the flag covers an interrupt
    # that lands just after the lock was taken.
    search = _Search(h)
    interrupted = overran = False
    cancelled_at = None
    started = False
    try:
        while True:  # again after each Ctrl-C taken (the try around covers this loop's jump back too)
            try:
                if not started:
                    # set before the call, which is made here (a Python method's first step may take a
                    # Ctrl-C): Python takes one only after a call returns, the thread started by then
                    started = True
                    _thread.start_new_thread(search._run, ())
                while True:
                    if search.finished or search.ended.acquire(timeout=_POLL_S):
                        break
                    if tell is not None and cancelled_at is None:
                        tell()
                    now = time.perf_counter()
                    if deadline is not None and not overran and now > deadline:
                        overran = True
                        h.cancelSolve()
                        cancelled_at = now if cancelled_at is None else cancelled_at
                    if cancelled_at is not None and (
                            now - cancelled_at > grace or abandon_by is not None and now > abandon_by
                            and now - cancelled_at >= _HIGHS_ABANDON_LEAST):
                        _ABANDONED.append((h, search))  # keep it alive: its thread may still be running
                        return interrupted, overran, True
                break
            except KeyboardInterrupt:
                interrupted = True
                h.cancelSolve()
                # a user waiting on Ctrl-C gets the best solution so far within the 2 s promised, not
                # after the deadline's grace
                grace = min(grace, _HIGHS_ABANDON_INTERRUPTED)
                if cancelled_at is None:
                    cancelled_at = time.perf_counter()
    except BaseException:
        # anything else escaping leaves the search behind like an abandoned one: cancelled, and kept
        # alive so that the console's exit skips the teardown under it
        h.cancelSolve()
        _ABANDONED.append((h, search))
        raise
    return interrupted, overran, False


# --------------------------------------------------------------------------- PuLP
def _solve_pulp(model, time_limit, gap, threads, start, raw, seed=None) -> MipResult:
    import pulp

    t0 = time.perf_counter()
    lb, ub, cost, integer, rlo, rhi, A = model.arrays()
    prob = pulp.LpProblem("placement", pulp.LpMinimize)
    new_var = getattr(prob, "add_variable", None) or pulp.LpVariable  # PuLP >= 3.3 / older
    xs = [new_var(f"x{j}", None if math.isinf(lb[j]) else float(lb[j]),
                  None if math.isinf(ub[j]) else float(ub[j]),
                  cat=pulp.LpInteger if integer[j] else pulp.LpContinuous)
          for j in range(model.num_cols)]
    prob += pulp.LpAffineExpression([(xs[j], float(cost[j])) for j in np.flatnonzero(cost)])
    R = A.tocsr()
    for i in range(model.num_rows):
        a, b = R.indptr[i], R.indptr[i + 1]
        expr = pulp.LpAffineExpression([(xs[j], float(v)) for j, v in zip(R.indices[a:b], R.data[a:b])])
        lo, hi = rlo[i], rhi[i]
        if lo == hi:
            prob += pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{i}", float(lo))
            continue
        if math.isfinite(lo):
            prob += pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{i}l", float(lo))
        if math.isfinite(hi):
            prob += pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{i}u", float(hi))
    if start is not None:
        for j, v in enumerate(np.asarray(start, float).tolist()):
            xs[j].setInitialValue(round(v) if integer[j] else v)
    name = raw.get("pulp_solver", "PULP_CBC_CMD")
    kw = {"msg": bool(raw.get("log", False)), "gapRel": float(gap)}
    if time_limit is not None:
        kw["timeLimit"] = max(1.0, float(time_limit) - (time.perf_counter() - t0))
    if threads is not None:
        kw["threads"] = int(threads)
    if start is not None:
        kw["warmStart"] = True
    log_path = None
    if name == "PULP_CBC_CMD" and seed is not None:
        kw["options"] = [f"randomCbcSeed {int(seed) % 2147483646 + 1}"]
    if name == "PULP_CBC_CMD":
        fd, log_path = tempfile.mkstemp(prefix="cbc-", suffix=".log")
        os.close(fd)
        kw["logPath"] = log_path
    try:
        with warnings.catch_warnings():  # PULP_CBC_CMD (the bundled CBC) is deprecated for PuLP 4
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.getSolver(name, **kw)
    except Exception as e:  # PuLP raises a bare PulpSolverError for unknown names
        raise InputError(f"PuLP solver {name!r} is not available: {e}") from None
    if not solver.available():
        raise InputError(f"PuLP solver {name!r} is not installed or not licensed here")
    build = time.perf_counter() - t0
    try:
        prob.solve(solver)
        log = ""
        if log_path is not None:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                log = f.read()
    finally:
        if log_path is not None:
            os.unlink(log_path)
    elapsed = time.perf_counter() - t0
    stats = {"build_s": build, "cols": model.num_cols, "rows": model.num_rows, "pulp_solver": name}
    sol_status = prob.sol_status
    has_sol = sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    x = np.array([v.varValue if v.varValue is not None else 0.0 for v in xs]) if has_sol else None
    obj = float(cost @ x) if x is not None else INF
    bound = _pulp_bound(prob, name, log, obj if has_sol else None)
    if sol_status == pulp.LpSolutionOptimal:
        if bound is None:
            # "optimal" means within the requested relative gap: that, not the objective, is what it proved
            bound = obj - float(gap) * abs(obj)
        return MipResult(OPTIMAL, x, obj, bound, elapsed, "", stats)
    if sol_status == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        return MipResult(INFEASIBLE, None, INF, None, elapsed, "the integer program is infeasible", stats)
    if has_sol:
        return MipResult(TIME_LIMIT, x, obj, bound, elapsed,
                         f"{name} stopped before proving optimality (time limit)", stats)
    if prob.status == pulp.LpStatusNotSolved or sol_status == pulp.LpSolutionNoSolutionFound:
        return MipResult(TIME_LIMIT, None, INF, bound, elapsed,
                         f"{name} found no solution before stopping", stats)
    return MipResult(ERROR, None, INF, bound, elapsed, f"{name}: status {pulp.LpStatus[prob.status]}", stats)


def _pulp_bound(prob, name: str, log: str, obj: float | None) -> float | None:
    """The best bound the solver proved: from CBC's log, or the solver object PuLP keeps."""
    if name == "PULP_CBC_CMD":
        m = re.findall(r"^Lower bound:\s*(\S+)", log, flags=re.M)
        if m:
            try:
                return float(m[-1])
            except ValueError:
                return None
        return None  # "Optimal solution found" alone proves only the requested gap (see the caller)
    model = getattr(prob, "solverModel", None)
    if model is None:
        return None
    for getter in (lambda m: m.getInfo().mip_dual_bound,  # HiGHS (highspy)
                   lambda m: m.ObjBound,  # Gurobi
                   lambda m: m.solution.MIP.get_best_objective()):  # CPLEX
        try:
            v = float(getter(model))
        except Exception:
            continue
        if math.isfinite(v) and abs(v) < 1e29:
            return v
    return None
