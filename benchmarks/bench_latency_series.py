"""The latency IP's gap on the example encoder, before and after the series bound.

    python benchmarks/bench_latency_series.py --old /tmp/old-latip [--layers 2,6,12] [--repeats 3]
        [--time-limit 10] [--workloads OperatorGraphs/bert_l-6_inference.json,...]

Each run is a fresh process (``python -m placement place MODEL --objective latency --max-replicas 1
--devices a100:2,t4:2 --time-limit T --threads 1 --json``) with ``PYTHONPATH`` set to one source tree:
``--old`` (a checkout of the code before, e.g. ``git worktree add --detach /tmp/old-latip main``) and
this one, alternating, so both see the same machine load. The table gives, per model and tree, the
median over the repeats of the solve time (the result file's ``solve_time_s``: from the solver's start
to its answer, the whole time limit when the gap stays open), the latency, the bound and the gap. The
ONNX models are the tool's own example (``placement example --layers L``); ``--workloads`` adds
reference-format latency files (their own devices).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))


def _place(tree: str, model: str, time_limit: float, out: str, onnx: bool) -> dict:
    """One solve in a fresh process on ``tree``'s code; the result file's fields."""
    cmd = [sys.executable, "-m", "placement", "place", model, "--objective", "latency", "--max-replicas", "1",
           "--time-limit", str(time_limit), "--threads", "1", "--out", out]
    if onnx:
        cmd += ["--devices", "a100:2,t4:2"]
    env = dict(os.environ, PYTHONPATH=tree)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.load(open(out))
    lat = r["latency"]["total"] if isinstance(r["latency"], dict) else r["latency"]
    return {"time": r["solve_time_s"], "latency": lat, "bound": r["bound"], "gap": r["gap"],
            "status": r["status"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="source tree of the code before")
    ap.add_argument("--layers", default="2,6,12")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workloads", default="")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-latency-series-")
    models = []
    for layers in [int(x) for x in args.layers.split(",") if x]:
        path = os.path.join(tmp, f"bert{layers}.onnx")
        subprocess.run([sys.executable, "-m", "placement", "example", path, "--layers", str(layers)],
                       env=dict(os.environ, PYTHONPATH=ROOT), check=True, stdout=subprocess.DEVNULL)
        models.append((f"example, {layers} layers", path, True))
    for key in [x for x in args.workloads.split(",") if x]:
        models.append((key, os.path.join(WORKLOADS, "latency-inputs", key), False))
    print("| model | code | status | latency | bound | gap | solve s (median) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, path, onnx in models:
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for i in range(args.repeats):
            for label, tree in (("before", args.old), ("after", ROOT)):
                out = os.path.join(tmp, f"r-{label}-{i}.json")
                runs[label].append(_place(tree, path, args.time_limit, out, onnx))
        for label, rs in runs.items():
            med = statistics.median(r["time"] for r in rs)
            gaps = sorted(r["gap"] for r in rs)
            statuses = "/".join(sorted({r["status"] for r in rs}))
            bound = min(r["bound"] for r in rs)
            print(f"| {name} | {label} | {statuses} | {rs[0]['latency']:.6g} | {bound:.6g} "
                  f"| {100 * gaps[len(gaps) // 2]:.2f}% | {med:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
