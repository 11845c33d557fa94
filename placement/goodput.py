"""The searches of an LLM's serving (:class:`graphs.llm.ServingModel`), as library functions:

* :func:`goodput_search`: the batch size, micro-batches and plan of most goodput (requests/s meeting
  the TTFT and TPOT targets) over a sweep of batch sizes, each solved by the decode problem's DP and,
  where a batch's plans are few (:data:`EXHAUSTIVE_PLANS`), all of them scored;
* :func:`disaggregated_search`: the same over splits of the device kinds into prefill and decode pools;
* :func:`provision_buckets`: the cheapest instances per request-size bucket for a request rate;
* :func:`targets_missed`: why no plan meets the targets, in words.

``placement place config.json --objective goodput`` and ``placement provision config.json`` run them
(:mod:`placement.cli.llm`). Nothing here prints; problems raise :class:`~graphs.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from graphs.errors import InputError

__all__ = ["GoodputPoint", "GoodputSearch", "goodput_search", "DisaggregatedSearch", "disaggregated_search",
           "Instance", "BucketProvision", "cheapest_instances", "bucket_instances", "provision_buckets",
           "TargetsMissed", "targets_missed", "best_pool", "format_ms", "join_stopped", "EXHAUSTIVE_PLANS",
           "AUTO_BATCH_CAP"]

EXHAUSTIVE_PLANS = 2_000  # a batch size with at most this many plans has all of them scored
AUTO_BATCH_CAP = 8192


class GoodputPoint:
    """One batch size of a :func:`goodput_search`: the decode DP's answer, the plan of most goodput
    found (``None``: no plan fits), whether every plan of that batch was scored, and a note.
    ``counts``: per micro-batch count ``N`` whose scoring ended, in the order tried, ``(N, plans)``:
    how many plans of that ``(batch, N)`` problem were all scored (:func:`graphs.llm.chain_plans`), or
    ``None`` where only the solver's plan was (too many plans). ``cut``: ``(N, scored, plans)``, the
    micro-batch count whose few plans (every one to be scored) a Ctrl-C cut short while they were
    scored, after ``scored`` of its ``plans`` (the solver's first); ``None``: none (its count is then not
    in :attr:`counts`, and the point is not :attr:`exhaustive`)."""

    def __init__(self, batch, problem, result, plan, evaluation, serving, exhaustive, plans, note="",
                 counts=(), cut=None):
        self.batch, self.problem, self.result, self.plan = batch, problem, result, plan
        self.evaluation, self.serving, self.exhaustive, self.plans, self.note = \
            evaluation, serving, exhaustive, plans, note
        self.counts = tuple(counts)
        self.cut = cut

    @property
    def scored_counts(self) -> list[int]:
        """The micro-batch counts whose every plan was scored (see :attr:`counts`)."""
        return [n for n, k in self.counts if k is not None]

    @property
    def solver_counts(self) -> list[int]:
        """The micro-batch counts of which only the solver's plan was scored."""
        return [n for n, k in self.counts if k is None]


