"""How tight the cheap lower bounds of :mod:`solvers.bounds` are: bound / optimum.

    python benchmarks/bench_bounds.py [--markdown out.md]

Reference workloads: against the reference's exact DP optimum (``reference_results.json``). LLM graphs
(:mod:`graphs.transformer`, 16 layers, roofline costs, inference and training): against the best
contiguous placement over a few topological orders (an upper bound on the optimum, so the ratio shown is
a lower bound on the true tightness). ``old`` is the DP module's previous quick bound (largest item's
cheapest time, total cheapest work over all devices); ``item`` and ``work`` are the new ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    from graphs.devices import parse_devices
    from graphs.onnx_loader import parse_model
    from graphs.onnx_workload import graph_workload
    from graphs.reference import read_workload
    from graphs.transformer import gpt, llama
    from solvers import dp
    from solvers.bounds import bounds_of_items

    rows = ["| workload | against | optimum or best | old | item | work | work / optimum | LP s |",
            "|---|---|---|---|---|---|---|---|"]
    print("\n".join(rows), flush=True)

    def row(name, against, best, prob):
        t = time.perf_counter()
        b = bounds_of_items(prob.item_compute, prob.item_memory, prob.counts, prob.caps)
        lp_s = time.perf_counter() - t
        r = (f"| {name} | {against} | {best:.6g} | {dp.lower_bound(prob):.6g} | {b.item:.6g} | {b.work:.6g} "
             f"| {b.value / best:.3f} | {lp_s:.2f} |")
        print(r, flush=True)
        rows.append(r)

    path = os.path.join(WORKLOADS, "reference_results.json")
    if os.path.exists(path):
        ref = json.load(open(path))["throughput"]
        for key, v in sorted(ref.items()):
            if v["dp_max_load"] is None:
                continue
            w = read_workload(os.path.join(WORKLOADS, key))
            row(key.split("/", 1)[1], "exact", v["dp_max_load"], dp.prepare(w.graph, w.cluster))
    for name, build in (("llama", llama), ("gpt", gpt)):
        g = parse_model(build(16), batch_size=1)
        for devices in ("a100:4,t4:4,cpu:8", "h100:8"):
            for training in (False, True):
                w = graph_workload(g, parse_devices(devices), training=training)
                prob = dp.prepare(w.graph, w.cluster)
                best = min(dp.run_dp(prob, dp.chain_ideals(prob.items.num_classes, o)).value
                           for o in dp.topological_orders(prob.items))
                row(f"{name}-16 {'training' if training else 'inference'} {devices}", "chain", best, prob)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
