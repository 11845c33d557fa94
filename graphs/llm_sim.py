"""A discrete-event simulator of one LLM serving plan (:mod:`graphs.llm`): a decode plan's stages
(layer ranges on kinds, degrees ``d`` and ``t``, ``N`` micro-batches of ``m = batch / N`` KV slots)
serving a request trace, to check the figures the planner and :class:`graphs.llm.ServingModel`
predict (docs/serving.md, "Simulating a plan").

**The engine** (colocated prefill and decode, continuous batching, one pipeline):

* **requests** arrive as a Poisson process at ``rate`` per second with sizes drawn from a
  :class:`graphs.llm.RequestMix` (:func:`poisson_trace`; seeded, reproducible), or from a given trace;
* **admission**: the plan's KV cache holds ``batch`` sequences at the mix's longest request (the memory
  the planner sized), ``m`` per micro-batch; an arrival waits first come, first served for a free slot
  (in the micro-batch with the fewest held) and holds it from its prefill to its last token;
* **prefill**: the prompt runs alone on one replica of each stage in turn (replicas take prefills in
  turn), at :meth:`ServingModel.stage_prefill`'s times; a server runs a waiting prefill before a
  waiting decode step; the prefill's end is the first token;
* **decode**: each micro-batch loops through the stages (micro-batch ``j`` on replica ``j mod d_i`` of
  stage ``i``); an iteration's step time on a stage is computed from its sequences' **actual** number
  and mean context with the planner's per-layer functions (:func:`layer_decode_step`, :func:`embed_time`,
  :func:`head_step`, plus the hidden states over the links the stage's tensors cross); at the end of an
  iteration every sequence emits a token and finished ones free their slots; prefilled requests join
  their micro-batch's next step when that step starts on the first stage (as an engine's scheduler
  forms each step's batch when it launches it); the ``N`` micro-batches are in flight together, each
  server taking them first come, first served.

It reports output tokens/s over the measured window (after a warm-up), TTFT (arrival to the first
token) and TPOT (the mean time between a request's later tokens) as mean, p50, p90 and p99 over the
requests that arrived in the window, and the mean TTFT split into the wait for a KV slot, the wait
for the first prefill stage and the rest (the prefill's run and any waits at later stages). The step
and prefill times can be replaced (``decode_time``, ``prefill_time``) to test the engine by hand.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from .errors import InputError

__all__ = ["poisson_trace", "simulate_pipeline", "simulate_plan", "planned_rate", "SimResult", "parse_rate",
           "plot_simulation"]


def poisson_trace(mix, rate: float, seconds: float, seed: int = 0) -> list[tuple[float, int]]:
    """Arrivals ``(time, bucket index)`` of a Poisson process at ``rate`` per second over ``[0, seconds)``
    with buckets drawn by the mix's shares (numpy's generator seeded with ``seed``: reproducible)."""
    import numpy as np

    _positive("the arrival rate", rate)
    _positive("the trace length", seconds)
    rng = np.random.default_rng(seed)
    shares = np.asarray(mix.shares)
    out = []
    t = 0.0
    chunk = max(16, int(rate * seconds * 1.2) + 16)
    while True:
        gaps = rng.exponential(1.0 / rate, chunk)
        picks = rng.choice(len(shares), size=chunk, p=shares)
        for g, b in zip(gaps, picks):
            t += float(g)
            if t >= seconds:
                return out
            out.append((t, int(b)))


def _positive(what: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise InputError(f"{what} must be a positive number, got {v!r}")
    return float(v)


def parse_rate(text: str) -> float | str:
    """The ``rate`` of :func:`simulate_plan` read from ``text``: a positive number of requests/s, or
    ``auto`` (80% of the plan's planned rate). A bad one is an :class:`InputError` naming ``rate=``."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"rate={text!r}: give a rate in requests/s (a positive number) "
                         f"or 'auto'") from None
    if not (0 < v < math.inf):
        raise InputError(f"rate={text!r}: the rate must be a positive number of requests/s")
    return v


def _stats(xs: list[float]) -> dict:
    import numpy as np

    if not xs:
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan, "count": 0}
    a = np.asarray(xs)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "count": len(xs)}


