"""``placement place config.json``: decoding an LLM (a model config in the Hugging Face layout) on the
stage model (:mod:`graphs.llm`): layer ranges on stages with replicas and tensor parallelism, memory =
weights + the KV cache of the batch, the objective the time per generated token.

    placement place config.json --devices a100:4,l4:8 --batch-size 64 --context 2048
                    [--microbatches N] [--max-replicas D] [--solver dp|ip|auto] [--out plan.json]

The result file is a stage plan (:func:`placement.results.stage_result_dict`, times in seconds per
token) whose ``problem`` section records the model config's path, the devices, the batch and the
context, so that ``evaluate`` re-scores it without flags.

**Goodput** (:class:`graphs.llm.ServingModel`): requests/s whose time to first token and time per
output token meet targets, for a request mix (docs/formats.md):

    placement place config.json --objective goodput --requests mix.json --ttft-slo 2000 --tpot-slo 100
                    [--devices ...] [--batch-size auto|B|B1,B2,..] [--disaggregate]

sweeps the batch size (``auto``: 1, 2, 4, .. until the weights and KV caches outgrow every device's
memory together), solves each batch's decode problem with the exact stage DP (most tokens/s), scores
every plan's goodput with the serving model, and, where a batch's plans are few
(:data:`placement.goodput.EXHAUSTIVE_PLANS`), scores all of them
(:func:`placement.goodput.goodput_search`). ``--disaggregate`` also tries separate prefill and decode
pools (:func:`placement.goodput.disaggregated_search`) and keeps the layout of more goodput.
"""

from __future__ import annotations

import math

from graphs.errors import InputError
from graphs.jsonio import read_json
from solvers.base import INTERRUPTED, relative_gap

from ..goodput import best_pool, disaggregated_search, goodput_search, provision_buckets, targets_missed
from ..goodput import format_ms as _ms
from ..inputs import DEFAULT_CONTEXT, GOODPUT_FLAGS
from ..outputs import aligned

__all__ = ["add_options", "place", "evaluate", "place_goodput", "provision_command", "serving_dict"]


def add_options(p) -> None:
    g = p.add_argument_group("LLM model configs (config.json: decoding, one token per sample)")
    g.add_argument("--context", type=int, default=None, metavar="TOKENS",
                   help=f"tokens of each sequence's KV cache (default {DEFAULT_CONTEXT}); --batch-size is "
                        f"the number of sequences decoded together (default 1)")
    g.add_argument("--requests", default=None, metavar="MIX.json",
                   help="--objective goodput: the request mix, buckets of input and output tokens with "
                        "weights (docs/formats.md)")
    g.add_argument("--ttft-slo", type=float, default=None, metavar="MS",
                   help="--objective goodput: the time-to-first-token target (ms; required, as is "
                        "--tpot-slo)")
    g.add_argument("--tpot-slo", type=float, default=None, metavar="MS",
                   help="--objective goodput: the time-per-output-token target (ms; required, as is "
                        "--ttft-slo)")
    g.add_argument("--disaggregate", action="store_true", default=None,
                   help="--objective goodput: also try separate prefill and decode pools (whole device kinds "
                        "to each, the KV cache moved between them) and keep the better layout")
    g.add_argument("--simulate", default=None, metavar="RATE|auto",
                   help="--objective goodput: simulate the plan serving a Poisson trace at RATE requests/s "
                        "(auto: 80%% of the plan's planned rate), continuous batching with KV-cache "
                        "admission "
                        "(graphs/llm_sim.py); prints tokens/s and TTFT / TPOT percentiles")
    g.add_argument("--trace-seconds", type=float, default=None, metavar="S",
                   help="--simulate: seconds of arrivals (default 120; a warm-up of 20-50%% of it is not "
                        "measured)")
    g.add_argument("--plot", default=None, metavar="F.png",
                   help="--simulate: draw tokens/s over time and the TTFT / TPOT distributions (matplotlib)")
    if not any("--seed" in a.option_strings for a in p._actions):
        g.add_argument("--seed", type=int, default=0, help="--simulate: seed of the trace (default 0)")


def _problem(args, saved: dict | None = None, *, microbatches: int | None = None):
    """The decode problem ``args`` (and a result's ``saved`` settings) describe, and its settings;
    ``microbatches``: this count instead of the given or recorded one."""
    make, settings, _ = _decode(args, saved)
    return make(microbatches), settings


def _decode(args, saved: dict | None = None):
    """What :func:`_problem` reads, once: ``(make, settings, devices)``, where ``make(n)`` is the decode
    problem at ``n`` micro-batches (``None``: the given or recorded count, else the default) and
    ``devices`` the parsed :class:`graphs.devices.DeviceSet`."""
    from graphs.devices import parse_devices
    from graphs.llm import decode_problem, read_model_config

    saved = saved or {}
    _refuse_flags(args)
    batch = args.batch_size if args.batch_size is not None else saved.get("batch_size", 1)
    if not isinstance(batch, int):
        raise InputError(f"--batch-size {batch}: a model config takes one batch size (sequences decoded "
                         f"together)")
    context = args.context if args.context is not None else saved.get("context", DEFAULT_CONTEXT)
    devices = args.devices or saved.get("devices") or "a100:4"
    ds = parse_devices(devices, args.device_files or ())
    cfg = read_model_config(args.workload)
    memory_context = saved.get("memory_context") if args.context is None else None

    def make(microbatches: int | None = None):
        return decode_problem(cfg, ds, batch=batch, context=context,
                              microbatches=microbatches or args.microbatches or saved.get("microbatches"),
                              max_replicas=args.max_replicas or saved.get("max_replicas"),
                              memory_context=memory_context)

    settings = {"devices": str(ds), "batch_size": batch, "context": context, "model": cfg.name,
                "params": cfg.params}
    if memory_context is not None:
        settings["memory_context"] = memory_context
    return make, settings, ds


