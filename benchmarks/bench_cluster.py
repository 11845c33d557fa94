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
``ftf``, ``joint`` (formerly ``sensitive``), ``even`` (formerly ``proportional``) and ``fifo`` with a lease
and prints average JCT, makespan, max rho and utilisation, with each policy's ratio to ``even``.

    python -m benchmarks.bench_cluster [--jobs 40] [--seed 0] [--devices a100:8,cpu:24]
        [--host-memory-gb 500] [--load 2] [--mix synergy] [--lease-minutes 10] [--out-dir DIR]

``--load`` and ``--seed`` also take comma lists (a sweep: one sub-folder per pair, and a summary table).
Writes ``trace.json`` (a job list for ``placement cluster simulate``), ``results.json`` and one plot per
policy under ``--out-dir`` (default ``benchmarks/results/cluster``; plots for the first pair only).
Curves are cached (``--cache-dir``, default ``~/.cache/placement/curves``), so a second run only
simulates.

``--synergy`` runs Synergy's own semantics instead (:mod:`placement.cluster.synergy`), in one run: the
shared trace ``../shared/workloads/synergy/`` (300 jobs, 2 servers, FIFO) under every base scheduler and
allocation, printed beside Synergy's own figures for it; then held-out Philly-like traces drawn over
the same profiles (:mod:`placement.cluster.traces`: other seeds, loads and Synergy's multi-GPU mix);
then, with ``--scale``, a 1,000-job trace on 128 GPUs, timed. Plots of the JCT distributions per policy
go to ``--out-dir`` when matplotlib is installed.

    python -m benchmarks.bench_cluster --synergy [--scale] [--out-dir DIR]

``--replicas`` compares ONNX jobs' curves on the stage model (replicas, the default) with their
one-device-per-stage curves (``"max_replicas": 1``): curve points of zoo models, inference and training,
on ``a100:8`` and ``a100:4,t4:4``, and a short ``a100:8`` simulation (``--jobs`` zoo jobs, seeded) of
both under ``ftf`` and ``even``, average JCT and makespan (:func:`replicas_main`).

    python -m benchmarks.bench_cluster --replicas [--jobs 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time

from placement.cluster.formats import HOUR_MS

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(HERE, "..", "..", "shared", "workloads"))

REFERENCE = ["LayerGraphs/bert24_inference", "LayerGraphs/bert24_training", "LayerGraphs/resnet50_inference",
             "LayerGraphs/resnet50_training", "OperatorGraphs/resnet50_inference",
             "OperatorGraphs/resnet50_training", "OperatorGraphs/bert_l-3_inference",
             "OperatorGraphs/bert_l-3_training", "OperatorGraphs/bert_l-6_inference"]
ZOO = ["squeezenet", "bvlc_alexnet", "zfnet512", "vgg19", "resnet50", "shufflenet", "inception_v1",
       "densenet121"]
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
            # the policy tables of README_cluster.md were measured on one-device-per-stage curves: the
            # trace keeps them (its samples and input pipelines follow the curves); --replicas compares
            # the stage-model curves that ONNX jobs get by default
            out.append({"name": z, "model": path, "training": False, "max_replicas": 1})
            out.append({"name": z + "-train", "model": path, "training": True, "max_replicas": 1})
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
        name, knob = policy_spec(pol)
        r = simulate(jobs, cap, name, lease=jl.lease, time_limit=args.time_limit, fairness=knob)
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


def policy_spec(spec: str) -> tuple[str, float | None]:
    """``ftf@F``: policy ``ftf`` with Themis's auction at fairness knob ``F``; any other name as is."""
    name, _, knob = spec.partition("@")
    return name, (float(knob) if knob else None)


def _p99(r) -> float:
    import numpy as np

    return float(np.percentile([j.jct for j in r.jobs], 99))


def _table(results, cap) -> str:
    base = results.get("even")
    rows = ["| policy | avg JCT (h) | p99 JCT (h) | makespan (h) | max rho | mean rho | "
            "utilisation (accel / cpu) | avg JCT vs even | decisions | sim wall s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    hosts = [k for k, h in zip(cap.kinds, cap.host) if h]
    for pol, (r, wall) in results.items():
        cpu = r.utilisation_per_kind()[hosts[0]] if hosts else math.nan
        ratio = f"{base[0].avg_jct / r.avg_jct:.2f}x lower" if base else "-"
        mean_rho = sum(j.rho for j in r.jobs) / len(r.jobs)
        rows.append(f"| {pol} | {r.avg_jct / HOUR_MS:.2f} | {_p99(r) / HOUR_MS:.2f} | "
                    f"{r.makespan / HOUR_MS:.2f} | {r.max_rho:.3f} | {mean_rho:.3f} | "
                    f"{100 * r.utilisation:.0f}% / {_pct(cpu)} | {ratio} | {r.decisions} | {wall:.0f} |")
    return "\n".join(rows)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if math.isfinite(x) else "-"


def _margins(results: dict) -> str:
    """Who wins avg JCT and max rho, by how much over the runner-up; joint vs even."""
    def win(metric):
        order = sorted(results, key=lambda p: metric(results[p]))
        if len(order) < 2:
            return order[0], math.nan
        return order[0], metric(results[order[1]]) / metric(results[order[0]])

    jct, jm = win(lambda r: r.avg_jct)
    rho, rm = win(lambda r: r.max_rho)
    out = (f"lowest avg JCT: {jct} ({jm:.2f}x below the next); "
           f"lowest max rho: {rho} ({rm:.2f}x below the next)")
    if "joint" in results and "even" in results:
        out += (f"; joint vs even avg JCT: "
                f"{results['even'].avg_jct / results['joint'].avg_jct:.2f}x lower")
    return out


# --------------------------------------------------------------------------- Synergy's semantics
SYNERGY_TRACE = os.path.join(WORKLOADS, "synergy", "trace_2servers_9jph.json")
# Synergy's own simulator on the shared trace (FORMAT.md next to it), hours
SYNERGY_FIGURES = {"fifo+proportional": {"avg": 49.27, "median": 49.31, "p99": 180.44, "makespan": 408.0},
                   "fifo+tune": {"avg": 34.45, "median": 31.71, "p99": 152.95, "makespan": 380.8}}
ROUND_POLICIES = ("fifo+proportional", "fifo+tune", "fifo+opt", "las+proportional", "las+tune",
                  "srtf+proportional", "srtf+tune", "ftf+proportional", "ftf+tune")


def _synergy_run(jobs, cluster, specs, label, progress=False):
    """Simulate every ``base+allocation`` in ``specs``; ``{spec: (SimResult, wall seconds)}``."""
    from placement.cluster.command import _Bar
    from placement.cluster.synergy import simulate_rounds

    out = {}
    for spec in specs:
        base, alloc = spec.split("+")
        bar = _Bar(f"{label} {spec}") if progress else None
        t0 = time.perf_counter()
        out[spec] = (simulate_rounds(jobs, cluster, alloc, base=base, progress=bar), time.perf_counter() - t0)
        if bar is not None:
            bar.close()
    return out


def _event_run(jl, policies, lease):
    """The event-driven curve policies (``ftf``: max rho minimised at every decision, ``joint``) on the
    same jobs, as one pool of devices (they have no servers)."""
    from placement.cluster.inputs import job_rates
    from placement.cluster.policies import Capacity
    from placement.cluster.simulate import SimJob, simulate

    cap = Capacity.of(jl.cluster)
    jobs = [SimJob(j.name, job_rates(j, jl.cluster), j.samples, j.arrival) for j in jl.jobs]
    out = {}
    for pol in policies:
        t0 = time.perf_counter()
        name, knob = policy_spec(pol)
        out[pol] = (simulate(jobs, cap, name, lease=lease, time_limit=10.0, fairness=knob),
                    time.perf_counter() - t0)
    return out


def _synergy_table(results, figures=None) -> str:
    import numpy as np

    rows = ["| policy | avg JCT h | Synergy's | median h | p99 h | Synergy's p99 | makespan h | Synergy's | "
            "max rho | mean rho | avg JCT gain over fifo+proportional | TUNE / OPT bound (mean, min) | "
            "wall s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = results.get("fifo+proportional")
    for spec, (r, wall) in results.items():
        jct = [j.jct / HOUR_MS for j in r.jobs]
        f = (figures or {}).get(spec, {})
        ratio = f"{base[0].avg_jct / r.avg_jct:.2f}x" if base else "-"
        st = r.stats
        bound = (f"{st['tune_over_opt_mean']:.3f}, {st['tune_over_opt_min']:.3f}"
                 if st.get("tune_over_opt_mean") is not None else "-")
        rows.append(f"| {spec} | {r.avg_jct / HOUR_MS:.2f} | {f.get('avg', '-')} | {np.median(jct):.2f} | "
                    f"{np.percentile(jct, 99):.2f} | {f.get('p99', '-')} | {r.makespan / HOUR_MS:.1f} | "
                    f"{f.get('makespan', '-')} | {r.max_rho:.3f} | "
                    f"{sum(j.rho for j in r.jobs) / len(r.jobs):.3f} | {ratio} | {bound} | {wall:.0f} |")
    return "\n".join(rows)


def _checks(results, figures=None) -> list[str]:
    """The issue's measured goals on one trace, each line PASS or FAIL with the numbers."""
    out = []
    prop, tune = results["fifo+proportional"][0], results["fifo+tune"][0]
    ours = prop.avg_jct / tune.avg_jct
    if figures:
        want = figures["fifo+proportional"]["avg"]
        dev = prop.avg_jct / HOUR_MS / want - 1
        out.append(f"{'PASS' if abs(dev) <= 0.03 else 'FAIL'}: GPU-proportional avg JCT "
                   f"{prop.avg_jct / HOUR_MS:.2f} h vs Synergy's {want} h ({100 * dev:+.1f}%, goal within "
                   f"3%)")
        theirs = want / figures["fifo+tune"]["avg"]
        strict = (ours - 1) >= 0.8 * (theirs - 1)  # the stricter reading: 0.8 of the reduction
        ok = ours >= 0.8 * theirs and strict
        out.append(f"{'PASS' if ok else 'FAIL'}: TUNE's gain {ours:.3f}x vs Synergy's "
                   f"{theirs:.3f}x: {ours / theirs:.2f} of it as a ratio, {(ours - 1) / (theirs - 1):.2f} of "
                   f"it as the reduction (goal: at least 0.8)")
    else:
        out.append(f"{'PASS' if ours >= 1 - 1e-9 else 'FAIL'}: TUNE's gain over GPU-proportional {ours:.3f}x "
                   f"(no Synergy figure for this trace)")
    ftf = min((s for s in results if s.startswith("ftf")), key=lambda s: results[s][0].max_rho)
    # the schedules: every policy but OPT, whose fractional rates on the pooled cluster are a bound
    other = min((s for s in results if not s.startswith("ftf") and not s.endswith("+opt")),
                key=lambda s: results[s][0].max_rho)
    a, b = results[ftf][0].max_rho, results[other][0].max_rho
    verdict = "PASS" if a <= b * (1 + 1e-9) else "FAIL"
    out.append(f"{verdict}: lowest max rho of the schedules: best ftf {ftf} {a:.3f}, best other {other} "
               f"{b:.3f}" + (" (a tie)" if math.isclose(a, b) else ""))
    if "ftf+tune" in results and ftf != "ftf+tune":  # also Themis within Synergy's rounds and servers
        rounds = [s for s in results if "+" in s and not s.endswith("+opt") and s != "ftf+tune"]
        r_best = min(rounds, key=lambda s: results[s][0].max_rho)
        a_r, b_r = results["ftf+tune"][0].max_rho, results[r_best][0].max_rho
        tie = " (a tie)" if math.isclose(a_r, b_r) else ""
        out.append(f"{'PASS' if a_r <= b_r * (1 + 1e-9) else 'FAIL'}: lowest max rho of the round schedules: "
                   f"ftf+tune {a_r:.3f}, best other {r_best} {b_r:.3f}{tie}")
    if "fifo+opt" in results:
        o = results["fifo+opt"][0].max_rho
        out.append(f"{'note' if o < a * (1 - 1e-9) else 'PASS'}: the OPT bound (fractional, pooled, not a "
                   f"schedule) has max rho {o:.3f}"
                   + (f", below ftf's {a:.3f}" if o < a * (1 - 1e-9) else ""))
    return out


def _summary_table(summary) -> str:
    """One row per trace: FIFO's GPU-proportional and TUNE average JCT, TUNE's gain, OPT's, and max rho
    per policy (the lowest in bold)."""
    specs = [s for s in ROUND_POLICIES if s != "fifo+opt"]
    rows = ["| trace | fifo+proportional avg JCT h | fifo+tune | TUNE gain | fifo+opt | "
            + " | ".join(f"max rho {s}" for s in specs) + " | max rho fifo+opt (bound) |",
            "|---|---|---|---|---|" + "---|" * (len(specs) + 1)]
    for label, res in summary:
        p, t, o = (res[k][0].avg_jct / HOUR_MS for k in ("fifo+proportional", "fifo+tune", "fifo+opt"))
        low = min(res[s][0].max_rho for s in specs)
        cells = [(f"**{res[s][0].max_rho:.2f}**" if res[s][0].max_rho <= low * (1 + 1e-9)
                  else f"{res[s][0].max_rho:.2f}") for s in specs]
        rows.append(f"| {label} | {p:.2f} | {t:.2f} | {p / t:.3f}x | {o:.2f} | " + " | ".join(cells)
                    + f" | {res['fifo+opt'][0].max_rho:.2f} |")
    return "\n".join(rows)


def _jct_plot(results, path: str, title: str) -> str | None:
    """Empirical CDFs of JCT per policy (matplotlib, optional)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    import numpy as np

    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for spec, (r, _) in results.items():
        jct = np.sort([j.jct / HOUR_MS for j in r.jobs])
        ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=spec, linewidth=1.2)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (h, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    return path


def synergy_main(args) -> int:
    from placement.cluster.command import synergy_jobs
    from placement.cluster.formats import parse_jobs, read_jobs, with_servers
    from placement.cluster.traces import load_for, philly_trace, profiles
    from placement.export import write_json

    if not os.path.exists(SYNERGY_TRACE):
        print(f"error: Synergy's trace not found at {SYNERGY_TRACE} (set PLACEMENT_WORKLOADS)",
              file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    jl = read_jobs(SYNERGY_TRACE)
    chosen = None if args.held_out is None else {int(k) for k in args.held_out.split(",")}
    knobs = tuple(f"ftf@{f}" for f in args.ftf_fairness.split(",") if f)
    summary = []
    if chosen is None or 0 in chosen:
        cl = with_servers(jl.cluster, 2)
        t0 = time.perf_counter()
        jobs = synergy_jobs(jl, cl)
        print(f"shared trace: {len(jobs)} jobs on {cl.describe()}, 2 servers, rounds of 300 s "
              f"(curves {time.perf_counter() - t0:.1f} s)")
        res = _synergy_run(jobs, cl, ROUND_POLICIES, "shared", args.progress)
        if args.event_driven:
            res.update(_event_run(jl, ("ftf",) + knobs + ("joint",), 300e3))
        print(_synergy_table(res, SYNERGY_FIGURES))
        for line in _checks(res, SYNERGY_FIGURES):
            print(line)
        _jct_plot(res, os.path.join(args.out_dir, "jct-shared.png"),
                  "JCT distribution, Synergy's shared trace")
        print()
        summary.append(("Synergy's shared trace (300 jobs)", res))
    profs = profiles(jl, cores_per_gpu=3, memory_gb_per_gpu=62.5)
    held = [("single, seed 1", dict(jobs=300, gpu_mix="single", seed=1, per_128=9.0)),
            ("single, seed 2, load 7/h per 128", dict(jobs=300, gpu_mix="single", seed=2, per_128=7.0)),
            ("single, 200 jobs, seed 3", dict(jobs=200, gpu_mix="single", seed=3, per_128=9.0)),
            ("multi-GPU mix, 150 jobs, seed 4", dict(jobs=150, gpu_mix="multi", seed=4, per_128=9.0)),
            ("few jobs: 12, nobody queues", dict(jobs=12, gpu_mix="single", seed=5, per_128=1.0)),
            ("30 jobs single, load 20/h per 128", dict(jobs=30, gpu_mix="single", seed=103, per_128=20.0)),
            ("30 jobs multi-GPU, 9/h per 128", dict(jobs=30, gpu_mix="multi", seed=103, per_128=9.0))]
    for k, (label, kw) in enumerate(held):
        if chosen is not None and k + 1 not in chosen:
            continue
        per_128 = kw.pop("per_128")
        doc = philly_trace(profs, jobs_per_hour=load_for(16, per_128), devices="v100:16,cpu:48",
                           host_memory_gb=1000, servers=2, cpu_limit=24, **kw)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", label.split(",")[0]).strip("-") + f"-seed{kw['seed']}"
        write_json(os.path.join(args.out_dir, f"trace-{slug}.json"), doc)
        hjl = parse_jobs(doc)
        hjobs = synergy_jobs(hjl, hjl.cluster)
        hres = _synergy_run(hjobs, hjl.cluster, ROUND_POLICIES, label, args.progress)
        if args.event_driven_held_out and len(hjobs) <= 40:
            hres.update(_event_run(hjl, ("ftf",) + knobs + ("joint", "even", "fifo"), 300e3))
        print(f"held-out: {label} ({len(hjobs)} jobs, {per_128:g} jobs/h per 128 GPUs)")
        print(_synergy_table(hres))
        for line in _checks(hres):
            print(line)
        _jct_plot(hres, os.path.join(args.out_dir, f"jct-{slug}.png"), f"JCT distribution, {label}")
        summary.append((label, hres))
        print()
    print(_summary_table(summary))
    print()
    if args.scale:
        doc = philly_trace(profs, jobs=1000, jobs_per_hour=load_for(128), devices="v100:128,cpu:384",
                           host_memory_gb=8000, servers=16, seed=7, gpu_mix="multi", cpu_limit=24)
        write_json(os.path.join(args.out_dir, "trace-scale-1000.json"), doc)  # for the CLI as well
        t0 = time.perf_counter()
        sjl = parse_jobs(doc)
        sjobs = synergy_jobs(sjl, sjl.cluster)
        built = time.perf_counter() - t0
        sres = _synergy_run(sjobs, sjl.cluster, ("fifo+proportional", "fifo+tune", "ftf+tune"), "1000 jobs",
                            True)
        print(f"scale: 1,000 jobs (multi-GPU mix) on 128 GPUs in 16 servers, 9 jobs/h; curves {built:.0f} s")
        print(_synergy_table(sres))
    return 0


REPLICA_MODELS = ("resnet50", "inception_v1", "vgg19")
REPLICA_CLUSTERS = {"a100:8": ((1,), (2,), (4,), (8,)),
                    "a100:4,t4:4": ((1, 0), (4, 0), (0, 4), (4, 4))}


def replicas_main(args) -> int:
    """``--replicas``: stage-model curves of ONNX jobs against one device per stage (see the module doc)."""
    import numpy as np

    from placement.cluster.curves import CurveCache, job_curve
    from placement.cluster.formats import parse_jobs
    from placement.cluster.policies import Capacity
    from placement.cluster.simulate import SimJob, simulate

    def zoo(name: str) -> str:
        import onnx

        return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                            f"light_{name}.onnx")

    cache = CurveCache()  # no disk cache: the curve times are part of the table

    def curve(model, training, devices, **extra):
        jl = parse_jobs({"cluster": {"devices": devices},
                         "jobs": [{"model": zoo(model), "samples": 1, "training": training, **extra}]})
        return job_curve(jl.jobs[0], jl.cluster, cache=cache)

    print("| model | mode | cluster | allocation | one device per stage (ms/run) | stage model (ms/run) | "
          "speed-up | curve s (old / new) |")
    print("|---|---|---|---|---|---|---|---|")
    for model in REPLICA_MODELS:
        for training in (False, True):
            for devices, allocations in REPLICA_CLUSTERS.items():
                old = curve(model, training, devices, max_replicas=1)
                new = curve(model, training, devices)
                for k, a in enumerate(allocations):
                    o, n = old.values[a], new.values[a]
                    kinds = devices.split(",")
                    alloc = ",".join(f"{kd.split(':')[0]}:{x}" for kd, x in zip(kinds, a) if x)
                    secs = f"{old.seconds:.1f} / {new.seconds:.1f}" if k == 0 else ""
                    print(f"| {model} | {'training' if training else 'inference'} | {devices} | {alloc} | "
                          f"{o:.4f} | {n:.4f} | {o / n:.2f}x | {secs} |", flush=True)
    # a short trace on a100:8: every job alone on one GPU takes 0.5 to 4 h, arrivals at load 2
    seed = int(str(args.seed).split(",")[0])
    rng = np.random.default_rng(seed)
    cands = [(m, t) for m in REPLICA_MODELS for t in (False, True)]
    pick = rng.integers(len(cands), size=args.jobs).tolist()
    hours = np.exp(rng.uniform(math.log(0.5), math.log(4.0), size=args.jobs))
    gaps = rng.exponential(hours.sum() * HOUR_MS / (8 * 2.0) / args.jobs, size=args.jobs)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    cluster = {"devices": "a100:8"}
    cap = None
    rows = []
    for label, extra in (("stage model (default)", {}), ("one device per stage (max_replicas 1)",
                                                          {"max_replicas": 1})):
        jobs = []
        for k, (i, h, a) in enumerate(zip(pick, hours.tolist(), arrivals.tolist())):
            model, training = cands[i]
            c = curve(model, training, "a100:8", **extra)
            samples = round(h * HOUR_MS / c.values[(1,)])
            jl = parse_jobs({"cluster": cluster, "jobs": [{"model": zoo(model), "samples": samples,
                                                           "training": training, **extra}]})
            cap = Capacity.of(jl.cluster)
            jobs.append(SimJob(f"{k:02d}-{model}{'-train' if training else ''}", c, samples, a))
        for pol in ("ftf", "even"):
            name, knob = policy_spec(pol)
            r = simulate(jobs, cap, name, lease=10 * 60e3, time_limit=args.time_limit, fairness=knob)
            rows.append((label, pol, r))
    print()
    print(f"{args.jobs} jobs on a100:8 (seed {seed}, lease 10 min):")
    print()
    print("| curves | policy | avg JCT (h) | makespan (h) | max rho |")
    print("|---|---|---|---|---|")
    for label, pol, r in rows:
        print(f"| {label} | {pol} | {r.avg_jct / HOUR_MS:.2f} | {r.makespan / HOUR_MS:.2f} | "
              f"{r.max_rho:.2f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_cluster", description=__doc__.split("\n")[0])
    p.add_argument("--synergy", action="store_true",
                   help="Synergy's semantics on its shared trace and held-out traces (see the doc)")
    p.add_argument("--scale", action="store_true", help="--synergy: also a 1,000-job trace on 128 GPUs")
    p.add_argument("--replicas", action="store_true",
                   help="ONNX jobs' stage-model curves against one device per stage (a table and a trace)")
    p.add_argument("--event-driven", action="store_true",
                   help="--synergy: also the event-driven ftf and joint policies (slow on 300 jobs)")
    p.add_argument("--event-driven-held-out", action="store_true",
                   help="--synergy: also the event-driven policies (ftf, joint, even, fifo; one pool, no "
                        "servers) on the held-out traces of at most 40 jobs")
    p.add_argument("--progress", action="store_true", help="--synergy: progress bars on stderr")
    p.add_argument("--ftf-fairness", default="", metavar="F,F,...",
                   help="--synergy --event-driven(-held-out): also ftf with Themis's auction at these "
                        "fairness knobs (policy ftf@F); without --synergy, write ftf@F in --policies")
    p.add_argument("--held-out", default=None, metavar="K,K,...",
                   help="--synergy: only these held-out traces (1-based, in the doc's order) and skip "
                        "the shared trace when 0 is not listed")
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
    p.add_argument("--policies", default="ftf,joint,even,fifo")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per allocation MILP")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results", "cluster"))
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    if args.replicas:
        return replicas_main(args)
    if args.synergy:
        if args.out_dir == os.path.join(HERE, "results", "cluster"):
            # under the git-ignored results/cluster: the traces written there hold Synergy's profiles
            args.out_dir = os.path.join(HERE, "results", "cluster", "synergy")
        return synergy_main(args)

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
