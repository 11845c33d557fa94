"""``placement show RESULT``: simulate a placement's pipeline under its schedule, print the summary and
draw its Gantt chart and its graph: one device per stage's (:func:`placement.simulate.simulate`) or a stage
plan's, one row per replica (:func:`placement.simulate.simulate_plan`), both read from the one result
format."""

from __future__ import annotations

import math
import os
import sys

from graphs.errors import InputError
from graphs.jsonio import read_json

from ..outputs import aligned, output_dir
from .common import EXIT_OK, UsageError, add_frontend_options, frontend, recorded_frontend

__all__ = ["add_parser", "run"]

MAX_MICROBATCHES = 10_000
#: what show takes, in the words of its help and of its error on a folder
RESULT_FILE = "a result file (written by placement place --out)"


def add_parser(sub) -> None:
    from ..simulate import SCHEDULES

    s = sub.add_parser("show", help="simulate and draw a placement", description="Simulate a placement's "
                       "pipeline (throughput, latency, bubble, per-device utilisation, stashed activations), "
                       "draw its Gantt chart (matplotlib) and its graph coloured by device, or by stage "
                       "for a stage plan (Graphviz DOT, "
                       "rendered when `dot` is installed).")
    s.add_argument("result", help=RESULT_FILE)
    s.add_argument("--workload", default=None, metavar="PATH",
                   help="the workload or ONNX model the result is for (default: the result's 'workload')")
    s.add_argument("--schedule", choices=SCHEDULES + ("pipedream", "2bw"), default=None,
                   help="stream (inference default), gpipe or 1f1b (training default); a stage plan: "
                   "1f1b, gpipe, pipedream or 2bw (default: its own; an inference plan: stream)")
    s.add_argument("--microbatches", "-m", type=int, default=None, metavar="M",
                   help=f"micro-batches, 1 to {MAX_MICROBATCHES} (default 8; a stage plan: its own per "
                        f"batch)")
    s.add_argument("--overlap", action="store_true", help="draw the schedule with communication overlapped")
    s.add_argument("--out-dir", default=None, metavar="DIR",
                   help="where to write the pictures (default: beside the result file)")
    s.add_argument("--format", choices=("png", "svg"), default=None, help="picture format (default png)")
    s.add_argument("--no-draw", action="store_true", help="only simulate; write no pictures (--overlap, "
                   "--format and --out-dir, which are the pictures', are then refused)")
    s.add_argument("--json", action="store_true", help="print the simulation as JSON")
    add_frontend_options(s)
    for action in s._actions:  # the options shared with place, in show's words (_FRONTEND_HELP)
        action.help = _FRONTEND_HELP.get(action.dest, action.help)


#: show's help for the ONNX front-end options it shares with place (placement.cli.common): show
#: re-costs the plan with the settings the result records, so each option's default is the result's,
#: not place's (a100:4,cpu:1, roofline, batch size 1...)
_FRONTEND_HELP = {
    "devices": "cluster as kind:count pairs, e.g. a100:4,cpu:8, or a TOML/JSON device file with counts "
               "(default: the devices the result records)",
    "device_files": "TOML/JSON file defining device kinds (repeatable; default: the device files the "
                    "result records)",
    "costs": "roofline, profile (measure this CPU with onnxruntime), or a JSON cost table (default: the "
             "cost model the result records)",
    "batch_size": "value of a symbolic batch dimension (default: the batch size the result records)",
    "dim": "value of another symbolic input dimension (repeatable; default: the dimensions the result "
           "records)",
    "training": "add the backward pass (default: as the result records; a training result trains)",
    "optimizer": "with --training: the optimizer whose state each device keeps (default: the optimizer "
                 "the result records)",
}


