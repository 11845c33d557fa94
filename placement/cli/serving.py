"""Serving on the command line: compute utilisation lines, batch-size sweeps and latency targets for
``place``, and the ``frontier`` and ``provision`` commands (:mod:`placement.serving` does the work)."""

from __future__ import annotations

import dataclasses
import math
import textwrap
import threading
import time

from solvers.base import INTERRUPTED

from ..inputs import check_counts, refuse_schedule_options, uses_stage_model
from ..outputs import aligned

__all__ = ["format_mfu", "mfu_lines", "show_mfu_lines"]


def _pct(x: float) -> str:
    from graphs.mfu import pct  # numpy stays out of `placement --help`

    return pct(x)


def compute_utilisation(graph, cluster, assignment, period_ms=None):
    from graphs.mfu import compute_utilisation as cu  # numpy stays out of `placement --help`

    return cu(graph, cluster, assignment, period_ms=period_ms)


def format_mfu(mfu) -> str:
    """Compute utilisation (MFU) in a few lines: the plan's total and every device that runs something.
    Empty when the graph has no FLOP counts (reference JSON workloads)."""
    if mfu is None or not math.isfinite(mfu.period_ms):
        return ""
    used = [d for d in mfu.devices if d.flops > 0]
    parts = ", ".join(f"{d.name} {_pct(d.mfu)}" for d in used)
    return (f"compute utilisation (MFU: achieved / peak FLOP/s, not busy time): total {_pct(mfu.total)} "
            f"({mfu.achieved / 1e12:.4g} of {mfu.peak_flops / 1e12:.4g} TFLOP/s)"
            + (f"; {parts}" if parts else ""))


def mfu_lines(placement) -> str:
    """:func:`format_mfu` of a :class:`~placement.api.Placement` and a newline (empty without a
    placement or FLOP counts)."""
    if placement.assignment is None:
        return ""
    return show_mfu_lines(placement.graph, placement.cluster, placement.assignment, None)


def show_mfu_lines(graph, cluster, assignment, period_ms: float | None) -> str:
    """:func:`format_mfu` for an assignment, one run of the graph's batch every ``period_ms`` (default:
    its max-load), and a newline; empty without FLOP counts."""
    text = format_mfu(compute_utilisation(graph, cluster, assignment, period_ms=period_ms))
    return text + "\n" if text else ""


# ---------------------------------------------------------------- place --batch-size / --latency-slo
def batch_size_arg(text: str):
    """``--batch-size``: an int for one batch size; ``"auto"`` or a comma list (kept as text) for a
    sweep, which only ``place``, ``frontier`` and ``provision`` run. A bad value is an
    ``argparse.ArgumentTypeError`` (argparse names the flag: ``argument --batch-size: ...``)."""
    import argparse

    t = text.strip().lower()
    if t.isdigit() and int(t) >= 1:
        return int(t)
    from graphs.errors import InputError

    from ..serving import parse_batch_sizes

    try:
        parse_batch_sizes(t)
    except InputError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a batch size: give a positive integer, auto, or "
                                         f"a list of positive integers such as 1,2,4") from None
    return t


def single_batch(value):
    """The ``batch_size`` front-end option of commands that take one batch size."""
    if value is None or isinstance(value, int):
        return value
    from graphs.errors import InputError

    raise InputError(f"--batch-size {value}: a list or auto is for place, frontier and provision; give one "
                     f"batch size")


def add_place_options(p) -> None:
    """``place`` options of this module."""
    p.add_argument("--latency-slo", type=float, default=None, metavar="MS",
                   help="maximise throughput with the latency of one batch at most MS (ms), across "
                        "placements and batch sizes (ONNX inference models: the stage model, replicas "
                        "as the devices allow; where its answer is not proven, also one device per stage "
                        "(exact for it) within the time left, default max(10 s, 3x the stage search), the "
                        "better kept; --max-replicas 1: one device per stage only; it picks its own "
                        "solvers, so no --solver; docs/serving.md)")


def _slo_error(value: float) -> str:
    """The error of a ``--latency-slo`` that is not a finite positive number (``inf`` is no target: the
    option left out says that)."""
    if value == math.inf:
        return ("--latency-slo must be a finite number of milliseconds, got inf (for no latency target, "
                "leave --latency-slo out)")
    return f"--latency-slo must be a finite positive number of milliseconds, got {value!r}"


def _options(args):
    """The solver options of ``args``, those of ``SolveOptions.raw`` (:func:`placement.inputs.raw_options`)
    included: every solve of a sweep gets them, and a solver that does not read one refuses it."""
    from solvers.base import DEFAULT_BACKEND, SolveOptions

    from ..inputs import raw_options

    t = args.time_limit
    return SolveOptions(time_limit=None if t is None or math.isinf(t) else t, gap=args.gap,
                        threads=args.threads, seed=getattr(args, "seed", 0),
                        backend=getattr(args, "backend", DEFAULT_BACKEND), raw=raw_options(args))


def _refuse_raw_under_target(args) -> None:
    """A latency target runs its own solvers (the exact DP as a start, its lattice capped, and the
    serving integer program, :func:`placement.serving.best_under_latency`), none of which reads
    ``--memory-limit``, ``--split`` or ``--restarts``: one error naming those given, never ignored."""
    from graphs.errors import InputError
    from solvers.registry import RAW_OPTIONS

    from ..inputs import raw_options

    given = [RAW_OPTIONS[k] for k in raw_options(args)]
    if args.latency_slo is not None and given:
        flags, one = " and ".join(given), len(given) == 1
        it = "it" if one else "them"
        raise InputError(f"{flags} {'does' if one else 'do'} not apply with --latency-slo: a latency target "
                         f"picks its own solvers (the exact DP's start and the serving integer program), "
                         f"which do not read {it}; drop {flags} (a batch-size sweep without --latency-slo "
                         f"passes {it} to its solver)")


def _serving_flags(args) -> str:
    """The serving options ``args`` give (``place``'s batch-size sweep and latency target), as typed."""
    given = []
    if isinstance(getattr(args, "batch_size", None), (str, list, tuple)):
        b = args.batch_size
        given.append(f"--batch-size {b if isinstance(b, str) else ','.join(map(str, b))}")
    if getattr(args, "latency_slo", None) is not None:
        given.append(f"--latency-slo {args.latency_slo:g}")
    return " and ".join(given) or "--batch-size auto/LIST and --latency-slo"


def _need_onnx(path: str, what: str) -> None:
    from graphs.errors import InputError

    if not path.lower().endswith(".onnx"):
        raise InputError(f"{what} needs an ONNX model (.onnx): batch sizes and FLOPs come from its shapes",
                         source=path)
    import os

    if not os.path.isfile(path):  # before anything else is checked or computed
        raise InputError("no such file", source=path)


def _sizes(value):
    from ..serving import parse_batch_sizes

    if value is None:
        return [1]
    return parse_batch_sizes(value)


def _sweep_rows(sw) -> str:
    """The table of a batch-size sweep (:class:`placement.serving.Sweep`, of either model)."""
    from ..report import cli_message as cli_words

    rows = [["batch", "samples/s", "latency ms/batch", "max-load ms/batch", "status", "MFU", "note"]]
    for b, pt, why in sw.points:
        if pt is None:
            rows.append([str(b), "-", "-", "-", "-", "-", cli_words(why)])
            continue
        m = pt.utilisation()
        note = ("<- best; " if sw.best is pt else "") + pt.how + ("" if pt.proven else " (not proven)")
        rows.append([str(b), f"{pt.samples_per_s:.6g}", f"{pt.latency_ms:.6g}", f"{pt.max_load:.6g}",
                     pt.status, _pct(m.total) if m else "-", note])
    return aligned(rows, lambda i: 0 < i < 6)


#: what the sweep's figures mean, per model (the serving section's ``definition``)
_DEFINITIONS = {
    "one-device-per-stage": "samples/s = 1000 x batch / max-load; max_load_ms and latency_ms are per batch: "
                            "latency = one batch end to end, branches on different devices overlapping "
                            "(graphs.latency)",
    "stages": "samples/s = 1 / time per sample; max_load_ms and latency_ms are per batch: latency = one "
              "batch end to end on one replica of each stage, the stages one after another "
              "(graphs.parallel.evaluate_plan)",
}


def _serving_section(sw, model: str, **extra) -> dict:
    """The result file's ``serving`` section of a sweep: one format for both models (``model``)."""
    def num(x):
        return x if x is not None and math.isfinite(x) else None

    return {
        "model": model, **extra, "latency_slo_ms": sw.latency_slo, "stopped": sw.stopped,
        "lowest_latency_ms": num(sw.lowest_latency), "lowest_latency_proven": sw.lowest_proven,
        "best_batch_size": sw.best.batch_size if sw.best else None, "best_proven": sw.best_proven,
        "definition": _DEFINITIONS[model],
        "batch_sizes": [{"batch_size": b, "samples_per_s": num(pt.samples_per_s) if pt else None,
                         "latency_ms": num(pt.latency_ms) if pt else None,
                         "max_load_ms": num(pt.max_load) if pt else None,
                         "status": pt.status if pt else None, "proven": pt.proven if pt else None,
                         "how": pt.how if pt else None, "note": why} for b, pt, why in sw.points],
    }


