"""Serving a model: batch size as a decision, a latency target, the throughput–latency frontier.

Throughput is in **samples per second**: a placement of a model at batch size ``b`` releases one batch
every max-load milliseconds (the pipeline's period), so it serves ``1000 b / max-load`` samples/s. Its
latency is the time one batch takes end to end (:mod:`graphs.latency`).

* :func:`batch_workload` costs the model at one batch size (roofline, profile or a table: the front
  end's models), with memory that grows with the batch: every node holds its parameters **and its
  output** (a conservative working set: no tensor is freed while the stage runs), as inference always
  counts it (:data:`graphs.onnx_workload.INFERENCE_MEMORY`).
* :func:`sweep` places the model at each candidate batch size (``auto``: 1, 2, 4, ... until samples/s
  stop improving by more than 1% or nothing fits in memory) and returns the best. Without a latency
  target each point is the default solver's max-load optimum; with one, the serving IP's best
  throughput under it (:mod:`solvers.slo_ip`), and a batch size whose lowest latency misses the
  target ends an ``auto`` sweep (a larger batch takes at least as long).
* :func:`frontier` gives every batch size's non-dominated (samples/s, latency) plans, by the epsilon-
  constraint method on the serving IP: from no latency limit, minimise max-load, then minimise latency
  at that max-load; tighten the limit to just below that latency (a relative step of ``1e-5``, the
  frontier's resolution); repeat until infeasible. The throughput end's max-load is the exact DP's
  (``get_solver("dp")``: contiguous placements, which without host cores are exactly the serving
  domain, so no program is needed for it; with host cores the program starts from it). Across batch
  sizes the dominated points are dropped. A point is *proven* when its max-load and its latency were
  both proven optimal (the DP or the program, then the program).
* One deadline bounds the whole frontier (``options.time_limit``, :class:`FrontierSearch`): every
  program gets a share of the time left, points are reported as they are found (``on_point``), and
  what was found when the time runs out (or ``stop()`` says so: Ctrl-C on the command line) is the
  answer, each point labelled proven or not. On a model whose DP lattice is too large to finish (more
  than :data:`_QUICK_IDEALS` ideals, then a share of the time), the DP's best chain placement is the
  first, unproven point; otherwise the DP's optimal placement is, until the program minimising the
  latency at its max-load replaces it.

Nothing here prints; errors are :class:`graphs.errors.PlacementError` subclasses.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from graphs.errors import InputError, PlacementError
from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.model import OpGraph
from graphs.reference import Workload
from solvers.base import INTERRUPTED, Solution, SolveOptions, Status

from .api import Placement, place
from .clock import LEAST_SOLVE_S, Clock

__all__ = ["Point", "ServingPoint", "Sweep", "Frontier", "FrontierSearch", "parse_batch_sizes",
           "batch_workload", "serving_point", "sweep", "sweep_batches", "frontier", "batch_frontier",
           "non_dominated",
           "BatchLadder", "AUTO_MAX_BATCH", "IMPROVES", "auto_sizes"]

AUTO_MAX_BATCH = 1024
IMPROVES = 0.01  # an auto sweep continues while samples/s grow by more than this fraction
# the frontier's resolution: the next point must be this much faster (relative); well above the MIP
# solver's tolerances, so that the program cannot return the previous point within them
_STEP = 1e-5


@runtime_checkable
class Point(Protocol):
    """What the serving commands (sweep, frontier, provision) read of a plan at one batch size, in
    either model: :class:`ServingPoint` (one device per stage) and the stage model's
    :class:`~placement.serving_stages.StagePoint` (replicas ``d``, tensor parallelism ``t``). Times are
    milliseconds per batch of ``batch_size`` samples."""

    batch_size: int
    proven: bool  # the plan serves the most samples/s there is under what was asked

    @property
    def samples_per_s(self) -> float: ...

    @property
    def latency_ms(self) -> float: ...  # one batch, end to end

    @property
    def max_load(self) -> float: ...  # the pipeline's period: ms per batch

    @property
    def status(self) -> str: ...

    @property
    def how(self) -> str: ...  # how the plan was found

    model: str  # "one device per stage" or "stages"

    def utilisation(self): ...  # the plan's MFU, None when it has none

    def on_frontier(self, beside_stages: bool = False) -> bool: ...

    def proof(self, beside_stages: bool = False) -> str: ...

    def plan_words(self) -> str: ...

    def result(self, workload: str | None = None) -> dict: ...


@dataclass(frozen=True, eq=False)
class ServingPoint:
    """One plan at one batch size: its placement and what it serves (a :class:`Point`)."""

    batch_size: int
    placement: Placement
    samples_per_s: float
    latency_ms: float  # one batch, end to end
    proven: bool  # the solver proved the plan optimal for what it was asked

    @property
    def max_load(self) -> float:
        return self.placement.max_load

    @property
    def status(self) -> str:
        return self.placement.status.value

    @property
    def how(self) -> str:
        """How the plan was found (the stage model's points say which search; here: the solver)."""
        return self.placement.solution.solver

    def utilisation(self):
        """The plan's MFU (:func:`graphs.mfu.compute_utilisation`), ``None`` when it has none."""
        from graphs.mfu import compute_utilisation

        p = self.placement
        return compute_utilisation(p.graph, p.cluster, p.assignment)

    model = "one device per stage"

    def on_frontier(self, beside_stages: bool = False) -> bool:
        """Proven a frontier point: by both measures in this model, which beside stage plans
        (``beside_stages``) proves nothing of the frontier."""
        return self.proven and not beside_stages

    def proof(self, beside_stages: bool = False) -> str:
        """What is proven of the point (``beside_stages``: its proof does not cover stage plans)."""
        if beside_stages:
            return "proven among one-device-per-stage plans" if self.proven else "not proven"
        return "proven" if self.proven else "not proven"

    def plan_words(self) -> str:
        return "one device per stage"

    def result(self, workload: str | None = None) -> dict:
        """The result file of the placement (:func:`placement.results.result_dict`; it names its own
        workload)."""
        from .results import result_dict

        return result_dict(self.placement)




@dataclass(frozen=True, eq=False)
class Sweep:
    """Every batch size tried, in order: its :class:`Point` (of either model), or ``None`` and the reason
    there is none; ``best`` serves the most samples/s (the smaller batch on a tie); ``stopped``: why an
    auto sweep stopped, or why a list was cut short (the time limit, a Ctrl-C: :attr:`interrupted`);
    ``""`` for a list tried whole.

    When no batch size meets ``latency_slo``: ``lowest_latency``, the smallest latency (ms per batch, at
    the first size), and whether that is proven (``lowest_proven``: then no plan meets the target).
    ``none_proven``: no size tried has a plan, and that is proven: each size's search proved that none
    exists there, or the lowest latency is proven above the target. ``unproven``: the sizes whose answer
    is not proven (a plan not proven best at its size, or no plan and none not proven), so that the best
    is proven best of the sizes tried only when it is proven and no other size is here
    (:attr:`best_proven`)."""

    points: tuple[tuple[int, Point | None, str], ...]
    best: Point | None
    stopped: str
    latency_slo: float | None = None
    lowest_latency: float | None = None
    lowest_proven: bool = False
    none_proven: bool = False
    unproven: tuple[int, ...] = ()

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C that a size's search took ended the sweep (:data:`INTERRUPTED`)."""
        return self.stopped.startswith(INTERRUPTED)

    @property
    def best_proven(self) -> bool:
        """The best plan serves the most samples/s of every plan at the batch sizes tried, proven."""
        return self.best is not None and bool(self.best.proven) and \
            not set(self.unproven) - {self.best.batch_size}


def unproven_sizes(points, proven_none: Sequence[bool]) -> tuple[int, ...]:
    """:attr:`Sweep.unproven` of a sweep's ``points``; ``proven_none``: per size without a plan, in
    order, whether its search proved that none exists."""
    nones = iter(proven_none)
    return tuple(b for b, pt, _ in points if (not pt.proven if pt is not None else not next(nones, False)))


def not_tried(why: str, rest: Sequence[int], auto: bool) -> str:
    """``why`` a sweep ended before the batch sizes ``rest``, naming them (a list's own; an auto sweep's
    are open-ended: "batch 16 and above")."""
    if not rest:
        return why
    what = f"batch {rest[0]} and above" if auto else \
        f"batch size{'s' if len(rest) > 1 else ''} {', '.join(map(str, rest))}"
    return f"{why}: {what} not tried"


class BatchLadder:
    """The batch sizes a serving search tries, and when it ends: the one loop of the batch-size sweep,
    the frontier and provision, in both models, and of the LLM goodput search
    (:func:`placement.goodput.goodput_search`).

    ``batch_sizes``: the sizes to try, in order, or ``None`` (auto): 1, 2, 4, ... up to ``max_batch``,
    those of them that are multiples of ``multiple_of`` (e.g. a batch split into that many micro-batches).
    Iterating gives each size to try; after each, the caller reports its figure (:meth:`scored`: higher
    is better, e.g. samples/s, or minus a price) or ends the search (:meth:`end`). The search ends, and
    :attr:`stopped` says why, naming the sizes not tried (:func:`not_tried`):

    * ``halted()`` gives words (a Ctrl-C its search took; ``""``: go on), checked before and after
      each size; ``clock``'s :meth:`~placement.clock.Clock.interrupted` (a Ctrl-C) is checked with it;
    * ``clock``'s deadline has passed (less than its margin left), or ``limit()`` gives words (a limit
      that lets no further size start, e.g. a command's :meth:`~placement.clock.Clock.halted`; ``""``:
      go on), checked before each size but the first, which is always tried;
    * an auto ladder: the size has no plan (:meth:`scored` ``None``), or its figure is no more than
      ``improves`` (relative) above the best so far (``None``: no such rule);
    * :meth:`end` was called after the size;
    * an auto ladder ran to ``max_batch``.

    :attr:`halt` holds the words of a halt or a deadline that left sizes untried (``""`` otherwise):
    such a search is not complete. :attr:`best_size` is the size of the best figure (the smaller on a
    tie, within a relative ``1e-12``)."""

    def __init__(self, batch_sizes: Sequence[int] | None = None, *, max_batch: int = AUTO_MAX_BATCH,
                 clock: Clock | None = None, halted: Callable[[], str] | None = None,
                 improves: float | None = IMPROVES, limit: Callable[[], str] | None = None,
                 multiple_of: int = 1):
        self.auto = batch_sizes is None
        self.sizes = [b for b in auto_sizes(max_batch) if b % multiple_of == 0] if self.auto else \
            list(batch_sizes)
        self.clock, self._halted, self._limit, self.improves = clock, halted, limit, improves
        self.tried: list[int] = []
        self.best: float | None = None
        self.best_size: int | None = None
        self.stopped = ""
        self.halt = ""
        self._end = ""

    def _why(self, before: bool) -> str:
        why = self._halted() if self._halted is not None else ""
        if not why and before and self.tried and self._limit is not None:
            why = self._limit()
        if why or self.clock is None:
            return why
        if self.clock.interrupted():
            return INTERRUPTED
        return "time limit reached" if before and self.tried and self.clock.halted() else ""

    def _halts(self, why: str, rest: Sequence[int]) -> bool:
        if why:
            self.halt, self.stopped = why, not_tried(why, rest, self.auto)
        return bool(why)

    def __iter__(self) -> Iterator[int]:
        for i, b in enumerate(self.sizes):
            if self._halts(self._why(True), self.sizes[i:]):
                return
            self._end = ""
            self.tried.append(b)
            yield b
            if self._halts(self._why(False), self.sizes[i + 1:]):
                return
            if self._end:
                self.stopped = self._end
                return
        if self.auto:
            self.stopped = f"reached the largest batch tried ({self.sizes[-1]})"

    def share(self) -> float | None:
        """Seconds the size being tried may take (``None``: no time limit): half the time left in an auto
        ladder (the sizes after it are open-ended), the time left split evenly among the sizes left in a
        list; at least :data:`~placement.clock.LEAST_SOLVE_S`, as a solve's limit is."""
        left = self.clock.left() if self.clock is not None else None
        if left is None:
            return None
        share = left / 2 if self.auto else left / (len(self.sizes) - len(self.tried) + 1)
        return max(share, LEAST_SOLVE_S)  # as a solve's limit: a size tried gets at least that

    def scored(self, score: float | None, *, none_ends: bool = True) -> str:
        """Report the figure of the size just tried (higher is better; ``None``: no plan there). Returns
        why an auto ladder ends at it, ``"none"`` (no plan, where ``none_ends``) or ``"flat"`` (no more
        than ``improves`` above the best before it), with :attr:`stopped` words the caller may replace
        (:meth:`end`); ``""``: it goes on (a list always does)."""
        b = self.tried[-1]
        if score is None:
            if self.auto and none_ends:
                self._end = f"batch {b}: no plan"
                return "none"
            return ""
        prev, prev_size = self.best, self.best_size
        if prev is None or score > prev + 1e-12 * abs(prev):
            self.best, self.best_size = score, b
        if self.auto and self.improves is not None and prev is not None and \
                score <= prev + max(self.improves, 1e-12) * abs(prev):
            self._end = f"batch {b}: no more than {self.improves:.0%} better than batch {prev_size}"
            return "flat"
        return ""

    def end(self, why: str) -> None:
        """End the ladder after the size just tried, ``why`` its :attr:`stopped` words."""
        self._end = why


def sweep_batches(point_at: Callable[[int], tuple], batch_sizes: Sequence[int] | None = None, *,
                  max_batch: int = AUTO_MAX_BATCH, on_point: Callable | None = None,
                  clock: Clock | None = None, halted: Callable[[], str] | None = None) -> tuple:
    """The batch-size sweep of both models, on a :class:`BatchLadder`: ``point_at(b) -> (point, why,
    stop)`` gives the best plan at batch size ``b``, or ``None`` and why there is none (``stop``: the
    words an auto sweep stops with, ``None``: ``why``'s). ``batch_sizes`` ``None``: auto, 1, 2, 4, ... up
    to ``max_batch``, stopping at the first size without a plan or whose samples/s are no more than
    :data:`IMPROVES` above the best so far (which is then the best if it serves more at all). Returns
    ``(points, best, stopped)`` as :class:`Sweep` holds them; ``on_point`` is called with each point
    found. ``clock``: the sweep's (its deadline leaves the sizes not yet tried out, and ``stopped`` says
    so; a Ctrl-C it notes ends the sweep). ``halted()``: why the sweep must end after the size just
    tried (a Ctrl-C its search took: "interrupted (Ctrl-C)"; ``""``: it may go on); ``stopped`` says
    that too."""
    ladder = BatchLadder(batch_sizes, max_batch=max_batch, clock=clock, halted=halted)
    points: list[tuple[int, object, str]] = []
    best = None
    for b in ladder:
        pt, why, stop = point_at(b)
        points.append((b, pt, "" if pt is not None else why))
        if pt is None:
            if ladder.scored(None):
                ladder.end(f"batch {b}: {stop or why}")
            continue
        if on_point is not None:
            on_point(pt)
        prev = best
        if ladder.scored(pt.samples_per_s) == "flat":
            # the sweep ends here, but a size that served more is the best of those tried, however little
            than = ("fewer than" if pt.samples_per_s < prev.samples_per_s else
                    f"at most {IMPROVES:.0%} more than")
            ladder.end(f"batch {b}: {pt.samples_per_s:.6g} samples/s, {than} batch {prev.batch_size}'s "
                       f"{prev.samples_per_s:.6g}")
        if ladder.best_size == b:
            best = pt
    return tuple(points), best, ladder.stopped


@dataclass(frozen=True, eq=False)
class Frontier:
    """Non-dominated plans, by samples/s decreasing (latency decreasing)."""

    points: tuple[ServingPoint, ...]
    per_batch: dict  # batch size -> its own non-dominated points (before merging)
    proven: bool  # complete, every point proven
    stopped: str = ""  # why the search ended before it was complete ("" when it was not cut short)
    #: batch size -> why no plan exists there, where that is proven (the exact DP found none)
    none: dict = dataclasses.field(default_factory=dict)


def parse_batch_sizes(text: str | int | Sequence[int] | None) -> list[int] | None:
    """``"auto"`` (or ``None``) -> ``None``; ``"1,2,8"`` -> ``[1, 2, 8]``; an int -> ``[int]``."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        items = [text]
    elif isinstance(text, str):
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part.isdigit():
                raise InputError(f"batch sizes {text!r}: {part!r} is not a positive integer (write auto or "
                                 f"a list such as 1,2,4,8)")
            items.append(int(part))
    else:
        items = list(text)
    if not items or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in items):
        raise InputError(f"batch sizes must be positive integers, got {text!r}")
    return sorted(set(items))


def batch_workload(path: str | os.PathLike, devices, batch_size: int, *, costs: str = "roofline",
                   dims=None, device_files: Iterable[str] = (), models: dict | None = None) -> Workload:
    """The model at ``batch_size`` (a fixed batch in the file is made symbolic first,
    :mod:`graphs.onnx_batch`), costed; each node's memory holds its parameters and its output.

    ``models``: a dict the caller keeps across batch sizes; the file is then read once for all of them
    (a 4-layer GPT-2 file is 400 MB: reading it takes seconds)."""
    from graphs.devices import DeviceSet, parse_devices
    from graphs.onnx_batch import check_batch, has_symbolic_batch
    from graphs.onnx_loader import batchable_path, parse_model, read_model
    from graphs.onnx_workload import DEFAULT_DEVICES, graph_workload

    models = {} if models is None else models

    def model_of(p: str):
        st = os.stat(p)
        key = (os.path.abspath(p), st.st_size, st.st_mtime_ns)
        if key not in models:
            models.clear()  # one model at a time
            models[key] = read_model(p)
        return models[key]

    t0 = time.perf_counter()
    src = os.fspath(path)
    model = model_of(src)
    if not has_symbolic_batch(model):
        src = batchable_path(src)
        model = model_of(src)
    ds = devices if isinstance(devices, DeviceSet) else parse_devices(devices or DEFAULT_DEVICES,
                                                                      device_files)
    external = any(t.data_location == 1 for t in model.graph.initializer)
    g = parse_model(model, source=src, batch_size=batch_size, dims=dims, external_data=external)
    w = graph_workload(g, ds, costs, t0=t0)
    check_batch(g, batch_size)
    return Workload(w.graph, w.cluster)


def _point(graph: OpGraph, cluster, sol: Solution, objective: str = "max-load", *,
           proven: bool | None = None) -> ServingPoint:
    ev = evaluate(graph, cluster, sol.assignment)
    p = Placement(graph, cluster, sol, ev, objective)
    b = graph.batch_size
    lat = latency(graph, cluster, sol.assignment, subgraphs=sol.stats.get("subgraphs")).total
    sps = 1e3 * b / ev.max_load if ev.max_load > 0 else math.inf
    return ServingPoint(b, p, sps, lat, sol.status == Status.OPTIMAL if proven is None else proven)


def serving_point(w: Workload, *, latency_slo: float | None = None, solver: str | None = None,
                  options: SolveOptions | None = None) -> tuple[ServingPoint | None, Solution]:
    """The best-throughput plan of one workload, under ``latency_slo`` (ms) if given: the default
    solver's (or ``solver``'s) max-load optimum without a target, the serving IP's with one."""
    options = options or SolveOptions()
    if latency_slo is None:
        p = place(w.graph, w.cluster, solver, options)
        if p.assignment is None:
            return None, p.solution
        return _point(w.graph, w.cluster, p.solution), p.solution
    sol = best_under_latency(w.graph, w.cluster, float(latency_slo), options)
    if sol.assignment is None:
        return None, sol
    return _point(w.graph, w.cluster, sol), sol


