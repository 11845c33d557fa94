"""A layout of an LLM's layers on a Helix cluster (:mod:`graphs.helix`) that maximises Helix's max-flow,
with a proven upper bound.

Three steps, each on its own; the reported value is always :func:`graphs.helix.max_flow` of the layout:

1. **Bounds** (:mod:`solvers.helix_bounds`): the layer budget (``sum_i max_k k min(c_i(k), F) >= L F``
   in every layout of flow ``F``) and, when the construction does not reach it, the tighter cover bound
   (a linear program over the covers of ``F`` by node capacities that every layer needs). Both hold
   whatever the links are, since links only take flow away. Where some links are slower than that
   bound, the crossing bound (:func:`solvers.helix_bounds.crossing_bound`) adds what they cost: a path
   over a link slower than ``F`` makes some layer need two nodes, and paths that avoid such links stay
   inside the components of the fast ones. Then the same arguments with whole nodes and layers
   (:func:`solvers.helix_bounds.integer_cover_bound`, an integer program over enumerated covers, and
   two slow links on some path where paths with one cannot carry the flow). Each bound runs on the
   cluster with every node raised to the largest profile of its GPU type and layer limit, and where
   those nodes differ, on the nodes' own profiles too; the smallest proven bound counts.
2. **Construction** (:func:`_stage_chain`): a chain of *stages*, each a set of nodes of one region that
   hold the same layers (capacities add), stages one after another over ``[0, L)``; its flow is the
   smallest stage capacity. For a target ``F`` a small integer program (HiGHS) picks stage patterns
   (layers, nodes per group) of capacity ``>= F`` that cover exactly ``L`` layers within the node counts;
   between regions, the two stages at the border need ``p q C >= F`` for ``p`` and ``q`` nodes and the
   slowest link ``C`` between the regions. Inside a region a stage may also be two *lanes* side by
   side, at least one of two nodes in series (:func:`_lane_patterns`: a node holding ``ell`` layers
   beside two holding parts of them, which plain stages cannot express). ``F`` is searched by
   bisection. On several regions, chains may also run side by side on disjoint sets of regions, their
   flows adding up (:func:`_chains`: the best partition). Idle nodes are then added where they raise
   the scored flow, and nodes of one region, GPU type and layer limit exchange layers where that
   raises it (:func:`_swap_nodes`: the construction plans with the smallest profile of such nodes).
3. **Aggregated MILP** (:func:`_aggregated_milp`), warm-started from the construction, for the time
   left: nodes of one region with the same GPU profile are interchangeable, so the decision is an
   integer count ``n[g, s, k]`` of group-``g`` nodes holding layers ``[s, s + k)``, with a flow ``f <=
   min(c_g(k), B) n`` (``B`` the bound of step 1: no node carries more than the whole flow) and conservation
   at every layer boundary of every region. Within a region, every node ending at a boundary is merged
   with every node starting there, which can only add flow; between regions a boundary's flow is at most
   ``C_max p q`` (``p`` nodes ending there, ``q`` starting, linearised exactly with a binary expansion
   of ``q``), at most the flow of the nodes ending there in the sending region and at most that of the
   nodes starting there in the receiving one. Every layout and its max-flow are thus a solution of the
   MILP: it is a **relaxation**, and its dual bound is an upper bound too. When the cluster is one region
   whose links (source and sink included) can each carry what any node can, merging adds nothing: the
   MILP is an **exact** reformulation and its optimum is the best layout.

The status is ``optimal`` only when the scored value reaches the proven bound (the smallest of them).
The search stops once the value is within the requested relative gap of the bound (``gap``, default
``1e-4``, as the integer programs' ``--gap``): the layout is then ``feasible``, labelled within the gap.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from graphs.errors import InputError
from graphs.helix import SINK, SOURCE, HelixCluster, NodeProfile, max_flow

from .base import INTERRUPTED, Status
from .helix_bounds import cover_bound, crossing_bound, integer_cover_bound, layer_budget_bound

__all__ = ["LayoutResult", "solve_layout"]

# the relative tolerance within which the scored value counts as reaching the bound (float noise of
# max-flow and HiGHS, far below any real difference between layouts)
_REACHED = 1e-7
# stages of lanes only in regions of at most this many groups (their patterns grow with its square)
_LANE_GROUPS = 6


@dataclass(frozen=True)
class LayoutResult:
    """A layout (``{node index: (start layer, num layers)}``), its ``value`` by
    :func:`graphs.helix.max_flow`, a proven upper ``bound`` on every layout's value, the status
    (``optimal`` only when the value reaches the bound) and the seconds it took. ``stats``: what each
    step found (``layer_bound``, ``cover_bound``, ``crossing_bound``, ``construction``, ``milp_status``,
    ``milp_bound``, ``exact``: whether the MILP is an exact reformulation)."""

    model: str
    layout: Mapping[int, tuple[int, int]]
    value: float
    bound: float
    status: Status
    time: float
    message: str = ""
    stats: Mapping[str, object] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        """A Ctrl-C ended the search: the layout so far with the bound proven so far (as
        :attr:`solvers.base.Solution.interrupted`, said in ``message``)."""
        return "interrupted" in self.message

    @property
    def gap(self) -> float:
        """``(bound - value) / value`` (``inf`` for a zero value)."""
        if self.value <= 0:
            return math.inf
        return max(0.0, (self.bound - self.value) / self.value)


@dataclass(frozen=True)
class _Group:
    """Interchangeable nodes: one region, one GPU type, one profile."""

    region: int
    gpu_type: str
    profile: NodeProfile
    nodes: tuple[int, ...]


@dataclass
class _SoFar:
    """The best layout found so far, kept up to date while the search runs, so that a Ctrl-C at any
    moment of it leaves that layout (:func:`solve_layout`). ``offer``: a layout with its scored value.
    Found but not scored yet (scoring every step would take time the search needs; :meth:`settle`
    scores them once a Ctrl-C has come): ``chain``, ``(regions, layout)``, the chain a bisection is
    refining now (:func:`_stage_chain`); ``chains``, ``(regions, found)``, the chains :func:`_chains` has
    found, to be put side by side; ``milp``, ``(groups, MILP, x)``, the MILP's incumbent."""

    layout: dict = field(default_factory=dict)
    value: float = 0.0
    chain: tuple = ()
    chains: tuple = ()
    milp: tuple = ()

    def offer(self, layout: Mapping[int, tuple[int, int]], value: float) -> None:
        if value > self.value:
            self.layout, self.value = dict(layout), value

    def settle(self, cluster: HelixCluster, model: str) -> None:
        """Score what the search had found but not scored when a Ctrl-C ended it, offering each. A
        further Ctrl-C meanwhile (raised) leaves the rest for the next call: each item is dropped once
        offered, none is lost or scored twice. These scores ran in the Ctrl-C's handling, where a second
        Ctrl-C escaped it: the chain found was never offered, and with no layout before it the search
        said nothing was found (exit 130, nothing written)."""
        if self.chain:
            regs, lay = self.chain
            found = self.chains[1] if self.chains else None
            if found is None or frozenset(regs) not in found:
                v = max_flow(cluster, model, lay)
                self.offer(lay, v)
                if found is not None:
                    found[frozenset(regs)] = (v, lay)
            self.chain = ()
        if self.chains:
            regions, found = self.chains
            for v, lay in found.values():
                self.offer(lay, v)
            layout = _side_by_side(regions, found)
            if layout:
                self.offer(layout, max_flow(cluster, model, layout))
            self.chains = ()
        if self.milp:
            groups, mp, x = self.milp
            cand = dict(sorted(_milp_layout(groups, mp, x).items()))  # as solve_layout scores it
            self.offer(cand, max_flow(cluster, model, cand))
            self.milp = ()


