"""``auto``: the exact DP when it fits the limits, a principled large-graph path when it does not.

1. Contract the graph exactly (colocation, cycles, zero-cost leaves), enumerate its ideals within a
   share of the time and memory budget, and estimate the DP's work by sampling. If it fits, run the exact
   DP: the answer is **exact** (status ``optimal``).
2. Otherwise coarsen (:mod:`graphs.coarsen`): merge chain links up to a compute grain that doubles at
   every level, and merge operators of one layer (``layerId`` or name prefix). The first coarse graph
   whose DP fits is solved exactly: the answer is **exact on the coarsened graph**.
3. If no coarse graph fits, the DP runs over the prefixes of several topological orders: **heuristic**.
4. Every non-exact placement is refined on the original graph by contiguous single-item moves and, when
   the contiguous IP is available and time remains, handed to it as a warm start so that it can improve
   the placement and prove a bound. Status ``feasible``, with the bound and gap when known; ``optimal``
   only when the IP closed the gap (path ``exact``). When the IP stops at the requested ``options.gap``
   (every option, backend and seed included, reaches the IP) its own bound and gap are reported, the
   path is ``within-gap`` and the status ``feasible``. A bound above the evaluated objective (a model
   disagreeing with the evaluator) is never trusted and never turns into ``optimal``.

Limits: ``options.time_limit`` (default :data:`DEFAULT_TIME_LIMIT` s) and ``options.raw["memory_limit"]``
in bytes (default :data:`DEFAULT_MEMORY_LIMIT`); each DP attempt gets at most 70% of the time left, so a
wrong estimate still leaves time for the next level. An estimate over that share but within
:data:`TRIAL_FACTOR` of it is tried all the same (the estimate's time per pair is cautious), and given
up as soon as the run's own progress projects it past the share. ``options.raw["seconds_per_pair"]``
overrides the DP's time-per-pair calibration. ``stats["steps"]`` lists ``(step, max-load)`` for every
stage the path ran (``heuristic``, ``exact`` or ``coarsened``, ``refined``, ``ip``). The label is in
``stats["path"]``: ``exact``, ``within-gap``, ``exact-on-coarsened`` or ``heuristic``.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import numpy as np

from graphs.coarsen import merge_by_key, merge_chains, name_prefix_keys
from graphs.errors import InfeasibleError, ProblemTooLargeError
from graphs.evaluate import evaluate
from graphs.ideals import chain_ideals, enumerate_ideals
from graphs.model import Cluster, OpGraph
from graphs.order import topological_order

from . import dp
from ._common import none_fits
from .base import (
    BOUND_TOLERANCE_REL,
    DEFAULT_BACKEND,
    IP_MIN_SECONDS,
    Solution,
    SolveOptions,
    Status,
    check_bound,
    relative_gap,
)
from .bounds import bounds_of_items
from .refine import refine

__all__ = ["solve", "DEFAULT_TIME_LIMIT", "DEFAULT_MEMORY_LIMIT"]

DEFAULT_TIME_LIMIT = 300.0


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8e9


DEFAULT_MEMORY_LIMIT = min(4e9, 0.5 * _physical_memory())
_BYTES_PER_IDEAL_ENUMERATED = 400  # Python ints, dict entries and frontier lists while enumerating


# The estimate's time per pair is a cautious constant (dp.SECONDS_PER_PAIR): with two threads the DP
# took 20-110 ns a pair on InceptionV3 and Llama graphs where the estimate assumes 147, so an estimate up
# to this many times the budget is tried rather than skipped (Llama-32 training over a100:4,t4:4,cpu:8:
# estimated 333 s, exact in 155 s); _Trial stops a run that its own progress shows to be too slow.
TRIAL_FACTOR = 4.0


class _Trial:
    """``run_dp``'s ``watch`` for a run the estimate puts over ``budget`` seconds: once it has had a tenth
    of the budget and done 1% of the estimated ``pairs``, it gives up when the time so far, scaled by
    the pairs left, exceeds the budget (judged again after every chunk)."""

    def __init__(self, pairs: float, budget: float, clock=time.perf_counter) -> None:
        self.pairs, self.budget, self.clock = max(1.0, pairs), budget, clock
        self.start = clock()
        self.gave_up = False
        self.verdict = ""

    def __call__(self, done: int) -> bool:
        spent = self.clock() - self.start
        if spent < 0.1 * self.budget or done < 0.01 * self.pairs:
            return False
        projected = spent * self.pairs / done
        if projected > self.budget:
            self.gave_up = True
            self.verdict = (f"gave up after {spent:.0f} s: {done:.3g} of about {self.pairs:.3g} pairs done, "
                            f"projected {projected:.0f} s against {self.budget:.0f} s")
        return self.gave_up


def _chain_bound(prob: dp.DPProblem, orders) -> tuple[dp.DPRun | None, bool]:
    """The best complete DP run over the prefixes of ``orders``, and whether a Ctrl-C stopped one (the
    DP takes it and returns what it has): then no order after it runs, and the caller must stop too."""
    best = None
    for order in orders:
        run = dp.run_dp(prob, chain_ideals(prob.items.num_classes, order))
        if run.complete and math.isfinite(run.value) and (best is None or run.value < best.value):
            best = run
        if run.interrupted:
            return best, True
    return best, False


def _random_orders(items, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random topological orders of the item graph (random choice among ready items)."""
    return [topological_order(items.num_classes, items.src, items.dst, policy="random", rng=rng)
            for _ in range(count)]