class GoodputSearch:
    """The points of a :func:`goodput_search` and the best; ``least_tpot`` and ``least_ttft``: over every
    plan scored, the least TPOT and TTFT any reaches (seconds; at no load: the full batch's decode step
    ``T0``, the shortest prompt's prefill alone), ``inf`` when none was scored. Where the search is
    :attr:`exhaustive` they are the least over every plan of the batch sizes tried; of a disaggregated
    split's search (:func:`disaggregated_search`) only the least TPOT is: its TTFT is the prefill
    pool's, whose plans scored are the prefill DP's alone (the least TTFT is over all of those)."""

    def __init__(self, points, best, least_tpot: float = math.inf, least_ttft: float = math.inf,
                 stopped: str = ""):
        self.points, self.best = points, best
        self.least_tpot, self.least_ttft = least_tpot, least_ttft
        self.stopped = stopped  # why the search ended before its last batch size ("": it did not)

    @property
    def exhaustive(self) -> bool:
        """Every plan of every batch size that fits was scored (of those tried: see :attr:`stopped`); never
        after a Ctrl-C (:attr:`interrupted`)."""
        return not self.interrupted and all(p.exhaustive for p in self.points if p.plan is not None)

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C ended the search: :attr:`stopped` starts with :data:`solvers.base.INTERRUPTED`."""
        return _interrupted(self.stopped)


def join_stopped(parts) -> str:
    """Why searches stopped early, one line: the non-empty ``parts`` joined by ``"; "``, those of a
    Ctrl-C first and its :data:`solvers.base.INTERRUPTED` said once (``interrupted (Ctrl-C): A; B``),
    then the others (a time limit's), in their order."""
    from solvers.base import INTERRUPTED

    parts = [x for x in parts if x]
    ctrl = [_after_interrupted(x) for x in parts if _interrupted(x)]
    rest = [x for x in parts if not _interrupted(x)]
    head = [INTERRUPTED + (": " + "; ".join(x for x in ctrl if x) if any(ctrl) else "")] if ctrl else []
    return "; ".join(head + rest)


def _interrupted(stopped: str) -> bool:
    from solvers.base import INTERRUPTED

    return stopped.startswith(INTERRUPTED)


def _after_interrupted(stopped: str) -> str:
    """The words of a Ctrl-C's ``stopped`` after its :data:`solvers.base.INTERRUPTED` (``""``: none)."""
    from solvers.base import INTERRUPTED

    return stopped[len(INTERRUPTED):].removeprefix(":").strip()


class _Batch:
    """The batch size a :func:`goodput_search` is searching, as far as it got (a Ctrl-C may end it at
    any moment): its micro-batch counts (``None`` until known) and the index ``k`` of the one being
    solved (``len(counts)`` once they are done), the best ``(plan, evaluation, serving, problem,
    result)`` so far, whether every plan so far was scored, how many, the first count's ``(problem,
    result)``, and whether its point is recorded."""

    def __init__(self, batch: int):
        self.batch, self.counts, self.k = batch, None, 0
        self.top = None
        self.exhaustive, self.plans, self.first, self.recorded = True, 0, None, False
        self.scored: list[tuple[int, int | None]] = []  # GoodputPoint.counts
        # while every plan of a micro-batch count is scored: [N, plans done, plans] (else None)
        self.scoring: list[int] | None = None
        self.cut: tuple[int, int, int] | None = None  # GoodputPoint.cut


def _solved(solve, problem):
    """``solve(problem)``; a solve that took a Ctrl-C (it returns what it had, ``interrupted``) ends the
    search that asked for it: ``KeyboardInterrupt``, which the search takes as any other Ctrl-C (a
    search went on scoring splits after it)."""
    r = solve(problem)
    if getattr(r, "interrupted", False):
        raise KeyboardInterrupt
    return r


def goodput_search(model, batches: list[int] | None, solve, *, microbatches: int | None = None,
                   max_replicas: int | None = None, exhaustive_limit: int = EXHAUSTIVE_PLANS,
                   progress=None, score=None, halted=None) -> GoodputSearch:
    """The batch size, micro-batch count and plan of most goodput for a
    :class:`graphs.llm.ServingModel`.

    ``batches``: the batch sizes to try (``None``: 1, 2, 4, .. up to :data:`AUTO_BATCH_CAP`, past sizes
    no plan fits, since a larger batch may fit (more micro-batches, more stages sharing the weights),
    until the weights and the next size's KV caches exceed all the devices' memory together). For each
    batch, the micro-batch counts ``N`` tried are ``microbatches`` (which must divide every batch size
    given, :class:`InputError` otherwise; an auto sweep tries the sizes it divides) or every power of
    two dividing the batch up to the devices' default (the decode problem's own default is the
    largest): fewer micro-batches mean larger ones and fewer stages (``sum d <= N``), a shorter
    step through the pipeline, which is what TPOT pays. Each ``(batch, N)`` decode problem is solved by
    ``solve(problem)`` (the exact stage DP through the registry: the plan of most tokens/s) and that
    plan's goodput scored; when the problem has at most ``exhaustive_limit`` plans
    (:func:`graphs.llm.chain_plans`) every one is scored and the best kept, so where every problem
    was small the answer is the most goodput over every plan of those batches and micro-batch counts.
    Ties go to the smaller batch, then the larger ``N``, then to the DP's plan. ``score(problem, plan,
    batch, evaluation)`` (default: ``model.evaluate``'s one) gives a plan's :class:`GoodputEvaluation` s,
    one per way of serving it (disaggregated: per prefill plan): each counts towards the least TPOT and
    TTFT, and the one of most goodput (the first on a tie) is the plan's. ``halted()``: why the search
    must end now (a command's time limit, :meth:`placement.clock.Clock.halted`; ``""``: it may go on):
    checked before each batch size after the first and each micro-batch count after a plan was found,
    the sizes not tried named in :attr:`GoodputSearch.stopped` (a batch whose counts were cut short is
    not :attr:`~GoodputPoint.exhaustive`).
    A Ctrl-C at any moment of the search (a ``KeyboardInterrupt``, or a solve that took one and returned
    what it had, :attr:`solvers.base.Solution.interrupted`: its plan is scored, alone) ends it with the
    points so far: the batch it cut short keeps its best plan so far (not exhaustive; a batch with none
    counts as not tried; where the Ctrl-C came while a count's few plans were scored, its
    :attr:`~GoodputPoint.cut` and the words say how many were), :attr:`GoodputSearch.stopped` starts
    with :data:`solvers.base.INTERRUPTED` and names the sizes not tried
    (:func:`placement.serving.not_tried`) and the batch cut short, and the search is not
    :attr:`~GoodputSearch.exhaustive`; where no point has a plan yet, the ``KeyboardInterrupt`` goes on
    up. The batch sizes, the halts between them and their words are a
    :class:`placement.serving.BatchLadder`'s."""
    from graphs.llm import chain_plans, microbatch_counts
    from graphs.parallel import evaluate_plan
    from solvers.base import INTERRUPTED, Status

    from .serving import BatchLadder, not_tried

    # the batch sizes, the halts between them and the words of a halt are the ladder's: no flat stop, a
    # size without a plan does not end it, halted() lets the first size start and is not asked after one
    ladder = BatchLadder(None if batches is None else sorted(set(batches)), max_batch=AUTO_BATCH_CAP,
                         improves=None, limit=halted, multiple_of=microbatches or 1)
    sizes = ladder.sizes
    if microbatches:  # a batch splits into equal micro-batches: a count that divides no size is refused
        bad = next((b for b in sizes if b % microbatches), None)
        if bad is not None:
            raise InputError(f"{microbatches} micro-batches do not divide a batch of {bad} sequences")
        if not sizes:
            raise InputError(f"{microbatches} micro-batches divide no batch size the auto sweep tries "
                             f"(powers of two up to {AUTO_BATCH_CAP})")
    points: list[GoodputPoint] = []
    least_tpot = least_ttft = math.inf  # over every plan scored, at no load (GoodputSearch)
    cuts = []  # why batch sizes' micro-batch counts were not all tried
    cur = None  # the batch size being searched (a Ctrl-C may come at any moment)
    ended = looped = False  # the ladder ended itself (no larger batch fits); the loop ran to its end
    try:
        for i, b in enumerate(ladder):
            cur = _Batch(b)
            if progress is not None:
                progress(i / len(sizes))
            counts = [microbatches] if microbatches else microbatch_counts(b, model.devices)
            cur.counts = counts
            for k, n in enumerate(counts):
                cur.k = k
                why = halted() if cur.top is not None and halted is not None else ""
                if why:  # the other micro-batch counts are not tried: said, and the batch is not exhaustive
                    cur.exhaustive = False
                    rest = ", ".join(map(str, counts[k:]))
                    many = "s" if k < len(counts) - 1 else ""
                    cuts.append(f"{why}: batch {b}'s micro-batch count{many} {rest} not tried")
                    break
                p = model.problem(b, microbatches=n, max_replicas=max_replicas)
                r = solve(p)
                took = getattr(r, "interrupted", False)  # a Ctrl-C the solve took: its plan, then the end
                cur.first = cur.first or (p, r)
                plans = chain_plans(p, exhaustive_limit) if exhaustive_limit > 0 and not took else None
                cur.exhaustive = cur.exhaustive and plans is not None
                # the solver's plan first (ties go to it), then the problem's other plans, one at a time:
                # how many are done is cur.scoring's, should a Ctrl-C cut the scoring short
                todo = [(r.plan, r.evaluation)] if r.plan is not None else []
                todo += [(plan, None) for plan in plans or () if plan != r.plan]
                if plans is not None:
                    cur.scoring = [n, 0, len(plans)]
                for plan, ev in todo:
                    ev = ev if ev is not None else evaluate_plan(p, plan)
                    if ev.valid:
                        scored = list(score(p, plan, b, ev)) if score else \
                            [model.evaluate(p, plan, b, evaluation=ev)]
                        for sv in scored:
                            if sv.valid:
                                least_tpot = min(least_tpot, sv.tpot_full)
                                least_ttft = min([least_ttft] + [q.prefill for q in sv.buckets])
                        sv = max(scored, key=lambda x: x.goodput)
                        if cur.top is None or sv.goodput > cur.top[2].goodput * (1 + 1e-12):
                            cur.top = (plan, ev, sv, p, r)
                    if cur.scoring is not None:
                        cur.scoring[1] += 1
                cur.scoring = None
                cur.plans += len(plans or ())
                cur.scored.append((n, None if plans is None else len(plans)))
                if took:
                    raise KeyboardInterrupt
                if r.status is Status.INFEASIBLE and n == counts[0]:
                    break  # the most micro-batches allow every plan fewer allow (same memory): none fits
            cur.k = len(counts)
            if cur.top is None:
                p, r = cur.first
                why = "no plan fits (the KV cache of this batch)" if r.status is Status.INFEASIBLE else \
                    f"no plan found ({r.status}: {r.message})"
                # a larger batch may fit where this one does not (more micro-batches: more stages share the
                # weights), so an auto sweep goes on until the memory of every device together is too small
                end = ladder.auto and r.status is Status.INFEASIBLE and i + 1 < len(sizes) and \
                    _beyond_memory(model, sizes[i + 1])
                if end:
                    why += (f"; nor does any larger batch: the weights and {sizes[i + 1]} sequences' KV "
                            f"caches exceed all the devices' memory together")
                points.append(GoodputPoint(b, p, r, None, None, None, cur.exhaustive,
                                           cur.plans if cur.exhaustive else None, why, cur.scored))
                cur.recorded = True
                if end:
                    ladder.end(f"batch {b}: {why}")
                    ended = True
                continue
            points.append(_point(cur))
            cur.recorded = True
        looped = True
        if progress is not None:
            progress(1.0)
    except KeyboardInterrupt:  # the points so far are the answer, where one has a plan
        rest, cut = sizes, ""
        if cur is not None:
            at = sizes.index(cur.batch)
            if cur.recorded:
                rest = [] if ended or looped else sizes[at + 1:]
            elif cur.top is not None:  # the batch the Ctrl-C cut short: its best plan so far
                counts = cur.counts or []
                if cur.k < len(counts):
                    cur.exhaustive = False
                    left = counts[cur.k + 1:]
                    # some of the count's plans scored (the solver's first) before the Ctrl-C: how many
                    part = cur.scoring if cur.scoring is not None and cur.scoring[1] > 0 else None
                    cur.cut = None if part is None else tuple(part)
                    said = ([f"{part[1]:,} of its {part[2]:,} plans scored"] if part else []) + \
                        ([f"count{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} not tried"]
                         if left else [])
                    cut = (f"batch {cur.batch}'s search cut short at micro-batch count {counts[cur.k]}"
                           + (f" ({'; '.join(said)})" if said else ""))
                points.append(_point(cur, INTERRUPTED if cut else ""))
                rest = sizes[at + 1:]
            else:  # nothing kept of it: not tried
                rest = sizes[at:]
        best = _best_point(points)
        if best is None:
            raise
        if ladder.halt:  # the sizes left are named by the halt's words
            rest = []
        words = not_tried(INTERRUPTED, rest, ladder.auto)
        if cut:
            words += (", " if rest else ": ") + cut
        return GoodputSearch(points, best, least_tpot, least_ttft,
                             "; ".join([words] + cuts + ([ladder.stopped] if ladder.halt else [])))
    # a memory stop or the largest size is the search's end, not a halt: only a halt leaves sizes untried
    stopped = "; ".join(cuts + [ladder.stopped] if ladder.halt else cuts)
    return GoodputSearch(points, _best_point(points), least_tpot, least_ttft, stopped)


def _point(cur: _Batch, note: str = "") -> GoodputPoint:
    """The :class:`GoodputPoint` of the batch ``cur``, its best plan ``cur.top`` (``note``: more words)."""
    plan, ev, sv, p, r = cur.top
    words = "" if r.plan is None or plan == r.plan else "not the solver's plan (more goodput)"
    return GoodputPoint(cur.batch, p, r, plan, ev, sv, cur.exhaustive, cur.plans if cur.exhaustive else None,
                        "; ".join(x for x in (words, note) if x), cur.scored, cut=cur.cut)


def _best_point(points) -> GoodputPoint | None:
    """The point of most goodput among ``points`` with a plan, the first on a tie (within a relative
    ``1e-12``, as :meth:`placement.serving.BatchLadder.scored` keeps it); ``None``: no plan."""
    best = None
    for pt in points:
        if pt.serving is not None and (best is None or pt.serving.goodput >
                                       best.serving.goodput + 1e-12 * abs(best.serving.goodput)):
            best = pt
    return best


def _beyond_memory(model, batch: int) -> bool:
    """No plan of ``batch`` sequences (or more) of ``model`` fits: its weights once and every sequence's
    KV cache at the mix's longest request exceed the memory of all its devices together (each plan holds
    at least that: tensor parallelism splits both, replicas copy the weights)."""
    cfg = model.cfg
    have = 0.0
    for spec, count in zip(model.devices.specs, model.devices.counts):
        if spec.memory is None:
            return False
        have += spec.memory * count
    kv = batch * model.mix.memory_context * cfg.layers * cfg.kv_bytes_per_token
    return cfg.params * cfg.dtype_bytes + kv > have


class DisaggregatedSearch:
    """Per split of the device kinds into a prefill pool and a decode pool: ``(prefill kinds, decode
    kinds, GoodputSearch or None, note)``; ``best``: the split of most goodput (its search's best)."""

    def __init__(self, splits, best, pools=None, stopped: str = ""):
        self.splits, self.best = splits, best
        self.pools = pools or [None] * len(splits)  # per split: (prefill model, decode model)
        self.stopped = stopped  # why some splits (or a split's batch sizes) were not tried ("": none)

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C ended the search: :attr:`stopped` starts with :data:`solvers.base.INTERRUPTED`."""
        return _interrupted(self.stopped)


def disaggregated_search(model, batches: list[int] | None, solve, *, max_replicas: int | None = None,
                         microbatches: int | None = None, exhaustive_limit: int = EXHAUSTIVE_PLANS,
                         progress=None, halted=None) -> DisaggregatedSearch:
    """Separate prefill and decode pools (:func:`graphs.llm.disaggregated_goodput`) for a
    :class:`graphs.llm.ServingModel`: every split of the device kinds, whole kinds to one pool or the
    other (``2^K - 2`` splits of ``K`` kinds). For each, the prefill pool's plans are the exact stage
    DP's of :func:`graphs.llm.prefill_problem` (most prefills per second) at each power-of-two
    micro-batch count up to the pool's default; the decode pool is searched as :func:`goodput_search`
    does, each decode plan scored with the best of those prefill plans. ``halted()``: as
    :func:`goodput_search`'s, checked before each split too; the splits not tried are said in
    :attr:`DisaggregatedSearch.stopped`. A Ctrl-C at any moment ends the search with the splits searched
    so far (the one it cut short with its decode search's points so far, where it has one: a split
    whose search found no plan yet counts as not tried), :attr:`DisaggregatedSearch.stopped` starting
    with :data:`solvers.base.INTERRUPTED` and naming the splits not tried; where no split has a plan
    yet, the ``KeyboardInterrupt`` goes on up."""
    from graphs.devices import DeviceSet
    from graphs.llm import ServingModel, disaggregated_goodput, prefill_problem, prefill_profile
    from graphs.onnx_variants import default_microbatches
    from solvers.base import INTERRUPTED

    K = len(model.devices.specs)
    splits = []
    pools = []
    masks = [m for m in range(1, 2 ** K - 1)]
    stopped = ""
    looped = False
    try:
        for i, mask in enumerate(masks):
            why = halted() if halted is not None else ""
            if why:
                stopped = f"{why}: {len(masks) - i} of the {len(masks)} splits into pools not tried"
                break
            if progress is not None:
                progress(i / len(masks))
            pre_k = [k for k in range(K) if mask >> k & 1]
            dec_k = [k for k in range(K) if not mask >> k & 1]

            def pool(ks):
                return DeviceSet(tuple(model.devices.specs[k] for k in ks),
                                 tuple(model.devices.counts[k] for k in ks))

            pre_ds, dec_ds = pool(pre_k), pool(dec_k)
            names = (str(pre_ds), str(dec_ds))
            pre = ServingModel(model.cfg, pre_ds, model.mix, ttft=model.ttft, tpot=model.tpot)
            dec = ServingModel(model.cfg, dec_ds, model.mix, ttft=model.ttft, tpot=model.tpot)
            top = default_microbatches(pre_ds)
            pools.append((pre, dec))
            prefills = []
            for n in (2 ** j for j in range(top.bit_length())):
                pp = prefill_problem(model.cfg, pre_ds, model.mix, microbatches=n, max_replicas=max_replicas)
                r = _solved(solve, pp)
                if r.plan is not None and all(r.plan != q[1] for q in prefills):
                    prefills.append((pp, r.plan, r.evaluation, prefill_profile(pre, pp, r.evaluation)))
            if not prefills:
                splits.append((*names, None, "no prefill plan fits"))
                continue

            def score(p, plan, b, ev, dec=dec, pre=pre, prefills=prefills):  # with every prefill plan
                return [disaggregated_goodput(pre, pp, pplan, dec, p, plan, b, pre_evaluation=pev,
                                              evaluation=ev, profile=prof)
                        for pp, pplan, pev, prof in prefills]

            search = goodput_search(dec, batches, solve, max_replicas=max_replicas, microbatches=microbatches,
                                    exhaustive_limit=exhaustive_limit, score=score, halted=halted)
            splits.append((*names, search, "" if search.best else "no decode plan fits"))
            if search.interrupted:  # its points so far are kept: the splits after it are not tried
                raise KeyboardInterrupt
            if search.stopped and not stopped:
                stopped = f"split {names[0]} | {names[1]}: {search.stopped}"
        looped = True
        if progress is not None:
            progress(1.0)
    except KeyboardInterrupt:  # the splits searched so far are the answer, where one has a plan
        if _best_split(splits) is None:
            raise
        # after the loop (its end, or a halt whose words name the splits left) no split is left
        left = 0 if looped else len(masks) - len(splits)
        last = splits[-1]  # the split the Ctrl-C cut short, where its search kept points
        parts = [f"{left} of the {len(masks)} splits into pools not tried"] if left else []
        if last[2] is not None and last[2].interrupted:  # its own words, the Ctrl-C said once
            parts.append(f"split {last[0]} | {last[1]}: {_after_interrupted(last[2].stopped) or 'cut short'}")
        words = INTERRUPTED + (": " + "; ".join(parts) if parts else "")
        stopped = f"{words}; {stopped}" if stopped else words
    return DisaggregatedSearch(splits, _best_split(splits), pools[:len(splits)], stopped)


def _best_split(splits) -> GoodputPoint | None:
    """The best point of the splits' searches (:func:`_best_point` of theirs); ``None``: no split has a
    plan."""
    return _best_point([x[2].best for x in splits if x[2] is not None and x[2].best is not None])


# ------------------------------------------------------------------------ cheapest devices per bucket
@dataclass(frozen=True)
class Instance:
    """One serving instance: ``count`` devices of one kind, ``price`` per hour, and per bucket of the mix
    the requests/s it serves alone meeting the targets (``capacity``, 0: none)."""

    kind: str
    count: int
    price: float
    capacity: tuple[float, ...]


@dataclass(frozen=True)
class BucketProvision:
    """The cheapest instances for a rate (:func:`provision_buckets`): how many of each ``instances[i]``
    (``used[i]``), the requests/s of each bucket sent to each (``load[i][b]``), the cost per hour, and the
    cheapest that uses one instance type only (``single``: ``(index, count, cost)``, or ``None``)."""

    instances: tuple[Instance, ...]
    used: tuple[int, ...]
    load: tuple[tuple[float, ...], ...]
    cost: float
    single: tuple[int, int, float] | None
    #: why not every instance type was scored, or scored on every batch size (a time limit), else ``""``:
    #: then the mix is the cheapest of those scored, not proven the cheapest, and where none of those
    #: serves the rate there is no mix (``cost`` inf, every count 0), which proves nothing
    stopped: str = ""
    #: where no mix serves the rate (``cost`` inf), why not (what the instances scored lack)
    message: str = ""
    #: why the capacities are not all proven (some instance's plans were not all scored), else ``""``:
    #: then the mix is not proven the cheapest either
    unproven: str = ""

    @property
    def found(self) -> bool:
        """A mix of instances serves the rate."""
        return math.isfinite(self.cost)

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C ended the scoring: :attr:`stopped` starts with :data:`solvers.base.INTERRUPTED`."""
        return _interrupted(self.stopped)


def cheapest_instances(instances, demand, available) -> tuple[tuple[int, ...], list, float]:
    """Mélange's allocation (Griggs et al., 2024), as a small mixed-integer program: integer counts
    ``m_i`` of each instance and requests/s ``x_ib`` of bucket ``b`` sent to instance ``i``, minimising
    ``sum_i price_i m_i`` with every bucket's ``demand[b]`` served (``sum_i x_ib = demand[b]``), each
    instance type within its capacity (``sum_b x_ib / capacity_ib <= m_i``, an instance time-sharing its
    buckets) and each kind's devices within ``available[kind]`` (``sum_i count_i m_i``). Returns the
    counts, the loads and the cost; an :class:`~graphs.errors.InfeasibleError` when no mix serves it."""
    import numpy as np

    from graphs.errors import InfeasibleError, PlacementError
    from solvers._milp import INFEASIBLE, OPTIMAL, MilpModel, solve_mip

    n, nb = len(instances), len(demand)
    mm = MilpModel()
    m = mm.add_cols(n, lb=0.0, ub=[available.get(inst.kind, 0) // inst.count for inst in instances],
                    integer=True, cost=[inst.price for inst in instances])
    flows = mm.add_cols(n * nb, lb=0.0,
                        ub=[np.inf if c > 0 else 0.0 for inst in instances for c in inst.capacity])
    cell = flows.reshape(n, nb)
    # every bucket served: sum_i x_ib = demand_b
    mm.add_rows(demand, demand, np.repeat(np.arange(nb), n), cell.T.ravel(), 1.0)
    # time-sharing within each instance type: sum_b x_ib / capacity_ib - m_i <= 0
    rows, cols, vals = [], [], []
    for i, inst in enumerate(instances):
        rows.append(i)
        cols.append(m[i])
        vals.append(-1.0)
        for b, c in enumerate(inst.capacity):
            if c > 0:
                rows.append(i)
                cols.append(cell[i, b])
                vals.append(1.0 / c)
    mm.add_rows(np.full(n, -np.inf), 0.0, rows, cols, vals)
    kinds = sorted(available)  # the devices there are, per kind
    rows, cols, vals = [], [], []
    for r, kind in enumerate(kinds):
        for i, inst in enumerate(instances):
            if inst.kind == kind:
                rows.append(r)
                cols.append(m[i])
                vals.append(float(inst.count))
    mm.add_rows(np.full(len(kinds), -np.inf), [float(available[k]) for k in kinds], rows, cols, vals)
    res = solve_mip(mm, gap=1e-9)
    if res.interrupted and res.status not in (OPTIMAL, INFEASIBLE):  # a Ctrl-C: no answer to give
        raise KeyboardInterrupt
    if res.status == INFEASIBLE:
        raise InfeasibleError("no mix of the instances serves the rate of every bucket within the devices "
                              "there are")
    if res.status != OPTIMAL or res.x is None:  # no proof either way: not 'infeasible'
        raise PlacementError(f"the instance mix was not solved (the MILP solver: {res.status}"
                             f"{': ' + res.message if res.message else ''})")
    used = tuple(int(round(v)) for v in res.x[m])
    load = [[max(0.0, float(res.x[cell[i, b]])) for b in range(nb)] for i in range(n)]
    return used, load, float(sum(inst.price * k for inst, k in zip(instances, used)))


def bucket_instances(model, prices, solve, *, sizes=None, deadline: float | None = None,
                     skipped: list | None = None, unproven: list | None = None,
                     cut: list | None = None, interrupted: list | None = None) -> list[Instance]:
    """The instances :func:`provision_buckets` mixes: ``n`` devices of one kind (``n`` a power of two up
    to the kind's count, or the list ``sizes[kind]``), ``prices[k]`` per device-hour of kind ``k``, each
    instance's capacity for a bucket the goodput of its best plan on that bucket alone
    (:func:`goodput_search` under ``model``'s targets; 0 unless every request of it meets both).
    Past ``deadline`` (``time.perf_counter()``) no further instance is scored: each one left is appended
    to ``skipped`` as ``(kind, devices)``; an instance's goodput search past it tries no further batch
    size or micro-batch count (it has tried its first), and the instance is appended to ``cut`` as
    ``(kind, devices, bucket, words)`` (the bucket as ``input/output`` tokens), the words naming what
    was not tried. An instance some of whose
    capacities are not proven the most goodput (its search did not score every plan:
    :attr:`GoodputSearch.exhaustive`) is appended to ``unproven`` as ``(kind, devices)``.
    A Ctrl-C (``KeyboardInterrupt``, or a goodput search it ended) is raised, unless ``interrupted`` is
    given: then it ends the scoring with the instances scored so far, the one it cut short with the
    capacities of its buckets scored so far (0 for the others, as for a bucket it cannot serve: a mix
    of them is one the devices serve, not proven the cheapest; its search cut short in ``cut``), and
    the words of what it left out (the buckets of that instance, the instances not scored) appended to
    ``interrupted``, starting with :data:`solvers.base.INTERRUPTED`."""
    import time

    def past() -> str:
        return "time limit reached" if deadline is not None and time.perf_counter() >= deadline else ""

    from graphs.devices import DeviceSet
    from graphs.llm import RequestMix, ServingModel

    buckets = model.mix.buckets
    todo = [(k, spec, n) for k, (spec, total) in enumerate(zip(model.devices.specs, model.devices.counts))
            for n in (sizes or {}).get(spec.name) or [2 ** j for j in range(total.bit_length())]]
    instances: list[Instance] = []
    # how far the scoring got, one assignment at a time (a Ctrl-C may come at any moment): todo[at] is
    # being scored, its capacities so far in cap, or (cap None) todo[:at + 1] are done
    state: tuple[int, list | None] = (-1, None)
    try:
        for at, (k, spec, n) in enumerate(todo):
            if deadline is not None and time.perf_counter() >= deadline:
                if skipped is not None:
                    skipped.append((spec.name, n))
                state = (at, None)
                continue
            cap: list[float] = []
            state = (at, cap)
            for b in buckets:
                one = ServingModel(model.cfg, DeviceSet((spec,), (n,)), RequestMix((b,)), ttft=model.ttft,
                                   tpot=model.tpot)
                search = goodput_search(one, None, solve, halted=past)
                best = search.best
                cap.append(best.serving.goodput if best is not None and best.serving.attainment >= 1 else 0.0)
                # (a search a Ctrl-C or the time limit cut short is said in cut, not as too many plans)
                if unproven is not None and not search.exhaustive and not search.stopped and \
                        (spec.name, n) not in unproven:
                    unproven.append((spec.name, n))
                if cut is not None and search.stopped:
                    cut.append((spec.name, n, f"{b.input}/{b.output}", search.stopped))
                if search.interrupted:  # its capacity so far is kept; nothing after it is scored
                    raise KeyboardInterrupt
            if any(cap):
                instances.append(Instance(spec.name, n, float(prices[k]) * n, tuple(cap)))
            state = (at, None)
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        from solvers.base import INTERRUPTED

        at, cap = state
        parts = []
        if cap is not None:  # the instance the Ctrl-C cut short: the buckets scored so far
            k, spec, n = todo[at]
            if any(cap) and not any(x.kind == spec.name and x.count == n for x in instances):
                instances.append(Instance(spec.name, n, float(prices[k]) * n,
                                          tuple(cap) + (0.0,) * (len(buckets) - len(cap))))
            left = ", ".join(f"{b.input}/{b.output}" for b in buckets[len(cap):])
            if left:
                parts.append(f"{spec.name} x{n} not scored on {left} requests (capacity 0 there)")
        rest = todo[at + 1:]
        if rest:
            parts.append(f"{len(rest)} instance type(s) not scored ("
                         + ", ".join(f"{spec.name} x{n}" for _, spec, n in rest) + ")")
        interrupted.append(INTERRUPTED + (": " + "; ".join(parts) if parts else ""))
    return instances


def provision_buckets(model, rate: float, prices, solve, *, sizes=None, instances=None,
                      deadline: float | None = None) -> BucketProvision:
    """The cheapest devices for ``rate`` requests/s of ``model``'s mix under its targets, per request-size
    bucket as Mélange provisions: the instances of :func:`bucket_instances` (or ``instances``, already
    scored) mixed by :func:`cheapest_instances`, each bucket's requests sent where they cost least.
    ``prices``: per kind of ``model.devices``, per device-hour. Past ``deadline`` the instances scored so
    far are mixed, and ``stopped`` says which were not (where none of them serves the rate: no mix,
    :attr:`BucketProvision.found` false). :class:`~graphs.errors.InfeasibleError` when every instance
    type was scored, each capacity proven (every plan scored), and no mix of them serves the rate.
    A Ctrl-C while the instances are scored ends the scoring as past ``deadline``, ``stopped`` starting
    with :data:`solvers.base.INTERRUPTED` and naming what it left out (:func:`bucket_instances`'s
    ``interrupted``; :attr:`BucketProvision.interrupted`); where no instance was scored yet, or while
    they are mixed (milliseconds), the ``KeyboardInterrupt`` goes on up."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (0 < rate < math.inf):
        raise InputError(f"the target rate must be a positive number of requests/s, got {rate!r}")
    mix = model.mix
    skipped: list = []
    unproven: list = []
    cut: list = []
    interrupted: list = []
    if instances is None:
        instances = bucket_instances(model, prices, solve, sizes=sizes, deadline=deadline, skipped=skipped,
                                     unproven=unproven, cut=cut, interrupted=interrupted)
        if interrupted and not instances:  # a Ctrl-C before any instance serves a bucket: nothing to mix
            raise KeyboardInterrupt
    stopped = "; ".join(
        ([f"the time limit came before {len(skipped)} instance type(s) were scored ("
          + ", ".join(f"{k} x{n}" for k, n in skipped) + ")"] if skipped else [])
        # an instance whose search the limit (or a Ctrl-C) cut short has the capacity of the sizes it tried
        + [f"{k} x{n}'s goodput search on {bucket} requests: {why}" for k, n, bucket, why in cut])
    if interrupted:  # the Ctrl-C's words first (BucketProvision.interrupted), then the rest
        head = interrupted[0]
        stopped = head + (("; " if ":" in head else ": ") + stopped if stopped else "")
    from graphs.errors import InfeasibleError

    demand = [rate * p for p in mix.shares]
    available = {s.name: c for s, c in zip(model.devices.specs, model.devices.counts)}
    try:
        if not instances:
            raise InfeasibleError("no instance serves any bucket within the targets (an instance: n devices "
                                  "of one kind, n a power of two up to the kind's count)")
        used, load, cost = cheapest_instances(instances, demand, available)
    except InfeasibleError as e:
        if not stopped and not unproven:
            raise  # every instance type scored, each capacity the most goodput of any plan: proven
        # the instance types the limit left out, or a plan not scored, might serve it: nothing proven
        return BucketProvision(tuple(instances), (0,) * len(instances),
                               tuple((0.0,) * len(demand) for _ in instances), math.inf, None, stopped,
                               str(e), _unproven_words(unproven))
    single = None
    for i, x in enumerate(instances):  # one instance type for the whole mix, for comparison
        if all(c > 0 for c in x.capacity):
            m = math.ceil(sum(d / c for d, c in zip(demand, x.capacity)) - 1e-9)
            if m * x.count <= available[x.kind] and (single is None or m * x.price < single[2]):
                single = (i, m, m * x.price)
    return BucketProvision(tuple(instances), used, tuple(map(tuple, load)), cost, single, stopped,
                           unproven=_unproven_words(unproven))


def _unproven_words(unproven) -> str:
    """Why instances' capacities are not proven (``(kind, devices)`` pairs), ``""`` when all are."""
    if not unproven:
        return ""
    return (f"the capacities of {', '.join(f'{k} x{n}' for k, n in unproven)} are their best plans found, "
            f"not proven the most goodput (too many plans to score every one)")


def format_ms(x: float) -> str:
    return f"{x * 1e3:.4g}" if math.isfinite(x) else "inf"


_ms = format_ms  # the messages below are long enough


class TargetsMissed(NamedTuple):
    """:func:`targets_missed`'s answer: the words, whether no plan meeting the targets is proven, and
    whether the least TPOT and TTFT given are both proven the least of any plan."""

    words: str
    proven: bool
    least_proven: bool


def targets_missed(model, tpot: float, ttft: float, exhaustive: bool, *,
                   prefill_exhaustive: bool = True) -> TargetsMissed:
    """Why no plan has goodput (every plan scored has none: no rate meets ``model``'s targets), and
    what is proven: which target no plan meets, with the least TPOT (``tpot``: a full batch's
    decode step with no load) and TTFT (``ttft``: the shortest prompt's prefill alone) of the plans scored
    (:class:`GoodputSearch`). ``exhaustive``: every decode plan of the batch sizes tried was scored, so
    the least TPOT is of any plan; ``prefill_exhaustive``: every prefill plan too (colocated, the prefill
    runs on the decode plan; disaggregated pools score the prefill DP's plans only: false), so the least
    TTFT is of any plan too. Proven: where every plan was scored, or where no plan meets the TPOT target
    and every decode plan was and every request has a TPOT; otherwise the least found, "not proven
    infeasible". A request of one output token has no TPOT (:func:`graphs.llm.has_tpot`): it meets any
    TPOT target, so where the mix has some, the TPOT target missed proves nothing of them: they missed
    the TTFT target (at every plan scored, since no plan has goodput)."""
    from graphs.llm import has_tpot

    # some requests have no TPOT (a mix that lists no buckets, as a test's stand-in: none)
    untimed = not all(has_tpot(b) for b in getattr(model.mix, "buckets", ()))
    tpot_proven = exhaustive
    ttft_proven = exhaustive and prefill_exhaustive
    tpot_words = (f"the least TPOT {'of any plan' if tpot_proven else 'found'} is {_ms(tpot)} ms (a full "
                  f"batch's decode step, no load)")
    ttft_words = (f"the least TTFT {'of any plan' if ttft_proven else 'found'} is {_ms(ttft)} ms (the "
                  f"shortest prompt's prefill alone, no queueing)")
    tpot_bad = model.mix.decode_steps > 0 and tpot > model.tpot
    ttft_bad = ttft > model.ttft
    proven = ttft_proven or (tpot_bad and tpot_proven and not untimed)
    if tpot_bad and ttft_bad and (ttft_proven or not tpot_proven):
        what = (f"either the TPOT target of {_ms(model.tpot)} ms or the TTFT target of {_ms(model.ttft)} ms",
                f"{tpot_words} and {ttft_words}")
    elif tpot_bad and ttft_bad:  # the TPOT target is proven missed, the TTFT one only by the plans found
        what = (f"the TPOT target of {_ms(model.tpot)} ms",
                f"{tpot_words}; and {ttft_words}, over the TTFT target of {_ms(model.ttft)} ms too")
    elif tpot_bad and untimed:  # the one-token requests (no TPOT) missed the TTFT target at every plan
        what = (f"the TPOT target of {_ms(model.tpot)} ms (the requests of more than one output token) nor "
                f"the TTFT target of {_ms(model.ttft)} ms for those of one (they have no TPOT)",
                f"{tpot_words}; and at {'any plan' if ttft_proven else 'every plan scored'} the prefill "
                f"alone of each request of one output token is longer than the TTFT target")
    elif tpot_bad:
        what = f"the TPOT target of {_ms(model.tpot)} ms", tpot_words
    elif ttft_bad:
        what = f"the TTFT target of {_ms(model.ttft)} ms", ttft_words
    else:
        what = (f"the TTFT target of {_ms(model.ttft)} ms and the TPOT target of {_ms(model.tpot)} ms "
                f"together", f"{tpot_words} and {ttft_words}, but not on one plan")
    head = "no plan meets" if proven else "no plan found meets"
    tried = "at any batch size and micro-batch count tried" + ("" if proven else " (not proven infeasible)")
    return TargetsMissed(f"{head} {what[0]} {tried}: {what[1]}", proven, ttft_proven)


def best_pool(split, point, *, models: bool = False):
    """The prefill and decode pools' devices of the split whose search holds ``point`` (``models``: their
    :class:`graphs.llm.ServingModel` s)."""
    for (pre, dec, x, _), pair in zip(split.splits, split.pools):
        if x is not None and x.best is point:
            return pair if models else (pre, dec)
    raise AssertionError("the point is no split's best")
