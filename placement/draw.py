"""Pictures of a placement: a Gantt chart of a simulated pipeline schedule (matplotlib, PNG or SVG) and
the operator graph coloured by device (Graphviz DOT, rendered when the ``dot`` program is installed).

matplotlib is an optional dependency (``pip install 'placement[plots]'``); without it
:func:`gantt_chart` raises :class:`PlotsUnavailable` saying so. DOT text needs nothing;
:func:`render_dot` returns ``False`` when ``dot`` is not installed. Nothing here prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import numpy as np

from graphs.errors import InputError
from graphs.model import Cluster, OpGraph

from .simulate import BACKWARD, COMPUTE, FORWARD, RECV, SEND, Simulation

__all__ = ["PlotsUnavailable", "gantt_chart", "stage_gantt_chart", "graph_dot", "stage_plan_dot",
           "write_text", "write_graph", "render_dot", "DEVICE_COLOURS", "MAX_TASKS_PER_ROW"]

#: one colour per device (cycled); colour-blind-safe first (Okabe-Ito), then Tableau
DEVICE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
                  "#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#76B7B2", "#EDC948", "#B07AA1", "#FF9DA7")
_PHASE_COLOUR = {FORWARD: "#4E79A7", BACKWARD: "#F28E2B"}
_COMM_COLOUR = {FORWARD: "#A0CBE8", BACKWARD: "#FFBE7D"}
#: the most tasks a row of a Gantt chart holds by default (a stage's forward or backward of one micro-batch,
#: its transfers included, or an all-reduce): past it only the run's beginning is drawn, and the title says
#: so (a run of thousands of micro-batches is bars under a pixel wide)
MAX_TASKS_PER_ROW = 200


class PlotsUnavailable(ImportError):
    """matplotlib is not installed."""


def _matplotlib_figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable("drawing the Gantt chart needs matplotlib, which is not installed: "
                               "pip install 'placement[plots]' (or pip install matplotlib)") from None
    return Figure


def gantt_chart(sim: Simulation, path: str | os.PathLike, *, title: str | None = None, unit: str = "",
                label_microbatches: bool = True, max_tasks_per_row: int | None = MAX_TASKS_PER_ROW) -> str:
    """Draw the simulated schedule ``sim`` into ``path`` (format from its suffix: .png, .svg, .pdf).

    One row per stage (stage 0 on top; with overlap, three rows per stage: receive, compute, send);
    forward work in blue, backward in orange, communication in the lighter shade, hatched; the
    micro-batch number on every bar wide enough to hold it. Where a row would hold more than
    ``max_tasks_per_row`` tasks (a forward or backward of one micro-batch: its receive, compute and
    send; ``None``: no limit), only the run's beginning is drawn, up to the start of the first task past
    it, and the title says which part and how many micro-batches it shows (the figures in the title are
    the whole run's). Returns the path written."""
    _check_limit(max_tasks_per_row)
    Figure = _matplotlib_figure()
    path = os.fspath(path)
    engines = ("recv", "compute", "send") if sim.overlap else ("main",)
    rows = [(r.stage, e) for r in sim.stages for e in engines]
    row_of = {k: i for i, k in enumerate(rows)}
    top = len(rows) - 1
    bars = [(top - row_of[(t.stage, t.engine)], t.start, t.duration, t, (t.phase, t.microbatch))
            for t in sim.tasks if t.duration > 0]
    cut = _window(bars, max_tasks_per_row)
    drawn = sim.tasks if cut is None else [b[3] for b in bars if b[1] < cut]
    height = max(2.0, 0.45 * len(rows) + 1.4)
    fig = Figure(figsize=(min(18.0, 6.0 + 0.08 * len(drawn) ** 0.5 * 10), height))
    ax = fig.add_subplot(1, 1, 1)
    span = (sim.makespan if cut is None else cut) or 1.0
    groups: dict[tuple[int, str, str | None], list[tuple[float, float]]] = {}
    for y, start, duration, t, _task in bars:
        if cut is not None and start >= cut:
            continue
        comm = t.part != COMPUTE
        colour = (_COMM_COLOUR if comm else _PHASE_COLOUR)[t.phase]
        groups.setdefault((y, colour, "///" if comm else None), []).append((start, duration))
        if label_microbatches and not comm and duration > 0.018 * span \
                and (cut is None or start + duration <= cut):
            ax.text(start + duration / 2, y, str(t.microbatch), ha="center", va="center", fontsize=7,
                    color="white")
    _draw_bars(ax, groups)
    names = {r.stage: r.name for r in sim.stages}
    labels = []
    for stage, e in rows:
        labels.append(f"{names[stage]}" if e in ("main", COMPUTE) else f"{names[stage]} {e}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1], fontsize=8)
    ax.set_xlim(0, span * 1.01 if cut is None else cut)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"time ({unit})" if unit else "time")
    what = {"stream": "streaming inference", "gpipe": "GPipe", "1f1b": "1F1B"}[sim.schedule]
    over = " (overlapped communication)" if sim.overlap else ""
    head = title or f"{what}, {sim.microbatches} micro-batches{over}"
    note = "" if cut is None else _window_note(cut, sim.makespan, unit, max_tasks_per_row,
                                               {t.microbatch for t in drawn if t.phase == FORWARD},
                                               sim.microbatches)
    ax.set_title(f"{head}\nmakespan {sim.makespan:.4g}, bubble {100 * sim.bubble_fraction:.1f}%, "
                 f"steady {sim.steady_time_per_sample:.4g}/sample (max-load {sim.max_load:.4g}){note}",
                 fontsize=9)
    from matplotlib.patches import Patch

    legend = [Patch(facecolor=_PHASE_COLOUR[FORWARD], label="forward")]
    if any(t.phase == BACKWARD for t in sim.tasks):
        legend.append(Patch(facecolor=_PHASE_COLOUR[BACKWARD], label="backward"))
    if any(t.part in (RECV, SEND) and t.duration > 0 for t in sim.tasks):
        legend.append(Patch(facecolor=_COMM_COLOUR[FORWARD], hatch="///", label="communication"))
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    return path


def stage_gantt_chart(sim, path: str | os.PathLike, *, devices: Sequence[Sequence[str]], scale: float = 1.0,
                      unit: str = "", title: str | None = None, label_microbatches: bool = True,
                      max_tasks_per_row: int | None = MAX_TASKS_PER_ROW) -> str:
    """Draw a stage plan's simulated schedule (:class:`placement.simulate.ReplicatedSimulation`)
    into ``path``: one row per replica (``devices[i][r]`` names replica ``r`` of stage ``i``; stage 0 on
    top), forwards in blue, backwards in orange, the stage's parameter all-reduce in grey, hatched; the
    micro-batch number on every bar wide enough to hold it. Times are multiplied by ``scale`` (seconds
    to ``unit``). Where a row would hold more than ``max_tasks_per_row`` tasks (bars; ``None``: no
    limit), only the run's beginning is drawn, up to the start of the first task past it, and the title
    says which part and how many micro-batches it shows (the figures in the title are the whole run's).
    Returns the path written."""
    _check_limit(max_tasks_per_row)
    Figure = _matplotlib_figure()
    path = os.fspath(path)
    rows = [(s.stage, r) for s in sim.stages for r in range(s.d)]
    row_of = {k: i for i, k in enumerate(rows)}
    top = len(rows) - 1
    bars = [(top - row_of[(t.stage, t.replica)], t.start * scale, t.duration * scale, t, (t.kind, t.index))
            for t in sim.tasks if t.duration > 0]
    cut = _window(bars, max_tasks_per_row)
    drawn = sim.tasks if cut is None else [b[3] for b in bars if b[1] < cut]
    width = min(18.0, 6.0 + 0.08 * len(drawn) ** 0.5 * 10)
    fig = Figure(figsize=(width, max(2.0, 0.45 * len(rows) + 1.4)))
    ax = fig.add_subplot(1, 1, 1)
    span = ((sim.makespan * scale) if cut is None else cut) or 1.0
    colour = {"F": _PHASE_COLOUR[FORWARD], "B": _PHASE_COLOUR[BACKWARD], "R": "#BAB0AC"}
    groups: dict[tuple[int, str, str | None], list[tuple[float, float]]] = {}
    for y, x, w, t, _task in bars:
        if cut is not None and x >= cut:
            continue
        groups.setdefault((y, colour[t.kind], "///" if t.kind == "R" else None), []).append((x, w))
        if label_microbatches and t.kind != "R" and w > 0.018 * span and (cut is None or x + w <= cut):
            ax.text(x + w / 2, y, str(t.index), ha="center", va="center", fontsize=7, color="white")
    _draw_bars(ax, groups)
    labels = [f"stage {i}: {devices[i][r]}" for i, r in rows]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1], fontsize=8)
    ax.set_xlim(0, span * 1.01 if cut is None else cut)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"time ({unit})" if unit else "time")
    head = title or f"{sim.schedule}, {sim.microbatches} micro-batches per batch, {sim.batches} batches"
    u = f" {unit}" if unit else ""
    note = "" if cut is None else _window_note(cut, sim.makespan * scale, unit, max_tasks_per_row,
                                               {t.index for t in drawn if t.kind == "F"},
                                               sim.batches * sim.microbatches)
    ax.set_title(f"{head}\nmakespan {sim.makespan * scale:.4g}{u}, bubble {100 * sim.bubble_fraction:.1f}%, "
                 f"period {sim.period_per_sample * scale:.4g}{u}/sample "
                 f"(model {sim.model_time_per_sample * scale:.4g}){note}", fontsize=9)
    from matplotlib.patches import Patch

    legend = [Patch(facecolor=colour["F"], label="forward")]
    if any(t.kind == "B" and t.duration > 0 for t in sim.tasks):
        legend.append(Patch(facecolor=colour["B"], label="backward"))
    if any(t.kind == "R" and t.duration > 0 for t in sim.tasks):
        legend.append(Patch(facecolor=colour["R"], hatch="///", label="all-reduce"))
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    return path


