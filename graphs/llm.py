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

The decode FLOPs of a block per token are ``2 x`` its weights plus ``4 x context x heads d_head`` for
the attention over the cache; the weights of a block are ``q, o: hidden x heads d_head``, ``k, v: hidden
x n_kv d_head``, and the MLP's ``3 x hidden x intermediate`` when it is gated (gate, up, down: Llama,
Gemma, Qwen, ...) or ``2 x hidden x intermediate`` when it has two matrices (up, down: GPT-NeoX, Phi-2,
StarCoder2), as :attr:`LLMConfig.gated_mlp` says (:func:`read_config` takes it from the config's
``model_type``). ``d_head`` is the config's ``head_dim``, ``hidden / heads`` when it gives none
(docs/llm_serving.md, "Model configs", says which keys are read, which are refused and which are ignored
as negligible).

**Serving** (the second half of the module): :func:`layer_prefill_time` (a prompt of ``I`` tokens,
compute-bound: ``2 x`` weights per token plus causal attention's ``2 x heads d_head x I (I + 1)``)
beside :func:`layer_decode_step`; a request mix (:func:`read_mix`: buckets of input and output tokens with
weights); :class:`ServingModel`, whose class doc states the serving model (TTFT = the wait for a KV
slot + an M/G/1 prefill wait + the prefill through the stages, TPOT = the full batch's step stalled by
the prefills' share, KV slots by Little's law) and scores the goodput of any decode plan;
:func:`chain_plans`, every plan of a small chain problem; and separate prefill and decode pools
(:func:`prefill_problem`, :func:`disaggregated_goodput`). :mod:`graphs.llm_sim` simulates a plan
serving a request trace (discrete events, continuous batching, KV-slot admission) with these same
per-layer times, to check the figures.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, replace
from typing import NamedTuple

from .devices import DeviceSet
from .errors import InputError
from .jsonio import read_json, shown
from .parallel import ParallelGraph, ParallelProblem, Variant

__all__ = ["LLMConfig", "read_config", "read_model_config", "config_from_onnx", "is_onnx_decoder",
           "is_llm_config", "decode_problem", "microbatch_counts", "TP_DEGREES", "layer_decode_step",
           "layer_prefill_time", "embed_time", "head_step", "prefill_node_time", "Bucket", "RequestMix",
           "read_mix", "check_slo", "BucketServing", "GoodputEvaluation", "ServingModel", "chain_plans",
           "prefill_problem", "kv_transfer_time", "prefill_profile", "disaggregated_goodput",
           "decode_stall", "slot_wait", "colocated_slot_wait", "has_tpot"]

TP_DEGREES = (1, 2, 4, 8)
_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp16": 2, "bf16": 2, "fp32": 4, "float8": 1,
           "int8": 1}
_REQUIRED = object()  # read_config: a key without a default
# read_config's assumptions for an unknown model_type are logged here; the command line prints the
# "graphs" loggers' warnings as "warning: ..." lines
log = logging.getLogger(__name__)


class _Family(NamedTuple):
    tied: bool  # tie_word_embeddings when the config leaves it out (the config class's default)
    gated: bool  # the MLP: gate, up, down (three hidden x intermediate matrices); False: up, down (two)


# What a Hugging Face model_type implies that its config.json may not say: the default of
# tie_word_embeddings in transformers' config class of that name (transformers writes the key only when it
# differs from the defaults, so a Gemma config.json without it is tied), and whether the MLP is gated.
# Each checked against the family's configuration and modelling code in transformers (the MLP's
# projections). An unknown or missing model_type: untied when the key is absent, gated; read_config
# says so (_log_unknown_family). Listed in docs/llm_serving.md ("Model configs").
_FAMILIES = {
    # gated MLP (gate_proj, up_proj, down_proj; Phi-3 fuses gate and up into one 2 x intermediate matrix)
    "llama": _Family(False, True), "mistral": _Family(False, True), "qwen2": _Family(False, True),
    "qwen3": _Family(False, True), "phi3": _Family(False, True), "olmo": _Family(False, True),
    "olmo2": _Family(False, True), "granite": _Family(False, True), "stablelm": _Family(False, True),
    "gemma": _Family(True, True), "gemma2": _Family(True, True), "gemma3_text": _Family(True, True),
    "cohere": _Family(True, True),
    # two matrices (GPT-NeoX and Persimmon: dense_h_to_4h, dense_4h_to_h; Phi-1/2: fc1, fc2; StarCoder2:
    # c_fc, c_proj; Nemotron: up_proj, down_proj)
    "gpt_neox": _Family(False, False), "persimmon": _Family(False, False), "phi": _Family(False, False),
    "nemotron": _Family(False, False), "starcoder2": _Family(True, False),
}

# Hugging Face config keys that change a model's cost but are not modelled: a config that gives one a
# value (anything but null, 0, false or empty) is refused, naming the keys and why. A key of
# _NEGLIGIBLE changes the architecture at a cost too small to count (under 0.1% of a block's weights or
# FLOPs): ignored. Both are listed in docs/llm_serving.md ("Model configs"); every other key a config
# carries (token ids, initialisation, dropout, ...) leaves the cost model as it is.
_MOE = ("mixture-of-experts models are not modelled (the weights of every expert, the FLOPs of the active "
        "ones)")
_MLA = "multi-head latent attention (a compressed KV cache, as DeepSeek's) is not modelled"
_UNMODELLED = {
    "num_local_experts": _MOE, "num_experts": _MOE, "n_routed_experts": _MOE, "n_shared_experts": _MOE,
    "num_experts_per_tok": _MOE, "moe_intermediate_size": _MOE, "shared_expert_intermediate_size": _MOE,
    "kv_lora_rank": _MLA, "q_lora_rank": _MLA,
    "quantization_config": "quantized weights are not modelled (weights would count at the dtype's bytes)",
}
_NEGLIGIBLE = {
    "attention_bias": "bias vectors of q, k, v, o: about 4 hidden values against 4 hidden^2 weights",
    "mlp_bias": "bias vectors of gate, up, down: about 3 intermediate values against 3 hidden x intermediate",
    "rope_scaling": "position encoding: no weights, a few FLOPs per value of q and k",
    "rope_theta": "position encoding: no weights, a few FLOPs per value of q and k",
    "partial_rotary_factor": "position encoding: no weights, a few FLOPs per value of q and k",
}


