"""Benchmark of the integer programs on the shared reference workloads.

    python -m benchmarks.bench_ip                      # everything, default limits (long: see below)
    python -m benchmarks.bench_ip --parts contig --only LayerGraphs --contig-limit 600
    python -m benchmarks.bench_ip --table              # only print the table of what was measured

Parts:

* ``contig``: the contiguous IP (``--solver ip``, warm-started from the DP) on every throughput
  workload: status, time to proven optimum or the gap at the limit, against the reference DP value;
* ``noncontig``: the non-contiguous IP (``--solver ip-noncontig``): value, bound and gap, against the
  DP and the reference's non-contiguous baselines (Scotch, local search; FORMAT.md), which ignore
  memory limits that ours respects;
* ``latency``: the latency IP (q = 1) on every latency-inputs file, beside the reference greedy's
  latency and the latency of the DP's throughput placement on the same file.

Every figure is the evaluator's value of the returned placement (``graphs.evaluate`` /
``graphs.latency``), never the solver's own number. Each run is appended as one JSON line to
``--out`` (default ``benchmarks/results/ip.jsonl``) as it finishes; runs already there are skipped, so
an interrupted sweep resumes (``--rerun`` repeats them). The workloads are read from
``PLACEMENT_WORKLOADS`` (default ``../shared/workloads``) and never copied.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import sys
import time

from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.reference import read_workload
from solvers.base import SolveOptions

WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS",
                           os.path.join(os.path.dirname(__file__), "..", "..", "shared", "workloads"))
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "ip.jsonl")

# FORMAT.md, "Non-contiguous baselines": accelerators only, memory ignored (None = not reported)
NONCONTIG_BASELINES = {
    "OperatorGraphs/bert_l-3_inference": (35.94, 27.57), "OperatorGraphs/bert_l-3_training": (403.77, None),
    "OperatorGraphs/bert_l-6_inference": (58.08, 39.99), "OperatorGraphs/bert_l-6_training": (98.96, None),
    "OperatorGraphs/bert_l-12_inference": (246.92, None), "OperatorGraphs/bert_L-12_training": (539.44, None),
    "OperatorGraphs/resnet50_inference": (197.85, 228.53), "OperatorGraphs/resnet50_training": (416.25, None),
    "LayerGraphs/bert24_inference": (18.03, 17.78), "LayerGraphs/bert24_training": (42.01, 39.94),
    "LayerGraphs/gnmt_inference": (34.92, 31.78), "LayerGraphs/gnmt_training": (93.89, 90.95),
    "LayerGraphs/inceptionv3_inference": (52.29, 54.04), "LayerGraphs/inceptionv3_training": (119.18, None),
    "LayerGraphs/resnet50_inference": (34.31, 35.89), "LayerGraphs/resnet50_training": (79.92, 81.60),
}


def _reference():
    path = os.path.join(WORKLOADS, "reference_results.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _files(kind: str, only: str | None) -> list[str]:
    files = sorted(glob.glob(os.path.join(WORKLOADS, f"{kind}-inputs", "*", "*.json")))
    return [f for f in files if only is None or only in f]


def _name(path: str) -> str:
    return "/".join(path.split(os.sep)[-2:])[:-5]


def _num(x):
    return None if x is None or not math.isfinite(x) else float(x)


def run_contig(path: str, limit: float, threads: int | None, noncontig: bool) -> dict:
    from solvers.ip import solve, solve_noncontiguous

    w = read_workload(path)
    solve_fn = solve_noncontiguous if noncontig else solve
    t0 = time.perf_counter()
    sol = solve_fn(w.graph, w.cluster, SolveOptions(time_limit=limit, threads=threads))
    wall = time.perf_counter() - t0
    ev = evaluate(w.graph, w.cluster, sol.assignment) if sol.assignment is not None else None
    return {
        "status": sol.status.value, "objective": _num(sol.objective), "bound": _num(sol.bound),
        "gap": _num(sol.gap), "time_s": round(wall, 2), "message": sol.message,
        "max_load": None if ev is None else ev.max_load, "valid": None if ev is None else ev.valid,
        "contiguous": None if ev is None else ev.contiguous,
        "warm_start": sol.stats.get("warm_start"), "warm_start_value": sol.stats.get("warm_start_value"),
        "dp_time_s": sol.stats.get("dp_time_s"), "nodes": sol.stats.get("nodes"),
        "fixed_by_bound": sol.stats.get("fixed_by_bound"), "rows": sol.stats.get("rows"),
        "cols": sol.stats.get("cols"),
    }


def run_latency(path: str, limit: float, threads: int | None, dp_limit: float) -> dict:
    from solvers import dp
    from solvers.latency_ip import solve

    w = read_workload(path)
    t0 = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(objective="latency", time_limit=limit, threads=threads))
    wall = time.perf_counter() - t0
    ev = latency(w.graph, w.cluster, sol.assignment, subgraphs=sol.stats.get("subgraphs")) \
        if sol.assignment is not None else None
    out = {
        "status": sol.status.value, "objective": _num(sol.objective), "bound": _num(sol.bound),
        "gap": _num(sol.gap), "time_s": round(wall, 2), "message": sol.message,
        "latency": None if ev is None else ev.total, "valid": None if ev is None else ev.valid,
        "warm_start": sol.stats.get("warm_start"), "warm_start_value": sol.stats.get("warm_start_value"),
        "nodes": sol.stats.get("nodes"),
    }
    # the DP's throughput placement on the same file, and its latency
    try:
        d = dp.solve(w.graph, w.cluster, SolveOptions(time_limit=dp_limit))
        if d.assignment is not None:
            out["dp_status"] = d.status.value
            out["dp_max_load"] = d.objective
            out["dp_latency"] = latency(w.graph, w.cluster, d.assignment).total
        else:
            out["dp_status"] = f"{d.status.value}: {d.message}"
    except Exception as e:  # the DP can refuse (too many ideals): report why
        out["dp_status"] = f"not run: {e}"
    return out


def _load(path: str) -> dict:
    done = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done[(r["part"], r["workload"])] = r
    return done


def table(results: dict) -> str:
    ref = _reference()
    lines = []
    rows = sorted((r for (p, _), r in results.items() if p == "contig"), key=lambda r: r["workload"])
    if rows:
        lines += ["### Contiguous IP (`--solver ip`, DP warm start)", "",
                  "| workload | status | max-load | reference DP | bound | gap | time s | DP warm start s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            key = f"throughput-inputs/{r['workload']}.json"
            refv = ref["throughput"].get(key, {}).get("dp_max_load")
            lines.append(f"| {r['workload']} | {r['status']} | {_f(r['objective'])} | {_f(refv)} | "
                         f"{_f(r['bound'])} | {_pct(r['gap'])} | {r['time_s']:.1f} | "
                         f"{_f(r.get('dp_time_s'), 1)} |")
        lines.append("")
    rows = sorted((r for (p, _), r in results.items() if p == "noncontig"), key=lambda r: r["workload"])
    if rows:
        contig = {r["workload"]: r for (p, _), r in results.items() if p == "contig"}
        lines += ["### Non-contiguous IP (`--solver ip-noncontig`)", "",
                  "| workload | status | max-load | bound | gap | time s | contiguous optimum | Scotch | "
                  "local search |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            key = f"throughput-inputs/{r['workload']}.json"
            c = contig.get(r["workload"], {}).get("objective") or \
                ref["throughput"].get(key, {}).get("dp_max_load")
            sc, ls = NONCONTIG_BASELINES.get(r["workload"], (None, None))
            lines.append(f"| {r['workload']} | {r['status']} | {_f(r['objective'])} | {_f(r['bound'])} | "
                         f"{_pct(r['gap'])} | {r['time_s']:.1f} | {_f(c)} | {_f(sc)} | {_f(ls)} |")
        lines.append("")
    rows = sorted((r for (p, _), r in results.items() if p == "latency"), key=lambda r: r["workload"])
    if rows:
        lines += ["### Latency IP (`--objective latency`, q = 1)", "",
                  "| workload | status | latency | bound | gap | time s | reference greedy | "
                  "DP placement's latency | warm start |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            key = f"latency-inputs/{r['workload']}.json"
            g = ref.get("latency", {}).get(key, {}).get("greedy_latency")
            dpl = _f(r.get("dp_latency")) if r.get("dp_latency") is not None else \
                (r.get("dp_status") or "—").split(":")[0]
            lines.append(f"| {r['workload']} | {r['status']} | {_f(r['objective'])} | {_f(r['bound'])} | "
                         f"{_pct(r['gap'])} | {r['time_s']:.1f} | {_f(g)} | {dpl} | {r.get('warm_start')} |")
        lines.append("")
    return "\n".join(lines)


def _f(x, digits=6):
    if x is None:
        return "—"
    return f"{x:.{digits}g}" if digits != 1 else f"{x:.1f}"


def _pct(g):
    return "—" if g is None else f"{100 * g:.3g}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="contig,noncontig,latency")
    ap.add_argument("--only", default=None, help="run only workloads whose path contains this")
    ap.add_argument("--contig-limit", type=float, default=600.0)
    ap.add_argument("--noncontig-limit", type=float, default=120.0)
    ap.add_argument("--latency-limit", type=float, default=120.0)
    ap.add_argument("--dp-limit", type=float, default=60.0, help="DP time limit for the latency part")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--table", action="store_true", help="only print the table of the results file")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(WORKLOADS, "throughput-inputs")):
        print(f"reference workloads not found at {WORKLOADS} (set PLACEMENT_WORKLOADS)", file=sys.stderr)
        return 2
    done = _load(args.out)
    if not args.table:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        parts = args.parts.split(",")
        jobs = []
        for part in ("contig", "noncontig", "latency"):
            if part in parts:
                kind = "latency" if part == "latency" else "throughput"
                jobs += [(part, f) for f in _files(kind, args.only)]
        for part, f in jobs:
            key = (part, _name(f))
            if key in done and not args.rerun:
                continue
            print(f"[{time.strftime('%H:%M:%S')}] {part} {key[1]} ...", flush=True)
            if part == "latency":
                r = run_latency(f, args.latency_limit, args.threads, args.dp_limit)
            else:
                limit = args.contig_limit if part == "contig" else args.noncontig_limit
                r = run_contig(f, limit, args.threads, part == "noncontig")
            r.update(part=part, workload=key[1], machine=f"{platform.node()} ({os.cpu_count()} cpus)",
                     date=time.strftime("%Y-%m-%d %H:%M"))
            print(f"    {r['status']} {r['objective']} bound {r['bound']} gap {r['gap']} {r['time_s']} s",
                  flush=True)
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")
            done[key] = r
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
