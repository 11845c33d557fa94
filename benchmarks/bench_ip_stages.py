"""The contiguous MILP of the stage model (``ip``'s stage form, ``solvers/ip_stages.py``) against the
exact DP (``dp``) and ``auto`` on Piper's workloads at small device counts: wall time, status and value;
the MILP cold and warm-started from the DP's plan.

    python -m benchmarks.bench_ip_stages [--ip-time 30] [--only resnet:8 ...]
"""

from __future__ import annotations

import argparse
import os
import time

SETTINGS = [("resnet", 2), ("resnet", 4), ("resnet", 8), ("gnmt", 2), ("gnmt", 4), ("gnmt", 8),
            ("bert32a100", 2), ("bert32a100", 4)]


def _cell(r, secs: float) -> str:
    if r.plan is None:
        return f"{r.status} ({secs:.2f} s)"
    gap = (r.stats or {}).get("gap")
    g = f", gap {gap:.1%}" if gap is not None and str(r.status) != "optimal" else ""
    return f"{r.objective:.6g} {r.status}{g} ({secs:.2f} s)"


def main() -> None:
    from graphs.piper import read_piper
    from solvers import auto_stages, dp_stages, ip_stages
    from solvers.ip_stages import model_columns
    from tests.instances import WORKLOADS

    ap = argparse.ArgumentParser()
    ap.add_argument("--ip-time", type=float, default=30.0)
    ap.add_argument("--only", action="append", default=[], metavar="NAME:K", help="run only these settings")
    args = ap.parse_args()
    only = {(s.split(":")[0], int(s.split(":")[1])) for s in args.only}
    print("| workload | k | N | nodes | MILP columns | dp | ip (DP start) | ip (cold) | auto |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, k in SETTINGS:
        if only and (name, k) not in only:
            continue
        path = os.path.join(WORKLOADS, "piper", f"{name}.json")
        if not os.path.exists(path):
            print(f"| {name} | {k} | skipped: {path} not found |")
            continue
        p = read_piper(path, devices=k)
        row = [name, str(k), str(p.microbatches), str(p.graph.num_nodes), f"{model_columns(p):,}"]
        t = time.perf_counter()
        d = dp_stages.solve_problem(p)
        row.append(_cell(d, time.perf_counter() - t))
        for start in (d.plan, None):
            t = time.perf_counter()
            r = ip_stages.solve_problem(p, time_limit=args.ip_time, warm_start=start)
            row.append(_cell(r, time.perf_counter() - t))
        t = time.perf_counter()
        a = auto_stages.solve_problem(p, time_limit=args.ip_time)
        row.append(_cell(a, time.perf_counter() - t) + f" [{a.stats['label']}]")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
