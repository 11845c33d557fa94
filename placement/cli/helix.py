"""``placement place CLUSTER.json --model M`` on a Helix cluster file (``shared/workloads/helix``).

The command line sends a file here when :func:`placement.inputs.workload_kind` says it is a Helix cluster;
:func:`place` solves (:func:`solvers.helix_layout.solve_layout`), prints a table and writes the layout in
the format of the files' ``reference_layouts`` (``{"model": ..., "layout": {"<node index>": [start,
num_layers]}}``) with our value, bound and status beside it. With ``--engine vllm`` the result also has a
``vllm`` section (:mod:`placement.vllm_out`): one vLLM pipeline replica per entry, with its nodes, flags
and ``VLLM_PP_LAYER_PARTITION``, and what vLLM would serve beside the layout's max-flow.
``placement evaluate CLUSTER.json LAYOUT.json`` (:func:`evaluate`) re-scores such a layout on the cluster.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from graphs.errors import InputError

from .. import _interrupt

__all__ = ["place", "evaluate", "is_layout_result", "result_json", "format_result", "DEFAULT_TIME_LIMIT"]

#: seconds ``place`` gives the solver when ``--time-limit`` is not set
DEFAULT_TIME_LIMIT = 60.0
#: seconds for planning vLLM replicas with ``--engine vllm`` (1-2 s on Helix's files): on top of the solve
#: without ``--time-limit``; within it, its share :data:`VLLM_SHARE` of the limit (the command's whole time)
VLLM_PLAN_TIME = 10.0
VLLM_SHARE = 0.2
SCHEMA = "placement-helix-layout"


def _model(cluster, model: str | None) -> str:
    names = list(cluster.models)
    if model is None:
        if len(names) == 1:
            return names[0]
        raise InputError(f"the cluster file has several models; choose one with --model ({', '.join(names)})",
                         source=cluster.source)
    if model not in cluster.models:
        raise InputError(f"--model {model}: no such model in the file (models: {', '.join(names)})",
                         source=cluster.source)
    return model


def result_json(cluster, result) -> dict:
    """The JSON written by ``--out``: the layout (every node; ``[0, 0]`` = unused) and what we proved,
    with the published layouts' scores for comparison."""
    layout = {str(n.index): list(result.layout.get(n.index, (0, 0))) for n in cluster.nodes}
    published = {m: r.maxflow for m, r in cluster.references.get(result.model, {}).items()}
    gap = result.gap
    return {"schema": SCHEMA, "version": 1, "cluster": cluster.name, "model": result.model,
            "layout": layout, "status": str(result.status), "maxflow_tokens_per_s": result.value,
            "bound_tokens_per_s": result.bound, "gap": gap if gap != float("inf") else None,
            "time_s": result.time, "message": result.message, "published_maxflow": published}


def format_result(cluster, result) -> str:
    """A table of the layout: each used node's layers and flow, the GPU types, then value and bound."""
    from graphs.helix import max_flow_solution

    model = cluster.models[result.model]
    flows = max_flow_solution(cluster, result.model, result.layout).node_flow if result.layout else {}
    lines = [f"Helix cluster {cluster.name or cluster.source} ({len(cluster.nodes)} nodes), model "
             f"{result.model} ({model.num_layers} layers)", ""]
    # capacity and flow in tokens/s, as the max-flow below
    head = (f"{'node':>4}  {'GPU':<6} {'region':>6}  {'layers':<9} {'k':>3}  {'capacity tok/s':>14}  "
            f"{'flow tok/s':>10}")
    lines += [head, "-" * len(head)]
    for i, (s, k) in sorted(result.layout.items(), key=lambda kv: (kv[1][0], kv[0])):
        n = cluster.node(i)
        region = "-" if n.region is None else str(n.region)
        lines.append(f"{i:>4}  {n.gpu_type:<6} {region:>6}  {f'[{s}, {s + k})':<9} {k:>3}  "
                     f"{n.profiles[result.model].capacity_at(k):>14.1f}  {flows.get(i, 0.0):>10.1f}")
    lines += ["", f"{'GPU':<6} {'nodes':>5} {'used':>5}  layers per node"]
    for t in dict.fromkeys(n.gpu_type for n in cluster.nodes):
        nodes = [n.index for n in cluster.nodes if n.gpu_type == t]
        ks = sorted({result.layout[i][1] for i in nodes if i in result.layout})
        used = sum(i in result.layout for i in nodes)
        lines.append(f"{t:<6} {len(nodes):>5} {used:>5}  {', '.join(map(str, ks)) or '-'}")
    lines += ["", f"max-flow   {result.value:.2f} tokens/s"]
    if result.bound is not None:  # a layout evaluated (placement evaluate) has no bound or time of its own
        gap = "-" if result.gap == float("inf") else f"{100 * result.gap:.2f}%"
        lines += [f"bound      {result.bound:.2f} tokens/s (proven upper bound on every layout)",
                  f"gap        {gap}"]
    lines.append(f"status     {result.status}" + (f" ({result.message})" if result.message else ""))
    if result.time is not None:
        lines.append(f"time       {result.time:.1f} s")
    refs = cluster.references.get(result.model, {})
    if refs:
        lines.append("published  " + ", ".join(f"{m} {r.maxflow:.2f}" for m, r in refs.items()
                                             if r.maxflow is not None))
    return "\n".join(lines)


