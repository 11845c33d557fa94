"""Human-readable tables of a placement (the command line prints these; the library never does)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphs.devices import human_bytes

from .api import Placement
from .outputs import aligned

__all__ = ["TableRow", "format_rows", "format_table", "devices_line", "devices_words", "format_summary",
           "human_bytes", "status_parts", "in_cli_units", "cli_message"]

_NUMBER = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"


def time_unit(p: Placement) -> str:
    """The unit of the workload's times: ``ms`` for ONNX models; a reference-format workload's own
    (unnamed) unit otherwise."""
    return p.graph.meta.get("unit") or ""


def _num(x: float) -> str:
    """A summary's figure: nine significant digits, as a stage plan's summary gives them."""
    return f"{x:.9g}" if math.isfinite(x) else "inf"


def _first_last(p: Placement, nodes) -> str:
    if len(nodes) == 0:
        return ""
    names = p.graph.names
    fwd = [u for u in nodes if not p.graph.backward[u]] or list(nodes)
    first, last = names[fwd[0]], names[fwd[-1]]
    return first if first == last else f"{first} .. {last}"


@dataclass(frozen=True)
class TableRow:
    """One row of a plan's table: a stage, whose ``devices`` are ``t * d`` of one kind (one device, with
    ``d = t = 1``, in a one-device-per-stage placement). Times are in the table's unit, per sample (per
    batch where the workload's figures are), divided by ``d`` as the evaluator gives them."""

    stage: int | None  # a stage plan's index, a device's place in the pipeline; None: no pipeline
    devices: str
    d: int
    t: int
    nodes: int
    compute: float
    comm_in: float
    comm_out: float
    resync: float
    load: float
    memory: float  # peak bytes per device
    capacity: float | None
    first_last: str  # its first and last node, by name
    variants: str = ""  # the variants it uses, with counts ("" where the model has one per node)
    in_flight: int | None = None  # micro-batches a replica holds (None where memory is not by schedule)


def _figure(x: float) -> str:
    return f"{x:.6g}" if math.isfinite(x) else "inf"


def format_rows(rows: Sequence[TableRow], unit: str, *, show_ops: bool = True) -> str:
    """The one table of a plan, whichever model placed it: one row per stage with its devices, degrees
    ``d`` and ``t``, node count, compute, communication in and out, replica resync and load (in ``unit``),
    peak memory per device against the device's, load / max-load, and the variants used and micro-batches
    in flight ``y`` where the model has them; figures right-aligned, names left."""
    top = max((r.load for r in rows), default=0.0)
    variants = any(r.variants for r in rows)
    flight = any(r.in_flight is not None for r in rows)
    head = ["stage", "devices", "d", "t", "#nodes"] + (["variants"] if variants else []) + [
        f"compute ({unit})", f"comm in ({unit})", f"comm out ({unit})", f"resync ({unit})", f"load ({unit})",
        "memory / device", "load/max"] + (["y"] if flight else []) + (["nodes (first .. last)"] if show_ops
                                                                      else [])
    right = {"d", "t", "#nodes", "load/max", "y"} | {h for h in head if h.endswith(f"({unit})")}
    table = []
    for r in rows:
        share = r.load / top if top > 0 and math.isfinite(top) else 0.0
        mem = human_bytes(r.memory) + ("" if r.capacity is None or not math.isfinite(r.capacity)
                                       else f" / {human_bytes(r.capacity)}")
        cells = ["-" if r.stage is None else str(r.stage), r.devices, str(r.d), str(r.t), str(r.nodes)]
        cells += [r.variants] if variants else []
        cells += [_figure(x) for x in (r.compute, r.comm_in, r.comm_out, r.resync, r.load)]
        cells += [mem, f"{100 * share:.1f}%"] + ([str(r.in_flight or "")] if flight else [])
        table.append(cells + ([r.first_last] if show_ops else []))
    return aligned([head] + table, lambda i: head[i] in right)


