"""Human-readable tables of a placement (the command line prints these; the library never does)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from graphs.devices import human_bytes

from .api import Placement

__all__ = ["format_table", "format_summary", "human_bytes", "status_parts", "in_cli_units"]

_NUMBER = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"


def time_unit(p: Placement) -> str:
    """The unit of the workload's times: ``ms`` for ONNX models; a reference-format workload's own
    (unnamed) unit otherwise."""
    return p.graph.meta.get("unit") or ""


def _num(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "inf"


def _first_last(p: Placement, nodes) -> str:
    if len(nodes) == 0:
        return ""
    names = p.graph.names
    fwd = [u for u in nodes if not p.graph.backward[u]] or list(nodes)
    first, last = names[fwd[0]], names[fwd[-1]]
    return first if first == last else f"{first} .. {last}"


def format_table(p: Placement, *, show_ops: bool = True) -> str:
    """One row per device: stage, kind, #nodes, compute, comm in/out, load (in the workload's time unit:
    ms for ONNX models, ``t`` for a reference workload's own unit), memory and capacity (binary units),
    load / max-load."""
    ev = p.evaluation
    if ev is None:
        return ""
    stage = {d: i for i, d in enumerate(ev.stage_order or ())}
    order = sorted(ev.devices, key=lambda d: (stage.get(d.device, len(stage) + d.device)))
    u = time_unit(p) or "t"
    header = ["device", "stage", "kind", "#nodes", f"compute [{u}]", f"comm in [{u}]", f"comm out [{u}]",
              f"load [{u}]", "memory / capacity", "load/max"]
    if show_ops:
        header.append("operators (first .. last)")
    rows = []
    for d in order:
        util = d.load / p.max_load if p.max_load > 0 and math.isfinite(p.max_load) else 0.0
        mem = human_bytes(d.memory) + ("" if d.capacity is None else f" / {human_bytes(d.capacity)}")
        row = [d.name, str(stage.get(d.device, "-")) if len(d.nodes) else "-", d.kind, str(len(d.nodes)),
               _num(d.compute), _num(d.comm_in), _num(d.comm_out), _num(d.load), mem, f"{100 * util:.1f}%"]
        if show_ops:
            row.append(_first_last(p, d.nodes))
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    right = {3, 4, 5, 6, 7, 9}

    def fmt(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(header), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


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
    """A one-device-per-stage training placement with at least two stages (devices holding nodes)."""
    if p.problem is not None or not p.graph.is_training or p.evaluation is None:
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
        parts = [f"max-load {_num(p.max_load)}{u} per sample ({1e3 / p.max_load:,.6g} samples/s)"]
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
    lines = [", ".join(parts)]
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