def _groups(cluster: HelixCluster, model: str) -> list[_Group]:
    by: dict[tuple, list[int]] = {}
    for n in cluster.nodes:
        p = n.profiles[model]
        by.setdefault((n.region or 0, n.gpu_type, p), []).append(n.index)
    return [_Group(r, t, p, tuple(sorted(ix))) for (r, t, p), ix in by.items() if p.max_num_layers > 0]


# ------------------------------------------------------------------------------------------- links
def _region_links(cluster: HelixCluster, model: str) -> tuple[dict, dict]:
    """``(slowest, fastest)`` directed node-node link capacity between each ordered pair of different
    regions (a missing link counts as 0 in the slowest)."""
    dl = cluster.directed_links(model)
    region = {n.index: n.region or 0 for n in cluster.nodes}
    slow: dict[tuple[int, int], float] = {}
    fast: dict[tuple[int, int], float] = {}
    for a in region:
        for b in region:
            ra, rb = region[a], region[b]
            if a == b or ra == rb:
                continue
            cap = dl.get((a, b), 0.0)
            slow[(ra, rb)] = min(slow.get((ra, rb), math.inf), cap)
            fast[(ra, rb)] = max(fast.get((ra, rb), 0.0), cap)
    return slow, fast


def _merge_is_exact(cluster: HelixCluster, model: str, cap_max: Mapping[int, float]) -> bool:
    """Whether merging all nodes at each boundary loses nothing: every pair of nodes joined both ways,
    and the source and sink to every node, by links that carry what either end can (``cap_max``)."""
    dl = cluster.directed_links(model)
    ix = [n.index for n in cluster.nodes]
    for a in ix:
        if dl.get((SOURCE, a), 0.0) < cap_max[a] or dl.get((a, SINK), 0.0) < cap_max[a]:
            return False
        for b in ix:
            if a != b and dl.get((a, b), 0.0) < min(cap_max[a], cap_max[b]):
                return False
    return True


# ------------------------------------------------------------------------------------------- 2. chain
def _patterns(groups: list[_Group], gis: list[int], L: int, F: float, max_nodes: int) -> list[tuple]:
    """Minimal stages of capacity >= ``F`` from groups ``gis`` (one region): ``(layers, counts, cap)``
    with ``counts`` a tuple aligned with ``gis``, at most ``max_nodes`` nodes."""
    out: list[tuple] = []
    for ell in range(1, L + 1):
        caps = [groups[g].profile.capacity_at(ell) if ell <= groups[g].profile.max_num_layers else 0.0
                for g in gis]
        avail = [len(groups[g].nodes) if caps[j] > 0 else 0 for j, g in enumerate(gis)]
        if sum(a * c for a, c in zip(avail, caps)) >= F:
            _covers(ell, caps, avail, F, max_nodes, [], 0.0, out)
    return out