def format_table(p: Placement, *, show_ops: bool = True) -> str:
    """The table of a one-device-per-stage placement (:func:`format_rows`): one row per device holding
    nodes, in pipeline order, in the workload's time unit (ms for ONNX models, ``t`` for a reference
    workload's own unit), per sample, or per run of the model's batch (``ms/batch``) at a batch size
    above 1."""
    ev = p.evaluation
    if ev is None:
        return ""
    stage = {d: i for i, d in enumerate(ev.stage_order or ())}
    used = sorted((d for d in ev.devices if len(d.nodes)),
                  key=lambda d: stage.get(d.device, len(stage) + d.device))
    rows = [TableRow(stage.get(d.device), d.name, 1, 1, len(d.nodes), d.compute, d.comm_in, d.comm_out, 0.0,
                     d.load, d.memory, d.capacity, _first_last(p, d.nodes)) for d in used]
    # an ONNX model's figures at a batch size above 1 are per run of the batch, and the heads say so
    per = "/batch" if p.graph.batch_size > 1 else "/sample"
    return format_rows(rows, (time_unit(p) or "t") + per, show_ops=show_ops)


def devices_words(stages: int | None, used: int, total: int, idle: Sequence[str]) -> str:
    """``4 stage(s) on 4 of 5 devices (idle: cpu:0)``, as every plan's summary counts its devices
    (``stages`` ``None``: the placement is not a pipeline)."""
    shown = ", ".join(idle[:8]) + (f", ... ({len(idle)} in all)" if len(idle) > 8 else "")
    idle_words = f" (idle: {shown})" if idle else ""
    if stages is None:
        return f"{used} of {total} devices hold nodes{idle_words}; not a pipeline (no order of them is one)"
    return f"{stages} stage(s) on {used} of {total} devices{idle_words}"


def devices_line(p: Placement) -> str:
    """:func:`devices_words` of a one-device-per-stage placement: a stage per device holding nodes."""
    ev = p.evaluation
    used = sum(1 for d in ev.devices if len(d.nodes))
    return devices_words(used if ev.stage_order is not None else None, used, len(ev.devices),
                         [d.name for d in ev.devices if not len(d.nodes)])


def status_parts(s, bound=None) -> list[str]:
    """``status ..., solver ..., bound ..., gap ..., time ...`` of a solution, as every summary words
    them; ``bound`` formats the bound (default: four decimals). The status says when a Ctrl-C or the
    time limit ended the search."""
    status = s.status.value
    if status in ("feasible", "stopped") and "interrupted" in s.message:
        status += " (interrupted)"
    elif status in ("feasible", "stopped") and (s.stats or {}).get("stopped_by"):
        status += f" ({s.stats['stopped_by']} reached)"  # a budget of its own, not the user's limit
    elif status in ("feasible", "stopped") and (s.stats.get("mip_status") == "time limit"
                                                or "time limit" in s.message):
        status += " (time limit reached)"
    parts = [f"status {status}", f"solver {s.solver}"]
    if s.bound is not None and math.isfinite(s.bound):
        parts.append(f"bound {(bound or _num)(s.bound)}")
    if s.gap is not None:
        parts.append(f"gap {100 * s.gap:.4g}%")
    compiled = (s.stats or {}).get("compile_s") or 0.0
    parts.append(f"time {s.time:.2f} s" + (f" (and {compiled:.0f} s compiling the kernels, a first run)"
                                           if compiled >= 0.5 else ""))
    return parts


def cli_message(message: str) -> str:
    """A library message in the command line's words: the arguments and options it names become flags
    (:func:`placement._flags.cli_words`), and its byte counts read in the tables' units
    (:func:`in_cli_units`)."""
    from ._flags import cli_words

    return in_cli_units(cli_words(message))


