"""The benchmark suite: solvers x workloads, each run isolated, with time limits, resumable results and
Markdown / CSV tables (``placement bench``, or ``python -m placement.bench.suite``).

    python -m placement.bench.suite --config reference --time-limit 60 --workers 2
    python -m placement.bench.suite --config full --ray              # a local Ray instance
    python -m placement.bench.suite --config full --ray HOST:6379    # an existing Ray cluster

Every run (a :class:`Job`: workload, solver, objective, time limit, seed) is one fresh process: a time
limit the solver overruns is enforced by killing it (after twice the limit plus a grace period), and
the peak memory is that run's alone (it includes ~150 MB of Python, numpy and numba). Locally the
processes are forked from a server that has the libraries imported already, so starting one costs
milliseconds; on Ray every job is a task that runs ``python -m placement.bench.suite --worker JOB`` (the
workers need the repository and the workloads at the same paths, or ``PLACEMENT_WORKLOADS``).

Results are appended, one JSON line per run, to ``results.jsonl`` in ``--out`` (default: a new folder
``bench-results-DATE-TIME`` in the current directory) as runs finish; a run whose key is already there is
skipped, so an interrupted sweep given the same ``--out`` resumes where it stopped (``--rerun`` runs
again). The file is a log that only grows: a sweep of other workloads, solvers or limits given the same
``--out`` adds its runs to it, and the last record of a workload, solver and seed replaces an earlier one.
The tables (:mod:`placement.bench.report`) and ``--report`` are rebuilt at the end from the whole file,
every workload in it, so that adding runs to a folder (the committed one, ``benchmarks/results``, is
meant to be added to) never drops the others'. What would still be lost is refused before any run:
rows of the folder's tables that its results file lacks, or a ``--report`` file that is not this
command's own unedited report of the same results file (``--replace`` writes them anyway).

The objective of every run is the evaluator's value of its placement (``graphs.evaluate`` for
max-load, ``graphs.latency`` for latency), never the solver's own number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from solvers.registry import SOLVERS, bench_solvers

from .catalog import CONFIGURATIONS, WorkloadSpec, configuration, load_workload

__all__ = ["Job", "build_jobs", "execute", "run_jobs", "ResultStore", "main", "THROUGHPUT_SOLVERS",
           "LATENCY_SOLVERS", "machine_description"]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the source checkout (or site-packages when installed)

# Solvers per objective, in table order: the registry's (each solver names its tables there)
THROUGHPUT_SOLVERS = bench_solvers("max-load")
LATENCY_SOLVERS = bench_solvers("latency")  # "ip" with the latency objective
TINY_SOLVERS = bench_solvers("tiny")
GRACE_S = 60.0  # on top of twice the time limit before a run is killed


@dataclass(frozen=True)
class Job:
    """One run: ``solver`` on ``workload`` for its objective, with a time limit and a seed."""

    workload: WorkloadSpec
    solver: str
    time_limit: float | None  # seconds; None: none (the run is never killed)
    seed: int = 0

    @property
    def key(self) -> str:
        return f"{self.workload.key}|{self.solver}|t{_limit_text(self.time_limit)}|s{self.seed}"

    def to_json(self) -> dict:
        return {"workload": self.workload.to_json(), "solver": self.solver, "time_limit": self.time_limit,
                "seed": self.seed}

    @classmethod
    def from_json(cls, d: dict) -> Job:
        limit = d["time_limit"]
        return cls(WorkloadSpec.from_json(d["workload"]), d["solver"],
                   None if limit is None else float(limit), int(d.get("seed", 0)))


def _limit_text(seconds: float | None) -> str:
    return "inf" if seconds is None else f"{seconds:g}"


def _kill_after(job: Job) -> float | None:
    """Seconds after which a run is killed: twice its time limit plus a grace period (none without one)."""
    return None if job.time_limit is None else 2 * job.time_limit + GRACE_S


def build_jobs(specs: Iterable[WorkloadSpec], *, time_limit: float | None,
               solvers: Iterable[str] | None = None, seed: int = 0,
               limits: dict[str, float | None] | None = None) -> list[Job]:
    """Every registered solver that applies to every workload: the throughput solvers on max-load
    workloads, the latency ones on latency workloads, ``expert`` only where a split exists.
    ``limits`` overrides the time limit of named solvers (``None``: no limit, as ``time_limit``)."""
    limits = limits or {}
    from solvers.registry import SOLVERS

    wanted = None if solvers is None else list(solvers)
    jobs = []
    for spec in specs:
        table = THROUGHPUT_SOLVERS if spec.objective == "max-load" else LATENCY_SOLVERS
        names = [s for s in table if s in SOLVERS] if wanted is None else \
            [s for s in wanted if s in SOLVERS and s in table]
        for name in names:
            if name == "expert" and not spec.split:
                continue
            limit = limits[name] if name in limits else time_limit
            jobs.append(Job(spec, name, None if limit is None else float(limit), seed))
    return jobs


# --------------------------------------------------------------------------- one run
def execute(job: Job) -> dict:
    """Run one job in this process and return its result record (never raises for a solver error)."""
    import resource

    import numpy as np

    from graphs.errors import PlacementError
    from graphs.evaluate import evaluate
    from solvers.base import SolveOptions
    from solvers.registry import SOLVERS, canonical_name, solve

    rec = _record(job)
    t0 = time.perf_counter()
    try:
        w = load_workload(job.workload)
    except Exception as e:  # a workload that cannot be built is that run's result
        rec.update(status="error", message=f"workload: {type(e).__name__}: {e}")
        return rec
    g, cl = w.graph, w.cluster
    rec.update(nodes=g.num_nodes, edges=g.num_edges, devices=cl.num_devices, load_s=time.perf_counter() - t0,
               # the unit of the run's values, as a result file names it (placement.results): ms for an
               # ONNX model, "t" for a reference-format workload's own, unnamed unit
               time_unit=g.meta.get("unit") or "t")
    raw = {"split": job.workload.split} if job.solver == "expert" else {}
    # one thread for every solver that reads it, so that a table's times compare solvers, not how many
    # cores each grabbed; a solver that reads no thread count keeps the default (the checked solve
    # refuses an option its solver would ignore)
    reads = SOLVERS[canonical_name(job.solver)[0]].honours
    opts = SolveOptions(objective=job.workload.objective, time_limit=job.time_limit, seed=job.seed,
                        threads=1 if "threads" in reads else None, raw=raw)
    if "seed" not in reads:
        opts = dataclasses.replace(opts, seed=SolveOptions().seed)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t1 = time.perf_counter()
    try:
        sol = solve(g, cl, solver=job.solver, options=opts)  # checked by the one evaluator
    except PlacementError as e:
        rec.update(status="error", message=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - t1)
        return rec
    except Exception as e:  # a crash is recorded, not propagated: the sweep goes on
        rec.update(status="error", message=f"crash: {type(e).__name__}: {e}", wall_s=time.perf_counter() - t1)
        return rec
    wall = time.perf_counter() - t1
    rec.update(status=sol.status.value, solver_time_s=sol.time, wall_s=wall, message=sol.message,
               bound=_num(sol.bound), gap=_num(sol.gap), stats=_small(sol.stats))
    if sol.assignment is not None:
        a = np.asarray(sol.assignment)
        ev = evaluate(g, cl, a)
        value, problems = ev.max_load, list(ev.problems)
        if job.workload.objective == "latency":
            from graphs.latency import latency

            lat = latency(g, cl, a)
            value = lat.total
            problems += [p for p in lat.problems if p not in problems]
        rec.update(value=_num(value), valid=not problems, contiguous=ev.contiguous,
                   problems=problems[:3], reported=_num(sol.objective))
    rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rec["rss_before_mb"] = rss0
    return rec


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _small(stats) -> dict:
    out = {}
    for k, v in dict(stats or {}).items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
    return out


def _record(job: Job) -> dict:
    return {"key": job.key, "workload": job.workload.name, "objective": job.workload.objective,
            "source": job.workload.source, "solver": job.solver, "time_limit": job.time_limit,
            "seed": job.seed, "known": dict(job.workload.known), "host": platform.node()}


def _failed(job: Job, status: str, message: str, wall: float) -> dict:
    rec = _record(job)
    rec.update(status=status, message=message, wall_s=wall)
    return rec


# --------------------------------------------------------------------------- isolation
_PRELOAD = ["numpy", "numba", "scipy.sparse", "networkx", "highspy", "graphs.evaluate", "graphs.reference",
            "graphs.latency", "placement.bench.catalog", "placement.bench._warm"]


def _child(job_json: dict, conn) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # solver logs (HiGHS banners) would garble the progress bar
    try:
        rec = execute(Job.from_json(job_json))
    except BaseException as e:  # pragma: no cover - execute records errors itself
        rec = {"status": "error", "message": f"crash: {type(e).__name__}: {e}"}
    conn.send(rec)
    conn.close()


class _Forker:
    """Runs each job in a fresh process forked from a server that has the libraries imported."""

    def __init__(self):
        import multiprocessing as mp

        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(_PRELOAD)
        self.live: set = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Kill the runs still going (an interrupted sweep leaves nothing behind)."""
        with self._lock:
            live = list(self.live)
        for p in live:
            if p.is_alive():
                p.kill()

    def __call__(self, job: Job) -> dict:
        t0 = time.perf_counter()
        recv, send = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=_child, args=(job.to_json(), send), daemon=True)
        p.start()
        with self._lock:
            self.live.add(p)
        send.close()
        limit = _kill_after(job)
        rec = None
        try:
            if recv.poll(limit):
                rec = recv.recv()
            else:
                rec = _failed(job, "killed", f"no result after {limit:.0f} s (time limit "
                              f"{_limit_text(job.time_limit)} s)", time.perf_counter() - t0)
        except EOFError:
            pass
        finally:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
            recv.close()
            with self._lock:
                self.live.discard(p)
        if rec is None:
            code = p.exitcode or 0
            why = "killed by a signal (out of memory?)" if code < 0 else f"exit code {code}"
            rec = _failed(job, "error", f"the run's process died: {why}", time.perf_counter() - t0)
        return rec