def place(args, clock) -> int:
    """Run ``placement place`` on a Helix file; returns the exit code (0: a layout, 1: none found; a
    Ctrl-C before any layout is a ``KeyboardInterrupt``, exit 130). The first Ctrl-C decides: one the
    search or the vLLM planning took gives the layout so far (exit 0, the Ctrl-C said; later ones change
    nothing, :func:`placement._interrupt.stopping`); one that comes while a complete result is written
    lets it be written whole, then ends with 130, as every command's output (:func:`placement.export.
    emit`).
    ``clock``: the command's (:class:`placement.clock.Clock`); its ``--time-limit``, when given, is the
    whole command's: the solve gets what reading the file and loading the solver left."""
    from graphs.helix import is_helix, read_helix
    from graphs.jsonio import read_json
    from solvers.helix_layout import solve_layout

    if not is_helix(read_json(args.workload)):  # reached with --model on another kind of file
        raise InputError("--model applies to Helix cluster files (nodes, links and machine_num_dict); "
                         "this is not one", source=args.workload)
    cluster = read_helix(args.workload)
    model = _model(cluster, args.model)
    import highspy  # noqa: F401  (the layout's integer programs: loaded before the solve's time starts)

    time_limit = clock.solve_limit()
    wants_vllm = getattr(args, "engine", None) == "vllm"
    given = args.time_limit is not None and time_limit is not None
    deadline = time.perf_counter() + time_limit if given else None
    limit = DEFAULT_TIME_LIMIT if args.time_limit is None else time_limit
    if given and wants_vllm:  # the planning below is within the command's limit too
        limit *= 1 - VLLM_SHARE
    from ..inputs import checked_gap

    # a Ctrl-C before any layout was found is raised here (exit 130); after one, the result is that
    # layout, feasible (optimal where it reaches the bound) and said interrupted, with the bound proven so
    # far (exit 0)
    result = solve_layout(cluster, model, time_limit=limit, threads=args.threads, gap=checked_gap(args.gap))
    if result.interrupted:
        _interrupt.stopping()
    data = result_json(cluster, result)
    # a Ctrl-C ended the search (its layout so far is the answer): nothing more is planned
    vllm = wants_vllm and bool(result.layout) and not result.interrupted
    cut = wants_vllm and result.interrupted
    if vllm:
        from solvers.helix_vllm import plan_replicas

        from ..vllm_out import vllm_json

        # replicas planned for vLLM as well (seconds here): the layout's own chains may serve far less
        plan_s = VLLM_PLAN_TIME if deadline is None else \
            min(VLLM_PLAN_TIME, max(0.0, deadline - time.perf_counter()))
        try:
            planned = plan_replicas(cluster, model, time_limit=plan_s, threads=args.threads)
            data["vllm"] = vllm_json(cluster, model, result.layout, planned)
        except KeyboardInterrupt:  # the layout stands: written without the replicas the Ctrl-C cut short
            _interrupt.stopping()
            vllm, cut = False, True
    if cut and result.layout:  # asked for, not planned: the file says so, not only stderr
        data["vllm"] = {"interrupted": True}
    after = ""
    if vllm and not args.json:
        from ..vllm_out import format_vllm

        after = "\n" + format_vllm(data["vllm"]) + "\n"
    _emit(args, cluster, result, data, after)
    if cut:
        print('note: interrupted (Ctrl-C): no vLLM replicas planned (the result\'s vllm section is '
              '{"interrupted": true})', file=sys.stderr)
    if not result.layout:
        print(f"error: {result.message}", file=sys.stderr)
        return 1
    return 0


def _emit(args, cluster, result, data: dict, after: str = "") -> None:
    """Write ``data`` (the layout's result) to ``--out`` and print it: as JSON with ``--json``, else the
    layout's table, then ``after``, then where it was written."""
    from ..export import emit

    emit(args, data, lambda: format_result(cluster, result) + "\n" + after, written="layout")


def is_layout_result(data) -> bool:
    """Is ``data`` (a parsed JSON file) a layout written by ``place`` on a Helix file (:data:`SCHEMA`)?"""
    return isinstance(data, dict) and data.get("schema") == SCHEMA


