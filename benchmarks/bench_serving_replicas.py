"""Serving with replicas against one device per stage: the batch-size sweep's best samples/s and the
provision answer (see benchmarks/README_serving.md, "Serving commands with replicas").

For each model and cluster, through the command line (roofline costs, catalog figures):

* ``placement place MODEL --devices C --batch-size auto --max-replicas 1`` (one device per stage: the
  exact DP per batch size, memory = parameters + outputs) and without ``--max-replicas`` (the default,
  the stage model: the exact stage optimum per batch size, layer nodes refined to operators,
  placement/serving_stages.py); the best samples/s of each;
* ``placement provision MODEL --available C --prices EXAMPLE --target-throughput T`` with
  ``--max-replicas 1`` and without it, batch 1, ``T`` = ``--target-share`` of the one-device-per-stage batch-1
  throughput on all of ``C`` (so both reach it): the cheapest allocation, its price and whether it is
  proven.

    python -m benchmarks.bench_serving_replicas [--target-share 0.9] [--out results/serving_replicas.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from benchmarks.bench_serving import _cli, _zoo

CLUSTERS = ("a100:8", "a100:2,t4:4")


def _sweep(path: str, devices: str, replicas: int | None) -> dict:
    t0 = time.perf_counter()
    argv = ["place", path, "--devices", devices, "--batch-size", "auto", "--json"]
    doc = _cli(argv + (["--max-replicas", str(replicas)] if replicas else []))
    sv = doc["serving"]
    rows = [r for r in sv["batch_sizes"] if r["samples_per_s"] is not None]
    best = next(r for r in rows if r["batch_size"] == sv["best_batch_size"])  # the sweep's own choice
    return {"best_batch": best["batch_size"], "best_samples_per_s": best["samples_per_s"],
            "batch1_samples_per_s": rows[0]["samples_per_s"] if rows[0]["batch_size"] == 1 else None,
            "best_status": best["status"], "stopped": sv["stopped"], "seconds": time.perf_counter() - t0,
            "rows": [(r["batch_size"], r["samples_per_s"]) for r in rows]}


def _provision(path: str, devices: str, prices: str, target: float, replicas: int | None) -> dict:
    t0 = time.perf_counter()
    argv = ["provision", path, "--available", devices, "--prices", prices, "--target-throughput",
            repr(target), "--time-limit", "600", "--json"]
    if replicas:
        argv += ["--max-replicas", str(replicas)]
    sec = _cli(argv)["provision"]
    return {"allocation": sec["allocation"], "price_per_hour": sec["price_per_hour"], "proven": sec["proven"],
            "seconds": time.perf_counter() - t0}


def measure(models: dict[str, str], prices: str, share: float, clusters=CLUSTERS) -> list[dict]:
    rows = []
    for name, path in models.items():
        for devices in clusters:
            one = _sweep(path, devices, 1)
            rep = _sweep(path, devices, None)
            target = share * one["batch1_samples_per_s"]
            p1 = _provision(path, devices, prices, target, 1)
            p8 = _provision(path, devices, prices, target, None)
            rows.append({"model": name, "devices": devices, "sweep_one": one, "sweep_replicas": rep,
                         "target": target, "provision_one": p1, "provision_replicas": p8})
            print(f"{name} {devices}: sweep one/stage {one['best_samples_per_s']:.0f} "
                  f"(b{one['best_batch']}), replicas {rep['best_samples_per_s']:.0f} (b{rep['best_batch']}); "
                  f"provision {target:.0f}/s: {p1['allocation']} ${p1['price_per_hour']} vs "
                  f"{p8['allocation']} ${p8['price_per_hour']}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | devices | sweep, one device per stage: best samples/s (batch) | sweep, replicas: "
             "best samples/s (batch) | gain | provision target (samples/s, batch 1) | one device per "
             "stage: cheapest ($/h) | replicas: cheapest ($/h) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, s, p1, p8 = r["sweep_one"], r["sweep_replicas"], r["provision_one"], r["provision_replicas"]

        def alloc(p):
            return f"`{p['allocation']}` {p['price_per_hour']:.4g}" + ("" if p["proven"] else " (not proven)")

        lines.append(f"| {r['model']} | `{r['devices']}` | {o['best_samples_per_s']:.0f} "
                     f"({o['best_batch']}) | {s['best_samples_per_s']:.0f} ({s['best_batch']}) | "
                     f"{s['best_samples_per_s'] / o['best_samples_per_s']:.2f}x | {r['target']:.0f} | "
                     f"{alloc(p1)} | {alloc(p8)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from placement.provision import EXAMPLE_PRICES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target-share", type=float, default=0.9)
    ap.add_argument("--models", default="resnet50,squeezenet")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "serving_replicas.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        prices = os.path.join(tmp, "prices.toml")
        with open(prices, "w", encoding="utf-8") as f:
            f.write(EXAMPLE_PRICES)
        models = {m: _zoo(m) for m in args.models.split(",")}
        rows = measure(models, prices, args.target_share)
    print()
    print(table(rows))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
