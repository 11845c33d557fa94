"""The non-contiguous IP against the best known value of every throughput workload of the suite.

Reads a results file of ``placement bench`` runs of ``ip-noncontig`` and of the baselines it starts
from (``partition``, ``local-search``; ``dp`` where the workload is rebuilt by the current code) and the
Throughput table of ``benchmarks/RESULTS.md`` (the full suite's earlier values), and prints one
Markdown row per workload: the best known value (every value of both, the new runs included), the
program's value, proven bound and gap, and what it beat or lost to and by how much.

    python -m placement bench --config full --objective max-load \\
        --solvers ip-noncontig,partition,local-search --limit ip-noncontig=30 --time-limit 120 \\
        --workers 1 --out /tmp/ipnc
    python -m placement bench --config full --objective max-load --only onnx/ --only transformer/ \\
        --solvers dp --time-limit 120 --workers 1 --out /tmp/ipnc
    git show c6a7d7b:benchmarks/RESULTS.md > /tmp/RESULTS_before.md   # before the hand update
    python benchmarks/ip_noncontig_table.py /tmp/ipnc/results.jsonl /tmp/RESULTS_before.md

Workloads whose file is rebuilt by the current code (the ONNX zoo and the generated transformers: their
cost model changed since RESULTS.md was produced) are compared with the new runs only; the reference
files are read as they were, so their earlier values stand beside the new ones.
"""

from __future__ import annotations

import json
import re
import sys

REBUILT = ("onnx/", "transformer/")  # costed by the current cost model, not read from a file


def earlier_values(results_md: str) -> dict[str, dict[str, float]]:
    """``{workload: {solver: max-load}}`` from the Throughput table of RESULTS.md."""
    text = open(results_md).read()
    section = text.split("## Throughput", 1)[1]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out: dict[str, dict[str, float]] = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header) or cells[0] == "workload":
            break
        row = {}
        for name, cell in zip(header[3:], cells[3:]):
            m = re.match(r"([0-9.e+-]+)", cell)
            if m:
                row[name] = float(m.group(1))
            q = re.search(r"quirk: ([0-9.e+-]+)", cell)
            if q:
                row[name + " (quirk)"] = float(q.group(1))
        out[cells[0]] = row
    return out


def new_runs(results_jsonl: str) -> dict[str, dict[str, dict]]:
    """``{workload: {solver: record}}`` of the max-load runs (the last one of each key)."""
    out: dict[str, dict[str, dict]] = {}
    with open(results_jsonl) as f:
        for line in f:
            r = json.loads(line)
            if r.get("objective") == "max-load":
                out.setdefault(r["workload"], {})[r["solver"]] = r
    return out


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.6g}"


def table(results_jsonl: str, results_md: str) -> str:
    before = earlier_values(results_md)
    runs = new_runs(results_jsonl)
    rows = ["| workload | best known before | best known now | ip-noncontig | status | bound | gap | "
            "time s | start | against the others |",
            "|---|---:|---:|---:|---|---:|---:|---:|---|---|"]
    for name, recs in runs.items():
        ip = recs.get("ip-noncontig")
        if ip is None:
            continue
        others: dict[str, float] = {}
        if not name.startswith(REBUILT):
            others.update({k: v for k, v in before.get(name, {}).items() if k != "ip-noncontig"})
        for solver, r in recs.items():
            if solver != "ip-noncontig" and r.get("value") is not None and r.get("valid", True):
                others[solver + (" (now)" if not name.startswith(REBUILT) else "")] = r["value"]
        value = ip.get("value")
        prev_best = before.get(name, {}).get("ip-noncontig")
        known_before = min(before.get(name, {}).values(), default=None)
        best_other = min(others.items(), key=lambda kv: kv[1]) if others else None
        now = min([v for v in [value, best_other and best_other[1]] if v is not None], default=None)
        if value is None:
            verdict = "no placement"
        elif best_other is None:
            verdict = "no other value"
        else:
            rel = (value - best_other[1]) / best_other[1]
            if rel < -1e-5:
                verdict = f"beats {best_other[0]} {_fmt(best_other[1])} by {-rel:.2%}"
            elif rel <= 1e-5:  # round-off (RESULTS.md keeps 6 digits)
                verdict = f"ties {best_other[0]} {_fmt(best_other[1])}"
            else:
                verdict = f"**loses** to {best_other[0]} {_fmt(best_other[1])} by {rel:.2%}"
        if prev_best is not None and value is not None and not name.startswith(REBUILT):
            verdict += f" (was {_fmt(prev_best)})"
        gap = "—" if ip.get("gap") is None else f"{ip['gap']:.2%}"
        rows.append(f"| {name} | {_fmt(known_before) if not name.startswith(REBUILT) else '(rebuilt)'} | "
                    f"{_fmt(now)} | {_fmt(value)} | {ip.get('status')} | {_fmt(ip.get('bound'))} | {gap} | "
                    f"{ip.get('solver_time_s', 0):.1f} | {(ip.get('stats') or {}).get('warm_start', '—')} | "
                    f"{verdict} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "benchmarks/RESULTS.md"))