def run_place(args, frontend: dict) -> int:
    """``place`` with ``--batch-size auto|LIST`` and/or ``--latency-slo``: sweep, print, write."""
    from ..serving import sweep

    _need_onnx(args.workload, _serving_flags(args))
    if args.objective != "max-load" or args.training:
        from graphs.errors import InputError

        given = [f for f, on in ((f"--objective {args.objective}", args.objective != "max-load"),
                                 ("--training", args.training)) if on]
        raise InputError(f"--batch-size auto/LIST and --latency-slo maximise inference throughput: drop "
                         f"{' and '.join(given)} (a latency target is --latency-slo MS)")
    if args.latency_slo is not None and not (args.latency_slo > 0 and math.isfinite(args.latency_slo)):
        from graphs.errors import InputError

        raise InputError(_slo_error(args.latency_slo))
    _refuse_raw_under_target(args)
    sizes = _sizes(args.batch_size)
    sw = sweep(args.workload, frontend.get("devices"), sizes, costs=frontend.get("costs") or "roofline",
               latency_slo=args.latency_slo, solver=args.solver if args.latency_slo is None else None,
               options=_options(args), dims=frontend.get("dims"),
               device_files=frontend.get("device_files") or (), clock=getattr(args, "clock", None))
    if sw.best is None and sw.interrupted:  # a Ctrl-C before any plan was found: the command stops
        raise KeyboardInterrupt
    if sw.interrupted:  # the first Ctrl-C kept the best plan so far: later ones change nothing (exit 0)
        from .. import _interrupt

        _interrupt.stopping()
    return _emit_sweep(args, sw)


def _target_missed(sw, *, bound: bool) -> str:
    """The error of a sweep in which no batch size meets its latency target: ``infeasible`` only when
    that is proven (:attr:`~placement.serving.Sweep.none_proven`), and the lowest latency named: a lower
    bound (``bound``, the stage model's), else the least latency when proven
    (:attr:`~placement.serving.Sweep.lowest_proven`) and a plan's latency (not proven least)
    otherwise."""
    low = ""
    if sw.lowest_latency is not None:
        x = f"{sw.lowest_latency:.6g} ms"
        if bound:
            low = f"; the lowest latency achievable is at least {x}"
        elif sw.lowest_proven:
            low = f"; the lowest latency achievable is {x}"
        else:
            low = f"; the lowest latency found is {x} (not proven least)"
        low += f" (batch {sw.points[0][0]})"
    head = "infeasible: no plan" if sw.none_proven else "no plan found"
    why = "" if sw.none_proven else " (not proven infeasible)"
    return (f"error: {head} meets the latency target of {sw.latency_slo:g} ms at any batch size "
            f"tried{why}{low}")


def _emit_sweep(args, sw, note: str = "") -> int:
    """Print and write the one-device-per-stage sweep ``sw`` of ``place`` (``note``: a line on why this
    plan was kept, printed before the table)."""
    import sys

    from ..report import format_summary, format_table
    from ..results import no_plan_result, result_dict

    data = result_dict(sw.best.placement) if sw.best else no_plan_result("one-device-per-stage",
                                                                          sw.none_proven)
    data["serving"] = _serving_section(sw, "one-device-per-stage")
    slo = f", latency <= {args.latency_slo:g} ms" if args.latency_slo is not None else ""

    def show_best(p) -> None:
        print("\n" + _best_batch_line(sw) + "\n")  # then the table, as the stage sweep prints it
        table = format_table(p.placement)
        if table:
            print(table + "\n")
        print(format_summary(p.placement))
        sys.stdout.write(mfu_lines(p.placement))

    return _emit(args, sw, data, note=note, show_best=show_best, bound=False,
                 nothing="error: no batch size has a placement",
                 heading=f"batch sizes{slo} (samples/s = 1000 x batch / max-load; latency = one batch end "
                         f"to end)")


def _reason(error_line: str) -> str:
    """A no-plan result file's ``message``: the command's error line without ``error:`` and the status
    word the file's ``status`` holds."""
    return error_line.removeprefix("error: ").removeprefix("infeasible: ")


def _emit(args, sw, data: dict, *, note: str, show_best, bound: bool, nothing: str, heading: str) -> int:
    """What a sweep of ``place`` prints and writes, on either model: ``data`` is its result file (the
    best plan's, or the no-plan result) with its ``serving`` section, ``heading`` the line above the
    sweep's rows, ``show_best(best)`` prints the best plan; without one, the target missed (its least
    latency a proven ``bound`` or not) or ``nothing``, and exit 1."""
    import sys

    from ..export import emit

    if note:
        data["serving"]["note"] = note
    failure = None
    if sw.best is None:  # the error line, and the no-plan file's reason (its message)
        failure = _target_missed(sw, bound=bound) if args.latency_slo is not None else \
            f"error: infeasible: {nothing.removeprefix('error: ')} (at each, proven; the table says why)" \
            if sw.none_proven else nothing
        data["message"] = data.get("message") or _reason(failure)

    def text() -> str:  # printed as it goes (show_best prints), inside emit's deferral
        print(heading)
        print(_sweep_rows(sw))
        if sw.stopped:
            print(f"stopped: {sw.stopped}")
        if failure is None:
            if note:
                print("\n" + note)
            show_best(sw.best)
            _print_time_words(args)
        return ""

    emit(args, data, text)  # the one output path: --out written, then --json or the text
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    return 0


def _print_time_words(args) -> None:
    """What ``place``'s ``--time-limit`` covered (:meth:`placement.clock.Clock.words`), if it had one."""
    clock = getattr(args, "clock", None)
    if clock is not None and clock.words():
        print(clock.words())


def _as_result(pt):
    """A :class:`~placement.serving_stages.StagePoint` as the summary's solution (status, bound, time)."""
    from types import SimpleNamespace

    from solvers.base import Status, relative_gap

    v = pt.evaluation.objective
    gap = relative_gap(v, pt.bound)
    return SimpleNamespace(status=Status(pt.status), solver=pt.solver, bound=pt.bound, gap=gap,
                           time=pt.time or 0.0, message=pt.message or "", stats={})


def _best_batch_line(sw) -> str:
    """``best batch size B: X samples/s (Yx batch 1's Z), latency L ms per batch`` of a sweep."""
    p = sw.best
    first = next((pt for b, pt, _ in sw.points if pt is not None), None)
    gain = (f" ({p.samples_per_s / first.samples_per_s:.3g}x batch {first.batch_size}'s "
            f"{first.samples_per_s:.6g})" if first is not None and first is not p else "")
    if sw.best_proven:
        proof = "proven best of the batch sizes tried"
    elif p.proven:
        others = [b for b in sw.unproven if b != p.batch_size]
        proof = (f"proven best at batch {p.batch_size}, NOT proven best of the batch sizes tried (batch "
                 f"{', '.join(map(str, others))}: not proven)")
    else:
        proof = "NOT proven best"
    return (f"best batch size {p.batch_size}: {p.samples_per_s:.6g} samples/s{gain}, latency "
            f"{p.latency_ms:.6g} ms per batch; {proof}")


