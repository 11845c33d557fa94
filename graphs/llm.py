"""LLM decoding as a stage-model problem (:mod:`graphs.parallel`): layer ranges on stages, each stage on
one device kind with replicas ``d`` and tensor-parallel degree ``t``, memory = weights + the KV cache.

A model is a :class:`LLMConfig` (read from a ``config.json`` in the Hugging Face layout by
:func:`read_config`, or built by hand; nothing is downloaded). :func:`decode_problem` makes the problem
of generating tokens for ``batch`` concurrent sequences at ``context`` tokens each, in ``N``
micro-batches of ``batch / N`` sequences that flow through the pipeline:

* **nodes**: ``embed`` (token embedding), ``layer0`` .. ``layer{L-1}`` (decoder blocks) and ``head``
  (final norm and LM head), in a chain. A "sample" of the stage model is one generated token of one
  sequence, so the objective is seconds per token and its inverse the decode throughput (tokens/s).
* **a node's time** on a kind at degree ``t`` is one decode step of a micro-batch of ``m`` sequences
  divided by ``m``. The step is roofline-bound: ``max(FLOPs / fp16 peak, bytes / memory bandwidth)``
  with the weights (``1/t`` of them) read once per step and each sequence's KV cache (``1/t`` of the
  heads) read once per token, plus the tensor-parallel all-reduces of a block (two per block, of the
  micro-batch's hidden states, over the kind's intra-server link, :func:`onnx_variants.allreduce_time`'s
  convention) and a kernel launch per matrix product.
* **memory**: ``B`` = the node's weights on one device; ``A`` = the KV cache of one micro-batch's
  sequences at ``context`` tokens (``2 n_kv d_head`` values per token per layer, ``1/t`` of them). Under
  the ``gpipe`` schedule a replica holds ``N / d`` micro-batches in flight, so a device holds the KV
  cache of its share of the sequences: the memory that sets how large a batch fits.
* **tensors**: the hidden state of a token (``hidden x dtype`` bytes) between consecutive nodes, over
  each side's host link.
* **tensor parallelism**: ``t`` in 1, 2, 4, 8 up to the kind's count and server size, dividing the
  attention heads and the key/value heads (or a multiple of them: KV heads are then replicated) and the
  MLP width (above the key/value heads, each device keeps one head's cache); ``embed`` and ``head`` run
  replicated at ``t > 1`` (each device the whole of them; the head keeps its own copy of the matrix).

The decode FLOPs of a block per token are ``2 x`` its weights plus ``4 x context x hidden`` for the
attention over the cache; the weights of a block are ``q, o: hidden^2``, ``k, v: hidden x n_kv d_head``,
and the MLP's ``3 x hidden x intermediate`` (gated: gate, up, down).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .devices import DeviceSet
from .errors import InputError
from .jsonio import read_json
from .parallel import ParallelGraph, ParallelProblem, Variant

__all__ = ["LLMConfig", "read_config", "is_llm_config", "decode_problem", "TP_DEGREES"]

TP_DEGREES = (1, 2, 4, 8)
_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp16": 2, "bf16": 2, "fp32": 4, "float8": 1,
           "int8": 1}
_MATMULS_PER_BLOCK = 7  # q, k, v, o, gate, up, down: one launch each


@dataclass(frozen=True)
class LLMConfig:
    """A decoder-only transformer's shape (a ``config.json``'s fields, see :func:`read_config`)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    dtype_bytes: int = 2
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "dtype_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"model {self.name!r}: {f} must be a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise InputError(f"model {self.name!r}: hidden size {self.hidden} is not a multiple of the "
                             f"{self.heads} attention heads")
        if self.heads % self.kv_heads:
            raise InputError(f"model {self.name!r}: {self.heads} attention heads are not a multiple of the "
                             f"{self.kv_heads} key/value heads")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def block_params(self) -> int:
        """Weights of one decoder block (attention, gated MLP, two norms)."""
        kv = self.kv_heads * self.head_dim
        return 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate \
            + 2 * self.hidden

    @property
    def params(self) -> int:
        """All weights: embedding, blocks, final norm and LM head (shared with the embedding if tied)."""
        emb = self.vocab * self.hidden
        return emb + self.layers * self.block_params + self.hidden + (0 if self.tied_embeddings else emb)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token in one layer: keys and values of every key/value head."""
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes


def is_llm_config(data) -> bool:
    """Whether parsed JSON looks like a model config (``num_hidden_layers`` and ``hidden_size``)."""
    return isinstance(data, dict) and "num_hidden_layers" in data and "hidden_size" in data


def read_config(source: str | os.PathLike | dict, *, name: str | None = None) -> LLMConfig:
    """An :class:`LLMConfig` from a ``config.json`` (path or parsed dict) in the Hugging Face layout:
    ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (default: the
    attention heads), ``intermediate_size``, ``vocab_size``, ``torch_dtype`` (default float16) and
    ``tie_word_embeddings``. A missing or malformed field is an :class:`InputError` naming it."""
    where = None
    if not isinstance(source, dict):
        where = os.fspath(source)
        source = read_json(where)
    if not isinstance(source, dict):
        raise InputError("a model config must be a JSON object", source=where)

    def field(key: str, default=None):
        v = source.get(key, default)
        if v is None:
            raise InputError(f"the model config has no {key!r}", source=where)
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{key} must be an integer, got {v!r}", source=where)
        return v

    dtype = str(source.get("torch_dtype") or "float16")
    if dtype not in _DTYPES:
        raise InputError(f"torch_dtype {dtype!r} is not one of {', '.join(sorted(_DTYPES))}", source=where)
    heads = field("num_attention_heads")
    try:
        return LLMConfig(name or str(source.get("_name_or_path") or source.get("model_type") or "model"),
                         field("num_hidden_layers"), field("hidden_size"), heads,
                         field("num_key_value_heads", heads), field("intermediate_size"), field("vocab_size"),
                         _DTYPES[dtype], bool(source.get("tie_word_embeddings", False)))
    except InputError as e:
        raise InputError(str(e), source=where) from None


def _degrees(cfg: LLMConfig, spec, count: int) -> list[int]:
    top = min(count, spec.server_size or count)
    out = []
    for t in TP_DEGREES:
        kv_ok = cfg.kv_heads % t == 0 or t % cfg.kv_heads == 0
        if t <= top and cfg.heads % t == 0 and kv_ok and cfg.intermediate % t == 0:
            out.append(t)
    return out if not spec.host else [1]


def decode_problem(cfg: LLMConfig, devices: DeviceSet, *, batch: int, context: int,
                   microbatches: int | None = None, max_replicas: int | None = None) -> ParallelProblem:
    """The stage-model problem of decoding ``batch`` sequences at ``context`` tokens (see the module
    doc); ``microbatches`` (default: the largest power of two dividing ``batch`` and at most the number
    of devices' next power of two) must divide ``batch``."""
    from .onnx_variants import allreduce_time, default_microbatches, parallel_kinds

    for what, v in (("batch", batch), ("context", context)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{what} must be a positive integer, got {v!r}")
    if microbatches is None:
        microbatches = math.gcd(batch, default_microbatches(devices))
    if batch % microbatches:
        raise InputError(f"{microbatches} micro-batches do not divide a batch of {batch} sequences")
    m = batch // microbatches  # sequences per micro-batch
    by = cfg.dtype_bytes
    L = cfg.layers
    ids = ["embed"] + [f"layer{i}" for i in range(L)] + ["head"]
    emb_bytes = cfg.vocab * cfg.hidden * by
    variants: list[Variant] = []
    for k, (spec, count) in enumerate(zip(devices.specs, devices.counts)):
        peak = spec.fp16 if spec.fp16 > 0 else spec.fp32
        bw = spec.intra_bandwidth or spec.link_bandwidth
        for t in _degrees(cfg, spec, count):
            # embedding: a gather of m rows per step
            gather = spec.launch + m * cfg.hidden * by / spec.mem_bandwidth
            variants.append(Variant(0, k, t, "vanilla", gather / m, b=float(emb_bytes)))
            w = cfg.block_params * by / t
            # t above the key/value heads replicates them: each device keeps one head's cache
            kv_token = cfg.kv_bytes_per_token / min(t, cfg.kv_heads)
            flops = 2 * cfg.block_params / t * m + 4 * context * cfg.hidden / t * m
            moved = w + m * context * kv_token
            step = max(flops / peak, moved / spec.mem_bandwidth) + _MATMULS_PER_BLOCK * spec.launch \
                + 2 * allreduce_time(m * cfg.hidden * by, t, bw)
            a = float(m * context * kv_token)  # the KV cache of one micro-batch's sequences
            for i in range(L):
                variants.append(Variant(1 + i, k, t, "vanilla", step / m, a=a, b=float(w)))
            # the LM head keeps its own copy of the matrix (also when tied: it may sit on another stage)
            head_w = emb_bytes + cfg.hidden * by
            head_step = max(2 * cfg.vocab * cfg.hidden * m / peak, head_w / spec.mem_bandwidth) + spec.launch
            variants.append(Variant(L + 1, k, t, "vanilla", head_step / m, b=float(head_w)))
    token = cfg.hidden * by
    tensors = [(u, [u + 1], [0.0 if s.host else token / s.link_bandwidth for s in devices.specs])
               for u in range(L + 1)]
    g = ParallelGraph.build(ids=ids, names=ids, num_kinds=len(devices.specs),
                            edges=[(u, u + 1) for u in range(L + 1)], tensors=tensors, variants=variants,
                            source=cfg.name)
    return ParallelProblem(g, parallel_kinds(devices), microbatches, "gpipe", max_replicas=max_replicas)