def _lane_patterns(groups: list[_Group], gis: list[int], L: int, F: float, plain: list[tuple]) -> list[tuple]:
    """Stages of two *lanes* side by side over ``ell`` layers, at least one lane two nodes in series
    (``k1 + k2 = ell``, the split that maximises the lane's capacity ``min(c1(k1), c2(k2))``), each
    lane short of ``F`` and both together ``>= F``: ``(layers, counts, cap, lanes)``, ``lanes`` a tuple
    of lanes, each a tuple of ``(position in gis, layers)``. Why: a stage whose nodes all hold the same
    layers cannot use a node with twice the layers of its neighbours (e.g. on LLaMA-30B one T4 with 4
    layers beside two T4 with 2 each covers 1523 tokens/s over 4 layers with 3 nodes). One pattern per
    ``(layers, counts)``, none where a plain stage has those."""
    seen = {(p[0], p[1]) for p in plain}
    T = len(gis)
    out: list[tuple] = []
    for ell in range(2, L + 1):
        lanes: list[tuple[tuple, float]] = []
        for t in range(T):
            prof = groups[gis[t]].profile
            if ell <= prof.max_num_layers:
                lanes.append((((t, ell),), prof.capacity_at(ell)))
        for t1 in range(T):
            for t2 in range(t1, T):
                p1, p2 = groups[gis[t1]].profile, groups[gis[t2]].profile
                splits = range(max(1, ell - p2.max_num_layers), min(p1.max_num_layers, ell - 1) + 1)
                best = max(((min(p1.capacity_at(k), p2.capacity_at(ell - k)), k) for k in splits),
                           default=None)
                if best is not None:
                    lanes.append((((t1, best[1]), (t2, ell - best[1])), best[0]))
        lanes = [ln for ln in lanes if ln[1] < F]
        for i, (a, ca) in enumerate(lanes):
            for b, cb in lanes[i:]:
                if len(a) == 1 and len(b) == 1 or ca + cb < F:
                    continue
                counts = [0] * T
                for t, _ in a + b:
                    counts[t] += 1
                key = (ell, tuple(counts))
                if key in seen or any(c > len(groups[gis[t]].nodes) for t, c in enumerate(counts)):
                    continue
                seen.add(key)
                out.append((ell, tuple(counts), ca + cb, (a, b)))
    return out


def _covers(ell: int, caps: list[float], avail: list[int], F: float, room: int, counts: list[int],
            cap: float, out: list[tuple]) -> None:
    """Extend ``counts`` (nodes of the first groups) to every minimal cover of ``F``, into ``out``."""
    if cap >= F:
        if all(c == 0 or cap - caps[t] < F for t, c in enumerate(counts)):  # no node can be left out
            out.append((ell, tuple(counts) + (0,) * (len(caps) - len(counts)), cap))
        return
    j = len(counts)
    if j == len(caps) or room <= 0:
        return
    for c in range(min(avail[j], room), -1, -1):
        counts.append(c)
        _covers(ell, caps, avail, F, room - c, counts, cap + c * caps[j], out)
        counts.pop()


def _orders(groups: list[_Group], regions: list[int], L: int) -> list[tuple[int, ...]]:
    """Region sequences a chain may take: every ordering of every subset of regions whose nodes can
    hold ``L`` layers between them, fewest regions first."""
    room = {r: sum(len(g.nodes) * g.profile.max_num_layers for g in groups if g.region == r) for r in regions}
    out = []
    for m in range(1, len(regions) + 1):
        for sub in itertools.permutations(regions, m):
            if sum(room[r] for r in sub) >= L:
                out.append(sub)
    return out


def _stage_caps(groups: list[_Group], gis: list[int], pat: tuple) -> list[float]:
    """The capacity of each node of stage pattern ``pat``."""
    ell, counts, _ = pat
    return [groups[g].profile.capacity_at(ell) for g, c in zip(gis, counts) for _ in range(c)]


def _share(groups: list[_Group], gis: list[int], pat: tuple, per_node: float) -> float:
    """What stage ``pat`` can pass over a border where each of its nodes has ``per_node`` of links."""
    return sum(min(c, per_node) for c in _stage_caps(groups, gis, pat))


def _chain_ip(groups, gis, order, pats, L, F, slow, time_limit, threads):
    """Stages in region order ``order`` (each a list of (pattern, count)) covering ``[0, L)`` at
    capacity >= ``F``, or ``None``. ``pats[r]``: the patterns of region ``r``; ``gis[r]`` its groups."""
    from ._milp import MilpModel, solve_mip

    mdl = MilpModel()
    m = len(order)
    cols = []  # per segment: {"x": cols, "e": cols or None, "a": cols or None}
    for j, r in enumerate(order):
        n = len(pats[r])
        # a stage of lanes is never at a border (its nodes there would not all end or start together)
        edge = np.array([0.0 if len(p) > 3 else 1.0 for p in pats[r]])
        seg = {"x": mdl.add_cols(n, lb=0, ub=L, integer=True)}
        seg["e"] = mdl.add_cols(n, lb=0, ub=edge, integer=True) if j < m - 1 else None
        seg["a"] = mdl.add_cols(n, lb=0, ub=edge, integer=True) if j > 0 else None
        cols.append(seg)
    # one exit stage and one entry stage at each border
    for j in range(m):
        for key in ("e", "a"):
            if cols[j][key] is not None:
                mdl.add_rows([1.0], [1.0], np.zeros(len(cols[j][key]), int), cols[j][key], 1.0)
    # exactly L layers
    rc, vc = [], []
    for j, r in enumerate(order):
        ell = np.array([p[0] for p in pats[r]], float)
        for key in ("x", "e", "a"):
            if cols[j][key] is not None:
                rc.append(cols[j][key])
                vc.append(ell)
    rc_all = np.concatenate(rc)
    mdl.add_rows([float(L)], [float(L)], np.zeros(len(rc_all), int), rc_all, np.concatenate(vc))
    # node counts of each group
    for j, r in enumerate(order):
        for t, g in enumerate(gis[r]):
            cnt = np.array([p[1][t] for p in pats[r]], float)
            keep = cnt > 0
            cc = [cols[j][key][keep] for key in ("x", "e", "a") if cols[j][key] is not None]
            vv = [cnt[keep] for key in ("x", "e", "a") if cols[j][key] is not None]
            cc_all = np.concatenate(cc)
            if cc_all.size:
                mdl.add_rows([0.0], [float(len(groups[g].nodes))], np.zeros(cc_all.size, int), cc_all,
                             np.concatenate(vv))
    # the border between segments j and j + 1: the exit stage's p nodes and the entry stage's q nodes
    # need p q C >= F, and every node's share must fit its q (p) links of at least C each
    for j in range(m - 1):
        r1, r2 = order[j], order[j + 1]
        C = slow.get((r1, r2), 0.0)
        size1 = [sum(p[1]) for p in pats[r1]]
        size2 = [sum(p[1]) for p in pats[r2]]

        for mine, gi_m, other_sizes, my_cols, their_cols in (
                (pats[r1], gis[r1], size2, cols[j]["e"], cols[j + 1]["a"]),
                (pats[r2], gis[r2], size1, cols[j + 1]["a"], cols[j]["e"])):
            for pi, pat in enumerate(mine):
                if len(pat) > 3:  # a stage of lanes: never at a border
                    continue
                width_me = sum(pat[1])
                bad = [qi for qi, w in enumerate(other_sizes)
                       if width_me * w * C < F or _share(groups, gi_m, pat, w * C) < F]
                if bad:
                    cc = np.r_[my_cols[pi], their_cols[np.array(bad)]]
                    mdl.add_rows([-np.inf], [1.0], np.zeros(cc.size, int), cc, 1.0)
    res = solve_mip(mdl, time_limit=time_limit, gap=1.0, threads=threads)
    if res.interrupted:  # HiGHS took the Ctrl-C and returned: the layout search stops (solve_layout)
        raise KeyboardInterrupt
    if res.x is None:
        return None
    stages = []
    for j, r in enumerate(order):
        seg = []
        for key in ("a", "x", "e"):  # entry first, exit last
            if cols[j][key] is None:
                continue
            for pi, v in enumerate(res.x[cols[j][key]]):
                for _ in range(int(round(v))):
                    seg.append((r, pats[r][pi], key))
        stages.append(seg)
    return stages


