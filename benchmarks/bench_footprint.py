"""Footprint of the README's first commands: wall time and peak memory of a cold first ``place`` (empty
numba kernel cache), a warm one, ``placement --help``, and ``split --verify`` of the example model.

    python -m benchmarks.bench_footprint [--rounds 3]

Every measurement is a fresh process (``sys.executable -m placement ...``); its peak resident memory comes
from ``os.wait4``. Medians over ``--rounds`` (CPU seconds
suffer less than wall seconds from a busy machine). Results: ``README_footprint.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = "a100:2,t4:2,cpu:1"


def measure(args: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of ``python -m placement ARGS``."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "placement", *args], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"placement {' '.join(args)} failed: {err[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # KiB on Linux


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_footprint",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model, result = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "result.json")
        measure(["example", model])
        rows = {"placement --help": [], "place, cold (empty kernel cache)": [], "place, warm": [],
                "split --verify": []}
        for r in range(args.rounds):
            rows["placement --help"].append(measure(["--help"]))
            env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, f"numba-{r}"))
            rows["place, cold (empty kernel cache)"].append(
                measure(["place", model, "--devices", DEVICES, "--out", result], env))
            rows["place, warm"].append(measure(["place", model, "--devices", DEVICES, "--out", result], env))
            rows["split --verify"].append(measure(["split", model, result, "--out-dir",
                                                   os.path.join(tmp, "stages"), "--verify"]))
    print(f"| command (README example, 6-layer encoder, {DEVICES}) | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for name, xs in rows.items():
        wall, cpu, mem = (statistics.median(x[k] for x in xs) for k in range(3))
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {mem:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
