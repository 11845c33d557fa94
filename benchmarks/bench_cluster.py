"""Shared-cluster benchmark: one seeded trace of jobs, four allocation policies (README_cluster.md).

The trace draws ``--jobs`` jobs from a pool of models whose one-run curve DP is quick (the reference
workloads' layer and operator graphs that finish in seconds, and the ONNX zoo models, inference and
training). With ``--mix synergy`` (the default) each job also gets an input pipeline (Synergy's job mix,
:func:`input_for`): an image model with heavy augmentation (CPU-bound below about 3 cores per
accelerator), a speech job (storage-bound unless much of its dataset is cached in host memory) or a
language model (light preprocessing, small samples); ``--mix none`` is the model without input pipelines.
Each job's work is set so that it would take ``T`` on an eighth of the cluster with ``T`` log-uniform in
``[--min-hours, --max-hours]`` (times are milliseconds, the ONNX cost model's unit, and the reference
workloads' times are read as milliseconds too), and Poisson arrivals at an offered load of ``--load``
(the work's total eighth-of-the-cluster time over eight times the arrival span). Then it simulates
``ftf``, ``sensitive``, ``proportional`` and ``fifo`` with a lease and prints average JCT, makespan, max
rho and utilisation, with each policy's ratio to ``proportional``.

    python -m benchmarks.bench_cluster [--jobs 40] [--seed 0] [--devices a100:8,cpu:24]
        [--host-memory-gb 500] [--load 2] [--mix synergy] [--lease-minutes 10] [--out-dir DIR]

``--load`` and ``--seed`` also take comma lists (a sweep: one sub-folder per pair, and a summary table).
Writes ``trace.json`` (a job list for ``placement cluster simulate``), ``results.json`` and one plot per
policy under ``--out-dir`` (default ``benchmarks/results/cluster``; plots for the first pair only).
Curves are cached (``--cache-dir``, default ``~/.cache/placement/curves``), so a second run only
simulates.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(HERE, "..", "..", "shared", "workloads"))

REFERENCE = ["LayerGraphs/bert24_inference", "LayerGraphs/bert24_training", "LayerGraphs/resnet50_inference",
             "LayerGraphs/resnet50_training", "OperatorGraphs/resnet50_inference",
             "OperatorGraphs/resnet50_training", "OperatorGraphs/bert_l-3_inference",
             "OperatorGraphs/bert_l-3_training", "OperatorGraphs/bert_l-6_inference"]
ZOO = ["squeezenet", "bvlc_alexnet", "zfnet512", "vgg19", "resnet50", "shufflenet", "inception_v1",
       "densenet121"]
HOUR_MS = 3.6e6

# Synergy-like job mix: the share of each family, and which pool models give its accelerator curves
# (there is no speech model in the pool: speech jobs borrow the transformer encoders', as a
# Transformer/Conformer acoustic model would)
MIX = {"image": 0.4, "speech": 0.3, "language": 0.3}
FAMILY_MODELS = {"image": ("resnet50", "squeezenet", "bvlc_alexnet", "zfnet512", "vgg19", "shufflenet",
                           "inception_v1", "densenet121"),
                 "speech": ("bert_l-3", "bert_l-6"),
                 "language": ("bert24", "bert_l-3", "bert_l-6")}
STORAGE_GBPS = 0.5


def family_of(name: str) -> list[str]:
    """The families whose accelerator curves a pool model may give."""
    return [f for f, models in FAMILY_MODELS.items() if any(m in name.lower() for m in models)]


def input_for(family: str, t1: float, rng) -> dict:
    """An input section for a job of ``family`` whose accelerator pipeline takes ``t1`` ms per sample and
    accelerator (``a`` times its time on ``a`` accelerators, at the ``a`` where that is least), so that its
    sensitivity is relative to its own speed, whatever the cost model says:

    * image: ``cpu_ms_per_sample = k * t1`` with ``k`` uniform in [2.5, 4.5] (CPU-bound below about 3 cores
      per accelerator, heavy augmentation), ImageNet-like samples (110 kB) and dataset (140 GB): storage
      never binds;
    * speech: ``cpu_ms_per_sample = 0.5 * t1``; samples so large that uncached storage feeds only a
      fraction ``phi`` uniform in [0.2, 0.4] of one accelerator's rate; dataset uniform in [100, 250] GB;
    * language: ``cpu_ms_per_sample = 0.2 * t1``, 4 kB samples, a 20 GB dataset: nothing but the
      accelerators binds.
    """
    bw = STORAGE_GBPS * 1e9 / 1e3  # bytes per ms
    if family == "image":
        return {"cpu_ms_per_sample": round(float(rng.uniform(2.5, 4.5)) * t1, 6), "sample_bytes": 110000,
                "dataset_gb": 140}
    if family == "speech":
        phi = float(rng.uniform(0.2, 0.4))
        return {"cpu_ms_per_sample": round(0.5 * t1, 6), "sample_bytes": round(bw * t1 / phi),
                "dataset_gb": round(float(rng.uniform(100, 250)))}
    return {"cpu_ms_per_sample": round(0.2 * t1, 6), "sample_bytes": 4000, "dataset_gb": 20}


def pool() -> tuple[list[dict], list[str]]:
    """Candidate jobs (without samples and arrival) and notes on what is missing."""
    import onnx

    notes = []
    out = []
    base = os.path.join(WORKLOADS, "throughput-inputs")
    if os.path.isdir(base):
        for r in REFERENCE:
            path = os.path.join(base, r + ".json")
            if os.path.exists(path):
                out.append({"name": r.split("/")[0][:5].lower() + "-" + r.split("/")[1], "model": path})
    else:
        notes.append(f"reference workloads not found under {base}: the trace uses the ONNX zoo only")
    zoo = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for z in ZOO:
        path = os.path.join(zoo, f"light_{z}.onnx")
        if os.path.exists(path):
            out.append({"name": z, "model": path, "training": False})
            out.append({"name": z + "-train", "model": path, "training": True})
    return out, notes


def make_trace(args, cache) -> tuple[dict, list[str]]:
    import numpy as np

    from placement.cluster.curves import job_curve
    from placement.cluster.formats import parse_jobs
    from placement.cluster.inputs import job_rates
    from placement.cluster.policies import Capacity, fair_share_time

    cands, notes = pool()
    cluster = {"devices": args.devices, "host_memory_gb": args.host_memory_gb}
    if args.mix == "synergy":
        cluster["storage_gbps"] = STORAGE_GBPS
    jl = parse_jobs({"cluster": cluster, "jobs": [dict(c, samples=1) for c in cands]})
    cap = Capacity.of(jl.cluster)
    t0 = time.perf_counter()
    stages = [job_curve(j, jl.cluster, cache=cache) for j in jl.jobs]
    notes.append(f"{len(cands)} candidate models; their curves took {time.perf_counter() - t0:.1f} s "
                 f"(cache hits {cache.hits}, computed {cache.misses})")
    rng = np.random.default_rng(args.seed)
    n = args.jobs
    if args.mix == "synergy":
        fams = list(MIX)
        family = rng.choice(fams, size=n, p=[MIX[f] for f in fams]).tolist()
        pick = [int(rng.choice([i for i, c in enumerate(cands)  # training jobs only, as in Synergy
                                if f in family_of(c["name"]) and "train" in c["name"]])) for f in family]
    else:
        family = [None] * n
        pick = rng.integers(len(cands), size=n).tolist()
    hours = np.exp(rng.uniform(math.log(args.min_hours), math.log(args.max_hours), size=n))
    work = hours * HOUR_MS  # time on an eighth of the cluster
    span = work.sum() / (8 * args.load)
    gaps = rng.exponential(span / n, size=n)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    accel = next(t for t, h in enumerate(cap.host) if not h)
    jobs = []
    for k, (i, f, w, a) in enumerate(zip(pick, family, work.tolist(), arrivals.tolist())):
        c = dict(cands[i])
        c["name"] = f"{k:02d}-{f + '-' if f else ''}{c['name']}"
        if f is not None:  # per-accelerator time: a times the time on a accelerators, at the best a
            t1 = min(a * stages[i].values[tuple(a if t == accel else 0 for t in range(len(cap.kinds)))]
                     for a in range(1, stages[i].limits[accel] + 1))
            c["input"] = input_for(f, t1, rng)
        spec = parse_jobs({"cluster": cluster, "jobs": [dict(c, samples=1)]}).jobs[0]
        eighth = fair_share_time(job_rates(spec, jl.cluster, cache=cache), cap, 8)
        c["samples"] = float(round(w / eighth))
        c["arrival"] = round(a, 3)
        jobs.append(c)
    trace = {"cluster": cluster, "lease": args.lease_minutes * 60e3, "seed": args.seed, "jobs": jobs}
    return trace, notes


def run_one(args, cache, out_dir: str, plots: bool) -> dict:
    """Make the trace for ``args.load`` and ``args.seed``, simulate every policy, write the trace, the
    results and (``plots``) one picture per policy to ``out_dir``; return ``{policy: SimResult}``."""
    from placement.cluster.formats import parse_jobs
    from placement.cluster.inputs import job_rates
    from placement.cluster.policies import Capacity
    from placement.cluster.simulate import SimJob, plot_allocations, simulate
    from placement.export import write_json

    os.makedirs(out_dir, exist_ok=True)
    trace, notes = make_trace(args, cache)
    trace_path = os.path.join(out_dir, "trace.json")
    write_json(trace_path, trace)
    jl = parse_jobs(trace, source=trace_path)
    cap = Capacity.of(jl.cluster)
    curves = [job_rates(j, jl.cluster, cache=cache) for j in jl.jobs]
    jobs = [SimJob(j.name, c, j.samples, j.arrival, None, j.model) for j, c in zip(jl.jobs, curves)]
    for n in notes:
        print(f"note: {n}")
    last = max(j.arrival for j in jobs) / HOUR_MS
    print(f"trace: {len(jobs)} jobs on {jl.cluster.describe()}, mix {args.mix}, load {args.load:g}, lease "
          f"{jl.lease / 60e3:g} min, seed {args.seed}, last arrival {last:.1f} h")
    results = {}
    for pol in args.policies.split(","):
        t0 = time.perf_counter()
        r = simulate(jobs, cap, pol, lease=jl.lease, time_limit=args.time_limit)
        wall = time.perf_counter() - t0
        results[pol] = (r, wall)
        print(f"{pol:>12}: avg JCT {r.avg_jct / HOUR_MS:7.2f} h, makespan {r.makespan / HOUR_MS:7.2f} h, "
              f"max rho {r.max_rho:6.2f}, utilisation {100 * r.utilisation:5.1f}% "
              f"({r.decisions} decisions, {wall:.0f} s)", flush=True)
        if plots:
            try:
                plot_allocations(r, os.path.join(out_dir, f"{pol}.png"))
            except ImportError as e:
                print(f"note: {e}", file=sys.stderr)
    table = _table(results, cap)
    print()
    print(table)
    print()
    write_json(os.path.join(out_dir, "results.json"),
               {"args": vars(args), "notes": notes, "table": table,
                "results": {pol: r.to_dict(curves, [j.model for j in jl.jobs])
                            for pol, (r, _) in results.items()}})
    return {pol: r for pol, (r, _) in results.items()}


def _table(results, cap) -> str:
    base = results.get("proportional")
    rows = ["| policy | avg JCT (h) | makespan (h) | max rho | mean rho | utilisation (accel / cpu) | "
            "avg JCT vs proportional | decisions | sim wall s |", "|---|---|---|---|---|---|---|---|---|"]
    hosts = [k for k, h in zip(cap.kinds, cap.host) if h]
    for pol, (r, wall) in results.items():
        cpu = r.utilisation_per_kind()[hosts[0]] if hosts else math.nan
        ratio = f"{base[0].avg_jct / r.avg_jct:.2f}x lower" if base else "-"
        mean_rho = sum(j.rho for j in r.jobs) / len(r.jobs)
        rows.append(f"| {pol} | {r.avg_jct / HOUR_MS:.2f} | {r.makespan / HOUR_MS:.2f} | {r.max_rho:.2f} | "
                    f"{mean_rho:.2f} | {100 * r.utilisation:.0f}% / {_pct(cpu)} | {ratio} | "
                    f"{r.decisions} | {wall:.0f} |")
    return "\n".join(rows)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if math.isfinite(x) else "-"


def _margins(results: dict) -> str:
    """Who wins avg JCT and max rho, by how much over the runner-up; sensitive vs proportional."""
    def win(metric):
        order = sorted(results, key=lambda p: metric(results[p]))
        if len(order) < 2:
            return order[0], math.nan
        return order[0], metric(results[order[1]]) / metric(results[order[0]])

    jct, jm = win(lambda r: r.avg_jct)
    rho, rm = win(lambda r: r.max_rho)
    out = (f"lowest avg JCT: {jct} ({jm:.2f}x below the next); "
           f"lowest max rho: {rho} ({rm:.2f}x below the next)")
    if "sensitive" in results and "proportional" in results:
        out += (f"; sensitive vs proportional avg JCT: "
                f"{results['proportional'].avg_jct / results['sensitive'].avg_jct:.2f}x lower")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_cluster", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--seed", default="0", help="seed, or a comma list to sweep (default 0)")
    p.add_argument("--devices", default="a100:8,cpu:24", help="default: Synergy's server, 3 cores per GPU")
    p.add_argument("--host-memory-gb", type=float, default=500.0)
    p.add_argument("--mix", choices=("synergy", "none"), default="synergy",
                   help="synergy: image / speech / language input pipelines; none: no input pipelines")
    p.add_argument("--load", default="2", help="offered load, or a comma list to sweep (default 2)")
    p.add_argument("--min-hours", type=float, default=0.5)
    p.add_argument("--max-hours", type=float, default=8.0)
    p.add_argument("--lease-minutes", type=float, default=10.0)
    p.add_argument("--policies", default="ftf,sensitive,proportional,fifo")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per allocation MILP")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "cluster"))
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)

    from placement.cluster.curves import CurveCache, default_cache_dir

    cache = CurveCache(args.cache_dir or default_cache_dir())
    loads = [float(x) for x in str(args.load).split(",")]
    seeds = [int(x) for x in str(args.seed).split(",")]
    grid = [(ld, sd) for sd in seeds for ld in loads]
    summary = []
    for k, (ld, sd) in enumerate(grid):
        one = argparse.Namespace(**{**vars(args), "load": ld, "seed": sd})
        out = args.out_dir if len(grid) == 1 else os.path.join(args.out_dir, f"load{ld:g}-seed{sd}")
        res = run_one(one, cache, out, plots=not args.no_plots and k == 0)
        summary.append((ld, sd, res))
        print(_margins(res))
        print()
    if len(grid) > 1:
        pols = args.policies.split(",")
        print("| load | seed | " + " | ".join(f"{p} avg JCT / max rho" for p in pols) + " |")
        print("|---|---|" + "---|" * len(pols))
        for ld, sd, res in summary:
            cells = [f"{res[p].avg_jct / HOUR_MS:.2f} h / {res[p].max_rho:.2f}" for p in pols]
            print(f"| {ld:g} | {sd} | " + " | ".join(cells) + " |")
        for ld, sd, res in summary:
            print(f"load {ld:g}, seed {sd}: {_margins(res)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
