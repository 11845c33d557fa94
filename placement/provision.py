"""The cheapest cluster for a throughput target: which devices to rent, from what is available.

Prices are per device-hour, set by the user: ``price_per_hour`` in a device file, or a prices file
(:func:`read_prices`; :data:`EXAMPLE_PRICES` is an example, not a quote). An *allocation* is a
number of devices per kind, up to what is available; its cost is the sum of its devices' prices.

Without a latency target, :func:`provision` reads the best max-load of **every** allocation from one
run of the exact DP (:func:`solvers.dp.curve`, contiguous placements), so the cheapest allocation whose
throughput (``1000 batch / max-load`` samples/s) meets the target is exact, and so is the
price–throughput curve of efficient allocations (no cheaper allocation serves as much).

With a latency target, each allocation's best throughput under it is the serving IP's
(:mod:`solvers.slo_ip`), or the exact DP's optimum where that proves it (no host cores, its latency
within the target: :func:`placement.serving.best_under_latency`). Allocations are tried cheapest
first; one is skipped without a solve when a bound already rules it out (its max-load is at least the
largest node's and the total work's share per device, its latency at least the critical path); the
first that meets both targets is the answer, and it is exact when every solve before it was proven.
``max_solves`` caps the allocations solved. When none meets the target, the most found
(:attr:`Provision.max_reachable`) is the most any allocation serves only where the search was complete
and every answer proven. That search
is :func:`cheapest_first`, which the stage model's provisioning (:func:`placement.serving_stages.provision`)
runs too, with its own bound and solve. When no
allocation has a plan under the latency target, the lowest latency of the available devices (the
serving IP's, minimising latency) says by how much it is missed.

``options.time_limit`` bounds the whole call (as ``deadline``, a ``time.perf_counter()`` value, does),
and ``stop()`` returning true ends it after the solve that runs (Ctrl-C on the command line; a Ctrl-C
that a solve took ends it too): the answer is then what was found, proven only where it is, and
``stopped`` says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError, ProblemTooLargeError
from graphs.evaluate import evaluate
from graphs.model import Cluster, OpGraph
from solvers.base import Solution, SolveOptions, Status

from .clock import Clock

__all__ = ["EXAMPLE_PRICES", "read_prices", "kind_prices", "Allocation", "Provision", "provision",
           "cheapest_first", "Tried", "Search"]

#: a provisioning search goes on until this many seconds are left (each allocation's solve takes its own
#: limit)
SEARCH_MARGIN_S = 0.05

#: an example prices file (made-up round numbers in the range of public cloud list prices; set your own)
EXAMPLE_PRICES = """\
# Prices per device-hour for placement provision --prices FILE. Example figures only: set your own.
[prices]
cpu = 0.05        # one host CPU core
t4 = 0.35
l4 = 0.80
v100 = 2.50
a100 = 3.00
a100-80gb = 4.00
h100 = 6.00
"""


def read_prices(path: str | os.PathLike) -> dict[str, float]:
    """A prices file: TOML or JSON ``{"prices": {kind: price per device-hour}}`` (or the bare map)."""
    from graphs.jsonio import read_json

    path = os.fspath(path)
    if path.lower().endswith(".toml"):
        import tomllib

        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise InputError("no such prices file", source=path) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"not a valid TOML prices file: {e}", source=path) from None
    else:
        data = read_json(path)
    return parse_prices(data, source=path)


def parse_prices(data, *, source: str | None = None) -> dict[str, float]:
    if isinstance(data, dict) and isinstance(data.get("prices"), dict):
        data = data["prices"]
    if not isinstance(data, dict) or not data:
        raise InputError('a prices file maps device kinds to prices per device-hour: [prices] a100 = 3.0',
                         source=source)
    out = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise InputError(f"price of {k!r} must be a non-negative number, got {v!r}", source=source)
        out[str(k).strip().lower()] = float(v)
    return out


def kind_prices(specs, prices: Mapping[str, float] | None) -> np.ndarray:
    """Price per device-hour of every kind (``prices`` first, then the device files'); raises
    :class:`InputError` naming the kinds without one."""
    out, missing = [], []
    for s in specs:
        p = (prices or {}).get(s.name, s.price_per_hour)
        if p is None:
            missing.append(s.name)
        out.append(p)
    if missing:
        raise InputError(f"no price for device kind(s) {', '.join(missing)}: give --prices FILE (see "
                         f"placement provision --example-prices) or price_per_hour in a device file")
    return np.array(out, dtype=np.float64)


@dataclass(frozen=True)
class Allocation:
    counts: tuple[int, ...]
    price: float  # per hour
    max_load: float  # ms per batch (inf: no placement)
    samples_per_s: float
    proven: bool = True
    #: the devices per kind its plan runs on (``None``: not known, or all of ``counts``): the plan is one
    #: of that smaller allocation too, which serves as much for less
    used: tuple[int, ...] | None = None


def used_counts(num_kinds: int, kind_of_each) -> tuple[int, ...]:
    """Devices per kind, given the kind of each device a plan runs on (one entry per device)."""
    out = [0] * num_kinds
    for k in kind_of_each:
        out[int(k)] += 1
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Provision:
    """The cheapest allocation meeting the target (``None``: unreachable), its plan, the efficient
    allocations (price increasing, throughput increasing) and whether the answer is proven. ``model``:
    the model searched; its plan (``solution``) is a :class:`~solvers.base.Solution` of one device per
    stage, or the stage model's :class:`~placement.serving_stages.StagePoint`."""

    kinds: tuple[str, ...]
    target: float
    latency_slo: float | None
    best: Allocation | None
    solution: object  # a Solution (one device per stage) or a StagePoint (the stage model); None: no plan
    cluster: Cluster | None  # the allocation's cluster
    efficient: tuple[Allocation, ...]
    proven: bool
    #: the highest throughput found (when the target is unreachable), as the devices its plan uses (the
    #: curve's convention: :func:`_efficient`); its ``proven``: proven the most any allocation serves
    #: (every allocation solved or ruled out, every answer proven), not only its own allocation's best
    max_reachable: Allocation | None
    solves: int = 0
    stopped: str = ""  # why the search ended before it could answer for sure ("" when it did not)
    # with a latency target that no allocation meets: the serving IP's lowest latency on all the
    # available devices (objective: the lowest found; bound: what is proven), else None
    lowest_latency: Solution | None = None
    how: str = ""  # how the answer was found, where the command tried more than one model
    model: str = "one-device-per-stage"  # or "stages"
    #: proven that no allocation has any plan at all, whatever the targets (the model fits none): a
    #: larger batch, needing more memory, has none either. False where allocations were ruled out by a
    #: bound on the throughput (they may have plans short of the target, and a larger batch may reach it)
    no_plan: bool = False

    @property
    def latency_unmet(self) -> bool:
        """Whether no allocation was found with a plan under the latency target."""
        return self.latency_slo is not None and self.best is None and not self.efficient


def _most_found(eff: list[Allocation], tried, proven: bool) -> Allocation | None:
    """:attr:`Provision.max_reachable` of a search that tried ``tried`` (``eff``: the efficient ones,
    :func:`_efficient`) and was ``proven`` complete: the last efficient allocation (the most samples/s,
    as the devices its plan uses), proven the most any allocation serves only when the search was and
    every answer on the way was (an unproven answer's allocation may serve more than it found)."""
    if not eff:
        return None
    return dataclasses.replace(eff[-1], proven=proven and all(a.proven for a in tried))


def _efficient(allocs: list[Allocation], prices=None) -> list[Allocation]:
    """The allocations no cheaper one serves as much as, price increasing. With ``prices``, an
    allocation whose plan leaves devices idle (:attr:`Allocation.used`) stands as the devices its plan
    uses, at their price: the same plan on fewer devices (a search that tries allocations cheapest first
    may have skipped that one by a bound, or reached its limit before it)."""
    if prices is not None:
        prices = np.asarray(prices, dtype=np.float64)
        allocs = [dataclasses.replace(a, counts=tuple(a.used), price=float(np.dot(a.used, prices)), used=None)
                  if a.used is not None and tuple(a.used) != tuple(a.counts) else a for a in allocs]
    out: list[Allocation] = []
    for a in sorted(allocs, key=lambda a: (a.price, -a.samples_per_s, sum(a.counts))):
        if not math.isfinite(a.max_load):
            continue
        if out and a.samples_per_s <= out[-1].samples_per_s * (1 + 1e-12):
            continue
        out.append(a)
    return out


@dataclass(frozen=True)
class Tried:
    """What one allocation's solve found: its best plan under the latency target as an
    :class:`Allocation` and the caller's ``answer`` for it (``None``: no plan found), and whether it is
    proven that no plan on the allocation meets the targets (``short``) or that none was missed
    (``proven``: no plan under the latency target exists where ``alloc`` is ``None``); ``no_plan``: proven
    that the allocation has no plan at all, whatever the targets (the model does not fit it)."""

    alloc: Allocation | None = None
    answer: object = None
    short: bool = False
    proven: bool = True
    no_plan: bool = False


@dataclass(frozen=True)
class Search:
    """The outcome of :func:`cheapest_first`: every allocation with a plan (``tried``), the first that
    meets the target and its answer, whether that is proven cheapest, the solves run and why the search
    ended early (``""``: it did not); ``no_plan``: every allocation is proven to have no plan at all
    (:attr:`Tried.no_plan`; none ruled out by a bound, whose allocation may have plans short of the
    target)."""

    tried: tuple[Allocation, ...]
    best: Allocation | None
    answer: object
    proven: bool
    solves: int
    stopped: str
    no_plan: bool = False


def cheapest_first(order, target: float, rule_out: Callable, solve_at: Callable, clock: Clock,
                   max_solves: int) -> Search:
    """The latency-target search of both models: the allocations of ``order`` (price increasing) in
    turn, skipping one that a bound rules out (``rule_out(c)``) or that is no larger than one proven
    short (fewer devices serve no more: every plan on it is a plan on the larger allocation), solving
    the rest (``solve_at(c, time_limit) -> Tried``, each with its share of the time left, at least a
    tenth) until one meets ``target`` samples/s, the time runs out, ``clock`` says stop or
    ``max_solves`` is reached. The answer is proven cheapest when every allocation before it was
    proven short or ruled out and its own plan is proven (:attr:`Allocation.proven`). A Ctrl-C (a solve
    took it and said so, :meth:`placement.clock.Clock.seen`, or let it through) ends the search with
    what was found, ``stopped`` "interrupted"."""
    short: list[tuple[int, ...]] = []
    tried: list[Allocation] = []
    proven, solves, stopped = True, 0, ""
    # every allocation so far has no plan at all: one skipped as no larger than such a one has none either
    no_plan = True
    for i, c in enumerate(order):
        if any(all(x <= y for x, y in zip(c, s)) for s in short):
            continue  # a larger allocation was proven short: so is this one
        if rule_out(c):
            short.append(c)
            no_plan = False
            continue
        if solves >= max_solves:
            proven, stopped = False, f"the solve limit ({max_solves}) was reached"
            break
        stopped = clock.halted()
        if stopped:
            proven = False
            break
        solves += 1
        t = clock.left()
        try:
            got = solve_at(c, None if t is None else max(0.05, t * max(0.1, 1 / (len(order) - i))))
        except KeyboardInterrupt:  # let through between a solve's steps: nothing found on this allocation
            clock.took = True
            proven, stopped = False, "interrupted"
            break
        if got.short:
            short.append(c)
        no_plan = no_plan and got.alloc is None and got.no_plan
        if got.alloc is None:
            proven = proven and got.proven
            continue
        tried.append(got.alloc)
        if got.alloc.samples_per_s >= target * (1 - 1e-12):
            # a solve that took a Ctrl-C may still have met the target: the answer, said interrupted
            return Search(tuple(tried), got.alloc, got.answer, proven and got.alloc.proven, solves,
                          "interrupted" if clock.interrupted() else "")
        if not got.short:
            proven = False  # a better plan might have met the target
    return Search(tuple(tried), None, None, proven, solves, stopped, no_plan and proven and not stopped)


def _lower_bounds(graph: OpGraph, cl: Cluster) -> tuple[float, float]:
    """A max-load and a latency no placement on ``cl`` beats."""
    from solvers.latency_ip import critical_path

    compute, _ = graph.costs_for(cl)
    active = [t for t, k in enumerate(cl.kinds) if k.count > 0]
    best = compute[active].min(axis=0)
    if not np.isfinite(best).all():
        return math.inf, math.inf
    return float(max(best.max(initial=0.0), best.sum() / cl.num_devices)), critical_path(graph, cl)


def _lattice_in_time(graph: OpGraph, cluster: Cluster, deadline: float | None) -> None:
    """Raise :class:`ProblemTooLargeError` when the DP's lattice cannot even be enumerated by
    ``deadline``: :func:`solvers.dp.curve` enumerates it without a deadline (its DP has one)."""
    if deadline is None:
        return
    from graphs.errors import InfeasibleError
    from graphs.ideals import enumerate_ideals
    from solvers.dp import DEFAULT_MAX_IDEALS, prepare

    try:
        items = prepare(graph, cluster).items
    except InfeasibleError:
        return  # the curve says so itself
    enumerate_ideals(items.num_classes, items.src, items.dst, max_ideals=DEFAULT_MAX_IDEALS,
                     deadline=deadline)


def provision(graph: OpGraph, available: Cluster, prices, target: float, *, latency_slo: float | None = None,
              options: SolveOptions | None = None, max_solves: int = 200, deadline: float | None = None,
              stop: Callable[[], bool] | None = None) -> Provision:
    """The cheapest allocation of ``available`` serving ``target`` samples/s (and, if given, with the
    latency of one batch at most ``latency_slo`` ms); see the module doc. ``prices``: per kind, in the
    cluster's order."""
    options = options or SolveOptions()
    if not (target > 0 and math.isfinite(target)):
        raise InputError(f"the throughput target must be a positive number of samples/s, got {target}")
    if deadline is None and options.time_limit is not None:
        deadline = time.perf_counter() + options.time_limit

    clock = Clock.until(deadline, stop, margin=SEARCH_MARGIN_S)
    left, halted = clock.left, clock.halted

    def timed(share: float = 1.0) -> SolveOptions:
        t = left()
        return dataclasses.replace(options, time_limit=None if t is None else max(0.05, share * t))

    batch = graph.batch_size
    prices = np.asarray(prices, dtype=np.float64)
    kinds = tuple(k.name for k in available.kinds)
    shape = [k.count + 1 for k in available.kinds]
    allocs_all = [c for c in itertools.product(*(range(n) for n in shape)) if sum(c) > 0]

    def sps(load: float) -> float:
        return 1e3 * batch / load if load > 0 else math.inf

    if latency_slo is None:
        from solvers.dp import curve

        try:
            _lattice_in_time(graph, available, deadline)
            cv = curve(graph, available, timed())
        except ProblemTooLargeError as e:
            why = halted() or ("time limit reached" if deadline is not None else str(e))
            return Provision(kinds, target, None, None, None, None, (), False, None,
                             stopped=f"{why}: the DP over every allocation did not finish")
        allocs = [Allocation(c, float(np.dot(c, prices)), cv.values[c], sps(cv.values[c]))
                  for c in allocs_all]
        eff = _efficient(allocs)
        best = next((a for a in eff if a.samples_per_s >= target * (1 - 1e-12)), None)
        top = eff[-1] if eff else None
        if best is None:  # the curve has every allocation's optimum: none finite means none has a plan
            return Provision(kinds, target, None, None, None, None, tuple(eff), True, top, no_plan=not eff)
        from solvers.registry import check_curve_value, checked, get_solver

        cl = available.with_counts(best.counts)
        sol = clock.seen(checked("dp", graph, get_solver("dp")(graph, cl, timed()), cluster=cl))
        check_curve_value("dp", best.counts, best.max_load, sol)  # the curve keeps no placements
        why = halted() if clock.interrupted() else "" if sol.status == Status.OPTIMAL else (
            halted() or sol.message)
        if sol.assignment is None:
            return Provision(kinds, target, None, best, None, None, tuple(eff), False, top, stopped=why)
        return Provision(kinds, target, None, best, sol, cl, tuple(eff), sol.status == Status.OPTIMAL, top,
                         stopped=why)

    from solvers import slo_ip
    from solvers.registry import checked

    from .serving import best_under_latency

    order = sorted(allocs_all, key=lambda c: (float(np.dot(c, prices)), sum(c)))

    def rule_out(c) -> bool:  # a bound rules it out: no solve needed
        lb_load, lb_lat = _lower_bounds(graph, available.with_counts(c))
        return sps(lb_load) < target * (1 - 1e-12) or lb_lat > latency_slo * (1 + 1e-12)

    def solve_at(c, time_limit) -> Tried:
        cl = available.with_counts(c)
        sol = clock.seen(best_under_latency(graph, cl, latency_slo,
                                            dataclasses.replace(options, time_limit=time_limit), stop=stop))
        if sol.assignment is None:
            return Tried(short=sol.status == Status.INFEASIBLE, proven=sol.status == Status.INFEASIBLE)
        load = evaluate(graph, cl, sol.assignment).max_load
        kind = cl.device_kind()
        used = used_counts(len(c), (kind[d] for d in np.unique(np.asarray(sol.assignment))))
        a = Allocation(c, float(np.dot(c, prices)), load, sps(load), sol.status == Status.OPTIMAL, used)
        # proven best under the target and short of it: no plan on this allocation meets both
        return Tried(a, (sol, cl), short=a.proven and a.samples_per_s < target * (1 - 1e-12))

    found = cheapest_first(order, target, rule_out, solve_at, clock, max_solves)
    tried, best, proven, stopped = list(found.tried), found.best, found.proven, found.stopped
    sol_best, cl_best = found.answer or (None, None)
    eff = _efficient(tried, prices)
    top = _most_found(eff, tried, proven)
    lowest = None
    if best is None and not eff and not halted():
        # no allocation has a plan under the latency target: how low can the latency go at all?
        lowest = slo_ip.solve(graph, available, timed(), minimise="latency", stop=stop)
        lowest = clock.seen(checked("slo-ip", graph, lowest, cluster=available, objective="latency"))
        if clock.interrupted():  # a Ctrl-C its program took: what it found is said, and why it stopped
            stopped = "interrupted"
    return Provision(kinds, target, latency_slo, best, sol_best, cl_best, tuple(eff),
                     proven, top, found.solves, stopped, lowest, no_plan=found.no_plan and best is None)