def place(args) -> int:
    """Solve the decode problem of the model config ``args.workload`` and print the stage table. Without
    ``--microbatches`` the micro-batch count is chosen too (:func:`_best_count`)."""
    from .. import stages

    make, settings, devices = _decode(args)
    problem = make()
    # gpipe is the decode's memory: every sequence's KV cache held at once (placement show simulates it)
    sequences = "sequence" if settings.get("batch_size") == 1 else "sequences"
    extra = ("{batch_size} " + sequences + " at {context} tokens; gpipe: every micro-batch's KV cache held "
             "at once" + _replicas_words(problem.max_replicas))

    def workload(p):
        return stages.StageWorkload(p, source=args.workload, unit="ms", sample="token", settings=settings,
                                    extra=extra)

    from graphs.llm import microbatch_counts

    counts = microbatch_counts(settings["batch_size"], devices)
    if args.microbatches is not None or len(counts) == 1:
        return stages.place(args, workload(problem))
    problem, r = _best_count(args, counts, problem, make)
    return stages.emit_answer(args, workload(problem), args.clock.credited(r))


def _best_count(args, counts: list[int], first, make):
    """The decode problem's best plan over its micro-batch count, each of ``counts`` (powers of two
    dividing the batch, the default first: the most) solved with ``--solver``: fewer, larger micro-batches
    read each stage's weights fewer times per token, so one device alone may serve several times the
    tokens/s that the default's small micro-batches give it. Returns ``(problem, answer)`` of the most
    tokens/s: ``optimal`` only where every count was solved to optimality (or proven to have no plan);
    its ``bound`` the least over the counts, where each has one. The most micro-batches fit wherever
    fewer do (the same KV caches, in smaller pieces), so none fitting there ends the search. ``first`` is
    the problem at ``counts[0]``; ``make(n)`` builds the one at ``n`` (:func:`_decode`)."""
    import copy
    import dataclasses

    from solvers.base import Status
    from solvers.registry import solver_info

    from ..outputs import Progress
    from ..stages import solve_args

    clock = args.clock
    reports = solver_info(args.solver or "auto").stage_progress
    answers = []
    cut = ""  # why the counts after the last answer were not tried
    for N in counts:
        cut = clock.halted() if answers else ""
        if cut:
            break
        bar = Progress(f"placing ({N} micro-batch{'es' if N > 1 else ''})",
                       enabled=True if getattr(args, "progress", False) else None)
        try:
            problem = first if N == first.microbatches else make(N)
            a = copy.copy(args)
            a.time_limit = clock.for_solve(args.solver, "stages", threads=getattr(args, "threads", None))
            r = solve_args(problem, a, progress=bar if reports and bar.enabled else None)
        except KeyboardInterrupt:  # let through before a plan (the stage DP's): the plans so far stand
            if not any(x.plan is not None for _, x in answers):
                raise
            cut = INTERRUPTED
            break
        finally:
            bar.done()
        answers.append((problem, r))
        if r.interrupted:
            cut = INTERRUPTED
            break
        if r.status is Status.INFEASIBLE and N == counts[0]:
            break
    found = [(p, r) for p, r in answers if r.plan is not None]
    if not found:
        return answers[0]
    problem, r = min(found, key=lambda x: x[1].objective)
    untried = counts[len(answers):] if cut else []
    unproven = [f"{p.microbatches}" + (" (interrupted)" if x.interrupted else "") for p, x in answers
                if x.status not in (Status.OPTIMAL, Status.INFEASIBLE)]
    bounds = [x.bound if x.bound is not None else x.objective if x.status is Status.OPTIMAL else
              math.inf if x.status is Status.INFEASIBLE else None for _, x in answers]
    bound = None if untried or None in bounds else min(min(bounds), r.objective)
    n = problem.microbatches
    words = (f"{n} micro-batch{'es' if n > 1 else ''}: the most tokens/s of the counts "
             f"{', '.join(map(str, counts))}")
    status = r.status
    if untried or unproven:
        if status is Status.OPTIMAL:
            status = Status.FEASIBLE
        words += "; not proven over them: " + "; ".join(filter(None, (
            f"count{'s' if len(unproven) > 1 else ''} {', '.join(unproven)} not solved to optimality"
            if unproven else "",
            f"count{'s' if len(untried) > 1 else ''} {', '.join(map(str, untried))} not tried ({cut})"
            if untried else "")))
    gap = relative_gap(r.objective, bound)
    message = f"{r.message}; {words}" if r.message else words
    r = dataclasses.replace(r, status=status, bound=bound, gap=gap, message=message,
                            time=sum(x.time for _, x in answers))
    return problem, r


def _replicas_words(max_replicas: int | None) -> str:
    """The summary's words for ``--max-replicas D`` on a model config: it caps the replicas ``d`` of a
    stage, not its tensor-parallel degree (a model config has no one-device-per-stage model)."""
    if max_replicas is None:
        return ""
    return (f"; replicas d <= {max_replicas} per stage (--max-replicas {max_replicas}; tensor-parallel "
            f"stages may still span t devices)")


