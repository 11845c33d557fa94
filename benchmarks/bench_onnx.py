"""ONNX front end end to end: load + annotate (costs) + place (DP), with the time of every stage.

    python benchmarks/bench_onnx.py [--repeat 5] [--batch-size 8] [--devices a100:4] [--zoo]
                                    [--markdown out.md]

Models: ResNet-50 (the ONNX model zoo file shipped in the ``onnx`` package) and a 12-layer BERT-base
encoder built by :mod:`graphs.transformer` (weights generated, sequence 128). Each model runs in a fresh
subprocess: the first run there is *cold* (module imports, numba loading its cached kernels, first
calls), then ``--repeat`` *warm* runs give the median of every stage:

* ``load``: read the file, shape inference, build the operator DAG (:func:`graphs.onnx_loader.load_onnx`);
* ``costs``: roofline costs on every device kind (:func:`graphs.costs.compute_costs`);
* ``build``: the :class:`OpGraph` (:func:`graphs.onnx_workload.build_opgraph`);
* ``place``: the DP (contraction, ideals, bound, DP, evaluation: :func:`placement.place`).

``--zoo`` adds a table of every zoo model: operators, parameters, ideals and DP time (warm) on the
cluster. ``--cli`` also times the command line ``placement place MODEL --devices ...`` as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _zoo(name: str) -> str:
    import onnx

    zoo = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return os.path.join(zoo, f"light_{name}.onnx")


def _model_path(model: str, tmp: str) -> str:
    if model == "bert12":
        import onnx

        from graphs.transformer import bert

        path = os.path.join(tmp, "bert12.onnx")
        onnx.save(bert(12), path)
        return path
    return _zoo(model)


def _child(model: str, devices: str, batch: int, repeat: int) -> dict:
    t_start = time.perf_counter()
    sys.path.insert(0, ROOT)
    from graphs.contract import contract
    from graphs.costs import compute_costs
    from graphs.devices import parse_devices
    from graphs.ideals import enumerate_ideals
    from graphs.onnx_loader import load_onnx
    from graphs.onnx_workload import build_opgraph
    from placement import place

    t_import = time.perf_counter() - t_start
    with tempfile.TemporaryDirectory() as tmp:
        path = _model_path(model, tmp)
        runs = []
        for _ in range(1 + repeat):
            t0 = time.perf_counter()
            ds = parse_devices(devices)
            g = load_onnx(path, batch_size=batch)
            t1 = time.perf_counter()
            c = compute_costs(g, ds, "roofline")
            t2 = time.perf_counter()
            graph = build_opgraph(g, c)
            t3 = time.perf_counter()
            p = place(graph, ds.cluster(), "dp")
            t4 = time.perf_counter()
            runs.append({"load": t1 - t0, "costs": t2 - t1, "build": t3 - t2, "place": t4 - t3,
                         "total": t4 - t0})
    cold, warm = runs[0], runs[1:]
    items = contract(graph, ds.cluster())
    ideals = enumerate_ideals(items.num_classes, items.src, items.dst).num_ideals
    return {
        "model": model, "devices": devices, "batch": g.batch_size, "ops": g.num_ops,
        "parameters": g.parameters, "ideals": ideals, "status": p.status.value,
        "max_load_ms": p.max_load, "import": t_import, "cold": cold,
        "warm": {k: statistics.median(r[k] for r in warm) for k in cold},
        "stages": [(d.name, d.nodes.size, graph.names[d.nodes[0]], graph.names[d.nodes[-1]])
                   for d in p.evaluation.devices if d.nodes.size],
    }


def _zoo_table(devices: str) -> list[dict]:
    sys.path.insert(0, ROOT)
    from graphs.onnx_workload import onnx_workload
    from placement import place

    out = []
    w = onnx_workload(_zoo("squeezenet"), devices)
    place(w.graph, w.cluster, "dp")  # warm the numba kernels
    for name in ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                 "squeezenet", "vgg19", "zfnet512"):
        t0 = time.perf_counter()
        w = onnx_workload(_zoo(name), devices)
        t1 = time.perf_counter()
        from graphs.contract import contract
        from graphs.errors import ProblemTooLargeError
        from graphs.ideals import enumerate_ideals

        items = contract(w.graph, w.cluster)
        try:
            ideals = enumerate_ideals(items.num_classes, items.src, items.dst, max_ideals=30_000).num_ideals
        except ProblemTooLargeError:
            ideals = None
        row = {"model": name, "ops": w.graph.num_nodes, "parameters": w.graph.meta["parameters"],
               "ideals": ideals, "load_s": t1 - t0, "dp_s": None, "max_load_ms": None}
        if ideals is not None:
            t2 = time.perf_counter()
            p = place(w.graph, w.cluster, "dp")
            row.update(dp_s=time.perf_counter() - t2, max_load_ms=p.max_load)
        out.append(row)
    return out


def _run_child(args_list: list[str]) -> dict:
    r = subprocess.run([sys.executable, __file__, "--child", *args_list], capture_output=True, text=True,
                       cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"child failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _cli_time(model: str, devices: str, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, ROOT)
        path = _model_path(model, tmp)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "placement", "place", path, "--devices", devices,
                            "--batch-size", str(batch), "--solver", "dp"], capture_output=True, text=True,
                           cwd=ROOT)
        dt = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"placement place failed: {r.stderr[-2000:]}")
        return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--devices", default="a100:4")
    ap.add_argument("--models", default="resnet50,bert12")
    ap.add_argument("--zoo", action="store_true", help="also tabulate every zoo model")
    ap.add_argument("--cli", action="store_true", help="also time the command line")
    ap.add_argument("--markdown", default=None, metavar="FILE")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        if args.child[0] == "zoo":
            print(json.dumps(_zoo_table(args.child[1])))
        else:
            model, devices, batch, repeat = args.child
            print(json.dumps(_child(model, devices, int(batch), int(repeat))))
        return 0

    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; devices {args.devices}; batch {args.batch_size}; "
             f"times in seconds (warm: median of {args.repeat})", "",
             "| model | ops | params | ideals | run | load | costs | build | place (DP) | total "
             "| max-load ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    results = []
    for model in args.models.split(","):
        r = _run_child([model, args.devices, str(args.batch_size), str(args.repeat)])
        results.append(r)
        for run in ("cold", "warm"):
            t = r[run]
            extra = f" (+{r['import']:.2f} import)" if run == "cold" else ""
            lines.append(f"| {model} | {r['ops']} | {r['parameters'] / 1e6:.1f} M | {r['ideals']} | {run} | "
                         f"{t['load']:.3f} | {t['costs']:.3f} | {t['build']:.3f} | {t['place']:.3f} | "
                         f"{t['total']:.3f}{extra} | {r['max_load_ms']:.4f} |")
    for r in results:
        lines += ["", f"{r['model']} stages on {r['devices']}:"]
        lines += [f"- {name}: {n} ops, {first} .. {last}" for name, n, first, last in r["stages"]]
    if args.cli:
        lines += ["", "| command line (`placement place MODEL --devices ...`), wall s | |", "|---|---|"]
        for model in args.models.split(","):
            lines.append(f"| {model} | {_cli_time(model, args.devices, args.batch_size):.2f} |")
    if args.zoo:
        rows = _run_child(["zoo", args.devices])
        lines += ["", f"Zoo models on {args.devices} (warm; ideals of the contracted graph, DP skipped above "
                      f"30,000 ideals):", "",
                  "| model | ops | params | ideals | load+costs s | DP s | max-load ms |",
                  "|---|---|---|---|---|---|---|"]
        for z in rows:
            dp = f"{z['dp_s']:.3f}" if z["dp_s"] is not None else "—"
            ml = f"{z['max_load_ms']:.4f}" if z["max_load_ms"] is not None else "—"
            lines.append(f"| {z['model']} | {z['ops']} | {z['parameters'] / 1e6:.2f} M | "
                         f"{z['ideals'] if z['ideals'] is not None else '>30,000'} | {z['load_s']:.3f} | "
                         f"{dp} | {ml} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
