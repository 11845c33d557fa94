"""The latency IP's gap on the example encoder, before and after the series bound.

    python benchmarks/bench_latency_series.py --old /tmp/old-latip [--layers 2,6,12] [--repeats 3]
        [--time-limit 10] [--workloads OperatorGraphs/bert_l-6_inference.json,...]

Each run is a fresh process that loads the model (ONNX on ``a100:2,t4:2``) and times
``solvers.latency_ip.solve`` (the latency objective, one subgraph per accelerator, what ``place
--objective latency --max-replicas 1`` runs) under ``--time-limit`` with one thread, its
``PYTHONPATH`` set to one source tree:
``--old`` (a checkout of the code before, e.g. ``git worktree add --detach /tmp/old-latip main``) and
this one, alternating, so both see the same machine load. The table gives, per model and tree, the
median over the repeats of the solve time (from the solver's start to its answer: the whole time limit
when the gap stays open), the latency, the smallest bound and the median gap. The
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


_RUN = """
import json, sys, time
from placement.load import load_workload
from solvers import latency_ip
from solvers.base import SolveOptions
path, limit, onnx = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
w = load_workload(path, devices="a100:2,t4:2") if onnx else load_workload(path)
t = time.perf_counter()
s = latency_ip.solve(w.graph, w.cluster, SolveOptions(objective="latency", time_limit=limit, threads=1))
print(json.dumps({"time": time.perf_counter() - t, "latency": s.objective, "bound": s.bound, "gap": s.gap,
                  "status": s.status.value}))
"""


def _place(tree: str, model: str, time_limit: float, onnx: bool) -> dict:
    """One solve in a fresh process on ``tree``'s code (the model loaded before the clock starts)."""
    env = dict(os.environ, PYTHONPATH=tree)
    # run outside both trees: ``python -c`` puts the working directory ahead of PYTHONPATH
    out = subprocess.run([sys.executable, "-c", _RUN, model, str(time_limit), "1" if onnx else "0"], env=env,
                         check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    return json.loads(out.strip().splitlines()[-1])


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
        for _ in range(args.repeats):
            for label, tree in (("before", args.old), ("after", ROOT)):
                runs[label].append(_place(tree, path, args.time_limit, onnx))
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