def evaluate(args) -> int:
    """Re-score a plan of a model config under the settings it records."""
    from graphs.parallel import evaluate_plan

    from ..results import read_stage_result, stage_result_dict
    from ..stages import _emit, plan_from_dict, plan_summary

    data = read_json(args.split)
    saved = read_stage_result(data) if isinstance(data, dict) else None
    goodput = isinstance(saved, dict) and saved.get("objective") == "goodput"
    disaggregated = isinstance(saved, dict) and saved.get("objective") == "goodput-disaggregated"
    if disaggregated and getattr(args, "simulate", None) is not None:
        raise InputError("evaluate re-scores a disaggregated result's decode pool only; to simulate both "
                         "pools run place ... --disaggregate --simulate RATE|auto", source=args.split)
    if not goodput:
        what = ("a disaggregated goodput result, whose goodput evaluate does not re-score (its decode pool's "
                "plan only; place ... --disaggregate scores both pools)" if disaggregated else
                "a decode plan without a goodput (placed without --objective goodput)")
        refuse_goodput_options(args, f"re-scores a goodput result (placed with --objective goodput); this is "
                                     f"{what}", source=args.split)
    problem, settings = _problem(args, saved)
    plan = plan_from_dict(problem, data, source=args.split)
    ev = evaluate_plan(problem, plan)
    summary = plan_summary(problem, ev, "ms", sample="token")
    sv = None
    if goodput:  # re-score the goodput under the recorded mix and targets (or those given again)
        model = _serving_model(args, saved)
        sim = simulate_options(args)
        sv = model.evaluate(problem, plan, settings["batch_size"], evaluation=ev)
        keep = ("objective", "requests", "ttft_slo_ms", "tpot_slo_ms")
        settings.update({k: v for k, v in _settings(model, sv.batch).items() if k in keep})
        summary += "\n\n" + _bucket_table(sv) + "\n\n" + _goodput_summary(model, sv)
    message = f"plan from {args.split}"
    if disaggregated:  # said, not silently dropped: the goodput needs both pools' plans
        pool = ("the decode pool's plan re-scored (tokens/s); the goodput and the prefill pool's plan "
                "(goodput.prefill_pool in the file) are not: place ... --disaggregate scores both pools")
        message += f"; {pool}"
        summary += f"\n{pool}"
    out = stage_result_dict(problem, ev, status="feasible" if ev.valid else "invalid", solver="given plan",
                            message=message, workload=args.workload, settings=settings)
    if sv is not None:
        out["goodput"] = serving_dict(model, sv)
        if sim is not None and ev.valid:
            text, out["simulation"] = run_simulation(args, sim, model, problem, plan,
                                                     settings["batch_size"], ev)
            summary += "\n\n" + text
    _emit(args, out, problem, ev, summary, "ms", "token")
    return 0 if ev.valid else 1


# ------------------------------------------------------------------------------------------- goodput
def refuse_goodput_options(args, why: str = "applies with --objective goodput (a request mix and latency "
                                             "targets)", source: str | None = None) -> None:
    """``--requests``, ``--ttft-slo`` and ``--tpot-slo`` set the goodput objective's inputs: where
    nothing scores a goodput they are refused (``--FLAG why``), never ignored."""
    for dest, flag in GOODPUT_FLAGS:
        if getattr(args, dest, None) is not None:
            raise InputError(f"{flag} {why}", source=source)


def provision_command(args) -> int:
    """``placement provision config.json --requests MIX --target-throughput R --available SPEC``: the
    cheapest instances per request-size bucket (:func:`provision_buckets`); a table, ``--out`` / ``--json``
    the ``provision_buckets`` section. A Ctrl-C while the instances are scored mixes those scored so far
    (printed and written with a ``stopped: interrupted (Ctrl-C): ...`` line, not proven the cheapest,
    exit 0), or, where they make no mix serving the rate, is raised (exit 130)."""
    import time

    from graphs.devices import parse_devices
    from graphs.llm import ServingModel, check_slo, read_mix, read_model_config
    from solvers.registry import solve

    from ..provision import kind_prices, read_prices

    started = getattr(args, "started", None) or time.perf_counter()  # --time-limit bounds the whole command
    if args.requests is None or args.target_throughput is None or not args.available:
        raise InputError("placement provision of a model config needs --requests MIX.json, "
                         "--target-throughput R (requests/s) and --available SPEC (e.g. a100:4,l4:8)")
    if args.devices:
        raise InputError("placement provision takes --available (the devices to choose from), not --devices")
    for dest, flag, default in (
            ("latency_slo", "--latency-slo", None), ("max_replicas", "--max-replicas", None),
            ("granularity", "--granularity", None), ("microbatches", "--microbatches", None),
            ("batch_size", "--batch-size", None), ("max_solves", "--max-solves", 200), ("gap", "--gap", 1e-4),
            ("threads", "--threads", None)):
        if getattr(args, dest, default) != default:
            raise InputError(f"{flag} does not apply to a model config (the goodput search picks batch "
                             f"sizes and plans per instance; the targets are --ttft-slo and --tpot-slo)")
    if getattr(args, "costs", "roofline") != "roofline":
        raise InputError("--costs does not apply to a model config: its times come from the config and the "
                         "devices' specs (--device-file)")
    ds = parse_devices(args.available, args.device_files or ())
    prices = kind_prices(ds.specs, read_prices(args.prices) if args.prices else None)
    slo = {}
    for dest, flag in (("ttft_slo", "--ttft-slo"), ("tpot_slo", "--tpot-slo")):
        v = check_slo(flag, getattr(args, dest))
        slo[dest] = None if v is None else v / 1e3
    need_targets(slo, command="placement provision of a model config")
    model = ServingModel(read_model_config(args.model), ds, read_mix(args.requests), ttft=slo["ttft_slo"],
                         tpot=slo["tpot_slo"])
    limit = getattr(args, "time_limit", None)
    deadline = started + limit if limit is not None and math.isfinite(limit) else None
    from graphs.errors import InfeasibleError

    try:
        out = provision_buckets(model, args.target_throughput, prices, solve, deadline=deadline)
        proven_none = ""
    except InfeasibleError as e:  # every instance type scored, and no mix serves the rate: proven
        out, proven_none = None, str(e)
    if out is not None and out.interrupted and not out.found:  # no mix of what was scored: nothing to keep
        raise KeyboardInterrupt
    buckets = model.mix.buckets
    if out is None or not out.found:
        return _no_mix(args, buckets, out, proven_none, limit)
    rows = [f"{x.kind} x{x.count}: {m} (" + ", ".join(f"{b.input}/{b.output}: {v:.4g}"
                                                       for b, v in zip(buckets, load) if v > 1e-9) + " req/s)"
            for x, m, load in zip(out.instances, out.used, out.load) if m]
    one = None if out.single is None else out.instances[out.single[0]]
    data = _provision_file(_provision_section(args.target_throughput, out, buckets))
    from ..export import emit

    def text() -> str:
        single = "no single instance type serves the mix within the devices" if one is None else \
            f"one instance type: {out.single[1]} x ({one.kind} x{one.count}), {out.single[2]:.4g} per hour"
        lines = [f"cheapest instances for {args.target_throughput:g} requests/s ({_targets(model)}), per "
                 f"request-size bucket:", *("  " + r for r in rows),
                 f"cost {out.cost:.4g} per hour; {single}"]
        if out.interrupted:
            lines += [f"stopped: {out.stopped}", "not proven the cheapest: the mix of the instances scored "
                      "before the Ctrl-C"]
        elif out.stopped:
            lines.append(f"not proven the cheapest: {out.stopped} (--time-limit {limit:g} s)")
        if out.unproven:
            lines.append(f"not proven the cheapest: {out.unproven}")
        return "\n".join(lines)

    emit(args, data, text)
    return 0


