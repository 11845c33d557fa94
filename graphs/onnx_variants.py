"""The replicated model (:mod:`graphs.parallel`) of an ONNX model: every node's variants derived from
the model itself.

:func:`onnx_parallel_problem` starts from the pipeline-only problem of the costed operator graph
(:func:`graphs.parallel.from_opgraph` on the graph :func:`graphs.onnx_workload.build_opgraph` makes, so
the nodes, tensors and their times are exactly the one-device-per-stage placement's) and replaces each
node's variant by these, per device kind:

* **units**: seconds per sample. The graph's times are milliseconds per micro-batch (one run of the
  model at the front end's batch size ``b``, the value of a symbolic batch dimension; 1 when the
  model's batch is fixed, so a "sample" is then one run), so they are scaled by ``1e-3 / b``; ``N``
  micro-batches make a batch.
* **vanilla** (``t = 1``): time = forward + backward; ``A`` = the forward operators' output bytes (what
  the backward pass reads, stashed per micro-batch in flight); ``B`` = parameters + gradients of the
  trainable ones + optimizer state (:data:`graphs.training.OPTIMIZERS` tensors per trainable parameter);
  ``W`` = the trainable weights (the part of ``B`` a weight version copies); ``params`` = the gradient
  bytes the replicas all-reduce once per batch (divided by ``b``, because the model's resync term
  is per micro-batch and its times per sample). An inference graph has ``A = W = params = 0`` and
  ``B`` = parameters (one run in flight per stage holds nothing to stash for a backward pass).
* **recompute** (training): only the outputs that leave their layer (layer keys of
  :func:`graphs.onnx_workload.layer_keys`) are stashed; every other activation is recomputed in the
  backward pass, which costs one more forward pass. Keeping each layer's output rather than its input
  is the same count of tensors per stage, off by one at the stage's ends (the same size in a
  transformer). Only offered where it stashes less than vanilla.
* **tensor-parallel** (``t`` in 2, 4, 8 up to the kind's count and server size, on kinds that pay
  communication): in a layer with at least two weighted ``MatMul``/``Gemm`` operators (a transformer
  block), operators are split Megatron-style, found by following which tensors are split: a weighted
  matrix product reading a whole tensor is column-parallel (its output split; the backward pass
  all-reduces its input's gradient, once per input tensor), one reading a split tensor is row-parallel
  (it all-reduces its output); every other operator reading a split tensor is split too (attention
  heads, bias, activation). A split tensor that leaves the layer is gathered (costed as an all-reduce).
  Split operators take ``launch + (time - launch) / t`` and ``1/t`` of their weights, gradients and
  optimizer state, and of their stash where their output stays split; the others run replicated on
  all ``t`` devices. An all-reduce of ``S`` bytes among ``t`` devices takes
  ``4 (t - 1) / t * S / bandwidth`` (the convention of the model's replica resync) over the kind's
  intra-server bandwidth (its host link when the kind has no topology figures). A split tensor that
  crosses a stage boundary (a stage cut inside a layer) pays a gather as a sync term. Every node gets
  variants for each ``t`` (operators outside such layers run replicated), so any stage can be tensor-parallel.
  :func:`tensor_split` is the one place this rule lives: ``placement split`` and ``placement run``
  (:mod:`placement.tensor_parallel`) divide exactly the operators it marks.

``granularity="layer"`` first merges each layer key's operators (and their backward twins) into one node
(a much smaller graph for the exact DP); the variants are the sums of their operators'. A node's id is
its layer key at that granularity, else its operators' names joined by ``+``.

With ``max_replicas = 1``, ``tensor_parallel = False``, ``recompute = False`` and
``stash="once"`` (``A`` folded into ``B``: one micro-batch of activations, as the one-device-per-stage
memory model),
the problem is the one-device-per-stage one: the DP's optimum times ``1e3 * b`` is its max-load. With
``stash="schedule"`` (the default) memory is ``A*y + B`` by schedule; that agrees with it where
memory does not bind.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .devices import DeviceSet
from .errors import InputError
from .model import OpGraph
from .onnx_loader import OnnxGraph
from .order import topological_order
from .parallel import ParallelGraph, ParallelProblem, Variant, from_opgraph
from .training import OPTIMIZERS

__all__ = ["TP_DEGREES", "TensorSplit", "tensor_split", "onnx_parallel_problem", "stage_problem",
           "default_microbatches", "allreduce_time"]

#: tensor-parallel degrees offered (each capped by the kind's count and server size)
TP_DEGREES = (2, 4, 8)
_MATMULS = ("MatMul", "Gemm")


def allreduce_time(nbytes: float, t: int, bandwidth: float) -> float:
    """Seconds to all-reduce ``nbytes`` among ``t`` devices (the replica resync's convention)."""
    return 0.0 if t <= 1 or nbytes <= 0 else 4.0 * (t - 1) / t * nbytes / bandwidth


class TensorSplit:
    """Which operators a tensor-parallel split divides, and the bytes each one all-reduces (forward and
    backward) — see the module doc. ``out_split[i]``: operator ``i``'s output stays split;
    ``column[i]``/``row[i]``: operator ``i`` is a column-/row-parallel weighted matrix product (the
    others with ``split[i]`` read a split tensor and are divided alongside it). ``keys``: the layer key
    of every operator the split was found with. The cost model (:func:`onnx_parallel_problem`) and
    ``placement split`` (:mod:`placement.tensor_parallel`) both read this one analysis."""

    def __init__(self, n: int, keys: Sequence[str | None] | None = None) -> None:
        self.split = np.zeros(n, bool)
        self.out_split = np.zeros(n, bool)
        self.column = np.zeros(n, bool)
        self.row = np.zeros(n, bool)
        self.keys: tuple[str | None, ...] = tuple(keys) if keys is not None else (None,) * n
        self.allreduce = np.zeros(n)  # bytes per micro-batch, forward + backward
        self.blocks: list[str] = []

    def reads_split(self, producer: int, consumer: int) -> bool:
        """Does ``consumer`` read ``producer``'s output split: it stays split and both are in one layer
        (a split output read outside its layer is gathered first)."""
        return bool(self.out_split[producer]) and self.keys[producer] == self.keys[consumer]


def tensor_split(g: OnnxGraph, keys: Sequence[str | None]) -> TensorSplit:
    """The Megatron-style split of every layer with at least two weighted matrix products."""
    n = g.num_ops
    ts = TensorSplit(n, keys)
    weighted = np.array([op.op_type in _MATMULS and op.trainable_bytes > 0 for op in g.ops])
    count: dict[str, int] = {}
    for i in np.flatnonzero(weighted):
        if keys[i] is not None:
            count[keys[i]] = count.get(keys[i], 0) + 1
    ts.blocks = sorted(k for k, c in count.items() if c >= 2)
    if not ts.blocks:
        return ts
    blocks = set(ts.blocks)
    src, dst = np.asarray(g.src), np.asarray(g.dst)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        preds[b].append(a)
        succs[a].append(b)
    order = topological_order(n, src, dst)
    reduced_inputs: set[int] = set()  # producers whose output's gradient is already all-reduced
    for i in order.tolist():
        key = keys[i]
        if key not in blocks:
            continue
        op = g.ops[i]
        reads_split = any(ts.reads_split(p, i) for p in preds[i])
        ts.split[i] = True
        if weighted[i] and reads_split:  # row-parallel: all-reduce the output
            ts.row[i] = True
            ts.allreduce[i] += op.output_bytes
        elif weighted[i]:  # column-parallel: the backward pass all-reduces the input's gradient
            ts.column[i] = True
            ts.out_split[i] = True
            ins = [p for p in preds[i] if p not in reduced_inputs]
            reduced_inputs.update(ins)
            ts.allreduce[i] += sum(g.ops[p].output_bytes for p in ins) if preds[i] else \
                sum(t.nbytes or 0 for t in op.activations)
        else:
            ts.split[i] = reads_split
            ts.out_split[i] = reads_split
        if ts.out_split[i] and (not succs[i] or any(keys[s] != key for s in succs[i])):
            ts.allreduce[i] += op.output_bytes  # gathered where it leaves the layer
    return ts


def default_microbatches(devices: DeviceSet) -> int:
    """Micro-batches per batch when none are given: the smallest power of two >= the number of
    devices (every stage count and every power-of-two data-parallel degree fits)."""
    total = max(1, sum(devices.counts))
    return 1 << (total - 1).bit_length()


def _with_layer_classes(graph: OpGraph, keys: Sequence[str | None]) -> OpGraph:
    """``graph`` with each layer's operators (and backward twins) in one colocation class."""
    n_fwd = len(keys)
    labels: dict[str, int] = {}
    colo = np.empty(graph.num_nodes, np.int64)
    for i in range(graph.num_nodes):
        j = i % n_fwd
        k = keys[j] if keys[j] is not None else f"\0op{j}"
        colo[i] = labels.setdefault(k, len(labels))
    return OpGraph.build(names=graph.names, kinds=graph.kinds, compute=graph.compute, comm=graph.comm,
                         memory=graph.memory, edges=np.stack([graph.src, graph.dst], 1),
                         backward=graph.backward, colocation=colo, ids=graph.ids, source=graph.source,
                         meta=graph.meta)


def onnx_parallel_problem(g: OnnxGraph, graph: OpGraph, devices: DeviceSet, *,
                          microbatches: int | None = None,
                          schedule: str = "1f1b", max_replicas: int | None = None,
                          tensor_parallel: bool = True, recompute: bool = True, stash: str = "schedule",
                          granularity: str = "op") -> tuple[ParallelProblem, np.ndarray]:
    """The replicated problem of the loaded model ``g`` whose costed graph (forward, or forward and
    backward) is ``graph`` (from :func:`graphs.onnx_workload.build_opgraph`) on ``devices``; see the
    module doc. Returns the problem and the node of every operator of ``graph``."""
    if stash not in ("schedule", "once"):
        raise InputError(f"stash must be 'schedule' or 'once', got {stash!r}")
    if granularity not in ("op", "layer"):
        raise InputError(f"granularity must be 'op' or 'layer', got {granularity!r}")
    n = g.num_ops
    training = bool(graph.is_training)
    if graph.num_nodes != (2 * n if training else n):
        raise InputError(f"the graph has {graph.num_nodes} nodes, the model {n} operators", source=g.source)
    keys = graph.meta.get("layer") or (None,) * n
    cluster = devices.cluster()
    if granularity == "layer":
        graph = _with_layer_classes(graph, keys)
    N = microbatches or default_microbatches(devices)
    base, cls = from_opgraph(graph, cluster, microbatches=N)
    bg = base.graph
    K, C = len(cluster.kinds), bg.num_nodes
    batch = max(1, int(g.batch_size or 1))
    scale = 1e-3 / batch  # ms per micro-batch -> s per sample

    ops = g.ops
    out_bytes = np.array([op.output_bytes for op in ops], float)
    params = np.array([op.param_bytes for op in ops], float)
    train = np.array([op.trainable_bytes for op in ops], float) if training else np.zeros(n)
    opt_states = OPTIMIZERS[graph.meta.get("training", {}).get("optimizer", "adam")] if training else 0
    stash_b = out_bytes if training else np.zeros(n)
    # inference holds every operator's outputs at the batch size besides its weights, as the operator
    # graph counts them (graphs.onnx_workload.INFERENCE_MEMORY; a tensor-parallel split's counted whole)
    held_b = np.zeros(n) if training else out_bytes
    compute, _ = graph.costs_for(cluster)
    fwd = compute[:, :n]
    bwd = compute[:, n:] if training else np.zeros((K, n))
    item = cls[:n]  # node of every forward operator (its twin is in the same one)
    members = [np.flatnonzero(item == c) for c in range(C)]

    # recompute keeps only the outputs that leave their layer
    succ_keys: list[set] = [set() for _ in range(n)]
    for a, b in zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()):
        succ_keys[a].add(keys[b])
    keep = np.array([keys[i] is None or not succ_keys[i] <= {keys[i]} for i in range(n)])

    ts = tensor_split(g, keys) if tensor_parallel else TensorSplit(n)
    kinds = cluster.kinds
    degrees: list[list[int]] = []
    for spec, kind in zip(devices.specs, kinds):
        top = min(kind.count, spec.server_size or kind.count)
        degrees.append([t for t in TP_DEGREES if t <= top] if ts.blocks and not spec.host else [])

    # tensors of the base problem (same order as from_opgraph builds them), and their producing node
    producer = []
    for u in range(graph.num_nodes):
        cons = set(cls[graph.dst[graph.src == u]].tolist()) - {int(cls[u])}
        if cons:
            producer.append(u)
    tensors = [(int(bg.tensor_src[e]), bg.consumers(e).tolist(), bg.tensor_time[:, e] * scale)
               for e in range(bg.num_tensors)]
    gathered = {}  # node -> {tensor: bytes}: split outputs that may cross a stage boundary
    for e, u in enumerate(producer):  # a forward split output read only inside its layer
        if u < n and ts.out_split[u] and succ_keys[u] <= {keys[u]}:
            gathered.setdefault(int(bg.tensor_src[e]), {})[e] = out_bytes[u]

    base_time = {(v.node, v.kind): v.time for v in bg.variants}
    variants: list[Variant] = []
    for c in range(C):
        m = members[c]
        for k in range(K):
            if (c, k) not in base_time:
                continue  # some operator of the node cannot run on this kind
            spec = devices.specs[k]
            launch = spec.launch * 1e3
            for t in [1] + degrees[k]:
                sp = ts.split[m] if t > 1 else np.zeros(m.size, bool)
                div = np.where(sp, t, 1)  # weights of split operators
                div_out = np.where(sp & ts.out_split[m], t, 1)  # their outputs, where they stay split

                def split_time(x, sp=sp, t=t, launch=launch):
                    return np.where(sp, launch + np.maximum(x - launch, 0.0) / t, x)

                if t == 1:
                    time = base_time[(c, k)] * scale
                    f_time = float(fwd[k, m].sum()) * scale
                    sync_out = {}
                else:
                    bw = spec.intra_bandwidth or spec.link_bandwidth
                    comm = sum(allreduce_time(x, t, bw) for x in ts.allreduce[m]) / batch
                    f_time = float(split_time(fwd[k, m]).sum()) * scale
                    time = f_time + float(split_time(bwd[k, m]).sum()) * scale + comm
                    sync_out = {e: allreduce_time(x, t, bw) / batch for e, x in gathered.get(c, {}).items()}
                a = float((stash_b[m] / div_out).sum())
                par = float((train[m] / div).sum())
                b = float((params[m] / div).sum()) + par * (1 + opt_states) + float(held_b[m].sum())
                if stash == "once":
                    a, b = 0.0, b + a
                variants.append(Variant(c, k, t, "vanilla", time, params=par / batch, a=a, b=b, w=par,
                                        sync_out=sync_out))
                if recompute and training and stash == "schedule":
                    a_rc = float((stash_b[m] * keep[m] / div_out).sum())
                    if a_rc < a:
                        variants.append(Variant(c, k, t, "activation recomp", time + f_time,
                                                params=par / batch, a=a_rc, b=b, w=par, sync_out=sync_out))
    ids = []  # a node's layer key (one layer) or its operators' names
    for m in members:
        layer = {keys[i] for i in m.tolist()}
        ids.append(str(layer.pop()) if granularity == "layer" and len(layer) == 1 and None not in layer
                   else "+".join(ops[i].name for i in m.tolist()))
    pg = ParallelGraph.build(ids=ids, names=ids, num_kinds=K, edges=np.stack([bg.src, bg.dst], 1),
                             tensors=tensors, variants=variants, source=graph.source, tensor_edges=False)
    problem = ParallelProblem(pg, kinds, N, schedule, max_replicas=max_replicas)
    return problem, cls


def stage_problem(g: OnnxGraph, graph: OpGraph, devices: DeviceSet, *, granularity: str | None = None,
                  microbatches: int | None = None, schedule: str = "1f1b",
                  max_replicas: int | None = None) -> tuple[ParallelProblem, np.ndarray, str]:
    """:func:`onnx_parallel_problem` at the granularity given, or by default one node per layer where
    the model's names give layers and the layer nodes keep the splits (else one per operator). Returns
    the problem, the node of every operator of ``graph`` and the granularity used."""
    layers = len({k for k in graph.meta.get("layer") or () if k is not None})
    gran = granularity or ("layer" if layers > 1 else "op")

    def build(granularity):
        return onnx_parallel_problem(g, graph, devices, microbatches=microbatches, schedule=schedule,
                                     max_replicas=max_replicas, granularity=granularity)

    problem, cls = build(gran)
    if granularity is None and gran == "layer" and 2 * problem.graph.num_nodes < layers:
        # the layers' operators interleave, so merging them made cycles that merged most of the graph: a
        # layer node would hide the splits the operators allow, so the operators are the nodes
        gran = "op"
        problem, cls = build(gran)
    return problem, cls, gran