def _load_for_result(args, data: dict):
    """The workload a result is for: --workload, else the result's source (relative to the result file,
    as results store it; then as written, for results of older versions, relative to where they ran)."""
    from ..load import load_workload

    path = args.workload or data.get("workload") or data.get("source")  # source: older files' name
    if not path:
        raise UsageError(f"{args.result}: the result does not say which workload it is for; pass "
                          f"--workload PATH")
    if not args.workload:
        beside = os.path.join(os.path.dirname(os.path.abspath(args.result)), path)
        if os.path.exists(beside):
            path = beside
        elif not os.path.exists(path):
            raise UsageError(f"{args.result}: its workload {path!r} was not found; pass --workload PATH")
    given = {k: v for k, v in frontend(args).items() if v is not None}
    if path.lower().endswith(".onnx"):
        given = {**recorded_frontend(data, args.result), **given}  # the result's own, unless overridden
    if given.get("optimizer") and not given.get("training"):
        raise UsageError("--optimizer only applies to training; add --training (or show a training result)")
    return load_workload(path, **given)


def run(args) -> int:
    from graphs.evaluate import evaluate

    from ..draw import PlotsUnavailable, gantt_chart, graph_dot, write_graph
    from ..results import assignment_from_result, checked_result, read_result
    from ..simulate import SCHEDULES as SIM_SCHEDULES
    from ..simulate import simulate

    if args.microbatches is not None and args.microbatches > MAX_MICROBATCHES:
        # the simulation runs every micro-batch (a million ran for minutes without a word); the steady
        # state shows within a few times the stage count
        raise UsageError(f"placement show: --microbatches must be at most {MAX_MICROBATCHES}, got "
                         f"{args.microbatches}")
    if args.microbatches is not None and args.microbatches < 1:
        raise UsageError("placement show: --microbatches must be at least 1")
    from ..inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    if args.no_draw:  # the picture options do nothing without pictures: refused, not ignored
        for flag, given in (("--overlap", args.overlap), ("--format", args.format is not None),
                            ("--out-dir", args.out_dir is not None)):
            if given:
                raise UsageError(f"placement show: {flag} sets the pictures, and --no-draw draws none; "
                                  f"drop one of them")
    args.format = args.format or "png"
    from ..load import check_input_path, check_workload_path

    # the result (and a workload given) name files before the result's kind is guessed from its name:
    # a missing nope.onnx is no ONNX model
    check_input_path(args.result, RESULT_FILE)
    if args.workload:
        check_workload_path(args.workload)
    saved = result_json(args.result)
    refuse_not_result(args.result, "show", saved)  # an ONNX model, a workload, a frontier...: said so
    refuse_empty_result(saved, "show", args.result)
    if holds_stage_plan(saved):
        if args.overlap:
            raise UsageError("placement show: --overlap draws a one-device-per-stage plan's transfers as "
                              "their own events; a stage plan's stage time counts its communication with "
                              "its compute, so there is no separate transfer to overlap")
        return _show_stage_plan(args, frontend(args))
    data = read_result(args.result) if saved is None else checked_result(saved, args.result)
    if args.schedule not in SIM_SCHEDULES + (None,):
        raise UsageError(f"placement show: schedule {args.schedule} applies to stage plans (replicas) only")
    args.microbatches = 8 if args.microbatches is None else args.microbatches
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.result))
    if not args.no_draw:
        output_dir(out_dir, "--out-dir")
    w = _load_for_result(args, data)
    a = assignment_from_result(data, w.graph, w.cluster, source=args.result)
    ev = evaluate(w.graph, w.cluster, a)
    _warn_if_invalid(args.result, ev.problems)
    unit = w.graph.meta.get("unit", "")
    sim = simulate(w.graph, w.cluster, a, schedule=args.schedule, microbatches=args.microbatches)
    over = simulate(w.graph, w.cluster, a, schedule=sim.schedule, microbatches=args.microbatches,
                    overlap=True)
    if args.json:
        from ..export import print_json

        # as a stage plan's: the unit declared, each stage's devices and degrees (one device, d = t = 1)
        # an ONNX model's micro-batch is one run of its batch (batch_size samples): per-sample figures
        # are divided by it, per-run ones named so, as a stage plan's simulation gives them
        batch = w.graph.batch_size or 1
        doc = {"result": args.result, "time_unit": unit or "t", "batch_size": w.graph.batch_size,
               "simulation": sim.summary(batch), "overlapped": over.summary(batch)}
        per_s = {"ms": 1e3, "s": 1.0}.get(unit)  # time units per second (None: a workload's own unit, t)
        for part in ("simulation", "overlapped"):
            # samples per second, as a stage plan's simulation gives them (throughput: per time unit)
            for key, rate in (("samples_per_s", "throughput"), ("steady_samples_per_s", "steady_throughput")):
                x = doc[part][rate]
                doc[part][key] = None if per_s is None or x is None else x * per_s
            for row in doc[part]["stages"]:
                row.update(devices=[row["name"]], d=1, t=1)
        print_json(doc)
    else:
        from graphs.latency import inference_latency

        lat = inference_latency(w.graph, w.cluster, a)  # None for a training graph, as Placement.latency
        print(_format_simulation(sim, over, unit, None if lat is None else lat.total,
                                 batch=w.graph.batch_size))
        from .serving import show_mfu_lines

        sys.stdout.write(show_mfu_lines(w.graph, w.cluster, a, sim.steady_time_per_sample))
    # the file's max-load against the plan's now, said as evaluate says it
    from .evaluate import _changed_settings, _max_load_words, note_max_load

    note_max_load(data.get("max_load"), _max_load_words(data), ev.max_load,
                  _max_load_words(data, unit, w.graph.batch_size),
                  _changed_settings(frontend(args), data.get("frontend"), args.result))
    if args.no_draw:
        return EXIT_OK
    stem = os.path.join(out_dir, os.path.splitext(os.path.basename(args.result))[0])
    shown = sim if not args.overlap else over
    written = []
    try:
        written.append(gantt_chart(shown, f"{stem}.gantt.{args.format}", unit=unit))
    except PlotsUnavailable as e:
        print(f"note: {e}; Gantt chart not drawn", file=sys.stderr)
    paths, note = write_graph(stem, graph_dot(w.graph, w.cluster, a, stage_order=ev.stage_order,
                                              title=os.path.basename(args.result)), args.format)
    written += paths
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not args.json:
        print("wrote " + ", ".join(written))
    return EXIT_OK