#: the schema of an LLM ``provision --out`` file (:func:`_provision_file`): no placement result, which
#: the commands that read results refuse by name (placement/inputs.py)
PROVISION_SCHEMA, PROVISION_VERSION = "placement-provision", 1


def _provision_file(section: dict) -> dict:
    """An LLM ``provision`` file (``--out``, ``--json``): its schema and version, and the
    ``provision_buckets`` ``section``."""
    return {"schema": PROVISION_SCHEMA, "version": PROVISION_VERSION, "provision_buckets": section}


def _provision_section(target: float, out, buckets) -> dict:
    """The ``provision_buckets`` section of a result: the mix ``out`` (a
    :class:`placement.goodput.BucketProvision`; ``None``: none, proven) for ``target`` requests/s, and
    the mix's ``buckets``. Without a mix its cost is null and every count 0."""
    found = out is not None and out.found
    one = out.instances[out.single[0]] if found and out.single is not None else None
    return {
        "target_rps": target, "cost_per_hour": out.cost if found else None,
        "instances": [] if out is None else [{"kind": x.kind, "devices": x.count, "price_per_hour": x.price,
                                              "capacity_rps": list(x.capacity), "count": m,
                                              "load_rps": list(load)}
                                             for x, m, load in zip(out.instances, out.used, out.load)],
        "buckets": [{"input": b.input, "output": b.output, "weight": b.weight} for b in buckets],
        "single_type": None if one is None else {"kind": one.kind, "devices": one.count,
                                                 "count": out.single[1], "cost_per_hour": out.single[2]},
        "proven_cheapest": found and not out.stopped and not out.unproven,
        "stopped": None if out is None else out.stopped or None,
        "unproven": None if out is None else out.unproven or None}


def _no_mix(args, buckets, out, proven_none: str, limit: float | None) -> int:
    """LLM ``provision`` without a mix of instances serving the rate: its file (``cost_per_hour`` null)
    and one error line, ``infeasible`` where every instance type was scored (``proven_none``, why),
    else what the time limit left out (``out.stopped``); exit 1."""
    import sys

    from ..export import emit

    larger = f"; a larger --time-limit than {limit:g} s may find one" if out is not None and out.stopped \
        and limit is not None else ""
    why = proven_none or (f"no mix of the instance types scored serves the rate of every bucket (not "
                          f"proven: {'; '.join(filter(None, (out.stopped, out.unproven)))}{larger})")
    section = {**_provision_section(args.target_throughput, out, buckets), "infeasible": bool(proven_none),
               "message": why}
    emit(args, _provision_file(section), lambda: "")
    print(f"error: {'infeasible: ' if proven_none else ''}{why}", file=sys.stderr)
    return 1


def _serving_model(args, saved: dict | None = None):
    from graphs.devices import parse_devices
    from graphs.llm import ServingModel, check_slo, read_mix, read_model_config

    saved = saved or {}
    _refuse_flags(args)
    if getattr(args, "context", None) is not None:
        raise InputError("--context does not apply with --objective goodput: the request mix sets each "
                         "sequence's context")
    if args.requests is not None:
        mix = read_mix(args.requests)
    elif saved.get("requests"):
        mix = read_mix(saved["requests"])
    else:
        raise InputError("--objective goodput needs --requests MIX.json (buckets of input and output tokens "
                         "with weights, docs/formats.md)")
    slo = {}
    for dest, flag in GOODPUT_FLAGS[1:3]:
        v = getattr(args, dest, None)
        v = v if v is not None else saved.get(dest + "_ms")
        slo[dest] = None if v is None else check_slo(flag, v) / 1000
    need_targets(slo, "the result records none" if saved else "")
    ds = parse_devices(args.devices or saved.get("devices") or "a100:4", args.device_files or ())
    cfg = read_model_config(args.workload)
    return ServingModel(cfg, ds, mix, ttft=slo["ttft_slo"], tpot=slo["tpot_slo"])


def need_targets(slo: dict, why: str = "", command: str = "--objective goodput") -> None:
    """Goodput counts the requests whose TTFT and TPOT both meet their targets (docs/serving.md): without
    one, the best rate is where the queues grow without bound, so a missing ``--ttft-slo`` or
    ``--tpot-slo`` (``slo[dest]`` is ``None``) is an :class:`InputError` naming it."""
    missing = [flag for dest, flag in GOODPUT_FLAGS[1:3] if slo.get(dest) is None]
    if missing:
        raise InputError(f"{command} needs {' and '.join(f + ' MS' for f in missing)}"
                         f"{f' ({why})' if why else ''}: goodput counts the requests whose time to first "
                         f"token and time per output token both meet their targets")


def _refuse_flags(args) -> None:
    for flag in ("max_devices", "bandwidth", "device_memory", "granularity", "training", "optimizer",
                 "costs", "dim", "schedule", "latency_slo"):
        if getattr(args, flag, None) not in (None, False, []):
            raise InputError(f"--{flag.replace('_', '-')} does not apply to a model config (it takes "
                             f"--devices, --device-file, --batch-size, --context, --microbatches, "
                             f"--max-replicas; with --objective goodput --requests, --ttft-slo, --tpot-slo)")


