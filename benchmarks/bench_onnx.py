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

``--zoo`` adds the zoo table of ``benchmarks/README_onnx.md``: operators, parameters (trainable), the
published count, ideals, DP time (warm) and max-load of every zoo model on the cluster (``--models ""
--zoo`` for that table alone, ``--zoo-only inception_v2`` to rerun one model). ``--cli`` also times
the command line ``placement place MODEL --devices ...`` as a user runs it.
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


ZOO = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
       "vgg19", "zfnet512")
# parameter counts published for these networks (quoted, not computed: the papers, Keras applications
# for DenseNet-121, the SqueezeNet 1.1 release and torchvision for VGG-19)
PUBLISHED = {"bvlc_alexnet": "61 M", "densenet121": "8.06 M (Keras)", "inception_v1": "~7.0 M",
             "inception_v2": "11.2 M", "resnet50": "25.6 M", "squeezenet": "1,235,496",
             "vgg19": "143,667,240"}
LABEL = {"squeezenet": "squeezenet (1.1)"}


def _zoo_table(devices: str, max_ideals: int, time_limit: float, only: list[str] | None = None) -> list[dict]:
    sys.path.insert(0, ROOT)
    from graphs.contract import contract
    from graphs.errors import ProblemTooLargeError
    from graphs.ideals import enumerate_ideals
    from graphs.onnx_workload import prepare_onnx
    from placement import place
    from solvers.base import SolveOptions

    out = []
    _, w = prepare_onnx(_zoo("squeezenet"), devices)
    place(w.graph, w.cluster, "dp")  # warm the numba kernels
    for name in only or ZOO:
        t0 = time.perf_counter()
        g, w = prepare_onnx(_zoo(name), devices)
        t1 = time.perf_counter()
        items = contract(w.graph, w.cluster)
        try:
            ideals = enumerate_ideals(items.num_classes, items.src, items.dst,
                                      max_ideals=max_ideals).num_ideals
        except ProblemTooLargeError:
            ideals = None
        row = {"model": name, "ops": w.graph.num_nodes, "parameters": g.parameters,
               "trainable": g.trainable_parameters, "ideals": ideals, "load_s": t1 - t0, "dp_s": None,
               "max_load_ms": None, "status": None, "gap": None}
        if ideals is not None:
            t2 = time.perf_counter()
            p = place(w.graph, w.cluster, "dp", SolveOptions(time_limit=time_limit))
            row.update(dp_s=time.perf_counter() - t2, max_load_ms=p.max_load, status=p.status.value,
                       gap=p.solution.gap)
        out.append(row)
    return out


def zoo_markdown(rows: list[dict], devices: str, max_ideals: int) -> list[str]:
    """The zoo table of ``benchmarks/README_onnx.md``."""
    lines = [f"Zoo models on `{devices}`, roofline, batch 1 (fixed in the files); DP warm, skipped above "
             f"{max_ideals:,} ideals:", "",
             "| model | ops | parameters (trainable) | published | ideals | DP s (warm) | max-load ms |",
             "|---|---|---|---|---|---|---|"]
    for z in rows:
        params = f"{z['parameters']:,}"
        if z["trainable"] != z["parameters"]:
            params += f" ({z['trainable']:,})"
        ideals = f"{z['ideals']:,}" if z["ideals"] is not None else f">{max_ideals:,}"
        dp = "—" if z["dp_s"] is None else f"{z['dp_s']:.3g}"
        ml = "—" if z["max_load_ms"] is None else f"{z['max_load_ms']:.4f}"
        if z["status"] not in (None, "optimal"):
            ml += f" ({z['status']}, gap {100 * (z['gap'] or 0):.1f}%)"
        elif z["dp_s"] is not None and z["dp_s"] >= 10:
            dp += " (optimal)"
        lines.append(f"| {LABEL.get(z['model'], z['model'])} | {z['ops']} | {params} | "
                     f"{PUBLISHED.get(z['model'], '')} | {ideals} | {dp} | {ml} |")
    return lines


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
    ap.add_argument("--zoo-only", default="", metavar="M1,M2",
                    help="with --zoo: only these zoo models (e.g. to rerun a long one)")
    ap.add_argument("--zoo-max-ideals", type=int, default=100_000, help="skip the DP above this many ideals")
    ap.add_argument("--zoo-time-limit", type=float, default=600.0, help="DP time limit per zoo model (s)")
    ap.add_argument("--cli", action="store_true", help="also time the command line")
    ap.add_argument("--markdown", default=None, metavar="FILE")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        if args.child[0] == "zoo":
            only = args.child[4].split(",") if len(args.child) > 4 and args.child[4] else None
            print(json.dumps(_zoo_table(args.child[1], int(args.child[2]), float(args.child[3]), only)))
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
    models = [m for m in args.models.split(",") if m]  # --models "" runs the zoo table only
    for model in models:
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
        for model in models:
            lines.append(f"| {model} | {_cli_time(model, args.devices, args.batch_size):.2f} |")
    if args.zoo:
        rows = _run_child(["zoo", args.devices, str(args.zoo_max_ideals), str(args.zoo_time_limit),
                           args.zoo_only])
        lines += [""] + zoo_markdown(rows, args.devices, args.zoo_max_ideals)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
