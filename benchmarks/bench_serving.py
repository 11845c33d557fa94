"""Serving benchmark (see benchmarks/README_serving.md): batch size, frontier and MFU on a mixed cluster,
and one profiled case checked against a measured pipeline.

Part 0, the frontier command's answers on a 4-layer GPT-2 (GPT-2 small's shapes: width 768, 12 heads,
vocabulary 50257, sequence 128; ``tests/torch_models.gpt2``) exported with ``torch.onnx`` with a symbolic
batch, on ``a100:2,t4:2`` at batch 1 (its shape arithmetic gave the DP about two million ideals until
the ONNX front end folded it, 257 since; README_serving.md gives figures from both, re-run 2026-12-06):

* ``placement frontier`` as a process with its default time limit (60 s for the whole command): when
  the first point is printed and when the command ends (goals: 10 s and 2 minutes), the points;
* Ctrl-C at several moments (the front end importing, numba loading, the first point, mid-solve): the
  seconds from SIGINT to the exit and the exit code (goal: 2 s, exit 130).

Part 1, for the zoo ResNet-50 and SqueezeNet and a generated BERT (4 layers, width 512, 8 heads,
sequence 128) on ``a100:2,t4:4,cpu:8`` with roofline costs:

* the auto batch sweep (exact DP per batch size; memory = parameters + outputs): samples/s per batch
  size, the best against batch 1;
* compute utilisation (MFU) per device at the best batch size;
* the throughput–latency frontier at batch 1 and at the best batch size (``--time-limit`` seconds for
  each frontier: points are marked proven or not).

Part 2: SqueezeNet on ``cpu:2`` with ``profile`` costs (onnxruntime on this CPU) at several batch sizes:
the DP's predicted samples/s against a measured ``placement run`` of the same plan.

    python -m benchmarks.bench_serving [--time-limit 10] [--max-points 4] [--samples 24] [--rounds 3]
        [--skip-run] [--skip-models] [--skip-gpt2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time

CLUSTER = "a100:2,t4:4,cpu:8"


def _zoo(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def _models(tmp: str) -> dict[str, str]:
    import onnx

    from graphs.transformer import bert

    path = os.path.join(tmp, "bert_l4.onnx")
    onnx.save(bert(4, hidden=512, heads=8, seq_len=128), path)
    return {"resnet50": _zoo("resnet50"), "squeezenet": _zoo("squeezenet"), "bert-L4": path}


def _gpt2_export(tmp: str) -> str:
    from tests.torch_models import export_onnx, gpt2, tokens

    return export_onnx(gpt2(layers=4), os.path.join(tmp, "gpt2_4l.onnx"), tokens(1, 128, 50257))


def _frontier_process(model: str, argv: list[str] | None = None):
    import subprocess
    import threading

    cmd = [sys.executable, "-m", "placement", "frontier", model, "--devices", "a100:2,t4:2", "--batch-size",
           "1", *(argv or [])]
    root = os.path.join(os.path.dirname(__file__), "..")
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, t0, lines, reader


def _mapped(pid: int, fragment: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return fragment in f.read()
    except OSError:
        return False


def part0(tmp: str) -> dict:
    """The GPT-2 frontier: time to the first point and to the end; Ctrl-C reaction times."""
    import signal

    model = _gpt2_export(tmp)
    proc, t0, lines, reader = _frontier_process(model, ["--out", os.path.join(tmp, "gpt2_f.json")])
    proc.wait()
    total = time.monotonic() - t0
    reader.join(5)
    found = [(t, text) for t, text in lines if text.startswith("found:")]
    with open(os.path.join(tmp, "gpt2_f.json"), encoding="utf-8") as f:
        fr = json.load(f)
    run = {"first_point_s": found[0][0] if found else None, "total_s": total, "exit": proc.returncode,
           "found_lines": len(found),
           # max_load_ms: per batch, in ms (files before 2026-12-07 called it max_load)
           "points": [{**{k: p.get(k) for k in ("samples_per_s", "latency_ms", "proven", "model", "proof")},
                       "max_load_ms": p.get("max_load_ms", p.get("max_load"))} for p in fr["points"]],
           "stopped": fr["stopped"], "proven": fr["proven"], "stage_frontier": fr.get("stage_frontier")}
    print(f"gpt2 frontier: first point {run['first_point_s']:.1f} s, total {total:.1f} s, "
          f"{len(fr['points'])} points", file=sys.stderr)
    moments = {"front end importing": ("_multiarray_umath", 0.0), "numba loading": ("llvmlite", 0.0),
               "first point": ("found:", 0.0), "mid-solve": ("found:", 2.0), "later": ("found:", 6.0)}
    reactions = []
    for name, (fragment, after) in moments.items():
        proc, t0, lines, reader = _frontier_process(model, ["--out", os.path.join(tmp, "gpt2_i.json")])
        end = time.monotonic() + 120
        while time.monotonic() < end and proc.poll() is None:
            if (fragment == "found:" and any(t.startswith("found:") for _, t in lines)) or (
                    fragment != "found:" and _mapped(proc.pid, fragment)):
                break
            time.sleep(0.003)
        time.sleep(after)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        took = time.monotonic() - sent
        err = proc.stderr.read()
        reactions.append({"moment": name, "sent_at_s": sent - t0, "exit_after_s": took,
                          "exit": proc.returncode, "traceback": "Traceback" in err,
                          "last_stderr": err.strip().splitlines()[-1:]})
        print(f"gpt2 Ctrl-C at {name} ({sent - t0:.1f} s): exit {proc.returncode} after {took:.2f} s",
              file=sys.stderr)
    return {"model": "GPT-2 style, 4 layers, width 768, 12 heads, vocab 50257, sequence 128, torch.onnx, "
                     "symbolic batch", "devices": "a100:2,t4:2", "batch_size": 1, "command": run,
            "ctrl_c": reactions}


def part1(models: dict[str, str], time_limit: float, max_points: int) -> list[dict]:
    from graphs.mfu import compute_utilisation
    from placement.serving import batch_frontier, batch_workload, sweep
    from solvers.base import SolveOptions

    out = []
    for name, path in models.items():
        t0 = time.perf_counter()
        sw = sweep(path, CLUSTER, None)
        t_sweep = time.perf_counter() - t0
        rows = [{"batch": b, "samples_per_s": pt.samples_per_s, "latency_ms": pt.latency_ms,
                 "mfu": compute_utilisation(pt.placement.graph, pt.placement.cluster,
                                            pt.placement.assignment).total}
                for b, pt, _ in sw.points if pt is not None]
        best = sw.best
        mfu = compute_utilisation(best.placement.graph, best.placement.cluster, best.placement.assignment)
        per_dev = [{"device": d.name, "mfu": d.mfu, "tflops": d.achieved / 1e12} for d in mfu.devices]
        opts = SolveOptions(time_limit=time_limit)
        fronts = {}
        t0 = time.perf_counter()
        for b in sorted({1, best.batch_size}):
            w = batch_workload(path, CLUSTER, b)
            pts, proven = batch_frontier(w, opts, max_points=max_points)
            fronts[b] = {"complete_and_proven": proven,
                         "points": [{"samples_per_s": p.samples_per_s, "latency_ms": p.latency_ms,
                                     "proven": p.proven} for p in pts]}
        t_front = time.perf_counter() - t0
        out.append({"model": name, "sweep": rows, "stopped": sw.stopped, "best_batch": best.batch_size,
                    "best_samples_per_s": best.samples_per_s,
                    "batch1_samples_per_s": rows[0]["samples_per_s"],
                    "mfu_total": mfu.total, "mfu_devices": per_dev, "frontier": fronts,
                    "sweep_s": t_sweep, "frontier_s": t_front})
        print(f"{name}: best batch {best.batch_size}, {best.samples_per_s:.1f} samples/s vs "
              f"{rows[0]['samples_per_s']:.1f} at batch 1; sweep {t_sweep:.1f} s, frontier {t_front:.1f} s",
              file=sys.stderr)
    return out


def _cli(argv: list[str]) -> dict:
    from placement.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"placement {' '.join(argv)} exited {rc}")
    return json.loads(buf.getvalue())


def part2(batches: list[int], samples: int, tmp: str, rounds: int = 3) -> list[dict]:
    """Profile costs at each batch size, DP placement on two CPU cores, measured pipeline run (the
    median of ``rounds`` runs)."""
    import statistics

    from graphs.onnx_loader import batchable_path

    model = batchable_path(_zoo("squeezenet"), cache_dir=tmp)
    rows = []
    for b in batches:
        res = os.path.join(tmp, f"squeezenet_b{b}.json")
        placed = _cli(["place", model, "--devices", "cpu:2", "--costs", "profile", "--batch-size", str(b),
                       "--out", res, "--json"])
        runs = [_cli(["run", res, model, "--batch-size", str(b), "--samples", str(samples), "--json"])
                for _ in range(rounds)]
        run = sorted(runs, key=lambda r: r["measured_ms_per_batch"])[len(runs) // 2]
        predicted = 1e3 * b / placed["max_load"]
        measured = 1e3 * b / statistics.median(r["measured_ms_per_batch"] for r in runs)
        rows.append({"batch": b, "stages": run["stages"], "predicted_samples_per_s": predicted,
                     "measured_samples_per_s": measured, "error": (predicted - measured) / measured,
                     "predicted_stage_ms": run["predicted_stage_ms_per_batch"],
                     "measured_stage_ms": run["measured_stage_ms_per_batch"]})
        print(f"squeezenet profile b={b}: predicted {predicted:.1f}, measured {measured:.1f} samples/s",
              file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per frontier (10)")
    ap.add_argument("--max-points", type=int, default=4, help="frontier points per batch size (4)")
    ap.add_argument("--samples", type=int, default=24, help="batches streamed per measured run (24)")
    ap.add_argument("--batches", default="1,2,4,8", help="part 2 batch sizes (1,2,4,8)")
    ap.add_argument("--rounds", type=int, default=3, help="part 2: measured runs per batch size, median (3)")
    ap.add_argument("--skip-run", action="store_true", help="skip part 2 (profiling and running)")
    ap.add_argument("--skip-models", action="store_true", help="skip part 1 (sweeps and frontiers)")
    ap.add_argument("--skip-gpt2", action="store_true", help="skip part 0 (the GPT-2 frontier command)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "serving.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        doc = {"cluster": CLUSTER, "time_limit_s": args.time_limit, "max_points": args.max_points,
               "gpt2_frontier": None if args.skip_gpt2 else part0(tmp),
               "models": [] if args.skip_models else part1(_models(tmp), args.time_limit, args.max_points)}
        if not args.skip_run:
            doc["profiled"] = part2([int(x) for x in args.batches.split(",")], args.samples, tmp, args.rounds)

        doc["load_average"] = os.getloadavg()
        doc["cpus"] = os.cpu_count()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