@dataclass
class SimResult:
    """What one simulation measured; times in seconds, rates per second."""

    rate: float  # requests/s offered
    seconds: float  # the trace's arrival window
    warmup: float  # measured window: [warmup, seconds]
    arrived: int  # requests in the trace
    finished: int  # of them, finished (the simulation drains until at most ``2 x seconds``)
    tokens_per_s: float  # output tokens (the first from the prefill, the rest decoded) in the window / its
    # length
    decode_tokens_per_s: float  # decoded tokens only, same window
    mean_batch: float  # sequences held in KV slots, time-averaged over the window
    offered_tokens_per_s: float = 0.0  # output tokens of the requests arriving in the window / its length
    token_times: list = field(default_factory=list, repr=False)  # every output token's time (for the plot)
    planned: dict = field(default_factory=dict)  # simulate_plan: the planner's and serving model's figures
    # the mean TTFT split (seconds): waiting for a KV slot, then for the first prefill stage (a request
    # with its slot), then from the prefill's start to the first token (the run and any later waits)
    ttft_parts: dict = field(default_factory=dict)
    ttft_split: list = field(default_factory=list, repr=False)  # per request: (tag, slot, queue, prefill)
    # per request arriving in the window: (TTFT, TPOT); TTFT NaN without a first token, TPOT None for a
    # request of one output token (none to meet) and NaN for one that did not finish. The one record of
    # them: ttfts and tpots, and their statistics ttft and tpot, are read from it
    per_request: list = field(default_factory=list, repr=False)

    @property
    def ttfts(self) -> list[float]:
        """The TTFT of each of the window's arrivals that got a first token (seconds, in arrival
        order)."""
        return [a for a, _ in self.per_request if not math.isnan(a)]

    @property
    def tpots(self) -> list[float]:
        """The TPOT of each of the window's arrivals that finished with more than one output token
        (seconds, in arrival order)."""
        return [b for _, b in self.per_request if b is not None and not math.isnan(b)]

    @property
    def ttft(self) -> dict:
        """``mean``, ``p50``, ``p90``, ``p99`` (seconds) and ``count`` of :attr:`ttfts` (NaN, count 0:
        none)."""
        return _stats(self.ttfts)

    @property
    def tpot(self) -> dict:
        """The same of :attr:`tpots`."""
        return _stats(self.tpots)

    def attainment(self, ttft: float | None, tpot: float | None) -> float:
        """The share of the window's arrivals whose TTFT and TPOT both met the targets (seconds;
        ``None``: no target): a request without a first token, or not finished, does not meet them. NaN
        with no arrival in the window."""
        if not self.per_request:
            return math.nan

        def meets(a: float, b: float | None) -> bool:
            if math.isnan(a) or (ttft is not None and a > ttft * (1 + 1e-9)):
                return False
            return b is None or (not math.isnan(b) and (tpot is None or b <= tpot * (1 + 1e-9)))

        return sum(meets(a, b) for a, b in self.per_request) / len(self.per_request)


