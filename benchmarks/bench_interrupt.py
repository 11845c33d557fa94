"""Ctrl-C benchmark (see benchmarks/README_interrupt.md): one SIGINT at many moments of ``place``,
``frontier``, ``provision``, ``run`` and ``cluster simulate``; how fast and how cleanly each ends.

Each command runs as a real process (``sys.executable -m placement ...``, in a session of its own, the
SIGINT sent to its whole process group as a terminal's Ctrl-C is) on inputs the tool makes itself:

* ``place``: ``placement example m.onnx --layers 6`` on ``a100:2,t4:2,cpu:1`` (stage model, exact DP);
* ``frontier``: the same model on ``a100:2,t4:2`` with ``--time-limit 8`` (the DP is not proven by then);
* ``provision``: the same model, ``--available a100:2,t4:2``, the example prices, 500 samples/s under
  1.45 ms (serving IPs tried cheapest first);
* ``run``: the ``place`` result (a stage plan) run as a pipeline of onnxruntime workers, ``-n 10``;
* ``cluster simulate``: ``placement example jobs.json``, ``--policy all --no-cache`` (one DP per job for
  its curve, then every policy's simulation).

First each command runs twice uninterrupted (its duration D: the shorter). Then one SIGINT comes at
``--moments`` moments spread evenly over [0.05 s, D), and, for the commands that use numba's kernels, at
``--cold`` moments with an empty kernel cache (``NUMBA_CACHE_DIR`` a fresh folder: the kernels compile)
while they compile. Per moment: seconds from the SIGINT to the exit, the exit code, whether stderr has
a traceback (``Traceback``, ``Exception ignored``, ``terminate called``, ``Fatal Python error``), whether
the result files written are complete JSON, processes of the group left behind. A run that had ended
before the signal is recorded as ``finished``, not as a pass. A moment passes when the command ends
within ``--goal`` seconds (2) with exit 130 and ``error: interrupted`` last on stderr, or with exit 0
and a complete result (the Ctrl-C came after the work was done, or ``place`` stopped with its best
placement so far), with no traceback and nothing of the group left running.

    python -m benchmarks.bench_interrupt [--moments 22] [--cold 2] [--commands place,run,...]
        [--ceiling 30] [--out benchmarks/results/interrupt.json]

``--run-exits TRIES`` instead measures ``run``'s exit after a Ctrl-C at the phases of :data:`RUN_PHASES`
(``--phases``), ``TRIES`` times each; ``--load N`` runs ``N`` competing CPU-bound processes (``while 1:
pass``) meanwhile, and ``--root DIR`` runs the command from another checkout (the code before a change;
the inputs are made with this one):

    python -m benchmarks.bench_interrupt --run-exits 10 --load 3 [--root /path/to/old/checkout]
        --out benchmarks/results/interrupt_run_exits.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GOAL_S = 2.0
BAD_STDERR = ("Traceback", "Exception ignored", "terminate called", "Fatal Python error")


@dataclass
class Command:
    """One command under test: its arguments (``{m}``, ``{out}`` ... filled from the inputs), the result
    files it writes (globs, relative to the moment's folder) and whether it uses numba's kernels."""

    name: str
    argv: list[str]
    results: list[str] = field(default_factory=list)
    numba: bool = True
    done: str = ""  # on stdout once the command has written and shown its result: its work is over


COMMANDS = {
    "place": Command("place", ["place", "{m}", "--devices", "a100:2,t4:2,cpu:1", "--out", "{out}/r.json"],
                     ["r.json"], done="result written to"),
    "frontier": Command("frontier", ["frontier", "{m}", "--devices", "a100:2,t4:2", "--time-limit", "8",
                                     "--out", "{out}/f.json"], ["f.json", "f.*.json"],
                        done="frontier written to"),
    "provision": Command("provision", ["provision", "{m}", "--available", "a100:2,t4:2", "--prices",
                                       "{prices}", "--target-throughput", "500", "--latency-slo", "1.45",
                                       "--out", "{out}/p.json"], ["p.json"], done="plan written to"),
    "run": Command("run", ["run", "{m}", "{plan}", "-n", "10"], [], numba=False, done="outputs match"),
    "cluster simulate": Command("cluster simulate", ["cluster", "simulate", "{jobs}", "--policy", "all",
                                                     "--no-cache", "--out", "{out}/c.json"], ["c.json"],
                                done="result written to"),
}


_CODE = {"root": ROOT}  # the checkout whose code the commands run (--root)


def _env(cache: str | None = None, root: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    root = root or ROOT
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
    env["PYTHONUNBUFFERED"] = "1"  # what the command printed is in the file when the signal goes
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    return env


def _placement(argv: list[str], cwd: str) -> None:
    subprocess.run([sys.executable, "-m", "placement", *argv], cwd=cwd, env=_env(), check=True,
                   stdout=subprocess.DEVNULL)


def make_inputs(folder: str) -> dict[str, str]:
    """The inputs, made by the tool itself: a 6-layer BERT-style model, its placement (a stage plan, the
    input of ``run``), the example prices and the example job list."""
    m, plan = os.path.join(folder, "m.onnx"), os.path.join(folder, "plan.json")
    prices, jobs = os.path.join(folder, "prices.toml"), os.path.join(folder, "jobs.json")
    _placement(["example", m, "--layers", "6"], folder)
    _placement(["place", m, "--devices", "a100:2,t4:2,cpu:1", "--out", plan], folder)
    _placement(["provision", "--example-prices", prices], folder)
    _placement(["example", jobs], folder)
    return {"m": m, "plan": plan, "prices": prices, "jobs": jobs}


def _group(pgid: int) -> list[int]:
    """Living (not zombie) processes of process group ``pgid`` (Linux /proc)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", encoding="utf-8") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                if rest[0] != "Z" and int(rest[3]) == pgid:
                    found.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return found


def _mapped(pid: int, fragment: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return fragment in f.read()
    except OSError:
        return False


def _result_state(cmd: Command, folder: str) -> str:
    """'complete' (every result file written parses as JSON), 'incomplete', 'none' (nothing written) or
    'n/a' (the command writes none)."""
    if not cmd.results:
        return "n/a"
    files = sorted({p for pattern in cmd.results for p in glob.glob(os.path.join(folder, pattern))})
    if not files:
        return "none"
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                json.load(f)
        except (OSError, ValueError):
            return "incomplete"
    return "complete"


def _children(pid: int) -> int:
    """How many children process ``pid`` has (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as f:
            return len(f.read().split())
    except OSError:
        return 0


def run_once(cmd: Command, inputs: dict[str, str], *, at: float | None = None,
             after_numba: float | None = None, cold: bool = False, ceiling: float = 30.0,
             goal: float = GOAL_S, after_child: float | None = None, children: int = 1) -> dict:
    """Run ``cmd`` once; with ``at`` (seconds after the start), ``after_numba`` (seconds after llvmlite is
    mapped) or ``after_child`` (seconds after it has ``children`` child processes) send one SIGINT to its
    process group then. Returns what happened (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="bench-interrupt-") as folder:
        argv = [a.format(out=folder, **inputs) for a in cmd.argv]
        env = _env(os.path.join(folder, "numba-cache") if cold else None, root=_CODE["root"])
        with open(os.path.join(folder, "stdout"), "w+") as out, \
                open(os.path.join(folder, "stderr"), "w+") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "placement", *argv], cwd=folder, env=env,
                                    stdout=out, stderr=err, start_new_session=True)
            rec: dict = {"cold": cold}
            if at is None and after_numba is None and after_child is None:
                proc.wait()
                rec.update(duration_s=round(time.monotonic() - t0, 3), rc=proc.returncode)
            else:
                if after_numba is not None:
                    while proc.poll() is None and not _mapped(proc.pid, "llvmlite"):
                        time.sleep(0.003)
                    target = time.monotonic() + after_numba
                elif after_child is not None:
                    while proc.poll() is None and _children(proc.pid) < children:
                        time.sleep(0.003)
                    target = time.monotonic() + after_child
                else:
                    target = t0 + at
                while proc.poll() is None and time.monotonic() < target:
                    time.sleep(min(0.005, max(0.0, target - time.monotonic())))
                sent = time.monotonic()
                rec["at_s"] = round(sent - t0, 3)
                out.flush()
                with open(out.name, encoding="utf-8", errors="replace") as seen:
                    # its result already shown: a Ctrl-C now may rightly end it with 0
                    rec["done_at_signal"] = bool(cmd.done) and cmd.done in seen.read()
                if after_numba is not None:
                    rec["after_numba_s"] = after_numba
                if proc.poll() is not None:
                    rec.update(finished=True, rc=proc.returncode)
                else:
                    os.killpg(proc.pid, signal.SIGINT)
                    try:
                        proc.wait(ceiling)
                        rec["exit_s"] = round(time.monotonic() - sent, 3)
                    except subprocess.TimeoutExpired:
                        rec["exit_s"], rec["hang"] = None, True
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    rec.update(finished=False, rc=proc.returncode)
                    deadline = time.monotonic() + 2.0  # workers (run) get a moment to go
                    while _group(proc.pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    left = _group(proc.pid)
                    rec["left_running"] = len(left)
                    for pid in left:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        rec["traceback"] = any(s in stderr for s in BAD_STDERR)
        lines = stderr.strip().splitlines()
        rec["last_line"] = lines[-1][:200] if lines else ""
        # Python's own start-up (site's .pth files, runpy finding the package), before the program's
        # first line: out of its reach. Its traceback has no frame of the project's files.
        rec["python_startup"] = rec["traceback"] and ("init_import_site" in stderr
                                                      or os.path.join(ROOT, "") not in stderr)
        rec["result"] = _result_state(cmd, folder)
        if rec["result"] == "n/a" and cmd.done:
            rec["result"] = "complete" if cmd.done in stdout else "none"
        tail = stderr[-3000:]
    if "exit_s" in rec or rec.get("hang"):
        # exit 0: the result was already shown, or place stopped with its best placement so far
        zero_ok = rec["result"] == "complete" and (rec["done_at_signal"] or cmd.name == "place")
        rec["pass"] = (not rec.get("hang") and not rec["traceback"] and rec["exit_s"] <= goal
                       and rec["left_running"] == 0 and rec["result"] != "incomplete"
                       and ((rec["rc"] == 130 and rec["last_line"] == "error: interrupted")
                            or (rec["rc"] == 0 and zero_ok)))
        if not rec["pass"]:
            rec["stderr_tail"] = tail
    return rec


def bench(cmd: Command, inputs: dict[str, str], moments: int, cold: int, ceiling: float,
          goal: float) -> dict:
    """The uninterrupted duration, then ``moments`` warm moments and ``cold`` cold ones."""
    # the shorter of two runs: on a busy machine one run may take half as long again as the next
    bases = [run_once(cmd, inputs) for _ in range(2)]
    base = min(bases, key=lambda b: b["duration_s"])
    base["durations_s"] = [b["duration_s"] for b in bases]
    duration = base["duration_s"]
    print(f"{cmd.name}: uninterrupted {' and '.join(f'{d:.2f}' for d in base['durations_s'])} s, "
          f"rc {base['rc']}", flush=True)
    step = (duration - 0.05) / moments
    runs = []
    for k in range(moments):
        rec = run_once(cmd, inputs, at=0.05 + k * step, ceiling=ceiling, goal=goal)
        runs.append(rec)
        _say(cmd.name, rec)
    if cmd.numba:  # an empty kernel cache: the kernels compile, for tens of seconds here
        for k in range(cold):
            rec = run_once(cmd, inputs, after_numba=0.5 + 2.0 * k, cold=True, ceiling=ceiling, goal=goal)
            runs.append(rec)
            _say(cmd.name, rec)
    return {"command": cmd.name, "argv": cmd.argv, "uninterrupted": base, "moments": runs,
            "summary": summarise(runs)}


def _say(name: str, rec: dict) -> None:
    where = f"{rec['at_s']:.2f} s" + (" (cold)" if rec["cold"] else "")
    if rec.get("finished"):
        print(f"  {name} @ {where}: finished before the signal (rc {rec['rc']})", flush=True)
        return
    took = "HANG" if rec.get("hang") else f"{rec['exit_s']:.2f} s"
    flag = "ok" if rec["pass"] else ("FAIL (Python start-up)" if rec["python_startup"] else "FAIL")
    print(f"  {name} @ {where}: exit {rec['rc']} after {took}, result {rec['result']}, "
          f"traceback {rec['traceback']}, left {rec['left_running']}: {flag} [{rec['last_line'][:80]}]",
          flush=True)


def summarise(runs: list[dict]) -> dict:
    """Moments tried (signal sent), passed, finished first; max and median seconds to exit; codes seen."""
    tried = [r for r in runs if not r.get("finished")]
    times = [r["exit_s"] for r in tried if r.get("exit_s") is not None]
    return {
        "tried": len(tried), "passed": sum(r["pass"] for r in tried),
        "finished_first": sum(bool(r.get("finished")) for r in runs),
        "max_exit_s": max(times) if times else None,
        "median_exit_s": round(statistics.median(times), 3) if times else None,
        "hangs": sum(bool(r.get("hang")) for r in tried),
        "exit_codes": sorted({r["rc"] for r in tried}),
        "tracebacks": sum(r["traceback"] for r in tried),
        "in_python_startup": sum(r["python_startup"] for r in tried),
        "exit_0_after_done": sum(r["rc"] == 0 and r["done_at_signal"] for r in tried),
        "incomplete_results": sum(r["result"] == "incomplete" for r in tried),
        "left_running": sum(r["left_running"] for r in tried),
        "cold_tried": sum(r["cold"] for r in tried),
        "cold_max_exit_s": max((r["exit_s"] or float("inf") for r in tried if r["cold"]), default=None),
    }


def table(results: list[dict]) -> str:
    """A Markdown table, one row per command."""
    rows = ["| command | uninterrupted s | moments tried | passed | finished first | max s to exit | "
            "median s | exit codes | tracebacks (in Python's start-up) | incomplete results | "
            "cold: tried, max s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        cold = f"{s['cold_tried']}, {s['cold_max_exit_s']}" if s["cold_tried"] else "—"
        rows.append(f"| `{r['command']}` | {r['uninterrupted']['duration_s']:.2f} | {s['tried']} "
                    f"| {s['passed']} "
                    f"| {s['finished_first']} | {s['max_exit_s']} | {s['median_exit_s']} | "
                    f"{', '.join(map(str, s['exit_codes']))} | {s['tracebacks']} "
                    f"({s['in_python_startup']}) | "
                    f"{s['incomplete_results']} "
                    f"| {cold} |")
    return "\n".join(rows)


#: run's phases: ``start-up``, 0.1 s after its first child (multiprocessing's resource tracker, started
#: with the first queue: the parent serialises the sub-models then); ``workers``, 0.1 s after its
#: second (the first worker: the workers start); ``mid-run`` and ``end``, half and nine tenths of its
#: uninterrupted duration
RUN_PHASES = ("start-up", "workers", "mid-run", "end")


def run_exits(inputs: dict[str, str], tries: int, ceiling: float, goal: float,
              phases: tuple[str, ...] = RUN_PHASES) -> dict:
    """``run``'s exit after one Ctrl-C at each of ``phases`` (:data:`RUN_PHASES`), ``tries`` times each
    (interleaved, so that a change of the machine's load falls on every phase alike)."""
    cmd = COMMANDS["run"]
    bases = [run_once(cmd, inputs) for _ in range(2)]
    duration = min(b["duration_s"] for b in bases)
    print(f"run: uninterrupted {' and '.join(str(b['duration_s']) for b in bases)} s", flush=True)
    runs: dict[str, list[dict]] = {p: [] for p in phases}
    for _ in range(tries):
        for phase in phases:
            if phase in ("start-up", "workers"):
                rec = run_once(cmd, inputs, after_child=0.1, children=1 if phase == "start-up" else 2,
                               ceiling=ceiling, goal=goal)
            else:
                rec = run_once(cmd, inputs, at=(0.5 if phase == "mid-run" else 0.9) * duration,
                               ceiling=ceiling, goal=goal)
            rec["phase"] = phase
            runs[phase].append(rec)
            _say(f"run ({phase})", rec)
    return {"command": "run", "argv": cmd.argv,
            "uninterrupted": {"durations_s": [b["duration_s"] for b in bases]},
            "phases": {p: {"moments": r, "summary": summarise(r)} for p, r in runs.items()}}


def run_exits_table(res: dict) -> str:
    """A Markdown table of :func:`run_exits`, one row per phase."""
    rows = ["| phase | tried | passed | finished first | median s to exit | max s to exit | exit codes | "
            "tracebacks | left running |", "|---|---|---|---|---|---|---|---|---|"]
    for phase, r in res["phases"].items():
        s = r["summary"]
        rows.append(f"| {phase} | {s['tried']} | {s['passed']} | {s['finished_first']} | "
                    f"{s['median_exit_s']} | {s['max_exit_s']} | {', '.join(map(str, s['exit_codes']))} | "
                    f"{s['tracebacks']} | {s['left_running']} |")
    return "\n".join(rows)


def _burners(n: int) -> list[subprocess.Popen]:
    """``n`` competing CPU-bound processes."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table and write the JSON. Exit 1 when a moment failed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moments", type=int, default=22, help="warm moments per command (default 22)")
    ap.add_argument("--cold", type=int, default=2,
                    help="moments with an empty kernel cache per numba command (default 2)")
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help=f"comma-separated, of: {', '.join(COMMANDS)} (default all)")
    ap.add_argument("--ceiling", type=float, default=30.0,
                    help="seconds after the SIGINT before a run is killed and recorded as a hang")
    ap.add_argument("--goal", type=float, default=GOAL_S, help="seconds to exit that pass (default 2)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "interrupt.json"))
    ap.add_argument("--run-exits", type=int, default=0, metavar="TRIES",
                    help="measure run's exit at start-up, mid-run and the end, TRIES times each (only that)")
    ap.add_argument("--phases", default=",".join(RUN_PHASES),
                    help=f"with --run-exits: comma-separated, of {', '.join(RUN_PHASES)} (default all)")
    ap.add_argument("--load", type=int, default=0, help="competing CPU-bound processes meanwhile (default 0)")
    ap.add_argument("--root", default=ROOT,
                    help="the checkout whose code the commands run (default this one)")
    args = ap.parse_args(argv)
    _CODE["root"] = os.path.abspath(args.root)
    names = [c.strip() for c in args.commands.split(",") if c.strip()]
    unknown = [n for n in names if n not in COMMANDS]
    if unknown:
        ap.error(f"unknown command(s): {', '.join(unknown)}")
    if not sys.platform.startswith("linux"):
        ap.error("moments and left-over processes are found through /proc (Linux)")
    # the commands start with Ctrl-C's default disposition, as from a terminal: started from a
    # background shell job this process has SIGINT ignored, its children would inherit that, and a
    # SIGINT before the command installs its handler would be ignored instead of delivered
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-interrupt-inputs-") as folder:
        inputs = make_inputs(folder)
        burners = _burners(args.load)
        try:
            if args.run_exits:
                phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
                if not phases or any(p not in RUN_PHASES for p in phases):
                    ap.error(f"--phases: of {', '.join(RUN_PHASES)}")
                results = [run_exits(inputs, args.run_exits, args.ceiling, args.goal, phases)]
            else:
                results = [bench(COMMANDS[n], inputs, args.moments, args.cold, args.ceiling, args.goal)
                           for n in names]
            load = os.getloadavg()  # before the competing processes go
        finally:
            for b in burners:
                b.kill()
                b.wait()
    print()
    print(run_exits_table(results[0]) if args.run_exits else table(results))
    meta = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_average": load,
            "wall_s": round(time.time() - started, 1), "moments": args.moments, "cold": args.cold,
            "goal_s": args.goal, "competing_processes": args.load, "root": _CODE["root"], "argv": sys.argv}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "commands": results}, f, indent=1)
    print(f"\nwritten to {args.out}; load average {meta['load_average']}, {meta['wall_s']} s")
    if args.run_exits:
        return 0 if all(p["summary"]["passed"] == p["summary"]["tried"]
                        for p in results[0]["phases"].values()) else 1
    return 0 if all(r["summary"]["passed"] == r["summary"]["tried"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
