"""A replicated plan applied to its ONNX model: ``placement split`` writes one sub-model per stage with
the stage's replicas listed in the manifest, and ``placement run`` runs ``d`` worker processes for a
stage of data-parallel degree ``d``, samples dealt round robin.

The plan is a result JSON with ``stages`` (``"format": "placement-replicated"``): each stage's ``nodes``
name the model's operators, ``dataParallelDegree`` is ``d`` and ``tensorParallelDegree`` must be 1
here (a tensor-parallel stage would need its operators split, which the sub-models do not do).

**Split.** The stages become a one-device-per-stage placement (each stage a device named by its
replicas, ``cpu:3-5``) cut by :func:`placement.onnx_export.split_stages`; every manifest entry then has
``replicas`` (``d``) and ``replica_devices`` (the result's own device names, or ``kind:index`` numbered
per kind across the stages in pipeline order).

**Run.** The ``k``-th sample fed (the warm-up samples first) is taken by replica ``k mod d`` of every
stage; a replica sends each sample on to the replica of the next stage that takes it (samples from
different upstream replicas may arrive out of order; each is independent). Each worker is one process
with one onnxruntime session on ``threads`` threads (as :mod:`placement.pipeline_run`, whose per-worker
loop this follows); the parent feeds every sample at once, times the stream after a warm-up that
reaches every replica, and compares the outputs with the whole model's.

The library functions print nothing; ``split_command`` and ``run_command`` are the CLI's handlers.
Problems raise :class:`~graphs.errors.InputError`.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError

from .onnx_export import device_result, replica_plan

__all__ = ["device_result", "replica_plan", "split_replicated", "ReplicatedRun", "run_replicated",
           "split_command", "run_command"]


def split_replicated(model, data: Mapping):
    """``(split, manifest)``: the sub-models of the plan's stages (:func:`placement.onnx_export.
    split_model` of :func:`placement.onnx_export.device_result`), the manifest listing every sub-model's
    ``replicas`` and ``replica_devices``."""
    from .onnx_export import split_stages

    split = split_stages(model, data)
    return split, split.manifest()


# --------------------------------------------------------------------------- running
@dataclass(frozen=True)
class ReplicatedRun:
    samples: int
    replicas: tuple[int, ...]  # per sub-model
    wall_s: float
    busy_s: tuple[tuple[float, ...], ...]  # per sub-model, per replica: time in session.run (timed samples)
    taken: tuple[tuple[int, ...], ...]  # per sub-model, per replica: timed samples it ran
    max_abs_diff: Mapping[str, float] | None

    @property
    def workers(self) -> int:
        return sum(self.replicas)

    @property
    def throughput(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def ms_per_sample(self) -> float:
        return 1e3 * self.wall_s / self.samples

    @property
    def stage_ms(self) -> tuple[float, ...]:
        """Per sub-model: its replicas' compute time per sample of the stream (ms), i.e. the stage's
        time per sample if its replicas ran side by side."""
        return tuple(1e3 * sum(b) / len(b) / self.samples for b in self.busy_s)


def _replica(k: int, r: int, model_bytes: bytes, inputs: list[str], keep: list[str], threads: int,
             optimize: bool, upstream: int, inq, outqs, statq) -> None:  # pragma: no cover - child process
    import signal

    # Ctrl-C is the parent's to handle: it stops the workers (see pipeline_run._worker)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from placement.onnx_export import session

    try:
        sess = session(model_bytes, threads=threads, optimize=optimize)
        names = [o.name for o in sess.get_outputs()]
        keep_set = set(keep)
        busy = 0.0
        count = 0
        stops = 0
        statq.put(("ready", (k, r), None))
        while True:
            msg = inq.get()
            if msg is None:  # one stop from every upstream replica (the parent counts as one)
                stops += 1
                if stops < upstream:
                    continue
                for q in outqs:
                    q.put(None)
                break
            seq, i, env = msg
            t0 = time.perf_counter()
            vals = sess.run(names, {x: env[x] for x in inputs})
            dt = time.perf_counter() - t0
            if i >= 0:
                busy += dt
                count += 1
            env.update(zip(names, vals))
            outqs[seq % len(outqs)].put((seq, i, {x: v for x, v in env.items() if x in keep_set}))
        statq.put(("stats", (k, r), (busy, count)))
    except Exception as e:  # report, and keep the pipeline from hanging
        statq.put(("error", (k, r), f"{type(e).__name__}: {str(e)[:400]}"))
        for q in outqs:
            q.put(None)


def run_replicated(models: Sequence, manifest: Mapping, feeds: Sequence[Mapping[str, np.ndarray]], *,
                   samples: int, threads: int = 1, optimize: bool = False,
                   reference: Sequence[Mapping[str, np.ndarray]] | None = None,
                   timeout: float = 600.0) -> ReplicatedRun:
    """Run ``samples`` samples (cycling through ``feeds``) through the sub-models, each with the
    manifest's ``replicas`` worker processes (1 when absent), round robin (see the module doc)."""
    from .pipeline_run import _get, _put, _start_workers, _stop

    if samples < 1:
        raise InputError(f"the number of samples must be at least 1, got {samples}")
    if not feeds:
        raise InputError("no inputs to run")
    subs = list(manifest["submodels"])
    if len(subs) != len(models):
        raise InputError(f"the manifest lists {len(subs)} sub-models but {len(models)} were given")
    reps = [int(s.get("replicas", 1)) for s in subs]
    if any(d < 1 for d in reps):
        raise InputError("every sub-model needs at least one replica")
    outputs = list(manifest["outputs"])
    keep_after = []
    for k in range(len(subs)):
        later = set(outputs)
        for s in subs[k + 1:]:
            later.update(s["inputs"])
        keep_after.append(sorted(later))
    ctx = mp.get_context("spawn")
    inq = [[ctx.Queue() for _ in range(d)] for d in reps]
    done = ctx.Queue()
    statq = ctx.Queue()
    procs = []
    arglists = []
    for k, (m, s) in enumerate(zip(models, subs)):
        data = m if isinstance(m, bytes) else m.SerializeToString()
        outqs = inq[k + 1] if k + 1 < len(subs) else [done]
        upstream = reps[k - 1] if k else 1
        arglists += [(k, r, data, list(s["inputs"]), keep_after[k], threads, optimize, upstream, inq[k][r],
                      outqs, statq) for r in range(reps[k])]
    try:
        _start_workers(ctx, procs, arglists, target=_replica)
        deadline = time.monotonic() + timeout
        for _ in procs:
            kind, who, info = _get(statq, deadline, procs)
            if kind == "error":
                raise InputError(f"sub-model {who[0]} (replica {who[1]}) could not start: {info}")
        feed_list = [dict(f) for f in feeds]
        warm = max(reps)  # one warm-up sample per replica of the widest stage reaches every replica
        for seq in range(warm):
            _put(inq[0][seq % reps[0]], (seq, -1 - seq, dict(feed_list[0])))
        _drain(done, warm, deadline, procs, statq)
        t0 = time.perf_counter()
        for i in range(samples):
            seq = warm + i
            _put(inq[0][seq % reps[0]], (seq, i, dict(feed_list[i % len(feed_list)])))
        results = _drain(done, samples, deadline, procs, statq)
        wall = time.perf_counter() - t0
        for q in inq[0]:
            _put(q, None)
        busy = [[0.0] * d for d in reps]
        taken = [[0] * d for d in reps]
        for _ in procs:
            kind, who, info = _get(statq, deadline, procs)
            if kind == "error":
                raise InputError(f"sub-model {who[0]} (replica {who[1]}) failed: {info}")
            busy[who[0]][who[1]], taken[who[0]][who[1]] = info
        for p in procs:
            p.join(timeout=10)
    finally:
        _stop(procs, [q for qs in inq for q in qs] + [done, statq])
    diff = None
    if reference is not None:
        diff = {}
        for i, env in results.items():
            ref = reference[i % len(reference)]
            for x in outputs:
                a, b = np.asarray(ref[x], dtype=np.float64), np.asarray(env[x], dtype=np.float64)
                d = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else (
                    0.0 if a.shape == b.shape else math.inf)
                diff[x] = max(diff.get(x, 0.0), d)
    return ReplicatedRun(samples, tuple(reps), wall, tuple(tuple(b) for b in busy),
                         tuple(tuple(t) for t in taken), diff)


def _drain(q, n: int, deadline, procs, statq) -> dict:
    """``n`` finished samples from the last stage's queue (warm-up ones included in the count)."""
    from .pipeline_run import _get

    out = {}
    got = 0
    while got < n:
        msg = _get(q, deadline, procs, statq, who=lambda w: f"{w[0]} (replica {w[1]})")
        if msg is None:
            raise InputError("a pipeline worker stopped early")
        _, i, env = msg
        out[i] = env
        got += 1
    return out


# --------------------------------------------------------------------------- command line
def _read(args):
    from graphs.jsonio import read_json
    from graphs.onnx_loader import read_model

    if not args.model.lower().endswith(".onnx"):
        raise InputError(f"{args.model!r} is not an ONNX model (.onnx)")
    return read_model(args.model, load_external_data=True), read_json(args.result)


def split_command(args, dims: dict) -> int:
    """``placement split MODEL RESULT`` for a replicated plan."""
    import os

    import onnx

    from .onnx_export import annotate, verify_split, write_split

    model, data = _read(args)
    split, _ = split_replicated(model, data)
    manifest = write_split(split, args.out_dir)
    annotated = args.annotated or os.path.join(
        args.out_dir, os.path.splitext(os.path.basename(args.model))[0] + ".placed.onnx")
    onnx.save_model(annotate(model, device_result(data)), annotated)
    print(f"{len(split.submodels)} sub-model(s) written to {args.out_dir}/ (manifest.json); annotated model: "
          f"{annotated}")
    for s in manifest["submodels"]:
        print(f"  {s['file']}: stage {s['stage']}, {s['replicas']} replica(s) on "
              f"{', '.join(s['replica_devices'])}, {s['nodes']} operators")
    for note in split.notes:
        print(f"note: {note}")
    if not args.verify:
        return 0
    rep = verify_split(model, [s.model for s in split.submodels], manifest, tolerance=args.tolerance,
                       seed=args.seed, dims=dims, batch_size=args.batch_size)
    print(f"verify: {'OK' if rep.ok else 'FAILED'}, max abs diff {rep.worst:.3g} "
          f"(tolerance {args.tolerance:g})")
    return 0 if rep.ok else 1


def run_command(args, dims: dict) -> int:
    """``placement run RESULT MODEL`` for a replicated plan: ``d`` processes per stage."""
    from .export import print_json
    from .pipeline_run import run_inputs

    model, data = _read(args)
    split, manifest = split_replicated(model, data)
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=args.seed, dims=dims,
                                         batch_size=args.batch_size, threads=args.threads,
                                         optimize=args.optimize, check=not args.no_check)
    run = run_replicated(parts, manifest, feeds, samples=args.samples, threads=args.threads,
                         optimize=args.optimize, reference=reference)
    ok = run.max_abs_diff is None or all(d <= 1e-4 for d in run.max_abs_diff.values())
    doc = {"samples": run.samples, "replicas": list(run.replicas), "workers": run.workers,
           "wall_s": run.wall_s, "measured_ms_per_sample": run.ms_per_sample,
           "measured_throughput_per_s": run.throughput, "measured_stage_ms": list(run.stage_ms),
           "replica_busy_s": [list(b) for b in run.busy_s], "replica_samples": [list(t) for t in run.taken],
           "max_abs_diff": run.max_abs_diff, "notes": list(split.notes)}
    if args.json:
        print_json(doc)
    else:
        print(f"{run.samples} samples through {len(run.replicas)} stage(s) on {run.workers} worker "
              f"process(es) in {run.wall_s:.3f} s")
        print(f"{'stage':<6}{'replicas':>9}{'ms/sample':>11}  samples per replica")
        for k, (d, ms, t) in enumerate(zip(run.replicas, run.stage_ms, run.taken)):
            print(f"{k:<6}{d:>9}{ms:>11.3f}  {', '.join(map(str, t))}")
        print(f"measured  {run.ms_per_sample:.3f} ms per sample ({run.throughput:.2f} samples/s)")
        if run.max_abs_diff is not None:
            worst = max(run.max_abs_diff.values(), default=0.0)
            print(f"outputs match the whole model: {'yes' if ok else 'NO'} (max abs diff {worst:.3g})")
    return 0 if ok else 1
