"""The DP's thread count on a busy machine: one thread, all threads and the default (the cores other
work leaves free, :func:`solvers._cpu.idle_cores`), on a quiet machine and beside one competing
CPU-bound process that this script starts itself. Medians of ``--repeats`` runs, alternating.

    python -m benchmarks.bench_busy [--repeats 3] [--workloads DIR]

The claim it checks: the default is never slower than one thread (before, two threads ran 2.6x slower
than one beside a competing process on 2 cores: InceptionV3 34.6 s against 13.1 s).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def _solve(workload: str, threads: int | None) -> tuple[float, int]:
    """Seconds of one exact DP solve, and the thread count its kernel ran on."""
    from graphs.reference import read_workload
    from solvers.base import SolveOptions
    from solvers.dp import solve

    w = read_workload(workload)
    t = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(threads=threads))
    return time.perf_counter() - t, int(sol.stats.get("threads", 0))


def main(argv=None) -> int:
    from tests.instances import WORKLOADS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workloads", default=WORKLOADS)
    args = p.parse_args(argv)
    path = os.path.join(args.workloads, "throughput-inputs", "LayerGraphs", "inceptionv3_training.json")
    if not os.path.isfile(path):
        print(f"skipped: {path} not found (the shared reference workloads)")
        return 0
    from numba import config

    settings = {"1 thread": 1, f"{config.NUMBA_NUM_THREADS} threads": config.NUMBA_NUM_THREADS,
                "default": None}
    _solve(path, 1)  # compile and load the kernels first
    print(f"InceptionV3 training, exact DP; median of {args.repeats}; load before: "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| machine | " + " | ".join(settings) + " | default / 1 thread | threads the default chose |")
    print("|---|" + "---|" * (len(settings) + 2))
    for label in ("quiet", "one competing process"):
        stop, burner = mp.Event(), None
        if label != "quiet":
            burner = mp.Process(target=_burn, args=(stop,), daemon=True)
            burner.start()
            time.sleep(1.0)
        times = {k: [] for k in settings}
        chosen = []
        try:
            for _ in range(args.repeats):
                for k, th in settings.items():
                    t, used = _solve(path, th)
                    times[k].append(t)
                    if th is None:
                        chosen.append(used)
        finally:
            stop.set()
            if burner is not None:
                burner.join(5)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {label} | " + " | ".join(f"{med[k]:.1f} s" for k in settings)
              + f" | {med['default'] / med['1 thread']:.2f} | {', '.join(map(str, chosen))} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
