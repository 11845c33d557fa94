"""LLM-shaped graphs through ``auto``: time to the first plan, to a 1% proven gap, to exact.

    python benchmarks/bench_llm.py [--only llama-16] [--time-limit S] [--variants no-bounds,bounds]
                                   [--markdown out.md] [--jsonl out.jsonl]

Cases: the project's Llama-style decoder (:func:`graphs.transformer.llama`: TinyLlama widths, grouped-
query attention, rotary embeddings, SwiGLU, RMSNorm) and GPT-style decoder (:func:`graphs.transformer.gpt`,
GPT-2 small widths) at 16 and 32 layers, each placed for inference and for training (Adam) with roofline
costs on ``a100:4,t4:4,cpu:8`` and on ``h100:8``. Every case runs once per variant, each run in a fresh
subprocess (its peak RSS is its own), under the same time limit:

* ``no-bounds``: ``auto`` with the lower bounds off (``raw={"bounds": False}``), as it was before them;
* ``bounds``: ``auto`` as it is (cheap lower bounds end the search when the incumbent meets them, and
  prune the DP otherwise).

Columns: ``first plan`` — seconds until auto reported its first placement; ``1% gap`` — until the
reported proven gap was at most 1%; ``exact`` — until it was proven optimal (``—``: not within the
limit); ``ideals`` of the item graph's lattice; ``pairs x states`` — ideal pairs the DP used times the
device-count states of the cluster (``—`` when the DP did not run); peak RSS. Times are wall-clock
seconds after loading (building the ONNX graph, costing and the training pass are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLUSTERS = ("a100:4,t4:4,cpu:8", "h100:8")
VARIANTS = {"no-bounds": {"bounds": False}, "bounds": {}}


def cases() -> list[tuple[str, dict]]:
    out = []
    for model in ("llama", "gpt"):
        for layers in (16, 32):
            for training in (False, True):
                for devices in CLUSTERS:
                    mode = "training" if training else "inference"
                    out.append((f"{model}-{layers} {mode} {devices}",
                                {"model": model, "layers": layers, "training": training, "devices": devices}))
    return out


def _child(spec: dict, variant: str, time_limit: float) -> dict:
    import resource
    import time

    sys.path.insert(0, ROOT)
    from graphs.devices import parse_devices
    from graphs.ideals import enumerate_ideals
    from graphs.onnx_loader import parse_model
    from graphs.onnx_workload import graph_workload
    from graphs.transformer import gpt, llama
    from solvers import dp
    from solvers.auto import solve
    from solvers.base import SolveOptions
    from tests.instances import chain

    warm = chain(4)
    solve(warm.graph, warm.cluster)  # load the compiled kernels
    build = {"llama": llama, "gpt": gpt}[spec["model"]]
    g = parse_model(build(spec["layers"]), batch_size=1)
    w = graph_workload(g, parse_devices(spec["devices"]), training=spec["training"])
    events: list[dict] = []
    t0 = time.perf_counter()

    def report(event: dict) -> None:
        events.append({**event, "t": time.perf_counter() - t0})

    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=time_limit,
                                                 raw={**VARIANTS[variant], "report": report}))
    solve_s = time.perf_counter() - t0
    first = next((e["t"] for e in events if e.get("value") is not None), None)
    within = next((e["t"] for e in events if e.get("value") is not None and e.get("bound") is not None
                   and e["value"] - e["bound"] <= 0.01 * e["value"]), None)
    exact = solve_s if sol.status.value == "optimal" else None
    if sol.gap is not None and sol.gap <= 0.01:
        within = solve_s if within is None else min(within, solve_s)
    if first is None and sol.assignment is not None:
        first = solve_s  # the run reported nothing before its end
    prob = dp.prepare(w.graph, w.cluster)
    ideals = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst).num_ideals
    return {"nodes": w.graph.num_nodes, "items": prob.items.num_classes, "ideals": ideals,
            "states": int(prob.digits.shape[0]), "pairs": sol.stats.get("pairs"),
            "status": sol.status.value, "path": sol.stats.get("path"), "value": sol.objective,
            "bound": sol.bound, "gap": sol.gap, "first_s": first, "gap1_s": within, "exact_s": exact,
            "solve_s": solve_s, "message": sol.message,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _fmt(x, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--time-limit", type=float, default=240.0, help="per run (default 240 s)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--jsonl", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec, variant = json.loads(args.child)
        print(json.dumps(_child(spec, variant, args.time_limit)))
        return 0
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)} (known: {', '.join(VARIANTS)})",
              file=sys.stderr)
        return 2
    header = ("| case | variant | items | ideals | status | max-load | bound | gap | first plan s | 1% gap s "
              "| exact s | pairs x states | peak RSS MB |")
    rows = [header, "|" + "---|" * 13]
    print("\n".join(rows), flush=True)
    for name, spec in cases():
        if args.only not in name:
            continue
        for variant in variants:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps([spec, variant]),
                   "--time-limit", str(args.time_limit)]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if out.returncode != 0:
                row = f"| {name} | {variant} | failed: {(out.stderr.strip().splitlines() or ['?'])[-1]} |"
            else:
                m = json.loads(out.stdout.strip().splitlines()[-1])
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps({"case": name, "variant": variant, **m}) + "\n")
                pairs = "—" if m["pairs"] is None else f"{m['pairs']:.3g} x {m['states']}"
                gap = "—" if m["gap"] is None else f"{100 * m['gap']:.2f}%"
                row = (f"| {name} | {variant} | {m['items']} | {m['ideals']:,} | {m['status']} "
                       f"| {m['value']:.6g} | {_fmt(m['bound'], '.6g')} | {gap} "
                       f"| {_fmt(m['first_s'], '.2f')} | {_fmt(m['gap1_s'])} | {_fmt(m['exact_s'])} "
                       f"| {pairs} | {m['peak_mb']:.0f} |")
            print(row, flush=True)
            rows.append(row)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nmachine: {machine}; time limit {args.time_limit:g} s per run")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Machine: {machine}; time limit {args.time_limit:g} s per run\n\n")
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
