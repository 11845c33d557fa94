"""One command for a machine with an NVIDIA GPU: calibrate an accelerator kind through onnxruntime's CUDA
execution provider, then compare its roofline predictions with measured runs of the zoo models.

    python -m benchmarks.gpu_calibrate a100 [--out-dir gpu-calibrate] [--repeats 20] [--budget 0.25]
    bash benchmarks/gpu_calibrate.sh h100            # the same

Steps: (1) refuse, with one ``error:`` line and exit code 2, unless onnxruntime's CUDA execution
provider is installed and a session on it starts (no CPU fallback, ever); (2) ``placement calibrate
KIND`` (``graphs.calibrate.calibrate``, wall clock) -> ``OUT/calibrated-KIND.toml``; (3) for every zoo
model the installed onnx package ships, with its generated weights stored: the median wall time of
``--repeats`` runs on the CUDA provider (same session settings as the calibration: graph optimisations
off, sequential), after one profiled run that says which nodes onnxruntime placed on the CPU (a
model with any is flagged in the table, since its time then is not the GPU's); (4) predictions of
the preset and of the calibrated file (``--costs roofline``) and their errors -> ``OUT/gpu_calibrate.md``
and ``OUT/gpu_calibrate.json``.

Measured times include copying the input to the GPU and the output back (``session.run`` with numpy
arrays); the calibration's per-link differences cancel those, the predictions do not contain them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

KINDS = ("a100", "a100-80gb", "h100", "v100", "t4", "l4")


def _cuda_session(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return so, ort.InferenceSession(path, so, providers=["CUDAExecutionProvider"])


def _feeds(sess):
    import numpy as np

    rng = np.random.default_rng(0)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        if "float16" in i.type:
            out[i.name] = rng.standard_normal(shape).astype(np.float16)
        elif "float" in i.type:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[i.name] = np.zeros(shape, np.int64)
    return out


def cpu_nodes(path: str, tmp: str) -> tuple[int, int]:
    """(nodes onnxruntime ran on the CPU provider, nodes) in one profiled run on the CUDA provider."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "gpu-profile")
    sess = ort.InferenceSession(path, so, providers=["CUDAExecutionProvider"])
    sess.run(None, _feeds(sess))
    with open(sess.end_profiling(), encoding="utf-8") as f:
        events = json.load(f)
    providers = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            providers[e["name"]] = (e.get("args") or {}).get("provider", "")
    return sum(p == "CPUExecutionProvider" for p in providers.values()), len(providers)


def measure(path: str, repeats: int) -> float:
    """Median wall ms of one run on the CUDA provider, after three warm-up runs."""
    _, sess = _cuda_session(path)
    if sess.get_providers()[:1] != ["CUDAExecutionProvider"]:
        raise RuntimeError("the session did not start on the CUDA provider")
    feeds = _feeds(sess)
    for _ in range(3):
        sess.run(None, feeds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=KINDS, help="the accelerator preset to calibrate")
    ap.add_argument("--out-dir", default="gpu-calibrate", help="where the file and the tables go")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.25)
    args = ap.parse_args(argv)

    from graphs.errors import PlacementError

    try:
        return _run(args)
    except PlacementError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from benchmarks.bench_calibrate import stored_weights, zoo_models
    from graphs.calibrate import calibrate, provider_for, write_device_file
    from graphs.costs import roofline_costs
    from graphs.devices import parse_devices, preset
    from graphs.onnx_loader import load_onnx

    provider_for(preset(args.kind))  # InputError without the CUDA provider: no CPU fallback
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.perf_counter()
    cal = calibrate(args.kind, budget=args.budget, progress=lambda m: print(f"  {m}", file=sys.stderr))
    dev = write_device_file(cal, os.path.join(args.out_dir, f"calibrated-{args.kind}.toml"))
    print(f"calibrated {args.kind} in {time.perf_counter() - t0:.0f} s: {cal.disturbance.line()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-calibrate-") as tmp:
        for name, path in zoo_models().items():
            stored = stored_weights(path, tmp) or path
            g = load_onnx(path)
            on_cpu, nodes = cpu_nodes(stored, tmp)
            ms = measure(stored, args.repeats)
            pre = float(roofline_costs(g, parse_devices(f"{args.kind}:1")).compute[0].sum())
            cal_ms = float(roofline_costs(g, parse_devices(f"{args.kind}:1", [dev])).compute[0].sum())
            rows.append({"model": name, "operators": g.num_ops, "measured_ms": ms, "preset_ms": pre,
                         "calibrated_ms": cal_ms, "nodes_on_cpu": on_cpu, "nodes": nodes})
            print(f"  {name}: measured {ms:.2f} ms, calibrated {cal_ms:.2f}, preset {pre:.2f}", flush=True)
    lines = [f"# `calibrate {args.kind}` (CUDA execution provider) against measured zoo models", "",
             f"Command: `python -m benchmarks.gpu_calibrate {args.kind} --repeats {args.repeats} "
             f"--budget {args.budget}`; {cal.date}; {cal.disturbance.line()}", "",
             f"Calibrated: Conv {cal.conv_flops / 1e12:.2f} TFLOP/s, MatMul {cal.matmul_flops / 1e12:.2f}, "
             f"fp16 {(cal.fp16_flops or 0) / 1e12:.2f}, {cal.bandwidth / 1e9:.0f} GB/s, "
             f"{cal.launch * 1e6:.1f} µs per operator.", "",
             "| model | ops | measured ms | preset (error) | calibrated (error) | nodes on the CPU |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        m = r["measured_ms"]
        lines.append(f"| {r['model']} | {r['operators']} | {m:.2f} | {r['preset_ms']:.2f} "
                     f"({r['preset_ms'] / m - 1:+.1%}) | {r['calibrated_ms']:.2f} "
                     f"({r['calibrated_ms'] / m - 1:+.1%}) | "
                     f"{r['nodes_on_cpu']} of {r['nodes']}"
                     f"{' (not a GPU time)' if r['nodes_on_cpu'] else ''} |")
    with open(os.path.join(args.out_dir, "gpu_calibrate.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out_dir, "gpu_calibrate.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": args.kind, "disturbance": cal.disturbance.as_dict(), "rows": rows}, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
