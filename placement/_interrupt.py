"""Ctrl-C for the command line: deliver it only where Python code can take it.

Python raises ``KeyboardInterrupt`` at whatever bytecode runs when SIGINT arrives. Inside an import
(a module left half initialised: numba then fails with "duplicate registration"), inside numba's
compiler or cache loader (ctypes callbacks from LLVM swallow it, or the dispatcher returns "a result
with an exception set") that breaks the process instead of stopping it. The handler installed here
defers the signal while such code runs — any import, numba or llvmlite frames on the stack, or a
:func:`deferred` block — and delivers it as ``KeyboardInterrupt`` at the first safe bytecode after:
a watcher thread re-sends SIGINT every few milliseconds until the handler may raise.

Only the console entry points install it (``install()``); the library never touches signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

__all__ = ["install", "deferred", "installed", "quiet", "exit_past_abandoned_solver"]

_RETRY_S = 0.02
_HARD_EXIT_S = 1.0  # a Ctrl-C deferred this long past a safe point ends the process (see _watch)
_UNSAFE_PREFIXES: tuple[str, ...] = ()
_state = {"installed": False, "depth": 0, "pending": False, "watcher": None}


def _package_dirs(*names: str) -> tuple[str, ...]:
    import importlib.util

    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:  # as imported, and resolved (symlinked installs)
                dirs += [os.path.join(d, ""), os.path.join(os.path.realpath(d), "")]
    return tuple(dirs)


def _unsafe(frame) -> bool:
    """Whether raising in ``frame`` (or a caller) could corrupt the process: an import, or numba's or
    llvmlite's own code (compilation, cache loading, ctypes callbacks)."""
    if _state["depth"] > 0:
        return True
    while frame is not None:
        fn = frame.f_code.co_filename
        if fn.startswith("<frozen importlib") or (_UNSAFE_PREFIXES and fn.startswith(_UNSAFE_PREFIXES)):
            return True
        frame = frame.f_back
    return False


def _watch() -> None:
    """Re-send SIGINT until the handler has delivered it (at a safe point). When no safe point comes
    within :data:`_HARD_EXIT_S` (numba compiling its kernels on a cold cache takes a minute or more), and
    no :func:`deferred` block (a result being written) holds it back, the process ends there with exit
    130, as a delivered Ctrl-C would end it before any placement exists: a user's Ctrl-C is never left
    waiting on a compiler."""
    import time

    start = time.monotonic()
    while _state["pending"]:
        time.sleep(_RETRY_S)
        if _state["pending"] and _state["depth"] == 0:
            if time.monotonic() - start > _HARD_EXIT_S:
                _exit_interrupted()
            os.kill(os.getpid(), signal.SIGINT)
    _state["watcher"] = None


def _exit_interrupted() -> None:
    """End the process now, as the command line ends an interrupted command (exit 130). Only the
    atomic writes of :func:`placement.export.write_json` (inside :func:`deferred`) and numba's cache
    (written to a temporary name, then renamed) touch files, so nothing is left half-written."""
    try:
        sys.stderr.write("\nerror: interrupted\n")
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(130)


def _handler(signum, frame) -> None:
    if _unsafe(frame):
        _state["pending"] = True
        if _state["depth"] == 0 and _state["watcher"] is None:
            t = threading.Thread(target=_watch, name="placement-sigint", daemon=True)
            _state["watcher"] = t
            t.start()
        return
    _state["pending"] = False
    raise KeyboardInterrupt


def install() -> None:
    """Install the deferring SIGINT handler (main thread of the console entry points only)."""
    global _UNSAFE_PREFIXES
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _handler)
    _state["installed"] = True
    # after the handler, so that a Ctrl-C during this look-up is deferred too
    _UNSAFE_PREFIXES = _package_dirs("numba", "llvmlite")


def installed() -> bool:
    return _state["installed"]


@contextlib.contextmanager
def deferred():
    """Hold Ctrl-C back for the block's duration; if one came, raise ``KeyboardInterrupt`` at its end.
    Without :func:`install` (the library, tests calling ``main``) it changes nothing."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0 and _state["pending"] and _state["installed"]:
            _state["pending"] = False
            if sys.exc_info()[0] is None:
                raise KeyboardInterrupt


def quiet() -> None:
    """From now on hold every Ctrl-C back (the process is on its way out; only the console entry
    points, which installed the handler, are affected)."""
    if _state["installed"]:
        _state["depth"] += 1
        if threading.current_thread() is threading.main_thread():
            # ignored, not merely deferred: at interpreter shutdown Python puts a handler of its own back
            # to the default action (death by SIGINT, exit -2), but it leaves an ignored signal ignored
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_past_abandoned_solver(code: int) -> None:
    """When HiGHS did not stop within its grace after being cancelled, :mod:`solvers._milp` abandons its
    search in a daemon thread. Python's exit would then tear down HiGHS's C++ threads under it
    (``terminate called without an active exception``, exit 134), so the console command leaves
    without that teardown, its output flushed. Tests calling ``main`` (no console) are not affected."""
    milp = sys.modules.get("solvers._milp")
    if milp is None or not installed() or not milp._abandoned_running():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