def _one_device_per_stage_too(args, frontend: dict, sw, spent: float):
    """``place --latency-slo`` without ``--max-replicas``: where the stage model's answer ``sw`` is not
    proven (its search under a target is a family of plans, docs/serving.md), also the
    one-device-per-stage integer program (exact under the target, for plans without replicas), within
    the time left (no limit: max(10 s, 3x the stage search), as a granularity refinement), at the batch
    sizes the stage sweep tried. Returns ``(sweep, note)``: the one-device-per-stage sweep when it serves
    more (its proofs then cover one device per stage only: not ``optimal`` here), else ``None``, and a
    line saying what was compared.

    Both latencies bound one batch end to end: the stage model's sums its stages (at or above the
    latency model's for the same placement), so every plan kept meets the target."""
    from solvers.base import Status

    from ..serving import Sweep, sweep
    from ..stages import refine_budget

    stage_best = sw.best
    if (stage_best is not None and stage_best.proven) or (stage_best is None and sw.lowest_proven):
        return None, ""
    clock = getattr(args, "clock", None)
    left = clock.left() if clock is not None else None
    budget = refine_budget(spent, left)
    if budget < 0.05:
        return None, "one device per stage not tried: no time left"
    sizes = [b for b, _, _ in sw.points] or [1]
    opts = dataclasses.replace(_options(args), time_limit=budget)  # the whole sweep's
    one = sweep(args.workload, frontend.get("devices"), sizes, costs=frontend.get("costs") or "roofline",
                latency_slo=args.latency_slo, options=opts, dims=frontend.get("dims"),
                device_files=frontend.get("device_files") or ())
    if one.best is None or (stage_best is not None
                            and one.best.samples_per_s <= stage_best.samples_per_s * (1 + 1e-9)):
        found = "none" if one.best is None else f"{one.best.samples_per_s:.6g} samples/s"
        return None, (f"one device per stage (the latency-constrained integer program, {budget:.3g} s) "
                      f"found {found}: the stage plan is kept")
    why = "one device per stage serves more than the stage model's search found"
    if stage_best is not None:
        why += f" ({one.best.samples_per_s:.6g} against {stage_best.samples_per_s:.6g} samples/s)"
    why += "; proven only among plans without replicas, so not proven best"

    def unproven(pt):
        sol = pt.placement.solution
        if sol.status is Status.OPTIMAL:
            sol = dataclasses.replace(sol, status=Status.FEASIBLE, bound=None, gap=None,
                                      message=f"{sol.message}; {why}" if sol.message else why)
        return dataclasses.replace(pt, placement=dataclasses.replace(pt.placement, solution=sol),
                                   proven=False)

    points = tuple((b, None if pt is None else unproven(pt), w) for b, pt, w in one.points)
    best = next(pt for (b, pt, _), (_, old, _) in zip(points, one.points) if old is one.best)
    return Sweep(points, best, one.stopped, one.latency_slo, one.lowest_latency), why


def run_place_stages(args, frontend: dict) -> int:
    """``place`` with ``--batch-size auto|LIST`` and/or ``--latency-slo`` on the stage model
    (:func:`placement.inputs.takes_stage_model`; :mod:`placement.serving_stages`): sweep, print, write."""

    from graphs.errors import InputError

    from .. import serving_stages
    from ..stages import _mfu_line, format_plan, plan_summary

    flags = _serving_flags(args)
    _need_onnx(args.workload, flags)
    serving_stages.check_stage_args(args, flags)
    slo = args.latency_slo
    if slo is not None and not (slo > 0 and math.isfinite(slo)):
        raise InputError(_slo_error(slo))
    sizes = _sizes(args.batch_size) if args.batch_size is not None else [1]
    t0 = time.perf_counter()
    sw = serving_stages.sweep(args.workload, frontend, sizes, args, latency_slo=slo)
    if sw.best is None and sw.interrupted:  # a Ctrl-C before any plan was found: the command stops
        raise KeyboardInterrupt
    if sw.interrupted:  # the first Ctrl-C kept the best plan so far: later ones change nothing (exit 0)
        from .. import _interrupt

        _interrupt.stopping()
    note = ""
    if slo is not None and args.max_replicas is None and not sw.interrupted:
        # the default: the better of both models' answers (not after a Ctrl-C: the best so far is the answer)
        one, note = _one_device_per_stage_too(args, frontend, sw, time.perf_counter() - t0)
        if one is not None:
            return _emit_sweep(args, one, note)
    if sw.best is not None:
        data = sw.best.result(args.workload)
    else:
        from ..results import no_plan_result

        data = no_plan_result("stages", sw.none_proven)

    data["serving"] = _serving_section(sw, "stages", max_replicas=args.max_replicas)
    what = f", latency <= {slo:g} ms" if slo is not None else ""

    def show_best(p) -> None:
        print("\n" + _best_batch_line(sw) + f" ({p.how})\n")
        print(format_plan(p.problem, p.evaluation, "ms") + "\n")
        extra = f"batch {p.batch_size}, {(p.settings or {}).get('granularity', '?')} granularity"
        print(plan_summary(p.problem, p.evaluation, "ms", result=_as_result(p), extra=extra,
                           latency_batch=p.batch_size)
              + _mfu_line(p.problem, p.evaluation, p.utilisation()))

    return _emit(args, sw, data, note=note, show_best=show_best, bound=True,
                 nothing="error: no batch size has a plan",
                 heading=f"batch sizes on the stage model ({_replicas_words(args)}){what} (samples/s = 1 / "
                         f"time per sample; latency = one batch end to end, one replica of each stage)")


# ---------------------------------------------------------------- frontier
DEFAULT_TIME_LIMIT = 60.0  # seconds for the whole frontier / provision command


def add_parser(sub) -> None:
    """Register ``frontier`` and ``provision``."""
    from ..outputs import PLOT_FORMATS

    f = sub.add_parser("frontier", help="throughput-latency frontier of a model",
                       description="Every non-dominated (samples/s, latency) plan of an ONNX model over the "
                       "batch sizes: for each, the best throughput under a latency limit, tightened point "
                       "by point (epsilon-constraint on the serving integer program), from the exact DP's "
                       "throughput optimum down; proven points are optimal for both measures. Points are "
                       "printed as they are found; when --time-limit runs out (or on Ctrl-C) the points "
                       "found so far are the answer, each labelled proven or not. Each plan is a "
                       "placement result (placement show reads it).")
    f.add_argument("model", help="ONNX model (.onnx)")
    _common(f)
    f.add_argument("--max-points", type=int, default=50, metavar="K", help="points per batch size at most "
                   "(default 50)")
    f.add_argument("--out", "-o", default=None, metavar="F.json", help="write the frontier (and one result "
                   "file per plan, F.<k>.json; default: write nothing)")
    f.add_argument("--plot", default=None, metavar="F.png", help="draw the frontier (needs matplotlib; "
                   f"formats {', '.join(PLOT_FORMATS)}; default: no drawing)")
    f.add_argument("--json", action="store_true", help="print the frontier JSON (instead of the points "
                   "and the table)")
    f.add_argument("--max-replicas", type=int, default=None, metavar="D",
                   help="largest data-parallel degree of the stage model's plans (replicas, tensor "
                   "parallelism; the stage optimum is the throughput end), added to the one-device-per-stage "
                   "frontier, not proven frontier points (default: as many as the devices allow; 1: one "
                   "device per stage only)")
    f.add_argument("--microbatches", type=int, default=None, metavar="N",
                   help="the stage model's micro-batches per batch (default: the smallest power of two "
                   ">= the devices)")
    f.add_argument("--granularity", choices=("layer", "op"), default=None,
                   help="the stage model's nodes: one per layer or per operator (default: layers where the "
                   "model's names give them, refined to operators within max(10 s, 3x the layer solve))")

    v = sub.add_parser("provision", help="cheapest devices for a throughput target",
                       description="The cheapest allocation of the available devices (prices per "
                       "device-hour from --prices or the device files) that serves the target samples/s, "
                       "optionally under a latency target, with its plan and the price-throughput curve of "
                       "efficient allocations. By default on the stage model (replicas), allocations tried "
                       "cheapest first with the exact stage DP (under a latency target, the stage integer "
                       "program with the latency as a row; where that answer is not proven and no "
                       "--max-replicas is given, the one-device-per-stage search too, the cheaper kept); "
                       "with --max-replicas 1, one device per stage: exact from one DP run over every "
                       "allocation, or under a latency target allocations tried cheapest first with the "
                       "serving IP.")
    v.add_argument("model", nargs="?", help="ONNX model (.onnx)")
    v.add_argument("--target-throughput", type=float, default=None, metavar="X",
                   help="samples per second (required)")
    v.add_argument("--latency-slo", type=float, default=None, metavar="MS",
                   help="latency of one batch at most MS milliseconds (default: no latency target)")
    v.add_argument("--available", default=None, metavar="SPEC", help="devices to choose from (required), "
                   "e.g. a100:8,t4:16,cpu:64")
    v.add_argument("--prices", default=None, metavar="FILE", help="TOML/JSON prices per device-hour "
                   "([prices] a100 = 3.0; default: price_per_hour of the device files)")
    v.add_argument("--example-prices", default=None, metavar="FILE",
                   help="write an example prices file (made-up figures) and exit: TOML where FILE ends in "
                        ".toml, JSON otherwise (as --prices reads it)")
    v.add_argument("--max-solves", type=int, default=200, metavar="K", action=_given_action(),
                   help="allocations solved at most (per batch size and search), where they are solved one "
                   "by one, cheapest first: on the stage model (the default) or under --latency-slo "
                   "(default 200); past it the answer is not proven. Not with --max-replicas 1 without "
                   "--latency-slo, where every allocation comes from one DP run")
    v.add_argument("--max-replicas", type=int, default=None, metavar="D",
                   help="largest data-parallel degree of the stage model (replicas d <= D, tensor "
                   "parallelism, a replica of the whole model too), allocations tried cheapest first with "
                   "the exact stage DP (default: as many as the devices allow; 1: one device per stage, "
                   "every allocation from one DP run)")
    v.add_argument("--granularity", choices=("layer", "op"), default=None,
                   help="the stage model's nodes: one per layer or per operator (default: layers where the "
                   "model's names give them, refined to operators within max(10 s, 3x the layer solve))")
    v.add_argument("--microbatches", type=int, default=None, metavar="N",
                   help="the stage model's micro-batches per batch (default: the smallest power of two "
                   ">= the available devices); d divides it")
    g = v.add_argument_group("LLM model configs (config.json): the cheapest instances per request-size "
                             "bucket (Mélange's provisioning), --target-throughput in requests/s; "
                             "past --time-limit the instance types scored so far are mixed, not proven "
                             "the cheapest")
    g.add_argument("--requests", default=None, metavar="MIX.json", help="the request mix (required for a "
                   "model config): buckets of input and output tokens with weights")
    g.add_argument("--ttft-slo", type=float, default=None, metavar="MS",
                   help="time-to-first-token target (required for a model config)")
    g.add_argument("--tpot-slo", type=float, default=None, metavar="MS",
                   help="time-per-output-token target (required for a model config)")
    v.add_argument("--out", "-o", default=None, metavar="RESULT.json", help="write the chosen plan (a "
                   "placement result with a 'provision' section; default: write nothing)")
    v.add_argument("--json", action="store_true", help="print the result JSON")
    _common(v, devices="not for provision: the devices to choose from are --available",
            auto="1, 2, 4, ... up to 1024 while the cheapest price falls")
    v.set_defaults(devices=None)


