"""Helix's heterogeneous LLM-serving clusters (``shared/workloads/helix/FORMAT.md``), and their score.

A cluster file describes compute nodes (a GPU type, a per-model table of token throughput by the number
of layers held), links between them and a source/sink (each direction with a token capacity per model),
the models (their number of layers) and the layouts published for them. A *layout* gives each used node
a contiguous range of layers, ``{node index: (start, num_layers)}``.

:func:`max_flow` scores a layout exactly as Helix does: the maximum source-to-sink flow of tokens through
a graph where every used node is a capacity (its throughput with that many layers) and an arc joins two
nodes when one's layers end where the other's begin. It is the independent judge of every layout the
solvers produce. A link's capacity is its ``token_capacity_per_s`` (Helix's bandwidth over the bytes
of a token's activation, as the file gives it); its ``bandwidth`` and ``latency_s`` are checked as
numbers and not used otherwise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InputError
from .jsonio import read_json

__all__ = ["HelixCluster", "HelixLink", "HelixModel", "HelixNode", "NodeProfile", "ReferenceLayout",
           "SOURCE", "SINK", "is_helix", "read_helix", "parse_helix", "parse_layout", "layout_problems",
           "unserved_reasons", "max_flow", "max_flow_solution", "FlowSolution"]

SOURCE, SINK = "source", "sink"
Layout = Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class NodeProfile:
    """What one node can do for one model: ``capacity[k - 1]`` tokens/s when it holds ``k`` layers,
    for ``k = 1 .. max_num_layers`` (Helix's memory limit)."""

    max_num_layers: int
    capacity: tuple[float, ...]

    def capacity_at(self, k: int) -> float:
        """Tokens/s with ``k`` layers (``k`` in ``1 .. max_num_layers``)."""
        return self.capacity[k - 1]


@dataclass(frozen=True)
class HelixNode:
    """A compute node: its index (the key a layout uses), GPU type, region (``None`` in a single-region
    cluster) and a :class:`NodeProfile` per model."""

    index: int
    name: str
    gpu_type: str
    region: int | None
    profiles: Mapping[str, NodeProfile]


@dataclass(frozen=True)
class HelixLink:
    """A link ``a``-``b`` (node indices, or :data:`SOURCE` / :data:`SINK`); ``capacity[model]`` tokens/s
    in each direction it carries (both when ``bidirectional``, else ``a`` to ``b`` only)."""

    a: int | str
    b: int | str
    bidirectional: bool
    capacity: Mapping[str, float]


@dataclass(frozen=True)
class HelixModel:
    """A model: its key in the file, ``num_layers`` and Helix's placement-independent compute bound."""

    key: str
    name: str
    num_layers: int
    compute_upper_bound: float | None


@dataclass(frozen=True)
class ReferenceLayout:
    """A published layout and Helix's own scores of it (``None`` where the file gives none)."""

    method: str
    layout: Mapping[int, tuple[int, int]]
    maxflow: float | None
    maxflow_partial_inference: float | None


@dataclass(frozen=True)
class HelixCluster:
    """A whole cluster file."""

    name: str
    source: str | None
    nodes: tuple[HelixNode, ...]
    links: tuple[HelixLink, ...]
    models: Mapping[str, HelixModel]
    references: Mapping[str, Mapping[str, ReferenceLayout]] = field(default_factory=dict)

    def node(self, index: int) -> HelixNode:
        """The node with that index (:class:`KeyError` if none)."""
        for n in self.nodes:
            if n.index == index:
                return n
        raise KeyError(index)

    def directed_links(self, model: str) -> dict[tuple[int | str, int | str], float]:
        """Every direction a link carries, with its token capacity for ``model`` (parallel links add)."""
        out: dict[tuple[int | str, int | str], float] = {}
        for link in self.links:
            cap = link.capacity[model]
            pairs = [(link.a, link.b)] + ([(link.b, link.a)] if link.bidirectional else [])
            for pair in pairs:
                out[pair] = out.get(pair, 0.0) + cap
        return out


# ------------------------------------------------------------------------------------------- reading
#: the keys that make a file a Helix cluster file (a reference-format graph has ``nodes`` too)
_HELIX_KEYS = ("nodes", "links", "machine_num_dict")


def is_helix(data) -> bool:
    """Does decoded JSON look like a Helix cluster file: an object with at least two of ``nodes``,
    ``links`` and ``machine_num_dict``? A file missing one of them is still one, so that
    :func:`parse_helix` names the field it lacks (it is no other kind of workload)."""
    return isinstance(data, dict) and sum(k in data for k in _HELIX_KEYS) >= 2


def read_helix(path: str | os.PathLike) -> HelixCluster:
    """Read a Helix cluster file; :class:`InputError` names the file and the field at fault."""
    path = os.fspath(path)
    return parse_helix(read_json(path), source=path)


def _num(x, what: str, source, *, positive: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise InputError(f"{what} must be a finite number, got {x!r}", source=source)
    if x < 0 or (positive and x == 0):
        raise InputError(f"{what} must be {'positive' if positive else '>= 0'}, got {x!r}", source=source)
    return float(x)


def _int(x, what: str, source, *, minimum: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x) or x < minimum:
        raise InputError(f"{what} must be an integer >= {minimum}, got {x!r}", source=source)
    return int(x)


def _obj(x, what: str, source) -> dict:
    if not isinstance(x, dict):
        raise InputError(f"{what} must be a JSON object, got {type(x).__name__}", source=source)
    return x


def _get(d: dict, key: str, where: str, source):
    if key not in d:
        raise InputError(f"{where} has no {key!r} field", source=source)
    return d[key]


def parse_helix(data, *, source: str | None = None) -> HelixCluster:
    """The cluster in decoded Helix JSON ``data`` (``source`` names it in errors)."""
    data = _obj(data, "a Helix cluster file", source)
    models_raw = _obj(_get(data, "models", "the file", source), "models", source)
    if not models_raw:
        raise InputError("models is empty", source=source)
    models = {}
    for key, m in models_raw.items():
        m = _obj(m, f"models.{key}", source)
        ub = m.get("compute_upper_bound_tokens_per_s")
        if ub is not None:
            ub = _num(ub, f"models.{key}.compute_upper_bound_tokens_per_s", source)
        models[key] = HelixModel(key, str(m.get("name", key)),
                                 _int(_get(m, "num_layers", f"models.{key}", source),
                                      f"models.{key}.num_layers", source, minimum=1), ub)
    nodes_raw = _get(data, "nodes", "the file", source)
    if not isinstance(nodes_raw, list) or not nodes_raw:
        raise InputError("nodes must be a non-empty list", source=source)
    nodes = []
    seen: set[int] = set()
    for pos, n in enumerate(nodes_raw):
        where = f"nodes[{pos}]"
        n = _obj(n, where, source)
        index = _int(_get(n, "index", where, source), f"{where}.index", source)
        if index in seen:
            raise InputError(f"{where}.index {index} appears twice", source=source)
        seen.add(index)
        gpu = _get(n, "gpu_type", where, source)
        if not isinstance(gpu, str) or not gpu:
            raise InputError(f"{where}.gpu_type must be a non-empty string, got {gpu!r}", source=source)
        region = n.get("partition")
        region = None if region is None else _int(region, f"{where}.partition", source)
        thr = _obj(_get(n, "throughput", where, source), f"{where}.throughput", source)
        profiles = {}
        for key in models:
            t = _obj(_get(thr, key, f"{where}.throughput", source), f"{where}.throughput.{key}", source)
            tw = f"{where}.throughput.{key}"
            kmax = _int(_get(t, "max_num_layers", tw, source), f"{tw}.max_num_layers", source)
            caps = _obj(_get(t, "capacity_tokens_per_s", tw, source), f"{tw}.capacity_tokens_per_s", source)
            table = []
            for k in range(1, kmax + 1):
                if str(k) not in caps:
                    raise InputError(f"{tw}.capacity_tokens_per_s has no entry for {k} layers "
                                     f"(max_num_layers is {kmax})", source=source)
                table.append(_num(caps[str(k)], f"{tw}.capacity_tokens_per_s[{k}]", source))
            profiles[key] = NodeProfile(kmax, tuple(table))
        nodes.append(HelixNode(index, str(n.get("name", f"node-{index}")), gpu, region, profiles))
    links_raw = _get(data, "links", "the file", source)
    if not isinstance(links_raw, list):
        raise InputError("links must be a list", source=source)
    links = []
    for pos, e in enumerate(links_raw):
        where = f"links[{pos}]"
        e = _obj(e, where, source)
        ends = []
        for end in ("a", "b"):
            v = _get(e, end, where, source)
            if v not in (SOURCE, SINK) and (isinstance(v, bool) or not isinstance(v, int) or v not in seen):
                raise InputError(f"{where}.{end} must be 'source', 'sink' or a node index, got {v!r}",
                                 source=source)
            ends.append(v)
        a, b = ends
        if a == b or a == SINK or b == SOURCE:
            raise InputError(f"{where}: a link {a!r} -> {b!r} cannot carry tokens", source=source)
        # checked, not used: the max-flow reads token_capacity_per_s, Helix's bandwidth / activation bytes
        for key in ("bandwidth", "latency_s"):
            if key in e:
                _num(e[key], f"{where}.{key}", source)
        # a node-node link carries both directions unless the file says otherwise (FORMAT.md)
        directions = e.get("directions", "both")
        if not (isinstance(directions, str) and (directions.startswith("both") or directions == "a->b only")):
            raise InputError(f"{where}.directions must be 'both' or 'a->b only', got {directions!r}",
                             source=source)
        bidirectional = SOURCE not in ends and SINK not in ends and not directions.endswith("only")
        caps = _obj(_get(e, "token_capacity_per_s", where, source), f"{where}.token_capacity_per_s", source)
        capacity = {key: _num(_get(caps, key, f"{where}.token_capacity_per_s", source),
                              f"{where}.token_capacity_per_s.{key}", source) for key in models}
        links.append(HelixLink(a, b, bidirectional, capacity))
    references: dict[str, dict[str, ReferenceLayout]] = {}
    refs = _obj(data.get("reference_layouts", {}), "reference_layouts", source)
    for key, methods in refs.items():
        if key not in models:
            raise InputError(f"reference_layouts.{key}: no such model (models: {', '.join(models)})",
                             source=source)
        references[key] = {}
        for method, r in _obj(methods, f"reference_layouts.{key}", source).items():
            where = f"reference_layouts.{key}.{method}"
            r = _obj(r, where, source)
            layout = parse_layout(_get(r, "layout", where, source), what=f"{where}.layout", source=source)
            mf, mfp = r.get("maxflow"), r.get("maxflow_partial_inference")
            references[key][method] = ReferenceLayout(
                method, layout, None if mf is None else _num(mf, f"{where}.maxflow", source),
                None if mfp is None else _num(mfp, f"{where}.maxflow_partial_inference", source))
    return HelixCluster(str(data.get("name", "")), source, tuple(nodes), tuple(links), models, references)


def parse_layout(raw, *, what: str = "layout", source: str | None = None) -> dict[int, tuple[int, int]]:
    """A layout from its JSON form ``{"<node index>": [start, num_layers]}``; ``[0, 0]`` entries (unused
    nodes) are dropped."""
    raw = _obj(raw, what, source)
    out = {}
    for key, v in raw.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            raise InputError(f"{what}: key {key!r} is not a node index", source=source) from None
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise InputError(f"{what}[{key}] must be [start_layer, num_layers], got {v!r}", source=source)
        s = _int(v[0], f"{what}[{key}] start_layer", source)
        k = _int(v[1], f"{what}[{key}] num_layers", source)
        if k:
            out[index] = (s, k)
    return out


# ------------------------------------------------------------------------------------------- scoring
def layout_problems(cluster: HelixCluster, model: str, layout: Layout) -> list[str]:
    """Why ``layout`` is not a valid layout of ``model`` on ``cluster`` (empty if it is): unknown nodes,
    ranges outside the model, more layers than a node's ``max_num_layers``."""
    L = cluster.models[model].num_layers
    known = {n.index: n for n in cluster.nodes}
    bad = []
    for i, (s, k) in sorted(layout.items()):
        if k == 0:
            continue
        if i not in known:
            bad.append(f"node {i} is not in the cluster")
            continue
        if s < 0 or k < 0 or s + k > L:
            bad.append(f"node {i}: layers [{s}, {s + k}) are outside the model's {L} layers")
        kmax = known[i].profiles[model].max_num_layers
        if k > kmax:
            bad.append(f"node {i} ({known[i].gpu_type}): {k} layers, more than its max_num_layers {kmax}")
    return bad


def _layers(s: int, e: int) -> str:
    return f"layer {s} is" if e == s + 1 else f"layers [{s}, {e}) are"


def _has_chain(ranges: list[tuple[int, int, int]], L: int) -> bool:
    """Do some of the ``(start, end, node)`` ranges follow one another from layer 0 to layer ``L``?"""
    reached = {0}
    for s, e, _ in sorted(ranges):  # by start: every range that reaches s comes before
        if s in reached:
            reached.add(e)
    return L in reached


def unserved_reasons(cluster: HelixCluster, model: str, layout: Layout) -> list[str]:
    """Why ``layout`` (a valid layout, no partial inference) serves nothing: why its :func:`max_flow` is
    0. Without a chain of nodes whose layers follow one another from layer 0 to the last: the layer
    ranges no node holds, and the nodes whose layers end where no node's begin (or begin where none
    end); with one: the nodes of zero capacity, and the links, when the chains avoiding those nodes cross
    a missing link or one of zero capacity. Empty when the layout serves some tokens."""
    L = cluster.models[model].num_layers
    used = sorted((s, s + k, i) for i, (s, k) in layout.items() if k > 0)
    if not used:
        return ["the layout uses no node"]
    out = []
    if not _has_chain(used, L):
        held_to = 0  # layers [0, held_to) are held by some node, scanning the nodes by their first layer
        edges = set()  # the boundaries where a range no node holds begins or ends
        for s, e, _ in used + [(L, L, -1)]:
            if s > held_to:
                out.append(f"{_layers(held_to, s)} held by no node")
                edges |= {held_to, s}
            held_to = max(held_to, e)
        starts, ends = {s for s, _, _ in used}, {e for _, e, _ in used}
        # a node beside a range no node holds is said with that range
        out += [f"node {i} (layers [{s}, {e})) ends at layer {e}, where no node's layers begin"
                for s, e, i in used if e != L and e not in starts and e not in edges]
        out += [f"node {i} (layers [{s}, {e})) begins at layer {s}, where no node's layers end"
                for s, e, i in used if s != 0 and s not in ends and s not in edges]
        return out
    if max_flow(cluster, model, layout) > 0:
        return []
    caps = {i: cluster.node(i).profiles[model].capacity_at(e - s) for s, e, i in used}
    out = [f"node {i} (layers [{s}, {e})) has capacity 0 tokens/s with {e - s} layer(s)"
           for s, e, i in used if caps[i] <= 0]
    if _has_chain([r for r in used if caps[r[2]] > 0], L):
        out.append(f"every chain of nodes from layer 0 to layer {L} crosses a missing link or one of zero "
                   f"capacity (from the source to a node beginning at layer 0, from a node to the next, "
                   f"or from a node ending at layer {L} to the sink)")
    return out


@dataclass(frozen=True)
class FlowSolution:
    """A maximum flow of a layout: its ``value``, the flow through each used node and along each used
    direction of a link (``(a, b)`` with node indices or :data:`SOURCE` / :data:`SINK`)."""

    value: float
    node_flow: Mapping[int, float]
    link_flow: Mapping[tuple[int | str, int | str], float]


def max_flow(cluster: HelixCluster, model: str, layout: Layout, partial_inference: bool = False) -> float:
    """Helix's score of ``layout`` (tokens/s through all the model's layers): the maximum flow from the
    source to the sink, every used node split into an arc of capacity ``capacity_tokens_per_s[k]``, with
    source -> i iff i starts at layer 0, i -> sink iff i ends at the last layer, and i -> j iff i's layers
    end where j's begin (with ``partial_inference``: where j's begin at or before that and end after), each
    along an existing link with that link's capacity. :class:`InputError` for an invalid layout."""
    return max_flow_solution(cluster, model, layout, partial_inference).value


def max_flow_solution(cluster: HelixCluster, model: str, layout: Layout,
                      partial_inference: bool = False) -> FlowSolution:
    """:func:`max_flow` with the flow itself (node and link flows)."""
    import networkx as nx

    if model not in cluster.models:
        raise InputError(f"no model {model!r} in the cluster (models: {', '.join(cluster.models)})",
                         source=cluster.source)
    bad = layout_problems(cluster, model, layout)
    if bad:
        raise InputError("invalid layout: " + "; ".join(bad), source=cluster.source)
    L = cluster.models[model].num_layers
    used = {i: (s, s + k) for i, (s, k) in layout.items() if k > 0}
    g = nx.DiGraph()
    for i, (s, e) in used.items():
        g.add_edge(("in", i), ("out", i), capacity=cluster.node(i).profiles[model].capacity_at(e - s))
    arcs = {}
    for (a, b), cap in cluster.directed_links(model).items():
        if a == SOURCE and b in used and used[b][0] == 0:
            arcs[(a, b)] = (SOURCE, ("in", b))
        elif b == SINK and a in used and used[a][1] == L:
            arcs[(a, b)] = (("out", a), SINK)
        elif a in used and b in used:
            ea, (sb, eb) = used[a][1], used[b]
            if ea == sb or (partial_inference and sb <= ea < eb):
                arcs[(a, b)] = (("out", a), ("in", b))
        else:
            continue
        if (a, b) in arcs:
            g.add_edge(*arcs[(a, b)], capacity=cap)
    if SOURCE not in g or SINK not in g:
        return FlowSolution(0.0, {i: 0.0 for i in used}, {})
    # Edmonds-Karp, not networkx's default preflow-push: that one can fail on float capacities
    # (IndexError in its height levels), which every capacity here is
    value, flow = nx.maximum_flow(g, SOURCE, SINK, flow_func=nx.algorithms.flow.edmonds_karp)
    nodes = {i: float(flow[("in", i)][("out", i)]) for i in used}
    links = {ab: float(flow[u][v]) for ab, (u, v) in arcs.items() if flow[u][v] > 0}
    return FlowSolution(float(value), nodes, links)
