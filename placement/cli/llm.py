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
from graphs.jsonio import read_json, shown
from solvers.base import INTERRUPTED, relative_gap

from ..goodput import (
    best_pool,
    disaggregated_search,
    goodput_search,
    join_stopped,
    provision_buckets,
    targets_missed,
)
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
    from graphs.llm import decode_problem, read_model_config

    recorded = saved is not None  # a result's settings: each one read is checked, named by its field
    saved = saved or {}
    _refuse_flags(args)
    if recorded:
        _check_recorded(args, saved)
    batch = args.batch_size if args.batch_size is not None else saved.get("batch_size", 1)
    if not isinstance(batch, int):
        raise InputError(f"--batch-size {batch}: a model config takes one batch size (sequences decoded "
                         f"together)")
    context = args.context if args.context is not None else saved.get("context", DEFAULT_CONTEXT)
    ds = _devices(args, saved if recorded else None)
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


def _result_path(args) -> str | None:
    """The result file whose settings are read (``evaluate``'s RESULT), to name in its errors."""
    return getattr(args, "split", None)


def _recorded_error(args, key: str, what: str) -> InputError:
    """The error of a result's ``problem`` field ``key`` that is read back: the file, the field, ``what``
    is wrong (and how to give it instead)."""
    return InputError(f"problem.{key}: {what}", source=_result_path(args))


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


#: the problem fields a model config's decode plan is rebuilt from (with memory_context and devices), each
#: with the flag that, given, is read instead; a goodput result's are in :func:`_serving_model`
_READ_BACK = (("batch_size", "--batch-size"), ("context", "--context"), ("microbatches", "--microbatches"),
              ("max_replicas", "--max-replicas"))


def _check_recorded(args, saved: dict) -> None:
    """The settings of a result (``saved``, :func:`placement.results.read_stage_result`'s flat mapping)
    that rebuild a decode problem, where no flag gives them again: each a positive integer
    (``memory_context``, ``microbatches`` and ``max_replicas`` may be null), the micro-batches dividing
    the batch, else an :class:`InputError` naming the result file and the field."""
    for key, flag in _READ_BACK:
        if getattr(args, key, None) is not None:
            continue  # given again: the flag is read, not the file
        v = saved.get(key)
        nullable = key in ("microbatches", "max_replicas")
        if v is None and nullable:
            continue  # the default count; no replica limit
        if v is None:
            raise _recorded_error(args, key, f"missing: the result does not record it; give {flag}")
        if not _positive_int(v):
            null = " or null" if nullable else ""
            raise _recorded_error(args, key, f"must be a positive integer{null}, got {shown(v)}")
    if getattr(args, "context", None) is None:
        v = saved.get("memory_context")
        if v is not None and not _positive_int(v):
            raise _recorded_error(args, "memory_context", f"must be a positive integer (tokens) or null, got "
                                                          f"{shown(v)}")
    n = args.microbatches if args.microbatches is not None else saved.get("microbatches")
    b = args.batch_size if args.batch_size is not None else saved.get("batch_size")
    if args.microbatches is None and _positive_int(n) and _positive_int(b) and b % n:
        raise _recorded_error(args, "microbatches", f"{n} micro-batches do not divide a batch of {b} "
                                                    f"sequences")


def _devices(args, saved: dict | None):
    """The devices (:class:`graphs.devices.DeviceSet`) of ``--devices``, else of a result's
    ``problem.devices`` (``saved``; ``None``: no result: the default ``a100:4``), a bad or missing one
    an :class:`InputError` naming the result file and the field."""
    from graphs.devices import parse_devices

    files = args.device_files or ()
    if args.devices or saved is None:
        return parse_devices(args.devices or "a100:4", files)
    v = saved.get("devices")
    if v is None:
        raise _recorded_error(args, "devices", "missing: the result does not record the devices it was "
                                               "placed on; give --devices")
    if not isinstance(v, str) or not v.strip():
        raise _recorded_error(args, "devices", f"must be a device spec such as \"a100:2,t4:4\", got "
                                               f"{shown(v)}")
    try:
        return parse_devices(v, files)
    except InputError as e:
        if e.source is not None:  # a device file's own fault, named by it
            raise
        raise _recorded_error(args, "devices", e.detail) from None


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


