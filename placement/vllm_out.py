"""vLLM deployments of a Helix layout (:mod:`graphs.helix`): pipeline replicas, their flags and env var.

vLLM runs a model as replicas, each a pipeline of ``--pipeline-parallel-size`` stages (here one GPU each,
``--tensor-parallel-size 1``), the layers split over the stages by its partition rule, which
:func:`pp_partition` re-implements (written from vLLM's documented behaviour of
``vllm/distributed/utils.py: get_pp_indices``; nothing of vLLM is imported or copied):

* with ``VLLM_PP_LAYER_PARTITION`` set, it is read as comma-separated integers, one per stage: there
  must be exactly ``pp_size`` of them and they must add up to the number of layers; stage ``r`` takes
  the layers after those of stages ``0 .. r - 1``;
* without it, every stage gets ``num_layers // pp_size`` layers, and the ``num_layers % pp_size`` left
  over go one each to the stages counted backwards from the second-to-last (the last stage, which also
  holds the final norm and output head, never gets one; the first gets one only when all the others
  before the last already have).

A Helix layout is richer than that: its max-flow routes tokens over many paths that share nodes. Two
figures come out of it here:

* :func:`flow_paths`: the max-flow decomposed into source-to-sink paths, each a chain of nodes whose
  layer ranges follow one another over ``[0, L)``, with its share of the flow. The shares add up to the
  max-flow, but a node on several paths serves them all with one capacity, which vLLM's replicas cannot
  do (a GPU belongs to one replica).
* :func:`vllm_replicas`: chains in which every node is in at most one replica, each replica's
  throughput the smallest of its nodes' capacities and the links between them (Helix's own capacity
  model of a pipeline); their sum is what vLLM would get from this layout. Chosen greedily, widest
  chain first.

A layout good for Helix (stages of several nodes in parallel) can leave most nodes in no such chain, so
:func:`vllm_json` also takes replicas planned for vLLM from scratch (:mod:`solvers.helix_vllm`) and
deploys whichever serve more.

**SGLang** (:func:`sglang_json`, ``place config.json --objective goodput --engine sglang``): a stage plan
of an LLM (:mod:`graphs.llm`) as ``sglang.launch_server`` arguments. One server runs ``--pp-size``
pipeline stages of ``--tp-size`` GPUs each, the whole pipeline ``--dp-size`` times, the layers split by
``SGLANG_PP_LAYER_PARTITION`` (comma-separated layer counts, one per stage, as vLLM's variable above);
a disaggregated layout is a prefill server (``--disaggregation-mode prefill``), a decode server
(``--disaggregation-mode decode``) and the router in front (``python -m sglang_router.launch_router
--pd-disaggregation --prefill URL --decode URL``). Flags as SGLang documents them: the server
arguments page (``--tp-size``, ``--dp-size``) and ``docs/advanced_features/pd_disaggregation.md``
(``--disaggregation-mode``, the router line) of sgl-project/sglang; ``--pp-size`` and
``SGLANG_PP_LAYER_PARTITION`` as ``python/sglang/srt/distributed/utils.py`` (``get_pp_indices``)
reads them. SGLang gives every pipeline stage the same tensor-parallel size and replicates the whole
pipeline: a plan whose stages differ in ``t`` or ``d`` has no such server, and the entry says why
instead of giving a command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphs.errors import InputError
from graphs.helix import SINK, SOURCE, HelixCluster, max_flow, max_flow_solution

__all__ = ["pp_indices", "pp_partition", "FlowPath", "flow_paths", "VllmReplica", "vllm_replicas",
           "planned_replicas", "vllm_json", "format_vllm", "sglang_server", "sglang_json", "format_sglang"]

ENV = "VLLM_PP_LAYER_PARTITION"


def pp_partition(num_layers: int, pp_size: int, partition: str | None = None) -> list[tuple[int, int]]:
    """The ``[start, end)`` layer range of every pipeline stage by vLLM's rule (module docstring);
    ``partition``: the value of ``VLLM_PP_LAYER_PARTITION`` (``None``: unset). :class:`ValueError`
    where vLLM refuses the value."""
    if pp_size < 1:
        raise ValueError(f"pp_size must be at least 1, got {pp_size}")
    if partition is not None:
        try:
            counts = [int(x) for x in partition.split(",")]
        except ValueError as err:
            raise ValueError(f"invalid partition string: {partition!r}") from err
        if len(counts) != pp_size:
            raise ValueError(f"{len(counts)} layer counts in {partition!r} for {pp_size} stages")
        if sum(counts) != num_layers:
            raise ValueError(f"the layer counts in {partition!r} add up to {sum(counts)}, not {num_layers}")
    else:
        counts = [num_layers // pp_size] * pp_size
        # the remainder (< pp_size) goes to stages pp_size - 2, pp_size - 3, ... down to index 0 at most
        for i in range(num_layers % pp_size):
            counts[pp_size - 2 - i] += 1
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return out


def pp_indices(num_layers: int, pp_rank: int, pp_size: int, partition: str | None = None) -> tuple[int, int]:
    """``(start, end)`` of stage ``pp_rank``'s layers (vLLM's ``get_pp_indices``, re-implemented)."""
    return pp_partition(num_layers, pp_size, partition)[pp_rank]


# ------------------------------------------------------------------------------------------- paths
@dataclass(frozen=True)
class FlowPath:
    """One source-to-sink path of a max-flow: its nodes in layer order and the tokens/s it carries."""

    nodes: tuple[int, ...]
    flow: float


def flow_paths(cluster: HelixCluster, model: str, layout: Mapping[int, tuple[int, int]],
               rel_tol: float = 1e-9) -> list[FlowPath]:
    """The max-flow of ``layout`` decomposed into paths, largest first (their flows add up to the
    max-flow, to ``rel_tol``). The flow graph is acyclic (every arc goes to later layers), so taking
    the widest remaining path and subtracting its flow ends after at most one path per arc."""
    sol = max_flow_solution(cluster, model, layout)
    rest = {ab: v for ab, v in sol.link_flow.items() if v > 0}
    eps = rel_tol * max(sol.value, 1.0)
    paths = []
    while True:
        p = _widest(rest, layout)
        if p is None:
            break
        nodes, width = p
        if width <= eps:
            break
        arcs = list(zip((SOURCE,) + nodes, nodes + (SINK,)))
        for ab in arcs:
            rest[ab] -= width
            if rest[ab] <= eps:
                del rest[ab]
        paths.append(FlowPath(nodes, width))
    return sorted(paths, key=lambda p: -p.flow)


def _widest(arcs: Mapping[tuple, float], layout: Mapping[int, tuple[int, int]]) -> tuple | None:
    """The source-to-sink path of largest bottleneck over ``arcs`` (``{(a, b): capacity}``), by a sweep
    in layer order (arcs go from a node to one starting where it ends): ``(nodes, bottleneck)``."""
    best: dict[object, tuple[float, object]] = {SOURCE: (float("inf"), None)}
    order = sorted({a for a, _ in arcs if a != SOURCE} | {b for _, b in arcs if b != SINK},
                   key=lambda i: layout[i][0])
    out: dict[object, list[tuple[object, float]]] = {}
    for (a, b), v in arcs.items():
        out.setdefault(a, []).append((b, v))
    for u in [SOURCE] + order:
        if u not in best:
            continue
        w = best[u][0]
        for v, cap in out.get(u, []):
            cand = min(w, cap)
            if cand > best.get(v, (0.0, None))[0]:
                best[v] = (cand, u)
    if SINK not in best:
        return None
    nodes, u = [], best[SINK][1]
    while u != SOURCE:
        nodes.append(u)
        u = best[u][1]
    return tuple(reversed(nodes)), best[SINK][0]


# ------------------------------------------------------------------------------------------- replicas
@dataclass(frozen=True)
class VllmReplica:
    """One vLLM pipeline replica: its nodes in stage order, each stage's ``[start, end)`` layers, the
    ``VLLM_PP_LAYER_PARTITION`` value that gives them, and its tokens/s (smallest stage capacity or
    link between stages)."""

    nodes: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]
    partition: str
    tokens_per_s: float

    @property
    def pp_size(self) -> int:
        """``--pipeline-parallel-size``: one stage per node."""
        return len(self.nodes)


def _replica(cluster: HelixCluster, model: str, layout, nodes: Sequence[int], width: float) -> VllmReplica:
    L = cluster.models[model].num_layers
    ranges = tuple((layout[i][0], layout[i][0] + layout[i][1]) for i in nodes)
    partition = ",".join(str(e - s) for s, e in ranges)
    # the rule must give back exactly these ranges: a replica vLLM would lay out otherwise is a bug
    got = tuple(pp_partition(L, len(nodes), partition))
    if got != ranges:
        raise AssertionError(f"{ENV}={partition} gives {got}, not {ranges}")
    return VllmReplica(tuple(nodes), ranges, partition, width)


def vllm_replicas(cluster: HelixCluster, model: str,
                  layout: Mapping[int, tuple[int, int]]) -> list[VllmReplica]:
    """Node-disjoint pipeline replicas from ``layout``: the widest chain (bottleneck of node capacities
    and links) from layer 0 to the last, its nodes removed, again, while one is left. Greedy, so their
    total is a lower bound on what disjoint chains of this layout can reach."""
    L = cluster.models[model].num_layers
    dl = cluster.directed_links(model)
    cap = {i: cluster.node(i).profiles[model].capacity_at(k) for i, (s, k) in layout.items() if k > 0}
    free = set(cap)
    out = []
    while free:
        # a node is an arc in -> out of its capacity; node-node arcs are links between matching ranges
        arcs: dict[tuple, float] = {}
        for i in free:
            s, k = layout[i]
            if s == 0 and dl.get((SOURCE, i), 0.0) > 0:
                arcs[(SOURCE, i)] = min(dl[(SOURCE, i)], cap[i])
            if s + k == L and dl.get((i, SINK), 0.0) > 0:
                arcs[(i, SINK)] = dl[(i, SINK)]
            for j in free:
                if j != i and layout[j][0] == s + k and dl.get((i, j), 0.0) > 0:
                    arcs[(i, j)] = min(dl[(i, j)], cap[j])
        p = _widest(arcs, layout)
        if p is None or p[1] <= 0:
            break
        nodes, width = p
        out.append(_replica(cluster, model, layout, nodes, width))
        free -= set(nodes)
    return out


# ------------------------------------------------------------------------------------------- output
Chain = Sequence[tuple[int, tuple[int, int]]]  # (node, (start, layers)) in stage order


def planned_replicas(cluster: HelixCluster, model: str, chains: Sequence[Chain]) -> list[VllmReplica]:
    """Replicas of chains planned for vLLM (:func:`solvers.helix_vllm.plan_replicas`), each at its
    max-flow scored alone."""
    out = []
    for chain in chains:
        lay = dict(chain)
        out.append(_replica(cluster, model, lay, [i for i, _ in chain], max_flow(cluster, model, lay)))
    return out


def vllm_json(cluster: HelixCluster, model: str, layout: Mapping[int, tuple[int, int]],
              planned: Sequence[Chain] = ()) -> dict:
    """The ``vllm`` section of the result: one entry per replica (nodes, GPU types, layers, flags, env
    var, tokens/s), the replicas' total, the layout's max-flow and its decomposition into flow paths.
    The replicas are the disjoint chains of ``layout`` or the ``planned`` chains, whichever serve more
    (``replicas_from``: ``"layout"`` or ``"vllm plan"``; both totals are given)."""
    if not layout:
        raise InputError("no layout to deploy", source=cluster.source)
    m = cluster.models[model]
    from_layout = vllm_replicas(cluster, model, layout)
    plan = planned_replicas(cluster, model, planned)
    t_layout = sum(r.tokens_per_s for r in from_layout)
    t_plan = sum(r.tokens_per_s for r in plan)
    reps = plan if t_plan > t_layout * (1 + 1e-9) else from_layout
    paths = flow_paths(cluster, model, layout)
    entries = []
    for r in reps:
        flags = ["--tensor-parallel-size", "1", "--pipeline-parallel-size", str(r.pp_size)]
        entries.append({
            "nodes": [{"index": i, "name": cluster.node(i).name, "gpu_type": cluster.node(i).gpu_type,
                       "layers": list(rng)} for i, rng in zip(r.nodes, r.ranges)],
            "tensor_parallel_size": 1, "pipeline_parallel_size": r.pp_size, "flags": flags,
            "env": {ENV: r.partition}, "tokens_per_s": r.tokens_per_s,
            "command": f"{ENV}={r.partition} vllm serve <{m.name}> " + " ".join(flags)})
    return {"model": m.name, "num_layers": m.num_layers, "replicas": entries,
            "replicas_tokens_per_s": sum(r.tokens_per_s for r in reps),
            "replicas_from": "vllm plan" if reps is plan else "layout",
            "layout_replicas_tokens_per_s": t_layout,
            "planned_replicas_tokens_per_s": t_plan if planned else None,
            "maxflow_tokens_per_s": sum(p.flow for p in paths),
            "flow_paths": [{"nodes": list(p.nodes), "tokens_per_s": p.flow} for p in paths],
            "unused_nodes": sorted({n.index for n in cluster.nodes} - {i for r in reps for i in r.nodes}),
            "note": "replicas do not share nodes, as vLLM's cannot; the max-flow's paths do, so "
                    "replicas_tokens_per_s, not maxflow_tokens_per_s, is what vLLM would serve"}


def format_vllm(data: Mapping) -> str:
    """The ``vllm`` section as text: one block per replica, then the totals."""
    lines = [f"vLLM deployment of {data['model']} ({data['num_layers']} layers): "
             f"{len(data['replicas'])} pipeline replica(s)"]
    for n, r in enumerate(data["replicas"], 1):
        stages = ", ".join(f"{s['gpu_type']}#{s['index']}[{s['layers'][0]},{s['layers'][1]})"
                           for s in r["nodes"])
        lines += ["", f"replica {n}: {r['tokens_per_s']:.2f} tokens/s, {r['pipeline_parallel_size']} stages",
                  f"  stages   {stages}", f"  command  {r['command']}"]
    src = ("planned for vLLM" if data["replicas_from"] == "vllm plan" else "the layout's disjoint chains")
    lines += ["", f"vLLM replicas  {data['replicas_tokens_per_s']:.2f} tokens/s (each node in one replica; "
              f"{src})", f"  from the layout's chains {data['layout_replicas_tokens_per_s']:.2f}"
              + ("" if data["planned_replicas_tokens_per_s"] is None
                 else f", planned for vLLM {data['planned_replicas_tokens_per_s']:.2f}"),
              f"Helix max-flow {data['maxflow_tokens_per_s']:.2f} tokens/s over {len(data['flow_paths'])} "
              f"path(s) that may share nodes"]
    if data["unused_nodes"]:
        lines.append(f"nodes in no replica: {', '.join(map(str, data['unused_nodes']))}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- SGLang
SGLANG_ENV = "SGLANG_PP_LAYER_PARTITION"
SGLANG_PORTS = {"colocated": 30000, "prefill": 30000, "decode": 30001}  # the ports of SGLang's examples


def sglang_server(problem, plan, num_layers: int, *, mode: str = "colocated", model: str = "<model>") -> dict:
    """The ``sglang.launch_server`` entry of one pipeline ``plan`` (stages of ``problem``, a chain of
    embedding, ``num_layers`` blocks and head, :func:`graphs.llm.decode_problem` or
    :func:`graphs.llm.prefill_problem`) in ``mode`` ``colocated``, ``prefill`` or ``decode``:
    per stage its kind, GPUs and layers; the flags, env var and command, or, where SGLang cannot run
    the plan as one server (stages of different ``t`` or ``d``), ``command`` ``None`` and the reason."""
    if mode not in SGLANG_PORTS:
        raise InputError(f"unknown SGLang server mode {mode!r} (colocated, prefill, decode)")
    stages, counts = [], []
    for st in plan:
        layers = [u - 1 for u in st.nodes if 1 <= u <= num_layers]
        counts.append(len(layers))
        stages.append({"kind": problem.kinds[st.kind].name, "gpus": st.t * st.d, "tp": st.t, "dp": st.d,
                       "layers": [layers[0], layers[-1] + 1] if layers else []})
    ts, ds = {st.t for st in plan}, {st.d for st in plan}
    out = {"mode": mode, "stages": stages, "tp_size": None, "pp_size": len(plan), "dp_size": None,
           "flags": None, "env": None, "command": None, "note": ""}
    if len(ts) > 1 or len(ds) > 1:
        out["note"] = ("SGLang runs every pipeline stage at one --tp-size and replicates the whole pipeline "
                       f"(--dp-size); these stages have tensor-parallel degrees {sorted(ts)} and replicas "
                       f"{sorted(ds)}: no single server runs this plan")
        return out
    if 0 in counts:
        out["note"] = "a stage holds no transformer layer (only the embedding or the head): SGLang's " \
                      "partition gives every stage at least one layer"
        return out
    t, d = ts.pop(), ds.pop()
    flags = ["--tp-size", str(t), "--pp-size", str(len(plan)), "--dp-size", str(d)]
    if mode != "colocated":
        flags += ["--disaggregation-mode", mode]
    flags += ["--port", str(SGLANG_PORTS[mode])]
    env = {SGLANG_ENV: ",".join(map(str, counts))} if len(plan) > 1 else {}
    prefix = "".join(f"{k}={v} " for k, v in env.items())
    out.update(tp_size=t, dp_size=d, flags=flags, env=env,
               command=f"{prefix}python -m sglang.launch_server --model-path {model} " + " ".join(flags))
    return out


def sglang_json(num_layers: int, decode: tuple, prefill: tuple | None = None, *,
                model: str = "<model>") -> dict:
    """The ``sglang`` section of a result: ``decode`` ``(problem, plan)`` a colocated plan's, or with
    ``prefill`` ``(problem, plan)`` the decode pool's of a disaggregated layout; its servers
    (:func:`sglang_server`) and, disaggregated, the router line."""
    note = ("a server over GPUs of several machines also needs SGLang's --nnodes, --node-rank and "
            "--dist-init-addr on each (not written here); stages are listed in pipeline order")
    if prefill is None:
        return {"layout": "colocated", "servers": [sglang_server(*decode, num_layers, model=model)],
                "router": None, "note": note}
    servers = [sglang_server(*prefill, num_layers, mode="prefill", model=model),
               sglang_server(*decode, num_layers, mode="decode", model=model)]
    router = ("python -m sglang_router.launch_router --pd-disaggregation "
              f"--prefill http://<prefill-host>:{SGLANG_PORTS['prefill']} "
              f"--decode http://<decode-host>:{SGLANG_PORTS['decode']} --host 0.0.0.0 --port 8000")
    return {"layout": "disaggregated", "servers": servers, "router": router, "note": note}


def format_sglang(data: Mapping) -> str:
    """The ``sglang`` section as text: per server its stages and command (or why there is none), then the
    router line of a disaggregated layout."""
    lines = [f"SGLang deployment ({data['layout']}):"]
    for sv in data["servers"]:
        stages = ", ".join(f"{s['kind']} t{s['tp']} x d{s['dp']} layers [{s['layers'][0]},{s['layers'][1]})"
                           if s["layers"] else f"{s['kind']} t{s['tp']} x d{s['dp']} (no layers)"
                           for s in sv["stages"])
        lines += [f"  {sv['mode']} server: {stages}",
                  f"    command  {sv['command']}" if sv["command"] else f"    no command: {sv['note']}"]
    if data["router"]:
        lines.append(f"  router   {data['router']}")
    return "\n".join(lines)
