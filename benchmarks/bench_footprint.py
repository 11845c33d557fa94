"""Footprint of the README's first commands: wall time and peak memory of a cold first ``place`` (empty
numba kernel cache), a warm one, ``placement --help``, and ``split --verify`` of the example model.

    python -m benchmarks.bench_footprint [--rounds 3] [--baseline DIR]

Every measurement is a fresh process (``sys.executable -m placement ...``); its peak resident memory comes
from ``os.wait4``. Medians over ``--rounds`` (CPU seconds
suffer less than wall seconds from a busy machine). ``--baseline DIR``: another checkout of the project
(e.g. ``git archive REV | tar -x -C DIR``) measured the same way in the same rounds, each command run in
both checkouts one after the other, so that a busy machine slows both alike. Results:
``README_footprint.md``.
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


def measure(args: list[str], env: dict | None = None, root: str = ROOT) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of ``python -m placement ARGS`` run
    from the checkout ``root`` (``-m`` puts the working directory first on the path: that checkout's
    packages, not an installed copy)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "placement", *args], cwd=root, env=env,
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
    ap.add_argument("--baseline", metavar="DIR", help="another checkout to measure in the same rounds")
    args = ap.parse_args(argv)
    roots = {"after": ROOT}
    if args.baseline:
        roots = {"before": os.path.abspath(args.baseline), **roots}
    names = ["placement --help", "place, cold (empty kernel cache)", "place, warm", "split --verify"]
    rows = {(name, label): [] for name in names for label in roots}
    with tempfile.TemporaryDirectory() as tmp:
        model, result = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "result.json")
        measure(["example", model])
        for r in range(args.rounds):
            for label, root in roots.items():
                rows["placement --help", label].append(measure(["--help"], root=root))
                env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, f"numba-{label}-{r}"))
                place = ["place", model, "--devices", DEVICES, "--out", result]
                rows["place, cold (empty kernel cache)", label].append(measure(place, env, root))
                rows["place, warm", label].append(measure(place, env, root))
                rows["split --verify", label].append(measure(["split", model, result, "--out-dir",
                                                              os.path.join(tmp, f"stages-{label}-{r}"),
                                                              "--verify"], root=root))
    cols = " | ".join(f"{label}: wall s | CPU s | peak RSS MiB" for label in roots)
    print(f"| command (README example, 6-layer encoder, {DEVICES}) | {cols} |")
    print("|---|" + "---:|---:|---:|" * len(roots))
    for name in names:
        cells = []
        for label in roots:
            xs = rows[name, label]
            cells.append(" | ".join(f"{statistics.median(x[k] for x in xs):.{2 if k < 2 else 0}f}"
                                    for k in range(3)))
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