def run_subprocess(job_json: dict) -> dict:
    """Run one job as ``python -m placement.bench.suite --worker JOB`` (used by Ray tasks)."""
    job = Job.from_json(job_json)
    t0 = time.perf_counter()
    limit = _kill_after(job)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        out = subprocess.run([sys.executable, "-m", "placement.bench.suite", "--worker",
                              json.dumps(job_json)], capture_output=True, text=True, timeout=limit,
                             cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return _failed(job, "killed", f"no result after {limit:.0f} s", time.perf_counter() - t0)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or "").strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        return _failed(job, "error", tail[0][:300], time.perf_counter() - t0)
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- results file
class ResultStore:
    """The results file: one JSON record per line, appended as runs finish (safe across threads)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

    def records(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        out = []
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue  # a line cut short by an interrupted run
        return out

    def done_keys(self) -> set[str]:
        return {r["key"] for r in self.records() if "key" in r}

    def append(self, rec: dict) -> None:
        line = json.dumps(rec, sort_keys=True)
        with self._lock:
            d = os.path.dirname(self.path)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(self.path, "a+b") as f:
                # a last line cut short (an interrupted run) ends before this record starts: joined to it,
                # both would be unreadable and this run lost
                f.seek(0, os.SEEK_END)
                if f.tell():
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        f.write(b"\n")
                f.write((line + "\n").encode("utf-8"))
                f.flush()


# --------------------------------------------------------------------------- progress
class Progress:
    """``[#####     ] 12/40  3 err  4m10s ETA 9m  last: solver on workload`` on a stream; one line per
    finished run when the stream is not a terminal."""

    def __init__(self, total: int, stream=None, enabled: bool = True):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()

    def update(self, rec: dict) -> None:
        self.done += 1
        self.failed += rec.get("status") in ("error", "killed")
        if not self.enabled:
            return
        el = time.monotonic() - self.start
        eta = el / self.done * (self.total - self.done)
        bar = "#" * int(24 * self.done / max(1, self.total))
        what = f"{rec.get('solver')} on {rec.get('workload')} ({rec.get('objective')}): {rec.get('status')}"
        line = (f"[{bar:<24}] {self.done}/{self.total}  {self.failed} failed  {_dur(el)} "
                f"ETA {_dur(eta)}  {what}")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


# --------------------------------------------------------------------------- running
def run_jobs(jobs: list[Job], store: ResultStore, *, workers: int = 1, ray_address: str | None = None,
             use_ray: bool = False, rerun: bool = False,
             on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the jobs not already in ``store`` (all with ``rerun``), ``workers`` at a time (or as Ray
    tasks), appending each record as it finishes; returns the new records."""
    done = set() if rerun else store.done_keys()
    todo = [j for j in jobs if j.key not in done]
    new: list[dict] = []

    def finished(rec: dict) -> None:
        store.append(rec)
        new.append(rec)
        if on_result is not None:
            on_result(rec)

    if not todo:
        return new
    if use_ray:
        _run_ray(todo, ray_address, finished)
        return new
    forker = _Forker()
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = [pool.submit(forker, j) for j in todo]
        for fut in as_completed(futures):
            finished(fut.result())
    finally:  # normally nothing is left; on an interruption, stop the runs still going
        pool.shutdown(wait=False, cancel_futures=True)
        forker.close()
    return new


def _run_ray(jobs: list[Job], address: str | None, finished) -> None:
    try:
        import ray
    except ImportError:
        raise SystemExit("--ray needs Ray: pip install 'placement[ray]'") from None
    kwargs = {"ignore_reinit_error": True, "log_to_driver": False}
    if address:
        kwargs["address"] = address
        kwargs["runtime_env"] = {"env_vars": {"PLACEMENT_WORKLOADS": os.path.abspath(
            os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads")))}}
    else:
        kwargs["num_cpus"] = os.cpu_count() or 1
        kwargs["include_dashboard"] = False
    started_here = not ray.is_initialized()
    ray.init(**kwargs)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_subprocess)
        pending = {task.remote(j.to_json()): j for j in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except Exception as e:  # a task lost with its node
                    rec = _failed(job, "error", f"ray: {type(e).__name__}: {e}", 0.0)
                finished(rec)
    finally:
        if started_here:
            ray.shutdown()


# --------------------------------------------------------------------------- machine
def machine_description() -> dict:
    """What the runs ran on: CPU model, cores, memory, OS, Python and library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    versions = {}
    for mod in ("numpy", "numba", "scipy", "highspy", "pymetis", "networkx", "onnx"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            continue
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "versions": versions}


# --------------------------------------------------------------------------- command line
def fresh_results_dir(parent: str = ".") -> str:
    """A new, empty folder ``bench-results-DATE-TIME`` (``-2``, ``-3``... when taken) in ``parent``,
    created: a sweep without ``--out`` never writes into an earlier one's, nor the committed tables."""
    stem = os.path.join(parent, "bench-results-" + time.strftime("%Y%m%d-%H%M%S"))
    for k in range(1, 1000):
        path = stem if k == 1 else f"{stem}-{k}"
        try:
            os.makedirs(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{stem}-*: every name is taken")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="placement bench",
        description="Run solvers x workloads with per-run time limits; resumable; writes Markdown and "
                    "CSV tables (and plots with --plots) of every run in the results folder, each value "
                    "with its ratio to the workload's best known value: the lowest of the reference's "
                    "published values (its exact optimum first) and of the folder's runs, named in the "
                    "table.")
    p.add_argument("--config", default="reference", choices=CONFIGURATIONS,
                   help="tiny (seconds), reference (the shared workloads, default) or full (plus the "
                        "ONNX zoo and generated transformers)")
    p.add_argument("--workloads", default=None, metavar="DIR",
                   help="the shared reference workloads (default: $PLACEMENT_WORKLOADS or "
                        "../shared/workloads)")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="keep only workloads whose name contains TEXT (repeatable)")
    p.add_argument("--objective", choices=("max-load", "latency"), default=None,
                   help="keep only the workloads of one objective")
    p.add_argument("--solvers", default=None, metavar="A,B", help="comma-separated solvers (default: all "
                   "that apply)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="per-run limit (default 60)")
    p.add_argument("--limit", action="append", default=[], metavar="SOLVER=S",
                   help="another time limit for one solver, e.g. --limit ip=30 (repeatable)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed passed to every solver, a non-negative integer (SolveOptions.seed: "
                        "local-search restarts, auto's random orders...; default 0); part of each run's key, "
                        "so another seed runs again, and the tables show each seed's runs")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                   help="runs at once on this machine (default: half the cores)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the jobs as Ray tasks: on the cluster at ADDRESS, or a local Ray instance")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="results folder (default: a new folder bench-results-DATE-TIME here). Each run is "
                        "appended to DIR/results.jsonl, and the tables (and plots) in DIR are rebuilt from "
                        "every run in it, of every workload: a folder given again resumes a sweep, or adds "
                        "this one's runs to the earlier ones' (the last run of a workload, solver and seed "
                        "replaces an earlier one). --out benchmarks/results adds to the committed tables")
    p.add_argument("--rerun", action="store_true", help="run again jobs already in the results file")
    p.add_argument("--plots", action="store_true", help="also draw the plots (needs matplotlib)")
    p.add_argument("--report", default=None, metavar="FILE",
                   help="also write the full report (machine, headline, tables of every run in the results "
                        "file) to FILE, e.g. benchmarks/RESULTS.md with --out benchmarks/results. An "
                        "existing FILE is overwritten only if it is this command's report of the same "
                        "results file, unedited")
    p.add_argument("--replace", action="store_true",
                   help="write the tables and --report even where that loses something: rows of DIR's "
                        "tables that its results.jsonl lacks, or a FILE edited by hand or made from "
                        "other results (refused without it, before any run)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def _why_no_jobs(specs: list[WorkloadSpec], solvers: list[str] | None, args, has_reference: bool) -> str:
    """Why :func:`build_jobs` made no run: no workload, or none of the solvers chosen applies to the
    workloads left (no form for their objective, or ``expert`` without a split)."""
    if specs and solvers is not None:
        return _why_dropped(specs, solvers, solvers)
    hints = [] if has_reference else ["give the reference workloads with --workloads DIR (or "
                                      "$PLACEMENT_WORKLOADS)"]
    if args.config != "tiny":
        hints.append("try --config tiny")
    why = "no workload matches" if specs or args.only or args.objective else \
        f"no workloads found for --config {args.config}"
    return why + ("; " + ", or ".join(hints) if hints else "")


def _why_dropped(specs: list[WorkloadSpec], solvers: list[str], dropped: list[str]) -> str:
    """Why the ``dropped`` ones of the ``solvers`` named by ``--solvers`` have no run on the workloads
    ``specs`` left: no form for their objectives (or not in the suite's table for them), or ``expert``
    where no workload has a split (the one solver :func:`build_jobs` skips per workload)."""
    solvers, dropped = list(dict.fromkeys(solvers)), list(dict.fromkeys(dropped))  # "dp,dp": one dp
    objectives = list(dict.fromkeys(s.objective for s in specs))
    groups: dict[tuple[str, str, str], list[str]] = {}  # (verb, its plural, the rest) -> solvers
    tables = False
    for name in dropped:
        if any(name in bench_solvers(o) for o in objectives):  # build_jobs skipped it: expert, no split
            why = ("evaluates", "evaluate", f"a workload's expert split, and none of the {len(specs)} "
                   "workloads has one (the reference layer graphs do)")
        else:
            tables = True
            lacks = [o for o in objectives if o not in SOLVERS[name].objectives]
            # a solver with a form for the objective may still be left out of the suite's table for it
            why = ("has", "have", f"no {' or '.join(lacks)} form") if len(lacks) == len(objectives) else \
                ("is", "are", f"not in the suite's {' or '.join(objectives)} table")
        groups.setdefault(why, []).append(name)
    which = "; ".join(f"solvers for {o}: {', '.join(bench_solvers(o))}" for o in objectives) if tables else ""
    if len(solvers) == 1:  # "--solvers dp has no latency form; solvers for latency: ..."
        ((one, _, rest),) = groups
        return f"--solvers {solvers[0]} {one} {rest}" + (f"; {which}" if which else "")
    said = "; ".join(f"{' and '.join(names)} {one if len(names) == 1 else many} {rest}"
                     for (one, many, rest), names in groups.items())
    return f"--solvers {','.join(solvers)}: {said}" + (f"; {which}" if which else "")


def _run_names(keys: list[tuple[str, str, str, int]], most: int = 4) -> str:
    """``max-load W: dp, single (seed 3); latency V: ip``, the first ``most`` workloads of them."""
    by: dict[tuple[str, str], list[str]] = {}
    for objective, workload, solver, seed in keys:
        by.setdefault((objective, workload), []).append(solver + (f" (seed {seed})" if seed else ""))
    parts = [f"{o} {w}: {', '.join(s)}" for (o, w), s in list(by.items())[:most]]
    return "; ".join(parts) + (f"; and {len(by) - most} more workloads" if len(by) > most else "")


def _losses(out: str | None, report_file: str | None, jobs: list[Job]) -> list[str]:
    """What this run's tables in ``out`` and its ``report_file`` would lose, one line each (``--replace``
    writes them anyway): rows of the tables already in ``out`` that neither its results file (the tables
    are rebuilt from it) nor one of ``jobs`` stands for, a report that is not
    :func:`report.write_report`'s of that file."""
    from . import report

    results = None if out is None else os.path.join(out, "results.jsonl")
    found = []
    if out is not None and os.path.isdir(out):
        coming = {(j.workload.objective, j.workload.name, j.solver, j.seed) for j in jobs}
        lost = [k for k in report.tables_not_in(out, ResultStore(results).records()) if k not in coming]
        if lost:
            found.append(f"--out {out}: its tables hold {len(lost)} row{'s' * (len(lost) > 1)} that its "
                         f"results.jsonl does not ({_run_names(lost)}), and rebuilding them from that file "
                         "would drop them")
    if report_file:
        why = report.report_conflict(report_file, results)
        if why:
            found.append(f"--report {report_file}: {why}, and this run would overwrite it")
    return found


def _appended(path: str, before: list[dict], after: list[dict]) -> str:
    """The line saying what this run added to the results file and what the tables are made of."""
    from .report import OBJECTIVES, result_slot

    new = after[len(before):]
    old = {result_slot(r) for r in before}
    replaced = list(dict.fromkeys(result_slot(r) for r in new if result_slot(r) in old))
    pairs = {result_slot(r)[:2] for r in after}
    counts = [f"{n} {objective}" for objective, _ in OBJECTIVES
              if (n := sum(o == objective for o, _ in pairs))]
    what = f"appended {len(new)} run{'s' * (len(new) != 1)} to {path}" if new else \
        f"appended nothing to {path}"
    if replaced:
        what += (f" ({len(replaced)} replacing in the tables an earlier run of the same workload, solver and "
                 f"seed: {_run_names(replaced)})")
    return (f"{what}; the tables are rebuilt from all {len(after)} records in it "
            f"({' and '.join(counts) or 'no'} workload{'s' * (len(pairs) != 1)})")


def main(argv: list[str] | None = None) -> int:
    """``placement bench``: returns 0 when every run finished (whatever its status), 1 if some run
    crashed or was killed, 2 on bad usage."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help, or bad usage (argparse printed why)
        return int(e.code or 0)
    if args.worker is not None:  # one job, result on stdout (used by Ray tasks)
        print(json.dumps(execute(Job.from_json(json.loads(args.worker)))))
        return 0
    from . import report

    specs, notes = configuration(args.config, args.workloads)
    has_reference = any(s.source == "reference" for s in specs)
    if args.only:
        specs = [s for s in specs if any(t in s.name for t in args.only)]
    if args.objective:
        specs = [s for s in specs if s.objective == args.objective]
    solvers = None if args.solvers is None else [s.strip() for s in args.solvers.split(",") if s.strip()]
    if solvers is None and args.config == "tiny":
        solvers = list(TINY_SOLVERS)
    if solvers is not None:
        unknown = [s for s in solvers if s not in SOLVERS]
        if unknown:
            print(f"error: unknown solver(s): {', '.join(unknown)} (registered: {', '.join(SOLVERS)})",
                  file=sys.stderr)
            return 2
    from graphs.errors import InputError
    from placement.inputs import time_limit_seconds

    limits: dict[str, float | None] = {}
    try:  # the one rule for a time limit (placement.inputs): positive seconds, inf for none
        for item in args.limit:
            name, eq, value = (x.strip() for x in item.partition("="))
            try:
                seconds = float(value) if name and eq else None
            except ValueError:
                seconds = None
            if seconds is None:
                raise InputError(f"--limit {item!r}: expected SOLVER=SECONDS, e.g. ip=30")
            if name not in SOLVERS:  # as --solvers: a misspelt name would silently keep the default limit
                raise InputError(f"--limit {item!r}: unknown solver {name!r} (registered: "
                                 f"{', '.join(SOLVERS)})")
            limits[name] = time_limit_seconds(seconds, f"--limit {name}")
        time_limit = time_limit_seconds(args.time_limit)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"error: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.seed < 0:  # as placement place: the solvers that read a seed refuse a negative one mid-sweep
        print(f"error: --seed must be a non-negative integer, got {args.seed}", file=sys.stderr)
        return 2
    jobs = build_jobs(specs, time_limit=time_limit, solvers=solvers, seed=args.seed, limits=limits)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not jobs:  # nothing to run: say why, before --out is made, and leave the tables written alone
        print(f"error: {_why_no_jobs(specs, solvers, args, has_reference)}", file=sys.stderr)
        return 2
    dropped = [] if args.solvers is None else [s for s in dict.fromkeys(solvers or ())
                                               if not any(j.solver == s for j in jobs)]
    if dropped:  # a solver named by --solvers that would run nowhere: refused, never silently left out
        print(f"error: {_why_dropped(specs, solvers or [], dropped)}; nothing was run", file=sys.stderr)
        return 2
    ran = list(dict.fromkeys(j.solver for j in jobs))
    for name in limits:
        if name not in ran:
            print(f"note: --limit {name}: {name} is not among this run's solvers ({', '.join(ran)})",
                  file=sys.stderr)
    from placement.outputs import output_dir, output_file

    losses = _losses(args.out, args.report, jobs)
    if losses and not args.replace:  # before any run or folder: nothing is lost unless asked for
        print(f"error: {'; and '.join(losses)}. Nothing was run: choose another --out or --report, or add "
              "--replace to write them anyway", file=sys.stderr)
        return 2
    if args.out is not None or args.report:
        try:  # the outputs given, before any run
            if args.out is not None:
                output_dir(args.out, "--out")
            if args.report:
                output_file(args.report, "--report")
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.out is None:  # never the checkout's committed tables unless asked for by --out
        try:
            args.out = fresh_results_dir()
        except OSError as e:
            print(f"error: cannot make a results folder here ({e.strerror or e}); give --out DIR",
                  file=sys.stderr)
            return 2
        print(f"results in {args.out} (--out {args.out} resumes this sweep)", file=sys.stderr)
    for loss in losses:
        print(f"note: --replace: {loss}", file=sys.stderr)
    store = ResultStore(os.path.join(args.out, "results.jsonl"))
    before = store.records()
    done = set() if args.rerun else {r["key"] for r in before if "key" in r}
    todo = sum(j.key not in done for j in jobs)
    print(f"{len(jobs)} runs ({len(jobs) - todo} already in {store.path}); {len(specs)} workloads",
          file=sys.stderr)
    progress = Progress(todo, enabled=not args.quiet)
    interrupted = False
    previous = None
    if threading.current_thread() is threading.main_thread():
        import signal

        def _stop(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _stop)  # a killed sweep stops its runs too
    try:
        new = run_jobs(jobs, store, workers=args.workers, use_ray=args.ray is not None,
                       ray_address=args.ray or None, rerun=args.rerun, on_result=progress.update)
    except KeyboardInterrupt:
        interrupted, new = True, []
        print("\ninterrupted: finished runs are kept in the results file; run again to resume",
              file=sys.stderr)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    # the tables cover every run in the file, of every workload (earlier sweeps' included)
    records = store.records()
    print(_appended(store.path, before, records), file=sys.stderr)
    paths = report.write_tables(records, args.out)
    plots = report.write_plots(records, os.path.join(args.out, "plots")) if args.plots else []
    paths += plots
    if args.report:
        command = "placement bench " + " ".join(argv if argv is not None else sys.argv[1:])
        report.write_report(records, args.report, machine=machine_description(), config=vars(args),
                            notes=notes, plots=plots, command=command, results_file=store.path)
        paths.append(args.report)
    for p in paths:
        print(f"wrote {p}", file=sys.stderr)
    if interrupted:
        return 130
    bad = [r for r in new if r.get("status") in ("killed",) or str(r.get("message", "")).startswith("crash")]
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
