"""Better plans: the replicated model of ONNX training graphs (:mod:`graphs.onnx_variants`) against the
pipeline-only optimum and pure data parallelism, on two device kinds (results in
benchmarks/README_parallel_plans.md).

    python -m benchmarks.bench_parallel_plans [--models gpt2-xl,bert-large,resnet50] [--per-kind 4,8,16,32]
                                              [--time-limit S] [--json OUT.jsonl]

For every model and cluster ``a100:n,v100:n`` (8 to 64 accelerators), with ``N`` micro-batches (the
smallest power of two >= the devices) and the 1F1B schedule, the time per sample of

* the **pipeline-only** optimum: ``d = t = 1`` (recomputation allowed), the exact ``dp`` (its stage form);
* the **replicated** optimum: data-parallel and tensor-parallel degrees and recomputation, exact;
* **pure data parallelism**: one stage holding the whole model on every device of one kind (``d`` the
  largest divisor of ``N`` that fits the kind's count, ``t = 1``), the fastest variants that fit memory
  (an exact knapsack), the better of the two kinds;

then, per schedule (1F1B, GPipe, PipeDream, 2BW), the replicated optimum's time per sample and its
largest peak memory per device (from :func:`graphs.parallel.evaluate_plan`). Each solve is bounded by
``--time-limit`` (default 300 s); a case that hits it reports the status.

Models: GPT-2 XL-shaped decoder (48 layers, width 1600, 25 heads, sequence 1024, batch 4) and
BERT-large-shaped encoder (24 layers, width 1024, 16 heads, sequence 512, batch 8), exporter-style
graphs from :mod:`graphs.transformer` (one node per layer); ResNet-50 from the ONNX model zoo (batch 1
as the file fixes it; no layer names, so one node per operator). Costs: roofline, Adam.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

from graphs.devices import parse_devices
from graphs.parallel import SCHEDULES

MODELS = ("gpt2-xl", "bert-large", "resnet50")
PER_KIND = (4, 8, 16, 32)


def _model_path(name: str, tmp: str) -> tuple[str, int | None]:
    import onnx

    from graphs.transformer import bert, gpt

    if name == "gpt2-xl":
        path = os.path.join(tmp, "gpt2-xl.onnx")
        onnx.save(gpt(48, hidden=1600, heads=25, seq_len=1024), path)
        return path, 4
    if name == "bert-large":
        path = os.path.join(tmp, "bert-large.onnx")
        onnx.save(bert(24, hidden=1024, heads=16, seq_len=512), path)
        return path, 8
    if name == "resnet50":
        from tests.onnx_models import zoo

        path = zoo("resnet50")
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        return path, None
    raise ValueError(f"unknown model {name!r}")


def data_parallel(problem):
    """The best one-stage plan on all devices of one kind (t = 1, the variants that fit by an exact
    knapsack; :func:`solvers.pipedream_stages.data_parallel`): ``(evaluation, kind)`` or ``None``."""
    from solvers.pipedream_stages import data_parallel as one_stage

    r = one_stage(problem)
    if r.plan is None:
        return None
    return r.evaluation, problem.kinds[r.plan[0].kind].name


def _describe(problem, r) -> dict:
    if r.evaluation is None:
        return {"status": str(r.status), "tps": None, "time": r.time}
    g = problem.graph
    st = r.evaluation.stages
    recomp = sum(g.variants[v].name != "vanilla" for s in st for v in s.stage.variants)
    return {"status": str(r.status), "tps": r.objective, "time": r.time, "stages": len(st),
            "d_max": max(s.stage.d for s in st), "t_max": max(s.stage.t for s in st),
            "devices": sum(s.devices for s in st), "recomputed": recomp,
            "peak_gb": max(s.memory for s in st) / 1e9,
            "plan": [f"{problem.kinds[s.stage.kind].name} d{s.stage.d} t{s.stage.t} x{len(s.stage.nodes)}"
                     for s in st]}


def run_case(model: str, path: str, batch: int | None, n: int, time_limit: float) -> dict:
    from graphs.onnx_variants import onnx_parallel_problem
    from graphs.onnx_workload import prepare_onnx
    from solvers.dp_stages import solve_problem

    ds = parse_devices(f"a100:{n},v100:{n}")
    og, w = prepare_onnx(path, ds, training=True, batch_size=batch)
    keys = {k for k in w.graph.meta.get("layer") or () if k is not None}
    gran = "layer" if len(keys) > 1 else "op"
    full, _ = onnx_parallel_problem(og, w.graph, ds, granularity=gran)
    pipe, _ = onnx_parallel_problem(og, w.graph, ds, granularity=gran, max_replicas=1, tensor_parallel=False)
    out = {"model": model, "devices": str(ds), "granularity": gran, "nodes": full.graph.num_nodes,
           "N": full.microbatches, "batch": og.batch_size}
    out["pipeline"] = _describe(pipe, solve_problem(pipe, time_limit=time_limit))
    dp = data_parallel(full)
    out["data_parallel"] = None if dp is None else {
        "tps": dp[0].objective, "kind": dp[1], "d": dp[0].stages[0].stage.d,
        "peak_gb": dp[0].stages[0].memory / 1e9}
    out["schedules"] = {}
    for sched in SCHEDULES:
        p = full.with_options(schedule=sched)
        out["schedules"][sched] = _describe(p, solve_problem(p, time_limit=time_limit))
    out["replicated"] = out["schedules"]["1f1b"]
    return out


def _f(x, fmt="{:.4g}") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def tables(rows: list[dict]) -> str:
    lines = ["| model | devices | N | pipeline-only s/sample (stages) | replicated s/sample (stages, d max, "
             "t max, recomp) | pure DP s/sample (kind, d) | replicated / pipeline | replicated / DP | "
             "solve s (pipe, repl) |", "|---" * 9 + "|"]
    for r in rows:
        p, q, dp = r["pipeline"], r["replicated"], r["data_parallel"]
        lines.append(
            f"| {r['model']} | {r['devices']} | {r['N']} | {_f(p['tps'])} ({p.get('stages', '—')}) | "
            f"{_f(q['tps'])} ({q.get('stages', '—')}, {q.get('d_max', '—')}, {q.get('t_max', '—')}, "
            f"{q.get('recomputed', '—')}) | "
            + (f"{_f(dp['tps'])} ({dp['kind']}, {dp['d']})" if dp else "does not fit") + " | "
            f"{_f(q['tps'] / p['tps'] if q['tps'] and p['tps'] else None, '{:.3f}')} | "
            f"{_f(q['tps'] / dp['tps'] if q['tps'] and dp else None, '{:.3f}')} | "
            f"{_f(p['time'], '{:.2f}')}, {_f(q['time'], '{:.2f}')} |")
    lines += ["", "| model | devices | " + " | ".join(f"{s} s/sample (peak GB)" for s in SCHEDULES) + " |",
              "|---" * (2 + len(SCHEDULES)) + "|"]
    for r in rows:
        cells = [f"{_f(r['schedules'][s]['tps'])} ({_f(r['schedules'][s].get('peak_gb'), '{:.1f}')})"
                 + ("" if r["schedules"][s]["status"] == "optimal" else f" {r['schedules'][s]['status']}")
                 for s in SCHEDULES]
        lines.append(f"| {r['model']} | {r['devices']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--per-kind", default=",".join(map(str, PER_KIND)), help="devices of each kind")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per solve")
    ap.add_argument("--json", default=None, metavar="OUT.jsonl", help="also write one JSON line per case")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            try:
                path, batch = _model_path(model, tmp)
            except FileNotFoundError as e:
                print(f"skipped {model}: {e} not found", file=sys.stderr)
                continue
            for n in map(int, args.per_kind.split(",")):
                t0 = time.perf_counter()
                row = run_case(model, path, batch, n, args.time_limit)
                row["wall"] = time.perf_counter() - t0
                rows.append(row)
                print(f"{model} a100:{n},v100:{n}: pipeline {_f(row['pipeline']['tps'])}, replicated "
                      f"{_f(row['replicated']['tps'])} {row['replicated'].get('plan')}, DP "
                      f"{_f(row['data_parallel']['tps'] if row['data_parallel'] else None)} "
                      f"({row['wall']:.1f} s)", file=sys.stderr, flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")
    print(tables(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