#: what a result's ``problem.objective`` may be: a goodput result's (colocated or disaggregated), or
#: absent (a decode plan placed without --objective goodput)
_OBJECTIVES = ("goodput", "goodput-disaggregated")


def _recorded_objective(args, data) -> str | None:
    """The goodput objective a model config's result records (``problem.objective``; ``None``: none, a
    decode plan), any other value an :class:`InputError` naming the file and the field. A ``problem``
    that is not an object is one too."""
    if not isinstance(data, dict) or "problem" not in data:
        return None
    section = data["problem"]
    if not isinstance(section, dict):
        raise InputError(f"problem: must be an object (the settings that rebuild the problem), got "
                         f"{shown(section)}", source=_result_path(args))
    if "objective" not in section:
        return None
    v = section["objective"]
    if v not in _OBJECTIVES:
        raise _recorded_error(args, "objective", f"must be \"goodput\" or \"goodput-disaggregated\" (a "
                                                 f"goodput result; absent for a decode plan), got {shown(v)}")
    return v


def evaluate(args) -> int:
    """Re-score a plan of a model config under the settings it records (those given again override them):
    the problem section's fields that rebuild the problem are read and checked (a bad one is an error
    naming the file and the field); the figures the file records beside (its max-load, a goodput
    result's ``goodput`` section, and the problem's records: schedule, kinds, model, params, a goodput
    result's contexts) are not read, and where the re-score differs from them a ``note:`` line says so
    (:func:`_note_records`)."""
    from graphs.parallel import evaluate_plan

    from ..results import read_stage_result, stage_result_dict
    from ..stages import _emit, plan_from_dict, plan_summary

    data = read_json(args.split)
    objective = _recorded_objective(args, data)
    saved = read_stage_result(data) if isinstance(data, dict) else None
    goodput = objective == "goodput"
    disaggregated = objective == "goodput-disaggregated"
    if disaggregated and getattr(args, "simulate", None) is not None:
        raise InputError("evaluate re-scores a disaggregated result's decode pool only; to simulate both "
                         "pools run place ... --disaggregate --simulate RATE|auto", source=args.split)
    if not goodput:
        what = ("a disaggregated goodput result, whose goodput evaluate does not re-score (its decode pool's "
                "plan only; place ... --disaggregate scores both pools)" if disaggregated else
                "a decode plan without a goodput (placed without --objective goodput)")
        refuse_goodput_options(args, f"re-scores a goodput result (placed with --objective goodput); this is "
                                     f"{what}", source=args.split)
    rebuild = saved
    if goodput:  # the mix sets the decode problem's contexts, as place builds it (ServingModel.problem)
        model = _serving_model(args, saved)
        sim = simulate_options(args)
        rebuild = {**(saved or {}), "context": model.mix.decode_context,
                   "memory_context": model.mix.memory_context}
    problem, settings = _problem(args, rebuild)
    plan = plan_from_dict(problem, data, source=args.split)
    ev = evaluate_plan(problem, plan)
    summary = plan_summary(problem, ev, "ms", sample="token")
    sv = None
    if goodput:  # re-score the goodput under the recorded mix and targets (or those given again)
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
    _note_records(args, data, out, ev, _changed_settings(args, saved, model if goodput else None))
    return 0 if ev.valid else 1


def _changed_settings(args, saved: dict | None, model=None) -> list[str]:
    """The settings given on the command line that differ from those the result (``saved``) records, each
    as ``--flag VALUE, the file records ...`` (``model``: a goodput result's serving model, its mix and
    targets those evaluated)."""
    saved = saved or {}
    out = []

    def rec(key):
        v = saved.get(key)
        return "none" if v is None else shown(v)

    for key, flag in _READ_BACK:
        v = getattr(args, key, None)
        if v is not None and v != saved.get(key):
            out.append(f"{flag} {v}, the file records {rec(key)}")
    if args.devices and _kinds(args.devices) != _kinds(saved.get("devices")):
        out.append(f"--devices {args.devices}, the file records {rec('devices')}")
    if args.device_files:  # a model config's result records no device file: the kinds' figures may differ
        out.append(f"--device-file {', '.join(args.device_files)} (the file records none)")
    if model is not None:
        if args.requests is not None:
            try:
                was = _recorded_mix(args, saved.get("requests")).buckets
            except InputError:
                was = None
            if model.mix.buckets != was:
                out.append(f"--requests {args.requests}, another mix than the file's")
        for dest, flag in GOODPUT_FLAGS[1:3]:
            v = getattr(args, dest, None)
            if v is not None and v != saved.get(dest + "_ms"):
                out.append(f"{flag} {v:g}, the file records {rec(dest + '_ms')}")
    return out


