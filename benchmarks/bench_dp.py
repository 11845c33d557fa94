"""DP speed and memory on every shared throughput workload, next to the reference C++ figures.

    python benchmarks/bench_dp.py [--repeat 3] [--only gnmt] [--markdown out.md] [--no-prune]
    python benchmarks/bench_dp.py --tie-break-cost [--only gnmt]

Each workload runs in a fresh subprocess (so peak memory is that workload's alone); inside it the
numba kernels are warmed up on a tiny instance first, then ``solvers.dp.solve`` (contraction, ideal
enumeration, upper bound and DP: the whole solve) is timed ``--repeat`` times (once when a run takes
over 20 s) and the median reported.
``ratio`` = our median time / the reference's time. Peak RSS is the process's, which includes about
150 MB of Python, numpy and numba before any work; ``+MB`` is the growth over that baseline.

``--tie-break-cost`` instead times, in one process per workload, the solve with and without the
tie-break pass (fewest stages, then least total load, among the optima), alternating the two
``--repeat`` times, and reports both medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))


def _child(path: str, repeat: int, prune: bool) -> dict:
    import resource
    import time

    sys.path.insert(0, ROOT)
    from graphs.contract import contract
    from graphs.evaluate import evaluate
    from graphs.ideals import count_ideal_pairs, enumerate_ideals
    from graphs.reference import read_workload
    from solvers.base import SolveOptions
    from solvers.dp import solve
    from tests.instances import chain

    warm = chain(5)
    solve(warm.graph, warm.cluster)  # load or compile the numba kernels
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    w = read_workload(path)
    times, sol = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        sol = solve(w.graph, w.cluster, SolveOptions(raw={"prune": prune}))
        times.append(time.perf_counter() - t)
        if times[0] > 20:  # one run of a long workload is measurement enough
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    items = contract(w.graph, w.cluster)
    pairs = count_ideal_pairs(enumerate_ideals(items.num_classes, items.src, items.dst))
    return {"value": sol.objective, "eval": ev.max_load, "status": sol.status.value, "times": times,
            "median": statistics.median(times), "peak_mb": peak, "base_mb": base,
            "ideals": sol.stats["ideals"], "pairs": pairs, "pairs_used": sol.stats["pairs_used"],
            "k": w.cluster.kinds[0].count}


def _tie_child(path: str, repeat: int) -> dict:
    import time

    sys.path.insert(0, ROOT)
    from graphs.evaluate import evaluate
    from graphs.reference import read_workload
    from solvers.base import SolveOptions
    from solvers.dp import solve
    from tests.instances import chain

    warm = chain(5)
    solve(warm.graph, warm.cluster)  # load or compile the numba kernels
    w = read_workload(path)
    times: dict[bool, list[float]] = {False: [], True: []}
    sols = {}
    for _ in range(repeat):
        for tie in (False, True):
            t = time.perf_counter()
            sols[tie] = solve(w.graph, w.cluster, SolveOptions(raw={"tie_break": tie}))
            times[tie].append(time.perf_counter() - t)
    used = {tie: sum(1 for d in evaluate(w.graph, w.cluster, s.assignment).devices if d.nodes.size)
            for tie, s in sols.items()}
    return {"off": statistics.median(times[False]), "on": statistics.median(times[True]),
            "value_off": sols[False].objective, "value_on": sols[True].objective,
            "stages_off": used[False], "stages_on": used[True], "pairs_on": sols[True].stats["pairs_used"]}


def _tie_break_cost(keys: list[str], repeat: int) -> int:
    header = ("| workload | time s, no tie-break | time s, tie-break | ratio | same max-load | stages "
              "(without → with) |")
    print(header)
    print("|" + "---|" * 6)
    for key in keys:
        cmd = [sys.executable, os.path.abspath(__file__), "--tie-child", os.path.join(WORKLOADS, key),
               "--repeat", str(repeat)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            print(f"| {key} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        m = json.loads(out.stdout)
        same = "yes" if m["value_on"] == m["value_off"] else "NO"
        print(f"| {key.split('/', 1)[1][:-5]} | {m['off']:.3f} | {m['on']:.3f} | {m['on'] / m['off']:.2f} | "
              f"{same} | {m['stages_off']} → {m['stages_on']} |", flush=True)
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"median of {repeat}, alternating")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="substring filter on workload names")
    ap.add_argument("--markdown", default=None, help="also write the table to this file")
    ap.add_argument("--no-prune", action="store_true", help="walk every ideal pair (measures the walk)")
    ap.add_argument("--tie-break-cost", action="store_true",
                    help="time the solve with and without the tie-break pass (see above)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tie-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.repeat, not args.no_prune)))
        return 0
    if args.tie_child:
        print(json.dumps(_tie_child(args.tie_child, args.repeat)))
        return 0
    ref_path = os.path.join(WORKLOADS, "reference_results.json")
    if not os.path.exists(ref_path):
        print(f"reference workloads not found at {WORKLOADS}; set PLACEMENT_WORKLOADS", file=sys.stderr)
        return 2
    ref = json.load(open(ref_path))["throughput"]
    if args.tie_break_cost:
        return _tie_break_cost([k for k in sorted(ref) if args.only in k], args.repeat)
    rows = []
    header = ("| workload | k | ideals | ideal pairs | pairs visited | DP maxLoad | = ref | time s (median) "
              "| ref time s | ratio | peak RSS MB (+MB) | ref RSS MB |")
    print(header)
    print("|" + "---|" * 12)
    for key in sorted(ref):
        if args.only not in key:
            continue
        r = ref[key]
        cmd = [sys.executable, os.path.abspath(__file__), "--child", os.path.join(WORKLOADS, key),
               "--repeat", str(args.repeat)] + (["--no-prune"] if args.no_prune else [])
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            print(f"| {key} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        m = json.loads(out.stdout)
        same = "—" if r["dp_max_load"] is None else (
            "yes" if abs(m["value"] - r["dp_max_load"]) <= 1e-9 * r["dp_max_load"] else "NO")
        ratio = f"{m['median'] / r['dp_time_s']:.3f}" if r["dp_time_s"] else "—"
        row = (f"| {key.split('/', 1)[1][:-5]} | {m['k']} | {m['ideals']} | {m['pairs']} | {m['pairs_used']} "
               f"| {m['value']:.10g} | {same} | {m['median']:.3f} | "
               f"{r['dp_time_s'] if r['dp_time_s'] is not None else 'not finished'} | {ratio} | "
               f"{m['peak_mb']:.0f} (+{m['peak_mb'] - m['base_mb']:.0f}) | "
               f"{r['dp_peak_rss_mb'] if r['dp_peak_rss_mb'] is not None else '—'} |")
        print(row, flush=True)
        rows.append(row)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Machine: {machine}; repeat={args.repeat}; prune={not args.no_prune}\n\n")
            f.write(header + "\n|" + "---|" * 12 + "\n" + "\n".join(rows) + "\n")
    print(f"\nmachine: {machine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
