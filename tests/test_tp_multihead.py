"""Tensor parallelism through ``nn.MultiheadAttention`` as ``torch.onnx.export(..., dynamo=True)`` writes
it: the fused in-projection ``[s, b, E] @ [E, 3E]`` (+ bias) is Reshaped to ``[s, b, 3, E]`` and q, k and v
are taken apart by ``Gather`` on the ``3`` axis (graphs/onnx_variants.py, ``_reshaped_parts``); the heads
Reshapes go through ``[s, b*heads, dh]`` (each rank's heads of every batch row: ``b`` parts). Every split
is checked against the whole model by onnxruntime, the rank weights against torch's own parameters."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch", reason="exports nn.MultiheadAttention with torch.onnx.export")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

from graphs.errors import InputError  # noqa: E402
from graphs.onnx_loader import load_onnx, parse_model  # noqa: E402
from graphs.onnx_variants import split_layout  # noqa: E402
from placement.onnx_export import split_stages, verify_split  # noqa: E402
from tests.test_tensor_parallel import stage_plan  # noqa: E402
from tests.test_tensor_parallel_offer import check_offers  # noqa: E402

E, S, B = 64, 8, 2  # embedding, sequence, batch


def _block(heads: int):
    """LayerNorm, self-attention (batch first), residual, then an MLP with its residual; every
    parameter random (torch initialises the attention's biases to zero, which would hide their slicing)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(E), nn.LayerNorm(E)
            self.attn = nn.MultiheadAttention(E, heads, batch_first=True)
            self.fc1, self.fc2 = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.fc2(torch.relu(self.fc1(self.ln2(x))))

    torch.manual_seed(heads)
    m = Block().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return m


def _export(module, path) -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(B, S, E),), str(path), dynamo=True, input_names=["x"],
                          output_names=["y"], verbose=False)
    return str(path)


@pytest.fixture(scope="module")
def mha(tmp_path_factory):
    """``{heads: (module, path)}`` for 4 and 2 heads."""
    d = tmp_path_factory.mktemp("mha")
    out = {}
    for h in (4, 2):
        m = _block(h)
        out[h] = (m, _export(m, d / f"mha{h}.onnx"))
    return out


def _verify(model, plan):
    split = split_stages(model, plan)
    manifest = split.manifest()
    rep = verify_split(model, [s.model for s in split.submodels], manifest)
    assert rep.ok and rep.worst <= 1e-5, rep.max_abs_diff
    return split, manifest


@pytest.mark.parametrize("t", [2, 4])
def test_the_whole_block_splits_t_ways_and_matches_the_model(mha, t):
    """4 heads, one stage of t ranks: q, k and v part by part, the heads on each rank, one all-reduce
    (the output projection) and nothing gathered."""
    model = onnx.load(mha[4][1])
    split, manifest = _verify(model, stage_plan(model, [], [t]))
    tp = manifest["submodels"][0]["tensor_parallel"]
    assert [c["op"] for c in tp["collectives"]] == ["allreduce"]
    assert tp["degree"] == t and tp["split_operators"] > 20


