"""Predicted vs measured pipeline throughput on this CPU (see benchmarks/README_pipeline.md).

For a model (default: the model zoo's ResNet-50 shipped with onnx) and ``--stages`` host CPUs, with
``profile`` costs (each operator timed on this machine by onnxruntime, one thread): place it with the
DP and with the naive split (equal operator counts in topological order), then run each placement as
a real pipeline of worker processes (``placement.pipeline_run``) and print predicted and measured time
per sample.

    python -m benchmarks.bench_pipeline [--model PATH] [--stages 2] [--samples 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _zoo(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def naive_assignment(n: int, stages: int):
    import numpy as np

    return np.minimum(np.arange(n) * stages // n, stages - 1)


def measure(result: dict, model, samples: int, rounds: int) -> dict:
    from placement.onnx_export import generated_weights, materialize, random_feeds, session, split_model
    from placement.pipeline_run import predicted_time_per_sample, run_pipeline

    split = split_model(model, result)
    weights = generated_weights(model)
    whole = materialize(model, weights)
    parts = [materialize(s.model, weights) for s in split.submodels]
    sess = session(whole, optimize=False)
    feeds = [random_feeds(whole, sess, seed=i) for i in range(2)]
    names = [o.name for o in sess.get_outputs()]
    reference = [dict(zip(names, sess.run(names, f))) for f in feeds]
    del sess
    runs = [run_pipeline(parts, split.manifest(), feeds, samples=samples, reference=reference)
            for _ in range(rounds)]
    pred = predicted_time_per_sample(result, samples)
    ms = [r.ms_per_sample for r in runs]
    best = min(runs, key=lambda r: r.ms_per_sample)
    # the same streaming simulation fed with the stage times measured during the run: how well the
    # pipeline model explains the wall time once the stages' own speed is known (CPU contention aside)
    stage_ms = [statistics.median(r.stage_ms[k] for r in runs) for k in range(len(parts))]
    fed = dict(result)
    fed["devices"] = [dict(d, compute=stage_ms[k], comm_in=0.0, comm_out=0.0)
                      for k, d in enumerate(sorted((d for d in result["devices"] if d.get("nodes")),
                                                   key=lambda d: d.get("stage") or 0))]
    explained = predicted_time_per_sample(fed, samples).time_per_sample
    return {
        "predicted_ms": pred.time_per_sample, "predicted_steady_ms": pred.steady_time_per_sample,
        "predicted_stage_ms": list(pred.stage_loads), "measured_ms_median": statistics.median(ms),
        "measured_ms_all": ms, "measured_stage_ms": list(best.stage_ms),
        "max_abs_diff": max(max(r.max_abs_diff.values()) for r in runs),
        "simulated_from_measured_stages_ms": explained, "measured_stage_ms_median": stage_ms,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="ONNX model (default: light ResNet-50 from onnx)")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3, help="pipelined runs per placement (median reported)")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write the numbers as JSON")
    args = ap.parse_args(argv)

    import onnx

    from graphs.onnx_workload import onnx_workload
    from placement.api import Placement, evaluate, place
    from placement.results import result_dict
    from solvers.base import Solution, Status

    path = args.model or _zoo("resnet50")
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPU(s)")
    t0 = time.perf_counter()
    w = onnx_workload(path, devices=f"cpu:{args.stages}", costs="profile")
    t1 = time.perf_counter()
    g, cl = w.graph, w.cluster
    print(f"{os.path.basename(path)}: {g.num_nodes} operators, profile costs in {t1 - t0:.1f} s, "
          f"sum of operator times {g.compute[0].sum():.2f} ms")
    dp = place(g, cl)
    a = naive_assignment(g.num_nodes, args.stages)
    ev = evaluate(g, cl, a)
    naive = Placement(g, cl, Solution(a, ev.max_load, Status.FEASIBLE, "naive equal-count split"), ev)
    model = onnx.load(path)
    out = {"model": os.path.basename(path), "stages": args.stages, "samples": args.samples,
           "rounds": args.rounds, "operators": g.num_nodes, "sum_ms": float(g.compute[0].sum())}
    for label, p in (("dp", dp), ("naive", naive)):
        res = result_dict(p)
        m = measure(res, model, args.samples, args.rounds)
        m["max_load"] = p.max_load
        m["ops_per_stage"] = [len(d["nodes"]) for d in res["devices"]]
        out[label] = m
        err = m["measured_ms_median"] / m["predicted_ms"] - 1
        err2 = m["measured_ms_median"] / m["simulated_from_measured_stages_ms"] - 1

        def fmt(xs):
            return ", ".join(f"{x:.2f}" for x in xs)

        print(f"{label:6s} ops/stage {m['ops_per_stage']}\n"
              f"  predicted {m['predicted_ms']:.2f} ms/sample (stages {fmt(m['predicted_stage_ms'])})\n"
              f"  measured  {m['measured_ms_median']:.2f} ms/sample (runs {fmt(m['measured_ms_all'])}; "
              f"stages busy {fmt(m['measured_stage_ms_median'])})  error {err:+.1%}\n"
              f"  simulated with the measured stage times {m['simulated_from_measured_stages_ms']:.2f} "
              f"ms/sample  error {err2:+.1%}; outputs max abs diff {m['max_abs_diff']:.2g}")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    speed = out["naive"]["measured_ms_median"] / out["dp"]["measured_ms_median"]
    print(f"DP placement measured {speed:.3f}x the naive split's throughput")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