def _decode_solver(args) -> str:
    """Whose plan a batch size's decode problem gets, in words: the ``--solver`` named (default
    ``auto``, the exact stage DP on these problems)."""
    return f"{getattr(args, 'solver', None) or 'auto'} solver's"


def _sweep_table(search, *, mark: bool = True, who: str = "auto solver's") -> str:
    rows = [["batch", "N", "decode tokens/s", "TPOT ms (full batch)", "rate req/s", "goodput req/s",
             "meet (mean)",
             "plans scored", "limit", "note"]]
    for pt in search.points:
        if pt.serving is None:
            rows.append([str(pt.batch), "-", "-", "-", "-", "-", "-", "-", "-", pt.note])
            continue
        s = pt.serving
        scored = "all " + f"{pt.plans:,}" if pt.exhaustive else f"{who} per N"
        note = "; ".join(x for x in (pt.note, "<- best" if mark and pt is search.best else "") if x)
        rows.append([str(pt.batch), str(pt.problem.microbatches), f"{s.tokens_per_s:,.6g}", _ms(s.tpot_full),
                     f"{s.rate:.6g}", f"{s.goodput:.6g}", f"{100 * s.attainment:.0f}%", scored, s.limit,
                     note])
    return aligned(rows, lambda i: 0 < i < 7)


def _bucket_table(sv) -> str:
    rows = [["input", "output", "share", "prefill ms", "TTFT ms", "meets"]]
    for r in sv.buckets:
        rows.append([str(r.bucket.input), str(r.bucket.output), f"{100 * r.share:.1f}%", _ms(r.prefill),
                     _ms(r.ttft), "yes" if r.meets else "no"])
    return aligned(rows, lambda i: True)


def serving_dict(model, sv) -> dict:
    """The ``goodput`` section of a result file: the targets, the plan's figures (seconds, per second)
    and one row per bucket."""
    import math

    def num(x):
        return x if math.isfinite(x) else None

    return {"ttft_slo_s": model.ttft, "tpot_slo_s": model.tpot, "batch_size": sv.batch,
            "goodput_rps": sv.goodput, "rate_rps": sv.rate, "attainment": sv.attainment,
            "tokens_per_s": num(sv.tokens_per_s), "tpot_full_batch_s": num(sv.tpot_full),
            "tpot_s": num(sv.tpot), "step_latency_s": num(sv.step_latency), "wait_s": num(sv.wait),
            "kv_slot_wait_s": num(sv.slot_wait), "prefill_load": sv.prefill_load,
            "prefill_convoy_s": sv.convoy, "kv_slots_used": num(sv.slots),
            "limit": sv.limit,
            "buckets": [{"input": r.bucket.input, "output": r.bucket.output, "weight": r.bucket.weight,
                         "share": r.share, "prefill_s": r.prefill, "ttft_s": num(r.ttft), "meets": r.meets}
                        for r in sv.buckets]}


def simulate_options(args) -> tuple | None:
    """``--simulate RATE|auto``, ``--trace-seconds``, ``--seed``, ``--plot``, checked before any solve
    (``None``: no simulation asked for; ``--trace-seconds`` or ``--plot`` alone are refused)."""
    rate = getattr(args, "simulate", None)
    if rate is None:
        for dest, flag in (("trace_seconds", "--trace-seconds"), ("plot", "--plot")):
            if getattr(args, dest, None) is not None:
                raise InputError(f"{flag} applies with --simulate RATE|auto")
        return None
    from graphs.llm_sim import parse_rate

    rate = parse_rate(rate)
    seconds = args.trace_seconds if args.trace_seconds is not None else 120.0
    if not (0 < seconds < math.inf):
        raise InputError(f"--trace-seconds {seconds:g}: give a positive number of seconds")
    if args.plot is not None:
        from ..outputs import plot_file

        plot_file(args.plot)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot needs matplotlib, which is not installed (pip install matplotlib); "
                             "--simulate runs without --plot") from None
    return rate, seconds, getattr(args, "seed", 0) or 0, args.plot


def run_simulation(args, opts, model, problem, plan, batch: int, evaluation=None,
                   prefill_pool=None) -> tuple[str, dict]:
    """Simulate the plan (:func:`graphs.llm_sim.simulate_plan`; ``prefill_pool``: a disaggregated
    layout's ``(prefill model, problem, plan)``, ``model`` then the decode pool's) with a progress bar;
    the summary lines and the result file's ``simulation`` section. A Ctrl-C at any moment of it (the
    simulation, its summary, the plot) ends it alone: the section says ``interrupted`` and the plan is
    still printed and written."""
    try:
        return _simulation(args, opts, model, problem, plan, batch, prefill_pool)
    except KeyboardInterrupt:  # the plan stands (found or given): only the simulation is cut short
        return ("simulation: interrupted (Ctrl-C) before it ended: nothing measured; the plan above stands",
                {"interrupted": True})