def _format_simulation(sim, over, unit: str, model_latency: float | None = None, batch: int = 1) -> str:
    """``show``'s summary; ``batch``: the samples in one run of the model (an ONNX model's batch size),
    whose figures are then per batch, and said so."""
    u = f" {unit or 't'}"  # a reference workload's own unit is t, as place prints it
    item = "sample" if batch == 1 else f"batch ({batch} samples)"
    cu = f" ({unit or 't'})"  # the busy time of the whole run; a load is per micro-batch (sample or batch)
    per = f" ({unit or 't'}/{'sample' if batch == 1 else 'batch'})"
    name = {"stream": "streaming inference", "gpipe": "GPipe", "1f1b": "1F1B"}[sim.schedule]
    # "busy/wall" (busy time over the makespan), not the table of `place`'s "load/max" (load over max-load);
    # the stage plan's simulation leads with the same columns (one device per stage: d = t = 1)
    rows = [["stage", "devices", "d", "t", "load" + per, "busy" + cu, "busy/wall", "compute/wall",
             "peak stash"]]
    for r in sim.stages:
        stash = "-" if r.peak_stashed is None else str(r.peak_stashed)
        if r.peak_stash_bytes is not None:
            from ..report import human_bytes

            stash += f" ({human_bytes(r.peak_stash_bytes)})"
        rows.append([str(r.stage), r.name, "1", "1", f"{r.load:.6g}", f"{r.busy:.6g}",
                     f"{100 * r.utilisation:.1f}%", f"{100 * r.compute_utilisation:.1f}%", stash])
    lines = [f"pipeline of {len(sim.stages)} stage(s), {name}, {sim.microbatches} micro-batches"
             + (f" (each a batch of {batch} samples: one run of the model)" if batch > 1 else "")]
    lines.append(aligned(rows, lambda i: i >= 2))
    steady = sim.steady_time_per_sample
    same = math.isclose(steady, sim.max_load, rel_tol=1e-9, abs_tol=1e-12)
    extra = "equal" if same else f"the schedule adds {steady / sim.max_load - 1:.1%}"
    gain = _gain(steady, over.steady_time_per_sample)
    one = "one-sample" if batch == 1 else "one-batch"
    per_s = {"ms": 1e3, "s": 1.0}.get(unit)  # time units per second (None: a workload's own unit)

    def rate(per_item: float) -> str:  # a time per batch (batch samples) as samples/s, and batches/s
        if not per_item > 0:
            return "samples/s unbounded"
        if per_s is None:
            return f"{batch / per_item:.6g} samples per {unit or 'time unit'}"
        text = f"{batch * per_s / per_item:,.6g} samples/s"
        return text if batch == 1 else f"{text}, {per_s / per_item:,.6g} batches/s"
    lat = f"{one} latency {sim.latency:.6g}{u} in this schedule (each stage receives, computes and " \
          f"sends as a whole)"
    if model_latency is not None and math.isfinite(model_latency):
        lat += f"; the latency model of `place` gives {model_latency:.6g}{u} (operators start as soon as " \
               f"their inputs are ready, host operators in parallel)"
    lines += [
        f"makespan {sim.makespan:.6g}{u} for {sim.microbatches} micro-batches; time per {item} "
        f"{sim.time_per_sample:.6g}{u} (throughput {rate(sim.time_per_sample)})",
        f"steady state: {steady:.6g}{u} per {item} ({rate(steady)}); max-load {sim.max_load:.6g}{u} "
        f"({extra})",
        lat,
        f"bubble {100 * sim.bubble_fraction:.1f}%",
        f"with communication overlapped: steady {over.steady_time_per_sample:.6g}{u} per {item} ({gain}), "
        f"makespan {over.makespan:.6g}{u}, bubble {100 * over.bubble_fraction:.1f}%",
    ]
    if not unit:
        lines.append("times in the workload's own unit (t)")
    return "\n".join(lines)


