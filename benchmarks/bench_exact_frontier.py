"""The stage model's exact frontier (``placement.serving_stages.frontier_points`` with its exact part,
``exact_frontier`` on the stage integer program) on the serving benchmark's models and cluster: per
model and batch size, the problem's size, the points, whether the frontier is complete, and the time.

    python -m benchmarks.bench_exact_frontier [--time-limit 120] [--batch-size 1] [--out F.json]

Each model is solved at the granularity the command line's default picks (layers where the model's
names give them, else operators) and, where that was layers, at operator granularity too: first the
family of ``frontier_points`` (the stage optimum, capped degrees, one-stage plans; no limit), then
``exact_frontier`` from the stage optimum within ``--time-limit`` seconds. Nothing is written unless
``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from types import SimpleNamespace

from benchmarks.bench_serving import CLUSTER, _models


def measure(path: str, batch: int, time_limit: float) -> list[dict]:
    from placement import serving_stages as ss
    from solvers import ip_stages

    problem, _, settings, fine = ss.stage_problem(path, {"devices": CLUSTER}, batch)
    args = SimpleNamespace(solver=None, time_limit=None, threads=None, gap=1e-4)
    rows = []
    todo = [(settings.get("granularity") or "op", problem)]
    if fine is not None:
        todo.append(("op", fine()[0]))
    for granularity, p in todo:
        t0 = time.perf_counter()
        family = ss.frontier_points(p, args, batch, exact=False)
        t_family = time.perf_counter() - t0
        top = next((q for q in family if q.how == "stage optimum"), None)
        exact, complete, note = ([], False, "no stage optimum") if top is None else ss.exact_frontier(
            p, top, batch, time_limit=time_limit, starts=[q.evaluation for q in family])
        secs = time.perf_counter() - t0 - t_family
        rows.append({"granularity": granularity, "nodes": p.graph.num_nodes,
                     "columns": ip_stages.model_columns(p), "family_s": t_family, "exact_s": secs,
                     "optimum_proven": bool(top and top.proven), "complete": complete, "note": note,
                     "points": [{"samples_per_s": q.samples_per_s, "latency_ms": q.latency_ms,
                                 "proven": q.frontier} for q in exact]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per model and granularity")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    doc = {"cluster": CLUSTER, "batch_size": args.batch_size, "time_limit_s": args.time_limit, "models": {}}
    with tempfile.TemporaryDirectory(prefix="bench-exact-frontier-") as tmp:
        for name, path in _models(tmp).items():
            rows = measure(path, args.batch_size, args.time_limit)
            doc["models"][name] = rows
            for r in rows:
                proven = sum(p["proven"] for p in r["points"])
                print(f"| {name} | {r['granularity']} | {r['nodes']} | {r['columns']:,} | "
                      f"{'yes' if r['optimum_proven'] else 'no'} | {len(r['points'])} ({proven} proven) | "
                      f"{'yes' if r['complete'] else 'no'} | {r['family_s']:.1f} | {r['exact_s']:.1f} |",
                      flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    json.dump(doc, sys.stderr, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