def simulate_pipeline(d: list[int], batch: int, microbatches: int, decode_time, prefill_time,
                      requests: list[tuple[float, int, int, int]], *, seconds: float,
                      warmup: float | None = None, progress=None, keep_tokens: bool = False,
                      prefill_d: list[int] | None = None, transfer_time=None) -> SimResult:
    """The engine of the module doc on stages with replicas ``d`` (``d[i]`` dividing ``microbatches``
    is not required: micro-batch ``j`` runs on replica ``j mod d[i]``), ``batch`` KV slots in
    ``microbatches`` micro-batches, ``decode_time(i, n, context)`` seconds of a step of ``n`` sequences
    of mean context ``context`` on a replica of stage ``i``, ``prefill_time(i, r)`` seconds of the
    prefill of request ``r`` (its index in ``requests``) there, and ``requests`` ``(arrival, input
    tokens, output tokens, tag)`` sorted by arrival (``tag``: the caller's, e.g. the bucket). Arrivals
    fall in ``[0, seconds)``; the run drains until ``2 x seconds`` at most; ``progress(frac)`` is called
    with the simulated fraction of that.

    **Disaggregated** (``prefill_d``: the replicas of a separate prefill pool's stages): prompts run on
    that pool's stages (``prefill_time(i, r)`` on its stage ``i``; replicas in turn, first come, first
    served) as soon as they arrive; the prefill's end is the first token; the request then waits first
    come, first served for a KV slot of the decode pool, holds it from then on, its cache moves for
    ``transfer_time(r)`` seconds (a delay: the moves do not contend), and it joins its micro-batch's
    next step. The decode pool's stages run decode steps only."""
    if batch % microbatches:
        raise InputError(f"{microbatches} micro-batches do not divide {batch} KV slots")
    if warmup is None:
        warmup = 0.2 * seconds
    if not 0 <= warmup < seconds:
        raise InputError(f"the warm-up must be in [0, {seconds}) seconds, got {warmup!r}")
    S = len(d)
    disagg = prefill_d is not None
    if disagg and (not prefill_d or transfer_time is None):
        raise InputError("a disaggregated simulation needs the prefill pool's stages and a transfer time")
    pre0 = S if disagg else 0  # the prefill stages: pre0 .. last_pre
    d = list(d) + (list(prefill_d) if disagg else [])
    last_pre = len(d) - 1 if disagg else S - 1
    N = microbatches
    m = batch // N
    horizon = 2 * seconds
    nreq = len(requests)
    gen = [0] * nreq
    first = [math.nan] * nreq
    finish = [math.nan] * nreq
    slot_at = [math.nan] * nreq  # when the request got its KV slot (colocated: before its prefill)
    pre_at = [math.nan] * nreq  # when its prefill started on the first prefill stage
    mb_of = [-1] * nreq
    members: list[list[int]] = [[] for _ in range(N)]
    joining: list[list[int]] = [[] for _ in range(N)]
    held = [0] * N
    in_flight = [False] * N
    waiting: deque = deque()
    pre_q = [[deque() for _ in range(d[i])] for i in range(len(d))]
    dec_q = [[deque() for _ in range(d[i])] for i in range(len(d))]
    busy = [[False] * d[i] for i in range(len(d))]
    rr = [0] * len(d)  # the next replica of each stage to take a prefill
    heap: list = []
    seq = 0
    tokens = decoded = 0
    token_times: list[float] = []
    held_area = 0.0  # integral of the slots held over the window
    total_held = 0
    last_t = 0.0

    def push(t, kind, data):
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, data))
        seq += 1

    def emit(t, decode: bool):
        nonlocal tokens, decoded
        if warmup <= t <= seconds:
            tokens += 1
            decoded += decode
        if keep_tokens:
            token_times.append(t)

    def start(i, r, now):
        if busy[i][r]:
            return
        if pre_q[i][r]:
            job = pre_q[i][r].popleft()
            dur = prefill_time(i - pre0, job[1])
            if i == pre0:
                pre_at[job[1]] = now
        elif dec_q[i][r]:
            job = dec_q[i][r].popleft()
            if i == 0 and joining[job[1]]:  # the step is formed when it starts: prefilled requests join
                job = _step_job(job[1])
            dur = decode_time(i, job[2], job[3])
        else:
            return
        busy[i][r] = True
        push(now + dur, 1, (i, r, job))

    def submit(i, r, job, now):
        (pre_q if job[0] == "p" else dec_q)[i][r].append(job)
        start(i, r, now)

    def release(j):
        nonlocal total_held
        held[j] -= 1
        total_held -= 1

    def _step_job(j):
        members[j].extend(joining[j])
        joining[j].clear()
        n = len(members[j])
        return ("d", j, n, sum(requests[q][1] + gen[q] for q in members[j]) / n)

    def iterate(j, now):
        if not members[j] and not joining[j]:
            in_flight[j] = False
            return
        in_flight[j] = True
        submit(0, j % d[0], _step_job(j), now)

    def admit(now):
        nonlocal total_held
        while waiting:
            j = min(range(N), key=lambda x: held[x])
            if held[j] >= m:
                return
            q = waiting.popleft()
            held[j] += 1
            total_held += 1
            mb_of[q] = j
            slot_at[q] = now
            if disagg:  # the cache moves to the decode pool, then the request joins
                push(now + transfer_time(q), 2, q)
            else:
                prefill(q, now)

    def prefill(q, now):
        r = rr[pre0]
        rr[pre0] = (r + 1) % d[pre0]
        submit(pre0, r, ("p", q), now)

    nxt = 0
    if nreq:
        push(requests[0][0], 0, 0)
        nxt = 1
    while heap:
        now, _, kind, data = heapq.heappop(heap)
        if now > horizon:
            break
        lo, hi = max(last_t, warmup), min(now, seconds)
        if hi > lo:
            held_area += total_held * (hi - lo)
        last_t = now
        if progress is not None:
            progress(min(1.0, now / horizon))
        if kind == 0:  # an arrival
            if nxt < nreq:
                push(requests[nxt][0], 0, nxt)
                nxt += 1
            if disagg:
                prefill(data, now)
            else:
                waiting.append(data)
                admit(now)
            continue
        if kind == 2:  # a cache moved to the decode pool
            j = mb_of[data]
            joining[j].append(data)
            if not in_flight[j]:
                iterate(j, now)
            continue
        i, r, job = data
        busy[i][r] = False
        if job[0] == "p":
            q = job[1]
            if i < last_pre:
                nr = rr[i + 1]
                rr[i + 1] = (nr + 1) % d[i + 1]
                submit(i + 1, nr, job, now)
            else:
                gen[q] = 1
                first[q] = now
                emit(now, False)
                j = mb_of[q]
                if requests[q][2] <= 1:
                    finish[q] = now
                    if not disagg:
                        release(j)
                        admit(now)
                elif disagg:
                    waiting.append(q)
                    admit(now)
                else:
                    joining[j].append(q)
                    if not in_flight[j]:
                        iterate(j, now)
        else:
            j = job[1]
            if i + 1 < S:
                submit(i + 1, j % d[i + 1], job, now)
            else:
                still = []
                for q in members[j]:
                    gen[q] += 1
                    emit(now, True)
                    if gen[q] >= requests[q][2]:
                        finish[q] = now
                        release(j)
                    else:
                        still.append(q)
                members[j] = still
                iterate(j, now)
                admit(now)
        start(i, r, now)
    if progress is not None:
        progress(1.0)
    if last_t < seconds:
        held_area += total_held * (seconds - max(last_t, warmup))
    window = seconds - warmup
    parts, each = [], []
    offered = 0
    for q, (arr, _inp, out, tag) in enumerate(requests):
        if not warmup <= arr < seconds:
            continue
        offered += out
        a = first[q] - arr  # NaN without a first token
        if not math.isnan(first[q]):
            slot = slot_at[q] - arr if slot_at[q] <= pre_at[q] else 0.0  # disaggregated: after the prefill
            parts.append((tag, slot, pre_at[q] - arr - slot, first[q] - pre_at[q]))
        b = None if out <= 1 else (finish[q] - first[q]) / (out - 1)  # NaN when it did not finish
        each.append((a, b))
    mean = [sum(x[k] for x in parts) / len(parts) if parts else math.nan for k in (1, 2, 3)]
    res = SimResult(0.0, seconds, warmup, nreq, sum(1 for x in finish if not math.isnan(x)),
                    tokens / window, decoded / window, held_area / window, offered / window, token_times,
                    ttft_parts=dict(zip(("slot", "queue", "prefill"), mean)), ttft_split=parts,
                    per_request=each)
    return res