def best_under_latency(graph: OpGraph, cluster, latency_max: float, options: SolveOptions | None = None, *,
                       stop: Callable[[], bool] | None = None) -> Solution:
    """The serving domain's least max-load with one batch's latency at most ``latency_max`` ms: the
    serving IP's (:func:`solvers.slo_ip.solve`), after the max-load optimum. Without host cores the
    exact DP's optimum is the domain's (contiguous placements are the domain there); when the DP proves
    it and its latency meets the target, no plan serves more, under the target or not: it is the
    answer, ``optimal``, and no program runs (as the stage model's search does with its optimum).
    Otherwise the DP's plan is the program's start (it runs the DP itself no more); when a Ctrl-C
    stopped the DP the program does not run either: the best start, ``feasible``, or ``stopped``
    without one (:func:`solvers.slo_ip.solve` with ``dp``). With host cores the domain also spreads
    host operators over cores out of pipeline order, which the DP does not: its optimum proves nothing
    there, and the program runs as it is."""
    from solvers import slo_ip
    from solvers.registry import checked

    options = options or SolveOptions()
    hosts = any(not k.pays_communication and k.count > 0 for k in cluster.kinds)
    if hosts or options.warm_start is not None:
        sol = slo_ip.solve(graph, cluster, options, latency_max=latency_max, stop=stop)
        return checked("slo-ip", graph, sol, cluster=cluster, latency_max=latency_max)
    t0 = _now()
    t = options.time_limit
    # as the program's own start
    first = checked("dp", graph, slo_ip.dp_start(graph, cluster, t, threads=options.threads), cluster=cluster)
    if first.assignment is not None and not first.interrupted:
        lat = latency(graph, cluster, first.assignment)
        if (first.status == Status.OPTIMAL and lat.valid
                and max(lat.subgraphs_per_device().values(), default=0) <= 1
                and lat.total <= latency_max * (1 + 1e-9) + 1e-12):
            load = evaluate(graph, cluster, first.assignment).max_load
            msg = (f"the max-load optimum (the exact DP's, the serving domain's without host cores) has "
                   f"latency {lat.total:.6g} ms, within the target: no plan serves more, proven")
            return dataclasses.replace(first, objective=load, bound=load, gap=0.0, message=msg,
                                       stats={**(first.stats or {}), "max_load": load, "latency": lat.total,
                                              "latency_max": latency_max,
                                              "subgraphs": [int(x) for x in lat.subgraph]},
                                       time=_now() - t0)
    # the program from the DP's plan (a Ctrl-C the DP took: the best start, the program skipped)
    left = None if t is None else max(0.05, t - (_now() - t0))
    sol = slo_ip.solve(graph, cluster, dataclasses.replace(options, time_limit=left),
                       latency_max=latency_max, stop=stop, dp=first)
    return checked("slo-ip", graph, sol, cluster=cluster, latency_max=latency_max)


