"""The DP's thread count on a busy machine: one thread, all threads and the default (the cores other
work leaves free, :func:`solvers._cpu.idle_cores`), on a quiet machine and beside one competing
CPU-bound process that this script starts itself. Medians of ``--repeats`` runs, alternating.

    python -m benchmarks.bench_busy [--repeats 3] [--cases inception,llama] [--workloads DIR] [--spin]

Cases: ``inception``, the exact DP on the InceptionV3 training layer graph (the shared reference
workloads); ``llama``, ``auto`` on the project's 16-layer Llama training graph over
``a100:4,t4:4,cpu:8`` (one device per stage, exact on a quiet machine; under a 300 s limit, so a loaded
run that stops early says so with its gap).

The claim it checks: the default is never slower than one thread (before, two threads ran 2.6x slower
than one beside a competing process on 2 cores: InceptionV3 34.6 s against 13.1 s; and ``auto`` on the
16-layer Llama stopped at its 300 s limit with a 27.9% gap where the quiet machine proves it in 31 s).
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


LLAMA_LIMIT = 300.0


def _solve(case: str, workload: str, threads: int | None) -> tuple[float, int, str]:
    """Seconds of one solve of ``case``, the thread count its DP kernel ran on, and its status (with the
    gap where it is not proven)."""
    from solvers.base import SolveOptions

    if case == "inception":
        from graphs.reference import read_workload
        from solvers.dp import solve

        w = read_workload(workload)
        t = time.perf_counter()
        sol = solve(w.graph, w.cluster, SolveOptions(threads=threads))
        return time.perf_counter() - t, int(sol.stats.get("threads", 0)), str(sol.status)
    from graphs.devices import parse_devices
    from graphs.onnx_loader import parse_model
    from graphs.onnx_workload import graph_workload
    from graphs.transformer import llama
    from solvers.auto import solve

    w = graph_workload(parse_model(llama(16)), parse_devices("a100:4,t4:4,cpu:8"), training=True)
    t = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(threads=threads, time_limit=LLAMA_LIMIT))
    status = str(sol.status)
    if sol.gap is not None and sol.gap > 0:
        status += f" gap {100 * sol.gap:.1f}%"
    return time.perf_counter() - t, int(sol.stats.get("threads", 0) or 0), status


def _warm() -> None:
    """Compile and load the DP kernels (a tiny chain), so no case times their compilation."""
    from solvers.dp import solve
    from tests.instances import chain

    inst = chain(4)
    solve(inst.graph, inst.cluster)


CASES = {"inception": "InceptionV3 training, exact DP",
         "llama": f"16-layer Llama training on a100:4,t4:4,cpu:8, auto (limit {LLAMA_LIMIT:g} s)"}


def main(argv=None) -> int:
    from tests.instances import WORKLOADS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--workloads", default=WORKLOADS)
    p.add_argument("--spin", action="store_true", help="leave OpenMP's wait policy as the environment has "
                   "it (its threads spin while they wait), where by default the benchmark sets it passive "
                   "as the command line does (solvers._cpu.passive_waits)")
    args = p.parse_args(argv)
    if not args.spin:
        from solvers._cpu import passive_waits

        passive_waits()
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        p.error(f"--cases: unknown {', '.join(bad) or '(none given)'}; the cases are {', '.join(CASES)}")
    path = os.path.join(args.workloads, "throughput-inputs", "LayerGraphs", "inceptionv3_training.json")
    if "inception" in cases and not os.path.isfile(path):
        print(f"inception skipped: {path} not found (the shared reference workloads)")
        cases.remove("inception")
    from numba import config

    settings = {"1 thread": 1, f"{config.NUMBA_NUM_THREADS} threads": config.NUMBA_NUM_THREADS,
                "default": None}
    _warm()
    for case in cases:
        print(f"\n{CASES[case]}; median of {args.repeats}; load before: {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores", flush=True)
        print("| machine | " + " | ".join(settings) + " | default / 1 thread | threads the default chose | "
              "status (each run) |")
        print("|---|" + "---|" * (len(settings) + 3))
        for label in ("quiet", "one competing process"):
            stop, burner = mp.Event(), None
            if label != "quiet":
                burner = mp.Process(target=_burn, args=(stop,), daemon=True)
                burner.start()
                time.sleep(1.0)
            times = {k: [] for k in settings}
            chosen, statuses = [], []
            try:
                for _ in range(args.repeats):
                    for k, th in settings.items():
                        t, used, status = _solve(case, path, th)
                        times[k].append(t)
                        statuses.append(status)
                        if th is None:
                            chosen.append(used)
            finally:
                stop.set()
                if burner is not None:
                    burner.join(5)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"| {label} | " + " | ".join(f"{med[k]:.1f} s" for k in settings)
                  + f" | {med['default'] / med['1 thread']:.2f} | {', '.join(map(str, chosen))} | "
                  + ", ".join(sorted(set(statuses))) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
