"""How many cores are free for a parallel kernel now.

A kernel that splits each step over ``T`` threads waits at every step for its slowest thread; on a
machine where other processes keep cores busy, one of its threads is then descheduled at every step and
two threads run slower than one (measured: the DP on InceptionV3 training took 133.8 s on two threads
against 92.2 s on one, beside a competing CPU-bound load). The default thread count is therefore the
cores this process may use less the other work running on them now.
"""

from __future__ import annotations

import os
import time

__all__ = ["usable_cores", "idle_cores", "passive_waits"]


def passive_waits() -> None:
    """Let OpenMP's worker threads sleep, not spin, while they wait (``OMP_WAIT_POLICY=PASSIVE``), unless
    the environment says otherwise. The parallel DP kernel runs on numba's OpenMP layer and ends a
    parallel region at every chunk; on a core another process keeps busy, a thread spinning there takes
    the time its partner needs. Measured on 2 cores, the InceptionV3 inference DP with ``--threads 2``
    beside one competing process: 15.7 and 16.4 s spinning, 11.7 and 11.9 s passive (10.1 s on one
    thread); quiet, 5.7 and 5.8 s against 6.1 and 5.9 s. It applies only where set before OpenMP starts
    (the process's first parallel kernel), and to every OpenMP library the process loads after it, so
    the command line calls it for its own process and the library never does."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _running() -> int | None:
    """Threads runnable right now, system-wide (Linux ``/proc/loadavg``'s fourth field, ``R/T``)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def idle_cores(samples: int = 5, interval: float = 0.002) -> int:
    """Usable cores not taken by other runnable threads: the fewest runnable threads over ``samples``
    readings (a passing burst is not load), less this one reading it; at least 1. Where the kernel does
    not say (not Linux), every usable core."""
    cores = usable_cores()
    seen = []
    for i in range(samples):
        r = _running()
        if r is None:
            return cores
        seen.append(r)
        if i + 1 < samples:
            time.sleep(interval)
    others = max(0, min(seen) - 1)
    return max(1, min(cores, cores - others))