def _kinds(devices) -> list[str] | None:
    """A device spec's ``kind:count`` parts, in any order and spacing (``None``: not a spec)."""
    if not isinstance(devices, str):
        return None
    return sorted("".join(part.split()) for part in devices.split(",") if part.strip())


#: the fields of a model config's result that ``evaluate`` does not read back, beside the max-load and
#: the goodput section: records of what the re-score rebuilds (the decode's schedule is gpipe; the kinds
#: come from the devices and --device-file, the model and its parameters from the config)
_PROBLEM_RECORDS = ("schedule", "kinds", "model", "params")


def _note_records(args, data, out: dict, ev, changed: list[str]) -> None:
    """``note:`` lines on stderr where the figures the result file records, and ``evaluate`` does not read
    back, are not what it re-scored (``out``: the result it writes): the max-load, the ``goodput``
    section of a goodput result (every field the re-score writes, to a relative 1e-9), and the problem's
    records (:data:`_PROBLEM_RECORDS`, and a goodput result's ``context`` and ``memory_context``, which
    the mix sets). ``changed``: the settings given that differ from the file's, which say why; with none,
    the file was edited (or scored by another version)."""
    import sys

    if not isinstance(data, dict):
        return
    why = ("evaluated at " + "; ".join(changed) if changed else
           "with the settings it records (the file edited, or written by another version's cost model?)")
    recorded = data.get("max_load")
    if "max_load" in data and not _same(recorded, ev.objective):
        was = f"{recorded * 1e3:.6g} ms per token" if _number(recorded) else shown(recorded)
        print(f"note: {args.split}: the max-load {ev.objective * 1e3:.6g} ms per token is not the file's "
              f"{was}: {why}", file=sys.stderr)
    if "goodput" in out and "goodput" in data:
        diffs = _differences(data["goodput"], out["goodput"], "goodput")
        if diffs:
            print(f"note: {args.split}: the re-scored goodput is not what the file's goodput section "
                  f"records ({_diff_words(diffs)}): {why}; the goodput section is output only, re-scored "
                  f"from the plan and the problem section (requests, ttft_slo_ms, tpot_slo_ms)",
                  file=sys.stderr)
    section = data.get("problem")
    if isinstance(section, dict):
        keys = _PROBLEM_RECORDS + (("context", "memory_context") if "goodput" in out else ())
        diffs = [d for k in keys if k in section and k in out["problem"]
                 for d in _differences(section[k], out["problem"][k], f"problem.{k}")]
        if diffs:
            print(f"note: {args.split}: fields of the problem section that are records, not read back, "
                  f"differ from the re-evaluation ({_diff_words(diffs)}): {why}; evaluate rebuilds them from "
                  f"the model config, the devices and the request mix", file=sys.stderr)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _same(recorded, now) -> bool:
    """A recorded value is the re-scored one: numbers to a relative 1e-9 (and 1e-12 absolute: seconds),
    anything else equal (a boolean only to a boolean)."""
    if _number(recorded) and _number(now):
        return math.isclose(recorded, now, rel_tol=1e-9, abs_tol=1e-12) or recorded == now
    if isinstance(recorded, bool) or isinstance(now, bool):
        return recorded is now
    return recorded == now