def test_each_rank_holds_its_heads_rows_of_q_k_v_and_of_the_output_projection(mha):
    """t = 2, 4 heads of 16: rank r holds rows [32r, 32r+32) of each of q, k and v in torch's
    in_proj_weight [3E, E] (the exported MatMul's weight is its transpose, so columns) and of
    in_proj_bias, the matching input columns of out_proj.weight (the row-parallel Gemm, transB), and
    the output bias on rank 0 only; the heads Reshapes make 2 of the 4 heads per batch row."""
    from onnx import numpy_helper

    module, path = mha[4]
    model = onnx.load(path)
    sd = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    layout = split_layout(load_onnx(path))
    (qkv,) = [op for i, op in enumerate(layout.ops) if layout.ts.column[i]]
    (out,) = [op for i, op in enumerate(layout.ops) if layout.ts.row[i]]
    assert layout.parts.get(qkv.outputs[0].name) == 3 and out.op_type == "Gemm"
    whole = {x.name: numpy_helper.to_array(x) for x in model.graph.initializer}
    w_name, b_name = qkv.inputs[1].name, "attn.in_proj_bias"
    assert np.array_equal(whole[w_name], sd["attn.in_proj_weight"].T)  # what the exporter wrote
    split = split_stages(model, stage_plan(model, [], [2]))
    heads_shapes = set()
    for r, segs in enumerate(split.submodels[0].model):
        rows = np.concatenate([np.arange(c * E + 32 * r, c * E + 32 * r + 32) for c in range(3)])
        held = {x.name: numpy_helper.to_array(x) for seg in segs for x in seg.graph.initializer}
        assert np.array_equal(held[f"{w_name}__tp1p3"], sd["attn.in_proj_weight"][rows].T)
        assert np.array_equal(held[f"{b_name}__tp0p3"], sd["attn.in_proj_bias"][rows])
        wo = held[f"{out.inputs[1].name}__tp1"]
        assert np.array_equal(wo, sd["attn.out_proj.weight"][:, 32 * r:32 * r + 32])
        assert w_name not in held and out.inputs[1].name not in held
        gemm = next(n for seg in segs for n in seg.graph.node if n.name == out.name)
        assert len(gemm.input) == (3 if r == 0 else 2)  # the bias added once, in the sum
        if r == 0:
            assert np.array_equal(held[gemm.input[2]], sd["attn.out_proj.bias"])
        heads_shapes |= {tuple(v.tolist()) for k, v in held.items() if k.endswith("__tp/shape")}
    assert {(S, B * 4 // 2, E // 4), (B, 4 // 2, S, E // 4)} <= heads_shapes


@pytest.mark.parametrize("ts", [(1, 2), (2, 4), (4, 1)])
def test_a_stage_cut_where_the_heads_are_held_per_batch_row(mha, ts):
    """The cut after the first Reshape to [s, b*heads, dh] (held in b = 2 parts): the next stage cuts
    each rank's heads of every batch row out of the whole tensor it receives (a Gather), and matches."""
    model = onnx.load(mha[4][1])
    layout = split_layout(parse_model(model))
    names = list(parse_model(model).names)
    held = [names.index(op.name) for op in layout.ops
            if op.outputs and layout.parts.get(op.outputs[0].name) == B]
    assert held, "no tensor held in batch-row parts"
    first = min(held)
    assert layout.ops[layout.op_of[names[first]]].op_type == "Reshape"
    _verify(model, stage_plan(model, [first + 1], list(ts)))


def test_two_heads_split_two_ways_and_are_refused_four_ways_at_the_heads_reshape(mha):
    """2 heads: t = 2 matches the model; t = 4 is refused, by SplitLayout.refusal and by the splitter
    with the same reason, at the first Reshape that makes the heads (4 = 2 batch rows of 2 heads: not 4
    chunks of each row's heads) and not before it."""
    path = mha[2][1]
    model = onnx.load(path)
    _verify(model, stage_plan(model, [], [2]))
    layout = split_layout(load_onnx(path))
    refused = [(op, layout.refusal(i, 4)) for i, op in enumerate(layout.ops) if layout.refusal(i, 4)]
    op, reason = refused[0]
    assert op.op_type == "Reshape" and tuple(op.outputs[0].shape) == (S, B * 2, E // 2)
    assert "dimension of 4 along the split axis" in reason and "2 parts" in reason
    assert not any(layout.refusal(i, 2) for i in range(len(layout.ops)))
    with pytest.raises(InputError, match=rf"stage 0 \(tensor-parallel degree 4\): operator '{op.name}' "
                                         rf"\(Reshape\).*dimension of 4 along the split axis"):
        split_stages(model, stage_plan(model, [], [4]))


def _between_selects_and_out_projection(path) -> set[str]:
    """By hand: the operators that hold the heads (after q/k/v are taken apart by their Gathers, up to
    the output projection): the ones whose split depends on the head count."""
    og = load_onnx(path)
    layout = split_layout(og)
    src, dst = np.asarray(og.src).tolist(), np.asarray(og.dst).tolist()

    def reach(starts, fwd):
        seen, stack = set(), list(starts)
        while stack:
            u = stack.pop()
            for a, b in zip(src, dst):
                v = b if fwd and a == u else a if not fwd and b == u else None
                if v is not None and v not in seen:
                    seen.add(v)
                    stack.append(v)
        return seen

    selects = [i for i, op in enumerate(og.ops) if op.op_type == "Gather" and layout.ts.split[i]]
    (out,) = np.flatnonzero(layout.ts.row).tolist()
    assert len(selects) == 3
    return {og.ops[i].name for i in reach(selects, True) & reach([out], False)}


@pytest.mark.parametrize("heads,degrees", [(4, {1, 2, 4}), (2, {1, 2})])
def test_the_cost_model_offers_what_split_carries_out(mha, heads, degrees):
    """On a100:8 (operator nodes): the operators holding the heads take the degrees the heads allow,
    every other one 1, 2, 4 and 8 (the fused product, its bias, the q/k/v Gathers: 3 parts of 64, cut
    8 ways too); each degree offered splits and matches the model, each one held back is refused by
    the splitter (tests/test_tensor_parallel_offer.check_offers)."""
    path = mha[heads][1]
    held = _between_selects_and_out_projection(path)
    assert len(held) == 17  # 3 x (Reshape, Transpose), q and v Reshape, k Transpose + Reshape, 2 scale
    # Muls, scores, Softmax, context, its Transpose and the merging Reshape
    check_offers(path, {name: degrees for name in held}, granularity="op")