def _chain_layout(cluster, model, groups, gis, stages) -> dict[int, tuple[int, int]]:
    """Nodes for a chain of stages: border stages take the nodes with the fastest links to the other
    region first."""
    region = {n.index: n.region or 0 for n in cluster.nodes}
    outside = dict.fromkeys(region, 0.0)  # each node's link capacity to and from other regions
    for (a, b), v in cluster.directed_links(model).items():
        if a in region and b in region and region[a] != region[b]:
            outside[a] += v
            outside[b] += v
    # fastest-linked first; border stages pick before the others
    pools = {g: sorted(grp.nodes, key=lambda a: -outside[a]) for g, grp in enumerate(groups)}
    flat = [st for seg in stages for st in seg]
    order = sorted(range(len(flat)), key=lambda i: flat[i][2] == "x")
    layout, s = {}, 0
    starts = np.r_[0, np.cumsum([st[1][0] for st in flat])]
    for i in order:
        r, pat, key = flat[i]
        s = int(starts[i])
        if len(pat) > 3:  # lanes: the nodes of each lane one after another
            for lane in pat[3]:
                off = 0
                for t, k in lane:
                    layout[pools[gis[r][t]].pop(0)] = (s + off, k)
                    off += k
            continue
        ell, counts = pat[0], pat[1]
        for g, c in zip(gis[r], counts):
            for _ in range(c):
                layout[pools[g].pop(0)] = (s, ell)
    return layout


def _stage_chain(cluster, model, groups, regions, slow, hi, deadline, threads, lanes=True, so_far=None):
    """The best chain of stages found by bisection on its capacity (module docstring, step 2):
    ``(layout, target reached)``, layout ``{}`` if none. Each better chain is ``so_far.chain`` as it is
    found (:class:`_SoFar`)."""
    L = cluster.models[model].num_layers
    gis = {r: [g for g, grp in enumerate(groups) if grp.region == r] for r in regions}
    orders = _orders(groups, regions, L)
    best, lo = {}, 0.0
    max_nodes = 16
    while hi - lo > 1e-5 * hi and time.monotonic() < deadline:
        mid = 0.5 * (lo + hi) if lo > 0 else hi * 0.5
        pats = {r: _patterns(groups, gis[r], L, mid, max_nodes) for r in regions}
        if lanes:  # pairs of groups make lanes: with many groups, too many patterns for the IP
            pats = {r: p + (_lane_patterns(groups, gis[r], L, mid, p) if len(gis[r]) <= _LANE_GROUPS else [])
                    for r, p in pats.items()}
        found = None
        for order in orders:
            if any(not pats[r] for r in order):
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            found = _chain_ip(groups, gis, order, pats, L, mid, slow, min(left, 10.0), threads)
            if found is not None:
                break
        if found is None:
            hi = mid
            continue
        best = _chain_layout(cluster, model, groups, gis, found)
        if so_far is not None:
            so_far.chain = (tuple(regions), best)
        # the chain's own capacity (its smallest stage) may exceed the target: start from there
        lo = max(mid, min(p[2] for seg in found for (_, p, _) in seg))
    return best, lo


def _chains(cluster, model, groups, regions, slow, hi, deadline, threads, so_far=None):
    """Chains side by side on disjoint sets of regions, their flows adding up: the best partition of
    the regions into sets that each run the best chain found for them (the whole set first, then
    smaller ones while time is left; up to 4 regions). Returns ``(layout, scored value)``. While it
    runs, ``so_far.chains`` holds the chains found, so that a Ctrl-C (``KeyboardInterrupt``, let
    through) leaves their best partition, the chain being refined included (:meth:`_SoFar.settle`)."""
    if len(regions) > 4:
        subsets = [tuple(regions)]
    else:
        subsets = [sub for m in range(len(regions), 0, -1) for sub in itertools.combinations(regions, m)]
    found: dict[frozenset, tuple[float, dict]] = {}
    if so_far is not None:
        so_far.chains = (regions, found)
    for sub in subsets:
        if time.monotonic() >= deadline:
            break
        layout, _ = _stage_chain(cluster, model, groups, list(sub), slow, hi, deadline, threads,
                                 so_far=so_far)
        if layout:
            found[frozenset(sub)] = (max_flow(cluster, model, layout), layout)
    layout = _side_by_side(regions, found)
    # side by side, the chains may share links as well: the scorer has the last word
    value = max_flow(cluster, model, layout) if layout else 0.0
    if so_far is not None:  # scored: nothing of the construction's chains is left to settle
        so_far.offer(layout, value)
        so_far.chain = so_far.chains = ()
    return layout, value