@dataclass(frozen=True)
class LLMConfig:
    """A decoder-only transformer's shape (a ``config.json``'s fields, see :func:`read_config`).
    ``head_dim``: the width of one attention head (``None``: ``hidden // heads``, which must then divide);
    the attention is ``heads x head_dim`` wide, the KV cache ``kv_heads x head_dim``. ``sliding_window``:
    the tokens a layer attends to (``None``: every token); decoding or prefilling past it is refused
    (:func:`decode_problem`, :func:`prefill_problem`), as the cache it keeps then is not modelled.
    ``gated_mlp``: the MLP is gated, three ``hidden x intermediate`` matrices (gate, up, down); ``False``:
    two (up, down), as GPT-NeoX's, Phi-2's and StarCoder2's. Its weights, FLOPs and kernel launches
    follow."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    dtype_bytes: int = 2
    tied_embeddings: bool = False
    head_dim: int | None = None
    sliding_window: int | None = None
    gated_mlp: bool = True

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "dtype_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"model {self.name!r}: {f} must be a positive integer, got {v!r}")
        for f in ("head_dim", "sliding_window"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError(f"model {self.name!r}: {f} must be a positive integer or None, got {v!r}")
        if not isinstance(self.gated_mlp, bool):
            raise InputError(f"model {self.name!r}: gated_mlp must be True or False, got {self.gated_mlp!r}")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise InputError(f"model {self.name!r}: hidden size {self.hidden} is not a multiple of the "
                                 f"{self.heads} attention heads (give head_dim)")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.heads % self.kv_heads:
            raise InputError(f"model {self.name!r}: {self.heads} attention heads are not a multiple of the "
                             f"{self.kv_heads} key/value heads")

    @property
    def attention_width(self) -> int:
        """The width of the queries and of the attention's output: ``heads x head_dim``."""
        return self.heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """The MLP's ``hidden x intermediate`` matrices: 3 gated (gate, up, down), else 2 (up, down)."""
        return 3 if self.gated_mlp else 2

    @property
    def block_params(self) -> int:
        """Weights of one decoder block (attention, the MLP's :attr:`mlp_matrices`, two norms)."""
        kv = self.kv_heads * self.head_dim
        return 2 * self.hidden * self.attention_width + 2 * self.hidden * kv \
            + self.mlp_matrices * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def block_matmuls(self) -> int:
        """Matrix products of one decoder block, a kernel launch each: q, k, v, o and the MLP's."""
        return 4 + self.mlp_matrices

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
    ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (absent or
    null: the attention heads), ``head_dim`` (absent or null: hidden / heads), ``intermediate_size``,
    ``vocab_size``, ``dtype`` or ``torch_dtype`` (default float16; both given must agree),
    ``tie_word_embeddings``, ``sliding_window`` (unless ``use_sliding_window`` is false) and
    ``model_type``. Booleans must be JSON booleans. A config that sets a key whose cost is not modelled
    (mixture of experts, latent attention, quantization) is refused. A missing or malformed field is an
    :class:`InputError` naming it.

    ``model_type`` (a string) gives what a config.json leaves unsaid (``_FAMILIES``, as transformers'
    config class of that name has it):

    * ``tie_word_embeddings`` when the key is absent: true for ``gemma``, ``gemma2``, ``gemma3_text``,
      ``cohere`` and ``starcoder2`` (transformers omits the key when it equals the default, so Gemma's
      config.json has none), false for ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``, ``olmo``,
      ``olmo2``, ``granite``, ``stablelm``, ``gpt_neox``, ``persimmon``, ``phi`` and ``nemotron``. A key
      given is always used;
    * the MLP (:attr:`LLMConfig.gated_mlp`): two matrices (up, down) for ``gpt_neox``, ``persimmon``,
      ``phi`` (Phi-1 and Phi-2; Phi-3 is ``phi3``), ``nemotron`` and ``starcoder2``; gated, three (gate,
      up, down), for the others listed. ``hidden_act`` does not tell them apart (Gemma's gated MLP says
      ``gelu``), so it is not read.

    Any other ``model_type``, or none: the MLP is counted gated and, when ``tie_word_embeddings`` is
    absent, the embeddings untied (the LM head a matrix of its own: the larger count; transformers' own
    default where a family sets none is tied). An unknown ``model_type`` (a config transformers wrote for
    a family not listed) gets one warning on the ``graphs.llm`` logger naming these assumptions and how to
    avoid them; a config without one (transformers always writes it: a config written by hand, read in
    the layout documented for one, Llama's) gets the same message at INFO level."""
    where = None
    if not isinstance(source, dict):
        where = os.fspath(source)
        source = read_json(where)
    if not isinstance(source, dict):
        raise InputError("a model config must be a JSON object", source=where)

    refused: dict[str, list[str]] = {}
    for key, why in _UNMODELLED.items():
        if source.get(key):
            refused.setdefault(why, []).append(f"{key} = {json.dumps(source[key])}")
    if refused:
        raise InputError("; ".join(f"{why}: the config sets {', '.join(keys)}"
                                   for why, keys in refused.items()), source=where)

    def field(key: str, default=_REQUIRED):
        v = source.get(key)
        if v is None:
            if default is _REQUIRED:
                raise InputError(f"the model config has no {key!r}", source=where)
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{key} must be an integer, got {v!r}", source=where)
        return v

    def flag(key: str, default: bool) -> bool:
        v = source.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise InputError(f"{key} must be true or false (a JSON boolean), got {v!r}", source=where)
        return v

    dtypes = {key: source[key] for key in ("dtype", "torch_dtype") if source.get(key) is not None}
    if len(dtypes) == 2 and dtypes["dtype"] != dtypes["torch_dtype"]:
        raise InputError(f"dtype {dtypes['dtype']!r} and torch_dtype {dtypes['torch_dtype']!r} differ: give "
                         f"one", source=where)
    key, dtype = next(iter(dtypes.items()), ("torch_dtype", "float16"))
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise InputError(f"{key} {dtype!r} is not one of {', '.join(sorted(_DTYPES))}", source=where)
    model_type = source.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(f"model_type must be a string, got {model_type!r}", source=where)
    family = _FAMILIES.get(model_type) if model_type else None
    tie_default, gated = (family.tied, family.gated) if family is not None else (False, True)
    tie_absent = source.get("tie_word_embeddings") is None
    heads = field("num_attention_heads")
    window = field("sliding_window", None)
    if not flag("use_sliding_window", True):
        window = None
    try:
        cfg = LLMConfig(name or str(source.get("_name_or_path") or model_type or "model"),
                        field("num_hidden_layers"), field("hidden_size"), heads,
                        field("num_key_value_heads", heads), field("intermediate_size"), field("vocab_size"),
                        _DTYPES[dtype], flag("tie_word_embeddings", tie_default),
                        head_dim=field("head_dim", None), sliding_window=window,
                        gated_mlp=gated)
    except InputError as e:
        raise InputError(e.detail, source=where) from None
    if family is None:
        _log_unknown_family(cfg, model_type, tie_absent, where)
    return cfg


def _log_unknown_family(cfg: LLMConfig, model_type: str | None, tie_absent: bool, where: str | None) -> None:
    """:func:`read_config`'s one message for a config whose ``model_type`` is not in ``_FAMILIES``: what
    was assumed in its place; a warning for an unknown ``model_type``, INFO for none (a config written by
    hand, whose documented layout the assumptions are)."""
    what = f"model_type {model_type!r} is not a family whose defaults are known" if model_type else \
        "the config gives no model_type"
    assumed = ["a gated MLP, three hidden x intermediate matrices (gate, up, down); a two-matrix MLP "
               "(GPT-NeoX, Phi-2, StarCoder2) would have 2/3 of those weights and FLOPs"]
    if tie_absent:
        assumed.append(f"untied embeddings, as tie_word_embeddings is absent: an LM head of its own, "
                       f"{cfg.vocab} x {cfg.hidden} more weights than tied (transformers' own default for "
                       f"a family that sets none is tied)")
    fix = "give tie_word_embeddings, and the model_type" if tie_absent else "give the model_type"
    gated = ", ".join(sorted(k for k, f in _FAMILIES.items() if f.gated))
    two = ", ".join(sorted(k for k, f in _FAMILIES.items() if not f.gated))
    log.log(logging.WARNING if model_type else logging.INFO,
            "%s%s: assumed %s. To be exact, %s of the model's family, or of one with its MLP (gated: %s; "
            "two matrices: %s)", f"{where}: " if where else f"model {cfg.name!r}: ", what,
            "; and ".join(assumed), fix, gated, two)


# the past key/value inputs of an exported decoder: optimum's and onnxruntime-genai's
# (``past_key_values.3.key``) and the older ``past.3.key``
_PAST_INPUT = re.compile(r"^past(?:_key_values)?\.(\d+)\.(key|value)$")
_ONNX_BYTES = {1: 4, 10: 2, 16: 2, 11: 8}  # FLOAT, FLOAT16, BFLOAT16, DOUBLE


def _past_inputs(graph) -> dict[int, dict[str, object]]:
    """``{layer: {"key": input, "value": input}}`` of a graph's past key/value inputs."""
    out: dict[int, dict[str, object]] = {}
    for v in graph.input:
        m = _PAST_INPUT.match(v.name)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = v
    return out


def is_onnx_decoder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an ONNX decoder with past key/value inputs (read without its weights)."""
    import onnx

    if not str(path).lower().endswith(".onnx") or not os.path.isfile(path):
        return False
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception:  # not a model: the ONNX front end says why, where it is read
        return False
    return bool(_past_inputs(model.graph))


def config_from_onnx(path: str | os.PathLike, *, name: str | None = None) -> LLMConfig:
    """The :class:`LLMConfig` of an ONNX decoder exported with past key/values (the layout of optimum
    and onnxruntime-genai: inputs ``past_key_values.N.key``/``.value`` of shape ``[batch, kv_heads,
    past_tokens, head_dim]``), read from its graph alone (weights are not loaded): layers from the past
    inputs, key/value heads and head size from their shapes, hidden size and vocabulary from the token
    embedding (the ``Gather`` on the token ids), the MLP width from the matrices beside it (a gated MLP
    unless exactly two a layer have that width: up and down, :attr:`LLMConfig.gated_mlp`), the attention
    heads from the width of the query and output projections (``hidden`` unless two matrices a layer
    show another), the element size from the embedding's type, and tied embeddings when the file stores
    no second vocabulary-sized matrix (an exporter that writes the tied head out as its own matrix makes
    two: the file's memory). What cannot be read is an :class:`InputError` naming it."""
    import collections

    import onnx

    where = os.fspath(path)
    try:
        model = onnx.load(where, load_external_data=False)
    except FileNotFoundError:
        raise InputError("no such file", source=where) from None
    except Exception as e:  # protobuf's errors are untyped
        raise InputError(f"not an ONNX model ({type(e).__name__})", source=where) from None
    g = model.graph
    past = _past_inputs(g)
    if not past:
        raise InputError("no past key/value inputs (past_key_values.N.key): not a decoder exported with its "
                         "KV cache", source=where)
    layers = sorted(past)
    if layers != list(range(len(layers))) or any(set(past[i]) != {"key", "value"} for i in layers):
        raise InputError(f"past key/value inputs for layers {layers}: every layer 0..{len(layers) - 1} "
                         f"needs a key and a value", source=where)

    def dims(v) -> list:
        return [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]

    shape = dims(past[0]["key"])
    if len(shape) != 4 or shape[1] is None or shape[3] is None:
        raise InputError(f"{past[0]['key'].name} has shape {shape}: expected [batch, kv_heads, past_tokens, "
                         f"head_dim] with kv_heads and head_dim fixed", source=where)
    kv_heads, head_dim = int(shape[1]), int(shape[3])
    inits = {t.name: t for t in g.initializer}
    ids = {v.name for v in g.input if v.type.tensor_type.elem_type in (6, 7)}  # INT32, INT64 inputs
    embed = None
    for n in g.node:
        if n.op_type == "Gather" and len(n.input) >= 2 and n.input[1] in ids and n.input[0] in inits \
                and len(inits[n.input[0]].dims) == 2:
            embed = inits[n.input[0]]
            break
    if embed is None:
        raise InputError("no token embedding (a Gather of an initializer by the token ids) found",
                         source=where)
    vocab, hidden = (int(x) for x in embed.dims)
    kv_width = kv_heads * head_dim
    counts = collections.Counter()  # the hidden x w matrices by width w (w != hidden)
    vocab_matrices = 0
    for t in g.initializer:
        if len(t.dims) != 2:
            continue
        a, b = (int(x) for x in t.dims)
        if {a, b} == {hidden, vocab}:
            vocab_matrices += 1
        elif hidden in (a, b):
            other = b if a == hidden else a
            if other != hidden:
                counts[other] += 1
    widths = collections.Counter({w: c for w, c in counts.items() if w != kv_width})
    if not widths:
        raise InputError(f"no MLP matrix (hidden {hidden} x width) found", source=where)
    # the most matrices a layer (gated: gate, up, down); on a tie the wider (a two-matrix MLP beside q and o
    # of a width other than hidden: the MLP is the wider)
    intermediate = max(widths, key=lambda w: (widths[w], w))
    gated = counts[intermediate] != 2 * len(layers)  # gate, up, down; two a layer: up and down
    # the attention's width, heads x head_dim: q and o are hidden x hidden matrices, unless it differs
    # from hidden; then two matrices a layer have that width (four with k and v, if it is theirs)
    n = len(layers)
    attn = [w for w, c in widths.items() if w != intermediate and c == 2 * n and w % head_dim == 0]
    width = kv_width if counts[kv_width] == 4 * n else attn[0] if len(attn) == 1 else hidden
    if width % head_dim:
        raise InputError(f"hidden size {hidden} is not a multiple of the head size {head_dim}", source=where)
    if embed.data_type not in _ONNX_BYTES:
        raise InputError(f"the embedding's element type {embed.data_type} is not a float type", source=where)
    stem = os.path.splitext(os.path.basename(where))[0]
    try:
        return LLMConfig(name or stem, n, hidden, width // head_dim, kv_heads, intermediate, vocab,
                         _ONNX_BYTES[embed.data_type], tied_embeddings=vocab_matrices < 2, head_dim=head_dim,
                         gated_mlp=gated)
    except InputError as e:
        raise InputError(str(e), source=where) from None


def read_model_config(source: str | os.PathLike | dict, *, name: str | None = None) -> LLMConfig:
    """:func:`read_config` of a ``config.json``, :func:`config_from_onnx` of an ``.onnx`` decoder."""
    if not isinstance(source, dict) and str(source).lower().endswith(".onnx"):
        return config_from_onnx(source, name=name)
    return read_config(source, name=name)


def _degrees(cfg: LLMConfig, spec, count: int) -> list[int]:
    top = min(count, spec.server_size or count)
    out = []
    for t in TP_DEGREES:
        kv_ok = cfg.kv_heads % t == 0 or t % cfg.kv_heads == 0
        if t <= top and cfg.heads % t == 0 and kv_ok and cfg.intermediate % t == 0:
            out.append(t)
    return out if not spec.host else [1]


def _kv_token(cfg: LLMConfig, t: int) -> float:
    """KV-cache bytes of one token in one layer on one of ``t`` devices: ``t`` above the key/value heads
    replicates them, so each device keeps one head's cache."""
    return cfg.kv_bytes_per_token / min(t, cfg.kv_heads)


def _within_window(cfg: LLMConfig, tokens: int, what: str) -> None:
    """Refuse ``tokens`` past the model's sliding window: the cache a sliding window keeps, and the
    attention over it, are not modelled (up to the window they are those of full attention)."""
    w = cfg.sliding_window
    if w is not None and tokens > w:
        raise InputError(f"model {cfg.name!r}: {what} of {tokens} tokens is past its sliding_window of {w} "
                         f"tokens, and attention over a sliding window is not modelled: use at most {w} "
                         f"tokens, or remove sliding_window from the config to count every token's cache "
                         f"(an upper bound)")


def _peak(spec) -> float:
    return spec.fp16 if spec.fp16 > 0 else spec.fp32


def layer_decode_step(cfg: LLMConfig, spec, t: int, batch: int, context: int | float) -> float:
    """Seconds of one decode step of one decoder block for ``batch`` sequences whose caches hold
    ``context`` tokens on average, on ``t`` devices of ``spec`` (bandwidth-bound: the weights read once,
    each sequence's cache once; see the module doc). FLOPs and bytes are sums over the sequences, so a
    batch of mixed contexts takes exactly the time of its mean context."""
    from .onnx_variants import allreduce_time

    by = cfg.dtype_bytes
    w = cfg.block_params * by / t
    flops = 2 * cfg.block_params / t * batch + 4 * context * cfg.attention_width / t * batch
    moved = w + batch * context * _kv_token(cfg, t)
    return max(flops / _peak(spec), moved / spec.mem_bandwidth) + cfg.block_matmuls * spec.launch \
        + 2 * allreduce_time(batch * cfg.hidden * by, t, spec.intra_bandwidth or spec.link_bandwidth)


def layer_prefill_time(cfg: LLMConfig, spec, t: int, tokens: int) -> float:
    """Seconds to prefill one prompt of ``tokens`` tokens through one decoder block on ``t`` devices of
    ``spec`` (compute-bound for long prompts): ``2 x`` the block's weights per token plus causal
    attention's quadratic term ``4 x width x (1 + 2 + .. + tokens) = 2 x width x tokens (tokens + 1)``
    FLOPs (``width = heads x head_dim``), against the weights read once and the prompt's KV cache
    written once; the two all-reduces of the prompt's hidden states at ``t > 1`` and a launch per matrix
    product. (At one token this is the decode step of one sequence at a context of one token.)"""
    from .onnx_variants import allreduce_time

    by = cfg.dtype_bytes
    w = cfg.block_params * by / t
    flops = 2 * cfg.block_params / t * tokens + 2 * cfg.attention_width * tokens * (tokens + 1) / t
    moved = w + tokens * _kv_token(cfg, t)
    return max(flops / _peak(spec), moved / spec.mem_bandwidth) + cfg.block_matmuls * spec.launch \
        + 2 * allreduce_time(tokens * cfg.hidden * cfg.dtype_bytes, t,
                             spec.intra_bandwidth or spec.link_bandwidth)


def embed_time(cfg: LLMConfig, spec, tokens: int) -> float:
    """Seconds of the embedding gather of ``tokens`` rows (one launch)."""
    return spec.launch + tokens * cfg.hidden * cfg.dtype_bytes / spec.mem_bandwidth


def head_step(cfg: LLMConfig, spec, rows: int) -> float:
    """Seconds of the final norm and LM head for ``rows`` positions (decode: one per sequence; prefill:
    the prompt's last position only, the one whose logits give the first token)."""
    head_w = cfg.vocab * cfg.hidden * cfg.dtype_bytes + cfg.hidden * cfg.dtype_bytes
    return max(2 * cfg.vocab * cfg.hidden * rows / _peak(spec), head_w / spec.mem_bandwidth) + spec.launch


def prefill_node_time(cfg: LLMConfig, spec, t: int, node: int, tokens: int) -> float:
    """Prefill seconds of node ``node`` of :func:`decode_problem`'s chain (0: embed, 1..L: the blocks,
    L+1: the head) for one prompt of ``tokens`` tokens on ``t`` devices of ``spec`` (the embedding and
    the head run replicated at ``t > 1``, as in decoding)."""
    if node == 0:
        return embed_time(cfg, spec, tokens)
    if node == cfg.layers + 1:
        return head_step(cfg, spec, 1)
    return layer_prefill_time(cfg, spec, t, tokens)


def microbatch_counts(batch: int, devices: DeviceSet) -> list[int]:
    """The micro-batch counts a decode of ``batch`` sequences on ``devices`` is searched over, the most
    first: every power of two dividing ``batch`` up to the devices' default (the smallest power of two
    at least the devices), the first being :func:`decode_problem`'s default. More micro-batches than
    that leave some idle (``sum d <= N``) and read each stage's weights more often per token: never
    faster."""
    from .onnx_variants import default_microbatches

    top = math.gcd(batch, default_microbatches(devices))
    return [top >> j for j in range(top.bit_length())]


def decode_problem(cfg: LLMConfig, devices: DeviceSet, *, batch: int, context: int,
                   microbatches: int | None = None, max_replicas: int | None = None,
                   memory_context: int | None = None) -> ParallelProblem:
    """The stage-model problem of decoding ``batch`` sequences at ``context`` tokens (see the module
    doc); ``microbatches`` (default: the largest power of two dividing ``batch`` and at most the number
    of devices' next power of two) must divide ``batch``. ``memory_context`` (default ``context``): the
    tokens of each sequence's KV cache that memory must hold, when it differs from the context the step
    times are computed at (a request mix: times at its mean context, memory at its longest request).
    Either past the model's ``sliding_window`` is an :class:`InputError` (not modelled)."""

    mem_context = context if memory_context is None else memory_context
    for what, v in (("batch", batch), ("context", context), ("memory context", mem_context)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{what} must be a positive integer, got {v!r}")
    if microbatches is None:
        microbatches = microbatch_counts(batch, devices)[0]
    if batch % microbatches:
        raise InputError(f"{microbatches} micro-batches do not divide a batch of {batch} sequences")
    _within_window(cfg, max(context, mem_context), "a context")
    m = batch // microbatches  # sequences per micro-batch
    by = cfg.dtype_bytes
    L = cfg.layers
    ids = ["embed"] + [f"layer{i}" for i in range(L)] + ["head"]
    emb_bytes = cfg.vocab * cfg.hidden * by
    variants: list[Variant] = []
    for k, (spec, count) in enumerate(zip(devices.specs, devices.counts)):
        for t in _degrees(cfg, spec, count):
            # embedding: a gather of m rows per step
            variants.append(Variant(0, k, t, "vanilla", embed_time(cfg, spec, m) / m, b=float(emb_bytes)))
            w = cfg.block_params * by / t
            step = layer_decode_step(cfg, spec, t, m, context)
            a = float(m * mem_context * _kv_token(cfg, t))  # the KV cache of one micro-batch's sequences
            for i in range(L):
                variants.append(Variant(1 + i, k, t, "vanilla", step / m, a=a, b=float(w)))
            # the LM head keeps its own copy of the matrix (also when tied: it may sit on another stage)
            variants.append(Variant(L + 1, k, t, "vanilla", head_step(cfg, spec, m) / m,
                                    b=float(emb_bytes + cfg.hidden * by)))
    token = cfg.hidden * by
    tensors = [(u, [u + 1], [0.0 if s.host else token / s.link_bandwidth for s in devices.specs])
               for u in range(L + 1)]
    g = ParallelGraph.build(ids=ids, names=ids, num_kinds=len(devices.specs),
                            edges=[(u, u + 1) for u in range(L + 1)], tensors=tensors, variants=variants,
                            source=cfg.name)
    return ParallelProblem(g, devices.cluster().kinds, microbatches, "gpipe", max_replicas=max_replicas)


# =========================================================================== serving: prefill and goodput
# A request mix, TTFT / TPOT targets and the goodput of a decode plan (docs/serving.md, "Goodput").


@dataclass(frozen=True)
class Bucket:
    """Requests of ``input`` prompt tokens and ``output`` generated tokens (the first one comes from the
    prefill), ``weight`` their share of the arrivals (relative; the mix normalises)."""

    input: int
    output: int
    weight: float


@dataclass(frozen=True)
class RequestMix:
    """A histogram of request sizes (:func:`read_mix`)."""

    buckets: tuple[Bucket, ...]
    source: str | None = None

    @property
    def shares(self) -> list[float]:
        total = sum(b.weight for b in self.buckets)
        return [b.weight / total for b in self.buckets]

    @property
    def memory_context(self) -> int:
        """Tokens a sequence's KV cache must hold: the longest request's prompt plus its output."""
        return max(b.input + b.output for b in self.buckets)

    @property
    def decode_steps(self) -> float:
        """Mean decode steps per request, ``E[output - 1]``."""
        return sum(p * (b.output - 1) for p, b in zip(self.shares, self.buckets))

    @property
    def decode_context(self) -> int:
        """The mean context of a decode step (rounded up): over a request's ``output - 1`` steps the cache
        holds ``input + 1 .. input + output - 1`` tokens, mean ``input + output / 2``, weighted by the
        steps (each step of each running sequence is one token of the batch). A step's FLOPs and bytes
        are sums over its sequences (:func:`layer_decode_step`), so this mean gives the mean step time.
        Without decode steps (every output one token): the longest prompt."""
        steps = sum(p * (b.output - 1) for p, b in zip(self.shares, self.buckets))
        if steps <= 0:
            return max(b.input for b in self.buckets)
        tokens = sum(p * (b.output - 1) * (b.input + b.output / 2) for p, b in zip(self.shares, self.buckets))
        return max(1, math.ceil(tokens / steps - 1e-9))


def read_mix(source: str | os.PathLike | dict | list) -> RequestMix:
    """A :class:`RequestMix` from a JSON file (or its parsed content): ``{"buckets": [{"input": 512,
    "output": 128, "weight": 3}, ...]}`` or the bare list (docs/formats.md). Every field is required:
    ``input`` and ``output`` positive integers (tokens), ``weight`` a positive number; a bad one is an
    :class:`InputError` naming the file, the bucket and the field."""
    where = None
    if not isinstance(source, (dict, list)):
        where = os.fspath(source)
        source = read_json(where)
    items = source.get("buckets") if isinstance(source, dict) else source
    if isinstance(source, dict) and "buckets" not in source:
        raise InputError("a request mix needs a 'buckets' list of {input, output, weight}", source=where)
    if not isinstance(items, list) or not items:
        raise InputError("'buckets' must be a non-empty list of {input, output, weight}", source=where)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(f"bucket {i} must be an object with input, output and weight", source=where)
        for key in ("input", "output", "weight"):
            if key not in item:
                raise InputError(f"bucket {i} has no {key!r} (each bucket needs input, output, weight)",
                                 source=where)
        unknown = sorted(set(item) - {"input", "output", "weight"})
        if unknown:
            raise InputError(f"bucket {i}: unknown field {unknown[0]!r} (a bucket has input, output, weight)",
                             source=where)
        for key in ("input", "output"):
            v = item[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"bucket {i}: {key!r} must be a positive integer (tokens), got {shown(v)}",
                                 source=where)
        w = item["weight"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (0 < w < math.inf):
            raise InputError(f"bucket {i}: 'weight' must be a positive number, got {shown(w)}", source=where)
        out.append(Bucket(item["input"], item["output"], float(w)))
    return RequestMix(tuple(out), where)


def check_slo(name: str, value: float | None) -> float | None:
    """A latency target in seconds (``None``: none): positive and finite, else an :class:`InputError`
    naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise InputError(f"{name} must be a positive number of milliseconds, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class BucketServing:
    bucket: Bucket
    share: float
    prefill: float  # seconds: the prompt through every stage, no waiting
    occupancy: float  # seconds of the pipeline's prefill bottleneck, max over stages of p_i / d_i
    ttft: float  # seconds at the plan's rate: queueing wait + prefill
    meets: bool  # TTFT and TPOT within the targets


@dataclass(frozen=True)
class GoodputEvaluation:
    """The goodput of one decode plan at batch ``batch`` (see :func:`ServingModel.evaluate`); times in
    seconds, rates per second."""

    batch: int
    valid: bool
    problems: tuple[str, ...]
    tokens_per_s: float  # decode capacity, 1 / the plan's time per token
    step_latency: float  # one decode step of one micro-batch through every stage
    tpot_full: float  # TPOT of the full batch with no prefill: max(step latency, batch / tokens_per_s)
    rate: float  # requests/s arriving at which the goodput is reached
    goodput: float  # requests/s meeting both targets at that rate
    attainment: float  # their share of the requests
    tpot: float  # at that rate (decode stalled by the prefills, :func:`decode_stall`)
    wait: float  # mean queueing wait before a prefill at that rate
    prefill_load: float  # the prefill share of the bottleneck's time at that rate
    slots: float  # KV-cache slots in use on average at that rate (at most batch)
    limit: str  # what stops a higher rate
    buckets: tuple[BucketServing, ...]
    kv_transfer: float = 0.0  # disaggregated: mean seconds to move a prompt's KV cache to the decode pool
    prefill_pool: tuple | None = None  # disaggregated: (problem, plan, evaluation) of the prefill pool
    convoy: float = 0.0  # colocated: E[C - S], seconds a prefill stalls decode beyond the bottleneck's share
    slot_wait: float = 0.0  # colocated: mean seconds an arrival waits for a KV slot (:func:`slot_wait`)


_MEETS_RTOL = 1e-9


class ServingModel:
    """A model config, devices, a request mix and TTFT / TPOT targets (seconds; ``None``: none): the
    decode problem of each batch size and the goodput of any plan of it.

    **The serving model** (colocated prefill and decode, continuous batching, per replica):

    * the engine decodes ``batch`` sequences per step (its KV slots), the plan's micro-batches of
      ``m = batch / N`` flowing through the stages; decode times at the mix's mean context
      (:attr:`RequestMix.decode_context`), memory at its longest request (:attr:`RequestMix.memory_context`);
    * **TPOT** of a full batch: ``T0 = max(sum_i m d_i tps_i, batch x tps_max)``, the larger of one
      micro-batch's step through every stage (``m d_i tps_i`` on a replica of stage ``i``) and the
      round of all ``N`` micro-batches at the bottleneck (the stage evaluator's times per token);
    * **prefill**: a prompt of ``I`` tokens runs alone on one replica of each stage in turn:
      ``p_i(I)`` = its nodes' :func:`prefill_node_time` plus the hidden states of ``I`` tokens over the
      links the stage's tensors cross; latency ``P(I) = sum_i p_i(I)``; the pipeline's prefill
      bottleneck is busy ``S(I) = max_i p_i(I) / d_i`` per request (replicas take requests in turn);
    * **queueing**: Poisson arrivals at rate ``lam``, sizes drawn from the mix; an arrival first waits
      for a KV slot (``Wslot``, below), then its prefill, with priority over decode steps, queues first
      come, first served at the bottleneck: an M/G/1 queue with service ``S``, load ``rho = lam E[S]``,
      mean wait ``W = lam E[S^2] / (2 (1 - rho))`` (Pollaczek-Khinchine); **TTFT(I) = Wslot + W +
      P(I)**;
    * decode stalls behind the prefills (:func:`decode_stall`): a prompt of ``I`` tokens passes every
      stage, and the micro-batch behind it waits at each; alone, it stalls the ring of micro-batches
      for ``C(I) = max(S(I), sum_i p_i(I) / d_i - (N - 1) / N T0)`` (the other ``N - 1`` micro-batches
      go one round meanwhile), of which ``S`` is the bottleneck's own work and ``C - S`` the convoy
      beyond it. The bottleneck is busy prefilling ``rho`` of the time; the convoys, Poisson intervals
      that overlap, cover ``1 - exp(-lam E[C - S])`` of the rest: **TPOT = T0 / ((1 - rho)
      exp(-lam E[C - S]))**, ``T0 / (1 - rho)`` where the ring's slack absorbs the convoy (``C = S``);
    * KV slots: a request holds one from its prefill to its last token, ``H = E[P] + E[output - 1] TPOT``
      seconds on average; by Little's law ``u = lam H / batch <= 1``. Occupancy does not move one slot
      at a time: an arrival's prefill stalls decode for ``C``, deferring the ``lam / (1 - stall)``
      releases a second of decoding gives, so it moves in steps of ``J = 1 + lam E[C] / (1 - stall)``
      slots; the wait for a slot is an M/M/k queue's of ``k = batch / J`` servers at load ``u``:
      **Wslot = ErlangC(k, u) H / (batch (1 - u))** (:func:`slot_wait`; infinite at the KV-slot limit).

    **Goodput** at rate ``lam``: ``lam`` times the share of requests whose TTFT and TPOT meet the
    targets (a request of one output token takes no decode step: it has no TPOT and meets any TPOT
    target, :func:`has_tpot`). Every quantity grows with ``lam``, and the buckets meeting the TTFT target
    at any rate are those with the shortest prefill latencies, so the best rate is, for one of the
    prefixes of the buckets sorted by ``P``, the largest ``lam`` at which that prefix meets the TTFT
    target, TPOT meets its target and the slots suffice: the slots and TPOT a closed form (a quadratic
    for the slots) without a convoy, else, and the TTFT always, a bisection of a monotone function.
    Where some buckets have one output token and others more, a prefix past the TPOT target's rate is
    also worth its rate times the share of its one-token buckets alone. The maximum over the prefixes
    is the plan's goodput, exact under this model.
    """

    def __init__(self, cfg: LLMConfig, devices: DeviceSet, mix: RequestMix, *, ttft: float | None = None,
                 tpot: float | None = None) -> None:
        self.cfg, self.devices, self.mix = cfg, devices, mix
        self.ttft = check_slo("the TTFT target", ttft)
        self.tpot = check_slo("the TPOT target", tpot)
        self._prefix: dict = {}

    def problem(self, batch: int, *, microbatches: int | None = None,
                max_replicas: int | None = None) -> ParallelProblem:
        """The decode problem of ``batch`` KV slots for this mix."""
        return decode_problem(self.cfg, self.devices, batch=batch, context=self.mix.decode_context,
                              memory_context=self.mix.memory_context, microbatches=microbatches,
                              max_replicas=max_replicas)

    def _node_prefix(self, k: int, t: int):
        """Per bucket, prefix sums over the chain's nodes of the prefill times on kind ``k`` at ``t``."""
        key = (k, t)
        if key not in self._prefix:
            import numpy as np

            spec = self.devices.specs[k]
            n = self.cfg.layers + 2
            table = np.zeros((len(self.mix.buckets), n + 1))
            for j, b in enumerate(self.mix.buckets):
                times = [prefill_node_time(self.cfg, spec, t, u, b.input) for u in range(n)]
                table[j, 1:] = np.cumsum(times)
            self._prefix[key] = table
        return self._prefix[key]

    def stage_prefill(self, problem: ParallelProblem, stage) -> list[float]:
        """``p_i(I)`` of one stage, per bucket: its nodes' prefill times plus the prompt's hidden states
        (``input`` tokens) over the kind's host link, once per tensor entering or leaving it."""
        import numpy as np

        from .parallel import _crossing

        g = problem.graph
        nodes = sorted(stage.nodes)
        table = self._node_prefix(stage.kind, stage.t)
        if nodes == list(range(nodes[0], nodes[-1] + 1)):
            compute = table[:, nodes[-1] + 1] - table[:, nodes[0]]
        else:  # not a range of the chain (the evaluator reports such a plan invalid): node by node
            diffs = np.diff(table, axis=1)
            compute = diffs[:, nodes].sum(axis=1)
        inside = np.zeros(g.num_nodes, bool)
        inside[nodes] = True
        enter, leave = _crossing(g, inside)
        # per token and crossing tensor: one hidden state over the kind's host link (the problem's own
        # tensor times are per sample: a token in the decode problem, a mean prompt in the prefill one)
        spec = self.devices.specs[stage.kind]
        link = 0.0 if spec.host else self.cfg.hidden * self.cfg.dtype_bytes / spec.link_bandwidth
        per_token = int(enter.sum() + leave.sum()) * link
        return [float(c) + b.input * per_token for c, b in zip(compute, self.mix.buckets)]


    def prefill_times(self, problem: ParallelProblem, ev) -> tuple[list[float], list[float], list[float]]:
        """Per bucket of the mix, an evaluated plan's prefill latency (the prompt through every stage),
        its bottleneck's occupancy (the largest stage's prefill time over its replicas) and the sum over
        the stages of their prefill times over their replicas."""
        nb = len(self.mix.buckets)
        P = [0.0] * nb
        S = [0.0] * nb
        Q = [0.0] * nb
        for s in ev.stages:
            p = self.stage_prefill(problem, s.stage)
            for k in range(nb):
                P[k] += p[k]
                S[k] = max(S[k], p[k] / s.stage.d)
                Q[k] += p[k] / s.stage.d
        return P, S, Q

    def evaluate(self, problem: ParallelProblem, plan, batch: int, evaluation=None) -> GoodputEvaluation:
        """The goodput of ``plan`` (stages of :meth:`problem` ``(batch)``), scored by the one evaluator
        (:func:`graphs.parallel.evaluate_plan`) and the model of the class doc."""
        from .parallel import evaluate_plan

        ev = evaluation if evaluation is not None else evaluate_plan(problem, plan)
        shares = self.mix.shares
        if not ev.valid:
            empty = tuple(BucketServing(b, p, math.inf, math.inf, math.inf, False)
                          for b, p in zip(self.mix.buckets, shares))
            return GoodputEvaluation(batch, False, ev.problems, 0.0, math.inf, math.inf, 0.0, 0.0, 0.0,
                                     math.inf, math.inf, 0.0, 0.0, "invalid plan", empty)
        m = batch / problem.microbatches
        step = sum(m * s.stage.d * s.time_per_sample for s in ev.stages)
        t0 = max(step, batch * ev.objective)
        P, S, Q = self.prefill_times(problem, ev)
        a = sum(q * x for q, x in zip(shares, S))  # E[S]
        e2 = sum(q * x * x for q, x in zip(shares, S))  # E[S^2]
        g = sum(q * x for q, x in zip(shares, P))  # E[P]
        N = problem.microbatches
        convoy = sum(q * max(0.0, x - (N - 1) / N * t0 - s) for q, x, s in zip(shares, Q, S))  # E[C - S]
        D = self.mix.decode_steps
        c = D * t0

        # the rate limits that do not depend on the buckets: the KV slots; the TPOT target's, which binds
        # the requests with a decode step only (one of one output token has no TPOT)
        limits = {}
        tpot_limit = None
        if self.tpot is not None and D > 0:
            if t0 > self.tpot:
                tpot_limit = -1.0
            elif convoy == 0:
                tpot_limit = (1 - t0 / self.tpot) / a
            else:  # (1 - lam a) exp(-lam convoy) = t0 / tpot
                tpot_limit = _bisect(lambda x: (1 - x * a) * math.exp(-x * convoy) <= t0 / self.tpot, 1 / a)
        if convoy == 0:
            lin = g + c + batch * a
            limits["KV slots"] = 2 * batch / (lin + math.sqrt(max(lin * lin - 4 * a * g * batch, 0.0)))
        else:  # lam (g + c / ((1 - lam a) exp(-lam convoy))) = batch, increasing in lam below 1 / a
            limits["KV slots"] = _bisect(
                lambda x: x * (g + c * math.exp(x * convoy) / (1 - x * a)) >= batch, 1 / a)
        limits["prefill capacity"] = 1 / a  # a supremum: the wait grows without bound there

        def waits(x: float) -> float:  # the mean wait for a KV slot at rate x
            return colocated_slot_wait(x, batch, g, D, t0, a, convoy)

        lam, why = _best_rate(self.ttft, shares, P, a, e2, limits, waits, tpot=_timed(self.mix, tpot_limit))
        stall = decode_stall(lam, a, convoy)
        tpot = t0 / (1 - stall) if stall < 1 else math.inf
        slots = lam * (g + D * tpot) if stall < 1 else math.inf
        return replace(_evaluation(self, batch, ev, step, t0, lam, why, tpot, slots, shares, P, S, a, e2, D,
                                   slot=waits(lam)), convoy=convoy)


def decode_stall(lam: float, a: float, convoy: float) -> float:
    """The share of time decode is stalled by prefills arriving at ``lam`` per second (the serving model
    of :class:`ServingModel`): the bottleneck's prefill load ``rho = lam a`` (``a = E[S]``) plus the
    convoys beyond it (``convoy = E[C - S]`` seconds per prefill) over the rest, ``1 - (1 - rho)
    exp(-lam convoy)``; 1 at or past the prefill capacity."""
    rho = lam * a
    if rho >= 1:
        return 1.0
    return 1 - (1 - rho) * math.exp(-lam * convoy)


def _bisect(past, hi: float) -> float:
    """The point in ``[0, hi]`` where the monotone predicate ``past`` turns true (``hi`` if never)."""
    lo = 0.0
    if not past(hi * (1 - 1e-15)):
        return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if past(mid):
            hi = mid
        else:
            lo = mid
    return lo


def has_tpot(bucket: Bucket) -> bool:
    """Requests of ``bucket`` have a time per output token: more than one output token (the first comes
    from the prefill; one of one output token takes no decode step, has no TPOT and meets any TPOT
    target, as :meth:`graphs.llm_sim.SimResult.attainment` counts it)."""
    return bucket.output > 1


def _timed(mix: RequestMix, limit: float | None) -> tuple[float, list[bool]] | None:
    """``_best_rate``'s ``tpot``: the largest rate meeting the TPOT target (``None``: no target, or no
    decode step in the mix) and per bucket whether the target binds it (:func:`has_tpot`)."""
    return None if limit is None else (limit, [has_tpot(b) for b in mix.buckets])


def _best_rate(ttft: float | None, shares: list[float], P: list[float], a: float, e2: float,
               limits: dict, slot_wait=None, *, tpot: tuple[float, list[bool]] | None = None
               ) -> tuple[float, str]:
    """The arrival rate of most goodput and what stops a higher one: for each prefix of the buckets
    sorted by prefill latency ``P``, the largest rate at which the prefix meets the TTFT target
    (``W + slot_wait(lam) + P <= ttft``, ``W = lam e2 / (2 (1 - lam a))``) within the bucket-independent
    ``limits`` (name -> largest rate; a negative one: no rate), times the prefix's share. ``slot_wait``:
    a nondecreasing function of the rate (the mean wait for a KV slot; ``None``: none), the TTFT limit
    then a bisection. ``tpot``: ``(L, timed)``, the largest rate ``L`` at which TPOT meets its target
    (negative: none) and per bucket whether it has a TPOT (:func:`has_tpot`): where every bucket has,
    ``L`` is one more limit; otherwise it binds the timed buckets only, and a prefix whose TTFT rate
    ``r`` is past ``L`` is worth the larger of ``L`` times its share and ``r`` times its untimed
    buckets' share (the share meeting both targets is a step function of the rate, falling at the TTFT
    rates and at ``L``: its product with the rate is largest at one of them)."""
    timed = None
    if tpot is not None:
        tpot_rate, timed = tpot
        if all(timed):  # every request has a TPOT: the target binds them all, as the other limits do
            limits = {"TPOT target": tpot_rate, **limits}
            timed = None
    base_name, base = min(limits.items(), key=lambda kv: kv[1])
    nb = len(P)
    order = sorted(range(nb), key=lambda j: P[j])
    best = (0.0, 0.0, base_name if base < 0 else "TTFT target")
    cum = untimed = 0.0  # the prefix's share, and that of its buckets without a TPOT
    for pos, j in enumerate(order):
        cum += shares[j]
        if timed is not None and not timed[j]:
            untimed += shares[j]
        if pos + 1 < nb and P[order[pos + 1]] == P[j]:
            continue  # equal prefill latencies: these buckets meet the target together
        if base < 0:
            break
        lam, why = base, base_name
        if ttft is not None:
            room = ttft - P[j]
            if room < 0:
                break
            cap = room / (e2 / 2 + room * a)
            if slot_wait is not None:  # the prefill wait plus the slot wait, both nondecreasing in lam
                cap = _bisect(lambda x, room=room: x * e2 / (2 * (1 - x * a)) + slot_wait(x) > room,
                              min(cap, lam))
            if cap < lam:
                lam, why = cap, "TTFT target"
        options = [(lam, cum, why)]
        if timed is not None and lam > tpot_rate:  # past L the timed buckets miss the TPOT target
            options = [(tpot_rate, cum, "TPOT target"), (lam, untimed, why)]
        for rate, share, words in options:
            if rate * share > best[0]:
                best = (rate * share, rate, words)
    return best[1], best[2]


def _erlang_c(servers: float, u: float) -> float:
    """The probability that an arrival waits in an M/M/k queue of ``k = servers`` servers at utilisation
    ``u`` (Erlang C), linear in ``k`` between the integers around it (``k < 1``: one server); 1 at
    ``u >= 1``. Nondecreasing in ``u`` and nonincreasing in ``k``."""
    if u >= 1:
        return 1.0
    if u <= 0:
        return 0.0

    from scipy.special import gammaincc, gammaln

    def at(k: int) -> float:  # Erlang B = the Poisson(A) pmf at k over its cdf at k (A = u k), then C
        load = u * k
        b = math.exp(k * math.log(load) - load - float(gammaln(k + 1))) / float(gammaincc(k + 1, load))
        return b / (1 - u * (1 - b))

    k = max(1.0, servers)
    lo = math.floor(k)
    f = k - lo
    return at(lo) if f == 0 else (1 - f) * at(lo) + f * at(lo + 1)


def slot_wait(lam: float, batch: int, hold: float, stall: float, block: float) -> float:
    """The mean wait of an arrival for a KV slot (the serving model of :class:`ServingModel`): ``batch``
    slots each held ``hold`` seconds on average (``E[P] + E[output - 1] TPOT``), load ``u = lam hold /
    batch``. An arrival's prefill stalls decode for ``block = E[C]`` seconds, deferring the ``lam /
    (1 - stall)`` slot releases a second of decoding gives, so occupancy moves in steps of ``J = 1 +
    lam block / (1 - stall)`` slots: the wait of an M/M/k queue of ``k = batch / J`` servers at ``u``
    (Erlang C), ``C(k, u) hold / (batch (1 - u))``; infinite at ``u >= 1`` (the KV-slot limit)."""
    if lam <= 0:
        return 0.0
    u = lam * hold / batch
    if u >= 1 or stall >= 1:
        return math.inf
    jump = 1 + lam * block / (1 - stall)
    return _erlang_c(batch / jump, u) * hold / (batch * (1 - u))


def colocated_slot_wait(lam: float, batch: int, prefill_mean: float, decode_steps: float, t0: float,
                        a: float, convoy: float) -> float:
    """:func:`slot_wait` of a colocated plan from the serving model's figures: at ``lam`` the decode is
    stalled :func:`decode_stall` of the time, a slot is held ``E[P] + E[output - 1] T0 / (1 - stall)``
    (``prefill_mean = E[P]``, ``decode_steps = E[output - 1]``, ``t0`` the full batch's step) and a
    prefill blocks decode for ``E[C] = a + convoy`` (``a = E[S]``, ``convoy = E[C - S]``); infinite at
    or past the prefill capacity."""
    stall = decode_stall(lam, a, convoy)
    if stall >= 1:
        return math.inf
    return slot_wait(lam, batch, prefill_mean + decode_steps * t0 / (1 - stall), stall, a + convoy)


def _evaluation(model, batch, ev, step, t0, lam, why, tpot, slots, shares, P, S, a, e2, D,
                kv_transfer: float = 0.0, slot: float = 0.0) -> GoodputEvaluation:
    rho = lam * a
    wait = lam * e2 / (2 * (1 - rho)) if rho < 1 else math.inf
    tpot_ok = model.tpot is None or D <= 0 or tpot <= model.tpot * (1 + _MEETS_RTOL)
    rows = []
    for j, b in enumerate(model.mix.buckets):
        ttft = wait + slot + P[j]
        # a request of one output token has no TPOT: it meets any TPOT target (has_tpot)
        ok = (tpot_ok or not has_tpot(b)) and (model.ttft is None or ttft <= model.ttft * (1 + _MEETS_RTOL))
        rows.append(BucketServing(b, shares[j], P[j], S[j], ttft, ok))
    met = sum(r.share for r in rows if r.meets) if lam > 0 else 0.0
    rate = 1 / ev.objective if ev.objective > 0 else math.inf
    return GoodputEvaluation(batch, True, (), rate, step, t0, lam, lam * met, met, tpot, wait, rho, slots,
                             why if lam > 0 else _why_none(model, t0, P, D), tuple(rows), kv_transfer,
                             slot_wait=slot)


def _why_none(model: ServingModel, t0: float, P: list[float], D: float) -> str:
    if model.tpot is not None and D > 0 and t0 > model.tpot:
        untimed = [p for p, b in zip(P, model.mix.buckets) if not has_tpot(b)]
        if not untimed:
            return "TPOT target unreachable (the full batch's step is slower)"
        if model.ttft is not None and min(untimed) > model.ttft:
            return ("TPOT target unreachable (the full batch's step is slower), TTFT target unreachable for "
                    "the requests of one output token (their prefill is slower)")
    if model.ttft is not None and min(P) > model.ttft:
        return "TTFT target unreachable (every prompt's prefill is slower)"
    return "no rate meets the targets"


def chain_plans(problem: ParallelProblem, limit: int, *, max_states: int = 50_000):
    """Every plan of a chain problem (:func:`decode_problem`'s): consecutive node ranges, each on a
    kind and degrees ``t``, ``d`` that fit the counts, ``sum d <= N`` and ``d`` dividing ``N``, with the
    node's first variant at ``(kind, t)`` (the LLM problems have one). ``None`` when there are more
    than ``limit``, or when counting them would visit more than ``max_states`` states (position, devices
    left, replicas left): the caller then does not enumerate. Memory is not checked here: the
    evaluator does. The plans are counted first (a memoised recursion, saturating at ``limit + 1``),
    so only branches that complete are walked."""
    import functools

    from .parallel import Stage

    g = problem.graph
    n = g.num_nodes
    counts = tuple(k.count for k in problem.kinds)
    N = problem.microbatches
    states = n * (N + 1) * math.prod(c + 1 for c in counts)
    if states > max_states:
        return None
    ds = problem.replica_degrees()
    choices = []  # (k, t, supported[u]) per kind and degree
    for k in range(len(counts)):
        for t in g.degrees(k):
            ok = [(u, k, t) in g.options for u in range(n)]
            choices.append((k, t, ok))

    def steps(lo: int, left: tuple, sum_d: int):
        for k, t, ok in choices:
            for hi in range(lo + 1, n + 1):
                if not ok[hi - 1]:
                    break
                for d in ds:
                    if t * d <= left[k] and sum_d + d <= N:
                        rest = left[:k] + (left[k] - t * d,) + left[k + 1:]
                        yield hi, k, t, d, rest

    @functools.cache
    def count(lo: int, left: tuple, sum_d: int) -> int:
        if lo == n:
            return 1
        total = 0
        for hi, _, _, d, rest in steps(lo, left, sum_d):
            total += count(hi, rest, sum_d + d)
            if total > limit:
                return limit + 1
        return total

    if count(0, counts, 0) > limit:
        return None
    out: list = []

    def walk(lo: int, left: tuple, sum_d: int, stages: list) -> None:
        if lo == n:
            out.append(tuple(stages))
            return
        for hi, k, t, d, rest in steps(lo, left, sum_d):
            if count(hi, rest, sum_d + d):
                stages.append(Stage(tuple(range(lo, hi)), k, d, t,
                                    tuple(g.options[(u, k, t)][0] for u in range(lo, hi))))
                walk(hi, rest, sum_d + d, stages)
                stages.pop()

    walk(0, counts, 0, [])
    return out


# ------------------------------------------------------------------------------- disaggregated pools
def prefill_problem(cfg: LLMConfig, devices: DeviceSet, mix: RequestMix, *, microbatches: int | None = None,
                    max_replicas: int | None = None) -> ParallelProblem:
    """The stage-model problem of a prefill pool: a "sample" is one request's prefill, a node's time
    its :func:`prefill_node_time` averaged over the mix, the tensors the prompt's hidden states
    (mean prompt) over the host links, memory the weights plus, per request in flight (``N / d`` per
    replica under ``gpipe``), the KV cache of the longest prompt. Its optimum (the exact stage DP)
    is the pool's plan of most prefills per second (``1 / max_i E[p_i] / d_i``). A prompt past the
    model's ``sliding_window`` is an :class:`InputError` (not modelled)."""
    from .onnx_variants import default_microbatches

    N = microbatches or default_microbatches(devices)
    shares = mix.shares
    longest = max(b.input for b in mix.buckets)
    _within_window(cfg, longest, "a prompt")
    mean_in = sum(p * b.input for p, b in zip(shares, mix.buckets))
    by = cfg.dtype_bytes
    L = cfg.layers
    ids = ["embed"] + [f"layer{i}" for i in range(L)] + ["head"]
    emb_bytes = cfg.vocab * cfg.hidden * by
    variants: list[Variant] = []
    for k, (spec, count) in enumerate(zip(devices.specs, devices.counts)):
        for t in _degrees(cfg, spec, count):
            embed, layer, head = (sum(p * prefill_node_time(cfg, spec, t, u, b.input)
                                      for p, b in zip(shares, mix.buckets)) for u in (0, 1, L + 1))
            variants.append(Variant(0, k, t, "vanilla", embed, b=float(emb_bytes)))
            for i in range(L):  # every block is the same
                variants.append(Variant(1 + i, k, t, "vanilla", layer, a=float(longest * _kv_token(cfg, t)),
                                        b=float(cfg.block_params * by / t)))
            variants.append(Variant(L + 1, k, t, "vanilla", head, b=float(emb_bytes + cfg.hidden * by)))
    token = cfg.hidden * by
    tensors = [(u, [u + 1], [0.0 if s.host else mean_in * token / s.link_bandwidth for s in devices.specs])
               for u in range(L + 1)]
    g = ParallelGraph.build(ids=ids, names=ids, num_kinds=len(devices.specs),
                            edges=[(u, u + 1) for u in range(L + 1)], tensors=tensors, variants=variants,
                            source=cfg.name)
    return ParallelProblem(g, devices.cluster().kinds, N, "gpipe", max_replicas=max_replicas)


def kv_transfer_time(cfg: LLMConfig, tokens: int, bandwidth: float) -> float:
    """Seconds to move the KV cache of ``tokens`` tokens (every layer) over ``bandwidth`` bytes/s."""
    return tokens * cfg.layers * cfg.kv_bytes_per_token / bandwidth


def prefill_profile(prefill: ServingModel, pre_problem: ParallelProblem, pev) -> tuple:
    """``(P, S, link)`` of a prefill pool's evaluated plan: per bucket the prefill latency and the
    bottleneck's occupancy, and the slowest host link of the kinds it uses."""
    P, S, _ = prefill.prefill_times(pre_problem, pev)
    return P, S, min(prefill.devices.specs[s.stage.kind].link_bandwidth for s in pev.stages)


def disaggregated_goodput(prefill: ServingModel, pre_problem: ParallelProblem, pre_plan,
                          decode: ServingModel, problem: ParallelProblem, plan, batch: int, *,
                          pre_evaluation=None, evaluation=None, profile=None) -> GoodputEvaluation:
    """The goodput of separate pools: ``pre_plan`` (of :func:`prefill_problem` on ``prefill``'s devices)
    prefills every prompt, ``plan`` (of ``decode.problem(batch)``) decodes, and each request's KV cache
    moves between them over the slower host link of the two pools' kinds used.

    The model of :class:`ServingModel` with the pools apart: TTFT = the prefill pool's M/G/1 wait plus
    the prompt's prefill latency (the first token comes from the prefill; the wait for a decode slot
    comes after it, so it is not in TTFT); TPOT = the decode pool's
    full batch ``T0`` (no prefill stalls it); a KV slot is held for the transfer and the ``output - 1``
    decode steps, ``lam (E[transfer] + E[output - 1] T0) <= batch``; the prefill pool's load
    ``lam E[S] < 1``. ``profile``: :func:`prefill_profile` of the prefill plan, when the caller has it."""
    from .parallel import evaluate_plan

    pev = pre_evaluation if pre_evaluation is not None else evaluate_plan(pre_problem, pre_plan)
    ev = evaluation if evaluation is not None else evaluate_plan(problem, plan)
    mix = decode.mix
    shares = mix.shares
    if not (pev.valid and ev.valid):
        empty = tuple(BucketServing(b, p, math.inf, math.inf, math.inf, False)
                      for b, p in zip(mix.buckets, shares))
        return GoodputEvaluation(batch, False, pev.problems + ev.problems, 0.0, math.inf, math.inf, 0.0, 0.0,
                                 0.0, math.inf, math.inf, 0.0, 0.0, "invalid plan", empty)
    m = batch / problem.microbatches
    step = sum(m * s.stage.d * s.time_per_sample for s in ev.stages)
    t0 = max(step, batch * ev.objective)
    P, S, pre_link = profile if profile is not None else prefill_profile(prefill, pre_problem, pev)
    link = min([pre_link] + [decode.devices.specs[s.stage.kind].link_bandwidth for s in ev.stages])
    transfer = sum(q * kv_transfer_time(decode.cfg, b.input, link) for q, b in zip(shares, mix.buckets))
    a = sum(q * x for q, x in zip(shares, S))
    e2 = sum(q * x * x for q, x in zip(shares, S))
    D = mix.decode_steps
    limits = {}
    tpot_limit = None  # no prefill stalls the decode pool: its TPOT is T0 at any rate
    if decode.tpot is not None and D > 0:
        tpot_limit = math.inf if t0 <= decode.tpot else -1.0
    occupancy = transfer + D * t0
    limits["KV slots"] = batch / occupancy if occupancy > 0 else math.inf
    limits["prefill capacity"] = 1 / a
    lam, why = _best_rate(decode.ttft, shares, P, a, e2, limits, tpot=_timed(mix, tpot_limit))
    out = _evaluation(decode, batch, ev, step, t0, lam, why, t0, lam * occupancy, shares, P, S, a, e2, D,
                      kv_transfer=transfer)
    return replace(out, prefill_pool=(pre_problem, tuple(pre_plan), pev))
