"""Small PyTorch models for the torch front-end tests, and the pipelined run each test process does.

Importable without torch (the tests skip); the models are built only when torch is there."""

from __future__ import annotations

import math


def gpt(*, vocab: int = 128, hidden: int = 64, heads: int = 4, layers: int = 4, seq_len: int = 16,
        seed: int = 0):
    """A GPT-style decoder: token and position embeddings, ``layers`` pre-norm blocks (causal
    self-attention with explicit matrix products, MLP with GELU), a final norm and an LM head."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq_len, hidden)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(seed)
    return GPT().eval()


def llama(*, vocab: int = 256, hidden: int = 128, heads: int = 4, kv_heads: int = 2, ffn: int = 344,
          layers: int = 16, seed: int = 0):
    """A Llama-style decoder wrapped as Hugging Face's are (``model.layers.N`` inside a ``model``, an
    ``lm_head`` beside it): RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""
    import torch
    from torch import nn

    dh = hidden // heads

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            return self.weight * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)

    def rope(x, cos, sin):
        rot = torch.cat([-x[..., dh // 2:], x[..., :dh // 2]], -1)
        return x * cos + rot * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(hidden, heads * dh, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * dh, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * dh, bias=False)
            self.o_proj = nn.Linear(heads * dh, hidden, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, heads, dh).transpose(1, 2)
            k = self.k_proj(x).view(b, t, kv_heads, dh).transpose(1, 2)
            v = self.v_proj(x).view(b, t, kv_heads, dh).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, heads * dh))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x):
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.self_attn, self.mlp = Attention(), MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])
            self.norm = RMSNorm()

        def forward(self, idx):
            t = idx.shape[1]
            inv = 1.0 / 10000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
            ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]
            cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
            x = self.embed_tokens(idx)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.norm(x)

    class ForCausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, idx):
            return self.lm_head(self.model(idx))

    torch.manual_seed(seed)
    return ForCausalLM().eval()


def mlp_sequential(widths=(64, 256, 256, 256, 64, 10), seed: int = 0):
    """An ``nn.Sequential`` of Linear + ReLU layers (a DeepSpeed PipelineModule-style layer list)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).eval()


def tokens(batch: int, seq_len: int = 16, vocab: int = 128, seed: int = 1):
    import torch

    return torch.randint(0, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def pipelined_rank(rank: int, world: int, spec: dict, batch: int, chunks: int, init_file: str, out_file: str,
                   model_kwargs: dict) -> None:
    """One process of a pipelined run: split the GPT with ``spec``, build this rank's stage, run
    ``ScheduleGPipe`` over ``chunks`` micro-batches on a gloo group; the last rank saves the largest
    absolute difference from the unsplit module and the stage count."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import ScheduleGPipe, pipeline

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"file://{init_file}")
    try:
        model = gpt(**model_kwargs)
        x = tokens(batch, model_kwargs.get("seq_len", 16), model_kwargs.get("vocab", 128))
        pipe = pipeline(model, mb_args=(x.chunk(chunks)[0],), split_spec=spec)
        stage = pipe.build_stage(rank, device=torch.device("cpu"))
        schedule = ScheduleGPipe(stage, n_microbatches=chunks)
        with torch.no_grad():
            if rank == 0:
                schedule.step(x)
            elif rank == world - 1:
                out = schedule.step()
                ref = model(x)
                torch.save({"max_abs_diff": float((out - ref).abs().max()), "max_abs": float(ref.abs().max()),
                            "stages": pipe.num_stages, "shape": tuple(out.shape)}, out_file)
            else:
                schedule.step()
    finally:
        dist.destroy_process_group()


