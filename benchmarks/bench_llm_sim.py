"""The serving simulator against the plans' predicted figures (issue 25, "Simulator"): each plan serves
a Poisson trace at 80% of its planned rate (:func:`graphs.llm_sim.simulate_plan`), and the simulated
output tokens/s is compared with what the serving model predicts at that rate; then at 150% (overload),
the simulated capacity against the planned one; and at 150% with prefills that take no time, the decode
side alone: at 150% of the full batch's ``B / T0`` (in requests/s: ``/ E[output]``) with prefills that
take no time, the simulated decode tokens/s against ``B / T0``.

    python -m benchmarks.bench_llm_sim [--only NAME] [--seconds S] [--seed N] [--markdown out.md] [--pools]

``--pools``: the disaggregated layouts instead (:func:`run_pools`).

Plans, per case (the clusters, mixes and targets of :mod:`benchmarks.bench_llm_goodput`):

* ``goodput``: the best plan of ``placement place config.json --objective goodput`` (the batch and
  micro-batch sweep, :func:`placement.goodput.goodput_search`);
* ``decode DP``: the exact stage DP's plan of most decode tokens/s at the same batch and the default
  micro-batch count (what ``placement place config.json --batch-size B`` solves, with the mix's contexts).

*Planned rate*: :class:`graphs.llm.ServingModel`'s rate for the plan without targets (requests/s, limited by
the KV slots or the prefill capacity); *planned tokens/s* at a rate ``lam`` below it: ``lam x E[output]``.
"""

from __future__ import annotations

import argparse
import time

from benchmarks.bench_llm_goodput import CHAT, HELIX24, LLAMA2_7B, LLAMA2_70B, SUMMARY, whole

CASES = [  # name, config, devices, mix name, mix, TTFT ms, TPOT ms (the goodput search's targets)
    ("70b-chat", LLAMA2_70B, HELIX24, "chat", CHAT, 3000, 200),
    ("70b-summary", LLAMA2_70B, HELIX24, "prefill-heavy", SUMMARY, 8000, 200),
    ("7b-chat", LLAMA2_7B, "a100:2,l4:4", "chat", CHAT, 1000, 100),
    ("7b-summary", LLAMA2_7B, "a100:2,l4:4", "prefill-heavy", SUMMARY, 8000, 200),
]


def _ms(x):
    return f"{x * 1e3:.0f}" if x >= 0.1 else f"{x * 1e3:.1f}"


def _split(res) -> str:
    """The simulated mean TTFT split (slot wait, first-stage prefill wait, prefill from its start) and
    the serving model's (slot wait, M/G/1 wait, mean prefill latency)."""
    pa, pl = res.ttft_parts, res.planned
    return (f"{_ms(pa['slot'])} / {_ms(pa['queue'])} / {_ms(pa['prefill'])} "
            f"({_ms(pl['slot_wait_s_at_rate'])} / {_ms(pl['prefill_wait_s_at_rate'])} / "
            f"{_ms(pl['prefill_mean_s'])})")


