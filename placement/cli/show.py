"""``placement show RESULT``: simulate a placement's pipeline under its schedule, print the summary and
draw its Gantt chart and its graph. A stage plan's is :mod:`placement.stage_show`."""

from __future__ import annotations

import math
import os
import sys

from ..outputs import output_dir
from .common import EXIT_OK, UsageError, add_frontend_options, frontend, recorded_frontend

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    from ..simulate import SCHEDULES

    s = sub.add_parser("show", help="simulate and draw a placement", description="Simulate a placement's "
                       "pipeline (throughput, latency, bubble, per-device utilisation, stashed activations), "
                       "draw its Gantt chart (matplotlib) and its graph coloured by device, or by stage "
                       "for a stage plan (Graphviz DOT, "
                       "rendered when `dot` is installed).")
    s.add_argument("result", help="result file written by placement place --out")
    s.add_argument("--workload", default=None, metavar="PATH",
                   help="the workload or ONNX model the result is for (default: the result's 'source')")
    s.add_argument("--schedule", choices=SCHEDULES + ("pipedream", "2bw"), default=None,
                   help="stream (inference default), gpipe or 1f1b (training default); a stage plan: "
                   "1f1b, gpipe, pipedream or 2bw (default: its own; an inference plan: stream)")
    s.add_argument("--microbatches", "-m", type=int, default=None, metavar="M",
                   help="micro-batches (default 8; a stage plan: its own per batch)")
    s.add_argument("--overlap", action="store_true", help="draw the schedule with communication overlapped")
    s.add_argument("--out-dir", default=None, metavar="DIR",
                   help="where to write the pictures (default: beside the result file)")
    s.add_argument("--format", choices=("png", "svg"), default=None, help="picture format (default png)")
    s.add_argument("--no-draw", action="store_true", help="only simulate; write no pictures (--overlap, "
                   "--format and --out-dir, which are the pictures', are then refused)")
    s.add_argument("--json", action="store_true", help="print the simulation as JSON")
    add_frontend_options(s)


def _load_for_result(args, data: dict):
    """The workload a result is for: --workload, else the result's source (relative to the result file,
    as results store it; then as written, for results of older versions, relative to where they ran)."""
    from ..load import load_workload

    path = args.workload or data.get("source")
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
    from ..simulate import SCHEDULES as SIM_SCHEDULES
    from ..simulate import assignment_from_result, checked_result, read_result, simulate

    if args.microbatches is not None and args.microbatches < 1:
        raise UsageError("placement show: --microbatches must be at least 1")
    from .. import stage_show  # a stage plan (result JSON with stages): placement/stage_show.py
    from ..inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    if args.no_draw:  # the picture options do nothing without pictures: refused, not ignored
        for flag, given in (("--overlap", args.overlap), ("--format", args.format is not None),
                            ("--out-dir", args.out_dir is not None)):
            if given:
                raise UsageError(f"placement show: {flag} sets the pictures, and --no-draw draws none; "
                                  f"drop one of them")
    args.format = args.format or "png"
    saved = result_json(args.result)
    refuse_not_result(args.result, "show", saved)  # an ONNX model, a workload, a frontier...: said so
    refuse_empty_result(saved, "show", args.result)
    if holds_stage_plan(saved):
        if args.overlap:
            raise UsageError("placement show: --overlap draws a one-device-per-stage plan's transfers as "
                              "their own events; a stage plan's stage time counts its communication with "
                              "its compute, so there is no separate transfer to overlap")
        return stage_show.show(args, frontend(args))
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
    unit = w.graph.meta.get("unit", "")
    sim = simulate(w.graph, w.cluster, a, schedule=args.schedule, microbatches=args.microbatches)
    over = simulate(w.graph, w.cluster, a, schedule=sim.schedule, microbatches=args.microbatches,
                    overlap=True)
    if args.json:
        from ..export import print_json

        print_json({"result": args.result, "simulation": sim.summary(), "overlapped": over.summary()})
    else:
        from graphs.latency import inference_latency

        lat = inference_latency(w.graph, w.cluster, a)  # None for a training graph, as Placement.latency
        print(_format_simulation(sim, over, unit, None if lat is None else lat.total,
                                 batch=w.graph.batch_size))
        from ..serving_cli import show_mfu_lines

        sys.stdout.write(show_mfu_lines(w.graph, w.cluster, a, sim.steady_time_per_sample))
    old = data.get("max_load")
    if isinstance(old, (int, float)) and not math.isclose(old, ev.max_load, rel_tol=1e-6, abs_tol=1e-12):
        print(f"note: with the costs loaded now the max-load is {ev.max_load:.6g}; the result says {old:.6g} "
              f"(costs re-measured, or another cost model?)", file=sys.stderr)
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
    u = f" {unit}" if unit else ""
    item = "sample" if batch == 1 else f"batch ({batch} samples)"
    cu = f" [{unit or 't'}]"
    name = {"stream": "streaming inference", "gpipe": "GPipe", "1f1b": "1F1B"}[sim.schedule]
    # "busy/wall" (busy time over the makespan), not the table of `place`'s "load/max" (load over max-load)
    rows = [["stage", "device", "kind", "load" + cu, "busy" + cu, "busy/wall", "compute/wall", "peak stash"]]
    for r in sim.stages:
        stash = "-" if r.peak_stashed is None else str(r.peak_stashed)
        if r.peak_stash_bytes is not None:
            from ..report import human_bytes

            stash += f" ({human_bytes(r.peak_stash_bytes)})"
        rows.append([str(r.stage), r.name, r.kind, f"{r.load:.4g}", f"{r.busy:.4g}",
                     f"{100 * r.utilisation:.1f}%", f"{100 * r.compute_utilisation:.1f}%", stash])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"pipeline of {len(sim.stages)} stage(s), {name}, {sim.microbatches} micro-batches"
             + (f" (each a batch of {batch} samples: one run of the model)" if batch > 1 else "")]
    lines += ["  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
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
    return "\n".join(lines)


def _gain(before: float, after: float) -> str:
    if after <= 0 or before <= after * (1 + 1e-9):
        return "no gain"
    return f"{before / after - 1:.1%} more throughput"