def _side_by_side(regions, found: Mapping[frozenset, tuple[float, dict]]) -> dict[int, tuple[int, int]]:
    """The layout of the best partition of ``regions`` into sets with a chain in ``found`` (``{set of
    regions: (scored value, layout)}``; values added), or, where none covers them all, the best chain."""
    best: dict[frozenset, tuple[float, dict]] = {frozenset(): (0.0, {})}
    for m in range(1, len(regions) + 1):  # best split of every set of regions, smaller sets first
        for sub in itertools.combinations(regions, m):
            U = frozenset(sub)
            first = min(U)
            options = [(v + best[U - T][0], {**lay, **best[U - T][1]}) for T, (v, lay) in found.items()
                       if first in T and T <= U and U - T in best]
            if options:
                best[U] = max(options, key=lambda o: o[0])
    whole = best.get(frozenset(regions))
    if whole is None:  # no chain fits in the time (or at all): the best one found on some regions
        whole = max(found.values(), key=lambda o: o[0], default=(0.0, {}))
    return whole[1]


def _add_idle(cluster, model, layout, value, deadline, so_far=None):
    """Add idle nodes beside used ones (same layers) while that raises the scored flow; ``so_far`` is
    offered each better layout as it is scored (:class:`_SoFar`)."""
    layout = dict(layout)
    while time.monotonic() < deadline:
        ranges = sorted(set(layout.values()))
        idle = [n for n in cluster.nodes if n.index not in layout]
        best = (value, None)
        for n in idle:
            kmax = n.profiles[model].max_num_layers
            for s, k in ranges:
                if k > kmax or time.monotonic() > deadline:
                    continue
                v = max_flow(cluster, model, {**layout, n.index: (s, k)})
                if v > best[0] * (1 + 1e-9):
                    best = (v, (n.index, (s, k)))
                    if so_far is not None:
                        so_far.offer({**layout, n.index: (s, k)}, v)
        if best[1] is None:
            break
        value = best[0]
        layout[best[1][0]] = best[1][1]
    return layout, value


def _swap_nodes(cluster, model, layout, value, deadline, so_far=None):
    """Exchange the layers of two nodes of one region, GPU type and layer limit (or give a used node's
    layers to an idle one of them) while that raises the scored flow: the construction plans with the
    smallest capacity of such nodes, so where their profiles differ, which node holds which layers
    matters (each move is kept only when :func:`graphs.helix.max_flow` says it helps; ``so_far`` is
    offered it)."""
    layout = dict(layout)
    key = {n.index: (n.region or 0, n.gpu_type, n.profiles[model].max_num_layers) for n in cluster.nodes
           if n.profiles[model].max_num_layers > 0}
    if len({n.profiles[model] for n in cluster.nodes}) <= len(set(key.values())):
        return layout, value  # nodes of one key share a profile: nothing to gain
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for a, b in itertools.combinations(sorted(key), 2):
            if key[a] != key[b] or (a not in layout and b not in layout):
                continue
            if time.monotonic() >= deadline:
                break
            cand = dict(layout)
            ra, rb = cand.pop(a, None), cand.pop(b, None)
            if ra is not None:
                cand[b] = ra
            if rb is not None:
                cand[a] = rb
            v = max_flow(cluster, model, cand)
            if v > value * (1 + 1e-9):
                layout, value, improved = cand, v, True
                if so_far is not None:
                    so_far.offer(layout, value)
    return layout, value


# ------------------------------------------------------------------------------------------- 3. MILP
@dataclass
class _Milp:
    model: object
    arcs: list  # (group, start, layers)
    n: np.ndarray
    f: np.ndarray
    F: int
    extra: dict  # name -> columns, for the warm start


