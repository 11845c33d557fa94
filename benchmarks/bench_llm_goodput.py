"""Goodput of LLM serving on the stage model (issue 25): the batch size, micro-batch count and plan of
most requests/s meeting TTFT and TPOT targets, beside the plan ``place`` gives for decode tokens/s.

    python -m benchmarks.bench_llm_goodput [--only NAME] [--markdown out.md]
    python -m benchmarks.bench_llm_goodput --phases [--only NAME] [--markdown out.md]
    python -m benchmarks.bench_llm_goodput --buckets [--markdown out.md]

Each case is a model config (Llama-2 shapes, nothing downloaded), a cluster, a request mix and the two
targets. Two rows per case:

* ``goodput``: :func:`placement.goodput.goodput_search` as ``placement place config.json --objective
  goodput`` runs it (batch sizes 1, 2, 4, .. until the weights and KV caches outgrow every device's
  memory together; per batch every power-of-two micro-batch count; the exact stage DP's plan of most
  tokens/s for each; goodput scored by :class:`graphs.llm.ServingModel`);
* ``decode DP, default N``: the same batch sweep with the decode problem's default micro-batch count
  (what ``placement place config.json --batch-size B`` solved until it chose the count itself), the
  best goodput over the batches.

``--phases``: on a prefill-heavy and a decode-heavy mix, the colocated search's best beside every split
of the device kinds into a prefill pool and a decode pool (:func:`placement.goodput.disaggregated_search`,
what ``--disaggregate`` adds); the layout ``place`` keeps is marked. A split's time is the
disaggregated search's divided by the number of splits.

``--buckets``: the cheapest devices per request-size bucket (:func:`placement.goodput.provision_buckets`,
Mélange's provisioning) for a range of rates, beside the cheapest single instance type, at the
assumed prices :data:`PRICES`.

Times are wall-clock seconds of the whole sweep on this machine.
"""

from __future__ import annotations

import argparse
import time


def whole(search):
    """``search`` (a goodput or disaggregated search), which a Ctrl-C ends with what it found (the
    command line's rule): here the Ctrl-C stops the benchmark, as it did before the searches kept
    their points, so no table holds a search cut short."""
    if search.interrupted:
        raise KeyboardInterrupt
    return search


LLAMA2_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 32000,
              "torch_dtype": "float16"}
LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
             "torch_dtype": "float16"}
# chat-like: short prompts and answers of a few hundred tokens (a ShareGPT-like shape, our buckets)
CHAT = {"buckets": [{"input": 128, "output": 256, "weight": 30}, {"input": 512, "output": 256, "weight": 35},
                    {"input": 1024, "output": 512, "weight": 25},
                    {"input": 2048, "output": 512, "weight": 10}]}
# prefill-heavy: long documents, short summaries
SUMMARY = {"buckets": [{"input": 2048, "output": 128, "weight": 50},
                       {"input": 4096, "output": 256, "weight": 40},
                       {"input": 8192, "output": 256, "weight": 10}]}
HELIX24 = "a100:4,l4:8,t4:12"
CASES = [  # name, config, devices, mix name, mix, TTFT ms, TPOT ms
    ("70b-chat", LLAMA2_70B, HELIX24, "chat", CHAT, 3000, 200),
    ("70b-chat-tight", LLAMA2_70B, HELIX24, "chat", CHAT, 1000, 100),
    ("70b-summary", LLAMA2_70B, HELIX24, "summary", SUMMARY, 8000, 200),
    ("70b-summary-tight", LLAMA2_70B, HELIX24, "summary", SUMMARY, 1500, 100),
    ("7b-chat", LLAMA2_7B, "a100:2,t4:4", "chat", CHAT, 1000, 100),
]


def case_model(name, cfg, devices, mix, ttft_ms, tpot_ms):
    """The serving model of one case of :data:`CASES`, :data:`PHASES` or :data:`BUCKET_CASES` (targets in
    ms)."""
    from graphs.devices import parse_devices
    from graphs.llm import ServingModel, read_config, read_mix

    return ServingModel(read_config(cfg, name=name), parse_devices(devices), read_mix(mix),
                        ttft=ttft_ms / 1e3, tpot=tpot_ms / 1e3)