def _simulation(args, opts, model, problem, plan, batch: int, prefill_pool) -> tuple[str, dict]:
    """:func:`run_simulation`'s work, a Ctrl-C let through."""
    from graphs.llm_sim import plot_simulation, simulate_plan

    from ..outputs import Progress as _Progress

    rate, seconds, seed, plot = opts
    progress = _Progress("simulate", enabled=True if getattr(args, "progress", False) else None)
    try:
        res = simulate_plan(model, problem, plan, batch, rate=rate, seconds=seconds,
                            seed=seed, progress=progress, keep_tokens=plot is not None,
                            prefill_pool=prefill_pool)
    finally:
        progress.done()
    pl = res.planned
    ratio = res.tokens_per_s / pl["tokens_per_s_at_rate"] if pl["tokens_per_s_at_rate"] > 0 else math.nan

    def row(name, st):
        if not st["count"]:
            return f"  {name}  none measured (no request of the window got there)"
        return (f"  {name}  mean {_ms(st['mean'])}  p50 {_ms(st['p50'])}  p90 {_ms(st['p90'])}  "
                f"p99 {_ms(st['p99'])} ms  ({st['count']} requests)")

    lines = [f"simulated: {res.rate:.6g} requests/s ({100 * pl['load']:.0f}% of the planned "
             f"{pl['rate_rps']:.6g}, limited by the {pl['limit']}) for {seconds:g} s, seed {seed}; "
             f"{res.arrived} requests, {res.finished} finished",
             f"  tokens/s {res.tokens_per_s:,.6g} (planned {pl['tokens_per_s_at_rate']:,.6g} at this rate: "
             f"{100 * ratio:.1f}%; this trace's arrivals ask for {res.offered_tokens_per_s:,.6g}), "
             f"decode tokens/s {res.decode_tokens_per_s:,.6g}, KV slots held "
             f"{res.mean_batch:.4g} of {batch} on average (measured from {res.warmup:g} s)",
             row("TTFT", res.ttft), row("TPOT", res.tpot)]
    met = res.attainment(model.ttft, model.tpot)
    if model.ttft is not None or model.tpot is not None:  # measured, request by request
        lines.append(f"  meet {_targets(model)}: {_pct_or_none(met)} of the {len(res.per_request)} requests "
                     f"arriving in the window")
    if prefill_pool is not None:
        lines[0] += (f"; disaggregated: prompts on the prefill pool ({prefill_pool[0].devices}), each KV "
                     f"cache moved in {_ms(pl['kv_transfer_s'])} ms on average")
    if plot is not None:
        plot_simulation(res, plot, title=f"{model.cfg.name}: {res.rate:.4g} requests/s on {model.devices}",
                        ttft=model.ttft, tpot=model.tpot)
        lines.append(f"plot written to {plot}")
    out = {"rate_rps": res.rate, "seconds": seconds, "warmup_s": res.warmup, "seed": seed,
           "requests": res.arrived, "finished": res.finished, "tokens_per_s": res.tokens_per_s,
           "decode_tokens_per_s": res.decode_tokens_per_s,
           "offered_tokens_per_s": res.offered_tokens_per_s, "mean_kv_slots": res.mean_batch,
           "ttft_s": res.ttft, "tpot_s": res.tpot, "planned_rate_rps": pl["rate_rps"],
           "planned_tokens_per_s": pl["tokens_per_s_at_rate"], "ratio": ratio,
           "layout": "colocated" if prefill_pool is None else "disaggregated",
           "attainment": None if math.isnan(met) else met}
    return "\n".join(lines), out


def _pct_or_none(x: float) -> str:
    return "none measured" if math.isnan(x) else f"{100 * x:.1f}%"


def _targets(model) -> str:
    parts = []
    if model.ttft is not None:
        parts.append(f"TTFT <= {_ms(model.ttft)} ms")
    if model.tpot is not None:
        parts.append(f"TPOT <= {_ms(model.tpot)} ms")
    return " and ".join(parts) or "no targets"


def _goodput_summary(model, sv) -> str:
    return (f"goodput {sv.goodput:.6g} requests/s at {sv.rate:.6g} requests/s arriving "
            f"({100 * sv.attainment:.1f}% meet {_targets(model)} at the mean wait: a mean-value model, "
            f"--simulate measures the spread), batch {sv.batch}; TPOT {_ms(sv.tpot)} ms "
            f"({_ms(sv.tpot_full)} ms for the full batch without prefills), "
            + (f"mean wait for a KV slot {_ms(sv.slot_wait)} ms, " if sv.prefill_pool is None else "")
            + f"mean prefill wait {_ms(sv.wait)} ms, prefill load {100 * sv.prefill_load:.1f}%"
            + (f" (a prompt's convoy through the stages stalls decode a further {_ms(sv.convoy)} ms on "
               f"average)" if sv.convoy > 0 else "")
            + ", KV slots in use "
            f"{sv.slots:.4g} of {sv.batch}; the rate is limited by the {sv.limit}")


def _settings(model, batch: int) -> dict:
    return {"devices": str(model.devices), "batch_size": batch, "context": model.mix.decode_context,
            "memory_context": model.mix.memory_context, "model": model.cfg.name, "params": model.cfg.params,
            "objective": "goodput",
            "requests": {"buckets": [{"input": b.input, "output": b.output, "weight": b.weight}
                                     for b in model.mix.buckets]},
            "ttft_slo_ms": None if model.ttft is None else model.ttft * 1e3,
            "tpot_slo_ms": None if model.tpot is None else model.tpot * 1e3}


