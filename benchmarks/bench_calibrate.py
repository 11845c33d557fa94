"""Roofline predictions with calibrated device files against onnxruntime's measured time, on the models
the calibration was tuned on and on models it was not (see benchmarks/README_calibrate.md).

Models: every zoo model the installed ``onnx`` package ships (``onnx/backend/test/data/light``: nine;
ResNet-50, SqueezeNet, VGG-19 and DenseNet-121 are the four the calibration was developed on, the
others are held out), a generated BERT (``graphs.transformer.bert``, 2 layers; tuned on too), and two
exporter graphs this benchmark makes with ``torch.onnx`` from random weights (held out): a GPT-2-style
and a BERT-style stack of 4 blocks (width 768, 12 heads, sequence 128).

The benchmark pins itself to the last CPU (``--no-pin``: not). Two conditions, both calibrating the
``cpu`` kind with ``graphs.calibrate.calibrate`` (defaults: one thread, the thread's CPU time):

* **quiet**: no competing process of the benchmark's own; other users of the machine may still be
  running (the load average and the cores other processes used are reported with every table);
* **competing**: ``--competitors`` processes (default 1) started by the benchmark, each alternating
  a 512 x 512 matrix product and a pass over a 64 MB array, run during the calibration.

Measurements (no competitor of ours): the median of ``--rounds`` medians of ``--repeats`` runs (their
range is reported: how far other work moved the reference), one thread, by the thread's CPU time and
by the wall clock, with the zoo models' run-time weight generators replaced by stored weights (the
cost model folds the generators away); per operator class and per memory-bound operator type,
onnxruntime's profiled kernel times less the profiler's own time per kernel (:func:`profiler_overhead`,
measured in the same run), scaled to the CPU-clock whole-model time. Errors: predicted / measured - 1,
against the CPU-clock time. ``quiet, old model`` is the quiet file without the figures of the
memory-bound operators (``view_us``, ``transpose_gbs``, ``transpose_block_us``): the cost model before
them, against the same measurements. ``--fit-model`` adds a fit to that model's profile.

    python -m benchmarks.bench_calibrate [--repeats 10] [--rounds 3] [--competitors 1] [--json OUT.json]
    python -m benchmarks.bench_calibrate --smoke   # seconds: SqueezeNet and ShuffleNet, short budgets
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import warnings

# memory-bound operator types reported on their own (per-type rows), besides the classes
MEMORY_TYPES = ("Transpose", "Reshape", "Concat", "BatchNormalization", "Mul", "Add", "Sum", "Relu")
NEW_KEYS = ("view_us", "transpose_gbs", "transpose_block_us")  # the keys "quiet, old model" drops
TUNED = ("resnet50", "squeezenet", "vgg19", "densenet121", "bert-L2 (generated)")  # developed on these
STACKS = ("gpt2", "bert")


def zoo_models() -> dict[str, str]:
    """Every zoo model the installed onnx package ships, by name (``light_resnet50.onnx`` -> resnet50)."""
    import onnx

    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {os.path.basename(p)[len("light_"):-len(".onnx")]: p
            for p in sorted(glob.glob(os.path.join(d, "light_*.onnx")))}


def _zoo(name: str) -> str:
    return zoo_models()[name]


def _err(pred: float | None, measured: float, digits: int = 1) -> str:
    if pred is None or math.isnan(pred) or not measured:
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


# --------------------------------------------------------------------------- exporter graphs
def export_stack(kind: str, path: str, *, layers: int = 4, width: int = 768, heads: int = 12, seq: int = 128,
                 vocab: int = 8192, seed: int = 0) -> str:
    """Export a GPT-2-style (``"gpt2"``: pre-norm, causal attention with one fused QKV projection,
    tanh-GELU MLP) or BERT-style (``"bert"``: post-norm, unmasked attention, erf-GELU MLP) stack of
    ``layers`` blocks with token and position embeddings and random weights, batch 1, with the legacy
    ``torch.onnx`` exporter (the torch.export-based one needs the onnxscript package)."""
    import torch

    if kind not in STACKS:
        raise ValueError(f"kind must be one of {', '.join(STACKS)}, got {kind!r}")
    torch.manual_seed(seed)
    model = _stack_module()(layers, width, heads, seq, vocab, kind == "gpt2").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(model, (torch.zeros(1, seq, dtype=torch.long),), path, dynamo=False,
                          opset_version=17, input_names=["ids"], output_names=["y"])
    return path


def _stack_module():
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, width: int, heads: int, causal: bool) -> None:
            super().__init__()
            self.heads, self.causal = heads, causal
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)
            q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            a = q @ k.transpose(2, 3) / math.sqrt(c // self.heads)
            if self.causal:
                a = a.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
            y = torch.softmax(a, -1) @ v
            return self.out(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self, width: int, heads: int, gpt: bool) -> None:
            super().__init__()
            self.gpt = gpt
            self.attn = Attention(width, heads, causal=gpt)
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            gelu = nn.GELU(approximate="tanh" if gpt else "none")
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), gelu, nn.Linear(4 * width, width))

        def forward(self, x):
            if self.gpt:
                x = x + self.attn(self.ln1(x))
                return x + self.mlp(self.ln2(x))
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.mlp(x))

    class Stack(nn.Module):
        def __init__(self, layers: int, width: int, heads: int, seq: int, vocab: int, gpt: bool) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.blocks = nn.ModuleList(Block(width, heads, gpt) for _ in range(layers))
            self.ln = nn.LayerNorm(width)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[None, : ids.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.ln(x)

    return Stack


# --------------------------------------------------------------------------- competing work
def _burn(stop) -> None:
    """A competing process: a 512 x 512 matrix product and a pass over a 64 MB array, alternately,
    until ``stop`` is set (arithmetic and memory traffic, as a colleague's job would)."""
    import numpy as np

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # not the benchmark's pinned core only
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    big = np.ones(16 * 2 ** 20, np.float32)
    while not stop.is_set():
        a = (a @ a) * np.float32(1e-3)
        big *= np.float32(1.0000001)


class Competitors:
    """``n`` :func:`_burn` processes while the ``with`` block runs (stopped and joined after it)."""

    def __init__(self, n: int) -> None:
        self.n = n
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.procs = [ctx.Process(target=_burn, args=(self.stop,), daemon=True) for _ in range(n)]

    def __enter__(self) -> Competitors:
        for p in self.procs:
            p.start()
        time.sleep(2.0 if self.n else 0.0)  # running at full speed before the calibration starts
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()


# --------------------------------------------------------------------------- measuring
def profiler_overhead(repeats: int = 20, links: int = 50) -> dict:
    """What onnxruntime's profiler adds to each kernel event (ms): the median profiled time of a Reshape
    (metadata-only: its kernel does no work) in a chain of ``2 x links`` of them, less the time one adds
    to an unprofiled run by the thread's CPU time (the difference of two chain lengths)."""
    import numpy as np
    import onnx

    from graphs.calibrate import VIEW_SHAPE, _chain, _reshape_unit
    from graphs.costs import measure_run_time, profile_ops
    from graphs.onnx_loader import load_onnx

    with tempfile.TemporaryDirectory(prefix="bench-profiler-") as tmp:
        times = {}
        for k in (1, 1 + links):
            path = os.path.join(tmp, f"reshape{k}.onnx")
            onnx.save(_chain(_reshape_unit(*VIEW_SHAPE), VIEW_SHAPE[0], k), path)
            g = load_onnx(path)
            times[k] = statistics.median(measure_run_time(g, repeats=repeats, cpu_time=True)
                                         for _ in range(3))
        prof = profile_ops(g, repeats=repeats)
    per_op = max(times[1 + links] - times[1], 0.0) / (2 * links)
    profiled = float(np.median(list(prof.values())))
    return {"profiled_ms": profiled, "unprofiled_ms": per_op, "overhead_ms": max(profiled - per_op, 0.0)}


def measure(path: str, tmp: str, *, repeats: int, rounds: int, overhead_ms: float = 0.0) -> dict:
    """Whole-model ms (CPU clock and wall clock, generated weights stored) and per-class and per-type
    profiled ms (each kernel less ``overhead_ms``, the profiler's own time, then scaled to the CPU clock)."""
    from graphs.calibrate import _competing, _cpu_sample, op_class
    from graphs.costs import measure_run_time, profile_ops
    from graphs.onnx_loader import load_onnx

    g = load_onnx(path)
    stored = stored_weights(path, tmp)
    gs = load_onnx(stored) if stored is not None else g
    assert gs.num_ops == g.num_ops
    s0, t0 = _cpu_sample(), time.perf_counter()
    cpu_rounds = [measure_run_time(gs, repeats=repeats, cpu_time=True) for _ in range(rounds)]
    cpu = statistics.median(cpu_rounds)
    wall = statistics.median(measure_run_time(gs, repeats=repeats) for _ in range(rounds))
    competing = _competing(s0, _cpu_sample())
    prof = profile_ops(g, repeats=repeats)
    classes: dict[str, float] = {}
    raw: dict[str, float] = {}
    types: dict[str, float] = {}
    for op in g.ops:
        if op.name in prof:
            c, t = op_class(op.op_type), max(prof[op.name] - overhead_ms, 0.0)
            classes[c] = classes.get(c, 0.0) + t
            raw[c] = raw.get(c, 0.0) + prof[op.name]
            if op.op_type in MEMORY_TYPES:
                types[op.op_type] = types.get(op.op_type, 0.0) + t
    total, total_raw = sum(classes.values()), sum(raw.values())
    return {"operators": g.num_ops, "cpu_ms": cpu, "cpu_rounds_ms": cpu_rounds, "wall_ms": wall,
            "profiled_ms": total_raw, "profiled_less_overhead_ms": total,
            "classes_ms": {c: v * cpu / total for c, v in classes.items()},
            "classes_raw_ms": {c: v * cpu / total_raw for c, v in raw.items()},
            "types_ms": {c: v * cpu / total for c, v in types.items()}, "load": _load(),
            "competing": competing, "seconds": time.perf_counter() - t0}


def predict(path: str, device_file: str | None) -> dict:
    """Roofline ms on one ``cpu``: whole model and per operator class (``None``: the preset)."""
    from graphs.calibrate import op_class
    from graphs.costs import roofline_costs
    from graphs.devices import parse_devices
    from graphs.onnx_loader import load_onnx

    g = load_onnx(path)
    pred = roofline_costs(g, parse_devices("cpu:1", [device_file] if device_file else [])).compute[0]
    classes: dict[str, float] = {}
    types: dict[str, float] = {}
    for i, op in enumerate(g.ops):
        classes[op_class(op.op_type)] = classes.get(op_class(op.op_type), 0.0) + float(pred[i])
        if op.op_type in MEMORY_TYPES:
            types[op.op_type] = types.get(op.op_type, 0.0) + float(pred[i])
    return {"ms": float(pred.sum()), "classes_ms": classes, "types_ms": types}


def without_new_keys(path: str, out: str) -> str:
    """A copy of the device file ``path`` without the keys of :data:`NEW_KEYS` (and their comments' lines
    are harmless): the cost model before the memory-bound operators' figures."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.split("=")[0].strip() not in NEW_KEYS]
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return out


def _calibration_row(label: str, cal, seconds: float) -> dict:
    d = cal.disturbance
    return {"label": label, "seconds": seconds, "line": d.line(), "disturbed": d.disturbed, "bound": d.bound,
            "load_before": d.load_before, "load_after": d.load_after, "competing_before": d.competing_before,
            "competing_during": d.competing_during, "spread": d.spread,
            "conv_gflops": cal.conv_flops / 1e9, "matmul_gflops": cal.matmul_flops / 1e9,
            "other_gflops": cal.spec().fp32 / 1e9, "bandwidth_gbs": cal.bandwidth / 1e9,
            "launch_us": cal.launch * 1e6, "op_gflops": {t: r / 1e9 for t, r in cal.op_flops},
            "conv_half": [cal.conv_half_channels, cal.conv_half_pixels],
            "depthwise": None if cal.depthwise is None else [[r / 1e9, c * 1e6] for r, c in cal.depthwise],
            "view_us": None if cal.view_time is None else cal.view_time * 1e6,
            "transpose": None if cal.transpose is None else [cal.transpose[0] / 1e9, cal.transpose[1] * 1e9]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10, help="timed runs per measurement (median)")
    ap.add_argument("--rounds", type=int, default=3, help="measurements per model (median of medians)")
    ap.add_argument("--budget", type=float, default=0.25, help="calibration: seconds per benchmark session")
    ap.add_argument("--competitors", type=int, default=1, help="competing processes (0: skip that condition)")
    ap.add_argument("--models", default=None, help="comma-separated subset of the models (default: all)")
    ap.add_argument("--fit-model", default="none", help="also fit to this zoo model's profile (default none)")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write the numbers as JSON")
    ap.add_argument("--no-pin", action="store_true", help="do not pin this process to the last CPU")
    ap.add_argument("--smoke", action="store_true", help="a quick run that checks the benchmark works: "
                    "SqueezeNet and ShuffleNet, --repeats 3 --rounds 1 --budget 0.05 --competitors 0")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats, args.rounds, args.budget, args.competitors = 3, 1, 0.05, 0
        args.models = args.models or "squeezenet,shufflenet"
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # one core: no migrations mid-run

    import onnx

    from graphs.calibrate import calibrate, fit_profile, probe_machine, write_device_file
    from graphs.onnx_loader import load_onnx
    from graphs.transformer import bert

    t_all = time.perf_counter()
    competing0, _ = probe_machine(1.0)
    out: dict = {"load_before": list(os.getloadavg()), "competing_before": competing0,
                 "cpus": os.cpu_count(), "calibrations": [], "models": {},
                 "argv": sys.argv[1:] if argv is None else list(argv)}
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} "
          f"CPU(s); other processes used {_f(competing0)} core(s)")
    with tempfile.TemporaryDirectory(prefix="bench-calibrate-") as tmp:
        models = dict(zoo_models())
        bert_path = os.path.join(tmp, "bert_l2.onnx")
        onnx.save(bert(2), bert_path)
        models["bert-L2 (generated)"] = bert_path
        for kind in STACKS:
            models[f"{kind}-L4 (torch.onnx)"] = export_stack(kind, os.path.join(tmp, f"{kind}_l4.onnx"))
        if args.models:
            keep = [m.strip() for m in args.models.split(",")]
            models = {k: v for k, v in models.items() if any(k.startswith(m) for m in keep)}
        files: dict[str, str] = {}
        conditions = [("quiet", 0)] + ([("competing", args.competitors)] if args.competitors > 0 else [])
        for label, n in conditions:
            with Competitors(n):
                t0 = time.perf_counter()
                cal = calibrate("cpu", budget=args.budget)
                sec = time.perf_counter() - t0
            files[label] = write_device_file(cal, os.path.join(tmp, f"cpu-{label}.toml"))
            if label == "quiet":
                files["quiet, old model"] = without_new_keys(files[label], os.path.join(tmp, "cpu-old.toml"))
            out["calibrations"].append(_calibration_row(label, cal, sec))
            print(f"calibration, {label} ({n} competing process(es) of ours): {sec:.1f} s; "
                  f"{cal.disturbance.line()}", flush=True)
        if args.fit_model != "none":
            fcal = fit_profile(load_onnx(models[args.fit_model]), "cpu", repeats=args.repeats)
            files["fit"] = write_device_file(fcal, os.path.join(tmp, "cpu-fit.toml"))
        out["files"] = {k: open(v, encoding="utf-8").read() for k, v in files.items()}
        out["profiler"] = profiler_overhead(repeats=max(args.repeats, 5))
        print(f"profiler overhead: {out['profiler']['overhead_ms'] * 1e3:.2f} us per kernel (a Reshape: "
              f"{out['profiler']['profiled_ms'] * 1e3:.2f} us profiled, "
              f"{out['profiler']['unprofiled_ms'] * 1e3:.2f} us unprofiled)", flush=True)
        for name, path in models.items():
            r = measure(path, tmp, repeats=args.repeats, rounds=args.rounds,
                        overhead_ms=out["profiler"]["overhead_ms"])
            r["held_out"] = name not in TUNED
            r["predicted"] = {"preset": predict(path, None),
                              **{k: predict(path, f) for k, f in files.items()}}
            out["models"][name] = r
            print(f"  measured {name}: {r['cpu_ms']:.1f} ms (CPU clock), load {r['load']:.2f}", flush=True)
    out["load_after"] = list(os.getloadavg())
    out["seconds"] = time.perf_counter() - t_all
    report(out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


def report(out: dict) -> None:
    """The tables of benchmarks/README_calibrate.md from :func:`main`'s numbers."""
    cals = {c["label"]: c for c in out["calibrations"]}
    labels = ["preset"] + list(out["files"])
    print("\ncalibrations")
    print("| condition | took | load before → after | other processes, cores: before / during | repeats "
          "spread | Conv | MatMul | other | GB/s | µs/op | view µs | Transpose GB/s, ns/run | "
          "LRN, MaxPool, AveragePool | the tool's verdict |")
    print("|---" * 14 + "|")
    for c in out["calibrations"]:
        ops = c["op_gflops"]
        print(f"| {c['label']} | {c['seconds']:.0f} s | {_f(c['load_before'])} → {_f(c['load_after'])} | "
              f"{_f(c['competing_before'])} / {_f(c['competing_during'])} | {c['spread']:.0%} | "
              f"{c['conv_gflops']:.1f} | {c['matmul_gflops']:.1f} | {c['other_gflops']:.1f} | "
              f"{c['bandwidth_gbs']:.1f} | {c['launch_us']:.2f} | {_f(c.get('view_us'))} | "
              f"{', '.join(_g(x) for x in c.get('transpose') or (None, None))} | "
              f"{', '.join(_g(ops.get(t)) for t in ('LRN', 'MaxPool', 'AveragePool'))} | "
              f"{c['line']} |")
    if "quiet" in cals and "competing" in cals:
        q, c = cals["quiet"], cals["competing"]
        keys = ("conv_gflops", "matmul_gflops", "other_gflops", "bandwidth_gbs")
        shifts = {k: c[k] / q[k] - 1 for k in keys}
        worst = max(abs(v) for v in shifts.values())
        print("competing vs quiet calibration: " + ", ".join(f"{k.split('_')[0]} {v:+.1%}" for k, v in
                                                              shifts.items())
              + f"; largest shift {worst:.0%}, the tool's bound {c['bound']:.0%} "
              f"({'covered' if worst <= c['bound'] else 'NOT covered'})")
    print("\nwhole model, ms: measured (CPU clock: the median of the rounds' medians, and their range; wall) "
          "and predicted (error vs the CPU-clock time)")
    print("| model | held out | ops | measured | rounds | wall | " + " | ".join(labels)
          + " | load | other cores |")
    print("|---" * (8 + len(labels)) + "|")
    for name, r in out["models"].items():
        cells = [_err(r["predicted"][k]["ms"], r["cpu_ms"]) for k in labels]
        rounds = r.get("cpu_rounds_ms") or [r["cpu_ms"]]
        print(f"| {name} | {'yes' if r['held_out'] else 'no'} | {r['operators']} | {r['cpu_ms']:.1f} | "
              f"{min(rounds):.1f}–{max(rounds):.1f} | {r['wall_ms']:.1f} | " + " | ".join(cells)
              + f" | {r['load']:.1f} | {_f(r['competing'])} |")
    for label in ("quiet", "competing"):
        if label not in cals:
            continue
        errs = {n: r["predicted"][label]["ms"] / r["cpu_ms"] - 1 for n, r in out["models"].items()}
        held = [abs(e) for n, e in errs.items() if out["models"][n]["held_out"]]
        worst = max(errs, key=lambda n: abs(errs[n]))
        print(f"{label}: worst error {errs[worst]:+.1%} ({worst}); held-out models within "
              f"{max(held, default=float('nan')):.1%}; the tool said: {cals[label]['line']}")
    prof = out.get("profiler")
    if prof:
        print(f"\nprofiler overhead: {prof['overhead_ms'] * 1e3:.2f} µs per kernel (a Reshape: "
              f"{prof['profiled_ms'] * 1e3:.2f} µs profiled, "
              f"{prof['unprofiled_ms'] * 1e3:.2f} µs unprofiled)")
    print("\nper operator class, ms: profiled kernel time less the profiler's overhead, scaled to the "
          "CPU-clock time (in brackets: not less it, as the earlier tables), and predictions (error)")
    print("| model | class | profiled, scaled | (not less overhead) | " + " | ".join(labels[1:]) + " |")
    print("|---" * (4 + len(labels) - 1) + "|")
    for name, r in out["models"].items():
        raw = r.get("classes_raw_ms", {})
        for c, v in sorted(r["classes_ms"].items(), key=lambda kv: -kv[1]):
            cells = [_err(r["predicted"][k]["classes_ms"].get(c, 0.0), v, 2) for k in labels[1:]]
            print(f"| {name} | {c} | {v:.2f} | {_f(raw.get(c))} | " + " | ".join(cells) + " |")
    print("\nmemory-bound operator types, ms (the same profile and predictions)")
    print("| model | type | profiled, scaled | " + " | ".join(labels[1:]) + " |")
    print("|---" * (3 + len(labels) - 1) + "|")
    for name, r in out["models"].items():
        for c, v in sorted(r.get("types_ms", {}).items(), key=lambda kv: -kv[1]):
            cells = [_err(r["predicted"][k]["types_ms"].get(c, 0.0), v, 2) for k in labels[1:]]
            print(f"| {name} | {c} | {v:.2f} | " + " | ".join(cells) + " |")
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in out['load_after'])}; "
          f"the benchmark took {out['seconds']:.0f} s")


def _f(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _g(x) -> str:
    return "—" if x is None else f"{x:.2g}"


if __name__ == "__main__":
    sys.exit(main())