def _stage_timers(model, problem, plan):
    """Per stage: ``decode_time(n, context)`` from the planner's per-layer functions, and the prefill
    seconds of each bucket (:meth:`ServingModel.stage_prefill`)."""
    import numpy as np

    from .llm import embed_time, head_step, layer_decode_step
    from .parallel import _crossing

    cfg, g = model.cfg, problem.graph
    L = cfg.layers
    steps, pres = [], []
    for st in plan:
        spec = model.devices.specs[st.kind]
        nodes = set(st.nodes)
        layers = sum(1 for u in nodes if 1 <= u <= L)
        inside = np.zeros(g.num_nodes, bool)
        inside[list(nodes)] = True
        enter, leave = _crossing(g, inside)
        comm = float(g.tensor_time[st.kind, enter].sum() + g.tensor_time[st.kind, leave].sum())

        def step(n, c, spec=spec, t=st.t, layers=layers, emb=0 in nodes, head=L + 1 in nodes, comm=comm):
            x = layers * layer_decode_step(cfg, spec, t, n, c) + n * comm
            if emb:
                x += embed_time(cfg, spec, n)
            if head:
                x += head_step(cfg, spec, n)
            return x

        steps.append(step)
        pres.append(model.stage_prefill(problem, st))
    return steps, pres


