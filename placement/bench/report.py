"""Tables and plots from the suite's result records (see :mod:`placement.bench.suite`).

Per objective (throughput = max-load, latency) a Markdown table and a CSV file: every run's objective
(the evaluator's value of its placement), its ratio to the best known value for that workload
(:func:`best_known`: the lowest of the values the reference published for it, its exact DP optimum
first, and of every valid run of it in the records given, whichever solver or seed made it; the tables
say which one it is), the solver's proven gap, solve time and peak memory, in each workload's time unit
(``ms`` for an ONNX model, ``t`` for a reference-format workload's own, unnamed unit). The *headline*
table compares, on every reference workload, the optimum (DP, or IP when it proved one) with each
baseline: the speed-up of the optimum over a baseline is the baseline's max-load divided by the optimum's.

The tables and the report are derived files: :func:`tables_not_in` and :func:`report_conflict` say what
rewriting them would lose (the suite refuses that without ``--replace``).

Runs are kept per seed (``--seed``: each seed's is its own run). Where a solver ran on a workload with
several seeds, the detail table has a seed column and the summary, the headline and the plots take the
solver's best valid run over its seeds (:func:`_pick`): one seed's failure never hides another's placement.
"""

from __future__ import annotations

import csv
import math
import os
import re
import time
from collections import defaultdict

from solvers.registry import SOLVERS, bench_solvers

__all__ = ["best_known", "best_known_sources", "result_slot", "write_tables", "tables_not_in",
           "report_conflict", "headline_rows", "headline_markdown", "write_plots", "write_report",
           "markdown_tables"]

OBJECTIVES = (("max-load", "throughput"), ("latency", "latency"))
#: the max-load table's solvers whose OPTIMAL is the (contiguous) optimum, and its baselines (the registry's)
EXACT = tuple(n for n in bench_solvers("max-load") if SOLVERS[n].exact and SOLVERS[n].contiguous)
HEADLINE = tuple(n for n in bench_solvers("max-load") if not SOLVERS[n].exact)
CSV_FIELDS = ("workload", "objective", "solver", "status", "value", "ratio_to_best", "best_known",
              "best_known_source", "time_unit", "gap", "solve_time_s", "peak_rss_mb", "nodes", "edges",
              "devices", "valid", "contiguous", "time_limit", "seed", "message")


def _natural(name: str) -> list:
    """Sort key that puts ``bert-L2`` before ``bert-L12``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _ok(r: dict) -> bool:
    return r.get("value") is not None and r.get("valid", False)


#: the published values other than the DP's optimum are printed to 6 significant digits: one counts as
#: the best known only where it is lower than every exact value by more than that rounding
_ROUNDING = 1e-5
#: the published value that is the exact optimum (``reference_results.json``'s ``dp_max_load``)
_OPTIMUM = "dp"


def best_known_sources(records: list[dict]) -> dict[tuple[str, str], tuple[float, str]]:
    """``(objective, workload) -> (value, where it comes from)``: the lowest of the reference's published
    values (``known``: ``"reference optimum"`` for its exact DP, ``"reference NAME"`` for the others) and
    of the valid runs' values (the solver's name, ``", optimal"`` where it proved it). The published
    values other than the optimum are rounded to 6 digits: one is the best known only where it is
    lower than every exact value beyond that rounding. On a tie the reference optimum comes first, then a
    proven optimum."""
    exact: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    rounded: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for r in records:
        key = (r["objective"], r["workload"])
        if _ok(r):
            optimal = r.get("status") == "optimal"
            exact[key].append((r["value"], 2 - optimal, r["solver"] + (", optimal" if optimal else "")))
        for name, v in (r.get("known") or {}).items():
            if v is not None:
                (exact if name == _OPTIMUM else rounded)[key].append(
                    (float(v), 0, "reference optimum" if name == _OPTIMUM else f"reference {name}"))
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for key in exact.keys() | rounded.keys():
        v, _, src = min(exact[key]) if exact[key] else (math.inf, 0, "")
        if rounded[key]:
            rv, _, rsrc = min(rounded[key])
            if rv < v * (1 - _ROUNDING):
                v, src = rv, rsrc
        best[key] = (v, src)
    return best


def best_known(records: list[dict]) -> dict[tuple[str, str], float]:
    """``(objective, workload) -> the best known value`` (:func:`best_known_sources` without the source)."""
    return {k: v for k, (v, _) in best_known_sources(records).items()}


def result_slot(r: dict) -> tuple[str, str, str, int]:
    """What a record (or a row of the CSV tables) stands for in the tables: (objective, workload, solver,
    seed); a record without a seed ran with the default, 0 (as Job.from_json reads it)."""
    return str(r.get("objective")), str(r.get("workload")), str(r.get("solver")), int(r.get("seed") or 0)


def _latest(records: list[dict]) -> list[dict]:
    """One record per :func:`result_slot`: the last one written (a rerun, or a run with another time
    limit, replaces an earlier result)."""
    return list({result_slot(r): r for r in records}.values())


def _rows(records: list[dict], objective: str) -> list[dict]:
    records = _latest(records)
    best = best_known_sources(records)
    rows = []
    for r in records:
        if r.get("objective") != objective:
            continue
        b, source = best.get((objective, r["workload"]), (None, None))
        v = r.get("value") if _ok(r) else None
        rows.append({
            "workload": r["workload"], "objective": objective, "solver": r["solver"],
            "status": r.get("status") if (v is not None or r.get("status") not in ("feasible", "stopped"))
            else "no placement",
            "value": v, "ratio_to_best": (v / b if v is not None and b else None), "best_known": b,
            "best_known_source": source,
            "time_unit": r.get("time_unit"),  # None: a record written before the suite kept it
            "gap": r.get("gap"), "solve_time_s": r.get("wall_s"), "peak_rss_mb": r.get("peak_rss_mb"),
            "nodes": r.get("nodes"), "edges": r.get("edges"), "devices": r.get("devices"),
            "valid": r.get("valid"), "contiguous": r.get("contiguous"), "time_limit": r.get("time_limit"),
            "seed": r.get("seed", 0), "message": (r.get("message") or "")[:200]})
    rows.sort(key=lambda x: (_natural(x["workload"]), x["solver"], x["seed"]))
    return rows


def _by_solver(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """``(workload, solver) -> rows``: the runs of one solver on one workload, one per seed, in seed order."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["workload"], r["solver"])].append(r)
    return out


