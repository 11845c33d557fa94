"""Run a split model as a real pipeline on this CPU: one worker process per sub-model, each with one
onnxruntime session on one thread, queues between them.

The sub-models run as a chain in their run order (the order of :func:`placement.onnx_export.split_model`,
a topological order of their dependencies). A message carries one sample's tensors that some later
sub-model or the model's outputs still need; each worker takes what it reads, adds what it computes,
drops what nobody after it needs and passes the rest on. The parent feeds every sample at once (so the
first stage never starves), collects the outputs from the last queue and times the whole stream after
one warm-up sample has gone through every stage.

:func:`predicted_time_per_sample` gives the cost model's view of the same pipeline from the result
file: the simulated streaming schedule of its stages (each stage's load from the result, in the
result's time unit) — steady state and for the number of samples run.

Nothing here prints.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError

from ._interrupt import deferred

__all__ = ["PipelineRun", "run_pipeline", "predicted_time_per_sample", "Prediction"]


@dataclass(frozen=True)
class PipelineRun:
    """What a pipelined run measured."""

    samples: int
    workers: int
    wall_s: float  # from the first sample in to the last sample out (after the warm-up sample)
    busy_s: tuple[float, ...]  # per worker: time spent in session.run over the timed samples
    max_abs_diff: Mapping[str, float] | None  # outputs vs the whole model on the same inputs

    @property
    def throughput(self) -> float:
        """Samples per second."""
        return self.samples / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def ms_per_sample(self) -> float:
        return 1e3 * self.wall_s / self.samples

    @property
    def stage_ms(self) -> tuple[float, ...]:
        """Mean compute time per sample of each worker (ms)."""
        return tuple(1e3 * b / self.samples for b in self.busy_s)

    @property
    def utilisation(self) -> tuple[float, ...]:
        return tuple(b / self.wall_s if self.wall_s > 0 else 0.0 for b in self.busy_s)


def _worker(k: int, model_bytes: bytes, inputs: list[str], keep: list[str], threads: int, optimize: bool,
            inq, outq, statq) -> None:  # pragma: no cover - runs in a child process
    import signal

    # Ctrl-C is the parent's to handle: it stops the workers (they start with SIGINT blocked, see
    # _start_workers; ignoring it too keeps it so if a library unblocks it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from placement.onnx_export import session

    try:
        sess = session(model_bytes, threads=threads, optimize=optimize)
        names = [o.name for o in sess.get_outputs()]
        keep_set = set(keep)
        busy = 0.0
        count = 0
        statq.put(("ready", k, None))
        while True:
            msg = inq.get()
            if msg is None:
                outq.put(None)
                break
            i, env = msg
            t0 = time.perf_counter()
            vals = sess.run(names, {x: env[x] for x in inputs})
            dt = time.perf_counter() - t0
            if i >= 0:
                busy += dt
                count += 1
            env.update(zip(names, vals))
            outq.put((i, {x: v for x, v in env.items() if x in keep_set}))
        statq.put(("stats", k, (busy, count)))
    except Exception as e:  # report, and keep the pipeline from hanging
        statq.put(("error", k, f"{type(e).__name__}: {str(e)[:400]}"))
        outq.put(None)


def run_inputs(model, submodels: Sequence, *, seed: int, dims: Mapping | None, batch_size: int | None,
               threads: int = 1, optimize: bool = False, check: bool = True):
    """What a run of the split ``model`` feeds the workers: the sub-models with the generated weights
    filled in, two random input samples, and (``check``) the whole model's outputs for them, to compare
    the pipeline's with. Returns ``(parts, feeds, reference)``."""
    from .onnx_export import generated_weights, materialize, random_feeds, session

    weights = generated_weights(model, seed=seed)
    whole = materialize(model, weights)
    parts = [materialize(m, weights) for m in submodels]
    sess = session(whole, optimize=optimize, threads=threads)
    feeds = [random_feeds(whole, sess, seed=seed + i, dims=dims, batch_size=batch_size) for i in range(2)]
    reference = None
    if check:
        names = [o.name for o in sess.get_outputs()]
        reference = [dict(zip(names, sess.run(names, f))) for f in feeds]
    return parts, feeds, reference


