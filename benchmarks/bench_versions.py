"""The same solves on this tree and on an older commit, in alternating processes on the same machine.

    python -m benchmarks.bench_versions --base d1075c0 [--repeats 3] [--only gnmt,llama]

``--base`` is checked out into a temporary git worktree (its numba kernels compile once, in a warm-up
process, into their own cache). Each case runs ``--repeats`` times per tree, old and new alternating, in
a fresh process that first solves a tiny instance (kernels loaded) and then times the case's solve
alone; the table gives both medians and new / old. Values must agree (the script stops otherwise).

Cases: the exact DP on the slow reference workloads (GNMT, BERT L-12 training, InceptionV3 training
layer graph), with their reference C++ times beside; ``auto`` on the project's 16-layer Llama training
graph over ``a100:4,t4:4,cpu:8`` (exact); the stage-model DP on Piper's three files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = os.environ.get("PLACEMENT_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))

# (name, python body defining `run()` -> value, reference C++ seconds or None); the body runs in the
# tree under test, so it only uses what both trees have
_REF = """
from graphs.reference import read_workload as load_workload
from placement.api import place
w = load_workload({path!r})
def run():
    p = place(w.graph, w.cluster, "dp")
    assert p.status.value == "optimal", p.solution.message
    return p.max_load
"""
_LLAMA = """
from graphs.devices import parse_devices
from graphs.onnx_loader import parse_model
from graphs.onnx_workload import graph_workload
from graphs.transformer import llama
from placement.api import place
w = graph_workload(parse_model(llama(16)), parse_devices("a100:4,t4:4,cpu:8"), training=True)
def run():
    p = place(w.graph, w.cluster, "auto")
    assert p.status.value == "optimal", p.solution.message
    return p.max_load
"""
_PIPER = """
import importlib
from graphs.piper import read_piper as load_piper
for name in ("solvers.dp_stages", "solvers.dp_" + "replicated"):  # the module's name before the rename
    try:
        dp = importlib.import_module(name)
        break
    except ImportError:
        continue
problem = load_piper({path!r})
def run():
    r = dp.solve_problem(problem)
    return r.objective
"""
_WARM = """
from graphs.reference import read_workload as load_workload
from placement.api import place
place(load_workload({path!r}).graph, load_workload({path!r}).cluster, "dp")
"""


def cases() -> list[tuple[str, str, float | None]]:
    ti = os.path.join(WORKLOADS, "throughput-inputs")
    with open(os.path.join(WORKLOADS, "reference_results.json"), encoding="utf-8") as f:
        refs = json.load(f)["throughput"]
    out = []
    for wl in ("LayerGraphs/gnmt_training", "OperatorGraphs/bert_L-12_training",
               "LayerGraphs/inceptionv3_training"):
        t = refs.get(f"throughput-inputs/{wl}.json", {}).get("dp_time_s")
        out.append((wl, _REF.format(path=os.path.join(ti, wl + ".json")), t))
    out.append(("llama16 training (auto)", _LLAMA, None))
    for f in ("gnmt", "resnet", "bert32a100"):
        out.append((f"piper/{f}", _PIPER.format(path=os.path.join(WORKLOADS, "piper", f + ".json")), None))
    return out


def _time(tree: str, body: str, warm: str) -> tuple[float, float]:
    code = warm + body + """
import json, time
t0 = time.perf_counter()
v = run()
print(json.dumps([time.perf_counter() - t0, float(v)]))
"""
    env = dict(os.environ, PYTHONPATH=tree)
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{tree}: {r.stderr.strip()[-2000:]}")
    t, v = json.loads(r.stdout.strip().splitlines()[-1])
    return t, v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the older commit to compare with")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=None, help="comma-separated substrings of case names")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(WORKLOADS, "throughput-inputs")):
        print(f"the reference workloads are not at {WORKLOADS}", file=sys.stderr)
        return 2
    warm = _WARM.format(path=os.path.join(WORKLOADS, "throughput-inputs", "LayerGraphs",
                                          "bert24_inference.json"))
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "old")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", old, args.base], check=True,
                       capture_output=True)
        try:
            rows = []
            for name, body, ref in cases():
                if args.only and not any(s in name for s in args.only.split(",")):
                    continue
                times = {"old": [], "new": []}
                values = {}
                _time(old, body, warm), _time(ROOT, body, warm)  # compile each tree's kernels once
                for _ in range(args.repeats):
                    for label, tree in (("old", old), ("new", ROOT)):
                        t, v = _time(tree, body, warm)
                        times[label].append(t)
                        values[label] = v
                if abs(values["old"] - values["new"]) > 1e-9 * max(1.0, abs(values["old"])):
                    raise SystemExit(f"{name}: values differ: old {values['old']!r}, new {values['new']!r}")
                o, n = statistics.median(times["old"]), statistics.median(times["new"])
                rows.append((name, values["new"], o, n, ref))
                print(f"{name:34s} value {values['new']:.10g}  old {o:8.3f} s  new {n:8.3f} s  "
                      f"new/old {n / o:.3f}" + (f"  new/ref {n / ref:.3f}" if ref else ""), flush=True)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], capture_output=True)
    print("\n| case | value | old s | new s | new / old | new / reference C++ |\n|---|---|---|---|---|---|")
    for name, v, o, n, ref in rows:
        print(f"| {name} | {v:.10g} | {o:.3f} | {n:.3f} | {n / o:.3f} | {f'{n / ref:.3f}' if ref else '—'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
