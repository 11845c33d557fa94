"""``placement cluster``: allocate a shared cluster among jobs, or simulate a trace of them.

    placement cluster JOBS.json --policy ftf [--out RESULT.json] [--json]
    placement cluster simulate TRACE.json --policy ftf [--lease S] [--plot FILE.png]
    placement cluster simulate TRACE.json --policy tune [--base fifo] [--servers N] [--lease ROUND]

``--policy all`` runs every policy that applies to the cluster and ends with a comparison table. Curves
are cached in ``~/.cache/placement/curves`` (``--cache-dir``, ``--no-cache``). Bad input raises
:class:`~graphs.errors.InputError` (exit 2); a job that cannot run on the cluster at all raises
:class:`~graphs.errors.InfeasibleError` (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import textwrap

from graphs.errors import InputError

from ..outputs import aligned
from .formats import duration_scale

__all__ = ["add_parser", "run", "synergy_jobs"]

_POLICIES = ("ftf", "joint", "even", "fifo", "proportional", "tune", "opt")
_SYNERGY = ("proportional", "tune", "opt")  # Synergy's allocation on the servers, after a base scheduler


JOBS_FORMAT = """\
the job list (JOBS.json; a trace for simulate has the same format, 'arrival' matters there):

  {"cluster": {"devices": "a100:8,cpu:32", "host_memory_gb": 256},
   "lease": 600000,
   "jobs": [{"name": "resnet", "model": "resnet50.onnx", "training": true,
             "samples": 2e6, "arrival": 0},
            {"name": "bert", "model": "bert24_training.json", "samples": 5e4,
             "arrival": 3.6e6, "request": "a100:2,cpu:4", "limit": "a100:4",
             "host_memory_gb": 8}]}

  cluster.devices     the cluster, as placement place --devices (presets, or kinds from
                      cluster.device_files); host_memory_gb: host memory all jobs share
                      (decimal GB, default unlimited)
  lease               simulate: re-allocation interval (workload time unit; optional):
                      ftf, joint, even, fifo re-allocate at arrivals, completions and every
                      lease; proportional, tune, opt only every lease (their rounds)
  jobs[].name         its name in the tables (unique; default job<i>, i its position)
  jobs[].model        an ONNX model (front end options: training, batch_size, optimizer,
                      costs), a reference-format or Piper-format workload (.json), or an
                      LLM model config (config.json, decoded as placement place does: a
                      sample is one generated token; batch_size: sequences decoded
                      together, default 1; context: their tokens, default 2048); relative
                      paths are relative to the job list
  jobs[].samples      work to do (> 0): samples, not runs of a batch (an ONNX model's
                      times are per sample, as placement place prints them; one run
                      of its batch is batch_size samples); arrival: when it arrives
                      (default 0)
  jobs[].training, batch_size, optimizer, costs
                      ONNX models: the front end's options, as placement place's
                      --training, --batch-size, --optimizer, --costs (defaults: false,
                      1 for a symbolic batch dimension, adam, roofline)
  jobs[].request      what it asks for under fifo (its GPU demand under Synergy's
                      policies); above the cluster, its limit or a throughput table's
                      accelerator count: an error, never clipped; limit: the most it can use
  jobs[].host_memory_gb  host memory it needs wherever it runs (default 0)
  jobs[].accelerator  reference, Piper and throughput-table jobs: which cluster kind
                      runs their accelerator's work (default: the kind a reference file
                      names, else the cluster's only accelerator kind)
  jobs[].max_replicas ONNX, Piper and LLM models: most replicas of a stage (default
                      unlimited; 1: an ONNX model's one-device-per-stage curve)
  jobs[].input        its input pipeline (Synergy's model), per sample:
                      {"cpu_ms_per_sample": 8.0, "sample_bytes": 110000,
                       "dataset_gb": 140, "storage_gbps": 0.5}: CPU ms to decode and
                      augment it, bytes read for it, the dataset (decimal GB, cached in
                      host memory as it fits) and the storage bandwidth (decimal GB/s,
                      default cluster.storage_gbps); it runs at the least of its
                      accelerator, CPU and storage rates. Without input or throughput a
                      job is fed for free
  jobs[].throughput   instead of input (model then optional): samples per second
                      measured at one accelerator count over a full grid of host cores
                      and memory, {"accelerators": 1, "points": [[cpus, memory_gb,
                      samples_per_second], ...]}; the job runs on exactly that many
  cluster.storage_gbps   the input sections' default storage bandwidth (decimal GB/s)
  cluster.servers     how the cluster is cut into servers: a number of identical ones,
                      or [{"devices": "v100:8,cpu:24", "host_memory_gb": 500}, ...]
                      (default 1: the cluster is one server; --servers overrides it)

Times are in the workloads' unit (ms for ONNX models and LLM model configs), per sample.
rho: a job's completion time over its time alone on a 1/N share of the cluster; N is the
average number of jobs present over its life in simulate, and the number of jobs in the
one-shot command (all present at its one decision: the contention at that time).
More: docs/clusters.md ("Jobs' input pipelines", "The cluster section") and
benchmarks/README_cluster.md.
"""


# --policy ftf in simulate: Themis's knob by default, the fairest we measured (benchmarks/README_cluster.md,
# "Themis's auction and fairness knob"); --fairness exact: no auction, max rho minimised exactly
FTF_FAIRNESS = 0.1


def knob(value: str):
    """``--fairness``: a number, or ``exact`` (ftf without the auction)."""
    return "exact" if value.strip().lower() == "exact" else float(value)


def add_parser(sub) -> None:
    c = sub.add_parser(
        "cluster", help="share one cluster among several jobs (allocate, or simulate a trace)",
        usage="placement cluster JOBS.json [--policy P] [options]\n"
              "       placement cluster simulate TRACE.json [--policy P] [--lease T] [--plot FILE] [opts]\n"
              "       placement cluster simulate TRACE.json --policy tune [--base B] [--servers N] [options]",
        description=textwrap.fill(
            "Allocate a heterogeneous cluster among jobs from their throughput curves (the best "
            "time per sample for every allocation, from one DP run per job), or simulate a trace "
            "of arriving jobs. Over the cluster as one pool: ftf (Themis's finish-time fairness: in "
            "simulate, leases auctioned among the most unfair jobs, --fairness; else max rho minimised "
            "exactly at every decision), joint (accelerator counts, host-core "
            "stages, CPU cores and memory chosen jointly; 'sensitive' is its old name), even (every "
            "accelerator kind split evenly, CPU and memory by accelerators held), fifo. Synergy's "
            "own allocations on the cluster's servers, after a base scheduler (--base) has picked "
            "the jobs and their fixed GPU demands (in simulate every round, else once): "
            "proportional (CPU and memory in proportion to GPUs, capped at that share: Synergy's "
            "+fair), tune (Synergy-TUNE: per server, CPU and memory to the jobs that gain, none "
            "below its proportional rate), opt (Synergy-OPT, the LP bound). 'all' compares them.", 100),
        epilog=JOBS_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("target", nargs="+", metavar="JOBS.json | simulate TRACE.json",
                   help="a job list (allocate once for all its jobs), or 'simulate' and a trace (the same "
                        "format: jobs with arrival times and samples)")
    c.add_argument("--policy", default="ftf", choices=_POLICIES + ("sensitive", "all"),
                   help="allocation policy (default ftf; sensitive = joint, its old name; all: every policy "
                        "that applies: proportional, tune and opt need exactly one accelerator kind)")
    c.add_argument("--base", default=None, choices=("fifo", "las", "srtf", "ftf"),
                   help="with proportional, tune, opt: the base scheduler that picks the jobs and their "
                        "GPUs (each round in simulate; default fifo)")
    c.add_argument("--servers", type=int, default=None, metavar="N",
                   help="cut the cluster into N identical servers for proportional, tune, opt (overrides "
                        "cluster.servers; default: cluster.servers, else 1, the cluster one server)")
    c.add_argument("--fairness", type=knob, default=None, metavar="F",
                   help="Themis's knob, in (0, 1]: the fraction of most unfair jobs that bid each round. "
                        f"--policy ftf: they bid in an auction that maximises the product of their rho "
                        f"improvements, the others share what is left (default in simulate "
                        f"{FTF_FAIRNESS:g}, the fairest measured; 'exact' or the one-shot command's "
                        f"default: no auction, max rho minimised exactly); --base ftf: they are admitted "
                        f"first (default 1)")
    c.add_argument("--lease", type=float, default=None, metavar="T",
                   help="simulate, a positive finite period in the trace's time unit. ftf, joint, even, "
                        "fifo decide at every arrival and completion, and with a lease also every T "
                        "(default: the trace's 'lease', else arrivals and completions only). proportional, "
                        "tune, opt decide only at the start of each round of T (default: the trace's "
                        "'lease', else 300000, 300 s in ms): a job arriving mid-round waits for the next "
                        "one, and the devices of one finishing mid-round stay idle until then")
    c.add_argument("--out", "-o", default=None, metavar="RESULT.json", help="write the result as JSON")
    c.add_argument("--json", action="store_true", help="print the result JSON instead of tables")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw the devices each job uses over time (with --policy all: one file per "
                        "policy, FILE-<policy>.png)")
    c.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="where curves are cached (default ~/.cache/placement/curves or $PLACEMENT_CACHE)")
    c.add_argument("--no-cache", action="store_true",
                   help="compute every curve afresh, store nothing (not with --cache-dir)")
    c.add_argument("--curve-time-limit", type=float, default=None, metavar="S",
                   help="seconds for a job's one-run curve DP before falling back to per-allocation "
                        "solves (default 120)")
    c.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds per allocation MILP (default: none)")
    c.add_argument("--progress", action="store_true",
                   help="report curve computations and simulation progress on stderr")


def run(args) -> int:
    from placement.inputs import time_limit_seconds

    from .curves import (
        DEFAULT_CURVE_TIME_LIMIT,
        CurveCache,
        check_max_replicas,
        check_model_file,
        default_cache_dir,
    )
    from .formats import read_jobs, with_servers
    from .inputs import job_rates
    from .policies import Capacity
    from .simulate import SimJob, allocate_once, simulate
    from .synergy import DEFAULT_ROUND, allocate_rounds_once, simulate_rounds, unfit_for_synergy

    target = list(args.target)
    if len(target) == 2 and target[0] == "simulate":
        mode, path = "simulate", target[1]
    elif len(target) == 1 and target[0] != "simulate":
        mode, path = "allocate", target[0]
    else:
        raise InputError("placement cluster: expected JOBS.json, or simulate TRACE.json")
    if args.lease is not None and not (args.lease > 0 and math.isfinite(args.lease)):
        # a period in the trace's time unit, not a limit: inf would make "waits one lease" infinite
        raise InputError(f"placement cluster: --lease must be a positive finite number, got {args.lease:g} "
                         f"(for no periodic re-allocation leave --lease out, with no 'lease' in the trace)")
    # the one rule for a time limit (inf: none); --curve-time-limit not given keeps the curves' default
    args.time_limit = time_limit_seconds(args.time_limit)
    curve_time_limit = (DEFAULT_CURVE_TIME_LIMIT if args.curve_time_limit is None
                        else time_limit_seconds(args.curve_time_limit, "--curve-time-limit"))
    if args.lease is not None and mode != "simulate":
        raise InputError("placement cluster: --lease applies to simulate only")
    base_given, args.base = args.base, args.base or "fifo"  # given (even as fifo) is checked below
    exact = args.fairness == "exact"
    if args.fairness is not None and not exact and not 0 < args.fairness <= 1:  # nan too
        raise InputError(f"placement cluster: --fairness must be in (0, 1] or 'exact', got {args.fairness:g}")
    if args.fairness is not None and args.policy not in ("ftf", "all") and not (
            args.policy in _SYNERGY and args.base == "ftf" and not exact):
        raise InputError("placement cluster: --fairness applies to --policy ftf (its auction) and to "
                         "--base ftf (with proportional, tune, opt; a number there)")
    knob = 1.0 if args.fairness is None or exact else args.fairness  # the round schedules' base ftf
    # ftf's auction: the measured default in simulate (leases re-auction); the one-shot command holds one
    # decision until each job finishes, where a job left out would wait for good: exact there by default
    ftf_knob = (None if exact else args.fairness if args.fairness is not None
                else FTF_FAIRNESS if mode == "simulate" else None)
    if args.no_cache and args.cache_dir is not None:
        raise InputError("placement cluster: --no-cache stores nothing, so --cache-dir has no use with it; "
                         "give one or the other")
    if args.servers is not None and args.servers < 1:
        raise InputError("placement cluster: --servers must be at least 1")
    if args.servers is not None and args.policy not in _SYNERGY + ("all",):
        raise InputError(f"placement cluster: --servers applies to the Synergy allocations "
                         f"({', '.join(_SYNERGY)}); --policy {args.policy} sees the cluster as one pool "
                         f"of devices")
    if base_given is not None and args.policy not in _SYNERGY + ("all",):
        raise InputError(f"placement cluster: --base {args.base} applies to the Synergy allocations "
                         f"({', '.join(_SYNERGY)}), which take the jobs a base scheduler picks; --policy "
                         f"{args.policy} schedules the jobs itself")
    from placement.outputs import output_file, plot_file

    if args.out:  # checked before the curves are computed
        output_file(args.out, "--out")
    if args.plot:
        plot_file(args.plot, "--plot")
    if args.policy == "sensitive":
        print("note: policy 'sensitive' is now called 'joint' (it also re-chooses accelerator counts and "
              "host-core stages); Synergy's own allocation is 'tune'", file=sys.stderr)
    jl = read_jobs(path)
    if args.servers is not None:
        jl = dataclasses.replace(jl, cluster=with_servers(jl.cluster, args.servers, source=path,
                                                          what="--servers"))
    # Synergy's allocations need one accelerator kind: named, refused before any curve is computed;
    # within 'all', left out (said in the table and the JSON)
    unfit = unfit_for_synergy(jl.cluster.kinds, jl.cluster.host, jl.cluster.counts)
    if unfit and args.policy in _SYNERGY:
        raise InputError(f"--policy {args.policy}: {unfit}; --policy ftf, joint, even or fifo take any "
                         f"cluster", source=path)
    skipped = ([{"policy": p, "reason": unfit} for p in _SYNERGY] if unfit and args.policy == "all"
               else [])
    cache = CurveCache(None if args.no_cache else (args.cache_dir or default_cache_dir()))
    for j in jl.jobs:  # every model file is there (and takes its max_replicas) before any curve is computed
        check_model_file(j)
        check_max_replicas(j, source=path, cache=cache)  # (a Piper file decoded once, for its curve too)
    verbose = args.progress or (sys.stderr.isatty() and not args.json)
    curves = []
    for k, j in enumerate(jl.jobs):
        before = cache.misses
        c = job_rates(j, jl.cluster, cache=cache,
                      curve_time_limit=curve_time_limit)
        if verbose:
            how = ("measured table" if c.method == "table" else "cached" if cache.misses == before
                   else f"{c.method}, {c.seconds:.1f} s")
            print(f"curve {k + 1}/{len(jl.jobs)} {j.name}: {len(c.points)} efficient points ({how})",
                  file=sys.stderr)
        for note in c.notes:
            print(f"note: job {j.name}: {note}", file=sys.stderr)
        curves.append(c)
    _one_unit(jl.jobs, curves, path)
    cap = Capacity.of(jl.cluster)
    jobs = [SimJob(j.name, c, j.samples, j.arrival, _request(j, cap), j.model)
            for j, c in zip(jl.jobs, curves)]
    left_out = {d["policy"] for d in skipped}
    policies = tuple(p for p in _POLICIES if p not in left_out) if args.policy == "all" else (args.policy,)
    lease = args.lease if args.lease is not None else jl.lease
    results = []
    gjobs = None
    for pol in policies:
        if pol in _SYNERGY and gjobs is None:
            gjobs = synergy_jobs(jl, jl.cluster, curves)
        if mode != "simulate" and pol in _SYNERGY:
            results.append(allocate_rounds_once(gjobs, jl.cluster, pol, base=args.base,
                                                fairness=knob, time_limit=args.time_limit))
        elif mode == "simulate" and pol in _SYNERGY:
            bar = _Bar(f"{args.base}+{pol}") if verbose else None
            try:
                results.append(simulate_rounds(gjobs, jl.cluster, pol, base=args.base,
                                               round_length=lease or DEFAULT_ROUND, fairness=knob,
                                               time_limit=args.time_limit, progress=bar))
            finally:  # a Ctrl-C or an error: its line starts after the bar's, not glued to it
                if bar is not None:
                    bar.close()
        elif mode == "simulate":
            results.append(simulate(jobs, cap, pol, lease=lease, time_limit=args.time_limit,
                                    fairness=ftf_knob if pol == "ftf" else None))
        else:
            results.append(allocate_once(jobs, cap, pol, time_limit=args.time_limit,
                                         fairness=ftf_knob if pol == "ftf" else None))
    models = [j.model for j in jl.jobs]
    docs = [r.to_dict(curves, models) for r in results]
    for d in docs:
        d["source"] = path
    doc = docs[0] if len(docs) == 1 else {"schema": "placement-cluster-comparison", "version": 1,
                                          "source": path, "results": docs}
    if skipped:
        doc["skipped"] = skipped
    from placement import _interrupt
    from placement.export import emit

    def text() -> str:
        parts = [format_result(r, jl) + "\n" for r in results]
        tail = [format_comparison(results)] if len(results) > 1 else []
        if skipped:
            tail.append(f"left out: {', '.join(d['policy'] for d in skipped)}: {unfit}")
        return "\n".join(parts + tail)

    # the results are written whole, the plots with them: a Ctrl-C that comes meanwhile (emit's own block
    # raised it before the plots) stops the command once they are all written (exit 130)
    with _interrupt.deferred():
        emit(args, doc, text)
        if args.plot:
            _plots(results, args.plot, args.json)
    return 0


def synergy_jobs(jl, cluster, curves=None) -> list:
    """The jobs of job list ``jl`` as Synergy sees them (:class:`~placement.cluster.synergy.GpuJob`): each
    with its curve on ``cluster`` (``curves`` when already computed) and its fixed GPU demand (its
    ``request``'s accelerators, a throughput table's own count, else the knee of its curve within the
    cluster's host memory, as ``fifo``'s default request)."""
    from .inputs import job_rates
    from .policies import Capacity
    from .synergy import GpuJob, _kinds, gpu_demand

    cap = Capacity.of(cluster)
    acc, _ = _kinds(cap)
    if curves is None:
        curves = [job_rates(j, cluster) for j in jl.jobs]
    return [GpuJob(j.name, c, j.samples, j.arrival, gpu_demand(c, _request(j, cap), acc, cap.host_memory),
                   j.model) for j, c in zip(jl.jobs, curves)]


class _Bar:
    """A progress bar on stderr: jobs completed out of all."""

    def __init__(self, label: str) -> None:
        self.label, self.shown = label, -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / total)
        if pct != self.shown:
            self.shown = pct
            filled = pct // 4
            print(f"\r{self.label}: [{'#' * filled}{' ' * (25 - filled)}] {done}/{total} jobs done",
                  end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown >= 0:
            self.shown = -1
            print(file=sys.stderr, flush=True)


def _one_unit(jobs, curves, path: str) -> None:
    """The jobs of one list share one time unit (their times per sample, arrivals and leases are read
    in it), else one :class:`InputError` naming each job's: a reference-format workload's own unit
    cannot be converted to another job's (a Piper file's seconds, an ONNX model's milliseconds)."""
    units: dict[str, list[str]] = {}
    for j, c in zip(jobs, curves):
        units.setdefault(c.unit, []).append(j.name)
    if len(units) > 1:
        own = "a reference workload's own unit"
        words = "; ".join(f"{u or own}: {', '.join(names)}" for u, names in units.items())
        raise InputError(f"the jobs measure time in different units ({words}), so their times cannot "
                         f"share one schedule: give one list jobs of one unit", source=path)


def _request(job, cap):
    if job.request is None:
        return None
    return tuple(int(job.request.get(k, 0)) for k in cap.kinds)


def _plots(results, path: str, quiet: bool) -> None:
    import os

    from placement.draw import PlotsUnavailable

    from .simulate import plot_allocations

    stem, ext = os.path.splitext(path)
    for r in results:
        out = path if len(results) == 1 else f"{stem}-{r.policy}{ext or '.png'}"
        try:
            plot_allocations(r, out)
        except PlotsUnavailable as e:
            print(f"note: {e}; plot not drawn", file=sys.stderr)
            return
        if not quiet:
            print(f"plot written to {out}")


def _num(x: float, digits: int = 4) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def format_result(r, jl=None) -> str:
    """One row per job, then the summary (a bound's, Synergy-OPT's, said to be one)."""
    from .simulate import BOUND_NOTE

    kinds = r.capacity.kinds
    unit = f" ({r.unit})" if r.unit else ""
    scale, dunit = duration_scale(r.unit, r.makespan)  # hours, not 2.492e+09 ms
    when = f" {dunit}" if dunit else ""

    def dur(x):
        return _num(x / scale) if x is not None else _num(x)

    start = r.segments[0].start if r.segments else max((j.arrival for j in r.jobs), default=0.0)
    at = f"{dur(start)}{when or (' ' + r.unit if r.unit else '')}"
    # the one-shot's rho: N is every job (the JSON's contention_note), not simulate's average over a life
    head = (f"allocation for all jobs at once at the last arrival ({at}), held until each finishes; rho's "
            f"N = {len(r.jobs)}, the number of jobs (simulate: the average number present over each job's "
            f"life)"
            if r.mode == "allocation"
            else f"simulation, {r.decisions} decisions" + (f", lease {r.lease:g}" if r.lease else ""))
    if r.policy == "ftf" and r.stats.get("fairness") is not None:
        head += f"; Themis's auction, fairness knob {r.stats['fairness']:g}"
    if jl is not None and r.policy.rpartition("+")[2] in _SYNERGY:  # Synergy allocates within servers
        n = len(jl.cluster.server_list)
        head += f"; {n} server{'s' if n > 1 else ''}" + ("" if jl.cluster.servers else
                                                         " (the file gives none: --servers N cuts it)")
    # a simulation re-allocates: these three columns are the job's first allocation (its mean_used over
    # its life is in the JSON; its JCT and rho cover every allocation it had)
    first = "" if r.mode == "allocation" else "first "
    bound = "bound " if r.bound else ""  # Synergy-OPT's LP rates: a bound, not a schedule
    rows = [["job", f"arrival{when}", f"{first}allocation", f"{first}used",
             f"{first}{bound}time/sample{unit}", f"{bound}finish{when}", f"{bound}JCT{when}", f"{bound}rho"]]
    for j in r.jobs:
        a = j.allocation
        alloc = ",".join(f"{k}:{x}" for k, x in zip(kinds, a.devices) if x) or "waits"
        used = ",".join(f"{k}:{x}" for k, x in zip(kinds, a.used) if x) or "-"
        rows.append([j.name, dur(j.arrival), alloc, used, _num(a.time_per_sample), dur(j.finish),
                     dur(j.jct), _num(j.rho, 3)])
    said = f"times in the workloads' unit{unit}" + (", durations in hours" if dunit == "h" else "")
    lines = [f"policy {r.policy}: {head}; {said}"]
    if r.bound:
        lines.append(f"note: {BOUND_NOTE}")
    lines.append(aligned(rows, lambda i: i >= 4))
    util = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r.utilisation_per_kind().items() if math.isfinite(v))
    waiting = sum(1 for j in r.jobs if not math.isfinite(j.finish))
    lines.append(("bound: " if r.bound else "")
                 + f"max rho {_num(r.max_rho, 3)}, avg JCT {dur(r.avg_jct)}{when}, makespan "
                 f"{dur(r.makespan)}{when}, "
                 f"utilisation {100 * r.utilisation:.0f}% ({util})"
                 + (" while the allocation holds" if not math.isfinite(r.makespan) else "")
                 + (f"; {waiting} job(s) wait with nothing (re-allocation happens in simulate)"
                    if waiting else ""))
    if "time limit" in r.statuses:
        lines.append("note: some allocation MILPs stopped at --time-limit (answers not proven optimal)")
    return "\n".join(lines)


def format_comparison(results) -> str:
    from .simulate import BOUND_NOTE, utilisation_over_makespan

    span = max((r.makespan for r in results if math.isfinite(r.makespan)), default=math.inf)
    scale, dunit = duration_scale(results[0].unit if results else "", span)
    when = f" {dunit}" if dunit else ""
    # one definition for every row: device time used over device time available during the makespan;
    # a policy under which some job never runs has no makespan, and its figure "while the allocation
    # holds" (its own line) measures another span, so it is not comparable here: "-"
    rows = [["policy", "max rho", f"avg JCT{when}", f"makespan{when}", "utilisation over makespan"]]
    for r in results:
        u = utilisation_over_makespan(r)
        util = "-" if u is None else f"{100 * u:.0f}%"
        name = f"{r.policy} (bound)" if r.bound else r.policy
        rows.append([name, _num(r.max_rho, 3), _num(r.avg_jct / scale), _num(r.makespan / scale), util])
    lines = [aligned(rows, lambda i: i >= 1)]
    if any(r.bound for r in results):
        lines.append(f"(bound): {BOUND_NOTE}")
    return "\n".join(lines)
