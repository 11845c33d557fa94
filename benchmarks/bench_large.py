"""Large and wide graphs through ``--solver auto``: ideals, chosen path, time, memory, value, gap.

    python benchmarks/bench_large.py [--only densenet] [--time-limit S] [--markdown out.md]

Cases: the reference InceptionV3 layer graphs (inference, training), the ONNX zoo's DenseNet-121 and
Inception v1/v2 at operator level and at layer level (operators merged by name prefix), and generated
BERT-style encoders of 12, 24 and 48 layers at operator level, all on ``a100:4,cpu:1`` with roofline
costs. Each case runs in a fresh subprocess (peak RSS is its own) with the default limits (or
``--time-limit``). ``gap`` is the solver's proven gap: 0 on the exact path; on the other paths the
bound comes from the contiguous IP when it ran, else from a simple load bound.
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
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))
DEVICES = "a100:4,cpu:1"


def cases() -> list[tuple[str, str, dict]]:
    import onnx

    zoo = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    out = []
    for name in ("inceptionv3_inference", "inceptionv3_training"):
        out.append((f"reference {name} (layer)", "reference", {"path": os.path.join(
            WORKLOADS, "throughput-inputs", "LayerGraphs", name + ".json")}))
    for model in ("densenet121", "inception_v1", "inception_v2"):
        for training in (False, True):
            for level in ("operator", "layer"):
                mode = "training" if training else "inference"
                out.append((f"{model} {mode} ({level})", "zoo", {
                    "path": os.path.join(zoo, f"light_{model}.onnx"), "training": training, "level": level}))
    for layers in (12, 24, 48):
        for training in (False, True):
            out.append((f"bert-{layers} {'training' if training else 'inference'} (operator)", "bert",
                        {"layers": layers, "training": training}))
    return out


def _child(kind: str, spec: dict, time_limit: float | None) -> dict:
    import resource
    import tempfile
    import time

    sys.path.insert(0, ROOT)
    from graphs.coarsen import merge_by_key, name_prefix_keys
    from solvers.auto import solve
    from solvers.base import SolveOptions
    from tests.instances import chain

    warm = chain(4)
    solve(warm.graph, warm.cluster)  # load the compiled kernels
    t0 = time.perf_counter()
    if kind == "reference":
        from graphs.reference import read_workload

        w = read_workload(spec["path"])
    else:
        from graphs.onnx_workload import onnx_workload

        path = spec.get("path")
        if kind == "bert":
            import onnx

            from graphs.transformer import bert

            path = os.path.join(tempfile.mkdtemp(), "bert.onnx")
            onnx.save(bert(spec["layers"]), path)
        w = onnx_workload(path, DEVICES, training=spec["training"])
        if spec.get("level") == "layer":
            from graphs.reference import Workload

            keys = list(w.graph.meta.get("layer") or name_prefix_keys(w.graph))
            keys += [None] * (w.graph.num_nodes - len(keys))
            w = Workload(merge_by_key(w.graph, keys), w.cluster)
    load_s = time.perf_counter() - t0
    t = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=time_limit))
    solve_s = time.perf_counter() - t
    from graphs.contract import contract

    return {"nodes": w.graph.num_nodes, "items": contract(w.graph, w.cluster).num_classes,
            "status": sol.status.value, "label": sol.message,
            "path": sol.stats.get("path") + (" (of the layer graph)" if spec.get("level") == "layer" else ""),
            "value": sol.objective, "bound": sol.bound, "gap": sol.gap, "load_s": load_s, "solve_s": solve_s,
            "skipped": sol.stats.get("skipped", []),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--time-limit", type=float, default=None, help="default: auto's own default")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, spec = json.loads(args.child)
        print(json.dumps(_child(kind, spec, args.time_limit)))
        return 0
    header = ("| case | nodes | items | path | status | max-load | bound | gap | solve s | load s "
              "| peak RSS MB |")
    rows = [header, "|" + "---|" * 11]
    print("\n".join(rows), flush=True)
    for name, kind, spec in cases():
        if args.only not in name:
            continue
        if kind == "reference" and not os.path.exists(spec["path"]):
            print(f"| {name} | skipped: {spec['path']} not found |")
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps([kind, spec])]
        if args.time_limit is not None:
            cmd += ["--time-limit", str(args.time_limit)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            row = f"| {name} | failed: {(out.stderr.strip().splitlines() or ['?'])[-1]} |"
        else:
            m = json.loads(out.stdout.strip().splitlines()[-1])
            gap = "—" if m["gap"] is None else f"{100 * m['gap']:.2f}%"
            bound = "—" if m["bound"] is None else f"{m['bound']:.6g}"
            row = (f"| {name} | {m['nodes']} | {m['items']} | {m['path']} | {m['status']} | {m['value']:.6g} "
                   f"| {bound} | {gap} | {m['solve_s']:.2f} | {m['load_s']:.2f} | {m['peak_mb']:.0f} |")
        print(row, flush=True)
        rows.append(row)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nmachine: {machine}; devices {DEVICES}; time limit {args.time_limit or 'auto default'}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Machine: {machine}; devices {DEVICES}; time limit {args.time_limit or 'default'}\n\n")
            f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