def _check_limit(max_tasks_per_row) -> None:
    if max_tasks_per_row is None:
        return
    if isinstance(max_tasks_per_row, bool) or not isinstance(max_tasks_per_row, (int, np.integer)) \
            or max_tasks_per_row < 1:
        raise InputError(f"max_tasks_per_row must be a positive integer or None, got {max_tasks_per_row!r}")


def _window(bars: Sequence[tuple], limit: int | None) -> float | None:
    """Where a Gantt chart of ``bars`` (``(row, start, width, task, key)``, widths positive; ``key`` names
    the bar's task on its row) stops: the start of the first task past the ``limit``-th on its row (a
    task starts with its first bar), the earliest over the rows; ``None`` where no row holds more than
    ``limit`` tasks (or ``limit`` is ``None``). A row's tasks are one lane's, one after another, so the
    window holds at most ``limit`` tasks a row, and it ends after the first task's start."""
    if limit is None:
        return None
    starts: dict[int, dict] = {}
    for row, start, _w, _t, key in bars:
        first = starts.setdefault(row, {})
        if key not in first or start < first[key]:
            first[key] = start
    cut = None
    for tasks in starts.values():
        if len(tasks) > limit:
            x = sorted(tasks.values())[limit]
            cut = x if cut is None else min(cut, x)
    return cut