def _levels(graph: OpGraph, cluster: Cluster, prob: dp.DPProblem):
    """(label, graph) from the original to ever coarser graphs."""
    yield "exact", graph
    lb = dp.lower_bound(prob)
    layer_keys = list(graph.meta.get("layer") or name_prefix_keys(graph))
    # keys may cover the forward nodes only: backward twins follow them through colocation anyway
    layer_keys += [None] * (graph.num_nodes - len(layer_keys))
    has_layers = any(k is not None for k in layer_keys)
    for frac in (1 / 64, 1 / 32, 1 / 16, 1 / 8):
        yield f"exact on the coarsened graph (chains merged up to {frac:.3g} of the max-load bound)", \
            merge_chains(graph, cluster, lb * frac)
    if has_layers:
        layered = merge_by_key(graph, layer_keys)
        yield "exact on the coarsened graph (one item per layer)", layered
        yield ("exact on the coarsened graph (one item per layer, chains merged up to 1/8 of the bound)",
               merge_chains(layered, cluster, lb / 8))
    for frac in (1 / 4, 1 / 2):
        yield f"exact on the coarsened graph (chains merged up to {frac:.3g} of the max-load bound)", \
            merge_chains(graph, cluster, lb * frac)


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Best contiguous placement within the limits, labelled exact / exact on a coarsened graph /
    heuristic (see the module documentation)."""
    options = options or SolveOptions()
    if options.objective != "max-load":
        from .registry import get_solver

        limit = options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT
        return get_solver("ip")(graph, cluster, replace(options, time_limit=limit))
    t0 = time.perf_counter()
    limit = options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT
    deadline = t0 + limit
    mem_limit = float(options.raw.get("memory_limit", DEFAULT_MEMORY_LIMIT))
    max_ideals = int(min(dp.DEFAULT_MAX_IDEALS, mem_limit / _BYTES_PER_IDEAL_ENUMERATED))
    try:
        base = dp.prepare(graph, cluster)
    except InfeasibleError as e:
        return Solution(None, math.inf, Status.INFEASIBLE, "auto", message=str(e),
                        time=time.perf_counter() - t0)

    # proven lower bounds (solvers/bounds.py): they end the search when an incumbent meets them and
    # prune the DP's device-count states; raw["bounds"] = False runs without them (for comparison)
    use_bounds = bool(options.raw.get("bounds", True))
    report = options.raw.get("report")  # called with {"value", "bound"[, "fraction"]} as they change
    lower = bounds_of_items(base.item_compute, base.item_memory, base.counts, base.caps) if use_bounds \
        else None
    floor = lower.value if lower is not None and math.isfinite(lower.value) else 0.0
    quick = max(floor, dp.lower_bound(base))

    def tell(value: float | None, **extra) -> None:
        if report is not None:
            report({"value": value, "bound": quick} | extra)  # extra may override the bound

    tried = []
    found = None  # (assignment, value, label, exact)
    steps = []  # (step, max-load after it): what each stage of the path achieved, in order
    interrupted = False
    pairs = None
    threads_used = None  # the exact or coarsened DP's thread count, where one ran
    try:
        for label, g in _levels(graph, cluster, base):
            now = time.perf_counter()
            remaining = deadline - now
            if remaining <= 0:
                break
            prob = base if g is graph else dp.prepare(g, cluster)
            chain, interrupted = _chain_bound(prob, dp.topological_orders(prob.items))
            if found is None and chain is not None:
                a0 = dp.stages_to_assignment(prob, cluster, chain.stages)
                found = (a0, chain.value, "heuristic", False)
                steps.append(("heuristic", chain.value))
                tell(chain.value)
                if use_bounds and g is graph and chain.value <= floor * (1 + 1e-9):
                    found = (a0, chain.value, "the placement over a topological order meets the lower bound",
                             True)
                    break
            if interrupted:  # no lattice after a Ctrl-C: the orders' best so far
                break
            ub = chain.value * (1 + 1e-9) if chain else math.inf
            try:
                lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst,
                                           max_ideals=max_ideals, deadline=now + 0.25 * remaining)
            except ProblemTooLargeError as e:
                tried.append(f"{label}: {e}")
                continue
            est = dp.estimate(prob, lattice, ub, seconds_per_pair=options.raw.get("seconds_per_pair"),
                              affordable=0.5 * (deadline - time.perf_counter()), threads=options.threads)
            left = deadline - time.perf_counter()
            # an estimate can be wrong (a busy machine): keep 30% of the time for the coarser levels,
            # the refinement and the IP rather than end with nothing but the first heuristic
            budget = 0.7 * left
            if est.seconds > TRIAL_FACTOR * budget or est.memory_bytes > mem_limit:
                tried.append(f"{label}: {lattice.num_ideals:,} ideals, estimated {est.seconds:.0f} s and "
                             f"{est.memory_bytes / 1e9:.2f} GB")
                continue
            # over the budget by the estimate, but within TRIAL_FACTOR of it: run, and give up as soon
            # as the pairs done so far project past the budget
            trial = _Trial(est.pairs, budget) if est.seconds > budget else None
            incumbent = found[1] if found is not None else None

            def tick(fraction: float, _value=incumbent) -> None:
                if options.progress is not None:
                    options.progress(fraction)
                tell(_value, fraction=fraction)

            # the floor and the priced-work test hold for any graph coarser than the original too (its
            # optimum is no better); prices for the LP's kinds and plain work.
            # The tie-break (fewest devices among optima) only where the answer is final: a coarse
            # placement on fewer devices would leave the refinement fewer devices to move items to
            prices = (np.vstack([lower.prices, np.ones_like(lower.prices)]) if lower is not None else None)
            run = dp.run_dp(prob, lattice, ub=ub, deadline=time.perf_counter() + budget,
                            progress=tick if (options.progress or report) else None, threads=options.threads,
                            tie_break=label == "exact" and bool(options.raw.get("tie_break", True)),
                            prices=prices, floor=floor * (1 - 1e-9), watch=trial)
            pairs = run.pairs
            threads_used = run.threads
            interrupted = run.interrupted
            if run.complete and math.isfinite(run.value):
                steps.append(("exact" if label == "exact" else "coarsened", run.value))
                if found is None or run.value <= found[1] or label == "exact":
                    found = (dp.stages_to_assignment(prob, cluster, run.stages), run.value, label,
                             label == "exact")
                break
            if run.complete and g is graph:
                return Solution(None, math.inf, Status.INFEASIBLE, "auto", time=time.perf_counter() - t0,
                                message=none_fits(graph, cluster, "contiguous placement"))
            if run.complete:  # coarser graphs only get harder to fit
                tried.append(f"{label}: {none_fits(g, cluster, 'placement of this coarsened graph')}")
                break
            tried.append(f"{label}: {trial.verdict}" if trial is not None and trial.gave_up
                         else f"{label}: stopped at the time limit")
            if interrupted:
                break
    except KeyboardInterrupt:
        interrupted = True

    if found is None and not interrupted:
        # the prefixes of many random topological orders: always affordable
        rng = np.random.default_rng(options.seed)
        chain, interrupted = _chain_bound(base, _random_orders(base.items, 8, rng))
        if chain is not None:
            found = (dp.stages_to_assignment(base, cluster, chain.stages), chain.value, "heuristic", False)
            steps.append(("heuristic", chain.value))
        elif not interrupted:
            return Solution(None, math.inf, Status.STOPPED if tried else Status.INFEASIBLE, "auto",
                            time=time.perf_counter() - t0, message="no placement found: " + "; ".join(tried))
    if found is None:  # a Ctrl-C came first: no more orders
        return Solution(None, math.inf, Status.STOPPED, "auto", time=time.perf_counter() - t0,
                        message="interrupted (Ctrl-C) before any placement was found")

    a, value, label, exact = found
    stats = {"path": "exact" if exact else ("heuristic" if label == "heuristic" else "exact-on-coarsened"),
             "label": label, "skipped": tried, "items": base.items.num_classes, "steps": steps,
             "pairs": pairs, "threads": threads_used,
             "lower_bound": None if lower is None else {"item": lower.item, "work": lower.work}}
    if exact:
        mismatch = dp.model_mismatch(graph, cluster, a, value)
        if mismatch:
            return dp.mismatch_solution("auto", graph, cluster, a, mismatch, dp.lower_bound(base),
                                        time.perf_counter() - t0, {**stats, "path": "heuristic"})
        tell(value, bound=value)
        how = label if label != "exact" else "the DP covered every contiguous placement"
        if options.backend != DEFAULT_BACKEND:  # said, not dropped without a word
            how += f"; the integer program (backend {options.backend}) was not needed"
        if interrupted:  # the optimum is proven all the same; the word tells the caller to stop
            how += "; interrupted (Ctrl-C) after it was found: fewest devices among optima not sought"
        return Solution(a, value, Status.OPTIMAL, "auto", bound=value, gap=0.0,
                        time=time.perf_counter() - t0, stats=stats, message="exact: " + how)

    # repair what coarsening lost, then let the contiguous IP improve and bound it
    if not interrupted:
        try:
            a = refine(graph, cluster, a, deadline=t0 + 0.6 * limit)
        except KeyboardInterrupt:  # the plan found so far is kept: the Ctrl-C is said below
            interrupted = True
    value = evaluate(graph, cluster, a).max_load
    if not interrupted:
        steps.append(("refined", value))
    bound = quick
    tell(value)
    message = label
    from .registry import SOLVERS, get_solver

    left = deadline - time.perf_counter()
    if "ip" in SOLVERS and left > IP_MIN_SECONDS and not interrupted:
        # every option the user gave (backend, seed, threads, gap, raw...) reaches the IP
        ip = get_solver("ip")(graph, cluster, replace(options, time_limit=left * 0.9, warm_start=a))
        interrupted = ip.interrupted  # it took a Ctrl-C and returned its best: said below
        if ip.assignment is not None and ip.objective < value:
            a, value = ip.assignment, ip.objective
            message += "; improved by the contiguous IP"
        stats.update(ip_status=ip.status.value, ip_bound=ip.bound, ip_gap=ip.gap)
        if ip.assignment is not None:
            steps.append(("ip", ip.objective))
        # the IP's bound is on the contiguous optimum: judge it against the placement returned here
        checked = check_bound(ip.bound, value, fallback=bound)
        consistent = checked.consistent and "bound_mismatch" not in ip.stats
        if not consistent:
            stats["bound_mismatch"] = ip.stats.get("bound_mismatch", ip.bound)
            message += "; the IP's bound disagrees with the evaluator and is not used"
        else:
            bound = checked.bound
        gap = relative_gap(value, bound)
        if (ip.status is Status.OPTIMAL and consistent and gap is not None
                and gap <= options.gap + BOUND_TOLERANCE_REL):
            # "optimal" as the IP means it: within the requested gap, which is reported; "exact" only
            # when that gap is closed
            closed = gap <= BOUND_TOLERANCE_REL
            message += ("; proven optimal by the IP" if closed else
                        f"; proven by the IP within {100 * gap:.3g}% of the optimum (gap {options.gap:g} "
                        f"requested)")
            # a placement proven only within a gap is a feasible one: "optimal" is kept for a closed gap
            return Solution(a, value, Status.OPTIMAL if closed else Status.FEASIBLE, "auto", bound=bound,
                            gap=gap,
                            time=time.perf_counter() - t0, message=message,
                            stats={**stats, "path": "exact" if closed else "within-gap"})
    if interrupted:
        message += "; interrupted"
    if use_bounds and value <= bound * (1 + 1e-9):
        return Solution(a, value, Status.OPTIMAL, "auto", bound=value, gap=0.0, time=time.perf_counter() - t0,
                        message=message + "; meets the lower bound", stats={**stats, "path": "exact"})
    tell(value)
    gap = relative_gap(value, bound)
    return Solution(a, value, Status.FEASIBLE, "auto", bound=bound, gap=gap,
                    time=time.perf_counter() - t0, message=message, stats=stats)