def planned_rate(model, problem, plan, batch: int, evaluation=None, prefill_pool=None):
    """The serving model's rate for ``plan`` without targets (requests/s: the KV slots or the prefill
    capacity limit it) and its evaluation; with ``prefill_pool`` ``(prefill model, problem, plan)``,
    :func:`graphs.llm.disaggregated_goodput`'s."""
    from .llm import ServingModel, disaggregated_goodput

    free = ServingModel(model.cfg, model.devices, model.mix)
    if prefill_pool is None:
        sv = free.evaluate(problem, plan, batch, evaluation=evaluation)
    else:
        pre_model, pre_problem, pre_plan = prefill_pool
        pre = ServingModel(pre_model.cfg, pre_model.devices, model.mix)
        sv = disaggregated_goodput(pre, pre_problem, pre_plan, free, problem, plan, batch,
                                   evaluation=evaluation)
    return sv.rate, sv


def simulate_plan(model, problem, plan, batch: int, *, rate: float | str = "auto", seconds: float = 120.0,
                  seed: int = 0, warmup: float | None = None, trace=None, progress=None,
                  keep_tokens: bool = False, prefill_pool=None) -> SimResult:
    """Simulate ``plan`` (stages of ``model.problem(batch)`` or any problem of the same chain) serving a
    Poisson trace at ``rate`` requests/s (``"auto"``: 80% of :func:`planned_rate`) for ``seconds``,
    sizes drawn from ``model.mix`` with ``seed`` (or ``trace``: ``(time, bucket index)`` pairs), measured
    after ``warmup`` seconds (default: 20% of the trace, or 1.5 x the longest request's lifetime under
    the serving model, at most half the trace). The
    result's ``planned`` holds the planner's decode tokens/s, the serving model's rate and the output
    tokens/s it predicts at the simulated rate (``rate x E[output]``, when the rate is below its own).

    ``prefill_pool``: ``(prefill model, prefill problem, prefill plan)`` of a disaggregated layout
    (:func:`graphs.llm.prefill_problem`'s plan on the prefill model's devices, ``plan`` then the decode
    pool's): the prompts run on that pool, each cache moves over the slower host link of the two
    plans' kinds (:func:`graphs.llm.kv_transfer_time`), as :func:`graphs.llm.disaggregated_goodput`
    models it (the disaggregated engine of :func:`simulate_pipeline`)."""
    from .llm import colocated_slot_wait, decode_stall, kv_transfer_time
    from .parallel import evaluate_plan

    ev = evaluate_plan(problem, plan)
    if not ev.valid:
        raise InputError("cannot simulate an invalid plan: " + "; ".join(ev.problems))
    if prefill_pool is not None:
        pev = evaluate_plan(prefill_pool[1], prefill_pool[2])
        if not pev.valid:
            raise InputError("cannot simulate an invalid prefill plan: " + "; ".join(pev.problems))
    _positive("the trace length (seconds=)", seconds)
    cap, sv = planned_rate(model, problem, plan, batch, evaluation=ev, prefill_pool=prefill_pool)
    if rate == "auto":
        rate = 0.8 * cap
    rate = _positive("the arrival rate", rate)
    if trace is None:
        trace = poisson_trace(model.mix, rate, seconds, seed)
    buckets = model.mix.buckets
    requests = [(t, buckets[b].input, buckets[b].output, b) for t, b in trace]
    if warmup is None:  # past the longest request's lifetime under the serving model (tokens/s then steady)
        life = max(x.prefill + (x.bucket.output - 1) * sv.tpot for x in sv.buckets) + sv.kv_transfer
        warmup = min(0.5 * seconds, max(0.2 * seconds, 1.5 * life))
    steps, pres = _stage_timers(model, problem, plan)
    extra = {}
    if prefill_pool is not None:
        pre_model, pre_problem, pre_plan = prefill_pool
        pres = [pre_model.stage_prefill(pre_problem, st) for st in pre_plan]
        link = min(m.devices.specs[st.kind].link_bandwidth
                   for m, p in ((pre_model, pre_plan), (model, plan)) for st in p)
        moves = [kv_transfer_time(model.cfg, b.input, link) for b in model.mix.buckets]
        extra = {"prefill_d": [st.d for st in pre_plan], "transfer_time": lambda q: moves[requests[q][3]]}
    res = simulate_pipeline([st.d for st in plan], batch, problem.microbatches,
                            lambda i, n, c: steps[i](n, c), lambda i, q: pres[i][requests[q][3]], requests,
                            seconds=seconds, warmup=warmup, progress=progress, keep_tokens=keep_tokens,
                            **extra)
    res.rate = rate
    mean_out = sum(p * b.output for p, b in zip(model.mix.shares, buckets))
    shares = model.mix.shares
    a = sum(q * x.occupancy for q, x in zip(shares, sv.buckets))  # the serving model's E[S], E[S^2], E[P]
    e2 = sum(q * x.occupancy ** 2 for q, x in zip(shares, sv.buckets))
    ep = sum(q * x.prefill for q, x in zip(shares, sv.buckets))
    rho = rate * a
    wait = rate * e2 / (2 * (1 - rho)) if rho < 1 else math.inf
    stall = 0.0 if prefill_pool is not None else decode_stall(rate, a, sv.convoy)  # apart: no stall
    # colocated: the wait for a KV slot comes before the prefill (apart, after the first token)
    slot = 0.0 if prefill_pool is not None else colocated_slot_wait(
        rate, batch, ep, model.mix.decode_steps, sv.tpot_full, a, sv.convoy)
    res.planned = {"decode_tokens_per_s": 1 / ev.objective, "rate_rps": cap, "limit": sv.limit,
                   "tokens_per_s_at_rate": min(rate, cap) * mean_out,
                   "load": rate / cap if cap > 0 else math.inf,
                   "tpot_full_s": sv.tpot_full, "mean_output": mean_out,
                   "tpot_s_at_rate": sv.tpot_full / (1 - stall) if stall < 1 else math.inf,
                   "ttft_mean_s_at_rate": slot + wait + ep, "slot_wait_s_at_rate": slot,
                   "prefill_wait_s_at_rate": wait, "prefill_mean_s": ep,
                   "prefill_s": [b.prefill for b in sv.buckets], "kv_transfer_s": sv.kv_transfer}
    return res


