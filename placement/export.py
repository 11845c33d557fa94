"""JSON output of the command line: a result printed as a ``--json`` document, and written atomically
(a temporary file, then a rename). What a result file holds is :mod:`placement.results`."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable

__all__ = ["write_json", "print_json", "emit"]


def emit(args, data: dict, text: Callable[[], str], out=None, *, written: str = "result",
         beside: str = "") -> None:
    """The one output path of a result: write it to ``args.out`` (when set), then print it as JSON
    (``args.json``) or print ``text()`` (its table and summary; a report that prints as it goes prints
    it there and gives ``""``) and where the result was written
    (``written``: what the file holds, ``result`` unless a command names it: a Helix layout, a plan;
    ``beside``: words after the path, such as the files written beside it). A Ctrl-C meanwhile waits
    until the result is written and shown, then stops."""
    from . import _interrupt

    out = out or sys.stdout
    with _interrupt.deferred():
        if getattr(args, "out", None):
            write_json(args.out, data)
        if getattr(args, "json", False):
            print_json(data, out)
            return
        body = text()
        out.write(body.rstrip("\n") + "\n" if body else "")
        if getattr(args, "out", None):
            out.write(f"{written} written to {args.out}{beside}\n")


def print_json(data: dict, out=None) -> None:
    """Print ``data`` as the JSON document of a ``--json`` run (indented one space, a final newline) to
    ``out`` (default: standard output)."""
    out = out or sys.stdout
    json.dump(data, out, indent=1)
    out.write("\n")


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON atomically: a temporary file in the same folder, then a rename, so a
    crash or Ctrl-C never leaves a half-written result. The file gets the usual permissions (0666 less
    the umask), like every other file the tool writes. A missing folder is created, as for every
    output of the command line; a folder that cannot be written raises :class:`InputError`."""
    from graphs.errors import InputError

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot write there ({e.strerror or e})", source=path) from None
    for _ in range(100):
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}.json")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise InputError(f"cannot write there ({e.strerror or e})", source=path) from None
    else:  # pragma: no cover
        raise FileExistsError(f"no free temporary name in {folder}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
