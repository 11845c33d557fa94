"""Roofline predictions with the preset vs a calibrated device file, against onnxruntime's measured time
(see benchmarks/README_calibrate.md).

Calibrates the ``cpu`` kind (``graphs.calibrate.calibrate``, one thread), then for the model zoo's
ResNet-50, SqueezeNet, VGG-19, DenseNet-121 and a generated BERT (2 layers, width 768, sequence 128)
compares the whole-model roofline prediction (sum of operator times on one ``cpu``) with the preset and
with the calibrated file against ``graphs.costs.measure_run_time`` (one thread, median), and per
operator class against the profiled kernel times. Optionally (``--pipeline``) runs ResNet-50 on two
CPU stages placed with calibrated roofline costs through ``benchmarks.bench_pipeline.measure``.

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


def compare(path: str, device_file: str, *, repeats: int, rounds: int, fit_file: str | None = None) -> dict:
    """Predicted (preset, calibrated) and measured whole-model ms, and per-class ms, for one model."""
    from graphs.calibrate import OP_CLASSES, op_class
    from graphs.costs import measure_run_time, profile_ops, roofline_costs
    from graphs.devices import parse_devices
    from graphs.onnx_loader import load_onnx

    g = load_onnx(path)
    pre = roofline_costs(g, parse_devices("cpu:1")).compute[0]
    cal = roofline_costs(g, parse_devices("cpu:1", [device_file])).compute[0]
    fit = roofline_costs(g, parse_devices("cpu:1", [fit_file])).compute[0] if fit_file else None
    # medians of rounds of medians: the machine is shared, runs are bimodal under contention
    measured_as_is = statistics.median(measure_run_time(g, repeats=repeats) for _ in range(rounds))
    measured = measured_as_is
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        stored = stored_weights(path, tmp)
        if stored is not None:
            gs = load_onnx(stored)
            assert gs.num_ops == g.num_ops
            measured = statistics.median(measure_run_time(gs, repeats=repeats) for _ in range(rounds))
    prof = profile_ops(g, repeats=repeats)
    classes = {c: {"profiled": 0.0, "preset": 0.0, "calibrated": 0.0, "fitted": 0.0, "ops": 0}
               for c in OP_CLASSES}
    for i, op in enumerate(g.ops):
        if op.name not in prof:
            continue
        c = classes[op_class(op.op_type)]
        c["profiled"] += prof[op.name]
        c["preset"] += pre[i]
        c["calibrated"] += cal[i]
        c["fitted"] += fit[i] if fit is not None else math.nan
        c["ops"] += 1
    return {"operators": g.num_ops, "measured_ms": measured,
            "measured_generating_weights_ms": measured_as_is, "preset_ms": float(pre.sum()),
            "calibrated_ms": float(cal.sum()),
            "fitted_ms": float(fit.sum()) if fit is not None else None,
            "profiled_sum_ms": float(sum(prof.values())),
            "classes": {k: v for k, v in classes.items() if v["ops"]}}


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

    from graphs.calibrate import calibrate, write_device_file
    from graphs.transformer import bert

    out: dict = {"load_before": list(os.getloadavg()), "cpus": os.cpu_count()}
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPU(s)")
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        dev = args.device_file
        if dev is None:
            t0 = time.perf_counter()
            cal = calibrate("cpu")
            out["calibration_s"] = time.perf_counter() - t0
            dev = write_device_file(cal, os.path.join(tmp, "cpu.toml"))
            print(f"calibration: {out['calibration_s']:.1f} s (load {_load():.2f})")
        with open(dev, encoding="utf-8") as f:
            out["device_file"] = f.read()
        print(out["device_file"])
        fit_file = None
        if args.fit_model != "none":
            from graphs.calibrate import fit_profile
            from graphs.onnx_loader import load_onnx

            t0 = time.perf_counter()
            fcal = fit_profile(load_onnx(_zoo(args.fit_model)), "cpu", repeats=args.repeats)
            out["fit_s"] = time.perf_counter() - t0
            fit_file = write_device_file(fcal, os.path.join(tmp, "fit.toml"))
            with open(fit_file, encoding="utf-8") as f:
                out["fit_file"] = f.read()
            print(f"fit to {args.fit_model}'s profile: {out['fit_s']:.1f} s (load {_load():.2f})")
            print(out["fit_file"])
        bert_path = os.path.join(tmp, f"bert_l{args.bert_layers}.onnx")
        onnx.save(bert(args.bert_layers), bert_path)
        models = {m: _zoo(m) for m in MODELS}
        models[f"bert-L{args.bert_layers}"] = bert_path
        out["models"] = {}
        print("| model | ops | measured ms | (generating weights) | preset ms (err) | calibrated ms (err) "
              f"| fitted to {args.fit_model} ms (err) | load |")
        print("|---|---|---|---|---|---|---|---|")
        for name, path in models.items():
            r = compare(path, dev, repeats=args.repeats, rounds=args.rounds, fit_file=fit_file)
            r["load"] = _load()
            out["models"][name] = r
            m = r["measured_ms"]
            pre = r["preset_ms"]
            print(f"| {name} | {r['operators']} | {m:.1f} | {r['measured_generating_weights_ms']:.1f} "
                  f"| {pre:.1f} ({pre / m - 1:+.0%}) "
                  f"| {r['calibrated_ms']:.1f} ({r['calibrated_ms'] / m - 1:+.1%}) "
                  f"| {_err(r['fitted_ms'], m)} | {r['load']:.2f} |")
        print("\nper operator class, predicted vs profiled kernel time (ms):")
        print("| model | class | ops | profiled | preset (err) | calibrated (err) | fitted (err) |")
        print("|---|---|---|---|---|---|---|")
        for name, r in out["models"].items():
            for c, v in r["classes"].items():
                pr = v["profiled"]
                pre = v["preset"]
                print(f"| {name} | {c} | {v['ops']} | {pr:.2f} | {pre:.2f} ({pre / pr - 1:+.0%}) "
                      f"| {v['calibrated']:.2f} ({v['calibrated'] / pr - 1:+.0%}) "
                      f"| {_err(v['fitted'], pr, 2)} |")
        if args.pipeline:
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