def _pick(runs: list[dict]) -> dict:
    """The run that stands for a solver on a workload over its seeds: the best valid value (a proven
    optimum first on a tie, then the lowest seed); when no seed gave a placement, the lowest seed's."""
    valid = [r for r in runs if r["value"] is not None]
    if not valid:
        return runs[0]
    return min(valid, key=lambda r: (r["value"], r["status"] != "optimal", r["seed"]))


def _summary_cell(runs: list[dict]) -> str:
    """A summary cell: the picked run's value and ratio to the best known, or why there is none; with
    several seeds, of how many."""
    r = _pick(runs)
    seeds = f"{len(runs)} seeds" if len(runs) > 1 else ""
    if r["value"] is None:
        statuses = "/".join(dict.fromkeys(str(x["status"]) for x in runs))
        return f"— ({statuses}{'; ' + seeds if seeds else ''})"
    return f"{_fmt(r['value'])} ({_ratio(r['ratio_to_best'])}{'; best of ' + seeds if seeds else ''})"


def _fmt(x, digits: int = 6) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "—"
        return f"{x:.{digits}g}"
    return str(x)


def _ratio(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def _solvers_in(rows: list[dict], order) -> list[str]:
    present = {r["solver"] for r in rows}
    out = [s for s in order if s in present]
    return out + sorted(present - set(out))


def markdown_tables(records: list[dict], objective: str) -> str:
    """The summary (workload x solver: value and ratio to the best known) and the per-run details."""
    from solvers.registry import bench_solvers

    rows = _rows(records, objective)
    if not rows:
        return "_no runs_\n"
    order = bench_solvers("max-load" if objective == "max-load" else "latency")
    solvers = _solvers_in(rows, order)
    cell = _by_solver(rows)
    workloads = sorted({r["workload"] for r in rows}, key=_natural)
    nodes = {r["workload"]: r["nodes"] for r in rows if r.get("nodes")}
    units = {r["workload"]: r["time_unit"] for r in rows if r.get("time_unit")}
    best = {r["workload"]: (r["best_known"], r["best_known_source"]) for r in rows}
    several = len({r["seed"] for r in rows}) > 1
    what = "max-load" if objective == "max-load" else "latency"
    out = [f"Each cell: {what} of the solver's placement (evaluator) and, in brackets, its ratio to the best "
           "known value (1.000 = best known; — = no placement: see the details). Best known: the lowest of "
           "the values the reference published for the workload (\"reference optimum\": its exact DP's, "
           "over contiguous placements) and of the valid runs of it in the results file, this sweep's and "
           "the earlier ones there (every solver and seed: the details below); in brackets, which one "
           "it is. Values are in the workload's time unit (unit: ms for an ONNX model, t for a "
           "reference-format workload's own, unnamed unit; — = not recorded)."
           + (" With several seeds, a cell is the solver's best valid run over them, and says of how many "
              "(every run: the details)." if several else ""), "",
           "| workload | nodes | unit | best known (from) | " + " | ".join(solvers) + " |",
           "|---|---:|---|---:|" + "---:|" * len(solvers)]
    for w in workloads:
        cells = [_summary_cell(cell[(w, s)]) if (w, s) in cell else "" for s in solvers]
        value, source = best.get(w, (None, None))
        known = _fmt(value) + (f" ({source})" if value is not None else "")
        out.append(f"| {w} | {_fmt(nodes.get(w))} | {_fmt(units.get(w))} | {known} | "
                   + " | ".join(cells) + " |")
    seed_head, seed_rule = ("seed | ", "---:|") if several else ("", "")
    out += ["", f"| workload | solver | {seed_head}status | objective | unit | ratio to best | proven gap | "
            "solve time s | peak memory MiB |", f"|---|---|{seed_rule}---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        gap = "—" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
        seed = f"{r['seed']} | " if several else ""
        out.append(f"| {r['workload']} | {r['solver']} | {seed}{r['status']} | {_fmt(r['value'])} | "
                   f"{_fmt(r['time_unit'])} | {_ratio(r['ratio_to_best'])} | {gap} | "
                   f"{_fmt(r['solve_time_s'], 3)} | {_fmt(r['peak_rss_mb'], 4)} |")
    return "\n".join(out) + "\n"


def write_tables(records: list[dict], out_dir: str) -> list[str]:
    """``throughput.md``/``.csv`` and ``latency.md``/``.csv`` in ``out_dir``, each pair only where
    ``records`` hold runs of that objective; returns the paths written. A pair of an objective without
    runs is not written ("_no runs_" files read as a sweep that ran and found nothing), and one left
    there is removed: the tables are ``records``' (a row that only such a pair held was refused before
    any run unless ``--replace`` asked to drop it, :func:`tables_not_in`)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for objective, label in OBJECTIVES:
        rows = _rows(records, objective)
        p_csv = os.path.join(out_dir, f"{label}.csv")
        if not rows:
            for stale in (p_csv, os.path.join(out_dir, f"{label}.md")):
                if os.path.exists(stale):
                    os.remove(stale)
            continue
        _atomic_csv(p_csv, rows)
        p_md = os.path.join(out_dir, f"{label}.md")
        _atomic_text(p_md, f"# {label.capitalize()}\n\n" + markdown_tables(records, objective))
        paths += [p_md, p_csv]
    return paths


def tables_not_in(out_dir: str, records: list[dict]) -> list[tuple[str, str, str, int]]:
    """The rows of the tables already in ``out_dir`` (its CSV files) that none of ``records`` stands
    for: what :func:`write_tables` from ``records`` would drop, as (objective, workload, solver, seed)."""
    have = {result_slot(r) for r in records}
    lost = []
    for _, label in OBJECTIVES:
        path = os.path.join(out_dir, f"{label}.csv")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                try:
                    key = result_slot(row)
                except ValueError:  # not a seed: not a row of ours, nothing of a run to lose
                    continue
                if key not in have and key not in lost:
                    lost.append(key)
    return lost


def _atomic_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _atomic_csv(path: str, rows: list[dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    os.replace(tmp, path)


# --------------------------------------------------------------------------- headline
def _optimum(rows: dict[str, dict]) -> tuple[float | None, str]:
    """The proven optimum among the exact solvers' runs (value, solver); else the best exact value."""
    proven = [(r["value"], s) for s, r in rows.items() if s in EXACT and r.get("status") == "optimal"
              and r.get("value") is not None]
    if proven:
        return min(proven)
    found = [(r["value"], s) for s, r in rows.items() if s in EXACT and r.get("value") is not None]
    if found:
        v, s = min(found)
        return v, f"{s}, not proven"
    return None, ""


def headline_rows(records: list[dict], *, source: str = "reference") -> list[dict]:
    """Per reference throughput workload: the optimum and every baseline's value and speed-up."""
    rows = [r for r in _rows(records, "max-load")]
    src = {r["workload"]: r.get("source") for r in _latest(records)}
    by_w: dict[str, dict[str, dict]] = defaultdict(dict)
    for (w, s), runs in _by_solver(rows).items():
        if src.get(w) == source:
            by_w[w][s] = _pick(runs)
    out = []
    for w in sorted(by_w, key=_natural):
        opt, who = _optimum(by_w[w])
        line = {"workload": w, "optimum": opt, "by": who, "baselines": {}}
        for b in HEADLINE:
            r = by_w[w].get(b)
            v = None if r is None else r["value"]
            line["baselines"][b] = (v, (v / opt if v is not None and opt else None),
                                    None if r is None else r["status"])
        out.append(line)
    return out


def headline_markdown(records: list[dict]) -> str:
    rows = headline_rows(records)
    if not rows:
        return "_no reference workloads in these results_\n"
    names = {"pipedream": "PipeDream-style", "partition": "partitioner (METIS)",
             "local-search": "local search", "expert": "expert", "single": "single device"}
    out = ["Max-load (lower is better) of the optimum and of each baseline; in brackets the speed-up of the "
           "optimum over the baseline (baseline max-load / optimum: throughput gained by the optimum). "
           "The optimum is contiguous; local search and the partitioner are not restricted to contiguous "
           "placements, so they can beat it (speed-up below 1). The single device respects memory: a graph "
           "that fits no accelerator runs on the host CPU (the reference's \"one acc.\" ignores memory).", "",
           "| workload | optimum | " + " | ".join(names[b] for b in HEADLINE) + " |",
           "|---|---:|" + "---:|" * len(HEADLINE)]
    for r in rows:
        opt = "—" if r["optimum"] is None else f"{_fmt(r['optimum'])} ({r['by']})"
        cells = []
        for b in HEADLINE:
            v, sp, status = r["baselines"][b]
            if status is None:
                cells.append("")
            elif v is None:
                cells.append(f"— ({status})")
            else:
                cells.append(f"{_fmt(v)} ({'—' if sp is None else f'{sp:.2f}×'})")
        out.append(f"| {r['workload']} | {opt} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- plots
def write_plots(records: list[dict], out_dir: str) -> list[str]:
    """``throughput_ratio.png`` (per workload, every solver's throughput relative to the contiguous
    optimum) and ``solve_time.png`` (DP and IP solve time against graph size, log-log)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plots needs matplotlib: pip install 'placement[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from solvers.registry import bench_solvers

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    rows = _rows(records, "max-load")
    by_w: dict[str, dict[str, dict]] = defaultdict(dict)
    for (w, s), runs in _by_solver(rows).items():
        by_w[w][s] = _pick(runs)
    workloads = sorted(by_w, key=_natural)
    if workloads:
        solvers = _solvers_in(rows, bench_solvers("max-load"))
        colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(solvers)}
        cols = 4
        nrows = math.ceil(len(workloads) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.9 * nrows), squeeze=False)
        for ax, w in zip(axes.flat, workloads):
            opt, _ = _optimum(by_w[w])
            ref = opt or by_w[w][next(iter(by_w[w]))]["best_known"]
            names, vals = [], []
            for s in solvers:
                r = by_w[w].get(s)
                if r is None:
                    continue
                names.append(s)
                vals.append(ref / r["value"] if r["value"] and ref else 0.0)
            ax.bar(range(len(names)), vals, color=[colors[s] for s in names])
            ax.axhline(1.0, color="black", lw=0.8, ls="--")
            ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
            ax.set_title(w, fontsize=8)
            ax.tick_params(axis="y", labelsize=7)
        for ax in list(axes.flat)[len(workloads):]:
            ax.axis("off")
        fig.suptitle("Throughput relative to the contiguous optimum (optimum max-load / solver max-load; "
                     "0 = no placement)", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
        p = os.path.join(out_dir, "throughput_ratio.png")
        fig.savefig(p, dpi=90)
        plt.close(fig)
        paths.append(p)

    nodes = {r["workload"]: r["nodes"] for r in rows if r.get("nodes")}
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    drew = False
    exact = [n for n in bench_solvers("max-load") if SOLVERS[n].exact]
    for i, (s, marker) in enumerate(zip(exact, "os^Dv<>")):
        color = f"C{i}"
        pts = [(nodes[r["workload"]], r["solve_time_s"], r["status"] == "optimal") for r in rows
               if r["solver"] == s and r.get("solve_time_s") and r["workload"] in nodes]
        if not pts:
            continue
        drew = True
        done = [(x, y) for x, y, ok in pts if ok]
        lim = [(x, y) for x, y, ok in pts if not ok]
        if done:
            ax.scatter(*zip(*done), marker=marker, color=color, label=f"{s} (optimal)")
        if lim:
            ax.scatter(*zip(*lim), marker=marker, facecolors="none", edgecolors=color,
                       label=f"{s} (limit reached)")
    if drew:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("graph size (nodes)")
        ax.set_ylabel("solve time (s)")
        ax.set_title("Solve time against graph size (throughput)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = os.path.join(out_dir, "solve_time.png")
        fig.savefig(p, dpi=90)
        paths.append(p)
    plt.close(fig)
    return paths


# --------------------------------------------------------------------------- full report
#: the last line of a report :func:`write_report` made from a results file: that file (relative to the
#: report's folder) and the SHA-256 of the text above the line, so that a later run knows whether it may
#: overwrite the report (:func:`report_conflict`)
_MARK = re.compile(r"<!-- placement bench report from (?P<results>.+); sha256 (?P<sha>[0-9a-f]{64}) -->\s*\Z")


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def report_conflict(path: str, results_file: str | None) -> str | None:
    """Why writing a report to ``path`` from ``results_file`` (None: a results file not made yet) would
    lose something, or None: ``path`` does not exist, or :func:`write_report` made it from the same
    results file (which only grows) and it has not been edited since."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return f"it exists and cannot be read as a report ({e})"
    mark = _MARK.search(text)
    if mark is None:
        return ("it was not written by placement bench from a results file (no 'placement bench report' "
                "line at its end: a report of an older version, edited, or another file)")
    if _sha256(text[:mark.start()]) != mark["sha"]:
        return "it has been edited since placement bench wrote it"
    source = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), mark["results"]))
    if results_file is None or os.path.realpath(source) != os.path.realpath(results_file):
        return (f"it was written from {source}, not from this run's results file "
                f"({results_file or 'a new folder'}): it holds runs this report would not")
    return None