def sweep(path: str | os.PathLike, devices, batch_sizes: Sequence[int] | None = None, *,
          costs: str = "roofline", latency_slo: float | None = None, solver: str | None = None,
          options: SolveOptions | None = None, dims=None, device_files: Iterable[str] = (),
          max_batch: int = AUTO_MAX_BATCH, clock: Clock | None = None) -> Sweep:
    """Place the model at each batch size (``None``: auto, see :func:`sweep_batches`); the best is the
    one with the most samples/s (the smaller batch on a tie). ``options.time_limit`` bounds the whole
    call from its start, reading the model included (``clock``: the caller's instead, a command's
    :class:`~placement.clock.Clock`); loading the solver's kernels before the first solve is off it
    where numba compiles them (:meth:`~placement.clock.Clock.for_solve`)."""
    options = options or SolveOptions()
    clock = clock or Clock(options.time_limit)
    models: dict = {}  # the file read once
    proven_none: list[bool] = []  # per batch size without a plan: whether its solve proved none
    halt: list[str] = []  # a Ctrl-C a size's search took (it returned what it had): the sweep ends there

    def point_at(b: int):
        w = batch_workload(path, devices, b, costs=costs, dims=dims, device_files=device_files, models=models)
        left = clock.for_solve(solver, threads=options.threads)  # the kernels loaded once, off the clock
        opts = options if left is None else dataclasses.replace(options, time_limit=left)
        pt, sol = serving_point(w, latency_slo=latency_slo, solver=solver, options=opts)
        if sol.interrupted:
            halt.append(INTERRUPTED)
        if pt is not None:
            return pt, "", None
        proven_none.append(sol.status == Status.INFEASIBLE)
        if latency_slo is not None and sol.status == Status.INFEASIBLE and "latency" in sol.message:
            stop = "no plan meets the latency target"
        elif sol.status == Status.INFEASIBLE:
            stop = f"{sol.message or 'no placement'} (memory runs out)"
        else:
            stop = sol.message or "no placement found"
        return None, sol.message or sol.status.value, stop

    points, best, stopped = sweep_batches(point_at, batch_sizes, max_batch=max_batch, clock=clock,
                                          halted=lambda: halt[0] if halt else "")
    lowest, lowest_proven = None, False
    if best is None and latency_slo is not None and not halt:
        from solvers import slo_ip
        from solvers.registry import checked

        w = batch_workload(path, devices, points[0][0], costs=costs, dims=dims, device_files=device_files,
                           models=models)
        left = clock.left()
        opts = options if left is None else dataclasses.replace(options, time_limit=max(left, 1.0))
        sol = checked("slo-ip", w.graph, slo_ip.solve(w.graph, w.cluster, opts, minimise="latency"),
                      cluster=w.cluster, objective="latency")
        lowest = sol.objective if sol.assignment is not None else None
        lowest_proven = sol.status is Status.OPTIMAL
    # none: each size's solve proved it, or the least latency is proven above the target
    return Sweep(points, best, stopped, latency_slo, lowest, lowest_proven,
                 best is None and (all(proven_none) or lowest_proven), unproven_sizes(points, proven_none))