def plot_simulation(res: SimResult, path: str, title: str = "", *, ttft: float | None = None,
                    tpot: float | None = None) -> None:
    """Tokens/s over time (1 s bins, the planned figure as a line) and the TTFT and TPOT distributions,
    with the targets ``ttft`` and ``tpot`` (seconds; ``None``: none) as vertical lines; needs matplotlib
    (an :class:`InputError` saying so when it is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(f"plot_simulation(path={path!r}) needs matplotlib, which is not installed (pip "
                         f"install matplotlib); the simulation itself does not") from None
    import numpy as np

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    if res.token_times:
        end = max(res.token_times)
        bins = np.arange(0, math.ceil(end) + 1)
        h, e = np.histogram(res.token_times, bins=bins)
        a.plot(e[:-1], h, lw=1, label="simulated")
    want = res.planned.get("tokens_per_s_at_rate")
    if want:
        a.axhline(want, color="k", ls="--", lw=1, label="planned at this rate")
    a.axvspan(res.warmup, res.seconds, color="0.9", zorder=0, label="measured window")
    a.set_xlabel("time (s)")
    a.set_ylabel("output tokens/s")
    a.legend(fontsize=8)
    for xs, lab, target in ((res.ttfts, "TTFT", ttft), (res.tpots, "TPOT", tpot)):
        if xs:
            v = np.sort(np.asarray(xs) * 1e3)
            line, = b.plot(v, np.arange(1, len(v) + 1) / len(v), label=lab)
            if target is not None:  # the share left of it met that target
                b.axvline(target * 1e3, color=line.get_color(), ls="--", lw=1,
                          label=f"{lab} target {target * 1e3:.4g} ms")
    b.set_xscale("log")
    b.set_xlabel("ms")
    b.set_ylabel("share of requests")
    b.legend(fontsize=8)
    fig.suptitle(title or f"{res.rate:.4g} requests/s for {res.seconds:g} s")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
