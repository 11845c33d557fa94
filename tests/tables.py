"""Reading back the one plan table the command line prints (:func:`placement.report.format_rows`)."""

from __future__ import annotations

import re


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first plan table in ``text``, each a dict from column heading to cell: the table
    starts at the line that begins ``stage  devices`` and ends at the first blank line (cells are
    separated by two or more spaces; a cell has at most one in a row)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stage  devices"))
    head = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == len(head), (head, cells)
        rows.append(dict(zip(head, cells)))
    return rows


def one_device_per_stage(text: str) -> bool:
    """The table is a one-device-per-stage placement's: every stage on one device, ``d = t = 1``, with
    no variants or micro-batches in flight (that model has neither)."""
    rows = table_rows(text)
    return bool(rows) and "variants" not in rows[0] and "y" not in rows[0] and all(
        r["d"] == "1" and r["t"] == "1" and re.fullmatch(r"[\w.-]+:\d+", r["devices"]) for r in rows)
