"""Ctrl-C for the command line: deliver it only where Python code can take it.

Python raises ``KeyboardInterrupt`` at whatever bytecode runs when SIGINT arrives. Inside an import
(a module left half initialised: numba then fails with "duplicate registration"), inside numba's
compiler or cache loader (ctypes callbacks from LLVM swallow it, or the dispatcher returns "a result
with an exception set") that breaks the process instead of stopping it. The handler installed here
defers the signal while such code runs — any import, numba or llvmlite frames on the stack, numpy's
Python helpers for its C code (which turn the ``KeyboardInterrupt`` into a ``TypeError``), or a
:func:`deferred` block — and delivers it as ``KeyboardInterrupt`` at the first safe bytecode after:
a watcher thread re-sends SIGINT every few milliseconds until the handler may raise.

Such code can run for long: numba's first kernel load (its imports, its target registry, the cached
kernels read back) takes seconds on a busy machine, a compilation with an empty cache minutes. When
the Ctrl-C is still held back :data:`GRACE_S` after it came, and no :func:`deferred` block (nor
:func:`quiet`) holds it, the watcher ends the process: ``error: interrupted`` on stderr, exit 130,
without waiting for the import or the compiler (nothing is half-written then: results are written in
deferred blocks, and atomically).

Only the console entry points install it (``install()``); the library never touches signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["install", "deferred", "installed", "quiet", "stopping", "exit_past_abandoned_solver",
           "exit_interrupted", "hold_in"]

_RETRY_S = 0.02
GRACE_S = 1.0  # after frontier's and provision's own watchdog (0.6 s), which writes what they found
_UNSAFE_PREFIXES: tuple[str, ...] = ()
_state = {"installed": False, "depth": 0, "pending": False, "watcher": None, "exiting": False, "late": False}
_lock = threading.Lock()  # the forced exit against quiet()/deferred() from another thread
#: functions (their code) in whose own frame the handler never raises (:func:`hold_in`)
_HOLD_CODES: set = set()
_CONTEXTLIB = contextlib.__file__


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


def _unsafe_paths() -> tuple[str, ...]:
    """Where raising ``KeyboardInterrupt`` breaks the process: numba's and llvmlite's folders, and the
    Python helpers numpy's C code calls back into. Those turn any exception into one of their own: a
    Ctrl-C while ``np.unique(pairs, axis=0)`` promotes its structured view's fields became "TypeError:
    Cannot compare structured arrays unless they have a common dtype" (a traceback, exit 1)."""
    paths = list(_package_dirs("numba", "llvmlite"))
    for d in _package_dirs("numpy"):
        paths += [os.path.join(d, "_core", "_internal.py"), os.path.join(d, "core", "_internal.py")]
    return tuple(paths)


def _unsafe(frame) -> bool:
    """Whether raising in ``frame`` (or a caller) could corrupt the process: an import, or numba's or
    llvmlite's own code (compilation, cache loading, ctypes callbacks); or where the exception would
    escape the console's own handling as a traceback: this module's functions (quiet() itself), the
    functions given to :func:`hold_in` (the console around its command) and ``with`` statements'
    exits in them."""
    if _state["depth"] > 0:
        return True
    if frame is not None:
        code = frame.f_code
        if code.co_filename == __file__ or code in _HOLD_CODES:
            return True
        caller = frame.f_back
        if code.co_filename == _CONTEXTLIB and caller is not None and caller.f_code in _HOLD_CODES:
            return True
    while frame is not None:
        fn = frame.f_code.co_filename
        if fn.startswith("<frozen importlib") or (_UNSAFE_PREFIXES and fn.startswith(_UNSAFE_PREFIXES)):
            return True
        frame = frame.f_back
    return False


def _watch() -> None:
    """Re-send SIGINT until the handler has delivered it (at a safe point); past the grace, end the
    process."""
    import time

    give_up = time.monotonic() + GRACE_S
    while _state["pending"]:
        time.sleep(_RETRY_S)
        if _state["pending"] and _state["depth"] == 0:
            if time.monotonic() >= give_up:
                _overdue_exit()
            os.kill(os.getpid(), signal.SIGINT)
    _state["watcher"] = None