def _gain(before: float, after: float) -> str:
    if after <= 0 or before <= after * (1 + 1e-9):
        return "no gain"
    return f"{before / after - 1:.1%} more throughput"


# ---------------------------------------------------------------- a stage plan
def _workload_path(args, data: dict) -> str:
    path = getattr(args, "workload", None) or data.get("workload")
    if not path:
        raise InputError("the result does not say which workload it is for; pass --workload PATH",
                         source=args.result)
    if not getattr(args, "workload", None):
        # recorded relative to the result file (older files: as typed, relative to where place ran)
        beside = os.path.join(os.path.dirname(os.path.abspath(args.result)), path)
        if os.path.exists(beside):
            return beside
        if not os.path.exists(path):
            raise InputError(f"its workload {path!r} was not found; pass --workload PATH", source=args.result)
    return path


def _llm_problem(args, data: dict, path: str, frontend: dict):
    """The decode problem of the model config ``path`` that the result ``data`` was solved on, and its
    batch (sequences): its recorded batch, context, devices and micro-batches, unless ``--devices`` /
    ``--batch-size`` give them again; the ONNX front end's other options do not apply to a model
    config."""
    from types import SimpleNamespace

    from ..results import read_stage_result
    from .llm import _problem

    for key, flag in (("costs", "--costs"), ("dims", "--dim"), ("training", "--training"),
                      ("optimizer", "--optimizer")):
        if frontend.get(key):
            raise InputError(f"{flag} does not apply to a model config's plan (it takes --devices, "
                             f"--device-file and --batch-size)", source=args.result)
    if args.schedule not in (None, "stream"):
        raise InputError(f"--schedule {args.schedule}: a model config's decode streams its tokens through "
                         f"the stages while every micro-batch's KV cache stays held (the plan's 'gpipe' is "
                         f"that memory, y = N/d, and show simulates it); it takes no schedule",
                         source=args.result)
    saved = read_stage_result(data, source=args.result)
    ns = SimpleNamespace(workload=path, batch_size=frontend.get("batch_size"), context=None,
                         devices=frontend.get("devices"), device_files=frontend.get("device_files") or (),
                         microbatches=args.microbatches, max_replicas=None)
    problem, settings = _problem(ns, saved)
    return problem, int(settings["batch_size"])


