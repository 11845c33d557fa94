"""Output paths, checked before any work: every command creates the folders its outputs go into, and an
output that cannot be written is one error naming the flag, raised before anything is solved.

Nothing here imports the command line (:mod:`placement.cli`), so any command module can use it.
"""

from __future__ import annotations

import os
import tempfile

from graphs.errors import InputError

__all__ = ["output_file", "output_dir"]


def output_file(path: str, flag: str) -> str:
    """Check that ``path`` can be written: create its folder and create and delete a file there.
    Raises :class:`~graphs.errors.InputError` (``"FLAG PATH: ..."``) when ``path`` is a folder, lies
    under a regular file, or cannot be written. Returns ``path``."""
    if os.path.isdir(path):
        raise InputError(f"{flag} {path}: is a folder; give a file name")
    _writable_folder(os.path.dirname(os.path.abspath(path)), path, flag)
    return path


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
