"""``placement show``'s drawing against ``--no-draw`` on the same plan: the wall time of the whole command
with its pictures (Gantt chart and graph) over the time without them, at several micro-batch counts.

    python -m benchmarks.bench_show_draw [--sizes 240,1920] [--repeats 3] [--timeout 900] [--tree DIR]

The plan: Piper's ``bert32a100.json`` (``$PLACEMENT_WORKLOADS/piper``, default ``../shared/workloads``)
placed one device per stage under PipeDream (``placement place --schedule pipedream --max-replicas 1``:
10 stages, 1920 micro-batches a batch), shown with ``-m N`` for each size (5 batches simulated: about
``100 N`` tasks). The two commands alternate, ``--repeats`` times each; the table gives the medians, the
ratio of the medians and what drawing adds. A run past ``--timeout`` seconds is killed and its time
given as ``> timeout``. ``--tree``: the checkout the commands run from (``PYTHONPATH``; default this
one), to time an older version on the same plan (e.g. ``git archive`` of a commit, unpacked).

Before the charts drew one collection per row (placement/draw.py), ``show`` drew one matplotlib artist per
task, each rescaling the axes over all the others: at 1920 micro-batches it ran for more than 15 minutes
where ``--no-draw`` took 8 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))


def _run(tree: str, args: list[str], timeout: float, cwd: str) -> float:
    """Wall seconds of ``python -m placement ARGS`` from ``tree``; ``inf`` past ``timeout``."""
    env = dict(os.environ, PYTHONPATH=tree)
    t = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-m", "placement", *args], env=env, cwd=cwd, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return float("inf")
    if r.returncode != 0:
        raise SystemExit(f"placement {' '.join(args)} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return time.perf_counter() - t


def _fmt(x: float, timeout: float) -> str:
    return f"> {timeout:.0f}" if x == float("inf") else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="240,1920", help="micro-batches per batch, comma-separated "
                    "(default 240,1920)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command per size (default 3)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds before a run is killed (default 900)")
    ap.add_argument("--tree", default=ROOT, help="the checkout to run (PYTHONPATH; default this one)")
    ap.add_argument("--workload", default=os.path.join(WORKLOADS, "piper", "bert32a100.json"),
                    help="the Piper workload (default: the shared bert32a100.json)")
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--sizes must be integers separated by commas, got {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.repeats < 1:
        ap.error("--sizes and --repeats must be positive")
    if not os.path.exists(args.workload):
        ap.error(f"the workload {args.workload} was not found (set PLACEMENT_WORKLOADS or pass --workload)")
    with tempfile.TemporaryDirectory() as tmp:
        res = os.path.join(tmp, "pd.json")
        # placed with this checkout: the same plan for every tree timed
        _run(ROOT, ["place", os.path.abspath(args.workload), "--schedule", "pipedream", "--max-replicas", "1",
                    "--out", res], args.timeout, tmp)
        print(f"{os.path.basename(args.workload)}, one device per stage, pipedream; tree {args.tree}; "
              f"{args.repeats} repeats; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
              f"at start")
        print("| micro-batches | --no-draw s (median) | drawn s (median) | drawn / --no-draw "
              "| drawing adds s |")
        print("|---|---|---|---|---|")
        pics = os.path.join(tmp, "pics")
        for n in sizes:
            quiet, drawn = [], []
            for _ in range(args.repeats):
                show = ["show", res, "-m", str(n)]
                quiet.append(_run(args.tree, show + ["--no-draw"], args.timeout, tmp))
                drawn.append(_run(args.tree, show + ["--out-dir", pics], args.timeout, tmp))
                if drawn[-1] == float("inf"):
                    break  # one run past the timeout says enough
            q, d = statistics.median(quiet), statistics.median(drawn)
            ratio = "-" if d == float("inf") else f"{d / q:.2f}"
            print(f"| {n} | {_fmt(q, args.timeout)} | {_fmt(d, args.timeout)} | {ratio} | "
                  f"{'-' if d == float('inf') else f'{d - q:.1f}'} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