def run_pipeline(models: Sequence, manifest: Mapping, feeds: Sequence[Mapping[str, np.ndarray]], *,
                 samples: int, threads: int = 1, optimize: bool = False,
                 reference: Sequence[Mapping[str, np.ndarray]] | None = None,
                 timeout: float = 600.0) -> PipelineRun:
    """Run ``samples`` samples (cycling through ``feeds``) through the sub-models ``models`` as listed in
    ``manifest`` (see :mod:`placement.onnx_export`). ``optimize``: onnxruntime graph optimisations
    (off by default, as when profiling costs, so that each operator runs as measured). ``reference``:
    the whole model's outputs for each feed; when given, every sample's outputs are compared with
    them (``max_abs_diff``)."""
    if samples < 1:
        raise InputError(f"the number of samples must be at least 1, got {samples}")
    if not feeds:
        raise InputError("no inputs to run")
    subs = list(manifest["submodels"])
    if len(subs) != len(models):
        raise InputError(f"the manifest lists {len(subs)} sub-models but {len(models)} were given")
    outputs = list(manifest["outputs"])
    keep_after = []
    for k in range(len(subs)):
        later = set(outputs)
        for s in subs[k + 1:]:
            later.update(s["inputs"])
        keep_after.append(sorted(later))
    ctx = mp.get_context("spawn")
    queues = [ctx.Queue() for _ in range(len(subs) + 1)]
    statq = ctx.Queue()
    procs = []
    try:
        _start_workers(ctx, procs, [(k, m if isinstance(m, bytes) else m.SerializeToString(),
                                     list(s["inputs"]), keep_after[k], threads, optimize, queues[k],
                                     queues[k + 1], statq) for k, (m, s) in enumerate(zip(models, subs))])
        deadline = time.monotonic() + timeout
        ready = 0
        while ready < len(procs):
            kind, k, info = _get(statq, deadline, procs)
            if kind == "error":
                raise InputError(f"sub-model {k} could not start: {info}")
            ready += 1
        feed_list = [dict(f) for f in feeds]
        # warm-up: one sample through every stage
        _put(queues[0], (-1, dict(feed_list[0])))
        _collect(queues[-1], 1, deadline, procs, statq)
        t0 = time.perf_counter()
        for i in range(samples):
            _put(queues[0], (i, dict(feed_list[i % len(feed_list)])))
        results = _collect(queues[-1], samples, deadline, procs, statq)
        wall = time.perf_counter() - t0
        _put(queues[0], None)
        busy = [0.0] * len(procs)
        got = 0
        while got < len(procs):
            kind, k, info = _get(statq, deadline, procs)
            if kind == "stats":
                busy[k] = info[0]
                got += 1
            elif kind == "error":
                raise InputError(f"sub-model {k} failed: {info}")
        for p in procs:
            p.join(timeout=10)
    finally:
        _stop(procs, queues + [statq])
    diff = None
    if reference is not None:
        diff = {}
        for i, env in results.items():
            r = reference[i % len(reference)]
            for x in outputs:
                a, b = np.asarray(r[x], dtype=np.float64), np.asarray(env[x], dtype=np.float64)
                d = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else (
                    0.0 if a.shape == b.shape else math.inf)
                diff[x] = max(diff.get(x, 0.0), d)
    return PipelineRun(samples, len(procs), wall, tuple(busy), diff)


def _start_workers(ctx, procs: list, arglists: list, target=None) -> None:
    """Start one worker per argument tuple, appending each to ``procs`` as soon as it runs. SIGINT is
    blocked in this thread while each starts: the children inherit the mask, so a Ctrl-C at the terminal
    (sent to the whole process group) reaches only this process, which stops them; a Ctrl-C meanwhile is
    delivered here once the worker being started is in ``procs``, and no further worker is started."""
    import signal

    mask = getattr(signal, "pthread_sigmask", None)
    for args in arglists:
        # deferred(): the process's other threads (onnxruntime's) still take a Ctrl-C meant for it, and
        # the command's handler must not raise between a child's start and its entry in ``procs``. One
        # block per worker, not one for all: a start takes up to a second on a busy machine (the child
        # must start Python before it reads the model sent to it), so holding a Ctrl-C back for all of
        # them kept it waiting up to 4.5 s
        with deferred():
            old = mask(signal.SIG_BLOCK, {signal.SIGINT}) if mask else None
            try:
                p = ctx.Process(target=target or _worker, args=args, daemon=True)
                p.start()
                procs.append(p)
            finally:
                if mask:
                    mask(signal.SIG_SETMASK, old)