def place_goodput(args) -> int:
    """``place config.json --objective goodput``: the sweep table, the best plan's stage table, its
    buckets and what is proven; with ``--disaggregate`` also every split into prefill and decode pools,
    and the better layout. A Ctrl-C during the searches ends them with the best plan so far, printed
    and written with a ``stopped: interrupted (Ctrl-C): ...`` line (exit 0; ``--simulate`` is then not
    run, its section ``{"interrupted": true}``), or, where no plan meeting the targets was found yet, is
    raised (exit 130); one during ``--simulate`` ends the simulation alone (:func:`run_simulation`)."""
    import argparse

    from ..clock import Clock
    from ..outputs import Progress as _Progress
    from ..results import stage_result_dict
    from ..serving import parse_batch_sizes
    from ..stages import format_plan, solve_args

    model = _serving_model(args)
    sim = simulate_options(args)
    batches = parse_batch_sizes(args.batch_size)
    if getattr(args, "disaggregate", False) and len(model.devices.specs) < 2:  # before any search
        raise InputError("--disaggregate splits the device kinds into a prefill pool and a decode pool: "
                         "give at least two kinds")
    solve_ns = argparse.Namespace(**{**vars(args), "objective": "max-load"})
    # --time-limit is the whole command's: each solve gets what is left, and the search stops trying
    # batch sizes (and splits into pools) once it has run out
    clock = getattr(args, "clock", None) or Clock(getattr(args, "time_limit", None))

    def solve(p):
        solve_ns.time_limit = clock.for_solve(args.solver, "stages", threads=getattr(args, "threads", None))
        return solve_args(p, solve_ns)

    progress = _Progress("goodput: batch sizes", enabled=True if args.progress else None)
    try:
        search = goodput_search(model, batches, solve, microbatches=args.microbatches,
                                max_replicas=args.max_replicas, progress=progress, halted=clock.halted)
    finally:
        progress.done()
    split = None
    pools_cut = ""  # why the splits into pools were not (all) searched, after a Ctrl-C
    if getattr(args, "disaggregate", False) and search.interrupted:
        pools_cut = f"{INTERRUPTED}: the splits into prefill and decode pools not tried"
    elif getattr(args, "disaggregate", False):
        progress = _Progress("goodput: pools", enabled=True if args.progress else None)
        try:
            split = disaggregated_search(model, batches, solve, max_replicas=args.max_replicas,
                                         microbatches=args.microbatches, progress=progress,
                                         halted=clock.halted)
        except KeyboardInterrupt:  # before any split's plan: the colocated search's stands, where it has one
            if not _serves(search.best):
                raise
            pools_cut = f"{INTERRUPTED}: the splits into prefill and decode pools cut short before any plan"
        finally:
            progress.done()
    best = search.best
    disagg = split is not None and split.best is not None and \
        (best is None or split.best.serving.goodput > best.serving.goodput * (1 + 1e-12))
    if disagg:
        best = split.best
    interrupted = bool(pools_cut) or search.interrupted or (split is not None and split.interrupted)
    if interrupted and not _serves(best):  # nothing found to keep: the command was interrupted (130)
        raise KeyboardInterrupt
    # the Ctrl-C's words first ("stopped: interrupted (Ctrl-C): ..."), then a time limit's
    said = [search.stopped, split.stopped if split is not None else "", pools_cut]
    stopped = "; ".join(sorted((x for x in said if x), key=lambda x: not x.startswith(INTERRUPTED)))
    exhaustive = not stopped and search.exhaustive and \
        (split is None or all(x[2] is None or x[2].exhaustive for x in split.splits))
    if best is None:
        from solvers.base import Status

        why = (f"{args.workload}: no plan at any batch size tried "
               f"({', '.join(str(p.batch) for p in search.points)}): "
               f"{search.points[-1].note if search.points else 'none'}")
        return _no_plan(args, model, search, why,
                        all(p.result.status is Status.INFEASIBLE for p in search.points))
    if best.serving.goodput <= 0:  # plans fit, but none meets the targets at any rate
        searches = [search] + ([x[2] for x in split.splits if x[2] is not None] if split else [])
        least = (min(x.least_tpot for x in searches), min(x.least_ttft for x in searches))
        # disaggregated pools score the prefill DP's plans only: no TTFT is proven least there
        missed = targets_missed(model, *least, exhaustive, prefill_exhaustive=split is None)
        return _no_plan(args, model, search, missed.words, missed.proven, least=least,
                        least_proven=missed.least_proven)
    sv, r = best.serving, best.result
    who = _decode_solver(args)
    if best.plan == r.plan:
        dp_word = f"the decode {who} plan at this batch and micro-batch count: " + \
            ("proven the most tokens/s" if str(r.status) == "optimal" else
             f"status {r.status}, not proven the most tokens/s")
    else:
        dp_word = f"not the decode {who} plan: the most goodput among all the problem's plans"
    if exhaustive:
        proven = ("every decode plan of every batch size and micro-batch count tried was scored: the goodput "
                  "is the most over them, exact under the serving model")
    else:
        # a batch whose kept plan is not the DP's: its micro-batch count's problem had few plans, all scored
        scored = [p.batch for p in search.points
                  if p.plan is not None and (p.exhaustive or p.plan != p.result.plan)]
        # the decode solver's status at each batch size kept: its tokens/s are proven only where optimal
        unproven = [p.batch for p in search.points if p.plan is not None and p.plan == p.result.plan
                    and str(p.result.status) != "optimal"]
        tokens = "proven" if not unproven else \
            f"not proven at batch {', '.join(map(str, unproven))} (its solver's status is not optimal)"
        proven = (f"each batch size's plan is the decode {who} at its micro-batch count (most tokens/s, "
                  f"{tokens}; not proven to be the most goodput: the goodput is that plan's, exact under "
                  "the serving model)")
        if scored:
            proven += (f", except at batch {', '.join(map(str, scored))}, where a micro-batch count's "
                       f"problem has few plans: all of them were scored and the most goodput kept")
    if split is not None:
        proven += ("; disaggregated: whole device kinds to each pool, the prefill pool's plans the prefill "
                   "DP's (most prefills/s) at each micro-batch count")
    if stopped:
        proven += f"; the search stopped early ({stopped}): the best of what was tried"
    settings = _settings(model, best.batch)
    pre_lines = []
    if disagg:
        pre_problem, pre_plan, pev = sv.prefill_pool
        pre_devices, dec_devices = best_pool(split, best)
        settings.update({"devices": dec_devices, "objective": "goodput-disaggregated",
                         "prefill_devices": pre_devices})
        pre_lines = [f"prefill pool ({pre_devices}), times per request (mean over the mix):",
                     format_plan(pre_problem, pev, "ms", "request"), "",
                     f"decode pool ({dec_devices}), times per token:"]
    data = stage_result_dict(best.problem, best.evaluation, status="feasible", solver=f"goodput sweep over "
                       f"{r.solver}", time=None, message=proven, workload=args.workload, settings=settings)
    data["goodput"] = serving_dict(model, sv)
    data["goodput"]["layout"] = "disaggregated" if disagg else "colocated"
    data["goodput"]["sweep"] = [{"batch_size": p.batch, "goodput_rps": None if p.serving is None else
                                 p.serving.goodput, "exhaustive": p.exhaustive, "note": p.note}
                                for p in search.points]
    data["goodput"]["stopped"] = stopped or None
    if disagg:
        data["goodput"]["kv_transfer_s"] = sv.kv_transfer
        data["goodput"]["prefill_pool"] = stage_result_dict(pre_problem, pev, status="feasible",
                                                            solver=r.solver, workload=args.workload)
    if split is not None:
        colocated = search.best.serving.goodput if search.best else 0.0
        data["goodput"]["layouts"] = [{"layout": "colocated", "prefill": str(model.devices),
                                       "decode": str(model.devices), "goodput_rps": colocated}] + \
            [{"layout": "disaggregated", "prefill": a, "decode": b,
              "goodput_rps": x.best.serving.goodput if x and x.best else 0.0, "note": note}
             for a, b, x, note in split.splits]
    sizes = "auto: powers of two until the weights and KV caches outgrow the devices' memory" \
        if batches is None else ", ".join(map(str, batches))
    lines = [_sweep_table(search, who=who)] + ([f"stopped: {stopped}"] if stopped else [])
    if split is not None:
        lines += ["", "colocated sweep above; prefill and decode pools:",
                  _layout_table(model, search, split, best)]
    moved = f"; KV cache moved to the decode pool in {_ms(sv.kv_transfer)} ms on average" if disagg else ""
    lines += ["", f"best: {'disaggregated' if disagg else 'colocated'}, batch {best.batch}, "
              f"{len(best.evaluation.stages)} decode stage(s), {best.problem.microbatches} micro-batches; "
              f"decode {sv.tokens_per_s:,.6g} tokens/s ({dp_word})", *pre_lines,
              format_plan(best.problem, best.evaluation, "ms", "token"), "", _bucket_table(sv), "",
              _goodput_summary(model, sv) + moved,
              f"batch sizes: {sizes}; mix {model.mix.source or 'given'}: decode times at a mean context of "
              f"{model.mix.decode_context} tokens, KV memory at {model.mix.memory_context}"
              + _replicas_words(args.max_replicas),
              f"proven: {proven}"]
    if getattr(args, "engine", None) == "sglang":
        from ..vllm_out import format_sglang, sglang_json

        data["sglang"] = sglang_json(model.cfg.layers, (best.problem, best.plan),
                                     (pre_problem, pre_plan) if disagg else None, model=f"<{model.cfg.name}>")
        lines += ["", format_sglang(data["sglang"])]
    if sim is not None and interrupted:  # the Ctrl-C ended the command's work: the plan so far, unsimulated
        data["simulation"] = {"interrupted": True}
        lines += ["", "simulation: not run (interrupted (Ctrl-C) during the search); the plan above stands"]
    elif sim is not None:
        sim_model, pool = model, None
        if disagg:
            pre_model, sim_model = best_pool(split, best, models=True)
            pool = (pre_model, pre_problem, pre_plan)
        text, data["simulation"] = run_simulation(args, sim, sim_model, best.problem, best.plan, best.batch,
                                                  best.evaluation, prefill_pool=pool)
        lines += ["", text]
    from ..export import emit

    emit(args, data, lambda: "\n".join(lines))
    return 0