def auto_sizes(max_batch: int = AUTO_MAX_BATCH) -> list[int]:
    """The batch sizes an auto sweep tries: 1, 2, 4, ... up to ``max_batch``."""
    return [1 << k for k in range(int(math.log2(max_batch)) + 1)]


def non_dominated(points: Iterable[ServingPoint], rel: float = 1e-9) -> list[ServingPoint]:
    """The points no other point beats on both samples/s (higher) and latency (lower), by samples/s
    decreasing; of equal points a proven one (a proven frontier point first), then the first (smaller
    batch) is kept."""
    def proof(p):
        return (not p.proven, not getattr(p, "frontier", False),
                not getattr(p, "how", "").startswith("frontier point"))

    pts = sorted(points, key=lambda p: (-p.samples_per_s, p.latency_ms, p.batch_size, *proof(p)))
    out: list[ServingPoint] = []
    for p in pts:
        if out and p.latency_ms >= out[-1].latency_ms * (1 - rel):
            last = out[-1]  # no faster than a point with at least its throughput: kept only if it is that
            # point (equal figures, within rel, at the same batch size) with a stronger proof
            if p.batch_size == last.batch_size and p.samples_per_s >= last.samples_per_s * (1 - rel) and \
                    p.latency_ms <= last.latency_ms * (1 + rel) and proof(p) < proof(last):
                out[-1] = p
            continue
        out.append(p)
    return out


