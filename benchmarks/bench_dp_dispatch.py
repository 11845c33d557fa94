"""Is the stage DP's dispatch to the pipeline kernel worth it? On the :func:`graphs.parallel.from_opgraph`
problem of reference workloads, in one process, warm (each solve run once first to compile):

    python benchmarks/bench_dp_dispatch.py [--repeat 3] [NAME ...]   (NAME e.g. LayerGraphs/gnmt_training)

times ``solvers.dp.solve(graph, cluster)`` (the pipeline kernel on the workload itself),
``solvers.dp_stages.solve_problem(problem, kernel="stage")`` (the stage kernel) and
``solve_problem(problem)`` (dispatched: the pipeline kernel on :func:`graphs.parallel.to_opgraph`'s
graph), the medians of ``--repeat`` runs each, with their statuses and values.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ("LayerGraphs/gnmt_training", "LayerGraphs/inceptionv3_training",
           "OperatorGraphs/bert_L-12_training")


def _median(f, repeat: int, *args, **kw):
    f(*args, **kw)  # compile / warm
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f(*args, **kw)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    from graphs.parallel import from_opgraph
    from graphs.reference import read_workload
    from solvers import dp, dp_stages
    from tests.instances import WORKLOADS

    if not os.path.isdir(os.path.join(WORKLOADS, "throughput-inputs")):
        print(f"skipped: the reference workloads are not at {WORKLOADS} (../shared/workloads)")
        return

    print("| workload | pipeline kernel (dp.solve) | stage kernel | stage / pipeline | dispatched |")
    print("|---|---|---|---|---|")
    for name in args.names:
        w = read_workload(os.path.join(WORKLOADS, "throughput-inputs", name + ".json"))
        problem, _ = from_opgraph(w.graph, w.cluster)
        tp, p = _median(dp.solve, args.repeat, w.graph, w.cluster)
        ts, s = _median(dp_stages.solve_problem, args.repeat, problem, kernel="stage")
        td, d = _median(dp_stages.solve_problem, args.repeat, problem)
        print(f"| {name} | {tp:.3f} s, {p.status} {p.objective:.9g} "
              f"| {ts:.3f} s, {s.status} {s.objective:.9g} | {ts / tp:.2f} "
              f"| {td:.3f} s, {d.status} {d.objective:.9g} ({d.stats['kernel']}) |", flush=True)


if __name__ == "__main__":
    main()