def _overdue_exit() -> None:
    """The Ctrl-C could not be delivered within the grace (an import, numba's loader or compiler):
    exit 130 now. Not while a deferred block or :func:`quiet` holds Ctrl-C (a result being written, a
    command on its way out, frontier's watchdog writing what was found)."""
    with _lock:
        if _state["depth"] > 0 or _state["exiting"]:
            return
        _state["exiting"] = True
    exit_interrupted()


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` at once (:func:`os._exit`: no interpreter teardown), stdout and stderr flushed
    first; a closed pipe (``placement ... | head``) leaves nothing to flush and is no error."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_interrupted() -> None:
    """``error: interrupted`` on stderr, the output flushed, exit 130 now (``run``'s workers and any other
    child processes first): the forced exits of a Ctrl-C (this module's, and the serving commands'
    watchdog in :mod:`placement.cli.serving`)."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None:  # run's workers block Ctrl-C (placement.pipeline_run): they must not outlive us
        try:
            for child in mp.active_children():
                child.terminate()
        except Exception:  # noqa: BLE001 - leaving matters more than a child we could not reach
            pass
    try:
        print("error: interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass
    exit_now(130)


def _handler(signum, frame) -> None:
    if _unsafe(frame):
        _hold()
        return
    _state["pending"] = False
    raise KeyboardInterrupt


def _hold() -> None:
    """Hold a Ctrl-C back: the watcher delivers it at a safe point (or ends the process after the
    grace); a deferred block delivers it at its end."""
    _state["pending"] = True
    if _state["depth"] == 0 and _state["watcher"] is None:
        t = threading.Thread(target=_watch, name="placement-sigint", daemon=True)
        _state["watcher"] = t
        t.start()


def hold_in(*functions) -> None:
    """Never raise ``KeyboardInterrupt`` while one of ``functions`` runs its own code (the innermost
    frame; what it calls is not affected): the console's frames around the command, where it would
    escape the command's handling as a traceback. A Ctrl-C there is held back and delivered at the
    next safe point, or noted by :func:`quiet`."""
    for f in functions:
        f = getattr(f, "__wrapped__", f)  # a contextmanager: its generator's code
        _HOLD_CODES.add(f.__code__)


def _unraisable(hook):
    """``sys.unraisablehook`` that takes back a ``KeyboardInterrupt`` Python could not raise: one raised
    in a weakref callback or a ``__del__`` (``WeakSet._remove`` as objects went at the end of ``run``)
    was printed as "Exception ignored in ..." and lost, the command exiting 0. It is held back again
    and delivered at the next safe point (or noted by :func:`quiet`); anything else goes to ``hook``."""

    def unraisable(info) -> None:
        if info.exc_type is KeyboardInterrupt and _state["installed"]:
            _hold()
            return
        hook(info)

    return unraisable


def install(held: Sequence[int] = ()) -> None:
    """Install the deferring SIGINT handler (main thread of the console entry points only). ``held``:
    the Ctrl-Cs the caller held back until now (``python -m placement`` holds them from its first line,
    while this module loads; read after the handler is in place, so none is lost); one is delivered
    like any other held-back Ctrl-C."""
    global _UNSAFE_PREFIXES
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    sys.unraisablehook = _unraisable(sys.unraisablehook)
    signal.signal(signal.SIGINT, _handler)
    _state["installed"] = True
    # after the handler, so that a Ctrl-C during this look-up is deferred too
    _UNSAFE_PREFIXES = _unsafe_paths()
    if held:  # not raised here: it would escape __main__ as a traceback; delivered inside the command
        _hold()


def installed() -> bool:
    return _state["installed"]


@contextlib.contextmanager
def deferred():
    """Hold Ctrl-C back for the block's duration; if one came, raise ``KeyboardInterrupt`` at its end.
    Without :func:`install` (the library, tests calling ``main``) it changes nothing.

    A block that ends in an exception drops the Ctrl-C it held (the error in flight goes on): catch an
    expected exception (``queue.Empty``) *inside* the block, or a Ctrl-C that came meanwhile is lost."""
    with _lock:
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
        if _state["depth"] == 0 and _state["pending"] and _state["installed"]:
            _state["pending"] = False
            if sys.exc_info()[0] is None:
                raise KeyboardInterrupt


def quiet() -> None:
    """From now on hold every Ctrl-C back (the process is on its way out; only the console entry
    points, which installed the handler, are affected)."""
    if _state["installed"]:
        with _lock:
            _state["depth"] += 1
            # a Ctrl-C held back (an import) and not yet delivered: from now on it never will be, so the
            # command's exit says it (exit_past_abandoned_solver); it was lost, the command ending with 0
            _state["late"] = _state["late"] or _state["pending"]
        if threading.current_thread() is threading.main_thread():
            # ignored, not merely deferred: at interpreter shutdown Python puts a handler of its own back
            # to the default action (death by SIGINT, exit -2), but it leaves an ignored signal ignored
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def stopping() -> None:
    """The first Ctrl-C decides how a command ends. Where a search (or a planning) took one and the
    command ends with what it kept (exit 0, that result written and printed, said interrupted), the
    command calls this: from then on later Ctrl-Cs change nothing (held back for good, as by
    :func:`quiet`; the output left takes milliseconds). Without it a second Ctrl-C during the output
    ended the command with 130 once the result had been written (the output's :func:`deferred` block
    delivers a Ctrl-C at its end), so that a script read 'interrupted' beside a result file; one before
    the output, with 130 and no file, the result lost.

    A Ctrl-C held back until now (it came in an import as the search ended) is a later one too: dropped.
    :func:`quiet` would count it as a first one never delivered (exit 130 at the end). Only the console
    entry points, which installed the handler, are affected (not the library, nor tests calling
    ``main``). A Ctrl-C that comes, with none before it, while a complete result is written is not this
    case: the output's deferred block lets the result be written whole, then the command ends with 130
    (:func:`placement.export.emit`)."""
    if not _state["installed"]:
        return
    if threading.current_thread() is threading.main_thread():
        # first ignored (as quiet() does), so that none can be held back after the next lines
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with _lock:
        _state["depth"] += 1  # held from here on (the other threads' deferred blocks, the forced exit)
        _state["pending"] = False  # one held back until now: dropped, and the watcher stops re-sending


def exit_past_abandoned_solver(code: int) -> None:
    """When HiGHS did not stop within its grace after being cancelled, :mod:`solvers._milp` abandons its
    search in a daemon thread. Python's exit would then tear down HiGHS's C++ threads under it
    (``terminate called without an active exception``, exit 134), so the console command leaves
    without that teardown, its output flushed. Tests calling ``main`` (no console) are not affected.

    The console's last step before its exit with ``code`` (:func:`quiet` called), this also ends with
    130 and ``error: interrupted`` a command that had a Ctrl-C held back and never delivered: it came
    in an import near the end, and the command reached :func:`quiet` before the watcher's next try
    (within :data:`_RETRY_S`), its work done and its results written. The Ctrl-C benchmark's ``cluster
    simulate`` exited 0 so, the Ctrl-C lost."""
    if installed() and _state["late"] and code != 130:
        exit_interrupted()
    milp = sys.modules.get("solvers._milp")
    if milp is None or not installed() or not milp._abandoned_running():
        return
    exit_now(code)