# ---------------------------------------------------------------- the frontier, under one deadline
_QUICK_IDEALS = 20_000  # the first DP run's lattice cap: exact on most models, a second or less
_MIN_PROGRAM_S = 0.5  # no program is started with less time than this left
_PROGRAM_SHARE = 0.2  # each program gets this share of the time left (at least _MIN_PROGRAM_S)
_EXACT_SHARE = 0.25  # the full exact DP, when the quick one could not be exact: this share of the time left
_POOL_SHARE = 0.1  # the sub-cluster starts: this share of the time left


def _now() -> float:
    return time.perf_counter()


def batch_frontier(w: Workload, options: SolveOptions | None = None, *, max_points: int = 50,
                   deadline: float | None = None, stop: Callable[[], bool] | None = None,
                   on_point: Callable[[ServingPoint], None] | None = None
                   ) -> tuple[list[ServingPoint], bool]:
    """One workload's non-dominated (max-load, latency) plans by the epsilon-constraint method (see the
    module doc), and whether every point was proven and the frontier is complete.

    ``options.time_limit`` bounds the whole call (as ``deadline``, a ``time.perf_counter()`` value,
    does); ``stop`` returning true ends it after the program that runs; ``on_point`` is called with
    every point as it is found (some are later dominated: the list returned holds the front only)."""
    options = options or SolveOptions()
    if deadline is None and options.time_limit is not None:
        deadline = _now() + options.time_limit
    found: list[ServingPoint] = []
    clock = Clock.until(deadline, stop, margin=_MIN_PROGRAM_S)
    proven, _, _ = _batch_frontier(w, options, max_points, clock, on_point, found)
    return non_dominated(found), proven