def _given_action():
    """An argparse action that stores the value and notes that the flag was given (``<dest>_given``):
    for an option with a default that applies only in some modes, refused by name in the others."""
    import argparse

    class Given(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, self.dest, values)
            setattr(namespace, f"{self.dest}_given", True)

    return Given


def _common(p, devices: str = "cluster, e.g. a100:2,t4:4,cpu:8 (default a100:4,cpu:1)",
            auto: str = "1, 2, 4, ... up to 1024 while the best throughput improves by more than 1%") -> None:
    p.add_argument("--devices", default=None, metavar="SPEC", help=devices)
    p.add_argument("--device-file", dest="device_files", action="append", default=None, metavar="FILE",
                   help="TOML/JSON file defining device kinds (repeatable)")
    p.add_argument("--costs", default="roofline", metavar="MODEL",
                   help="roofline (default), profile, or a JSON cost table")
    p.add_argument("--batch-size", type=batch_size_arg, default=None, metavar="auto|N|LIST",
                   help=f"batch sizes: one (default 1), a list 1,2,4, or auto ({auto.replace('%', '%%')})")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="S",
                   help=f"seconds for the whole command, the model's loading included (default "
                        f"{DEFAULT_TIME_LIMIT:g}; inf: none); what was found by then is the answer, "
                        f"labelled proven or not")
    p.add_argument("--gap", type=float, default=1e-4, help="relative MIP gap (default 1e-4)")
    p.add_argument("--threads", type=int, default=None, help="solver threads (default: the solvers' own)")


def _check_numbers(args) -> None:
    """The numeric flags, before any work: one error naming the flag."""
    from graphs.errors import InputError

    from ..inputs import checked_gap, time_limit_seconds

    time_limit_seconds(args.time_limit)
    checked_gap(args.gap)
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}")
    if getattr(args, "max_points", 1) < 1:
        raise InputError(f"--max-points must be at least 1, got {args.max_points}")
    if getattr(args, "max_solves", 1) < 1:
        raise InputError(f"--max-solves must be at least 1, got {args.max_solves}")
    if getattr(args, "target_throughput", None) is not None and not (
            args.target_throughput > 0 and math.isfinite(args.target_throughput)):
        raise InputError(f"--target-throughput must be a positive number of samples/s, got "
                         f"{args.target_throughput!r}")
    slo = getattr(args, "latency_slo", None)
    if slo is not None and not (slo > 0 and math.isfinite(slo)):
        raise InputError(_slo_error(slo))


class _Interrupts:
    """Ctrl-C during a ``frontier`` or ``provision`` run. The first one is recorded (``hit``) and passed
    on to the handler in place (the console's deferring one, :mod:`placement._interrupt`, or Python's),
    so that it ends whatever runs: a solver that catches it and returns its best (the DP, HiGHS, the
    local search) as much as Python code; the command asks ``hit`` between steps and stops. Later ones
    are ignored: the command is already stopping, and a second Ctrl-C must not tear a solver's thread
    away from its cleanup.

    On the console a solver may still be slow to let go (HiGHS sometimes needs seconds to honour a
    cancel, and a Ctrl-C inside numba's compiler waits for the compiler): :data:`GRACE_S` after the
    Ctrl-C, if the command has not begun writing its results, a watchdog thread writes what was found
    (``finish``), prints ``error: interrupted`` and ends the process with 130, without waiting for the
    solver. :meth:`begin_finish` decides, once, which of the two writes.

    A Ctrl-C that comes once the command is writing its results (:meth:`begin_finish`) is not passed on
    (the results are written whole) but noted (``late``): the command then ends with 130 as after any
    other, its results written (as ``place`` writes its result in a deferred block). It was dropped,
    and the command finished with 0 as if no Ctrl-C had come (the Ctrl-C benchmark's ``provision``)."""

    GRACE_S = 0.6  # before the console handler's own forced exit (placement._interrupt.GRACE_S)

    def __init__(self) -> None:
        self.hit = False
        self.late = False  # a Ctrl-C while the results were being written (see the class doc)
        self.delivered = False
        self.finish = None  # what the watchdog calls to write the results so far
        self._prev = None
        self._finishing = False
        self._owner: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        return self.hit

    def _handler(self, signum, frame) -> None:
        if self.delivered:
            self.late = True
            return
        if not self.hit:
            self.hit = True
            self._watch()
        try:
            self._prev(signum, frame)  # the deferring handler may hold it back until a safe point
        except KeyboardInterrupt:
            self.delivered = True
            raise

    def _watch(self) -> None:
        from .. import _interrupt

        if _interrupt.installed():  # the console only: tests calling main() keep their process
            threading.Thread(target=self._watchdog, name="placement-ctrl-c", daemon=True).start()

    def _watchdog(self) -> None:
        import sys
        import time

        time.sleep(self.GRACE_S)
        if not self.begin_finish():
            return  # the command is writing its results itself
        try:
            if self.finish is not None:
                self.finish()
        except Exception as e:  # the results could not be written: say so, still end
            print(f"error: writing the results after Ctrl-C failed: {e}", file=sys.stderr)
        from .. import _interrupt

        _interrupt.exit_interrupted()

    def begin_finish(self) -> bool:
        """Claim the writing of the results: true for the first thread to ask (again true for it),
        false for the other."""
        with self._lock:
            if self._finishing:
                return self._owner == threading.get_ident()
            self._finishing, self._owner = True, threading.get_ident()
            self.delivered = True  # from now on every Ctrl-C is ignored
            if self.hit:
                from .. import _interrupt

                # on the way out with 130: hold Ctrl-C from here on, so that the console handler's own
                # forced exit (a Ctrl-C it still holds back, placement._interrupt) cannot cut the writing
                _interrupt.quiet()
            return True

    def __enter__(self) -> _Interrupts:
        import signal

        prev = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is threading.main_thread() and callable(prev):
            self._prev = prev
            signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> bool:
        import signal

        if self._prev is not None and signal.getsignal(signal.SIGINT) == self._handler:
            signal.signal(signal.SIGINT, self._prev)
        return False


def _wait_for_watchdog() -> None:
    """The watchdog is writing the results and will end the process: wait for it."""
    import time

    while True:
        time.sleep(1.0)


def run(args) -> int:
    """Run ``frontier`` or ``provision``: outputs and values checked first, then one deadline
    (``--time-limit``, from the command's first line, ``args.started``; numba compiling the solvers'
    kernels on a first run not counted) for all the work; Ctrl-C stops it, the best so far is written
    and the exit code is 130."""
    import sys

    from ..clock import Clock
    from ..outputs import output_file, plot_file

    started = args.started  # --time-limit is the whole command's, from its first line
    if args.command == "provision" and args.example_prices:
        return _write_example_prices(args.example_prices)
    _check_numbers(args)
    if getattr(args, "out", None):
        output_file(args.out, "--out")  # before any work: a folder created, or one error line
    if getattr(args, "plot", None):
        plot_file(args.plot)
    clock = Clock(args.time_limit, started=started)
    _warnings_as_lines()
    with _Interrupts() as ctrl_c:
        try:
            if args.command == "provision":
                code = _run_provision(args, clock, ctrl_c)
            else:
                code = _run_frontier(args, clock, ctrl_c)
        except KeyboardInterrupt:
            code = 130
        if not ctrl_c.begin_finish():
            _wait_for_watchdog()
    if ctrl_c.hit or ctrl_c.late:  # read once the handler is back: a later Ctrl-C is a KeyboardInterrupt
        code = 130
    if code == 130:
        from .. import _interrupt

        _interrupt.quiet()  # a Ctrl-C while we exit changes nothing
        print("error: interrupted", file=sys.stderr)
    from .._interrupt import exit_past_abandoned_solver

    exit_past_abandoned_solver(code)
    return code