def _row(name, how, devices, mix_name, ttft, tpot, pt, seconds):
    if pt is None:
        return (f"| {name} | {how} | {devices} | {mix_name} | {ttft} / {tpot} | - | - | - | - | - | 0 | - "
                f"| - | {seconds:.1f} |")
    s = pt.serving
    stages = ", ".join(f"{pt.problem.kinds[x.stage.kind].name} {x.stage.t}x{x.stage.d}"
                       for x in pt.evaluation.stages)
    return (f"| {name} | {how} | {devices} | {mix_name} | {ttft} / {tpot} | {pt.batch} | "
            f"{pt.problem.microbatches} | {stages} | {s.tokens_per_s:,.0f} | {s.tpot * 1e3:.1f} | "
            f"{s.goodput:.3f} | {100 * s.attainment:.0f}% | {s.limit} | {seconds:.1f} |")


def run(only: str | None = None) -> list[str]:
    from placement.goodput import AUTO_BATCH_CAP, goodput_search
    from solvers.base import Status
    from solvers.registry import solve

    rows = ["| case | plan | devices | mix | TTFT / TPOT target (ms) | batch | N | stages (kind t x d) | "
            "decode tokens/s | TPOT ms at the rate | goodput req/s | meet | limit | time (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cfg, devices, mix_name, mix, ttft, tpot in CASES:
        if only and name != only:
            continue
        model = case_model(name, cfg, devices, mix, ttft, tpot)
        t = time.perf_counter()
        search = whole(goodput_search(model, None, solve))
        rows.append(_row(name, "goodput", devices, mix_name, ttft, tpot, search.best,
                         time.perf_counter() - t))
        print(rows[-1], flush=True)
        t = time.perf_counter()
        best = None
        for i in range(AUTO_BATCH_CAP.bit_length()):
            p = model.problem(2 ** i)
            r = solve(p)
            if r.status is Status.INFEASIBLE:
                break
            sv = model.evaluate(p, r.plan, 2 ** i, evaluation=r.evaluation)
            if best is None or sv.goodput > best.serving.goodput:
                from placement.goodput import GoodputPoint

                best = GoodputPoint(2 ** i, p, r, r.plan, r.evaluation, sv, False, None)
        rows.append(_row(name, "decode DP, default N", devices, mix_name, ttft, tpot, best,
                         time.perf_counter() - t))
        print(rows[-1], flush=True)
    return rows


DECODE_HEAVY = {"buckets": [{"input": 128, "output": 1024, "weight": 1}]}
PREFILL_HEAVY = {"buckets": [{"input": 4096, "output": 64, "weight": 1}]}
PHASES = [  # name, config, devices, mix name, mix, TTFT ms, TPOT ms
    ("7b-prefill-heavy", LLAMA2_7B, "a100:2,l4:4", "prefill-heavy", PREFILL_HEAVY, 1000, 30),
    ("7b-decode-heavy", LLAMA2_7B, "a100:2,l4:4", "decode-heavy", DECODE_HEAVY, 1000, 30),
    ("70b-prefill-heavy", LLAMA2_70B, HELIX24, "prefill-heavy", PREFILL_HEAVY, 3000, 200),
    ("70b-decode-heavy", LLAMA2_70B, HELIX24, "decode-heavy", DECODE_HEAVY, 3000, 200),
]


def phases(only: str | None = None) -> list[str]:
    """Colocated against disaggregated (``--disaggregate``): the colocated search's best, then every
    split of the device kinds into a prefill pool and a decode pool."""
    from placement.goodput import disaggregated_search, goodput_search
    from solvers.registry import solve

    rows = ["| case | devices | mix (input/output) | TTFT / TPOT target (ms) | layout | prefill pool "
            "| decode pool | batch | N | goodput req/s | meet | limit | KV move ms | time (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, cfg, devices, mix_name, mix, ttft, tpot in PHASES:
        if only and name != only:
            continue
        b = mix["buckets"][0]
        model = case_model(name, cfg, devices, mix, ttft, tpot)
        t = time.perf_counter()
        co = whole(goodput_search(model, None, solve))
        t_co = time.perf_counter() - t
        t = time.perf_counter()
        di = whole(disaggregated_search(model, None, solve))
        t_di = time.perf_counter() - t
        best = max([co.best] + [x.best for _, _, x, _ in di.splits if x and x.best],
                   key=lambda pt: pt.serving.goodput if pt else -1.0)
        head = f"| {name} | {devices} | {mix_name} ({b['input']}/{b['output']}) | {ttft} / {tpot} "

        def cell(pt, best=best):
            if pt is None:
                return "- | - | 0 | - | - | -"
            s = pt.serving
            mark = " **(kept)**" if pt is best else ""
            return (f"{pt.batch} | {pt.problem.microbatches} | {s.goodput:.3f}{mark} "
                    f"| {100 * s.attainment:.0f}% | {s.limit} | {s.kv_transfer * 1e3:.1f}")

        rows.append(head + f"| colocated | {devices} | {devices} | {cell(co.best)} | {t_co:.1f} |")
        print(rows[-1], flush=True)
        for pre, dec, x, _ in di.splits:
            rows.append(head + f"| disaggregated | {pre} | {dec} | {cell(x.best if x else None)} "
                        f"| {t_di / len(di.splits):.1f} |")
            print(rows[-1], flush=True)
    return rows


PRICES = {"a100": 3.67, "l4": 0.80, "t4": 0.53}  # assumed $ per device-hour (typical on-demand, 2026)
BUCKET_CASES = [  # name, config, devices, mix name, mix, TTFT ms, TPOT ms, rates (requests/s)
    ("7b-chat", LLAMA2_7B, "a100:4,l4:8,t4:8", "chat", CHAT, 1000, 100, (2.0, 8.0, 20.0)),
]


def buckets(only=None) -> list[str]:
    from placement.goodput import bucket_instances, provision_buckets
    from solvers.registry import solve

    rows = ["| case | devices | mix | TTFT / TPOT target (ms) | rate req/s "
            "| per bucket: instances (kind x devices: count) | $/h | one instance type: instances, $/h "
            "| instances scored (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, cfg, devices, mix_name, mix, ttft, tpot, rates in BUCKET_CASES:
        if only and name != only:
            continue
        model = case_model(name, cfg, devices, mix, ttft, tpot)
        prices = [PRICES[s.name] for s in model.devices.specs]
        t = time.perf_counter()
        inst = bucket_instances(model, prices, solve)
        took = time.perf_counter() - t
        for rate in rates:
            out = provision_buckets(model, rate, prices, solve, instances=inst)
            used = ", ".join(f"{x.kind} x{x.count}: {m}" for x, m in zip(out.instances, out.used) if m)
            one = out.single and out.instances[out.single[0]]
            single = "none fits" if out.single is None else \
                f"{one.kind} x{one.count}: {out.single[1]}, {out.single[2]:.2f}"
            rows.append(f"| {name} | {devices} | {mix_name} | {ttft} / {tpot} | {rate:g} | {used} "
                        f"| {out.cost:.2f} | {single} | {took:.1f} |")
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="one case: " + ", ".join(c[0] for c in CASES))
    ap.add_argument("--markdown", default=None, metavar="OUT.md")
    ap.add_argument("--phases", action="store_true", help="the colocated / disaggregated table instead: "
                    + ", ".join(c[0] for c in PHASES))
    ap.add_argument("--buckets", action="store_true", help="the cheapest devices per request-size bucket")
    args = ap.parse_args()
    rows = buckets(args.only) if args.buckets else phases(args.only) if args.phases else run(args.only)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
