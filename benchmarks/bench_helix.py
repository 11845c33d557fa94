"""Helix's LLM-serving clusters (see benchmarks/README_llm_serving.md): our layouts beside the published
ones, all scored by the same max-flow (:func:`graphs.helix.max_flow`, Helix's own rule).

For each cluster file in ``shared/workloads/helix`` and each model: ``solve_layout`` with a time limit
(default 60 s, 2 threads), its scored value, proven bound, gap, status and seconds, and every published
layout's score (Helix MILP, Swarm, Petals, with partial inference for Petals as its paper runs it), and
what vLLM would serve (node-disjoint pipeline replicas, :mod:`placement.vllm_out`): from our layout's
own chains, and planned for vLLM (:mod:`solvers.helix_vllm`, 10 s at most).

    python -m benchmarks.bench_helix [--time-limit 60] [--threads 2] [--out benchmarks/results/helix.json]

``--heldout``: the held-out clusters of :mod:`benchmarks.helix_heldout` instead (derived in memory from
the shipped files, never written), each solved exactly as ``placement place FILE --model M`` solves it
(:func:`solvers.helix_layout.solve_layout`, the same time limit and threads), into
``benchmarks/results/helix_heldout.json``; ``--kinds`` and ``--seeds`` choose them, ``--only`` keeps the
clusters whose name contains one of its comma-separated words.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

FILES = ("single24", "3cluster24")


def _published(cluster, model: str) -> dict[str, float]:
    from graphs.helix import max_flow

    out = {}
    for method, ref in cluster.references.get(model, {}).items():
        out[method] = max_flow(cluster, model, ref.layout)
        if method == "petals":
            out["petals (partial inference)"] = max_flow(cluster, model, ref.layout, partial_inference=True)
    return out


def run(time_limit: float, threads: int, folder: str) -> list[dict]:
    """One row per (cluster, model)."""
    from graphs.helix import max_flow, read_helix
    from placement.vllm_out import vllm_json
    from solvers.helix_layout import solve_layout
    from solvers.helix_vllm import plan_replicas

    rows = []
    for name in FILES:
        cluster = read_helix(os.path.join(folder, f"{name}.json"))
        for model in cluster.models:
            r = solve_layout(cluster, model, time_limit=time_limit, threads=threads)
            planned = plan_replicas(cluster, model, time_limit=10.0, threads=threads)
            vllm = vllm_json(cluster, model, r.layout, planned) if r.layout else None
            rows.append({"cluster": name, "model": model, "value": r.value, "bound": r.bound, "gap": r.gap,
                         "status": str(r.status), "time_s": r.time, "layer_bound": r.stats["layer_bound"],
                         "cover_bound": r.stats.get("cover_bound"),
                         "crossing_bound": r.stats.get("crossing_bound"),
                         "milp_bound": r.stats.get("milp_bound"), "construction": r.stats["construction"],
                         "published": _published(cluster, model), "layout": r.layout,
                         "vllm_replicas": len(vllm["replicas"]) if vllm else 0,
                         "vllm_tokens_per_s": vllm["replicas_tokens_per_s"] if vllm else 0.0,
                         "vllm_from": vllm["replicas_from"] if vllm else None,
                         "vllm_planned": sum(max_flow(cluster, model, dict(ch)) for ch in planned),
                         "vllm_planned_replicas": len(planned),
                         "vllm_layout_chains": vllm["layout_replicas_tokens_per_s"] if vllm else 0.0,
                         "vllm_partitions": [e["env"]["VLLM_PP_LAYER_PARTITION"] for e in vllm["replicas"]]
                         if vllm else []})
            print(f"{name} {model}: {r.value:.2f} (bound {r.bound:.2f}, gap {100 * r.gap:.2f}%, {r.status}, "
                  f"{r.time:.1f} s)", file=sys.stderr)
    return rows


def _pct(gap: float) -> str:
    """A gap in percent: two decimals, three below 0.01% (a gap above float noise never reads 0.00%)."""
    return f"{100 * gap:.3f}%" if 1e-7 <= gap < 1e-4 else f"{100 * gap:.2f}%"


def table(rows: list[dict]) -> str:
    """The markdown table of the README."""
    lines = ["| cluster | model | ours (tokens/s) | proven bound | gap | status | time | Helix MILP | "
             "Swarm | Petals | Petals, partial inference | ours / best published | vLLM: layout's chains | "
             "vLLM: planned (replicas) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["published"]
        helix = max((v for k, v in p.items() if k.startswith("helix_ilp") and "ablation" not in k
                     and "examples" not in k), default=None)
        best = max(p.values(), default=None)
        cells = [r["cluster"], r["model"], f"{r['value']:.2f}", f"{r['bound']:.2f}", _pct(r["gap"]),
                 r["status"], f"{r['time_s']:.1f} s", f"{helix:.2f}" if helix is not None else "-",
                 f"{p.get('swarm', 0):.2f}", f"{p.get('petals', 0):.2f}",
                 f"{p.get('petals (partial inference)', 0):.2f}",
                 f"{r['value'] / best:.2f}x" if best else "-",
                 f"{r['vllm_layout_chains']:.2f}",
                 f"{r['vllm_planned']:.2f} ({r['vllm_planned_replicas']})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_heldout(time_limit: float, threads: int, folder: str, kinds, seeds, only=None) -> list[dict]:
    """One row per (held-out cluster, model), solved as the command solves a file."""
    from graphs.helix import max_flow, parse_helix
    from solvers.helix_layout import solve_layout

    from .helix_heldout import heldout_cases

    rows = []
    for kind, name, data in heldout_cases(folder, kinds, seeds):
        if only and not any(w in name for w in only):
            continue
        cluster = parse_helix(data, source=f"heldout:{name}")
        for model in cluster.models:
            if only and any(w in ("llama70b", "llama30b") for w in only) and model not in only:
                continue
            r = solve_layout(cluster, model, time_limit=time_limit, threads=threads)
            assert not r.layout or abs(max_flow(cluster, model, r.layout) - r.value) <= 1e-6 * max(r.value, 1)
            rows.append({"kind": kind, "cluster": name, "model": model, "nodes": len(cluster.nodes),
                         "value": r.value, "bound": r.bound, "gap": r.gap, "status": str(r.status),
                         "time_s": r.time, "layer_bound": r.stats.get("layer_bound"),
                         "cover_bound": r.stats.get("cover_bound"),
                         "crossing_bound": r.stats.get("crossing_bound"),
                         "milp_bound": r.stats.get("milp_bound"), "construction": r.stats.get("construction"),
                         "stats": {k: v for k, v in r.stats.items()
                                   if isinstance(v, (int, float, str, bool))},
                         "layout": r.layout})
            print(f"{name} {model}: {r.value:.2f} (bound {r.bound:.2f}, gap {100 * r.gap:.2f}%, {r.status}, "
                  f"{r.time:.1f} s)", file=sys.stderr, flush=True)
    return rows


def heldout_table(rows: list[dict]) -> str:
    """The markdown table of the held-out clusters."""
    lines = ["| kind | cluster | nodes | model | ours (tokens/s) | proven bound | gap | status | time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["kind"], r["cluster"], str(r["nodes"]), r["model"], f"{r['value']:.2f}",
                 f"{r['bound']:.2f}", _pct(r["gap"]), r["status"], f"{r['time_s']:.1f} s"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tests.instances import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default=os.path.join(WORKLOADS, "helix"))
    ap.add_argument("--out", default=None, help="default benchmarks/results/helix.json "
                    "(helix_heldout.json with --heldout)")
    ap.add_argument("--heldout", action="store_true", help="the held-out clusters (benchmarks.helix_heldout)")
    ap.add_argument("--kinds", default="perturb,sub,regions,mix")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--only", default=None, help="comma-separated words: clusters (or models) to keep")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.workloads, "single24.json")):
        print(f"error: Helix cluster files not found in {args.workloads}", file=sys.stderr)
        return 2
    results = os.path.join(os.path.dirname(__file__), "results")
    if args.heldout:
        only = args.only.split(",") if args.only else None
        rows = run_heldout(args.time_limit, args.threads, args.workloads, args.kinds.split(","),
                           [int(x) for x in args.seeds.split(",")], only)
        out = args.out or os.path.join(results, "helix_heldout.json")
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            saved = [{**r, "layout": {str(k): list(v) for k, v in r["layout"].items()}} for r in rows]
            json.dump({"time_limit": args.time_limit, "threads": args.threads, "machine": platform.machine(),
                       "cpus": os.cpu_count(), "kinds": args.kinds, "seeds": args.seeds, "rows": saved}, f,
                      indent=1)
        print(heldout_table(rows))
        return 0
    args.out = args.out or os.path.join(results, "helix.json")
    rows = run(args.time_limit, args.threads, args.workloads)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        saved = [{**r, "layout": {str(k): list(v) for k, v in r["layout"].items()}} for r in rows]
        json.dump({"time_limit": args.time_limit, "threads": args.threads, "machine": platform.machine(),
                   "cpus": os.cpu_count(), "rows": saved}, f, indent=1)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