def _batch_frontier(w: Workload, options: SolveOptions, max_points: int, clock: Clock,
                    on_point: Callable[[ServingPoint], None] | None, found: list[ServingPoint]
                    ) -> tuple[bool, str, str]:
    """The search of :func:`batch_frontier`, appending every point it finds to ``found`` as it goes (so
    that a ``KeyboardInterrupt`` leaves them there). Returns (complete and proven, why it stopped early,
    why no plan exists where the exact DP proved there is none, else ``""``)."""
    from solvers import slo_ip
    from solvers.registry import checked, get_solver

    dp_solve = get_solver("dp")
    g, cl = w.graph, w.cluster
    hosts = any(not k.pays_communication and k.count > 0 for k in cl.kinds)
    raw = {**options.raw, "dp_warm_start": False}  # the starts come from here (the DP runs once)

    def emit(pt: ServingPoint) -> None:
        found.append(pt)
        if on_point is not None:
            on_point(pt)

    def complete(descent: list[ServingPoint]) -> bool:
        """The descent reached the latency end: whether every point of it is proven (then they are the
        frontier, and nothing else found is kept)."""
        if all(p.proven for p in descent):
            found[:] = descent
            return True
        return False

    def program(start, minimise: str = "max-load", latency_max: float = math.inf,
                max_load_max: float = math.inf) -> Solution:
        opts = dataclasses.replace(options, time_limit=clock.budget(_PROGRAM_SHARE), raw=raw,
                                   warm_start=start)
        sol = slo_ip.solve(g, cl, opts, stop=clock.stop, minimise=minimise, latency_max=latency_max,
                           max_load_max=max_load_max)
        return clock.seen(checked("slo-ip", g, sol, cluster=cl, objective=minimise, latency_max=latency_max,
                                  max_load_max=max_load_max))

    def dp_run(max_ideals: int | None, share: float, least: float = 0.0) -> Solution:
        dp_raw = {} if max_ideals is None else {"max_ideals": max_ideals}
        budget = clock.budget(share)
        limit = None if budget is None else max(least, budget)
        opts = SolveOptions(time_limit=limit, threads=options.threads, raw=dp_raw)
        return clock.seen(checked("dp", g, dp_solve(g, cl, opts), cluster=cl))

    # the throughput end: the exact DP's optimum (contiguous placements: without host cores exactly the
    # serving domain, so its max-load is the domain's best; with them a start the program may beat),
    # sought even when loading took the time limit (with at least LEAST_SOLVE_S), as place's solve is
    if clock.interrupted():
        return False, "interrupted", ""
    end = dp_run(_QUICK_IDEALS, 0.5, least=LEAST_SOLVE_S)
    if end.status == Status.INFEASIBLE and not hosts:  # the DP's domain is the frontier's: none at all
        return True, "", end.message or "no placement fits"
    exact = end.status == Status.OPTIMAL
    early = None
    if end.assignment is not None:  # its best so far, also after a Ctrl-C or at the time limit
        # a first point now, the throughput end's plan as the DP gave it: the program that minimises the
        # latency at its max-load may take long (a model of a hundred operators: tens of seconds)
        early = _point(g, cl, end, proven=False)
        emit(early)
    pool: list[tuple[float, float, np.ndarray]] | None = None
    descent: list[ServingPoint] = []  # the points from the throughput end down, in order
    limit = math.inf
    retried = exact
    while len(descent) < max_points:
        why = clock.halted()
        if why:
            return False, why, ""
        if limit == math.inf and exact and not hosts:
            first = end  # the DP's optimum is the domain's: no program needed for the max-load
        else:
            fits = [(load, a) for load, lat, a in (pool or []) if lat <= limit]
            if limit == math.inf and end.assignment is not None:
                fits.append((evaluate(g, cl, end.assignment).max_load, end.assignment))
            start = min(fits, key=lambda x: x[0])[1] if fits else None
            first = program(start, latency_max=limit)
        if first.assignment is None:
            if first.status == Status.INFEASIBLE:  # nothing below the last latency: complete
                return complete(descent), "", "" if descent else first.message or "no placement fits"
            return False, clock.halted() or ("time limit reached" if first.status == Status.STOPPED
                                             else first.message or "no plan found"), ""
        load = evaluate(g, cl, first.assignment).max_load
        second = first
        if not clock.halted():
            second = program(first.assignment, minimise="latency", max_load_max=load, latency_max=limit)
            if second.assignment is None:
                second = first
        ok = first.status == Status.OPTIMAL and second is not first and second.status == Status.OPTIMAL
        # the latency program's answer is a latency: its objective, bound and gap are the latency's
        pt = _point(g, cl, second, "latency" if second is not first else "max-load", proven=ok)
        if descent and pt.latency_ms >= descent[-1].latency_ms * (1 - 1e-9):
            return False, "no progress (numerical limits)", ""
        descent.append(pt)
        if early is not None and _same(early, pt) and early.proven == pt.proven:
            found[found.index(early)] = pt  # the programs kept the early point: said already
        else:
            emit(pt)
        early = None
        if pt.latency_ms <= 0:  # nothing is faster than no time at all: complete
            return complete(descent), "", ""
        limit = pt.latency_ms * (1 - _STEP)
        if pool is None and not clock.halted():
            pool = _start_pool(w, clock, options.threads)
        if not retried and not clock.halted():
            retried = True  # the full exact DP, once, within a share of the time left
            full = dp_run(None, _EXACT_SHARE)
            if full.status == Status.OPTIMAL and full.assignment is not None:
                end, exact = full, True
                top = descent[0]
                if full.objective < top.max_load * (1 - 1e-9):
                    descent, limit = [], math.inf  # a better throughput end: from the top again
                elif (not hosts and not top.proven and second is not first
                      and second.status == Status.OPTIMAL and len(descent) == 1):
                    # the DP proves the top's max-load; its latency program was proven already
                    descent[0] = dataclasses.replace(top, proven=True)
                    found[found.index(top)] = descent[0]
                    if on_point is not None:
                        on_point(descent[0])
    return False, clock.halted() or f"the point limit ({max_points}) was reached; more points may exist", ""


