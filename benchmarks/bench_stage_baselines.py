"""Baselines on the replicated model, Piper's workloads: time per sample of the pipeline-only optimum
(``d = 1``), the replicated optimum (``dp``'s stage form), PipeDream's planner (``pipedream``'s stage
form) and pure data parallelism; then, per schedule, the replicated optimum's peak memory per device and
its simulated period (``placement.simulate.simulate_plan``) next to the evaluator's numbers.

    python -m benchmarks.bench_stage_baselines [--skip-gnmt]
"""

from __future__ import annotations

import argparse
import math
import os
import time

GiB = 2 ** 30
SETTINGS = [
    ("bert32a100", {}),
    ("bert32a100", dict(devices=8, memory=8 * GiB, bandwidth=25 * GiB)),
    ("bert32a100", dict(devices=64, memory=8 * GiB, bandwidth=25 * GiB)),
    ("bert32a100", dict(devices=64, memory=2 * GiB, bandwidth=25 * GiB)),
    ("bert32a100", dict(devices=512, memory=8 * GiB, bandwidth=25 * GiB)),
    ("bert32a100", dict(devices=512, memory=2 * GiB, bandwidth=25 * GiB)),
    ("resnet", {}),
    ("gnmt", {}),
]


def _fmt(r) -> str:
    if r.plan is None:
        return "infeasible" if str(r.status) == "infeasible" else f"none ({r.status})"
    return f"{r.objective:.6g} ({len(r.plan)} st., d≤{max(s.d for s in r.plan)})"


def _setting(name: str, kw: dict) -> str:
    if not kw:
        return f"{name} (file)"
    return f"{name} k={kw['devices']} {kw['memory'] // GiB} GiB"


def main(argv: list[str] | None = None) -> int:
    from graphs.piper import read_piper
    from placement.simulate import simulate_plan
    from solvers.dp_stages import solve_problem as exact
    from solvers.pipedream_stages import data_parallel
    from solvers.pipedream_stages import solve_problem as pipedream
    from tests.instances import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-gnmt", action="store_true", help="skip GNMT (its exact DP takes ~20 s)")
    args = ap.parse_args(argv)
    root = os.path.join(WORKLOADS, "piper")
    print("| setting | pipeline only (d = 1) | replicated optimum | PipeDream's planner | "
          "pure data parallel | PipeDream / optimum |")
    print("|---|---|---|---|---|---|")
    for name, kw in SETTINGS:
        if name == "gnmt" and args.skip_gnmt:
            continue
        p = read_piper(os.path.join(root, f"{name}.json"), **kw)
        t0 = time.perf_counter()
        best = exact(p)
        t_best = time.perf_counter() - t0
        pipe = exact(p.with_options(max_replicas=1))
        pd = pipedream(p)
        dp = data_parallel(p)
        both = pd.plan is not None and best.plan is not None
        ratio = f"{pd.objective / best.objective:.2f}" if both else "—"
        print(f"| {_setting(name, kw)} | {_fmt(pipe)} | {_fmt(best)} [{t_best:.1f} s] | {_fmt(pd)} | "
              f"{_fmt(dp)} | {ratio} |")
    print()
    print("Per schedule, the replicated optimum of each setting, simulated (placement show's simulation):")
    print()
    print("| setting | schedule | time/sample (model = simulated bottleneck) | max peak GB model | "
          "max peak GB simulated | y = simulated y | simulated period | bubble |")
    print("|---|---|---|---|---|---|---|---|")
    for name, kw in SETTINGS[2:4] + SETTINGS[6:7]:
        base = read_piper(os.path.join(root, f"{name}.json"), **kw)
        for schedule in ("1f1b", "gpipe", "pipedream", "2bw"):
            p = base.with_options(schedule=schedule)
            r = exact(p)
            if r.plan is None:
                print(f"| {_setting(name, kw)} | {schedule} | {_fmt(r)} | | | | | |")
                continue
            sim = simulate_plan(p, r.plan)
            same_t = math.isclose(sim.bottleneck_per_sample, r.objective, rel_tol=1e-9)
            same_y = all(s.peak_in_flight == s.model_in_flight for s in sim.stages)
            m_model = max(s.model_memory for s in sim.stages) / 1e9
            m_sim = max(s.peak_memory for s in sim.stages) / 1e9
            print(f"| {_setting(name, kw)} | {schedule} | {r.objective:.6g} "
                  f"({'equal' if same_t else 'DIFFERENT'}) | {m_model:.3f} | {m_sim:.3f} | "
                  f"{'yes' if same_y else 'NO'} | {sim.period_per_sample:.6g} | "
                  f"{100 * sim.bubble_fraction:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
