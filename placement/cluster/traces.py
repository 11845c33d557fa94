"""Philly-like traces over Synergy's profiled jobs: Poisson arrivals, Synergy's job classes and durations.

:func:`profiles` reads the per-model throughput matrices out of a job list whose jobs carry measured
``throughput`` tables (such as ``../shared/workloads/synergy/``'s conversion of Synergy's run): for each
model, its rate over (cores, memory) per GPU divided by its rate on the GPU-proportional share of a
server, so that 1.0 is that share. :func:`philly_trace` then draws a job list:

* arrivals: a Poisson process at ``jobs_per_hour`` (Synergy's load is 9 jobs/h per 128 GPUs);
* model class: image 20%, language 70%, speech 10% (Synergy's mix), the model uniform within its class;
* duration at the GPU-proportional share: 80% ``10^U(1.5, 3)`` minutes, 20% ``10^U(3, 4)`` minutes
  (the Gavel-like draw Synergy uses);
* GPUs: ``gpu_mix`` ``"single"`` (all 1) or ``"multi"``, the Philly-derived mix of Gavel's generator that
  Synergy's multi-GPU runs use: 1 GPU 70%, 2 GPUs 10%, 4 GPUs 15%, 8 GPUs 5%.

A ``g``-GPU job's table is its model's per-GPU matrix at ``g`` times the cores and memory and ``g`` times
the rate (Synergy's profiles are per GPU). Times are in ms, one sample is one iteration, and ``samples``
is set so that the job runs exactly its drawn duration on its GPU-proportional share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError

from .formats import GB, HOUR_MS, JobList

__all__ = ["Profile", "profiles", "philly_trace", "CLASSES", "CLASS_MIX", "GPU_MIX"]

CLASSES = {"image": ("alexnet", "res18", "res50", "mobilenet", "shufflenet"),
           "language": ("gnmt", "transformer", "lstm", "bert"),
           "speech": ("m5", "deepspeech")}
CLASS_MIX = {"image": 0.2, "language": 0.7, "speech": 0.1}
GPU_MIX = {"single": {1: 1.0}, "multi": {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}}


@dataclass(frozen=True)
class Profile:
    """A model's throughput per GPU over ``cores`` x ``memory_gb``, normalised to 1.0 at the
    GPU-proportional share; ``speed`` its rate there (samples per second)."""

    model: str
    cores: tuple[float, ...]
    memory_gb: tuple[float, ...]
    normalised: tuple[tuple[float, ...], ...]
    speed: float


def _model_of(name: str) -> str:
    """``j12-res50-1g`` -> ``res50``; other names stand for themselves."""
    parts = name.split("-")
    if len(parts) >= 3 and parts[0][:1] == "j" and parts[-1].endswith("g"):
        return "-".join(parts[1:-1])
    return name


def profiles(jl: JobList, *, cores_per_gpu: float, memory_gb_per_gpu: float) -> dict[str, Profile]:
    """Per-model profiles from the one-GPU table jobs of ``jl`` (the first job of each model), normalised
    at ``cores_per_gpu`` and ``memory_gb_per_gpu`` (the GPU-proportional share)."""
    out: dict[str, Profile] = {}
    for j in jl.jobs:
        t = j.throughput
        if t is None or t.accelerators != 1:
            continue
        model = _model_of(j.name)
        if model in out:
            continue
        grid = np.asarray(t.rate, float)
        cores = np.asarray(t.cpus, float)
        mem = np.asarray(t.memory, float) / GB
        col = np.array([np.interp(memory_gb_per_gpu, mem, row) for row in grid])
        speed = float(np.interp(cores_per_gpu, cores, col))
        if speed <= 0:
            continue
        out[model] = Profile(model, tuple(cores.tolist()), tuple(mem.tolist()),
                             tuple(map(tuple, (grid / speed).tolist())), speed)
    if not out:
        raise InputError("no one-GPU job with a throughput table to take profiles from", source=jl.source)
    return out


def philly_trace(profs: Mapping[str, Profile], *, jobs: int, jobs_per_hour: float, devices: str,
                 host_memory_gb: float, servers: int, seed: int = 0, gpu_mix: str = "single",
                 class_mix: Mapping[str, float] = CLASS_MIX, gpu_kind: str = "v100",
                 cpu_limit: int | None = None) -> dict:
    """A job list (a dict in the ``JOBS.json`` format, servers included) drawn as the module doc says."""
    if gpu_mix not in GPU_MIX:
        raise InputError(f"unknown GPU mix {gpu_mix!r}; choose one of: {', '.join(GPU_MIX)}")
    if jobs < 1 or not jobs_per_hour > 0:
        raise InputError("philly_trace: jobs and jobs_per_hour must be positive")
    rng = np.random.default_rng(seed)
    by_class = {c: sorted(m for m in profs if _class_of(m) == c) for c in class_mix}
    classes = [c for c in class_mix if by_class[c]]
    if not classes:
        raise InputError(f"none of the profiled models ({', '.join(sorted(profs))}) is in a known class")
    p = np.array([class_mix[c] for c in classes], float)
    p /= p.sum()
    mix = GPU_MIX[gpu_mix]
    gaps = rng.exponential(HOUR_MS / jobs_per_hour, size=jobs)
    arrivals = np.cumsum(gaps)
    out = []
    for k in range(jobs):
        cls = classes[int(rng.choice(len(classes), p=p))]
        model = by_class[cls][int(rng.integers(len(by_class[cls])))]
        prof = profs[model]
        g = int(rng.choice(list(mix), p=list(mix.values())))
        minutes = 10 ** (rng.uniform(1.5, 3) if rng.random() < 0.8 else rng.uniform(3, 4))
        speed = prof.speed * g  # samples per second at the proportional share
        points = [[c * g, m * g, prof.normalised[i][q] * speed]
                  for i, c in enumerate(prof.cores) for q, m in enumerate(prof.memory_gb)]
        job = {"name": f"j{k}-{model}-{g}g", "samples": float(round(minutes * 60 * speed)),
               "arrival": round(float(arrivals[k]), 3), "accelerator": gpu_kind,
               "throughput": {"accelerators": g, "points": points}}
        if cpu_limit is not None:
            job["limit"] = f"{gpu_kind}:{g},cpu:{cpu_limit}"
        out.append(job)
    return {"comment": f"Philly-like trace over Synergy's profiles: {jobs} jobs, {jobs_per_hour:g} jobs/h, "
                       f"GPU mix {gpu_mix}, seed {seed}",
            "cluster": {"devices": devices, "host_memory_gb": host_memory_gb, "servers": servers},
            "seed": seed, "jobs": out}


def _class_of(model: str) -> str | None:
    m = model.lower()
    for c, names in CLASSES.items():
        if any(m.startswith(n) for n in names):
            return c
    return None


def load_for(cluster_gpus: int, per_128: float = 9.0) -> float:
    """Synergy's arrival rate (``per_128`` jobs/h per 128 GPUs) scaled to ``cluster_gpus`` GPUs."""
    return per_128 * cluster_gpus / 128.0


def jct_percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation, numpy's default)."""
    v = [x for x in values if math.isfinite(x)]
    return float(np.percentile(v, q)) if v else math.inf