def _aggregated_milp(cluster, model, groups, regions, fast, B) -> _Milp:
    """The aggregated MILP of the module docstring (step 3); ``regions`` ``[0]`` merges the cluster."""
    from ._milp import MilpModel

    L = cluster.models[model].num_layers
    mdl = MilpModel()
    F = int(mdl.add_cols(1, lb=0, ub=B, cost=-1.0)[0])
    arcs = [(g, s, k) for g, grp in enumerate(groups) for k in range(1, grp.profile.max_num_layers + 1)
            for s in range(L - k + 1)]
    cnt = np.array([len(groups[g].nodes) for g, _, _ in arcs], float)
    cap = np.array([min(groups[g].profile.capacity_at(k), B) for g, _, k in arcs])
    A = len(arcs)
    n = mdl.add_cols(A, lb=0, ub=cnt, integer=True)
    f = mdl.add_cols(A, lb=0, ub=cap * cnt)
    mdl.add_rows(np.full(A, -np.inf), np.zeros(A), np.r_[np.arange(A), np.arange(A)], np.r_[f, n],
                 np.r_[np.ones(A), -cap])
    gl = np.array([g for g, _, _ in arcs])
    mdl.add_rows(np.zeros(len(groups)), [float(len(g.nodes)) for g in groups], gl, n, 1.0)
    region_of = {g: (groups[g].region if len(regions) > 1 else regions[0]) for g in range(len(groups))}
    ri = {r: i for i, r in enumerate(regions)}
    pairs = [(a, b) for a in regions for b in regions if a != b and fast.get((a, b), 0.0) > 0]
    X = {pr: mdl.add_cols(L + 1, lb=0, ub=B) for pr in pairs}
    S = mdl.add_cols(len(regions), lb=0, ub=B)
    T = mdl.add_cols(len(regions), lb=0, ub=B)

    def vertex(r, b):
        return ri[r] * (L + 1) + b

    rows, cols, vals = [], [], []
    ends: dict[tuple[int, int], list[int]] = {}
    starts: dict[tuple[int, int], list[int]] = {}
    for j, (g, s, k) in enumerate(arcs):
        r = region_of[g]
        rows += [vertex(r, s), vertex(r, s + k)]
        cols += [f[j], f[j]]
        vals += [-1.0, 1.0]
        ends.setdefault((r, s + k), []).append(j)
        starts.setdefault((r, s), []).append(j)
    for (r1, r2), xc in X.items():
        for b in range(1, L):
            rows += [vertex(r1, b), vertex(r2, b)]
            cols += [xc[b], xc[b]]
            vals += [-1.0, 1.0]
    for r in regions:
        rows += [vertex(r, 0), vertex(r, L)]
        cols += [S[ri[r]], T[ri[r]]]
        vals += [1.0, -1.0]
    nv = len(regions) * (L + 1)
    mdl.add_rows(np.zeros(nv), np.zeros(nv), rows, cols, vals)
    R = len(regions)
    for v in (S, T):
        mdl.add_rows([0.0], [0.0], np.zeros(R + 1, int), np.r_[v, F], np.r_[np.ones(R), -1.0])
    bits = {}
    for r in regions:  # what crosses at a boundary leaves nodes ending there and enters nodes starting there
        for b in range(1, L):
            out = [X[(r, r2)][b] for r2 in regions if (r, r2) in X]
            inn = [X[(r2, r)][b] for r2 in regions if (r2, r) in X]
            for xs, js in ((out, ends.get((r, b), [])), (inn, starts.get((r, b), []))):
                if xs:
                    cc = np.r_[xs, f[js]] if js else np.array(xs)
                    mdl.add_rows([-np.inf], [0.0], np.zeros(len(cc), int), cc,
                                 np.r_[np.ones(len(xs)), -np.ones(len(js))])
    for (r1, r2), xc in X.items():  # X <= C p q with q = sum_t 2^t z_t and w_t = p z_t
        C = fast[(r1, r2)]
        pmax = float(sum(len(g.nodes) for g in groups if g.region == r1))
        qmax = sum(len(g.nodes) for g in groups if g.region == r2)
        nb = max(1, math.ceil(math.log2(qmax + 1)))
        for b in range(1, L):
            js_p, js_q = ends.get((r1, b), []), starts.get((r2, b), [])
            if not js_p or not js_q:
                mdl.tighten([xc[b]], ub=0.0)
                continue
            z = mdl.add_cols(nb, lb=0, ub=1, integer=True)
            w = mdl.add_cols(nb, lb=0, ub=pmax)
            bits[(r1, r2, b)] = (z, w)
            mdl.add_rows([0.0], [0.0], np.zeros(len(js_q) + nb, int), np.r_[n[js_q], z],
                         np.r_[np.ones(len(js_q)), -(2.0 ** np.arange(nb))])
            for t in range(nb):
                mdl.add_rows([-np.inf], [0.0], np.zeros(1 + len(js_p), int), np.r_[w[t], n[js_p]],
                             np.r_[1.0, -np.ones(len(js_p))])
                mdl.add_rows([-np.inf], [0.0], [0, 0], [w[t], z[t]], [1.0, -pmax])
            mdl.add_rows([-np.inf], [0.0], np.zeros(1 + nb, int), np.r_[xc[b], w],
                         np.r_[1.0, -C * 2.0 ** np.arange(nb)])
    return _Milp(mdl, arcs, n, f, F, {"X": X, "S": S, "T": T, "bits": bits, "regions": regions,
                                     "region_of": region_of})


def _milp_start(cluster, model, groups, milp: _Milp, layout) -> np.ndarray | None:
    """The MILP's variables for a layout and its maximum flow (``None`` if they violate a row, e.g.
    by float noise)."""
    from graphs.helix import max_flow_solution

    sol = max_flow_solution(cluster, model, layout)
    gidx = {a: g for g, grp in enumerate(groups) for a in grp.nodes}
    arc_ix = {a: j for j, a in enumerate(milp.arcs)}
    x = np.zeros(milp.model.num_cols)
    x[milp.F] = sol.value
    ex = milp.extra
    ri = {r: i for i, r in enumerate(ex["regions"])}
    reg = {a: ex["region_of"][g] for a, g in gidx.items()}
    ends: dict[tuple[int, int], float] = {}
    starts: dict[tuple[int, int], float] = {}
    for a, (s, k) in layout.items():
        j = arc_ix[(gidx[a], s, k)]
        x[milp.n[j]] += 1
        x[milp.f[j]] += sol.node_flow.get(a, 0.0)
        ends[(reg[a], s + k)] = ends.get((reg[a], s + k), 0) + 1
        starts[(reg[a], s)] = starts.get((reg[a], s), 0) + 1
    for (a, b), v in sol.link_flow.items():
        if a == SOURCE:
            x[ex["S"][ri[reg[b]]]] += v
        elif b == SINK:
            x[ex["T"][ri[reg[a]]]] += v
        elif reg[a] != reg[b]:
            if (reg[a], reg[b]) not in ex["X"]:
                return None
            x[ex["X"][(reg[a], reg[b])][layout[a][0] + layout[a][1]]] += v
    for (r1, r2, b), (z, w) in ex["bits"].items():
        q = starts.get((r2, b), 0)
        p = ends.get((r1, b), 0)
        for t in range(len(z)):
            x[z[t]] = (q >> t) & 1
            x[w[t]] = p * x[z[t]]
    return None if milp.model.check(x, tol=1e-6) else x


def _milp_layout(groups, milp: _Milp, x) -> dict[int, tuple[int, int]]:
    pools = {g: list(grp.nodes) for g, grp in enumerate(groups)}
    layout = {}
    for j, (g, s, k) in enumerate(milp.arcs):
        for _ in range(int(round(x[milp.n[j]]))):
            layout[pools[g].pop(0)] = (s, k)
    return layout


