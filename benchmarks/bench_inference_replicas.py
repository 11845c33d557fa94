"""The default plan (replicas) against one device per stage (see benchmarks/README_serving.md,
"Replicas", and benchmarks/README_stages.md, "The default against one device per stage, training").

For each model and cluster, ``placement place`` twice on the same devices and costs (roofline, the
catalog's figures): the default (the stage model: stages replicate where devices would sit idle; layer
nodes refined to operators) and ``--max-replicas 1`` (one device per stage, the NeurIPS 2020 model).
Samples/s = 1000 / (ms per sample) for the stage plan, 1000 x batch / max-load for the
one-device-per-stage plan (its figures are per run of a batch). The stage plan should never be slower.

* inference (default): zoo ResNet-50 and SqueezeNet and the project's BERT-L4 on four clusters;
* ``--training``: ``torch.onnx`` exports of a 4-layer GPT-2 (GPT-2 small's shapes) and a 4-layer BERT
  (BERT-base's, torch's ``nn.TransformerEncoderLayer``), 128 tokens, on ``a100:8,t4:8`` and
  ``h100:4,l4:16`` (the clusters of item 8 of the one-model issue), each run under ``--time-limit``.

    python -m benchmarks.bench_inference_replicas [--batch-size 1] [--out results/inference_replicas.json]
    python -m benchmarks.bench_inference_replicas --training [--time-limit 120]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from benchmarks.bench_serving import _cli, _models

CLUSTERS = ("a100:8", "a100:2,t4:4", "a100:2,t4:4,cpu:8", "h100:2,l4:4")


TRAINING_CLUSTERS = ("a100:8,t4:8", "h100:4,l4:16")


def _training_models(tmp: str) -> dict[str, str]:
    from tests.torch_models import bert, export_onnx, gpt2, tokens

    return {"GPT-2 4L (torch.onnx)": export_onnx(gpt2(layers=4), os.path.join(tmp, "gpt2.onnx"),
                                                 tokens(1, 128, 50257)),
            "BERT 4L (torch.onnx)": export_onnx(bert(layers=4), os.path.join(tmp, "bert.onnx"),
                                                tokens(1, 128, 30522))}


def measure(models: dict[str, str], clusters=CLUSTERS, batch: int = 1, *, training: bool = False,
            time_limit: float | None = None) -> list[dict]:
    rows = []
    for name, path in models.items():
        for devices in clusters:
            base = ["place", path, "--devices", devices, "--batch-size", str(batch), "--json"]
            base += ["--training"] if training else []
            base += ["--time-limit", repr(time_limit)] if time_limit is not None else []
            t0 = time.perf_counter()
            stages = _cli(base)
            t_stages = time.perf_counter() - t0
            t0 = time.perf_counter()
            single = _cli(base + ["--max-replicas", "1"])
            t_single = time.perf_counter() - t0
            rate_stages = 1.0 / stages["objective"]  # seconds per sample
            rate_single = 1000.0 * batch / single["max_load"]  # ms per run of the batch
            plan = ", ".join(f"{s['kind']}×{s['dataParallelDegree']}" for s in stages["stages"])
            rows.append({"model": name, "devices": devices, "batch": batch, "training": training,
                         "replicas_granularity": stages["problem"].get("granularity"),
                         "replicas_message": stages.get("message"),
                         "replicas_samples_per_s": rate_stages, "replicas_status": stages["status"],
                         "replicas_plan": plan, "replicas_s": t_stages,
                         "single_samples_per_s": rate_single, "single_status": single["status"],
                         "single_stages": len(single["stages"]), "single_s": t_single,
                         "gain": rate_stages / rate_single})
            r = rows[-1]
            print(f"{name:10s} {devices:18s} replicas {rate_stages:10.1f}/s ({stages['status']}, {plan}) "
                  f"one per stage {rate_single:10.1f}/s ({single['status']}, {len(single['stages'])} "
                  f"stages)  gain {r['gain']:.2f}x", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | devices | replicas: samples/s | its stages (kind × d) | one device per stage: "
             "samples/s | its stages | gain |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | `{r['devices']}` | {r['replicas_samples_per_s']:.0f} "
                     f"({r['replicas_status']}) | {r['replicas_plan']} | {r['single_samples_per_s']:.0f} "
                     f"({r['single_status']}) | {r['single_stages']} | {r['gain']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, default=1, help="value of the symbolic batch (1)")
    ap.add_argument("--training", action="store_true", help="the training exports and clusters")
    ap.add_argument("--time-limit", type=float, default=None, help="per command (default: none; "
                    "--training: 120 s)")
    ap.add_argument("--out", default=None, help="default results/inference_replicas.json, or "
                    "results/training_default.json with --training")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(__file__), "results", "training_default.json"
                                   if args.training else "inference_replicas.json")
    with tempfile.TemporaryDirectory() as tmp:
        if args.training:
            limit = 120.0 if args.time_limit is None else args.time_limit
            rows = measure(_training_models(tmp), TRAINING_CLUSTERS, args.batch_size, training=True,
                           time_limit=limit)
        else:
            rows = measure(_models(tmp), batch=args.batch_size, time_limit=args.time_limit)
    print()
    print(table(rows))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
