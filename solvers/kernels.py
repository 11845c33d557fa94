"""The solvers' numba kernels compiled before a solver's clock starts, and the seconds compiling took.

numba compiles a kernel at its first call unless its machine code is in the on-disk cache (``*.nbi`` /
``*.nbc`` files in ``__pycache__`` next to the source, or under ``NUMBA_CACHE_DIR``): the first run after
installing or updating compiles for 35-95 s on 2 cores. Inside a solve that time would count against its
time limit (a first ``place --time-limit 5`` found nothing). So :func:`solvers.registry.solve`, when given
a time limit, first calls :func:`warm` on its solver's kernel modules (:attr:`SolverInfo.kernels`): the
kernels those modules call from Python, with the argument types their solves pass (:data:`SIGNATURES`),
that the cache does not hold (:func:`cached`) are compiled there and those it holds loaded there
(``load=True``: the first load of a process sets up numba's code generator, about 0.5 s, which on the
solve's clock was half of a 1 s limit), and the solve finds them ready. The multi-threaded kernels
(``*_parallel``) are left out for a solve held to one thread. A kernel the table misses is compiled where
it is first called, as before (and counted in ``compile_s``); every kernel a solver calls from Python is
listed (``tests/test_kernels.py`` checks it).

Without a time limit nothing is compiled ahead: a solve then compiles only what it runs (a small lattice
runs some kernels uncompiled, :func:`solvers.dp._leaf`), which is less.

What is compiled is numba's own state (its dispatchers' overloads); this module remembers only the
argument types it parsed and the kernels it found in numba's cache (neither changes while the process
runs), and the listener of :func:`compile_seconds` lives for its block only. Nothing here prints (the
command line's note on compiling, :mod:`placement._compile_notice`, counts with :func:`compile_timer`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import time
from collections.abc import Callable

__all__ = ["SIGNATURES", "signature", "warm", "cached", "compile_timer", "compile_seconds"]

# The argument types, one word each: i, f, b = int64, float64, bool scalars; i1, f2, u2, b1, ... = a
# C-contiguous array of int64, float64, uint64, bool of that many dimensions (i32_2, i8_2: int32, int8);
# a trailing r = read-only; (...) = a tuple. Only the kernels called from Python are listed: the kernels
# they call are compiled (and cached) with them.
_DTYPES = {"i": "int64", "f": "float64", "b": "boolean", "u": "uint64", "i32_": "int32", "i8_": "int8"}


@functools.cache
def signature(words: str) -> tuple:
    """The numba argument types ``words`` spell (the legend above); parsed once per process."""
    from numba.core import types

    def one(word: str):
        m = re.fullmatch(r"(i32_|i8_|[ifbu])(\d?)(r?)", word)
        if m is None:
            raise ValueError(f"not an argument type: {word!r}")
        dtype = getattr(types, _DTYPES[m[1]])
        return types.Array(dtype, int(m[2]), "C", readonly=bool(m[3])) if m[2] else dtype

    stack: list[list] = [[]]
    for word in re.findall(r"[()]|[^\s()]+", words):
        if word == "(":
            stack.append([])
        elif word == ")":
            inner = stack.pop()
            stack[-1].append(types.Tuple(inner))
        else:
            stack[-1].append(one(word))
    if len(stack) != 1:
        raise ValueError(f"unbalanced parentheses: {words!r}")
    return tuple(stack[0])


_DP_CHUNK = "i i u2 f2 i1 f1 i1 i2 i1 f2 i1 i1 u1 i2 i1 i1 i1 i1 f b2 f2 i32_2 i8_2 i2 i2 f3 i2 i2 b2 i2 u3"
_TIE_CHUNK = "i i u2 f2 i1 f1 i1 i2 i1 f2 u2 i1 i1 i1 i1 f f2 f1 f1 f2 f2 i32_2 i8_2 i2 i2 b2"

#: module -> kernel -> its argument types as its solves pass them (legend above; seen on the piper,
#: throughput and ONNX workloads): a kernel called with other types is compiled there, as before
SIGNATURES: dict[str, dict[str, str]] = {
    "solvers.dp": {
        "_states_at": "i",
        "_boundaries": "u2 i1 u2",
        "_prefix": "i1 i1 f2 f1",
        "_dp_ideal": "i u2 f2 i1 f1 i1 i2 i1 f2 i1 i1 u1 i2 i1 i1 i1 i1 f b2 f2 i32_2 i8_2 i1 i1 f2 i1 i1 b1 "
                     "i1 u2 u1 b1 b i1",
        "_dp_chunk": _DP_CHUNK,
        "_dp_chunk_parallel": _DP_CHUNK,
        "_tie_ideal": "i u2 f2 i1 f1 i1 i2 i1 f2 u2 i1 i1 i1 i1 f f2 f1 f1 f2 f2 i32_2 i8_2 i1 i1 b1 u1 "
                      "b1 f1",
        "_tie_chunk": _TIE_CHUNK,
        "_tie_chunk_parallel": _TIE_CHUNK,
        "_prefix_sum": "i1 f1",
        "_out_comm": "u2 i1 f2 u2 i1 i1",
        "_alive_states": "b2 f2 i2 f2 i2 i1 f i1 i1",
        "_alive_memory": "b2 f1 i2 i1 f1",
        "_close_row": "i f2 i32_2 i8_2 i1 i2 f2",
        "_walk_count": "i1 f2 i1 f1 i1 i1 f i1 i1",
    },
    "solvers.dp_stages": {
        "_knapsack": "i1 f1 f1 f i1",
        "_prefix_sums": "i1 i1 f2 f2 b2 f1 f2 f2 i2 f1",
        "_enumerate_pairs": "i1 i1 i i i i1 i1 i1 i1 f2 i2 f2 b1 f1 f1 f f1 i i1 i1 i1",
        "_order_by_j": "i1 i",
        "_all_steps": "i i1 i1 u2 i i i1 i1 i1 f1 f2 i1 i1 b1 f1 f1 f1 f1 f1 i1 i1 f1 i1 i1r i1r i1r f2r "
                      "i i i f f1 i i1 i1 i1 i1 i1 i1 f1 i i (i1 i1 i1 f1 i1 i1 i1 i1 i1 f1 i1 f1 f1)",
        "_feasible": "f i i i i i1 i2 i1 i1 i1 i1 i1 i1 i1 i1 f1 i i3",
        "_feasible1": "f i i i i1 i1 i1 i1 i1 i1 f1 i i2",
        "_trace": "f i i i i i1 i1 i1 i1 i1 i1 i1 i1 i1 f1 i i3 i1 i1",
        "_rehash": "i1 i1 i",
    },
    "solvers.local_search": {
        "_state": "i1 i1 i1 f1 f2 f1 f2 i1 i1",
        "_descend": "i1 i1 i1 f1 f2 f1 f2 i1 i1 i1 i1 i1 b1 b2 i2 f1 f1 i b",
    },
}


def warm(kernels, *, load: bool = False, parallel: bool = True) -> None:
    """Compile the ``kernels`` (a module of :data:`SIGNATURES`: all it lists, or ``"module:kernel"``) that
    neither this process nor numba's cache has: their first calls in a solve then compile nothing. A
    cached one is left for the solve to load (loading one it would not call costs time), unless
    ``load``: then it is loaded too, so that a solve's first call costs nothing at all (the first load of
    a process also sets up numba's code generator, about 0.5 s). ``parallel=False`` leaves out the
    multi-threaded kernels (``*_parallel``: 5-8 s to compile on 2 cores), for a solve that runs on one
    thread."""
    for entry in kernels:
        name, _, only = entry.partition(":")
        module = importlib.import_module(name)
        for kernel, words in SIGNATURES[name].items():
            if (only and kernel != only) or (not parallel and kernel.endswith("_parallel")):
                continue
            dispatcher, sig = getattr(module, kernel), signature(words)
            if sig not in dispatcher.overloads and (load or not cached(dispatcher, sig)):
                dispatcher.compile(sig)


def cached(dispatcher, sig: tuple) -> bool:
    """Whether numba's on-disk cache holds ``dispatcher``'s machine code for the argument types ``sig``
    (for this source and this machine), without loading it. It reads numba's own index (numba 0.68's
    ``FunctionCache``, not a public interface): where that fails, ``False`` (then compiling is how to
    know, and loads what the cache has)."""
    if (id(dispatcher), sig) in _SEEN_CACHED:
        return True
    try:
        cache = dispatcher._cache
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        found = key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - another numba, a cache off: compiling decides instead
        return False
    if found:  # an entry stays while the process runs: the index is read once (a read costs ~0.2 ms)
        _SEEN_CACHED.add((id(dispatcher), sig))
    return found


#: (dispatcher, argument types) found in numba's on-disk cache in this process
_SEEN_CACHED: set = set()


def compile_timer(event, on_first: Callable[[], None] | None = None):
    """A listener of numba's ``numba:compile`` events (``event``: the module ``numba.core.event``) that
    counts the wall seconds numba spends compiling: cache misses only (a load from the cache fires no
    event), nested compiles (a kernel compiling its callees) counted once. ``on_first()`` is called as
    each outermost compile starts. ``timer.seconds()``: the total so far, a compile under way included;
    ``timer.depth``: how many compiles are under way."""

    class CompileTimer(event.Listener):
        def __init__(self):
            self.total, self.depth, self.start = 0.0, 0, 0.0

        def on_start(self, ev):
            if self.depth == 0:
                self.start = time.perf_counter()
                if on_first is not None:
                    on_first()
            self.depth += 1

        def on_end(self, ev):
            self.depth -= 1
            if self.depth == 0:
                self.total += time.perf_counter() - self.start

        def seconds(self) -> float:
            return self.total + (time.perf_counter() - self.start if self.depth else 0.0)

    return CompileTimer()


@contextlib.contextmanager
def compile_seconds(on_first: Callable[[], None] | None = None):
    """``with compile_seconds() as spent:`` — ``spent()`` is the wall seconds numba spent compiling in
    the block (:func:`compile_timer`; ``on_first`` as its)."""
    from numba.core import event

    timer = compile_timer(event, on_first)
    with event.install_listener("numba:compile", timer):
        yield timer.seconds