def run(only=None, seconds=600.0, seed=0) -> list[str]:
    from benchmarks.bench_llm_goodput import case_model
    from graphs.llm_sim import _stage_timers, poisson_trace, simulate_pipeline, simulate_plan
    from placement.goodput import goodput_search
    from solvers.registry import solve

    rows = ["| case | plan | batch / N | stages (kind t x d) | planned req/s (limit) | 80%: planned tokens/s "
            "| trace asks tokens/s | simulated tokens/s | sim / planned "
            "| TTFT ms mean / p50 / p90 / p99 (model mean) "
            "| TTFT split ms: slot / prefill queue / prefill (model) | TPOT ms mean / p50 / p99 (model) "
            "| 150%: simulated / planned tokens/s | prefills free, 150% of B / T0: decode tokens/s / B / T0 "
            "| sim s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cfg, devices, mix_name, mix, ttft, tpot in CASES:
        if only and name != only:
            continue
        model = case_model(name, cfg, devices, mix, ttft, tpot)
        best = whole(goodput_search(model, None, solve)).best
        plans = [("goodput", best.problem, best.plan, best.batch)]
        p = model.problem(best.batch)
        r = solve(p)
        if r.plan is not None:
            plans.append(("decode DP", p, r.plan, best.batch))
        for how, problem, plan, batch in plans:
            t = time.perf_counter()
            lo = simulate_plan(model, problem, plan, batch, rate="auto", seconds=seconds, seed=seed)
            hi = simulate_plan(model, problem, plan, batch, rate=1.5 * lo.planned["rate_rps"],
                               seconds=seconds, seed=seed)
            # the decode side alone: prefills that take no time, at 150% of the full batch's B / T0
            full = batch / lo.planned["tpot_full_s"]
            steps, _ = _stage_timers(model, problem, plan)
            bk = model.mix.buckets
            reqs = [(x, bk[b].input, bk[b].output, b)
                    for x, b in poisson_trace(model.mix, 1.5 * full / lo.planned["mean_output"], seconds,
                                              seed)]
            free = simulate_pipeline([st.d for st in plan], batch, problem.microbatches,
                                     lambda i, n, c, steps=steps: steps[i](n, c), lambda i, q: 0.0, reqs,
                                     seconds=seconds,
                                     warmup=lo.warmup)
            took = time.perf_counter() - t
            pl = lo.planned
            from graphs.parallel import evaluate_plan

            ev = evaluate_plan(problem, plan)
            stages = ", ".join(f"{problem.kinds[x.stage.kind].name} {x.stage.t}x{x.stage.d}"
                               for x in ev.stages)
            ratio = lo.tokens_per_s / pl["tokens_per_s_at_rate"]
            ok = "yes" if abs(ratio - 1) <= 0.10 else "**no**"
            tt, tp = lo.ttft, lo.tpot
            sat = hi.tokens_per_s / hi.planned["tokens_per_s_at_rate"]
            rows.append(f"| {name} ({mix_name}) | {how} | {batch} / {problem.microbatches} | {stages} "
                        f"| {pl['rate_rps']:.3f} ({pl['limit']}) | {pl['tokens_per_s_at_rate']:,.0f} "
                        f"| {lo.offered_tokens_per_s:,.0f} | {lo.tokens_per_s:,.0f} "
                        f"| {100 * ratio:.1f}% {ok} "
                        f"| {_ms(tt['mean'])} / {_ms(tt['p50'])} / {_ms(tt['p90'])} / {_ms(tt['p99'])} "
                        f"({_ms(pl['ttft_mean_s_at_rate'])}) "
                        f"| {_split(lo)} "
                        f"| {_ms(tp['mean'])} / {_ms(tp['p50'])} / {_ms(tp['p99'])} "
                        f"({_ms(pl['tpot_s_at_rate'])}) "
                        f"| {hi.tokens_per_s:,.0f} / {hi.planned['tokens_per_s_at_rate']:,.0f} "
                        f"= {100 * sat:.0f}% | {free.decode_tokens_per_s:,.0f} / {full:,.0f} "
                        f"= {100 * free.decode_tokens_per_s / full:.0f}% "
                        f"| {took:.1f} |")
            print(rows[-1], flush=True)
    return rows


def run_pools(only=None, seconds=600.0, seed=0) -> list[str]:
    """The disaggregated layouts: per case of :data:`benchmarks.bench_llm_goodput.PHASES`, the best split
    into a prefill pool and a decode pool (``place --disaggregate``'s, kept or not) simulated at 80% and
    150% of its planned rate (:func:`graphs.llm.disaggregated_goodput` without targets)."""
    from benchmarks.bench_llm_goodput import PHASES, case_model
    from graphs.llm_sim import simulate_plan
    from placement.goodput import best_pool, disaggregated_search, goodput_search
    from solvers.registry import solve

    rows = ["| case | prefill pool | decode pool | batch / N | planned req/s (limit) | KV move ms "
            "| 80%: planned tokens/s | trace asks tokens/s | simulated tokens/s | sim / planned "
            "| TTFT ms mean / p50 / p99 (model mean) | TPOT ms mean / p99 (model) "
            "| 150%: simulated / planned tokens/s | kept | sim s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cfg, devices, mix_name, mix, ttft, tpot in PHASES:
        if only and name != only:
            continue
        model = case_model(name, cfg, devices, mix, ttft, tpot)
        split = whole(disaggregated_search(model, None, solve))
        if split.best is None:
            continue
        colocated = whole(goodput_search(model, None, solve)).best
        kept = colocated is None or split.best.serving.goodput > colocated.serving.goodput * (1 + 1e-12)
        best = split.best
        pre_model, dec_model = best_pool(split, best, models=True)
        pre_problem, pre_plan, _ = best.serving.prefill_pool
        pool = (pre_model, pre_problem, pre_plan)
        t = time.perf_counter()
        lo = simulate_plan(dec_model, best.problem, best.plan, best.batch, rate="auto", seconds=seconds,
                           seed=seed, prefill_pool=pool)
        hi = simulate_plan(dec_model, best.problem, best.plan, best.batch, rate=1.5 * lo.planned["rate_rps"],
                           seconds=seconds, seed=seed, prefill_pool=pool)
        took = time.perf_counter() - t
        pl = lo.planned
        ratio = lo.tokens_per_s / pl["tokens_per_s_at_rate"]
        ok = "yes" if abs(ratio - 1) <= 0.10 else "**no**"
        tt, tp = lo.ttft, lo.tpot
        pre_d, dec_d = best_pool(split, best)
        rows.append(f"| {name} ({mix_name}) | {pre_d} | {dec_d} | {best.batch} / {best.problem.microbatches} "
                    f"| {pl['rate_rps']:.3f} ({pl['limit']}) | {_ms(pl['kv_transfer_s'])} "
                    f"| {pl['tokens_per_s_at_rate']:,.0f} | {lo.offered_tokens_per_s:,.0f} "
                    f"| {lo.tokens_per_s:,.0f} | {100 * ratio:.1f}% {ok} "
                    f"| {_ms(tt['mean'])} / {_ms(tt['p50'])} / {_ms(tt['p99'])} "
                    f"({_ms(pl['ttft_mean_s_at_rate'])}) | {_ms(tp['mean'])} / {_ms(tp['p99'])} "
                    f"({_ms(pl['tpot_s_at_rate'])}) "
                    f"| {hi.tokens_per_s:,.0f} / {hi.planned['tokens_per_s_at_rate']:,.0f} "
                    f"= {100 * hi.tokens_per_s / hi.planned['tokens_per_s_at_rate']:.0f}% "
                    f"| {'yes' if kept else 'no'} | {took:.1f} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="one case: " + ", ".join(c[0] for c in CASES))
    ap.add_argument("--seconds", type=float, default=600.0, help="seconds of arrivals per trace "
                    "(default 600)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", default=None, metavar="OUT.md")
    ap.add_argument("--pools", action="store_true", help="the disaggregated layouts of the phases cases "
                    "(benchmarks.bench_llm_goodput --phases) instead")
    args = ap.parse_args()
    rows = (run_pools if args.pools else run)(args.only, args.seconds, args.seed)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