def in_cli_units(message: str, per_sample: Callable[[float], str] | None = None) -> str:
    """A solver's message in the command line's units: a raw byte count in the tables' binary units
    (``6.25091e+07 bytes`` -> ``59.61 MiB``, and the capacity beside one, ``holds 1.7e+10`` ->
    ``holds 15.83 GiB``) and, given ``per_sample`` (seconds -> the table's time with its unit), a time
    per sample in the stage solvers' seconds (``6.7e-04 s per sample``) in the table's unit, so that one
    summary names one unit."""
    message = re.sub(rf"(?<![\w.]){_NUMBER} bytes\b", lambda m: human_bytes(float(m.group(1))), message)
    # the capacity beside a byte count ("needs 59.61 MiB but a t4 holds 1.7e+10"), unless it has its unit
    message = re.sub(rf"\b(holds|capacity is) {_NUMBER}(?![\w.])(?! (?:[KMGTPE]i)?B\b)",
                     lambda m: f"{m.group(1)} {human_bytes(float(m.group(2)))}", message)
    if per_sample is None:
        return message
    return re.sub(rf"(?<![\w.]){_NUMBER} s per sample\b",
                  lambda m: f"{per_sample(float(m.group(1)))} per sample", message)


def _pipelined_training(p: Placement) -> bool:
    """A one-device-per-stage training placement with at least two stages (devices holding nodes) that
    form a pipeline (``show`` simulates no other)."""
    if p.problem is not None or not p.graph.is_training or p.evaluation is None:
        return False
    if p.evaluation.stage_order is None:
        return False
    return sum(1 for d in p.evaluation.devices if len(d.nodes)) >= 2


def format_summary(p: Placement, *, message: bool = True) -> str:
    """Objective, status, bound, gap and time in one or two lines, and the solver's message in the command
    line's words and units (``message=False``: without it, for a command that prints it as its error)."""
    s = p.solution
    u = f" {time_unit(p)}" if time_unit(p) else ""
    batch = p.graph.batch_size  # an ONNX model's figures are per run of a batch
    parts = [f"max-load {_num(p.max_load)}{u}"]
    if batch == 1 and time_unit(p) == "ms" and math.isfinite(p.max_load) and p.max_load > 0:
        # a fixed input shape at batch size 1 or leading with no batch: one run is the sample it counts
        one_run = ("; fixed input shape: a sample is one run of the model" if p.graph.meta.get("per_run")
                   else "")
        parts = [f"max-load {_num(p.max_load)}{u} per sample ({1e3 / p.max_load:,.6g} samples/s{one_run})"]
    if batch > 1 and u and math.isfinite(p.max_load) and p.max_load > 0:
        # per batch, as every figure of this plan; the per-sample rate a stage plan prints beside it
        rate = f", {1e3 * batch / p.max_load:.6g} samples/s" if time_unit(p) == "ms" else ""
        parts = [f"max-load {_num(p.max_load)}{u} per batch of {batch} "
                 f"({_num(p.max_load / batch)}{u} per sample{rate})"]
    if p.objective != "max-load":
        parts = [f"{p.objective} {_num(s.objective)}{u}", f"max-load {_num(p.max_load)}{u}"]
    elif p.latency is not None:
        what = "one sample" if batch == 1 else f"one batch of {batch} samples"
        parts.append(f"latency {_num(p.latency.total)}{u} ({what}, latency model)")
    parts += status_parts(s)
    lines = [", ".join(parts)] + ([devices_line(p)] if p.evaluation is not None else [])
    lat = p.latency.total if p.latency is not None else None
    if lat is not None and math.isfinite(lat) and lat < p.max_load * (1 - 1e-9):
        # a newcomer reads a latency below the busiest device's load as a bug: the two models differ here
        lines.append("latency below the max-load: the latency model runs a host CPU's independent operators "
                     "side by side, each on its own core, where the max-load adds up the host's work")
    if _pipelined_training(p):
        # as a stage plan's summary says it: the samples/s is not what a run with flushes sustains
        lines.append("the max-load is the pipeline's steady state: a training run under a flushing schedule "
                     "(1f1b, gpipe) also fills and drains it every batch (placement show simulates that)")
    if not u:
        lines.append("times in the workload's own unit (t)")
    if p.evaluation is not None:
        ev = p.evaluation
        lines.append(f"valid: {'yes' if ev.valid else 'NO'}; contiguous: {'yes' if ev.contiguous else 'no'}")
        lines += [f"  problem: {x}" for x in ev.problems]
    if s.message and message:
        from ._flags import cli_words

        # the library's names for options as the command line's flags, its bytes as the table's units
        lines.append(in_cli_units(cli_words(s.message)))
    return "\n".join(lines)