def format_stage_simulation(sim, unit: str = "s", sample: str = "sample",
                            microbatch: str | None = None, devices: list[str] | None = None) -> str:
    """The simulation next to the evaluator, per stage; times per ``sample`` (an LLM's decode: per
    ``token``) in ``unit`` (``s`` for a Piper file, ``ms`` for an ONNX model or an LLM), memory per
    device in binary units; then the run's figures, each in its unit: per sample, per micro-batch
    (``sim.samples_per_microbatch`` samples; ``microbatch`` says what one is, e.g. one run of the model
    at its batch size) and the makespan, with throughput in samples per second (the simulation's times
    are seconds). ``devices``: each stage's devices by name (``a100:0-3``; default: its kind)."""
    from ..report import human_bytes
    from ..stages import fmt_time

    b = sim.samples_per_microbatch
    head = ["stage", "devices", "d", "t", f"load ({unit}/{sample})", f"simulated busy ({unit}/{sample})",
            "model y", "simulated y", "weight versions", "model peak/device", "simulated peak/device"]
    rows = [[str(s.stage), devices[i] if devices else s.kind, str(s.d), str(s.t),
             fmt_time(s.model_time_per_sample, unit),
             fmt_time(s.busy_per_sample, unit), str(s.model_in_flight), str(s.peak_in_flight),
             str(s.weight_versions), human_bytes(s.model_memory), human_bytes(s.peak_memory)]
            for i, s in enumerate(sim.stages)]
    what = f"{b} {sample}s" if b > 1 else f"one {sample}"
    held = (" (every micro-batch's state held between its runs, as the plan's gpipe memory: a decode's KV "
            "caches)") if sim.resident else ""
    lines = [f"stage pipeline of {len(sim.stages)} stage(s), schedule {sim.schedule}{held}, "
             f"{sim.microbatches} micro-batches per batch, {sim.batches} batches simulated"
             + (f"; a micro-batch is {microbatch} ({what})" if microbatch else
                f"; a micro-batch is {what}" if b > 1 else "")]
    lines.append(aligned([head] + rows, lambda i: i >= 2))  # the figures from d on to the right
    same = math.isclose(sim.bottleneck_per_sample, sim.model_time_per_sample, rel_tol=1e-9, abs_tol=1e-15)
    flush = ": flush fill and drain" if sim.schedule in ("gpipe", "1f1b") else ""
    mb = f"micro-batch ({b} {sample}s)"

    def per_mb(x: float) -> str:  # a per-sample time also per micro-batch, where that differs
        return f"; {fmt_time(x * b, unit)} {unit} per {mb}" if b > 1 else ""

    def rate(per_sample: float) -> str:
        return f"{1 / per_sample:,.6g} {sample}s/s" if per_sample > 0 else f"inf {sample}s/s"

    lat = "one-micro-batch" if b > 1 else f"one-{sample}"
    if any(t.kind == "B" and t.duration > 0 for t in sim.tasks):
        lat += " (forward and backward)"
    same_lat = math.isclose(sim.latency, sim.model_latency, rel_tol=1e-9, abs_tol=1e-15)
    lines += [
        f"bottleneck (busiest device) {fmt_time(sim.bottleneck_per_sample, unit, 9)} {unit} per {sample}; "
        f"model {fmt_time(sim.model_time_per_sample, unit, 9)} {unit} per {sample} "
        f"({'equal' if same else 'DIFFERENT'}){per_mb(sim.bottleneck_per_sample)}",
        f"simulated period {fmt_time(sim.period_per_sample, unit, 9)} {unit} per {sample}"
        f"{per_mb(sim.period_per_sample)} ({rate(sim.period_per_sample)}; bubble "
        f"{100 * sim.bubble_fraction:.1f}%{flush})",
        f"makespan {fmt_time(sim.makespan, unit)} {unit} for {sim.batches} batches "
        f"({sim.batches * sim.microbatches} micro-batches, {sim.samples} {sample}s): "
        f"{fmt_time(sim.time_per_sample, unit)} {unit} per {sample} over the run "
        f"({rate(sim.time_per_sample)})",
        f"{lat} latency {fmt_time(sim.latency, unit)} {unit}" + (f" ({b} {sample}s)" if b > 1 else "")
        + " in this schedule (alone in the pipeline: one replica of each stage takes it whole, a stage after "
          "the stages that send to it); the stage model's latency gives "
        + f"{fmt_time(sim.model_latency, unit)} {unit}"
        + (f" ({fmt_time(sim.model_latency / b, unit)} {unit} per {sample} x {b})" if b > 1 else "")
        + (" (equal)" if same_lat else " (the stages one after another)"),
    ]
    for s in sim.stages:
        if s.peak_memory > s.capacity * (1 + 1e-9):
            lines.append(f"stage {s.stage} does NOT fit under {sim.schedule}: {human_bytes(s.peak_memory)} "
                         f"per device, over the {human_bytes(s.capacity)} each {s.kind} device holds")
    return "\n".join(lines)