def _differences(recorded, now, where: str) -> list[tuple[str, object, object]]:
    """The fields of ``recorded`` that are not ``now`` (field path, recorded, now), over the fields of
    ``now`` (a field the file lacks, as an older version wrote it, is not one)."""
    if isinstance(now, dict):
        if not isinstance(recorded, dict):
            return [(where, recorded, now)]
        return [d for k, v in now.items() if k in recorded
                for d in _differences(recorded[k], v, f"{where}.{k}")]
    if isinstance(now, list):
        if not isinstance(recorded, list) or len(recorded) != len(now):
            return [(where, recorded, now)]
        return [d for i, (a, b) in enumerate(zip(recorded, now)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if _same(recorded, now) else [(where, recorded, now)]


def _diff_words(diffs, most: int = 4) -> str:
    """The first ``most`` differences, ``field RECORDED (re-scored NOW)``, and how many more."""
    def value(x) -> str:
        if isinstance(x, (dict, list)):
            return "an object" if isinstance(x, dict) else f"a list of {len(x)}"
        return f"{x:.6g}" if isinstance(x, float) else shown(x)

    words = "; ".join(f"{k} {value(a)} (re-scored {value(b)})" for k, a, b in diffs[:most])
    return words + (f"; and {len(diffs) - most} more" if len(diffs) > most else "")


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
    if out is not None and out.interrupted:  # the first Ctrl-C kept this mix: later ones change nothing
        from .. import _interrupt

        _interrupt.stopping()
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
    """The :class:`graphs.llm.ServingModel` of ``--objective goodput`` (``saved``: a goodput result's
    settings, read where no flag gives them again: ``problem.requests``, ``ttft_slo_ms``,
    ``tpot_slo_ms`` and ``devices``, a bad or missing one an :class:`InputError` naming the result file and
    the field)."""
    from graphs.llm import ServingModel, check_slo, read_mix, read_model_config

    recorded = saved is not None
    saved = saved or {}
    _refuse_flags(args)
    if getattr(args, "context", None) is not None:
        raise InputError("--context does not apply with --objective goodput: the request mix sets each "
                         "sequence's context")
    if args.requests is not None:
        mix = read_mix(args.requests)
    elif recorded:
        mix = _recorded_mix(args, saved.get("requests"))
    else:
        raise InputError("--objective goodput needs --requests MIX.json (buckets of input and output tokens "
                         "with weights, docs/formats.md)")
    slo = {}
    for dest, flag in GOODPUT_FLAGS[1:3]:
        v = getattr(args, dest, None)
        if v is None and recorded:  # the file's, named by its field (none: an older file's, to give again)
            key = dest + "_ms"
            v = saved.get(key)
            if v is not None and not (_number(v) and 0 < v < math.inf):
                raise _recorded_error(args, key, f"must be a positive number of milliseconds, got {shown(v)}")
        slo[dest] = None if v is None else check_slo(flag, v) / 1000
    need_targets(slo, "the result records none" if recorded else "")
    ds = _devices(args, saved if recorded else None)
    cfg = read_model_config(args.workload)
    return ServingModel(cfg, ds, mix, ttft=slo["ttft_slo"], tpot=slo["tpot_slo"])


def _recorded_mix(args, v):
    """A goodput result's request mix, ``problem.requests`` (``v``: the mix itself, as the file writes
    it), a bad or missing one an :class:`InputError` naming the result file and the field."""
    from graphs.llm import read_mix

    if v is None:
        raise _recorded_error(args, "requests", "missing: the result records no request mix; give --requests "
                                                "MIX.json")
    if not isinstance(v, (dict, list)):
        raise _recorded_error(args, "requests", f"must be the mix itself, {{\"buckets\": [{{\"input\": ..., "
                                                f"\"output\": ..., \"weight\": ...}}, ...]}}, got {shown(v)}")
    try:
        return read_mix(v)
    except InputError as e:
        raise _recorded_error(args, "requests", e.detail) from None


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


def _sweep_table(search, *, mark: bool = True, who: str = "auto solver's", no_decode: bool = False) -> str:
    """The goodput sweep, a row per batch size (``no_decode``: no request has a decode step, TPOT n/a)."""
    rows = [["batch", "N", "decode tokens/s", "TPOT ms (full batch)", "rate req/s", "goodput req/s",
             "meet (mean)",
             "plans scored", "limit", "note"]]
    for pt in search.points:
        if pt.serving is None:
            rows.append([str(pt.batch), "-", "-", "-", "-", "-", "-", "-", "-", pt.note])
            continue
        s = pt.serving
        scored = _plans_scored(pt, who)
        note = "; ".join(x for x in (pt.note, "<- best" if mark and pt is search.best else "") if x)
        rows.append([str(pt.batch), str(pt.problem.microbatches), f"{s.tokens_per_s:,.6g}",
                     "n/a" if no_decode else _ms(s.tpot_full),
                     f"{s.rate:.6g}", f"{s.goodput:.6g}", f"{100 * s.attainment:.0f}%", scored, s.limit,
                     note])
    return aligned(rows, lambda i: 0 < i < 7)


def _plans_scored(pt, who: str) -> str:
    """The sweep table's "plans scored" of the point ``pt``: ``all K`` where every plan of every
    micro-batch count tried was scored, ``WHO per N`` where the solver's plan alone was at each, else
    both, each with its counts (``all 12 at N=2,1; auto solver's at N=8,4``), and the count whose plans
    a Ctrl-C cut short while they were scored (``; 215 of 569 at N=2 (Ctrl-C)``)."""
    if pt.exhaustive:
        return f"all {pt.plans:,}"
    every, solver, cut = pt.scored_counts, pt.solver_counts, pt.cut
    if not every and cut is None:
        return f"{who} per N"
    plans = sum(k for _, k in pt.counts if k is not None)
    words = [f"all {plans:,} at N={','.join(map(str, every))}"] if every else []
    words += [f"{who} at N={','.join(map(str, solver))}"] if solver else []
    words += [f"{cut[1]:,} of {cut[2]:,} at N={cut[0]} (Ctrl-C)"] if cut is not None else []
    return "; ".join(words)


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
            "tpot_s": None if _no_decode(model) else num(sv.tpot), "step_latency_s": num(sv.step_latency),
            "wait_s": num(sv.wait),
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
        if name == "TPOT" and _no_decode(model):
            return f"  TPOT  {_NO_TPOT}"
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


def _targets(model, *, tpot: bool = True) -> str:
    parts = []
    if model.ttft is not None:
        parts.append(f"TTFT <= {_ms(model.ttft)} ms")
    if model.tpot is not None and tpot:
        parts.append(f"TPOT <= {_ms(model.tpot)} ms")
    return " and ".join(parts) or "no targets"


def _no_decode(model) -> bool:
    """No request of ``model``'s mix has a second output token: its one token comes from the prefill, so
    no request has a time per output token (TPOT is n/a, and its target met by every request)."""
    return model.mix.decode_steps <= 0


#: the words of a TPOT that does not exist (:func:`_no_decode`)
_NO_TPOT = "n/a (every request has one output token, from its prefill: no decode step)"


def _goodput_summary(model, sv) -> str:
    if _no_decode(model):  # the serving model's mean TPOT is of decode steps no request takes
        met = (f", so the TPOT target of {_ms(model.tpot)} ms is met by every request"
               if model.tpot is not None else "")
        meet, tpot = f"meet {_targets(model, tpot=False)}", f"TPOT {_NO_TPOT}{met}, "
    else:
        from graphs.llm import has_tpot

        meet = f"meet {_targets(model)}"
        if model.tpot is not None and not all(has_tpot(b) for b in model.mix.buckets):
            meet += " (a request of one output token has no TPOT: it meets any TPOT target)"
        tpot = f"TPOT {_ms(sv.tpot)} ms ({_ms(sv.tpot_full)} ms for the full batch without prefills), "
    return (f"goodput {sv.goodput:.6g} requests/s at {sv.rate:.6g} requests/s arriving "
            f"({100 * sv.attainment:.1f}% {meet} at the mean wait: a mean-value model, "
            f"--simulate measures the spread), batch {sv.batch}; {tpot}"
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
    if interrupted:  # the first Ctrl-C kept this plan: later ones change nothing (exit 0, it is written)
        from .. import _interrupt

        _interrupt.stopping()
    # the Ctrl-C's words first, said once ("stopped: interrupted (Ctrl-C): ..."), then a time limit's
    stopped = join_stopped([search.stopped, split.stopped if split is not None else "", pools_cut])
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
    elif best.cut is not None and best.cut[0] == best.problem.microbatches:  # its plans cut short
        dp_word = (f"not the decode {who} plan: the most goodput of the {best.cut[1]:,} of the problem's "
                   f"{best.cut[2]:,} plans scored before the Ctrl-C")
    else:
        dp_word = f"not the decode {who} plan: the most goodput among all the problem's plans"
    if exhaustive:
        proven = ("every decode plan of every batch size and micro-batch count tried was scored: the goodput "
                  "is the most over them, exact under the serving model")
    else:
        # the decode solver's status at each batch size kept: its tokens/s are proven only where optimal
        unproven = [p.batch for p in search.points if p.plan is not None and p.plan == p.result.plan
                    and str(p.result.status) != "optimal"]
        tokens = "proven" if not unproven else \
            f"not proven at batch {', '.join(map(str, unproven))} (its solver's status is not optimal)"
        # the micro-batch counts whose problem had few plans, all scored (a kept plan that is not the DP's
        # comes from one of them), as the sweep's "plans scored" column has them
        every = _counts_words(search.points, "scored_counts")
        # the counts whose few plans a Ctrl-C cut short while they were scored (the colocated points', and
        # the kept split's): some of them scored, the most goodput of those kept
        cut_points = [p for p in search.points if p.plan is not None and p.cut is not None]
        names = {}
        if disagg and best.cut is not None:
            cut_points.append(best)
            names[id(best)] = "split " + " | ".join(best_pool(split, best)) + "'s"
        cut = _cut_words(cut_points, names)
        if every or cut:
            parts = ([f"at {every}, whose problems have few plans: all of them were scored and the most "
                      f"goodput kept"] if every else []) + \
                ([f"at {cut}, whose few plans were being scored when the Ctrl-C came: some of them scored, "
                  f"the most goodput of those kept"] if cut else [])
            other = "other plans" if cut else "other counts' plans"
            proven = (f"at each batch size and micro-batch count the decode {who} plan was scored (most "
                      f"tokens/s, {tokens}), except {'; and '.join(parts)}; not proven to be the most "
                      f"goodput over the {other}: the goodput is the best plan's, exact under the serving "
                      f"model")
        else:
            proven = (f"each batch size's plan is the decode {who} at its micro-batch count (most tokens/s, "
                      f"{tokens}; not proven to be the most goodput: the goodput is that plan's, exact under "
                      "the serving model)")
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
    data["goodput"]["sweep"] = [_sweep_row(p) for p in search.points]
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
    lines = [_sweep_table(search, who=who, no_decode=_no_decode(model))] + \
        ([f"stopped: {stopped}"] if stopped else [])
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


def _counts_words(points, which: str) -> str:
    """The micro-batch counts ``which`` (:attr:`placement.goodput.GoodputPoint.scored_counts` or
    ``solver_counts``) of the points with a plan: ``batch 8 (N = 2, 1) and batch 32 (N = 1)``."""
    parts = [f"batch {p.batch} (N = {', '.join(map(str, getattr(p, which)))})" for p in points
             if p.plan is not None and getattr(p, which)]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _cut_words(points, names: dict) -> str:
    """The micro-batch counts whose plans a Ctrl-C cut short while they were scored
    (:attr:`placement.goodput.GoodputPoint.cut`) of ``points``: ``batch 32 (N = 2: 215 of its 569
    plans)``, a point prefixed by ``names[id(point)]`` where given (a split's)."""
    parts = [f"{names[id(p)] + ' ' if id(p) in names else ''}batch {p.batch} (N = {p.cut[0]}: "
             f"{p.cut[1]:,} of its {p.cut[2]:,} plans)" for p in points]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _sweep_row(p, note: str | None = None) -> dict:
    """A row of a goodput result's ``sweep``: the batch size, its goodput, whether every plan of it was
    scored, and per micro-batch count tried the plans scored (``null``: the solver's plan only); where a
    Ctrl-C cut a count's scoring short, ``cut_short``: that count, the plans of it scored and its plans."""
    row = {"batch_size": p.batch, "goodput_rps": None if p.serving is None else p.serving.goodput,
           "exhaustive": p.exhaustive, "note": p.note if note is None else note,
           "counts": [{"microbatches": n, "plans_scored": k} for n, k in p.counts]}
    if p.cut is not None:
        row["cut_short"] = {"microbatches": p.cut[0], "plans_scored": p.cut[1], "plans": p.cut[2]}
    return row


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
               "sweep": [_sweep_row(p, p.note or (p.serving.limit if p.serving is not None else ""))
                         for p in search.points], "stopped": search.stopped or None}
    if least is not None:
        section.update(least_tpot_s=least[0] if math.isfinite(least[0]) else None,
                       least_ttft_s=least[1] if math.isfinite(least[1]) else None,
                       least_proven=proven if least_proven is None else least_proven)
    data["goodput"] = section
    stopped = f"\nstopped: {search.stopped}" if search.stopped else ""
    emit(args, data, lambda: _sweep_table(search, mark=False, who=_decode_solver(args),
                                          no_decode=_no_decode(model)) + stopped)
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