def gpt2(*, layers: int = 4, hidden: int = 768, heads: int = 12, vocab: int = 50257, positions: int = 1024,
         seed: int = 0):
    """A GPT-2-style decoder (the GPT-2 small shapes by default, ``layers`` blocks): token and position
    embeddings, pre-norm blocks (causal self-attention with a fused QKV projection, an MLP with the
    tanh GELU), a final norm and an LM head tied to the token embedding, as in GPT-2."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.c_attn, self.c_proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.c_fc, self.mlp_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // heads))
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + self.c_proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
            self.h = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(hidden)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.h:
                x = blk(x)
            return nn.functional.linear(self.ln_f(x), self.wte.weight)  # the tied LM head

    torch.manual_seed(seed)
    return GPT2().eval()


def bert(*, layers: int = 4, hidden: int = 768, heads: int = 12, vocab: int = 30522, positions: int = 512,
         seed: int = 0):
    """A BERT-style encoder (BERT-base shapes by default, ``layers`` blocks): token and position
    embeddings with their LayerNorm, post-norm blocks (bidirectional self-attention, an MLP with the
    erf GELU) as torch's own ``nn.TransformerEncoderLayer`` builds them, and a masked-LM head (dense,
    GELU, LayerNorm, the tied decoder)."""
    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word, self.position = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList([nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                                                    activation="gelu", batch_first=True)
                                         for _ in range(layers)])
            self.dense, self.head_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden)

        def forward(self, idx):
            x = self.norm(self.word(idx) + self.position(torch.arange(idx.shape[1])))
            for layer in self.layers:
                x = layer(x)
            x = self.head_norm(nn.functional.gelu(self.dense(x)))
            return nn.functional.linear(x, self.word.weight)

    torch.manual_seed(seed)
    return Bert().eval()


def export_onnx(model, path, example, *, dynamic_batch: bool = True, dynamo: bool = False) -> str:
    """``torch.onnx.export`` of ``model`` on ``example`` (one tensor) to ``path``, with a symbolic batch
    dimension (``dynamic_batch``) as a model exported for serving has. ``dynamo``: the torch.export-based
    exporter (torch's default since 2.9; it needs onnxscript, and records each operator's module path
    in the node metadata) instead of the TorchScript one."""
    import warnings

    import torch

    axes = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():  # the exporter's deprecation and tracer warnings
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = ({0: torch.export.Dim("batch")},) if dynamic_batch else None
            torch.onnx.export(model, (example,), str(path), dynamo=True, input_names=["input"],
                              output_names=["output"], dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False, input_names=["input"],
                              output_names=["output"], dynamic_axes=axes, opset_version=17)
    return str(path)


def llama_with_cache(*, vocab: int = 256, hidden: int = 128, heads: int = 4, kv_heads: int = 2,
                     ffn: int = 344, layers: int = 3, tied: bool = False, seed: int = 0):
    """A Llama-style decoder that takes and returns its KV cache, as exported for serving: ``forward(ids,
    k0, v0, k1, v1, ...)`` with each past of shape ``[batch, kv_heads, past, head_dim]`` returns the
    logits and the presents (the past with the new tokens' keys and values appended)."""
    import torch
    from torch import nn

    dh = hidden // heads

    class RMSNorm(nn.Module):  # written out: the TorchScript exporter has no aten::rms_norm at opset 17
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            return self.weight * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            self.q_proj = nn.Linear(hidden, heads * dh, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * dh, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * dh, bias=False)
            self.o_proj = nn.Linear(heads * dh, hidden, bias=False)
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x, pk, pv):
            b, t, _ = x.shape
            h = self.norm1(x)
            q = self.q_proj(h).view(b, t, heads, dh).transpose(1, 2)
            k = torch.cat([pk, self.k_proj(h).view(b, t, kv_heads, dh).transpose(1, 2)], 2)
            v = torch.cat([pv, self.v_proj(h).view(b, t, kv_heads, dh).transpose(1, 2)], 2)
            kk = k.repeat_interleave(heads // kv_heads, dim=1)
            vv = v.repeat_interleave(heads // kv_heads, dim=1)
            att = ((q @ kk.transpose(-2, -1)) / math.sqrt(dh)).softmax(-1)
            x = x + self.o_proj((att @ vv).transpose(1, 2).reshape(b, t, heads * dh))
            h = self.norm2(x)
            return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)), k, v

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList([Block() for _ in range(layers)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            if tied:
                self.lm_head.weight = self.embed_tokens.weight

        def forward(self, ids, *past):
            x = self.embed_tokens(ids)
            presents = []
            for i, layer in enumerate(self.layers):
                x, k, v = layer(x, past[2 * i], past[2 * i + 1])
                presents += [k, v]
            return (self.lm_head(self.norm(x)), *presents)

    torch.manual_seed(seed)
    model = Decoder().eval()
    model.kv_heads, model.head_dim = kv_heads, dh
    return model


def export_decoder(model, path, *, batch: int = 2, past: int = 5, new: int = 1) -> str:
    """``torch.onnx.export`` of a :func:`llama_with_cache` decoder with the input and output names of
    optimum's exports (``input_ids``, ``past_key_values.N.key``/``.value``, ``logits``,
    ``present.N.key``/``.value``), batch and lengths symbolic."""
    import warnings

    import torch

    layers, kv_heads, dh = len(model.layers), model.kv_heads, model.head_dim
    ids = torch.randint(0, model.embed_tokens.num_embeddings, (batch, new))
    pasts = [torch.randn(batch, kv_heads, past, dh) for _ in range(2 * layers)]
    kv = [f"{i}.{x}" for i in range(layers) for x in ("key", "value")]
    inputs = ["input_ids"] + [f"past_key_values.{n}" for n in kv]
    outputs = ["logits"] + [f"present.{n}" for n in kv]
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "logits": {0: "batch", 1: "tokens"}}
    axes.update({n: {0: "batch", 2: "past"} for n in inputs[1:]})
    axes.update({n: {0: "batch", 2: "total"} for n in outputs[1:]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, *pasts), str(path), dynamo=False, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, opset_version=17)
    return str(path)