def _stop(procs: list, queues: list) -> None:
    """Stop and join every worker and let the queues go without waiting on their feeder threads (after
    an error or Ctrl-C, a feeder may be blocked writing to a pipe nobody reads: joining it at exit
    would hang). A second Ctrl-C waits until this is done (see placement._interrupt)."""

    with deferred():
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():  # pragma: no cover - a worker stuck in native code
                p.kill()
                p.join(timeout=5)
        for q in queues:
            q.cancel_join_thread()
            q.close()


def _put(q, item) -> None:
    """``q.put(item)`` with Ctrl-C held back until it returns: a KeyboardInterrupt raised inside the
    queue's lock (a window of a few bytecodes) would leave it held, and stopping the workers, which
    closes the queue under that lock, would then hang."""
    with deferred():
        q.put(item)


def _get(q, deadline, procs, statq=None, who=str):
    """The next item on ``q``. While none comes, the wait ends in an :class:`InputError` at the deadline,
    when a worker has died, or (``statq`` given) when a worker reports an error; ``who`` names the
    worker of a report."""
    import queue

    while True:
        try:
            with deferred():
                return q.get(timeout=0.5)
        except queue.Empty:
            pass
        if statq is not None:
            try:
                with deferred():
                    kind, k, info = statq.get_nowait()
                if kind == "error":
                    raise InputError(f"sub-model {who(k)} failed: {info}")
            except queue.Empty:
                pass
        if time.monotonic() > deadline:
            raise InputError("the pipeline did not finish in time") from None
        dead = [k for k, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
        if dead:
            code = procs[dead[0]].exitcode
            raise InputError(f"pipeline worker {dead[0]} died (exit code {code})") from None


def _collect(q, n: int, deadline, procs, statq) -> dict:
    out = {}
    while len(out) < n:
        msg = _get(q, deadline, procs, statq)
        if msg is None:
            kind, k, info = _get(statq, deadline, procs)
            raise InputError(f"sub-model {k} failed: {info}")
        i, env = msg
        out[i] = env
    return out


# --------------------------------------------------------------------------- the cost model's view
@dataclass(frozen=True)
class Prediction:
    """The cost model's throughput for the pipeline, in the result's time unit (ms for ONNX)."""

    steady_time_per_sample: float
    time_per_sample: float  # for the number of samples asked (fill and drain included)
    makespan: float
    stage_loads: tuple[float, ...]


def predicted_time_per_sample(result: Mapping, samples: int) -> Prediction:
    """Simulate the result's stages as a streaming chain in stage order (loads as the result gives
    them: compute plus communication) for ``samples`` samples."""
    from .simulate import StageCosts, simulate_costs

    devs = [d for d in result["devices"] if d.get("nodes")]
    if not devs:
        raise InputError("the result places nothing")
    ordered = sorted(devs, key=lambda d: (d.get("stage") is None, d.get("stage") or 0))
    stages = []
    for k, d in enumerate(ordered):
        stages.append(StageCosts(k, int(d.get("device", k)), d["name"], d.get("kind", ""),
                                 float(d.get("compute") or 0.0), 0.0, float(d.get("comm_in") or 0.0), 0.0,
                                 float(d.get("comm_out") or 0.0), 0.0,
                                 deps=((("F", k - 1, "F"),) if k else ())))
    sim = simulate_costs(stages, schedule="stream", microbatches=samples)
    return Prediction(sim.steady_time_per_sample, sim.time_per_sample, sim.makespan,
                      tuple(s.load for s in stages))