def _same(p: ServingPoint, q: ServingPoint, rel: float = 1e-9) -> bool:
    return math.isclose(p.max_load, q.max_load, rel_tol=rel) and math.isclose(p.latency_ms, q.latency_ms,
                                                                               rel_tol=rel)


def _start_pool(w: Workload, clock: Clock, threads: int | None = None, max_allocations: int = 64
                ) -> list[tuple[float, float, np.ndarray]]:
    """Starts for the frontier's programs: the DP's placement on sub-clusters (every count of each
    accelerator kind, host kinds all or none), as ``(max-load, latency, assignment)`` on the full
    cluster. Fewer devices mean fewer hops: these plans trade throughput for latency, which is what the
    tightening limits ask for, and a program under a time limit starts from the best that fits. Built
    within a share of the time left (:data:`_POOL_SHARE`); the DP's lattice is capped as for the first
    run (on a larger one it returns its best chain placement quickly)."""
    import itertools

    from solvers.registry import checked, get_solver

    dp_solve = get_solver("dp")
    cl = w.cluster
    left = clock.left()
    until = None if left is None else _now() + _POOL_SHARE * left
    choices = [range(k.count + 1) if k.pays_communication else sorted({0, k.count}) for k in cl.kinds]
    first = np.concatenate([[0], np.cumsum([k.count for k in cl.kinds])[:-1]])
    out = []
    for counts in itertools.islice(itertools.product(*choices), max_allocations + 1):
        if sum(counts) == 0 or counts == tuple(k.count for k in cl.kinds):
            continue  # the full cluster is the throughput end's own run
        if clock.halted() or (until is not None and _now() > until):
            break
        sub = cl.with_counts(counts)
        try:
            sol = clock.seen(checked("dp", w.graph, dp_solve(w.graph, sub, SolveOptions(
                time_limit=None if until is None else max(0.05, until - _now()), threads=threads,
                raw={"max_ideals": _QUICK_IDEALS})), cluster=sub))
        except PlacementError:
            continue
        if sol.assignment is None:
            continue
        sub_first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        kind_of = sub.device_kind()
        a = first[kind_of[sol.assignment]] + (sol.assignment - sub_first[kind_of[sol.assignment]])
        lat = latency(w.graph, cl, a)
        if lat.valid and max(lat.subgraphs_per_device().values(), default=0) <= 1:
            out.append((evaluate(w.graph, cl, a).max_load, lat.total, a))
    return out


