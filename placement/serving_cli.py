"""Serving on the command line: compute utilisation lines, batch-size sweeps and latency targets for
``place``, and the ``frontier`` and ``provision`` commands (:mod:`placement.serving` does the work)."""

from __future__ import annotations

import math

from graphs.mfu import PlanMFU, compute_utilisation

__all__ = ["format_mfu", "mfu_lines", "show_mfu_lines"]


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x >= 0.001 else f"{100 * x:.3g}%"


def format_mfu(mfu: PlanMFU | None) -> str:
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
    """:func:`format_mfu` for an assignment, one sample every ``period_ms`` (default: its max-load),
    and a newline; empty without FLOP counts."""
    text = format_mfu(compute_utilisation(graph, cluster, assignment, period_ms=period_ms))
    return text + "\n" if text else ""