def _warnings_as_lines() -> None:
    """The library's warnings (loggers ``graphs``: the ONNX front end's; ``placement``: e.g. a result
    file read) as ``warning: ...`` lines on stderr, every command's, each distinct one once a command: the
    library logs a warning at each call that meets it (a custom operator name a model lacks, at each
    costing of a batch-size sweep) and keeps no record of it; the command line keeps what it printed.
    Called as a command starts (:func:`placement.cli.main`; ``run`` again before its work): the handler
    already installed in this process (an earlier command's) forgets what it printed."""
    import logging
    import sys

    class _Warnings(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.printed: set[str] = set()  # this command's lines

        def emit(self, record):
            line = f"warning: {record.getMessage()}"
            if line not in self.printed:
                self.printed.add(line)
                print(line, file=sys.stderr)

    for name in ("graphs", "placement"):
        log = logging.getLogger(name)
        mine = [h for h in log.handlers if type(h).__name__ == "_Warnings"]
        for h in mine:  # a new command
            h.printed = set()
        if not mine:
            log.addHandler(_Warnings())


def _frontier_dict(fr, out: str | None, model: str | None = None) -> dict:
    """The frontier file; ``model``: the ONNX model of a frontier with replicas (its stage plans' results
    name it, and every point says which model its plan is in and what is proven of it)."""
    import os

    beside = model is not None
    points = []
    stem = os.path.splitext(out)[0] if out else None
    for k, p in enumerate(fr.points):
        # the plan says what it is here: a frontier point and what is proven of it, not the words of the
        # search step that last touched it ("warm start from the given plan")
        plan = dict(p.result(model), message=f"frontier plan at batch {p.batch_size}: {p.proof(beside)}")
        points.append({"batch_size": p.batch_size, "samples_per_s": p.samples_per_s,
                       "latency_ms": p.latency_ms, "max_load_ms": p.max_load,
                       "proven": p.on_frontier(beside),
                       "plan_file": f"{stem}.{k}.json" if stem else None, "plan": plan})
        if beside:
            points[-1]["model"] = p.model
            points[-1]["proof"] = p.proof(True)
    return {"schema": "placement-frontier", "version": 1, "proven": fr.proven, "stopped": fr.stopped or None,
            "definition": "non-dominated (samples/s, one-batch latency) plans; samples/s = 1000 batch / "
                          "max-load (ms); latency_ms and max_load_ms are per batch",
            "batch_sizes": {str(b): len(v) for b, v in fr.per_batch.items()}, "points": points,
            # the batch sizes where no plan exists, proven, and why
            "no_plan": {str(b): why for b, why in sorted(fr.none.items())}}


def plot_frontier(fr, path: str) -> str:
    """Draw the frontier: samples/s against latency, proven points filled, others hollow."""
    from ..draw import _matplotlib_figure

    Figure = _matplotlib_figure()
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    xs = [p.latency_ms for p in fr.points]
    ys = [p.samples_per_s for p in fr.points]
    ax.step(xs, ys, where="post", color="0.6", linewidth=1)
    for proven, style in ((True, {"color": "C0", "label": "proven"}),
                          (False, {"facecolors": "none", "edgecolors": "C3", "label": "not proven"})):
        sel = [p for p in fr.points if p.proven == proven]
        if sel:
            ax.scatter([p.latency_ms for p in sel], [p.samples_per_s for p in sel], zorder=3, **style)
    for p in fr.points:
        ax.annotate(f"b{p.batch_size}", (p.latency_ms, p.samples_per_s), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    ax.set_xlabel("latency of one batch (ms)")
    ax.set_ylabel("samples / s")
    ax.set_title("throughput-latency frontier")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _point_line(p, stages: bool = False) -> str:
    """One point as it is found (stdout, flushed); ``stages``: beside the other model's points."""
    what = f"{'stage plan' if p.model == 'stages' else p.model}, " if stages else ""
    return (f"found: batch {p.batch_size}: {p.samples_per_s:.6g} samples/s, latency {p.latency_ms:.6g} ms "
            f"per batch, max-load {p.max_load:.6g} ms per batch, {what}{p.proof(stages)}")


def _frontier_table(fr, stages: bool = False) -> str:
    rows = [["#", "batch", "samples/s", "latency ms/batch", "max-load ms/batch", "MFU", "proven"]
            + (["plan"] if stages else [])]
    for k, p in enumerate(fr.points):
        m = p.utilisation()
        rows.append([str(k), str(p.batch_size), f"{p.samples_per_s:.6g}", f"{p.latency_ms:.6g}",
                     f"{p.max_load:.6g}", _pct(m.total) if m else "-",
                     p.proof(True) if stages else ("yes" if p.proven else "no")]
                    + ([p.plan_words()] if stages else []))
    return aligned(rows, lambda i: i < 6)


def _replicas_words(args) -> str:
    mr = args.max_replicas
    if mr is not None:
        return f"--max-replicas {mr}"
    return "replicas as the devices allow"


def _stage_frontier_points(args, sizes, deadline: float | None, ctrl_c, found, out: list,
                           reports: dict | None = None) -> tuple[bool, str]:
    """``frontier`` with replicas: the stage plans of each batch size (``None``: 1, 2, 4, ... while the
    stage optimum's samples/s improve by more than 1%), with the stage model's exact frontier where its
    integer program is small enough (:func:`placement.serving_stages.frontier_points`), reported as
    found and added to ``out`` as found (a Ctrl-C keeps them); ``reports`` receives, per batch size,
    whether the exact frontier is complete and a note. Returns whether a Ctrl-C that a solve took
    ended it (the points so far stand; nothing runs after it), and the words naming the batch sizes the
    time limit left untried ("" when none were)."""
    from .. import serving_stages
    from ..clock import Clock
    from ..serving import BatchLadder

    fe = {"devices": args.devices, "device_files": args.device_files, "costs": args.costs}
    paths: dict = {}
    # the first size is always tried (its solve gets at least 0.05 s): a point, where one is found
    ladder = BatchLadder(sizes, clock=Clock.until(deadline, lambda: ctrl_c.hit))
    for b in ladder:
        problem, graph_cls, settings, fine = serving_stages.stage_problem(
            args.model, fe, b, microbatches=args.microbatches, max_replicas=args.max_replicas,
            granularity=args.granularity, paths=paths)
        pts, interrupted = serving_stages.refined_frontier_points(
            problem, graph_cls, settings, fine, args, b, deadline=deadline, stopped=lambda: ctrl_c.hit,
            on_point=found, out=out, reports=reports)
        if interrupted:
            return True, ""
        ladder.scored(max((p.samples_per_s for p in pts), default=None))
    return False, ladder.stopped if ladder.halt else ""


def _loaded(args, clock) -> float | None:
    """The search's deadline (``time.perf_counter()``; ``None``: none), its input checked: the solvers'
    kernels loaded first, compiled (a first run) off the clock."""
    clock.load(None, "stages" if uses_stage_model(args) else "pipeline",
               threads=getattr(args, "threads", None))
    return clock.deadline()


def _run_frontier(args, clock, ctrl_c: _Interrupts) -> int:
    import sys

    from ..serving import FrontierSearch

    _need_onnx(args.model, "placement frontier")
    check_counts(args)
    stages = uses_stage_model(args)
    if not stages:
        refuse_schedule_options(args)
    sizes = _sizes(args.batch_size)  # default: batch 1; auto: doubling while throughput improves
    plot_note = ""
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            plot_note = ("note: drawing the frontier needs matplotlib, which is not installed (pip install "
                         "matplotlib); frontier not drawn")
            print(plot_note, file=sys.stderr)
    deadline = _loaded(args, clock)

    printed: dict = {}  # a point's figures -> the strength of the proof printed: the same plan found
    # again is news only when its proof is stronger (the stage optimum reappears under each replica cap)

    def found(p) -> None:
        key = (p.batch_size, p.model, f"{p.samples_per_s:.6g}", f"{p.latency_ms:.6g}")
        # proven; a frontier point among the layer-node plans; neither
        strength = 2 if p.proven else 1 if getattr(p, "how", "").startswith("frontier point") else 0
        if args.json or strength <= printed.get(key, -1):
            return
        printed[key] = strength
        print(_point_line(p, stages), flush=True)

    search = FrontierSearch(args.model, args.devices, sizes, costs=args.costs, options=_options(args),
                            device_files=args.device_files or (), max_points=args.max_points,
                            deadline=deadline, stop=ctrl_c, on_point=found)
    if not args.json:
        limit = f"{args.time_limit:g} s" if deadline is not None else "none"
        print(f"frontier of {args.model} on {args.devices or 'a100:4,cpu:1'}, batch sizes "
              f"{args.batch_size or 1} (time limit for the whole command: {limit}); points as found:",
              flush=True)
        if stages:
            print(f"with replicas ({_replicas_words(args)}): the stage plans first (the stage "
                  f"optimum is the throughput end), then the one-device-per-stage frontier", flush=True)
    extra: list = []
    reports: dict = {}
    ctrl_c.finish = lambda: _frontier_report(args, search, plot_note, interrupted=True, extra=extra,
                                             reports=reports)
    taken = False  # a Ctrl-C that a stage solve took (it returned what it had) ended the stage plans
    untried = ""  # the batch sizes the stage plans' search left untried
    try:
        if stages:
            taken, untried = _stage_frontier_points(args, sizes, deadline, ctrl_c, found, extra, reports)
        if not ctrl_c.hit and not taken:
            search.run()
    except KeyboardInterrupt:
        ctrl_c.hit = True
    if not ctrl_c.begin_finish():
        _wait_for_watchdog()
    from .. import _interrupt

    with _interrupt.deferred():  # the results are written whole
        return _frontier_report(args, search, plot_note, interrupted=ctrl_c.hit, extra=extra, reports=reports,
                                taken=taken, untried=untried)


def _frontier_report(args, search, plot_note: str, *, interrupted: bool, extra=(), reports=None,
                     taken: bool = False, untried: str = "") -> int:
    """Write and print what ``search`` found (all of it, or so far when ``interrupted``), with the stage
    plans ``extra`` (with replicas): then the frontier is the non-dominated points of both, with each
    point's proof (a stage plan: a proven point of the stage model's frontier, or its throughput, or
    nothing; a one-device-per-stage plan: proven in that model) and, per batch size, whether the stage
    model's exact frontier is complete (``reports``). ``taken``: a Ctrl-C that a stage solve took, the
    command's handler not having seen it, ended the search (so ``search`` never ran): the points so far
    are the answer, said interrupted (exit 0, or 130 without any). ``untried``: the batch sizes the stage
    plans' search left untried, named in ``stopped``."""
    import sys

    from ..export import emit, write_json
    from ..report import cli_message as cli_words
    from ..serving import Frontier, non_dominated

    fr = search.result()
    reports = reports or {}
    stages = uses_stage_model(args)
    if stages:
        extra = list(extra)
        # both models' points per batch size, at most --max-points of them (the highest throughput)
        per_batch = {b: non_dominated(list(fr.per_batch.get(b, [])) + [p for p in extra if p.batch_size == b])
                     [:args.max_points] for b in sorted(set(fr.per_batch) | {p.batch_size for p in extra})}
        merged = non_dominated([p for pts in per_batch.values() for p in pts])
        # no plan at a batch size is proven for the frontier with replicas when both models prove it
        none = {b: reports[b]["none"] for b in fr.none
                if reports.get(b, {}).get("none") and reports[b].get("complete")}
        stopped = "; ".join(filter(None, (fr.stopped and f"one device per stage: {fr.stopped}",
                                          untried and f"stage plans: {untried}")))
        fr = Frontier(tuple(merged), per_batch, False, stopped, none)
    by_ctrl_c = interrupted or taken
    if by_ctrl_c:
        fr = dataclasses.replace(fr, proven=False, stopped=INTERRUPTED)
    # every batch size tried has no plan, proven: the frontier is empty, and that is proven
    tried = set(fr.per_batch) | set(reports)
    proven_none = not fr.points and not by_ctrl_c and not fr.stopped and bool(tried) and tried <= set(fr.none)
    if proven_none:
        fr = dataclasses.replace(fr, proven=True)
    data = _frontier_dict(fr, args.out, args.model if stages else None)
    if stages:
        data["stage_frontier"] = {str(b): {"complete": bool(r.get("complete")), "note": r.get("note"),
                                           "layer_nodes_complete": r.get("layers_complete")}
                                  for b, r in sorted(reports.items())}

    def text() -> str:
        sized = ", ".join(str(b) for b in fr.per_batch) or "none"
        # fr.stopped: the first batch size whose search was cut short (the others still ran) and the
        # sizes the time limit left untried, or the interrupt that stopped everything
        cut = f" (stopped: {fr.stopped})" if fr.stopped else ""
        lines = ["", "frontier: nothing found before the interrupt (Ctrl-C)" if by_ctrl_c and not fr.points
                 else f"frontier: no plan exists at batch size{'s' if len(fr.none) > 1 else ''} {sized} "
                      f"(proven)" if proven_none
                 else f"frontier: {len(fr.points)} non-dominated plan(s) over batch sizes {sized}; "
                 + ("complete, all proven" if fr.proven else "NOT complete or not all proven") + cut]
        if stages and fr.points:
            lines.append("(with replicas: stage plans and one-device-per-stage plans together. A stage "
                         "plan's latency runs its stages one after another; a one-device-per-stage plan's "
                         "overlaps independent branches, so the merged frontier is not one model's, and "
                         "not proven)")
        for b, r in sorted(reports.items()) if stages else ():
            if r.get("none"):
                what = "no plan (proven)"
            elif r.get("complete"):
                what = "frontier complete, every point proven"
            elif r.get("layers_complete"):
                what = ("the layer-node plans' frontier complete, each point proven among them; at "
                        "operator nodes not proven beyond its throughput end")
            else:
                what = "frontier not complete"
            at = "layer nodes: " if r.get("layers_complete") and not r.get("complete") else ""
            lines.append(f"stage model, batch {b}: {what}"
                         + (f" ({at}{cli_words(r['note'])})" if r.get("note") else ""))
        if fr.points:
            lines.append("(latency and max-load are per batch; samples/s = 1000 x batch / max-load)")
            lines.append(_frontier_table(fr, stages))
        return "\n".join(lines)

    # the frontier's file (with no point too: what stopped the search), each point's plan file beside it
    if args.out:
        for pt in data["points"]:
            write_json(pt["plan_file"], pt["plan"])
    first = data["points"][0]["plan_file"] if data["points"] else None
    emit(args, data, text, written="frontier",
         beside=f"; one result file per plan ({first}, ...)" if first else "")
    if args.plot and fr.points and not plot_note:
        try:
            plot_frontier(fr, args.plot)
            if not args.json:
                print(f"plot written to {args.plot}")
        except ImportError:
            print("note: drawing the frontier needs matplotlib, which could not be imported; frontier "
                  "not drawn", file=sys.stderr)
    sys.stdout.flush()
    if interrupted or (taken and not fr.points):
        return 130
    if proven_none:
        print("error: infeasible: " + "; ".join(f"batch {b}: {cli_words(why)}"
                                                for b, why in sorted(fr.none.items())), file=sys.stderr)
        return 1
    if not fr.points:
        proven = "; ".join(f"batch {b}: no plan, proven: {cli_words(why)}"
                           for b, why in sorted(fr.none.items()))
        print(f"error: no plan found{': ' + fr.stopped if fr.stopped else ''}"
              + (f" ({proven})" if proven else "")
              + (f" (--time-limit {args.time_limit:g} s)" if "time limit" in fr.stopped else ""),
              file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- provision
def _write_example_prices(path: str) -> int:
    from graphs.errors import InputError

    from ..outputs import output_file
    from ..provision import EXAMPLE_PRICES

    output_file(path, "--example-prices")  # the folder created, as for every command's outputs
    text = EXAMPLE_PRICES
    if not path.lower().endswith(".toml"):  # --prices reads any other name as JSON: written so
        import json

        import tomllib

        text = json.dumps(tomllib.loads(EXAMPLE_PRICES), indent=2) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise InputError(f"--example-prices {path}: cannot write there ({e.strerror or e})") from None
    print(f"wrote {path}: example prices per device-hour (made-up figures; set your own)")
    return 0


def _run_provision(args, clock, ctrl_c: _Interrupts) -> int:
    import time

    from graphs.devices import parse_devices
    from graphs.errors import InputError

    from ..clock import Clock
    from ..provision import kind_prices, provision, read_prices
    from ..serving import BatchLadder, batch_workload

    if not args.model:
        raise InputError("placement provision: give the ONNX model (or --example-prices FILE)")
    _need_onnx(args.model, "placement provision")
    for dest, flag in (("requests", "--requests"), ("ttft_slo", "--ttft-slo"), ("tpot_slo", "--tpot-slo")):
        if getattr(args, dest, None) is not None:
            raise InputError(f"{flag} applies to an LLM model config (config.json), not to an ONNX model")
    if args.target_throughput is None or not args.available:
        raise InputError("placement provision needs --target-throughput X (samples/s) and --available SPEC "
                         "(e.g. a100:8,t4:16,cpu:64)")
    if args.devices:
        raise InputError("placement provision takes --available (the devices to choose from), not --devices")
    check_counts(args)  # the options before the files they describe are read
    stages = uses_stage_model(args)
    if not stages:
        refuse_schedule_options(args)
    ds = parse_devices(args.available, args.device_files or ())
    prices = kind_prices(ds.specs, read_prices(args.prices) if args.prices else None)
    if not stages and args.latency_slo is None and getattr(args, "max_solves_given", False):
        raise InputError("--max-solves: applies where allocations are solved one by one (the stage model, or "
                         "--latency-slo); with --max-replicas 1 and no --latency-slo every allocation's best "
                         "comes from one DP run")
    sizes = _sizes(args.batch_size) if args.batch_size is not None else [1]
    deadline = _loaded(args, clock)
    # auto: doubling batch sizes while the cheapest price keeps falling
    ladder = BatchLadder(sizes, clock=Clock.until(deadline, ctrl_c), improves=0.0)
    results = []
    models: dict = {}  # the file, read once for every batch size
    ctrl_c.finish = lambda: _provision_report(args, ds, prices, list(results), interrupted=True)
    try:
        for b in ladder:
            if stages:
                w, fine = _stage_problem_of(args, b, models)
            else:
                w = batch_workload(args.model, ds, b, costs=args.costs, device_files=args.device_files or (),
                                   models=models)
            share = ladder.share()
            until = None if share is None else time.perf_counter() + share
            if stages:
                from .. import serving_stages

                pv, _ = serving_stages.provision(w, prices, args.target_throughput, args,
                                                 latency_slo=args.latency_slo, batch_size=b, deadline=until,
                                                 stop=ctrl_c, max_solves=args.max_solves, fine=fine)
                results.append((b, w, pv))
                if _one_device_per_stage_provision_too(args, pv, ctrl_c, until):
                    w1 = batch_workload(args.model, ds, b, costs=args.costs,
                                        device_files=args.device_files or (), models=models)
                    pv1 = provision(w1.graph, w1.cluster, prices, args.target_throughput,
                                    latency_slo=args.latency_slo, options=_options(args),
                                    max_solves=args.max_solves, stop=ctrl_c, deadline=until)
                    if pv1.best is not None and (pv.best is None or (pv1.best.price, -pv1.best.samples_per_s)
                                                 < (pv.best.price, -pv.best.samples_per_s)):
                        # cheaper among one-device-per-stage plans: neither search proved it cheapest of all
                        why = "one device per stage (the stage model's answer was not proven)"
                        results[-1] = (b, w1, dataclasses.replace(pv1, proven=False,
                                                                  stopped=pv1.stopped or pv.stopped,
                                                                  how=why))
            else:
                results.append((b, w, provision(w.graph, w.cluster, prices, args.target_throughput,
                                                latency_slo=args.latency_slo, options=_options(args),
                                                max_solves=args.max_solves, stop=ctrl_c, deadline=until)))
            if results[-1][2].stopped == "interrupted":
                break
            # no cheaper at this batch size, or no answer after one; no answer before one ends it only
            # where no larger batch can have one (_provision_ends)
            pv_b = results[-1][2]
            ladder.scored(None if pv_b.best is None else -pv_b.best.price,
                          none_ends=ladder.best is not None or _provision_ends(pv_b))
    except KeyboardInterrupt:
        ctrl_c.hit = True
    if not ctrl_c.begin_finish():
        _wait_for_watchdog()
    from .. import _interrupt

    with _interrupt.deferred():  # the results are written whole
        code = _provision_report(args, ds, prices, results, interrupted=ctrl_c.hit,
                                 untried=ladder.stopped if ladder.halt else "")
    return 130 if ctrl_c.hit else code


def _provision_ends(pv) -> bool:
    """Whether no batch size larger than ``pv``'s (a provision without an answer there) can have one:
    the latency target is proven out of reach (a larger batch takes at least as long), or no allocation
    has any plan, proven (:attr:`~placement.provision.Provision.no_plan`: the model at this batch fits
    none of them; a larger batch needs more memory). Otherwise a larger batch, serving more samples/s,
    may reach the target: also where every allocation was ruled out by a bound on the throughput."""
    low = pv.lowest_latency
    if pv.latency_slo is not None and low is not None and low.bound is not None and \
            low.bound > pv.latency_slo * (1 + 1e-9):
        return True
    return pv.no_plan


def _one_device_per_stage_provision_too(args, pv, ctrl_c, until: float | None) -> bool:
    """``provision --latency-slo`` without ``--max-replicas``: when the stage model's answer ``pv`` is not
    proven (under a target its programs may stop at their limits, and a stage plan's latency runs its
    stages one after another, where a one-device-per-stage plan's lets branches overlap), the
    one-device-per-stage search also runs in the time left and the cheaper answer is kept, as ``place
    --latency-slo`` does."""
    import time

    if (args.latency_slo is None or args.max_replicas is not None or pv.proven or ctrl_c.hit
            or pv.stopped == "interrupted"):
        return False
    return until is None or until - time.perf_counter() > 0.5


def _stage_problem_of(args, b: int, cache: dict):
    """The stage problem of ``provision --max-replicas`` at batch ``b`` on the available devices (its
    operators' map and settings kept in ``cache`` for the result file)."""
    from types import SimpleNamespace

    from .. import serving_stages

    a = SimpleNamespace(microbatches=args.microbatches, schedule=None, max_replicas=args.max_replicas,
                        granularity=None)
    fe = {"devices": args.available, "device_files": args.device_files, "costs": args.costs}
    problem, graph_cls, settings, fine = serving_stages.stage_problem(
        args.model, fe, b, microbatches=a.microbatches, max_replicas=a.max_replicas,
        granularity=args.granularity, paths=cache.setdefault("paths", {}))
    if not hasattr(args, "_stage_graphs"):
        args._stage_graphs = {}
    args._stage_graphs[b] = (graph_cls, settings)
    return problem, fine


def _provision_report(args, ds, prices, results, *, interrupted: bool, untried: str = "") -> int:
    """Write and print the provision answer of the batch sizes tried (``results``); ``untried``: the
    words naming those the time limit left untried (then nothing is proven)."""
    import sys

    from ..export import emit
    from ..results import no_plan_result, result_dict

    slo = f" with latency <= {args.latency_slo:g} ms" if args.latency_slo is not None else ""
    if not results:  # a Ctrl-C before the first batch size (the first is always tried otherwise)
        return 130
    found = [r for r in results if r[2].best is not None]
    reached = [r for r in results if r[2].max_reachable is not None]
    if found:
        b, w, pv = min(found, key=lambda r: (r[2].best.price, -r[2].best.samples_per_s))
    else:  # the batch size of the most found (the curve printed is the one the error line names)
        b, w, pv = max(reached, key=lambda r: r[2].max_reachable.samples_per_s) if reached else results[0]
    names = pv.kinds
    # a Ctrl-C: the command's handler saw it, or a solve took it (the search says "interrupted")
    interrupted = interrupted or any(r[2].stopped == "interrupted" for r in results)
    stopped = INTERRUPTED if interrupted else "; ".join(
        filter(None, (next((r[2].stopped for r in results if r[2].stopped), ""), untried)))
    proven = pv.proven and not stopped
    failure = ""
    if not found:  # proven unreachable when every batch size's search proved it, or a latency bound does
        failure, proven = _provision_failure(args, ds, results, stopped,
                                             proven and all(r[2].proven for r in results))

    def alloc(counts) -> str:
        return ",".join(f"{k}:{c}" for k, c in zip(names, counts) if c) or "(none)"

    section = {
        "target_samples_per_s": args.target_throughput, "latency_slo_ms": args.latency_slo,
        "available": str(ds), "prices_per_hour": dict(zip(names, prices.tolist())), "batch_size": b,
        "proven": proven, "stopped": stopped or None, "how": pv.how or None,
        "allocation": alloc(pv.best.counts) if pv.best else None,
        "price_per_hour": pv.best.price if pv.best else None,
        "efficient": [{"allocation": alloc(a.counts), "price_per_hour": a.price,
                       "samples_per_s": a.samples_per_s, "max_load_ms_per_batch": a.max_load}
                      for a in pv.efficient],
        "per_batch_size": [{"batch_size": bb, "allocation": alloc(p.best.counts) if p.best else None,
                            "price_per_hour": p.best.price if p.best else None} for bb, _, p in results],
    }
    data = no_plan_result(pv.model, proven, _reason(failure))
    placement = None
    stage_pt = pv.solution if pv.model == "stages" else None
    if stage_pt is not None:
        if stage_pt.graph_cls is None:  # else a refined plan's, at operator granularity
            graph_cls, settings = (getattr(args, "_stage_graphs", None) or {}).get(b, (None, None))
            stage_pt = dataclasses.replace(stage_pt, graph_cls=graph_cls, settings=settings)
        data = stage_pt.result(args.model)
        if pv.best is not None and isinstance(data.get("problem"), dict):
            # the devices bought, not those available: what evaluate, show and run rebuild the plan on
            data["problem"]["devices"] = alloc(pv.best.counts)
        section["model"] = "stages"
        section["max_replicas"] = args.max_replicas
        section["solves"] = pv.solves
    elif pv.best is not None and pv.solution is not None and pv.solution.assignment is not None:
        from ..api import Placement

        ev = evaluate_plan(w.graph, pv.cluster, pv.solution)
        placement = Placement(w.graph, pv.cluster, pv.solution, ev)
        data = result_dict(placement)
        data.setdefault("frontend", {})["devices"] = alloc(pv.best.counts)
    data["provision"] = section

    def text() -> str:  # the curve, the answer and its plan, printed inside emit's deferral
        if pv.model == "stages":
            how = (f"stage model, {_replicas_words(args)}: allocations solved cheapest first, "
                   f"{pv.solves} solve(s)")
        else:
            how = "every allocation, exact" if args.latency_slo is None else "allocations solved"
        # only the exact curve covers every allocation; the others are efficient among those solved
        which = "efficient allocations" if how.endswith("exact") else \
            "the allocations solved, efficient among them"
        print(f"price-throughput curve of {which} (batch {b}{slo}; {how}):")
        rows = [["allocation", "$/hour", "samples/s", "$ per 1M samples"]]
        for a in pv.efficient:
            rows.append([alloc(a.counts), f"{a.price:.4g}", f"{a.samples_per_s:.6g}",
                         f"{a.price / (a.samples_per_s * 3600) * 1e6:.4g}"])
        if pv.efficient:
            print(textwrap.indent(aligned(rows, lambda i: i > 0), "  "))
        if not pv.efficient:
            print("  (none found)")
        if stopped:
            print(f"stopped: {stopped}")
        if pv.how:
            print(f"answer: {pv.how}")
        if pv.best is not None:
            print(f"cheapest for {args.target_throughput:g} samples/s{slo}: {alloc(pv.best.counts)} at "
                  f"{pv.best.price:.4g} per hour, {pv.best.samples_per_s:.6g} samples/s (batch {b}); "
                  + ("proven cheapest" if proven else "NOT proven cheapest ("
                     + (stopped or "an answer on the way, the kept one's or a cheaper allocation's, is "
                                   "not proven") + ")"))
            if placement is not None:
                sys.stdout.write(mfu_lines(placement))
            if stage_pt is not None:
                from ..stages import _mfu_line, format_plan

                print(f"its plan ({stage_pt.how}; latency {stage_pt.latency_ms:.6g} ms per batch):")
                print(format_plan(stage_pt.problem, stage_pt.evaluation, "ms")
                      + _mfu_line(stage_pt.problem, stage_pt.evaluation, stage_pt.utilisation()))
        return ""

    emit(args, data, text, written="plan" if placement is not None or stage_pt is not None else "result")
    if pv.best is not None:
        return 0
    if interrupted:  # no plan: the command was interrupted (run prints "error: interrupted")
        return 130
    print(failure, file=sys.stderr)
    return 1


def _provision_failure(args, ds, results, stopped: str, proven: bool) -> tuple[str, bool]:
    """The one error line when no allocation was found (the latency target, the throughput, or a limit)
    and whether it is proven that none exists: by the searches (``proven``), or by the lowest latency
    of the available devices above the target. It says ``infeasible`` only then, as the result file's
    status does."""
    from graphs.parallel import ParallelProblem

    # the stage model names the least latency only where some allocation had plans and none met the
    # target: otherwise the throughput is what cannot be met
    latency = args.latency_slo is not None and any(not isinstance(r[1], ParallelProblem)
                                                   or r[2].lowest_latency is not None for r in results)
    if any(r[2].efficient or r[2].best for r in results) or not latency:
        # the most found, as the devices its plan uses (as the curve lists it), and at which batch size
        top, top_b = max(((r[2].max_reachable, r[0]) for r in results if r[2].max_reachable is not None),
                         key=lambda x: x[0].samples_per_s, default=(None, None))
        if top is None and stopped:
            limit = f" (--time-limit {args.time_limit:g} s)" if "time limit" in stopped else ""
            return f"error: no answer: {stopped}{limit}", False
        names = results[0][2].kinds
        most = ""
        if top is not None:
            where = ",".join(f"{k}:{c}" for k, c in zip(names, top.counts) if c)
            if len(results) > 1:
                where += f", batch {top_b}"
            under = " under the latency target" if args.latency_slo is not None else ""
            x = f"{top.samples_per_s:.6g} samples/s ({where})"
            if proven and top.proven:  # every allocation solved or ruled out, every answer proven
                most = f"; the most any allocation serves{under} is {x}"
            elif stopped:  # the search ended before the pricier allocations: they were not tried
                most = (f"; the most found{under} is {x}, among the allocations solved before the search "
                        f"stopped (those after them, cheapest first, were not tried)")
            else:  # an answer on the way is not proven: its allocation may serve more
                most = f"; the most found{under} is {x}" + (" (not proven the most: an answer on the way is "
                                                            "not proven)" if proven else "")
        else:  # every allocation ruled out without a solve: the stage model's work bound says by how much
            from ..serving_stages import work_lower_bound

            works = [work_lower_bound(r[1]) for r in results if isinstance(r[1], ParallelProblem)]
            if works and min(works) > 0:
                most = (f"; the most any allocation serves is at most {1 / min(works):.6g} samples/s (every "
                        f"operator's least work over all the devices)")
        if not proven:  # what was searched is short of the target; the rest was not, or not exactly
            why = stopped or "some allocation's search ended without a proof"
            return (f"error: no allocation found serves {args.target_throughput:g} samples/s with {ds}{most} "
                    f"(not proven infeasible: {why})"), False
        # proven at the batch sizes tried only: a larger batch may serve more (unless no allocation has a
        # plan at all, where a larger one has none either)
        sizes = [r[0] for r in results]
        at = f" at batch {sizes[0]}" if len(sizes) == 1 else f" at batch sizes {', '.join(map(str, sizes))}"
        larger = "" if len(sizes) > 1 or all(r[2].no_plan for r in results) else \
            " (a larger --batch-size may serve more)"
        return (f"error: infeasible: {args.target_throughput:g} samples/s is unreachable with {ds}{at}{most}"
                f"{larger}"), True
    # no allocation has any plan under the latency target: that is what cannot be met
    b, _, pv = results[0]
    low = pv.lowest_latency
    what = f"no allocation of {ds} meets the latency target of {args.latency_slo:g} ms"
    if uses_stage_model(args) and not stopped and not all(r[2].proven for r in results):
        return (f"error: no plan found meets the latency target of {args.latency_slo:g} ms on any allocation "
                f"of {ds} (not proven infeasible: on some allocation the search under the target ended "
                f"without proving that no plan meets it; a larger --time-limit may)"), False
    if low is None or (low.assignment is None and low.plan is None):
        if low is not None and low.bound is not None and low.bound > args.latency_slo:
            return (f"error: infeasible: {what}; the lowest latency achievable is at least "
                    f"{low.bound:.6g} ms (batch {b})"), True
        if stopped or not proven:
            return (f"error: no plan found meets the latency target of {args.latency_slo:g} ms on any "
                    f"allocation of {ds} (not proven infeasible: "
                    f"{stopped or 'some search ended without a proof'})"), False
        return f"error: infeasible: {what}", True
    if low.status.value == "optimal":
        return (f"error: infeasible: {what}; the lowest latency achievable is {low.objective:.6g} ms "
                f"(batch {b})"), True
    bound = low.bound if low.bound is not None else 0.0
    if bound > args.latency_slo:
        return (f"error: infeasible: {what}; the lowest latency achievable is at least {bound:.6g} ms "
                f"(the best plan found takes {low.objective:.6g} ms, batch {b})"), True
    return (f"error: no plan found meets the latency target of {args.latency_slo:g} ms with {ds}; the lowest "
            f"latency found is {low.objective:.6g} ms (batch {b}; not proven lowest"
            + (f": {stopped}" if stopped else "") + ")"), False


def evaluate_plan(graph, cluster, solution):
    from graphs.evaluate import evaluate

    return evaluate(graph, cluster, solution.assignment)