class FrontierSearch:
    """The frontier over batch sizes as a search that can be watched and cut short: :meth:`run` calls
    ``on_point(point)`` for every point as it is found and ends at the deadline (``options.time_limit``
    seconds from :meth:`run`, for the whole search: every batch size, loading included) or when ``stop()``
    returns true; :meth:`result` is what it has found so far, also after a ``KeyboardInterrupt`` escaped
    :meth:`run`."""

    def __init__(self, path: str | os.PathLike, devices, batch_sizes: Sequence[int] | None = None, *,
                 costs: str = "roofline", options: SolveOptions | None = None, dims=None,
                 device_files: Iterable[str] = (), max_points: int = 50, deadline: float | None = None,
                 stop: Callable[[], bool] | None = None,
                 on_point: Callable[[ServingPoint], None] | None = None):
        self.path, self.devices, self.batch_sizes = path, devices, batch_sizes
        self.costs, self.options, self.dims = costs, options or SolveOptions(), dims
        self.device_files, self.max_points = tuple(device_files), max_points
        self.deadline, self.stop, self.on_point = deadline, stop, on_point
        self.found: dict[int, list[ServingPoint]] = {}
        self.none: dict[int, str] = {}  # batch size -> why no plan exists there (proven)
        self._models: dict = {}  # the file, read once for every batch size
        self.proven = False
        self.stopped = "not started"

    def run(self) -> Frontier:
        if self.deadline is None and self.options.time_limit is not None:
            self.deadline = _now() + self.options.time_limit
        clock = Clock.until(self.deadline, self.stop, margin=_MIN_PROGRAM_S)
        ladder = BatchLadder(self.batch_sizes, clock=clock)
        self.proven, self.stopped = False, "interrupted"  # what stays if a KeyboardInterrupt escapes
        proven, stopped = True, ""  # stopped: the first size whose search was cut short
        for b in ladder:
            w = batch_workload(self.path, self.devices, b, costs=self.costs, dims=self.dims,
                               device_files=self.device_files, models=self._models)
            pts = self.found.setdefault(b, [])
            ok, why, none = _batch_frontier(w, self.options, self.max_points, clock.share(ladder.share()),
                                            self.on_point, pts)
            proven &= ok
            if none:
                self.none[b] = none
            if why:
                stopped = stopped or f"batch {b}: {why}"
                if why == "interrupted":
                    break
            ladder.scored(max(p.samples_per_s for p in pts) if pts else None)
        if ladder.halt:  # sizes left untried: the frontier is not complete, and they are named
            proven, stopped = False, "; ".join(filter(None, (stopped, ladder.stopped)))
        self.proven, self.stopped = proven and not stopped, stopped
        return self.result()

    def result(self) -> Frontier:
        """The non-dominated points found so far (the whole frontier once :meth:`run` has returned)."""
        per_batch = {b: non_dominated(v) for b, v in self.found.items()}
        merged = non_dominated([p for pts in self.found.values() for p in pts])
        return Frontier(tuple(merged), per_batch, self.proven, self.stopped, dict(self.none))


def frontier(path: str | os.PathLike, devices, batch_sizes: Sequence[int] | None = None, *,
             costs: str = "roofline", options: SolveOptions | None = None, dims=None,
             device_files: Iterable[str] = (), max_points: int = 50,
             on_point: Callable[[ServingPoint], None] | None = None) -> Frontier:
    """Non-dominated (samples/s, latency) plans over the batch sizes (``None``: those an auto sweep
    tries, stopping once the best throughput stops improving); ``options.time_limit`` bounds the whole
    search (see :class:`FrontierSearch`)."""
    return FrontierSearch(path, devices, batch_sizes, costs=costs, options=options, dims=dims,
                          device_files=device_files, max_points=max_points, on_point=on_point).run()