def _window_note(cut: float, makespan: float, unit: str, limit: int, started: set, total: int) -> str:
    """The title's line saying that a Gantt chart shows the run's beginning only."""
    u = f" {unit}" if unit else ""
    return (f"\nshowing the first {cut:.4g}{u} of {makespan:.4g}{u} ({len(started)} of the {total} "
            f"micro-batches started): the whole run holds more than {limit} tasks a row; the figures above "
            f"are the whole run's")


def _draw_bars(ax, groups: dict[tuple[int, str, str | None], list[tuple[float, float]]]) -> None:
    """One collection per row and style (``(row, colour, hatch)`` -> ``(start, width)`` bars): an artist
    per bar made drawing quadratic in the bars (matplotlib rescales the axes over all its artists at
    each one added)."""
    for (y, colour, hatch), xranges in groups.items():
        ax.broken_barh(xranges, (y - 0.4, 0.8), facecolors=colour, edgecolors="white", linewidth=0.5,
                       hatch=hatch)


def _quote(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def graph_dot(graph: OpGraph, cluster: Cluster, assignment, *, stage_order: Sequence[int] | None = None,
              title: str | None = None, max_label: int = 32) -> str:
    """DOT text of ``graph`` with every node filled in its device's colour and grouped in a box per
    device (labelled with the device, its stage and its node count); edges between devices are drawn
    thick in the sender's colour. ``stage_order``: device numbers in pipeline order."""
    a = np.asarray(assignment, dtype=np.int64)
    stage = {d: i for i, d in enumerate(stage_order or ())}
    labels = {}
    for d in sorted(set(a.tolist()), key=lambda x: (stage.get(x, len(stage) + x))):
        st = f", stage {stage[d]}" if d in stage else ""
        labels[d] = f"{cluster.device_name(d)}{st} ({int(np.count_nonzero(a == d))} nodes)"
    op_type = graph.meta.get("op_type")
    return _grouped_dot(graph.names, graph.src, graph.dst, a, labels, title=title, max_label=max_label,
                        backward=graph.backward, op_type=op_type)


def stage_plan_dot(problem, plan, devices: Sequence[Sequence[str]] | None = None, *,
                   title: str | None = None, max_label: int = 32) -> str:
    """DOT text of a stage plan (:class:`graphs.parallel.ParallelProblem`, its plan's stages): every node
    filled in its stage's colour and grouped in a box per stage, labelled with the stage, its device
    kind, ``d`` and ``t``, the devices it uses (``devices[i]``) and its node count; edges between stages
    are drawn thick in the sender's colour."""
    g = problem.graph
    group = np.full(len(g.names), -1, dtype=np.int64)
    labels = {}
    for i, st in enumerate(plan):
        nodes = sorted(st.nodes)
        group[nodes] = i
        kind = problem.kinds[st.kind].name
        par = f" ×{st.d}" + (f", t={st.t}" if st.t > 1 else "")
        on = f" on {', '.join(devices[i])}" if devices is not None else ""
        labels[i] = f"stage {i}: {kind}{par}{on} ({len(nodes)} nodes)"
    return _grouped_dot(g.names, g.src, g.dst, group, labels, title=title, max_label=max_label)


def _grouped_dot(names: Sequence[str], src, dst, group: np.ndarray, labels: dict[int, str], *,
                 title: str | None, max_label: int, backward=None, op_type=None) -> str:
    """DOT text of a DAG whose node ``u`` is in box ``group[u]`` (labelled ``labels[group]``, in the dict's
    order), each box in its own colour; edges between boxes are thick in the sender's colour.
    ``backward[u]``: drawn as an ellipse; ``op_type[u]``: a forward node's second label line."""
    colour = {d: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, d in enumerate(labels)}
    lines = ["digraph placement {",
             "  graph [rankdir=TB, fontname=Helvetica, fontsize=10, newrank=true"
             + (f", label={_quote(title)}, labelloc=t" if title else "") + "];",
             "  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=9, fontcolor=white];",
             "  edge [color=\"#888888\", arrowsize=0.6];"]
    for d, text in labels.items():
        lines.append(f"  subgraph cluster_{d} {{")
        lines.append(f"    label={_quote(text)}; color={_quote(colour[d])}; penwidth=2; "
                     f"fontcolor={_quote(colour[d])};")
        for u in np.flatnonzero(group == d).tolist():
            name = str(names[u])
            label = name if len(name) <= max_label else name[: max_label - 1] + "…"
            back = backward is not None and bool(backward[u])
            if op_type is not None and u < len(op_type) and not back:
                label += "\n" + str(op_type[u])
            shape = ", shape=ellipse" if back else ""
            lines.append(f"    n{u} [label={_quote(label)}, "
                         f"fillcolor={_quote(colour[d])}, tooltip={_quote(name)}{shape}];")
        lines.append("  }")
    for s, t in zip(np.asarray(src).tolist(), np.asarray(dst).tolist()):
        if group[s] != group[t]:
            sender = colour.get(int(group[s]), "#888888")
            lines.append(f"  n{s} -> n{t} [color={_quote(sender)}, penwidth=2];")
        else:
            lines.append(f"  n{s} -> n{t};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_text(path: str | os.PathLike, text: str) -> str:
    """Write ``text`` to ``path`` (UTF-8) and return the path."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_graph(stem: str | os.PathLike, dot_text: str, fmt: str) -> tuple[list[str], str | None]:
    """Write ``dot_text`` to ``{stem}.graph.dot`` and render it to ``{stem}.graph.{fmt}`` where Graphviz
    is installed. Returns the paths written and a note for the user (why it was not rendered), or
    ``None``."""
    dot = write_text(f"{os.fspath(stem)}.graph.dot", dot_text)
    try:
        if render_dot(dot, f"{os.fspath(stem)}.graph.{fmt}"):
            return [dot, f"{os.fspath(stem)}.graph.{fmt}"], None
        return [dot], ("Graphviz `dot` is not installed; the graph is written as DOT only "
                       "(apt-get install graphviz, or paste it into any DOT viewer)")
    except RuntimeError as e:
        return [dot], str(e)


def render_dot(dot_path: str | os.PathLike, out_path: str | os.PathLike, *, timeout: float = 120.0) -> bool:
    """Render a DOT file with Graphviz ``dot`` into ``out_path`` (format from its suffix). Returns
    ``False`` when ``dot`` is not installed; raises ``RuntimeError`` with dot's message when it fails."""
    exe = shutil.which("dot")
    if exe is None:
        return False
    out_path = os.fspath(out_path)
    fmt = os.path.splitext(out_path)[1].lstrip(".").lower() or "svg"
    try:
        r = subprocess.run([exe, f"-T{fmt}", os.fspath(dot_path), "-o", out_path], capture_output=True,
                           text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"dot took longer than {timeout:.0f} s to lay out the graph; the DOT file is "
                           f"{os.fspath(dot_path)}") from None
    if r.returncode != 0:
        raise RuntimeError(f"dot failed: {r.stderr.strip()[:300]}")
    return True