def write_report(records: list[dict], path: str, *, machine: dict, config: dict | None = None,
                 notes: list[str] | None = None, plots: list[str] | None = None,
                 command: str | None = None, results_file: str | None = None) -> None:
    """The committed report: how the runs were made, on what machine, the headline and both tables.
    With ``results_file`` (where ``records`` come from), its last line names that file, for
    :func:`report_conflict`."""
    config = config or {}
    v = machine.get("versions", {})
    runs = _latest(records)
    statuses = defaultdict(int)
    for r in runs:
        statuses[r.get("status")] += 1
    limits = defaultdict(set)
    for r in runs:
        if "time_limit" in r:  # None: the run had none (--time-limit inf)
            limits[math.inf if r["time_limit"] is None else r["time_limit"]].add(r.get("solver"))
    limit_text = "; ".join(f"{_fmt(t)} s: {', '.join(sorted(s))}" if math.isfinite(t) else
                           f"none: {', '.join(sorted(s))}" for t, s in sorted(limits.items()))
    lines = [
        "# Benchmark results", "",
        f"Produced with `{command or 'placement bench'}` on {time.strftime('%Y-%m-%d')} (every run in the "
        "results file, of every workload, this command's and the earlier ones'); the raw records are the "
        "suite's `results.jsonl` beside the tables.", "",
        "## Machine", "",
        f"- CPU: {machine.get('cpu')}, {machine.get('cores')} cores (shared with other work while this ran)",
        f"- memory: {machine.get('memory_gb')} GB; {machine.get('os')}; Python {machine.get('python')}",
        "- " + ", ".join(f"{k} {x}" for k, x in sorted(v.items())),
        f"- per-run time limits: {limit_text or '—'}; {config.get('workers', 1)} run(s) at once, each in "
        "its own process (peak memory includes ~70–150 MB of Python, numpy and numba); solvers "
        "single-threaded",
        f"- runs: {len(runs)} (" + ", ".join(f"{k}: {n}" for k, n in sorted(statuses.items(), key=str)) + ")",
        ""]
    for n in notes or []:
        lines.append(f"Note: {n}")
    lines += ["", "## Headline: the optimum against the baselines (reference workloads, throughput)", "",
              headline_markdown(records),
              "## Throughput (max-load per sample; lower is better)", "",
              markdown_tables(records, "max-load"),
              "## Latency (one sample end to end; lower is better)", "",
              markdown_tables(records, "latency")]
    for p in plots or []:
        rel = os.path.relpath(p, os.path.dirname(os.path.abspath(path)))
        lines += [f"![{os.path.basename(p)}]({rel})", ""]
    text = "\n".join(lines)
    if results_file is not None:
        if not text.endswith("\n"):
            text += "\n"
        rel = os.path.relpath(os.path.abspath(results_file), os.path.dirname(os.path.abspath(path)))
        text += f"<!-- placement bench report from {rel}; sha256 {_sha256(text)} -->\n"
    _atomic_text(path, text)
