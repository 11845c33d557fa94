"""Run a split model as a real pipeline on this CPU: one worker process per replica of each sub-model
(one per sub-model for a one-device-per-stage placement, ``d`` for a stage of ``d`` replicas), each with
one onnxruntime session on one thread, queues between them. A tensor-parallel stage of degree ``t``
(:mod:`placement.tensor_parallel`) runs ``t`` processes per replica, one per rank, each with a session
per segment: rank 0 takes the replica's samples and hands their inputs to the other ranks, every rank
sends the tensors of each collective to the others and combines all of them in rank order, and rank 0
sends the stage's outputs on; a replica's time is its rank 0's, collectives included.

The sub-models run as a chain in their run order (the order of :func:`placement.onnx_export.split_model`,
a topological order of their dependencies). A message carries one sample's tensors that some later
sub-model or the model's outputs still need; each worker takes what it reads, adds what it computes,
drops what nobody after it needs and passes the rest on. The parent feeds every sample at once (so the
first stage never starves), collects the outputs from the last queue and times the whole stream after
warm-up samples have gone through every replica. The ``k``-th sample fed is taken by replica ``k mod d``
of every stage of ``d`` replicas (samples from different upstream replicas may arrive out of order; each
is independent).

:func:`rescored_time_per_sample` gives the cost model's view of the same pipeline: the simulated
streaming schedule of its stages — steady state and for the number of samples run — each stage's load
as the evaluator scores the plan the result file gives now (a plan edited by hand as edited), on the
workload rebuilt as the result was placed; :func:`rescored_stage_plan` the same for a stage plan, from
the stage evaluator's time per sample of each stage. :func:`predicted_time_per_sample` and
:func:`predicted_stage_plan` use the figures the result records instead, for a result that records too
little to rebuild its workload.

A "sample" of :class:`PipelineRun` and :class:`Prediction` is one run of the model: a batch of the
batch size the model was placed at (:func:`placement.results.recorded_input_shape`).
:func:`run_report` turns both into figures per batch and per sample, and :func:`format_run_summary`
into the lines ``placement run`` prints.

Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphs.errors import InputError

from ._interrupt import deferred

if TYPE_CHECKING:
    from graphs.model import OpGraph
    from graphs.parallel import ParallelProblem, PlanEvaluation, Stage

    from .stages import StageWorkload

__all__ = ["PipelineRun", "run_pipeline", "predicted_time_per_sample", "predicted_stage_plan", "Prediction",
           "rescored_time_per_sample", "rescored_stage_plan", "run_report",
           "format_run_summary", "describe_runs", "stage_plan_prediction", "checked_stage_plan",
           "CheckedStagePlan"]


@dataclass(frozen=True)
class PipelineRun:
    """What a pipelined run measured. Per sub-model (stage), per replica: ``busy_s`` the time spent in
    ``session.run`` over the timed samples, ``taken`` the timed samples it ran. A sample here is one run
    of the model, at whatever batch size the feeds have."""

    samples: int
    replicas: tuple[int, ...]  # per sub-model (1: one worker)
    wall_s: float  # from the first sample in to the last sample out (after the warm-up samples)
    busy_s: tuple[tuple[float, ...], ...]
    taken: tuple[tuple[int, ...], ...]
    max_abs_diff: Mapping[str, float] | None  # outputs vs the whole model on the same inputs
    #: per sub-model, its tensor-parallel degree ``t`` (each replica is ``t`` worker processes); empty: all 1
    tensor_parallel: tuple[int, ...] = ()

    @property
    def workers(self) -> int:
        tp = self.tensor_parallel or (1,) * len(self.replicas)
        return sum(d * t for d, t in zip(self.replicas, tp))

    @property
    def throughput(self) -> float:
        """Samples per second."""
        return self.samples / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def ms_per_sample(self) -> float:
        return 1e3 * self.wall_s / self.samples

    @property
    def stage_ms(self) -> tuple[float, ...]:
        """Per sub-model: its replicas' compute time per sample of the stream (ms), i.e. the stage's time
        per sample with its replicas side by side (one worker: its mean compute time per sample)."""
        return tuple(1e3 * sum(b) / len(b) / self.samples for b in self.busy_s)

    @property
    def utilisation(self) -> tuple[float, ...]:
        """Per sub-model: the share of the wall time its replicas computed (their mean)."""
        return tuple(sum(b) / len(b) / self.wall_s if self.wall_s > 0 else 0.0 for b in self.busy_s)


def _worker(k: int, r: int, inputs: list[str], keep: list[str], threads: int,
            optimize: bool, upstream: int, inq, outqs, statq) -> None:  # pragma: no cover - child process
    """Replica ``r`` of sub-model ``k``: takes its model (serialised) as the first message on ``inq``,
    then runs each sample that comes on ``inq`` and sends it on to the replica of the next sub-model
    that takes it (``outqs``, round robin by the sample's sequence number); it stops after a stop from
    each of its ``upstream`` senders."""
    import signal

    # Ctrl-C is the parent's to handle: it stops the workers (they start with SIGINT blocked, see
    # _start_workers; ignoring it too keeps it so if a library unblocks it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from placement.onnx_export import session

    try:
        model_bytes = inq.get()  # sent after the start, not with it: see _start_workers
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


def _tp_worker(k: int, q: int, r: int, tp: dict, inputs: list[str], keep: list[str],
               threads: int, optimize: bool, upstream: int, inq, rank_qs, collqs, outqs,
               statq) -> None:  # pragma: no cover - child process
    """Rank ``r`` of replica ``q`` of the tensor-parallel sub-model ``k`` (``tp``: its manifest entry):
    takes its segments (serialised models) as the first message on ``inq``, runs them, and between them
    sends the tensors of each collective to the other ranks (``collqs[r2]``: rank ``r2``'s inbox) and
    combines theirs with its own in rank order. Rank 0 takes the samples from upstream (``inq``), hands
    each one's inputs to the other ranks (``rank_qs``) and sends the stage's outputs on; the other ranks
    take their samples from rank 0."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from placement.onnx_export import session
    from placement.tensor_parallel import combine

    try:
        t = int(tp["degree"])
        segments = inq.get()  # sent after the start, not with it: see _start_workers
        sessions = [session(b, threads=threads, optimize=optimize) for b in segments]
        outs = [[o.name for o in sess.get_outputs()] for sess in sessions]
        segs = tp["segments"]
        after = [[(ci, c) for ci, c in enumerate(tp["collectives"]) if c["after"] == j]
                 for j in range(len(segs))]
        pending: dict = {}  # (seq, collective, sender) -> tensor, arrived ahead of its turn
        keep_set = set(keep)
        busy, count, stops = 0.0, 0, 0

        def program(seq: int, feeds: dict) -> dict:
            env = dict(feeds)
            for j, sess in enumerate(sessions):
                env.update(zip(outs[j], sess.run(outs[j], {x: env[x] for x in segs[j]["inputs"]})))
                for ci, c in after[j]:
                    mine = env[c["input"]]
                    for r2 in range(t):
                        if r2 != r:
                            collqs[r2].put((seq, ci, r, mine))
                    parts = {r: mine}
                    for r2 in range(t):
                        while r2 not in parts:
                            key = (seq, ci, r2)
                            if key in pending:
                                parts[r2] = pending.pop(key)
                                continue
                            s2, c2, sender, x = collqs[r].get()
                            pending[(s2, c2, sender)] = x
                    env[c["output"]] = combine(c, [parts[r2] for r2 in range(t)])
            return env

        statq.put(("ready", (k, q, r), None))
        while True:
            msg = inq.get()
            if msg is None:
                stops += 1
                if r == 0 and stops < upstream:
                    continue
                for rq in rank_qs:
                    rq.put(None)
                for oq in outqs:
                    oq.put(None)
                break
            seq, i, env = msg
            feeds = {x: env[x] for x in inputs}
            for rq in rank_qs:
                rq.put((seq, i, feeds))
            t0 = time.perf_counter()
            got = program(seq, feeds)
            dt = time.perf_counter() - t0
            if i >= 0:
                busy += dt
                count += 1
            if r == 0:
                env.update({x: got[x] for x in tp["outputs"]})
                outqs[seq % len(outqs)].put((seq, i, {x: v for x, v in env.items() if x in keep_set}))
        statq.put(("stats", (k, q, r), (busy, count)))
    except Exception as e:  # report, and keep the pipeline from hanging
        statq.put(("error", (k, q, r), f"{type(e).__name__}: {str(e)[:400]}"))
        for oq in outqs:
            oq.put(None)


def run_inputs(model, submodels: Sequence, *, seed: int, dims: Mapping | None, batch_size: int | None,
               threads: int = 1, optimize: bool = False, check: bool = True, manifest: Mapping | None = None):
    """What a run of the split ``model`` feeds the workers: the sub-models with the generated weights
    filled in, two random input samples, and (``check``) the whole model's outputs for them, to compare
    the pipeline's with. A tensor-parallel stage's sub-model is its models rank by segment; each rank
    gets its chunks of the generated weights the split sliced, as ``manifest`` lists them (needed when
    there is such a stage). Returns ``(parts, feeds, reference)``."""
    from .onnx_export import check_shapes_at, generated_weights, materialize, random_feeds, session
    from .tensor_parallel import rank_weights

    weights = generated_weights(model, seed=seed)
    whole = materialize(model, weights)
    entries = list(manifest["submodels"]) if manifest is not None else [{}] * len(submodels)
    parts = []
    for m, e in zip(submodels, entries):
        tp = e.get("tensor_parallel")
        if tp:
            rw = [rank_weights(weights, tp, r) for r in range(len(m))]
            parts.append(tuple(tuple(materialize(seg, rw[r]) for seg in segs) for r, segs in enumerate(m)))
        elif isinstance(m, (tuple, list)):
            raise InputError("a tensor-parallel sub-model needs its manifest entry to be run")
        else:
            parts.append(materialize(m, weights))
    sess = session(whole, optimize=optimize, threads=threads)
    feeds = [random_feeds(whole, sess, seed=seed + i, dims=dims, batch_size=batch_size) for i in range(2)]
    if manifest is not None:
        check_shapes_at(model, manifest, feeds[0])
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
    ``manifest`` (see :mod:`placement.onnx_export`), each with the manifest's ``replicas`` worker
    processes (1 when absent: one device per stage). The ``k``-th sample fed (the warm-up samples
    first) is taken by replica ``k mod d`` of every stage of ``d`` replicas; enough warm-up samples go
    first to reach every replica. ``optimize``: onnxruntime graph optimisations (off by default, as when
    profiling costs, so that each operator runs as measured). ``reference``: the whole model's outputs
    for each feed; when given, every sample's outputs are compared with them (``max_abs_diff``)."""
    if samples < 1:
        raise InputError(f"the number of samples must be at least 1, got {samples}")
    if not feeds:
        raise InputError("no inputs to run")
    subs = list(manifest["submodels"])
    if len(subs) != len(models):
        raise InputError(f"the manifest lists {len(subs)} sub-models but {len(models)} were given")
    reps = [s.get("replicas", 1) for s in subs]
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in reps):
        raise InputError("every sub-model needs a whole number of replicas, at least one")
    tps = [int((s.get("tensor_parallel") or {}).get("degree", 1)) for s in subs]
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
    arglists = []  # (target, args, (queue, model)): the model is sent on the queue once the worker runs
    extra_qs = []
    for k, (m, s) in enumerate(zip(models, subs)):
        outqs = inq[k + 1] if k + 1 < len(subs) else [done]
        upstream = reps[k - 1] if k else 1
        if tps[k] == 1:
            data = m if isinstance(m, bytes) else m.SerializeToString()
            arglists += [(_worker, (k, r, list(s["inputs"]), keep_after[k], threads, optimize, upstream,
                                    inq[k][r], outqs, statq), (inq[k][r], data)) for r in range(reps[k])]
            continue
        t = tps[k]
        if len(m) != t:
            raise InputError(f"sub-model {k} is tensor-parallel of degree {t} but {len(m)} rank models were "
                             f"given")
        tp = {**s["tensor_parallel"], "outputs": list(s["outputs"])}
        segs = [[x if isinstance(x, bytes) else x.SerializeToString() for x in rank] for rank in m]
        for q in range(reps[k]):
            rank_qs = [ctx.Queue() for _ in range(t - 1)]
            collqs = [ctx.Queue() for _ in range(t)]
            extra_qs += rank_qs + collqs
            for r in range(t):
                first = inq[k][q] if r == 0 else rank_qs[r - 1]
                arglists.append((_tp_worker, (k, q, r, tp, list(s["inputs"]), keep_after[k], threads,
                                              optimize, upstream, first, rank_qs if r == 0 else [], collqs,
                                              outqs if r == 0 else [], statq), (first, segs[r])))

    def who(w) -> str:  # a worker in messages: its sub-model, its replica and rank where there are several
        out = f"{w[0]}" if reps[w[0]] == 1 else f"{w[0]} (replica {w[1]})"
        return out + (f" rank {w[2]}" if len(w) > 2 else "")

    try:
        _start_workers(ctx, procs, arglists)
        deadline = time.monotonic() + timeout
        for _ in procs:
            kind, w, info = _get(statq, deadline, procs)
            if kind == "error":
                raise InputError(f"sub-model {who(w)} could not start: {info}")
        feed_list = [dict(f) for f in feeds]
        warm = max(reps)  # one warm-up sample per replica of the widest stage reaches every replica
        for seq in range(warm):
            _put(inq[0][seq % reps[0]], (seq, -1 - seq, dict(feed_list[0])))
        _collect(done, warm, deadline, procs, statq, who)
        t0 = time.perf_counter()
        for i in range(samples):
            seq = warm + i
            _put(inq[0][seq % reps[0]], (seq, i, dict(feed_list[i % len(feed_list)])))
        results = _collect(done, samples, deadline, procs, statq, who)
        wall = time.perf_counter() - t0
        for q in inq[0]:
            _put(q, None)
        busy = [[0.0] * d for d in reps]
        taken = [[0] * d for d in reps]
        for _ in procs:
            kind, w, info = _get(statq, deadline, procs)
            if kind == "error":
                raise InputError(f"sub-model {who(w)} failed: {info}")
            if len(w) == 2 or w[2] == 0:  # a tensor-parallel replica's time is its rank 0's
                busy[w[0]][w[1]], taken[w[0]][w[1]] = info
        for p in procs:
            p.join(timeout=10)
    finally:
        _stop(procs, [q for qs in inq for q in qs] + extra_qs + [done, statq])
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
    return PipelineRun(samples, tuple(reps), wall, tuple(tuple(b) for b in busy),
                       tuple(tuple(t) for t in taken), diff, tuple(tps))


def _start_workers(ctx, procs: list, arglists: list) -> None:
    """Start one worker per ``(target, arguments)`` or ``(target, arguments, (queue, model))`` entry,
    appending each to ``procs`` as soon as it runs, then putting ``model`` on ``queue`` (the worker's
    first message). SIGINT is blocked in this thread while each starts: the children inherit the mask,
    so a Ctrl-C at the terminal (sent to the whole process group) reaches only this process, which
    stops them; a Ctrl-C meanwhile is delivered here once the worker being started is in ``procs``, and
    no further worker is started."""
    import signal

    mask = getattr(signal, "pthread_sigmask", None)
    for target, args, *payload in arglists:
        # deferred(): the process's other threads (onnxruntime's) still take a Ctrl-C meant for it, and
        # the command's handler must not raise between a child's start and its entry in ``procs``. One
        # block per worker, not one for all, and short: the model goes on the worker's queue, not in
        # start()'s arguments. start() writes its arguments into a pipe the child reads only once its
        # Python is up (0.4-1.5 s on a busy machine); with the model (megabytes, far over the pipe's 64
        # KiB) among them, each start blocked that long with the Ctrl-C held, and exits took 2-2.8 s
        with deferred():
            old = mask(signal.SIG_BLOCK, {signal.SIGINT}) if mask else None
            try:
                p = ctx.Process(target=target, args=args, daemon=True)
                p.start()
                procs.append(p)
                for q, model in payload:
                    # the queue's feeder thread writes it, while the child starts; that thread starts
                    # here, with SIGINT blocked as it is in this one: one thread fewer to take a Ctrl-C
                    # that this one must see
                    q.put(model)
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


#: the slices of the parent's waits on its queues. Each is a deferred() block: a Ctrl-C that comes in it
#: is delivered at its end. A Ctrl-C goes to whichever thread of the process does not block it, often one
#: of onnxruntime's, which does not wake this one from its wait: with slices of 0.5 s it waited up to
#: 0.5 s (and more on a busy machine) before the workers were stopped
_WAIT_S = 0.05


def _get(q, deadline, procs, statq=None, who=str):
    """The next item on ``q``. While none comes, the wait ends in an :class:`InputError` at the deadline,
    when a worker has died, or (``statq`` given) when a worker reports an error; ``who`` names the
    worker of a report."""
    import queue

    # queue.Empty is caught inside each deferred block, not outside: a block that ends in an exception
    # drops the Ctrl-C it held (it does not replace an error in flight), and Empty is no error here. A
    # Ctrl-C during a wait that timed out was lost so; two of them lost while the workers loaded, and
    # run went on feeding its samples as if no Ctrl-C had come (seen as a hang in _put)
    while True:
        with deferred():
            try:
                return q.get(timeout=_WAIT_S)
            except queue.Empty:
                pass
        if statq is not None:
            with deferred():
                try:
                    kind, k, info = statq.get_nowait()
                except queue.Empty:
                    kind = None
            if kind == "error":
                raise InputError(f"sub-model {who(k)} failed: {info}")
        if time.monotonic() > deadline:
            raise InputError("the pipeline did not finish in time") from None
        dead = [k for k, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
        if dead:
            code = procs[dead[0]].exitcode
            raise InputError(f"pipeline worker {dead[0]} died (exit code {code})") from None


def _collect(q, n: int, deadline, procs, statq, who=str) -> dict:
    """``n`` finished samples from the last stage's queue (warm-up ones included in the count)."""
    out = {}
    while len(out) < n:
        msg = _get(q, deadline, procs, statq, who=who)
        if msg is None:  # a worker failed: it reports why, then stops the stream
            kind, w, info = _get(statq, deadline, procs)
            raise InputError(f"sub-model {who(w)} failed: {info}" if kind == "error" else
                             "a pipeline worker stopped early")
        _, i, env = msg
        out[i] = env
    return out


# --------------------------------------------------------------------------- the cost model's view
@dataclass(frozen=True)
class Prediction:
    """The cost model's throughput for the pipeline in ms (the result's time unit for a one-device-per-stage
    plan of an ONNX model), per run of the model (one batch)."""

    steady_time_per_sample: float
    time_per_sample: float  # for the number of samples asked (fill and drain included)
    makespan: float
    stage_loads: tuple[float, ...]
    #: a training plan's forward pass alone (what ``run`` executes), not its forward and backward passes
    forward_only: bool = False


def predicted_time_per_sample(result: Mapping, samples: int) -> Prediction:
    """Simulate the result's stages as a streaming chain in stage order (loads as the result records
    them: compute plus communication) for ``samples`` samples. These are the figures of the plan the
    result was written for: :func:`rescored_time_per_sample` scores the plan as it stands."""
    devs = [d for d in result["devices"] if d.get("nodes")]
    if not devs:
        raise InputError("the result places nothing")
    ordered = sorted(devs, key=lambda d: (d.get("stage") is None, d.get("stage") or 0))
    return _stream_chain([(int(d.get("device", k)), d["name"], d.get("kind", ""),
                           float(d.get("compute") or 0.0), float(d.get("comm_in") or 0.0),
                           float(d.get("comm_out") or 0.0)) for k, d in enumerate(ordered)], samples)


def _stream_chain(rows: Sequence[tuple[int, str, str, float, float, float]], samples: int) -> Prediction:
    """The streaming simulation of a chain of stages, each ``(device, name, kind, compute, comm_in,
    comm_out)``, in the given order (each receives from the one before), for ``samples`` samples."""
    from .simulate import StageCosts, simulate_costs

    stages = [StageCosts(k, dev, name, kind, compute, 0.0, comm_in, 0.0, comm_out, 0.0,
                         deps=((("F", k - 1, "F"),) if k else ()))
              for k, (dev, name, kind, compute, comm_in, comm_out) in enumerate(rows)]
    sim = simulate_costs(stages, schedule="stream", microbatches=samples)
    return Prediction(sim.steady_time_per_sample, sim.time_per_sample, sim.makespan,
                      tuple(s.load for s in stages))


def _differs(recorded, now: float) -> bool:
    """A recorded figure (``None`` where the result wrote an infinite one) that is not ``now``'s beyond
    round-off."""
    if not isinstance(recorded, (int, float)) or isinstance(recorded, bool):
        return math.isfinite(now)
    return not math.isclose(float(recorded), now, rel_tol=1e-9, abs_tol=1e-12)


def _broken(problems: Sequence[str]) -> list[str]:
    """The note on a re-scored plan's broken constraints (none: no note), for both models."""
    if not problems:
        return []
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    return [f"the plan breaks the cost model's constraints: {'; '.join(problems[:3])}{more}"]


def rescored_time_per_sample(result: Mapping, graph, cluster, samples: int, *,
                             order: Sequence[str] | None = None, unit: str = "ms", forward_only: bool = False
                             ) -> tuple[Prediction, list[str]]:
    """:func:`predicted_time_per_sample` of the plan as the result's ``devices[].nodes`` give it now, each
    device's load as :func:`graphs.evaluate.evaluate` scores it on ``graph`` and ``cluster`` (the workload
    rebuilt as the result was placed), not as the result records it: a hand-edited plan is predicted as
    edited. The chain runs in ``order`` (the result's device names in the run's order; default the
    evaluator's pipeline order, else device order). Also returns notes (``unit``: the loads' unit):
    one per device whose recorded load is not the plan's, and the plan's broken constraints.
    ``forward_only``: a training plan's forward pass alone, each device's forward load
    (:func:`graphs.evaluate.split_loads`: its forward operators and the tensors they send and receive),
    what ``run`` executes."""
    from graphs.evaluate import evaluate, split_loads

    from .results import assignment_from_result

    a = assignment_from_result(result, graph, cluster)
    ev = evaluate(graph, cluster, a)
    index = {name: i for i, name in enumerate(graph.names)}
    number = {d["name"]: int(a[index[str(d["nodes"][0])]]) for d in result["devices"] if d.get("nodes")}
    if order is None:
        by_number = {n: name for name, n in number.items()}
        seq = list(ev.stage_order) if ev.stage_order is not None else sorted(by_number)
        order = [by_number[n] for n in seq]
    missing = [x for x in order if x not in number]
    if missing:
        raise InputError(f"device(s) {', '.join(missing)} of the run hold no node of the plan")
    loads = [ev.devices[number[x]] for x in order]
    bad = [d.name for d in loads if not math.isfinite(d.load)]
    if bad:
        why = "; ".join(ev.problems) or f"infinite load on {bad[0]}"
        raise InputError(f"the plan cannot be scored: {why}")
    notes = []
    for d in result["devices"]:
        now = ev.devices[number[d["name"]]].load if d["name"] in number else 0.0  # no node: no load
        rec = d.get("load", "?")
        if rec == "?":  # an older file: its parts
            parts = [d.get(k) for k in ("compute", "comm_in", "comm_out")]
            rec = sum(parts) if all(isinstance(x, (int, float)) for x in parts) else None
        if _differs(rec, now):
            was = "none" if rec is None else f"{rec:.6g} {unit}"
            notes.append(f"the result's recorded load of {d['name']} ({was}) is not its plan's "
                         f"({now:.6g} {unit}): predicted from the plan")
    notes += _broken(ev.problems)
    if forward_only:
        fwd, _ = split_loads(graph, cluster, a)
        rows = [(d.device, d.name, d.kind, float(fwd[d.device]), 0.0, 0.0) for d in loads]
        return dataclasses.replace(_stream_chain(rows, samples), forward_only=True), notes
    rows = [(d.device, d.name, d.kind, d.compute, d.comm_in, d.comm_out) for d in loads]
    return _stream_chain(rows, samples), notes


_TO_MS = {"ms": 1.0, "s": 1e3}


def predicted_stage_plan(result: Mapping, samples: int, batch_size: int = 1) -> Prediction:
    """The stage evaluator's view of running a stage plan for ``samples`` runs of the model at
    ``batch_size``, in ms per run: each stage's recorded ``time_per_sample`` (its replicas side by side,
    :func:`graphs.parallel.evaluate_plan`'s) times the batch size; a replica of a stage of ``d`` takes
    ``d`` times that per run, and runs are dealt round robin as :func:`run_pipeline` deals them. The
    steady state is the busiest stage's (the plan's time per sample, times the batch size). These are
    the figures of the plan the result was written for: :func:`rescored_stage_plan` scores the plan as it
    stands."""
    stages = list(result.get("stages") or ())
    if not stages or any(s.get("time_per_sample") is None for s in stages):
        raise InputError("the stage plan records no time per sample for its stages")
    unit = result.get("time_unit", "s")
    if unit not in _TO_MS:
        raise InputError(f"the stage plan's time unit is {unit!r}, not seconds or milliseconds")
    loads = [_TO_MS[unit] * batch_size * float(s["time_per_sample"]) for s in stages]
    reps = [int(s.get("dataParallelDegree") or 1) for s in stages]
    return _dealt_stream(loads, reps, samples)


def _dealt_stream(loads: Sequence[float], reps: Sequence[int], samples: int) -> Prediction:
    """``samples`` runs through stages of ``loads`` ms per run (replicas side by side) with ``reps``
    replicas each, runs dealt round robin and all fed at once."""
    if not loads or len(loads) != len(reps):
        raise InputError(f"a pipeline needs one load and one replica count per stage, got {len(loads)} "
                         f"load(s) and {len(reps)} replica count(s)")
    free = [[0.0] * d for d in reps]  # when each replica is next free
    end = 0.0
    for k in range(samples):
        t = 0.0  # every run is fed at once: it waits only for its replicas
        for i, (x, d) in enumerate(zip(loads, reps)):
            t = max(t, free[i][k % d]) + d * x
            free[i][k % d] = t
        end = max(end, t)
    return Prediction(max(loads), end / samples, end, tuple(loads))


def rescored_stage_plan(result: Mapping, problem, plan: Sequence, samples: int, batch_size: int = 1
                        ) -> tuple[Prediction, list[str]]:
    """:func:`predicted_stage_plan` of ``plan`` (the result's stages as they stand, read on the rebuilt
    ``problem`` by :func:`placement.stages.plan_from_dict`), each stage's time per sample as
    :func:`graphs.parallel.evaluate_plan` scores it, not as the result records it: a hand-edited stage
    (its nodes, ``d`` or ``t``) is predicted as edited. Also returns notes: one per stage whose recorded
    time per sample is not the plan's, and the plan's broken constraints."""
    from graphs.parallel import evaluate_plan

    ev = evaluate_plan(problem, plan)
    times = [s.time_per_sample for s in ev.stages]
    # a plan the evaluator does not read (a degree that does not divide the micro-batches) gets no stages
    if len(times) != len(plan) or not all(math.isfinite(x) for x in times):
        raise InputError(f"the plan cannot be scored: {'; '.join(ev.problems) or 'a stage takes forever'}")
    to_ms = 1e3 * batch_size  # the evaluator's times are seconds per sample
    notes = []
    recorded = list(result.get("stages") or ())
    for i, (s, st, now) in enumerate(zip(recorded, plan, times)):
        rec = s.get("time_per_sample") if isinstance(s, Mapping) else None
        if rec is not None and _differs(rec, now):
            on = s.get("devices")  # named where they still fit the stage (d * t of them), as the split does
            fit = isinstance(on, list) and len(on) == st.d * st.t
            who = f"stage {i}" + (f" ({', '.join(map(str, on))})" if fit else "")
            per = "ms per sample" if batch_size == 1 else f"ms per batch of {batch_size}"
            notes.append(f"the result's recorded time of {who} ({to_ms * float(rec):.6g} {per}) is not its "
                         f"plan's ({to_ms * now:.6g} {per}): predicted from the plan")
    notes += _broken(ev.problems)
    return _dealt_stream([to_ms * x for x in times], [st.d for st in plan], samples), notes


def forward_stage_plan(problem: ParallelProblem, plan: Sequence[Stage], graph: OpGraph, node_of: np.ndarray,
                       samples: int) -> Prediction:
    """The forward pass's part of :func:`rescored_stage_plan` for a training stage plan, in ms per run of
    the model: each stage's forward operators (``graph``, the operator graph the stage problem
    ``problem`` was built from; ``node_of``: each operator's node) and the tensors they send and receive,
    counted as the stage model counts them (:func:`graphs.evaluate.split_loads`, one device per stage),
    over its ``d`` replicas side by side; no resynchronisation of the weights (the backward pass's).
    A tensor-parallel stage (``t > 1``: its split operators' forward part and collectives are not kept
    apart in the stage model) raises :class:`InputError`."""
    from graphs.evaluate import split_loads
    from graphs.model import Cluster

    split = [i for i, st in enumerate(plan) if st.t > 1]
    if split:
        raise InputError(f"stage {split[0]} is tensor-parallel (t = {plan[split[0]].t}), whose forward part "
                         f"the stage model does not keep apart")
    kinds = problem.kinds
    on_kind = [sum(1 for st in plan if st.kind == k) for k in range(len(kinds))]
    cluster = Cluster(tuple(dataclasses.replace(k, count=max(1, c)) for k, c in zip(kinds, on_kind)))
    start = np.cumsum([0] + [max(1, c) for c in on_kind])
    device, taken = [], [0] * len(kinds)  # stage i: a device of its kind of its own
    for st in plan:
        device.append(int(start[st.kind]) + taken[st.kind])
        taken[st.kind] += 1
    stage_of = np.full(problem.graph.num_nodes, -1, np.int64)
    for i, st in enumerate(plan):
        stage_of[np.asarray(st.nodes, np.int64)] = i
    ops = stage_of[np.asarray(node_of, np.int64)]
    if (ops < 0).any():
        raise InputError("the plan leaves some operators in no stage")
    fwd, _ = split_loads(graph, cluster, np.asarray(device, np.int64)[ops])
    loads = [float(fwd[device[i]]) / st.d for i, st in enumerate(plan)]
    return dataclasses.replace(_dealt_stream(loads, [st.d for st in plan], samples), forward_only=True)


def run_report(run: PipelineRun, pred: Prediction | None, batch_size: int, *, predicted_by: str,
               training: bool = False) -> dict:
    """The figures of a run and its prediction per batch (one run of the model at ``batch_size``) and
    per sample: ``*_ms_per_batch``, ``*_ms_per_sample`` and ``*_samples_per_s`` (``batch_size`` x runs /
    time), for the stream measured and predicted (fill and drain included), and the predicted steady
    state; ``pred`` ``None``: no prediction (its fields ``None``). ``predicted_passes``: what the
    prediction covers, ``forward`` as the run (an inference plan, or a ``training`` plan's forward part,
    :attr:`Prediction.forward_only`), else ``forward and backward``: a training plan's whole step, which
    ``measured_over_predicted`` then compares with the forward pass run alone."""
    b = batch_size

    def rate(ms_per_batch: float) -> float:
        return 1e3 * b / ms_per_batch if ms_per_batch > 0 else math.inf

    doc = {"batch_size": b, "batches": run.samples, "samples": b * run.samples, "wall_s": run.wall_s,
           "measured_ms_per_batch": run.ms_per_sample, "measured_ms_per_sample": run.ms_per_sample / b,
           "measured_samples_per_s": b * run.throughput,
           "measured_stage_ms_per_batch": list(run.stage_ms), "predicted_by": predicted_by,
           "training": training, "predicted_passes": None if pred is None else
           "forward" if not training or pred.forward_only else "forward and backward"}
    keys = ("predicted_ms_per_batch", "predicted_ms_per_sample", "predicted_samples_per_s",
            "predicted_steady_ms_per_batch", "predicted_steady_ms_per_sample",
            "predicted_steady_samples_per_s", "predicted_stage_ms_per_batch", "measured_over_predicted")
    if pred is None:
        return {**doc, **dict.fromkeys(keys)}
    ratio = run.ms_per_sample / pred.time_per_sample if pred.time_per_sample > 0 else math.nan
    vals = (pred.time_per_sample, pred.time_per_sample / b, rate(pred.time_per_sample),
            pred.steady_time_per_sample, pred.steady_time_per_sample / b, rate(pred.steady_time_per_sample),
            list(pred.stage_loads), ratio)
    return {**doc, **dict(zip(keys, vals))}


def format_run_summary(doc: Mapping) -> list[str]:
    """The measured and predicted lines of ``placement run`` from :func:`run_report`'s ``doc``: per batch
    and per sample where the batch has several samples, per sample otherwise."""
    b = doc["batch_size"]

    def per(ms: float) -> str:
        if b == 1:
            return f"{ms:.3f} ms per sample"
        return f"{ms:.3f} ms per batch of {b} ({ms / b:.4g} ms/sample)"

    lines = [f"measured  {per(doc['measured_ms_per_batch'])}, {doc['measured_samples_per_s']:.2f} samples/s"]
    if doc["predicted_ms_per_batch"] is None:
        return lines + [f"predicted: none ({doc['predicted_by']})"]
    n = doc["batches"]
    runs = f"{n} {'sample' if b == 1 else 'batch'}" + ("" if n == 1 else "s" if b == 1 else "es")
    lines += [f"predicted {per(doc['predicted_ms_per_batch'])}, {doc['predicted_samples_per_s']:.2f} "
              f"samples/s for these {runs} (fill and drain included)",
              f"          steady state {per(doc['predicted_steady_ms_per_batch'])}, "
              f"{doc['predicted_steady_samples_per_s']:.2f} samples/s",
              f"          by {doc['predicted_by']}; {_ratio_words(doc)}"]
    return lines


def _ratio_words(doc: Mapping) -> str:
    """The measured / predicted line's words: a training plan's say which passes each side covers (the
    run executes the forward pass only)."""
    x = f"{doc['measured_over_predicted']:.3f}"
    if not doc.get("training"):
        return f"measured / predicted time = {x}"
    if doc.get("predicted_passes") == "forward":
        return f"measured / predicted time of the forward pass = {x}"
    return (f"measured (forward pass only) / predicted (forward and backward passes) time = {x}, not like "
            f"for like")


def describe_runs(runs: int, batch_size: int) -> str:
    """``8 samples``, or ``8 batches of 4 samples (32 samples)``: what a run streamed."""
    if batch_size == 1:
        return f"{runs} sample{'s' if runs != 1 else ''}"
    return f"{runs} batch{'es' if runs != 1 else ''} of {batch_size} samples ({runs * batch_size} samples)"


@dataclass(frozen=True)
class CheckedStagePlan:
    """A stage plan's result as the evaluator reads it (:func:`checked_stage_plan`): the ``workload``
    rebuilt from the settings it records, the ``plan`` its ``stages`` give and the ``evaluation`` of
    that plan; all three ``None`` where the result records too little to rebuild its problem, and
    ``unchecked`` says why (the plan could then not be checked)."""

    workload: StageWorkload | None
    plan: list[Stage] | None
    evaluation: PlanEvaluation | None
    unchecked: str | None = None


def checked_stage_plan(data: Mapping, model_path: str, *, source: str | None = None, model=None
                       ) -> CheckedStagePlan:
    """The stage plan ``data`` (a result file's content, read from ``source``) as ``placement evaluate``
    reads and scores it on the ONNX model at ``model_path`` (``model``: its ``onnx.ModelProto`` where
    the caller has read it): the problem rebuilt from the settings the result records
    (:func:`placement.stages.workload_for_result`), the plan read by
    :func:`placement.stages.plan_from_dict` and scored by :func:`graphs.parallel.evaluate_plan`, so
    that ``split`` and ``run`` cut and run the plan the evaluator scores. :class:`InputError` (naming
    ``source``) where evaluate refuses the plan (an unknown node or kind, a node in no stage), where a
    stage's ``operators`` are not its ``nodes``' (:func:`_check_operators`), and where the plan breaks a
    rule of the cost model other than memory (``the plan is not valid: ...``, as ``placement show``
    says it; a plan over memory is cut and run, as show simulates it). A result that records too little
    to rebuild its problem is not checked (:attr:`CheckedStagePlan.unchecked` says why); a stage forced by
    hand to a tensor-parallel degree its nodes have no variant for is refused, as evaluate refuses it."""
    from graphs.parallel import evaluate_plan

    from .stages import plan_from_dict, workload_for_result

    why = _unrebuildable(data)
    if why is None:
        try:
            w = workload_for_result(dict(data), model_path, source=source, model=model)
        except InputError as e:
            why = f"the problem could not be rebuilt from it ({e})"
    if why is not None:
        return CheckedStagePlan(None, None, None, why)
    plan = plan_from_dict(w.problem, dict(data), source=source)
    _check_operators(w, data, source)
    ev = evaluate_plan(w.problem, plan)
    if ev.problems:  # those that are not memory's: evaluated again with no memory limit, as show does
        loose = w.problem.with_options(kinds=tuple(dataclasses.replace(k, memory=None)
                                                   for k in w.problem.kinds))
        bad = list(evaluate_plan(loose, plan).problems)
        if bad:
            if any("not nested ideals" in x for x in bad):
                bad.append("a stage plan lists its 'stages' in pipeline order, each after every stage it "
                           "receives from")
            raise InputError("the plan is not valid: " + "; ".join(bad), source=source)
    return CheckedStagePlan(w, plan, ev)


def stage_plan_prediction(data: Mapping, model_path: str, samples: int, batch_size: int, *,
                          source: str | None = None, model=None, forward_only: bool = False,
                          checked: CheckedStagePlan | None = None):
    """``placement run``'s prediction of the stage plan ``data`` for ``samples`` runs at ``batch_size``:
    ``(prediction, predicted_by, notes)``. The stages as they stand (their nodes, ``d`` and ``t``,
    perhaps edited by hand) are scored again by :func:`graphs.parallel.evaluate_plan` on the problem
    rebuilt from the settings the result records (:func:`placement.stages.workload_for_result`, the ONNX
    model at ``model_path``; ``model``: its ``onnx.ModelProto`` where run has read it, not read again); a
    result that records too little to rebuild it is predicted from its recorded times per sample, and a
    note says so. A plan that does not score on the rebuilt problem gets no prediction (``None``, and
    why). ``forward_only`` (a training plan, of which run executes the forward pass): the forward pass's
    part of the rebuilt plan's prediction (:func:`forward_stage_plan`); where it cannot be told apart
    (recorded times, a tensor-parallel stage) the whole step's, with a note that says why.
    ``checked``: the plan as :func:`checked_stage_plan` read it, where the caller has (not read again)."""
    if checked is None:
        try:
            checked = checked_stage_plan(data, model_path, source=source, model=model)
        except InputError as e:
            return None, f"the plan as it stands is not scored: {e}", []
    w, plan, why = checked.workload, checked.plan, checked.unchecked
    if w is not None and plan is not None:
        try:
            pred, notes = rescored_stage_plan(data, w.problem, plan, samples, batch_size)
        except InputError as e:
            return None, f"the plan as it stands is not scored: {e}", []
        by = "the stage evaluator's time per sample of each stage of the plan as it stands"
        if forward_only:
            try:
                return forward_stage_plan(w.problem, plan, w.graph, w.node_of, samples), \
                    f"the forward pass's part of {by}", notes
            except InputError as e:
                notes.append(f"the prediction is of the forward and backward passes: {e}")
        return pred, by, notes
    try:
        pred = predicted_stage_plan(data, samples, batch_size)
    except InputError as e:
        return None, f"{e}; {why}", []
    notes = [f"predicted from the result's recorded times per sample: {why}; a plan edited by hand is "
             f"predicted as it was placed"]
    if forward_only:
        notes.append("the prediction is of the forward and backward passes: the recorded times per sample "
                     "do not keep the forward pass apart")
    return pred, "the stage evaluator's time per sample of each stage, as the result records it", notes


def _unrebuildable(data: Mapping) -> str | None:
    """Why a version-2 result's ``problem`` section cannot rebuild its problem, where the reader would not
    say: without the section's device spec (a string) it would take the file's top-level ``devices`` (one
    row per device) for one. ``None``: it may."""
    if data.get("format") == "placement-replicated":  # version 1: flat, the reader checks it
        return None
    problem = data.get("problem")
    if not isinstance(problem, Mapping):
        return "it records no 'problem' section"
    if not isinstance(problem.get("devices"), str) or not problem["devices"].strip():
        return "its 'problem' section records no device spec ('devices')"
    return None


def _check_operators(w, data: Mapping, source: str | None) -> None:
    """The split runs a stage's ``operators`` where the result lists them, the evaluator scores its
    ``nodes``: a stage whose two lists disagree (one edited by hand, not the other) would be predicted as
    another plan than the one run, so it is refused by name."""
    if w.graph is None or w.node_of is None:
        return
    members: dict[int, set[str]] = {}
    for u, c in enumerate(w.node_of):
        members.setdefault(int(c), set()).add(w.graph.names[u])
    index = {str(x): i for i, x in enumerate(w.problem.graph.ids)}
    for i, s in enumerate(data["stages"]):
        ops = s.get("operators")
        if not isinstance(ops, list) or not ops:
            continue
        want = {op for x in s["nodes"] for op in members.get(index.get(str(x), -1), ())}
        if set(map(str, ops)) != want:
            raise InputError(f"stages[{i}]: its 'operators' are not the operators of its 'nodes' (edit both, "
                             f"or drop 'operators'): the run splits the operators, the cost model scores "
                             f"the nodes", source=source)
