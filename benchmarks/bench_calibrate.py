"""Roofline predictions with the preset vs a calibrated device file, against onnxruntime's measured time
(see benchmarks/README_calibrate.md).

Calibrates the ``cpu`` kind (``graphs.calibrate.calibrate``, one thread) with the wall clock and with
the CPU clock, fits it to ResNet-50's profile (``fit_profile``), then for the model zoo's ResNet-50,
SqueezeNet, VGG-19, DenseNet-121 and a generated BERT (2 layers, width 768, sequence 128) compares the
whole-model roofline prediction (sum of operator times on one ``cpu``) with the preset and with each
file against ``graphs.costs.measure_run_time`` (one thread, median; wall clock, and CPU clock for the
CPU-clock calibration), and per operator class against the profiled kernel times. The zoo models
generate their weights at run time (``ConstantOfShape``), which the cost model folds away: the
measured model has them stored as initializers (the time with the generators is shown too).
Optionally (``--pipeline``) runs ResNet-50 on two CPU stages placed with the wall-clock calibrated
roofline costs through ``benchmarks.bench_pipeline.measure``.

    python -m benchmarks.bench_calibrate [--repeats 20] [--rounds 3] [--pipeline] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

MODELS = ("resnet50", "squeezenet", "vgg19", "densenet121")


def _zoo(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def _err(pred: float | None, measured: float, digits: int = 1) -> str:
    if pred is None or math.isnan(pred):
        return "—"
    return f"{pred:.{digits}f} ({pred / measured - 1:+.1%})"


def _load() -> float:
    return os.getloadavg()[0]


def stored_weights(path: str, tmp: str) -> str | None:
    """A copy of the model whose generated weights (ConstantOfShape nodes, as in the zoo files) are
    stored as initializers, or None when it generates none: the model the costs describe, since the
    cost model folds the generators away but onnxruntime (optimisations off) runs them every time."""
    import onnx

    from placement.onnx_export import generated_weights, materialize

    m = onnx.load(path)
    w = generated_weights(m)
    if not w:
        return None
    out = os.path.join(tmp, "stored_" + os.path.basename(path))
    onnx.save(materialize(m, w), out)
    return out


def compare(path: str, files: dict[str, str], *, repeats: int, rounds: int) -> dict:
    """Whole-model ms predicted with the preset and with every device file of ``files`` (label -> path),
    measured (wall and CPU clock; with generated weights stored, and as the file is), and per operator
    class against the profiled kernel times, for one model."""
    from graphs.calibrate import OP_CLASSES, op_class
    from graphs.costs import measure_run_time, profile_ops, roofline_costs
    from graphs.devices import parse_devices
    from graphs.onnx_loader import load_onnx

    g = load_onnx(path)
    pred = {"preset": roofline_costs(g, parse_devices("cpu:1")).compute[0]}
    for label, f in files.items():
        pred[label] = roofline_costs(g, parse_devices("cpu:1", [f])).compute[0]

    def measured(graph, cpu: bool) -> float:
        # medians of rounds of medians: the machine is shared, wall times are bimodal under contention
        runs = [measure_run_time(graph, repeats=repeats, cpu_time=cpu) for _ in range(rounds)]
        return statistics.median(runs)

    r: dict = {"operators": g.num_ops, "wall_generating_weights_ms": measured(g, False)}
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        stored = stored_weights(path, tmp)
        gs = load_onnx(stored) if stored is not None else g
        assert gs.num_ops == g.num_ops
        r["wall_ms"], r["cpu_ms"] = measured(gs, False), measured(gs, True)
    prof = profile_ops(g, repeats=repeats)
    r["profiled_sum_ms"] = float(sum(prof.values()))
    r["predicted_ms"] = {k: float(v.sum()) for k, v in pred.items()}
    classes = {c: {"ops": 0, "profiled": 0.0, **{k: 0.0 for k in pred}} for c in OP_CLASSES}
    for i, op in enumerate(g.ops):
        if op.name not in prof:
            continue
        c = classes[op_class(op.op_type)]
        c["ops"] += 1
        c["profiled"] += prof[op.name]
        for k, v in pred.items():
            c[k] += float(v[i])
    r["classes"] = {k: v for k, v in classes.items() if v["ops"]}
    r["load"] = _load()
    return r


def pipeline(device_file: str, samples: int, rounds: int) -> dict:
    """ResNet-50 on two CPU stages placed with calibrated roofline costs, run as a real pipeline."""
    import onnx

    from benchmarks.bench_pipeline import measure
    from graphs.onnx_workload import onnx_workload
    from placement.api import place
    from placement.export import result_dict

    path = _zoo("resnet50")
    w = onnx_workload(path, devices="cpu:2", costs="roofline", device_files=[device_file])
    p = place(w.graph, w.cluster)
    res = result_dict(p)
    m = measure(res, onnx.load(path), samples, rounds)
    m["ops_per_stage"] = [len(d["nodes"]) for d in res["devices"]]
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per measurement (median)")
    ap.add_argument("--rounds", type=int, default=3, help="measurements per model (median of medians)")
    ap.add_argument("--bert-layers", type=int, default=2)
    ap.add_argument("--device-file", default=None, help="use this calibrated file instead of calibrating")
    ap.add_argument("--fit-model", default="resnet50", help="zoo model whose profile the fit mode uses "
                    "('none': skip the fit)")
    ap.add_argument("--pipeline", action="store_true", help="also run ResNet-50 as a 2-stage pipeline")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write the numbers as JSON")
    args = ap.parse_args(argv)

    import onnx

    from graphs.calibrate import calibrate, fit_profile, write_device_file
    from graphs.onnx_loader import load_onnx
    from graphs.transformer import bert

    out: dict = {"load_before": list(os.getloadavg()), "cpus": os.cpu_count(), "files": {}, "seconds": {}}
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPU(s)")
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        files: dict[str, str] = {}
        if args.device_file:
            files["given"] = args.device_file
        else:
            for clock in ("wall", "cpu"):
                t0 = time.perf_counter()
                cal = calibrate("cpu", clock=clock)
                out["seconds"][clock] = time.perf_counter() - t0
                files[clock] = write_device_file(cal, os.path.join(tmp, f"cpu-{clock}.toml"))
                print(f"calibration ({clock} clock): {out['seconds'][clock]:.1f} s (load {_load():.2f})")
        if args.fit_model != "none":
            t0 = time.perf_counter()
            fcal = fit_profile(load_onnx(_zoo(args.fit_model)), "cpu", repeats=args.repeats)
            out["seconds"]["fit"] = time.perf_counter() - t0
            files["fit"] = write_device_file(fcal, os.path.join(tmp, "cpu-fit.toml"))
            print(f"fit to {args.fit_model}'s profile: {out['seconds']['fit']:.1f} s (load {_load():.2f})")
        for label, f in files.items():
            with open(f, encoding="utf-8") as fh:
                out["files"][label] = fh.read()
            print(out["files"][label])
        bert_path = os.path.join(tmp, f"bert_l{args.bert_layers}.onnx")
        onnx.save(bert(args.bert_layers), bert_path)
        models = {m: _zoo(m) for m in MODELS}
        models[f"bert-L{args.bert_layers}"] = bert_path
        out["models"] = {}
        labels = ["preset"] + list(files)
        print("whole model, ms: measured (median) and predicted (error vs the measurement on the same clock; "
              "preset and fit vs wall)")
        print("| model | ops | wall | wall, generating weights | cpu clock | "
              + " | ".join(f"{k}" for k in labels) + " | load |")
        print("|---" * (6 + len(labels)) + "|")
        for name, path in models.items():
            r = compare(path, files, repeats=args.repeats, rounds=args.rounds)
            out["models"][name] = r
            cells = []
            for k in labels:
                ref = r["cpu_ms"] if k == "cpu" else r["wall_ms"]
                cells.append(_err(r["predicted_ms"][k], ref))
            print(f"| {name} | {r['operators']} | {r['wall_ms']:.1f} | {r['wall_generating_weights_ms']:.1f} "
                  f"| {r['cpu_ms']:.1f} | " + " | ".join(cells) + f" | {r['load']:.2f} |")
        print("\nper operator class, ms: profiled kernel time (wall clock; scaled by the model's CPU-clock "
              "time over the profiled sum for the cpu column) and predictions (error)")
        print("| model | class | ops | profiled | profiled, scaled | " + " | ".join(labels) + " |")
        print("|---" * (5 + len(labels)) + "|")
        for name, r in out["models"].items():
            scale = r["cpu_ms"] / r["profiled_sum_ms"]
            for c, v in r["classes"].items():
                pr = v["profiled"]
                cells = [_err(v[k], pr * scale if k == "cpu" else pr, 2) for k in labels]
                print(f"| {name} | {c} | {v['ops']} | {pr:.2f} | {pr * scale:.2f} | "
                      + " | ".join(cells) + " |")
        if args.pipeline:
            dev = files.get("wall") or files.get("given") or next(iter(files.values()))
            m = pipeline(dev, args.samples, args.rounds)
            out["pipeline"] = m
            err = m["measured_ms_median"] / m["predicted_ms"] - 1
            print(f"\npipeline ResNet-50, 2 CPU stages, calibrated roofline, ops/stage {m['ops_per_stage']}: "
                  f"predicted {m['predicted_ms']:.2f} ms/sample (stages "
                  f"{', '.join(f'{x:.2f}' for x in m['predicted_stage_ms'])}), measured "
                  f"{m['measured_ms_median']:.2f} (runs "
                  f"{', '.join(f'{x:.2f}' for x in m['measured_ms_all'])}; "
                  f"stages busy {', '.join(f'{x:.2f}' for x in m['measured_stage_ms_median'])}), error "
                  f"{err:+.1%}; simulated with measured stage times "
                  f"{m['simulated_from_measured_stages_ms']:.2f}")
    out["load_after"] = list(os.getloadavg())
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