# ------------------------------------------------------------------------------------------- solve
def solve_layout(cluster: HelixCluster, model: str, *, time_limit: float | None = 60.0,
                 threads: int | None = None, milp: bool = True, gap: float = 1e-4) -> LayoutResult:
    """The best layout of ``model`` on ``cluster`` found within ``time_limit`` seconds, with a proven
    upper bound (module docstring). ``milp=False`` skips step 3 (construction and bound only). ``gap``:
    the search stops once ``(bound - value) / value`` is at most this (the place command's ``--gap``,
    whose default this is); the layout is then ``feasible``, within the gap, and ``optimal`` only where
    the value reaches the bound. A Ctrl-C (``KeyboardInterrupt``) at any moment of the search ends it
    with the best layout found so far, ``feasible`` and said interrupted (:attr:`LayoutResult.interrupted`),
    with the bound proven so far (``optimal``, still said interrupted, where its value reaches that
    bound); one before any layout is found is raised again. Further Ctrl-Cs while that result is made
    change nothing (the search is already ending)."""
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap <= 1:
        raise InputError(f"gap must be a relative gap from 0 to 1, got {gap!r}")
    t0 = time.monotonic()
    if model not in cluster.models:
        raise InputError(f"no model {model!r} in the cluster (models: {', '.join(cluster.models)})",
                         source=cluster.source)
    deadline = math.inf if time_limit is None else t0 + float(time_limit)
    groups = _groups(cluster, model)
    B = layer_budget_bound(cluster, model)
    if B <= 0:
        L = cluster.models[model].num_layers
        return LayoutResult(model, {}, 0.0, 0.0, Status.INFEASIBLE, time.monotonic() - t0,
                            f"the nodes cannot hold the model's {L} layers between them (their "
                            f"max_num_layers add up to less), so no layout has any flow",
                            {"layer_bound": 0.0})
    cap_max = {a: max((min(c, B) for c in grp.profile.capacity), default=0.0)
               for grp in groups for a in grp.nodes}
    exact = _merge_is_exact(cluster, model, cap_max)
    slow, fast = _region_links(cluster, model)
    regions = [0] if exact else sorted({g.region for g in groups})
    if exact:
        groups = _groups_merged(groups)
    stats: dict[str, object] = {"layer_bound": B, "exact": exact, "groups": len(groups)}
    # the chain gets at most half the time, so that the MILP has some
    chain_deadline = t0 + 0.5 * (deadline - t0) if math.isfinite(deadline) else math.inf
    layout: dict[int, tuple[int, int]] = {}
    value = 0.0
    bound = B
    message = ""
    interrupted = False
    so_far = _SoFar()  # what a step of the construction has found before it returns

    def closed() -> bool:  # the value reaches the bound, or the requested gap: nothing left to search
        return value >= bound * (1 - _REACHED) or bound - value <= gap * value

    try:  # a Ctrl-C from here on ends the search with the best layout so far and the bound proven so far
        # the construction on coarse groups (capacities at most the true ones, so every stage it builds
        # carries at least what it planned): nodes whose profiles differ a little stay interchangeable there
        layout, value = _chains(cluster, model, _coarse(groups), regions, slow, B, chain_deadline, threads,
                                so_far=so_far)
        stats["construction"] = value
        if layout and value < B * (1 - _REACHED):
            layout, value = _add_idle(cluster, model, layout, value, chain_deadline, so_far=so_far)
            stats["with_idle_nodes"] = value
            layout, value = _swap_nodes(cluster, model, layout, value, chain_deadline, so_far=so_far)
            stats["with_swaps"] = value
        upper = _upper_cluster(cluster, model)
        # where nodes of one GPU type and layer limit differ, the bounds on their own profiles as well
        # (more item types, slower, but not raised to the largest of each type): both are proven, the
        # smaller counts
        views = [upper] + ([cluster] if _profiles(cluster, model) > _profiles(upper, model) else [])
        if not closed() and time.monotonic() < deadline:
            # the cover bound gets at most a quarter of what is left (about 2 s on the upper cluster);
            # on the nodes' own profiles, about 10 s on 24 of them, half of what is then left and a
            # coarser bisection (both bounds are proven, and the smaller counts)
            for view, share, tol in zip(views, (0.25, 0.5), (1e-4, 1e-3)):
                left = deadline - time.monotonic()
                if left <= 0 or closed():
                    break
                bound = min(bound, cover_bound(view, model, value, bound,
                                               deadline=time.monotonic() + share * left, rel_tol=tol))
            stats["cover_bound"] = bound
        slow = any(cap < bound for cap in cluster.directed_links(model).values())
        if slow and not closed() and time.monotonic() < deadline:
            # links slower than the bound: the crossing bound (a third of what is left; about 2-3 s on the
            # upper cluster), then on the nodes' own profiles with a third of what is then left
            for view, tol in zip(views, (1e-5, 1e-4)):
                left = deadline - time.monotonic()
                if left <= 0 or closed():
                    break
                bound = min(bound, crossing_bound(view, model, value, bound,
                                                  deadline=time.monotonic() + left / 3, rel_tol=tol))
            stats["crossing_bound"] = bound
        if not closed() and time.monotonic() < deadline:
            # the same arguments with whole nodes and layers (an integer program per step; about a second
            # on a few node types), with half of what is left
            for view in views:
                left = deadline - time.monotonic()
                if left <= 0 or closed():
                    break
                bound = min(bound, integer_cover_bound(view, model, value, bound, threads=threads,
                                                       deadline=time.monotonic() + left / 2 / len(views)))
            stats["integer_cover_bound"] = bound
        # under a second left, building the MILP alone would overrun the limit, and it could not do much
        if milp and not closed() and time.monotonic() < deadline - 1.0:
            from ._milp import OPTIMAL, solve_mip

            # no node carries more than the whole flow, itself at most the bound proven so far
            mp = _aggregated_milp(cluster, model, groups, regions, fast, bound)
            start = _milp_start(cluster, model, groups, mp, layout) if layout else None
            left = None if not math.isfinite(deadline) else max(0.1, deadline - time.monotonic())
            res = solve_mip(mp.model, time_limit=left, gap=gap, threads=threads, start=start)
            stats.update(milp_status=res.status, milp_time=res.time, milp_start=start is not None)
            if res.bound is not None:
                # HiGHS minimises -F: its dual bound is minus an upper bound on the MILP's optimum
                milp_bound = -res.bound
                stats["milp_bound"] = milp_bound
                bound = min(bound, max(milp_bound, 0.0))
            if res.x is not None:
                so_far.milp = (groups, mp, res.x)  # scored by settle() if a Ctrl-C comes first
                # scored as the result holds it (sorted): in another order max-flow may differ in the last
                # bit, and the result's value was not the scorer's number for its own layout
                cand = dict(sorted(_milp_layout(groups, mp, res.x).items()))
                v = max_flow(cluster, model, cand)
                stats["milp_value"] = v
                if v > value:
                    layout, value = cand, v
                so_far.milp = ()
            if res.status == OPTIMAL and res.bound is None:
                message = "the MILP reported optimality without a bound"
            if res.interrupted:  # its best is kept above: a layout all the same
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    # the result: a further Ctrl-C while it is made (a second one, or one as the search ended) is the same
    # stop, taken again (as solvers._milp takes each one while HiGHS stops); it escaped as a second
    # KeyboardInterrupt, and the layout the first one kept was lost (exit 130, nothing written)
    while True:
        try:
            if interrupted:
                so_far.settle(cluster, model)
                if so_far.value > value:  # the step the Ctrl-C cut short had found more
                    layout, value = so_far.layout, so_far.value
                if not layout or value <= 0:
                    break
            return _ended(model, layout, value, bound, message, stats, interrupted=interrupted, gap=gap,
                          t0=t0, deadline=deadline)
        except KeyboardInterrupt:
            interrupted = True
    raise KeyboardInterrupt  # nothing found yet: the Ctrl-C is the caller's


