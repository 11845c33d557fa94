"""``placement run`` of replicated CPU plans against the same stages unreplicated: measured throughput
on this machine (ONNX model zoo's light ResNet-50, random weights, one onnxruntime thread per worker).

    python -m benchmarks.bench_stage_run [--samples 40] [--repeats 3] [--model resnet50]

Plans (operators in the front end's topological order, cut by operator count):

* ``1 stage``: d = 1 (one process) vs d = 2 (pure data parallelism, two processes);
* ``2 stages`` (a third of the operators, then the rest): d = (1, 1) vs (1, 2).

Runs alternate between the plans of a pair and repeat; the table gives the median and the range of the
measured time per sample, and the machine's load average (other work on the same cores is noise).
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np


def _plan(names: list[str], fractions: list[float], ds: list[int]) -> dict:
    bounds = (np.cumsum([0.0] + fractions) * len(names)).round().astype(int)
    return {"format": "placement-replicated", "stages": [
        {"nodes": names[bounds[k]:bounds[k + 1]], "dataParallelDegree": d, "tensorParallelDegree": 1,
         "kind": "cpu"} for k, d in enumerate(ds)]}


def main(argv: list[str] | None = None) -> int:
    import onnx

    from graphs.onnx_loader import load_onnx
    from placement.onnx_export import generated_weights, materialize, random_feeds, session, split_stages
    from placement.pipeline_run import run_pipeline

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="light model of onnx's test zoo (default resnet50)")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{args.model}.onnx")
    model = onnx.load(path)
    names = list(load_onnx(path).names)
    weights = generated_weights(model)
    whole = materialize(model, weights)
    sess = session(whole, optimize=False, threads=1)
    feeds = [random_feeds(whole, sess, seed=i) for i in range(2)]
    out_names = [o.name for o in sess.get_outputs()]
    reference = [dict(zip(out_names, sess.run(out_names, f))) for f in feeds]
    del sess
    pairs = [("1 stage", [1.0], [1], [2]), ("2 stages", [1 / 3, 2 / 3], [1, 1], [1, 2])]
    print(f"{args.model}: {len(names)} operators, {args.samples} samples per run, {args.repeats} repeats, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    print("| plan | d | workers | ms/sample median | min | max | stage ms/sample (median run) | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for label, fr, base, rep in pairs:
        times: dict[tuple, list] = {tuple(base): [], tuple(rep): []}
        for _ in range(args.repeats):
            for ds in (base, rep):
                split = split_stages(model, _plan(names, fr, ds))
                manifest = split.manifest()
                parts = [materialize(s.model, weights) for s in split.submodels]
                run = run_pipeline(parts, manifest, feeds, samples=args.samples, reference=reference)
                assert max(run.max_abs_diff.values()) <= 1e-4
                times[tuple(ds)].append((run.ms_per_sample, run.stage_ms, run.workers))
        med = {}
        for ds, rows in times.items():
            ms = [r[0] for r in rows]
            med[ds] = statistics.median(ms)
            mid = sorted(rows)[len(rows) // 2]
            speed = "" if list(ds) == base else f"{med[tuple(base)] / med[ds]:.2f}x"
            print(f"| {label} | {', '.join(map(str, ds))} | {mid[2]} | {med[ds]:.1f} | {min(ms):.1f} | "
                  f"{max(ms):.1f} | {', '.join(f'{x:.1f}' for x in mid[1])} | {speed} |")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
