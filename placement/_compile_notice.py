"""The command line's note that numba is compiling the solvers' kernels.

With an empty kernel cache (the first run after installing or updating) numba compiles the kernels for
about a minute; the user would otherwise wait without a word. numba fires ``numba:compile`` on a cache
miss only (a load from the cache fires nothing), nested compiles nesting events. The listener here prints
one ``note:`` line on stderr when the first compile of the process starts, and :func:`done` how long
compiling took. stderr only: ``--json`` keeps stdout for the result.

Importing numba costs about a second, and many commands never need it: :func:`install` registers the
listener when ``numba.core.event`` is imported, not before. Only the command line installs it, for the
command's duration (:func:`done` takes it away: the library, tests calling it after a command included,
never prints).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

__all__ = ["install", "done", "MESSAGE"]

MESSAGE = ("note: compiling the solver's kernels (numba; the first run after installing or updating, about "
           "a minute on 2 cores; later runs load them from the cache)")

_state = {"listener": None, "announced": False}


def _say(line: str) -> None:
    from .outputs import Progress

    try:
        Progress.end_line(sys.stderr)  # not on a progress bar's line
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the note is not worth failing the command for
        pass


def _announce() -> None:
    if not _state["announced"]:
        _state["announced"] = True
        _say(MESSAGE)


def _listener(event):
    """The listener (of numba's ``event`` module) that announces the first compile and counts seconds
    (:func:`solvers.kernels.compile_timer`)."""
    from solvers.kernels import compile_timer

    return compile_timer(event, on_first=_announce)


def _register(event) -> None:
    if _state["listener"] is None:
        _state["listener"] = (event, _listener(event))
        event.register("numba:compile", _state["listener"][1])


class _AfterImport(importlib.abc.MetaPathFinder):
    """Registers the listener right after ``numba.core.event`` is imported (then leaves ``sys.meta_path``)."""

    def find_spec(self, name, path=None, target=None):
        if name != "numba.core.event":
            return None
        _unhook()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            _register(module)

        spec.loader.exec_module = exec_and_register
        return spec


def _unhook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]


def install() -> None:
    """Announce the compiles from now until :func:`done` (the first of the process only)."""
    event = sys.modules.get("numba.core.event")
    if event is not None:
        _register(event)
    elif _state["listener"] is None and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def done(say: bool = True) -> None:
    """After a command: stop listening, and (``say``) how long it compiled, if it did. A command a Ctrl-C
    ended says nothing more: its ``error: interrupted`` is the last line, and a cut compile cached
    only part of the kernels."""
    _unhook()
    seconds = 0.0
    if _state["listener"] is not None:
        event, listener = _state["listener"]
        _state["listener"] = None
        event.unregister("numba:compile", listener)
        seconds = listener.seconds()
    if say and seconds >= 1.0:
        _say(f"note: compiled the solver's kernels in {seconds:.0f} s; later runs load them from the cache")
