"""``placement show`` of a replicated plan (a result JSON with ``stages``, written by ``placement place``
on a Piper-format workload or an ONNX model): simulate it under its schedule and micro-batches
(:func:`placement.simulate.simulate_plan`) and print, per stage, the simulated busy time per sample and
peak memory next to the evaluator's (seconds for a Piper file, milliseconds for an ONNX model), then the
period, makespan, throughput (samples/s) and one micro-batch's latency, and draw the simulated
schedule, one row per replica (:func:`placement.draw.stage_gantt_chart`). The stage model's times are
per sample; a micro-batch is one run of an ONNX model at its recorded batch size (``batch_size``
samples), an LLM's decode step of its sequences per micro-batch (a token each), one sample of a Piper
file, and is simulated as that many samples.

    placement show result.json [--workload piper.json|model.onnx] [--schedule 1f1b|gpipe|pipedream|2bw]
                   [--microbatches N] [--json] [--out-dir DIR] [--format png|svg] [--no-draw]

An ONNX model's problem is rebuilt from the settings the result records
(:func:`placement.stages.problem_for_result`, as a Piper-format workload's).
"""

from __future__ import annotations

import math
import os
import sys

from graphs.errors import InputError
from graphs.jsonio import read_json

from .simulate import ReplicatedSimulation, simulate_plan

__all__ = ["show", "format_simulation"]


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

    from .llm_cmd import _problem
    from .stages import read_stage_result

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
    saved = read_stage_result(data)
    ns = SimpleNamespace(workload=path, batch_size=frontend.get("batch_size"), context=None,
                         devices=frontend.get("devices"), device_files=frontend.get("device_files") or (),
                         microbatches=args.microbatches, max_replicas=None)
    problem, settings = _problem(ns, saved)
    return problem, int(settings["batch_size"])


def format_simulation(sim: ReplicatedSimulation, unit: str = "s", sample: str = "sample",
                      microbatch: str | None = None) -> str:
    """The simulation next to the evaluator, per stage; times per ``sample`` (an LLM's decode: per
    ``token``) in ``unit`` (``s`` for a Piper file, ``ms`` for an ONNX model or an LLM), memory per
    device in binary units; then the run's figures, each in its unit: per sample, per micro-batch
    (``sim.samples_per_microbatch`` samples; ``microbatch`` says what one is, e.g. one run of the model
    at its batch size) and the makespan, with throughput in samples per second (the simulation's times
    are seconds)."""
    from .report import human_bytes
    from .stages import fmt_time

    b = sim.samples_per_microbatch
    head = ["stage", "kind", "d", "t", f"model {unit}/{sample}", f"simulated busy {unit}/{sample}", "model y",
            "simulated y", "weight versions", "model peak/device", "simulated peak/device"]
    rows = [[str(s.stage), s.kind, str(s.d), str(s.t), fmt_time(s.model_time_per_sample, unit),
             fmt_time(s.busy_per_sample, unit), str(s.model_in_flight), str(s.peak_in_flight),
             str(s.weight_versions), human_bytes(s.model_memory), human_bytes(s.peak_memory)]
            for s in sim.stages]
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(head)]
    what = f"{b} {sample}s" if b > 1 else f"one {sample}"
    held = (" (every micro-batch's state held between its runs, as the plan's gpipe memory: a decode's KV "
            "caches)") if sim.resident else ""
    lines = [f"stage pipeline of {len(sim.stages)} stage(s), schedule {sim.schedule}{held}, "
             f"{sim.microbatches} micro-batches per batch, {sim.batches} batches simulated"
             + (f"; a micro-batch is {microbatch} ({what})" if microbatch else
                f"; a micro-batch is {what}" if b > 1 else "")]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
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
                         f"per device, a {s.kind} holds {human_bytes(s.capacity)}")
    return "\n".join(lines)


def show(args, frontend: dict | None = None) -> int:
    """``placement show`` on a stage-plan result: simulate and compare with the evaluator. ``frontend``:
    the ONNX front-end options given on the command line (``None`` where not given), which re-cost the
    plan instead of the settings the result records."""
    from .stages import read_stage_result

    data = read_stage_result(read_json(args.result))
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.result))
    if not args.no_draw:  # checked before any work
        from .outputs import output_dir

        output_dir(out_dir, "--out-dir")
    path = _workload_path(args, data)
    onnx = str(path).lower().endswith(".onnx")
    given = None if args.schedule == "stream" else args.schedule  # stream is the simulation's, not the plan's
    from graphs.llm import is_llm_config

    from .inputs import _json
    from .stages import plan_from_dict, workload_for_result

    llm = is_llm_config(_json(path))
    # what a micro-batch is: its samples (the problem's times are per sample) and in words
    if llm:  # a model config's decode plan (placement/llm_cmd.py), rebuilt as evaluate rebuilds it
        problem, batch = _llm_problem(args, data, path, frontend or {})
        samples = batch // problem.microbatches  # sequences per micro-batch, a token each per step
        words = f"a decode step of {samples} sequence{'s' if samples > 1 else ''}"
    else:
        w = workload_for_result(data, path, schedule=given, microbatches=args.microbatches,
                                source=args.result, frontend=frontend)
        problem = w.problem
        samples = int(w.settings.get("batch_size") or 1)  # an ONNX model's: one run; a Piper file: 1
        words = f"one run of the model at batch size {samples}" if onnx else None

    plan = plan_from_dict(problem, data, source=args.result)
    # an ONNX model's inference plan and an LLM's decode run forwards only (a Piper file is a training job)
    training = data.get("training") if not (frontend or {}).get("training") else True
    forwards_only = llm or (onnx and training is False)
    onnx = onnx or llm  # both print milliseconds
    schedule = args.schedule or ("stream" if forwards_only else None)
    if schedule == "stream" and not forwards_only:
        raise InputError("--schedule stream: streams an inference plan; this plan trains (forwards and "
                         "backwards)")
    # a decode keeps each sequence's KV cache between its steps: the memory its plan was sized by
    sim = simulate_plan(problem, plan, schedule=schedule, forward_fraction=1.0 if forwards_only else 1 / 3,
                        samples_per_microbatch=samples, resident=llm)
    if args.json:
        from .export import print_json

        print_json({"result": args.result, "time_unit": "s", "simulation": sim.summary()})
    else:
        print(format_simulation(sim, "ms" if onnx else "s", "token" if llm else "sample", words))
    if args.no_draw:
        return 0
    from .draw import PlotsUnavailable, stage_gantt_chart, stage_plan_dot, write_graph
    from .stages import stage_device_numbers

    names = [k.name for k in problem.kinds for _ in range(k.count)]
    index = [j for k in problem.kinds for j in range(k.count)]
    devices = [[f"{names[n]}:{index[n]}" + (f"+{st.t - 1}" if st.t > 1 else "")
                for n in list(numbers)[::st.t]]
               for st, numbers in zip(plan, stage_device_numbers(problem, plan))]
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

