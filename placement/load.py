"""Turn a path given on the command line into a :class:`~graphs.reference.Workload`.

``.json`` files are reference-format workloads; ``.onnx`` models go through the ONNX front end
(:func:`graphs.onnx_workload.onnx_workload`), which takes the front-end options.
"""

from __future__ import annotations

import os

from graphs.errors import InputError
from graphs.reference import Workload, read_workload

__all__ = ["load_workload", "check_workload_path", "check_input_path"]


#: the front-end options whose flag is not their keyword's name
_FLAGS = {"dims": "--dim", "device_files": "--device-file"}


def check_input_path(path: str | os.PathLike, expected: str) -> None:
    """An input path that names no file: :class:`InputError` saying so (``no such file``, or ``is a
    folder; expected`` ``expected``, what the command takes there), before anything guesses its kind
    from its name."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(f"is a folder; expected {expected}", source=path)
    if not os.path.exists(path):
        raise InputError("no such file", source=path)


def check_workload_path(path: str | os.PathLike) -> None:
    """A workload path that names no file: :class:`InputError` saying so (:func:`check_input_path`)."""
    check_input_path(path, "a reference-format workload (.json) or an ONNX model (.onnx)")


def load_workload(path: str | os.PathLike, **frontend) -> Workload:
    """Load ``path``; ``frontend`` holds front-end options (devices, costs, batch size, training...)
    that only some formats use."""
    path = os.fspath(path)
    if os.path.isdir(path):
        check_workload_path(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".json":
        unused = {k: v for k, v in frontend.items() if v not in (None, False)}
        if unused:
            flags = [_FLAGS.get(k, f"--{k.replace('_', '-')}") for k in unused]
            raise InputError(f"{', '.join(flags)} only appl{'ies' if len(flags) == 1 else 'y'} to ONNX "
                             f"models; a reference-format workload carries its own costs and devices",
                             source=path)
        try:
            return read_workload(path)
        except InputError:
            from .inputs import not_a_workload

            why = not_a_workload(path)  # a result, a job list...: said, not its first missing field
            if why:
                raise InputError(why, source=path) from None
            raise
    if suffix == ".onnx":
        from graphs.onnx_workload import onnx_workload

        return onnx_workload(path, **{k: v for k, v in frontend.items() if v is not None})
    raise InputError(f"unknown input format {suffix or '(no suffix)'!r}; expected a reference-format "
                     f"workload (.json) or an ONNX model (.onnx)", source=path)