def _serves(point) -> bool:
    """A goodput search's best ``point`` serves requests within the targets (a plan to keep after a
    Ctrl-C; ``None``: no plan)."""
    return point is not None and point.serving.goodput > 0


def _no_plan(args, model, search, why: str, proven: bool, *, least: tuple | None = None,
             least_proven: bool | None = None) -> int:
    """``place --objective goodput`` without a plan (``least``: plans fit but none meets the targets, the
    least TPOT and TTFT of the plans scored, proven the least of any plan where ``least_proven``, by
    default ``proven``; ``None``: none fits): the sweep table, the result file of no plan
    (:func:`placement.results.no_plan_result`, ``infeasible`` where ``proven``) with a ``goodput``
    section of the targets and the sweep, and one ``error:`` line; exit 1."""
    import sys

    from ..export import emit
    from ..results import no_plan_result

    data = no_plan_result("stages", proven, why)
    data["workload"] = args.workload
    section = {"ttft_slo_s": model.ttft, "tpot_slo_s": model.tpot, "goodput_rps": 0.0,
               "sweep": [{"batch_size": p.batch, "goodput_rps": None if p.serving is None else
                          p.serving.goodput, "exhaustive": p.exhaustive,
                          "note": p.note or (p.serving.limit if p.serving is not None else "")}
                         for p in search.points], "stopped": search.stopped or None}
    if least is not None:
        section.update(least_tpot_s=least[0] if math.isfinite(least[0]) else None,
                       least_ttft_s=least[1] if math.isfinite(least[1]) else None,
                       least_proven=proven if least_proven is None else least_proven)
    data["goodput"] = section
    stopped = f"\nstopped: {search.stopped}" if search.stopped else ""
    emit(args, data, lambda: _sweep_table(search, mark=False, who=_decode_solver(args)) + stopped)
    print(f"error: {'infeasible: ' if proven else ''}{why}", file=sys.stderr)
    return 1


def _layout_table(model, search, split, best) -> str:
    rows = [["layout", "prefill pool", "decode pool", "batch", "N", "goodput req/s", "meet (mean)", "limit",
             "note"]]

    def row(kind, pre, dec, pt, note=""):
        if pt is None:
            rows.append([kind, pre, dec, "-", "-", "0", "-", "-", note])
            return
        s = pt.serving
        rows.append([kind, pre, dec, str(pt.batch), str(pt.problem.microbatches), f"{s.goodput:.6g}",
                     f"{100 * s.attainment:.0f}%", s.limit, "<- best" if pt is best else note])

    row("colocated", str(model.devices), str(model.devices), search.best)
    for pre, dec, x, note in split.splits:
        row("disaggregated", pre, dec, x.best if x else None, note)
    return aligned(rows, lambda i: 2 < i < 7)
