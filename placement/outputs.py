"""Outputs: paths checked before any work (every command creates the folders its outputs go into, and an
output that cannot be written is one error naming the flag, raised before anything is solved), the
progress bar long commands show on stderr, and the one layout of their text tables (:func:`aligned`).

Nothing here imports the command line (:mod:`placement.cli`), so any command module can use it.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from graphs.errors import InputError

__all__ = ["output_file", "output_dir", "plot_file", "PLOT_FORMATS", "Progress", "aligned"]


def output_file(path: str, flag: str) -> str:
    """Check that ``path`` can be written: create its folder and create and delete a file there.
    Raises :class:`~graphs.errors.InputError` (``"FLAG PATH: ..."``) when ``path`` is a folder, lies
    under a regular file, or cannot be written. Returns ``path``."""
    if os.path.isdir(path):
        raise InputError(f"{flag} {path}: is a folder; give a file name")
    _writable_folder(os.path.dirname(os.path.abspath(path)), path, flag)
    return path


#: the file types ``--plot`` draws (matplotlib's, by the name's ending)
PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def plot_file(path: str, flag: str = "--plot") -> str:
    """``path`` for a drawing: its name ends in one of :data:`PLOT_FORMATS` and it can be written
    (:func:`output_file`), else an :class:`InputError` naming ``flag``, before any work."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        raise InputError(f"{flag} {path}: the file name must end in one of "
                         f"{', '.join('.' + e for e in PLOT_FORMATS)}")
    return output_file(path, flag)


def output_dir(path: str, flag: str) -> str:
    """As :func:`output_file` for a folder a command writes several files into."""
    _writable_folder(path, path, flag)
    return path


def _writable_folder(folder: str, path: str, flag: str) -> None:
    up = folder
    while not os.path.exists(up) and os.path.dirname(up) != up:
        up = os.path.dirname(up)
    if os.path.exists(up) and not os.path.isdir(up):  # makedirs would say only "File exists"
        raise InputError(f"{flag} {path}: cannot write there ({up} is a file, not a folder)")
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


class Progress:
    """A one-line progress bar with an ETA on stderr (only when stderr is a terminal, or forced). It never
    goes backwards: a solver whose steps each report their own fraction (a coarsening level after
    another) shows the most reached so far. A line printed while a bar is drawn (the note that numba is
    compiling) ends the bar's line first (:meth:`end_line`); the bar goes on on the next one."""

    _open: list[Progress] = []  # the bar whose line is drawn and not ended (at most one: one command)

    def __init__(self, label: str, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self.start = time.monotonic()
        self.last = 0.0
        self.reached = 0.0

    def __call__(self, frac: float) -> None:
        if not self.enabled:
            return
        frac = self.reached = min(1.0, max(self.reached, frac))
        now = time.monotonic()
        if now - self.last < 0.2 and frac < 1:
            return
        self.last = now
        el = now - self.start
        # an ETA from the first percent or second is noise (early ideals are the cheap ones)
        eta = el * (1 - frac) / frac if frac >= 0.05 and el >= 2.0 else math.inf
        bar = "#" * int(30 * frac)
        eta_s = f"ETA {eta:.0f}s" if math.isfinite(eta) else ""
        self.stream.write(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% {el:.0f}s {eta_s}   ")
        self.stream.flush()
        Progress._open[:] = [self]

    def done(self) -> None:
        if self in Progress._open:  # drawn, its line not ended yet
            Progress._open.clear()
            self.stream.write("\n")
            self.stream.flush()

    @classmethod
    def end_line(cls, stream) -> None:
        """Before a line is printed on ``stream``: end the line of a bar drawn there, if one is open."""
        for bar in cls._open:
            if bar.stream is stream:
                cls._open.clear()
                stream.write("\n")


def aligned(rows: Sequence[Sequence[str]], right: Callable[[int], bool] = lambda i: False) -> str:
    """Rows of cells (the heading first) as text columns, the command line's one table layout: each
    column as wide as its widest cell, two spaces apart, column ``i`` right-aligned where ``right(i)``
    (figures) and left-aligned otherwise (names), no trailing spaces."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if right(i) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join(line(r).rstrip() for r in rows)