def _warn_if_invalid(result: str, problems) -> None:
    """A plan that breaks a constraint (a file of ``placement evaluate`` on a given split, or costs that
    changed) is simulated as given, but said so first, on stderr."""
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        print(f"warning: {result}: the plan is not valid: {'; '.join(problems[:2])}{more}; simulated as "
              f"given", file=sys.stderr)


def _show_stage_plan(args, frontend: dict | None = None) -> int:
    """``placement show`` on a stage-plan result (:func:`placement.simulate.simulate_plan`, under its
    schedule and micro-batches): per stage, the simulated busy time per sample and peak memory next to
    the evaluator's, then the period, makespan, throughput and one micro-batch's latency, and the
    schedule drawn one row per replica. The stage model's times are per sample; a micro-batch is one
    run of an ONNX model at its recorded batch size, an LLM's decode step of its sequences per
    micro-batch (a token each), one sample of a Piper file. ``frontend``:
    the ONNX front-end options given on the command line (``None`` where not given), which re-cost the
    plan instead of the settings the result records."""
    from ..results import read_stage_result

    raw = read_json(args.result)
    data = read_stage_result(raw, source=args.result)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.result))
    if not args.no_draw:  # checked before any work
        output_dir(out_dir, "--out-dir")
    path = _workload_path(args, data)
    onnx = str(path).lower().endswith(".onnx")
    given = None if args.schedule == "stream" else args.schedule  # stream is the simulation's, not the plan's
    from graphs.llm import is_llm_config

    from ..inputs import _json
    from ..stages import plan_from_dict, workload_for_result

    llm = is_llm_config(_json(path))
    # what a micro-batch is: its samples (the problem's times are per sample) and in words
    if llm:  # a model config's decode plan (placement/cli/llm.py), rebuilt as evaluate rebuilds it
        problem, batch_size = _llm_problem(args, data, path, frontend or {})
        samples = batch_size // problem.microbatches  # sequences per micro-batch, a token each per step
        words = f"a decode step of {samples} sequence{'s' if samples > 1 else ''}"
    else:
        w = workload_for_result(raw, path, schedule=given, microbatches=args.microbatches,
                                source=args.result, frontend=frontend)
        problem = w.problem
        samples = batch_size = int(w.settings.get("batch_size") or 1)  # an ONNX model's: one run; Piper: 1
        words = f"one run of the model at batch size {samples}" if onnx else None

    plan = plan_from_dict(problem, raw, source=args.result)
    # an ONNX model's inference plan and an LLM's decode run forwards only (a Piper file is a training job)
    training = data.get("training") if not (frontend or {}).get("training") else True
    forwards_only = llm or (onnx and training is False)
    onnx = onnx or llm  # both print milliseconds
    schedule = args.schedule or ("stream" if forwards_only else None)
    if schedule == "stream" and not forwards_only:
        raise InputError("--schedule stream: streams an inference plan; this plan trains (forwards and "
                         "backwards)")
    # a decode keeps each sequence's KV cache between its steps: the memory its plan was sized by
    from ..simulate import simulate_plan
    from ..stages import stage_devices

    try:
        sim = simulate_plan(problem, plan, schedule=schedule,
                            forward_fraction=1.0 if forwards_only else 1 / 3, samples_per_microbatch=samples,
                            resident=llm)
    except InputError as e:  # the plan's fault (not valid, a schedule it cannot take): the file's
        if e.source is not None:
            raise
        raise InputError(e.detail, source=args.result) from None
    from graphs.parallel import evaluate_plan

    ev = evaluate_plan(problem, plan)
    # simulated: a plan over memory (the simulator refuses one that breaks any other rule) is said so
    _warn_if_invalid(args.result, ev.problems)
    # the file's max-load against the plan's now, in the table's unit, said as evaluate says it
    from .evaluate import _changed_settings, note_max_load

    scale, per = (1e3 if onnx else 1.0), f"{'ms' if onnx else 's'} per {'token' if llm else 'sample'}"
    recorded = raw.get("max_load")
    recorded = recorded * scale if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) \
        else None
    typed = {**(frontend or {}), "schedule": given, "microbatches": args.microbatches}
    settings = raw.get("problem") if isinstance(raw.get("problem"), dict) else raw  # version 1: at the top
    note_max_load(recorded, per, ev.objective * scale, per, _changed_settings(typed, settings, args.result))
    if args.json:
        from graphs.parallel import stage_device_names

        from ..export import print_json

        # batch_size as a one-device-per-stage plan's gives it: the model's (an LLM's: its sequences)
        doc = {"result": args.result, "time_unit": "s", "batch_size": batch_size,
               "simulation": sim.summary()}
        for row, names in zip(doc["simulation"]["stages"], stage_device_names(problem, plan)):
            row["devices"] = names  # as a result file's stages list them
        print_json(doc)
    else:
        print(format_stage_simulation(sim, "ms" if onnx else "s", "token" if llm else "sample", words,
                                      stage_devices(problem, plan)))
    if args.no_draw:
        return 0
    from graphs.parallel import stage_device_names

    from ..draw import PlotsUnavailable, stage_gantt_chart, stage_plan_dot, write_graph

    # one label per replica: its first device, and "+1" etc. for the rest of its t
    devices = [[name + (f"+{st.t - 1}" if st.t > 1 else "") for name in names[::st.t]]
               for st, names in zip(plan, stage_device_names(problem, plan))]
    stem = os.path.join(out_dir, os.path.splitext(os.path.basename(args.result))[0])
    written = []
    try:
        written.append(stage_gantt_chart(sim, f"{stem}.gantt.{args.format}", devices=devices,
                                         scale=1e3 if onnx else 1.0, unit="ms" if onnx else "s"))
    except PlotsUnavailable as e:
        print(f"note: {e}; Gantt chart not drawn", file=sys.stderr)
    # the graph with its nodes boxed by stage, as a one-device-per-stage plan's is boxed by device
    dot = stage_plan_dot(problem, plan, devices, title=os.path.basename(args.result))
    paths, note = write_graph(stem, dot, args.format)
    written += paths
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not args.json:
        print("wrote " + ", ".join(written))
    return 0