@dataclass(frozen=True)
class _Evaluated:
    """A given layout scored, in the fields :func:`format_result` and :func:`result_json` read (no bound,
    gap or solve time: nothing was solved)."""

    model: str
    layout: Mapping[int, tuple[int, int]]
    value: float
    status: str = "feasible"
    message: str = ""
    bound: float | None = None
    gap: float | None = None
    time: float | None = None


def evaluate(args) -> int:
    """``placement evaluate CLUSTER.json LAYOUT.json``: re-score a layout written by ``place --out`` on
    a Helix cluster file (its max-flow, :func:`graphs.helix.max_flow`) and print the layout table; with
    ``--out`` / ``--json`` the layout file's form with the value now (no bound: nothing is solved).
    Anything but such a layout, or a layout the cluster cannot run, is an :class:`InputError` naming the
    file and field. A layout that serves nothing (max-flow 0: layers no node holds, a node whose layers
    lead nowhere, :func:`graphs.helix.unserved_reasons`) is printed ``invalid``, saying why, and exits 1."""
    from graphs.helix import is_helix, layout_problems, max_flow, parse_layout, read_helix, unserved_reasons
    from graphs.jsonio import read_json

    if not is_helix(read_json(args.workload)):
        raise InputError("not a Helix cluster file (nodes, links and machine_num_dict)", source=args.workload)
    cluster = read_helix(args.workload)
    data = read_json(args.split)
    if not is_layout_result(data):
        raise InputError(f"a Helix cluster file is evaluated with a layout written by placement place "
                         f"{args.workload} --out LAYOUT.json (schema {SCHEMA!r}); this file is not one",
                         source=args.split)
    model = data.get("model")
    if not isinstance(model, str) or model not in cluster.models:
        raise InputError(f"model: {model!r} is not a model of the cluster {args.workload} (models: "
                         f"{', '.join(cluster.models)})", source=args.split)
    if "layout" not in data:
        raise InputError("the layout file has no 'layout' field", source=args.split)
    layout = parse_layout(data["layout"], source=args.split)
    if not layout:
        why = f": {data['message']}" if data.get("message") else ""
        raise InputError(f"the layout uses no node (status {data.get('status', 'unknown')}{why}); there is "
                         f"nothing to evaluate", source=args.split)
    placed_on = data.get("cluster")
    elsewhere = isinstance(placed_on, str) and bool(placed_on and cluster.name) and placed_on != cluster.name
    bad = layout_problems(cluster, model, layout)
    if bad:
        where = f" (it was placed on cluster {placed_on!r}, this is {cluster.name!r})" if elsewhere else ""
        raise InputError(f"the layout is not one of model {model} on the cluster {args.workload}{where}: "
                         + "; ".join(bad), source=args.split)
    value = max_flow(cluster, model, layout)
    # a layout that serves nothing is no layout to run: invalid, saying why, as a stage plan that breaks a
    # constraint (exit 1), never feasible at 0 tokens/s
    unserved = (unserved_reasons(cluster, model, layout) or ["no path carries tokens"]) if value <= 0 else []
    why = f"serves 0 tokens/s: {'; '.join(unserved)}; " if unserved else ""
    result = _Evaluated(model, layout, value, status="invalid" if unserved else "feasible",
                        message=f"{why}layout from {args.split}")
    out = result_json(cluster, result)
    _emit(args, cluster, result, out)
    recorded = data.get("maxflow_tokens_per_s")
    if isinstance(recorded, (int, float)) and not math.isclose(recorded, result.value, rel_tol=1e-9):
        print(f"note: the layout file says max-flow {recorded!r} tokens/s; evaluated now {result.value!r}",
              file=sys.stderr)
    if elsewhere:
        print(f"note: the layout was placed on cluster {placed_on!r}; evaluated on {cluster.name!r} "
              f"({args.workload})", file=sys.stderr)
    if isinstance(data.get("vllm"), dict) and data["vllm"].get("interrupted"):
        print("note: the file's vllm section says a Ctrl-C cut its planning short: it has no replicas for "
              "vLLM; evaluate scores the layout's max-flow", file=sys.stderr)
    elif isinstance(data.get("vllm"), dict):
        print("note: the file's vllm section (replicas for vLLM) is not re-scored here; evaluate scores the "
              "layout's max-flow", file=sys.stderr)
    if unserved:
        print(f"error: {args.split}: the layout serves 0 tokens/s (no token passes through all "
              f"{cluster.models[model].num_layers} layers): {'; '.join(unserved)}", file=sys.stderr)
        return 1  # no placement (cli.common.EXIT_NO_PLACEMENT, as place's 'none found')
    return 0