def _ended(model: str, layout: dict[int, tuple[int, int]], value: float, bound: float, message: str,
           stats: dict, *, interrupted: bool, gap: float, t0: float, deadline: float) -> LayoutResult:
    """:func:`solve_layout`'s result: ``layout`` of ``value`` under the proven ``bound``, its status and
    the words why it ended (``message``: the search's own, unless a Ctrl-C or the value says more)."""
    if value <= 0:  # a layout that serves nothing is no layout (never feasible at 0 tokens/s)
        layout = {}
    # a layout's value can never exceed a proven bound; a bound below it (float noise) is raised to it
    bound = max(bound, value)
    reached = value > 0 and value >= bound * (1 - _REACHED)
    if interrupted:  # said even where the layout is proven optimal: the caller's work ends on it
        message = (f"{INTERRUPTED} once the layout was proven optimal (its value reaches the bound)"
                   if reached else
                   f"{INTERRUPTED}: the best layout so far (not proven optimal), the bound proven so far")
    status = Status.OPTIMAL if reached else (Status.FEASIBLE if layout else Status.STOPPED)
    if not layout:
        message = message or "no layout with positive flow found"
    elif not reached and not message:
        if value > 0 and bound - value <= gap * value:
            message = f"within the requested gap ({gap:g}), not proven optimal"
            stats["path"] = "within-gap"
        else:
            message = "time limit reached" if time.monotonic() >= deadline else "bound not reached"
    return LayoutResult(model, dict(sorted(layout.items())), value, bound, status,
                        time.monotonic() - t0, message, stats)


def _profiles(cluster: HelixCluster, model: str) -> int:
    """How many distinct node profiles ``model`` has on ``cluster``."""
    return len({n.profiles[model] for n in cluster.nodes})


def _upper_cluster(cluster: HelixCluster, model: str) -> HelixCluster:
    """The cluster with every node's profile raised to the largest capacity, for every ``k``, of the
    nodes of its GPU type and layer limit: every layout flows at least as much there (capacities only
    rise), so its bounds hold here, and the cover LP has a few types instead of one per node where
    profiles differ slightly (on Helix's files it is the cluster itself)."""
    import dataclasses

    by: dict[tuple, list[NodeProfile]] = {}
    for n in cluster.nodes:
        p = n.profiles[model]
        by.setdefault((n.gpu_type, p.max_num_layers), []).append(p)
    up = {key: NodeProfile(key[1], tuple(max(p.capacity[k] for p in ps) for k in range(key[1])))
          for key, ps in by.items()}
    nodes = tuple(dataclasses.replace(n, profiles={**n.profiles, model: up[(n.gpu_type,
                                                                            n.profiles[model].max_num_layers)]})
                  for n in cluster.nodes)
    return dataclasses.replace(cluster, nodes=nodes)


def _coarse(groups: list[_Group]) -> list[_Group]:
    """Groups of one region, GPU type and layer limit, each with the smallest capacity of its members
    for every ``k`` (the construction's view; the scorer and the MILP keep the true profiles)."""
    by: dict[tuple, list[_Group]] = {}
    for g in groups:
        by.setdefault((g.region, g.gpu_type, g.profile.max_num_layers), []).append(g)
    out = []
    for (r, t, kmax), gs in by.items():
        caps = tuple(min(g.profile.capacity[k] for g in gs) for k in range(kmax))
        out.append(_Group(r, t, NodeProfile(kmax, caps), tuple(sorted(a for g in gs for a in g.nodes))))
    return out


def _groups_merged(groups: list[_Group]) -> list[_Group]:
    """Groups with regions ignored (one zone): nodes of one type and profile anywhere."""
    by: dict[tuple, list[int]] = {}
    for g in groups:
        by.setdefault((g.gpu_type, g.profile), []).extend(g.nodes)
    return [_Group(0, t, p, tuple(sorted(ix))) for (t, p), ix in by.items()]
