"""The stage model offers a tensor-parallel degree at a node only where ``placement split`` can carry the
split out (graphs/onnx_variants.py, ``SplitLayout.refusal``, shared with placement/tensor_parallel.py):
the degrees offered per node are checked against a hand count, and every degree offered is split and
verified against the whole model by onnxruntime, while the degrees held back are refused by the splitter."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.devices import parse_devices  # noqa: E402
from graphs.errors import InputError  # noqa: E402
from graphs.onnx_variants import stage_problem  # noqa: E402
from graphs.onnx_workload import prepare_onnx  # noqa: E402
from placement.onnx_export import split_stages, verify_split  # noqa: E402
from tests.test_tensor_parallel import _softmax_model, gpt  # noqa: E402

DEVICES = "a100:8"  # one server of 8: t in 2, 4, 8 fit


def offers(path: str, granularity: str | None = None) -> tuple[dict[str, set[int]], dict[str, str]]:
    """The degrees the stage problem offers at every node (on the a100 kind), by node id, and the node
    id of every operator (by name)."""
    ds = parse_devices(DEVICES)
    og, w = prepare_onnx(path, ds, training=False)
    problem, cls, _ = stage_problem(og, w.graph, ds, granularity=granularity)
    g = problem.graph
    by_node: dict[str, set[int]] = {g.ids[c]: set() for c in range(g.num_nodes)}
    for node, kind, t in g.options:
        if kind == 0:
            by_node[g.ids[node]].add(t)
    return by_node, {op.name: g.ids[int(cls[i])] for i, op in enumerate(og.ops)}


def plan_at(model, node_of: dict[str, str], degree: dict[str, int]) -> dict:
    """A stage plan: the operators in topological order, each at its node's degree, consecutive
    operators of one degree in one stage."""
    from graphs.onnx_loader import parse_model

    stages: list[dict] = []
    for name in parse_model(model).names:
        t = degree[node_of[name]]
        if not stages or stages[-1]["tensorParallelDegree"] != t:
            stages.append({"nodes": [], "dataParallelDegree": 1, "tensorParallelDegree": t, "kind": "cpu"})
        stages[-1]["nodes"].append(name)
    return {"schema": "placement-result", "version": 2, "model": "stages", "stages": stages}


def check_offers(path: str, expected: dict[str, set[int]], granularity: str | None = None) -> None:
    """The offers are the hand count ``expected`` (node id -> degrees; every node not named: all of
    1, 2, 4, 8); a plan taking each degree wherever it is offered splits and verifies, and a node held
    back from a degree is refused by the splitter at that degree."""
    model = onnx.load(path)
    by_node, node_of = offers(path, granularity)
    assert {k: by_node[k] for k in expected} == expected
    assert all(v == {1, 2, 4, 8} for k, v in by_node.items() if k not in expected)
    for t in (2, 4, 8):
        plan = plan_at(model, node_of, {k: t if t in v else 1 for k, v in by_node.items()})
        split = split_stages(model, plan)
        rep = verify_split(model, [s.model for s in split.submodels], split.manifest())
        assert rep.ok and rep.worst <= 1e-4, (t, rep.max_abs_diff)
        for k in (k for k, v in by_node.items() if t not in v):
            forced = plan_at(model, node_of, {n: t if n == k else 1 for n in by_node})
            with pytest.raises(InputError, match=f"tensor-parallel degree {t}"):
                split_stages(model, forced)


def test_four_heads_offer_t_2_and_4_but_not_8(tmp_path):
    """gpt(hidden=32, heads=4): each block's q/k/v Reshape [b, s, 32] -> [b, s, 4, 8] puts the split
    on the 4 heads, so t must divide 4: 2 and 4, not 8 (the widths 32 and 128 of the products divide
    by 8). The embeddings, final norm and head split nothing, so every degree runs them replicated."""
    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(hidden=32, heads=4), path)
    check_offers(path, {"layer0": {1, 2, 4}, "layer1": {1, 2, 4}})


def test_four_heads_at_operator_granularity(tmp_path):
    """Operator nodes: the 13 operators of each block that read or make a tensor split along the 4 heads
    (the q/k/v Reshapes and Transposes, scores, scale, mask, softmax, context, its Transpose and the
    heads-merging Reshape) take 2 and 4; the products and biases, whose split axis is 32 or 128 wide,
    take 8 too. A t = 8 plan alternates: out_proj's t = 8 stage receives merge_heads whole and each rank
    slices its 4 of the 32 features."""
    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(hidden=32, heads=4), path)
    heads = [f"attn/{p}_{s}" for p in "qkv" for s in ("split", "heads")] + [
        "attn/scores", "attn/scale", "attn/causal_mask", "attn/softmax", "attn/context", "attn/context_t",
        "attn/merge_heads"]
    check_offers(path, {f"layer{i}/{x}": {1, 2, 4} for i in (0, 1) for x in heads}, granularity="op")


def test_three_heads_offer_no_split_of_the_blocks(tmp_path):
    """3 heads: none of 2, 4, 8 divides 3."""
    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(hidden=48, heads=3), path)
    check_offers(path, {"layer0": {1}, "layer1": {1}})


def test_a_softmax_along_the_split_axis_offers_no_split_of_its_layer(tmp_path):
    """l0's Softmax normalises its features, which the column-parallel fc0 splits: l0 is never split;
    l1 (8 -> 16 -> 8, a Relu between) divides by 2, 4 and 8."""
    path = str(tmp_path / "soft.onnx")
    onnx.save(_softmax_model(), path)
    check_offers(path, {"l0": {1}, "l1": {1, 2, 4, 8}})


def _torch_export(module, path, example) -> str:
    from tests.torch_models import export_onnx

    return export_onnx(module, path, example, dynamic_batch=False)


@pytest.mark.parametrize("dynamo", [False, True])
def test_a_torch_gpt_with_a_fused_qkv_and_split_offers_t_2_and_4(tmp_path, dynamo):
    """tests/torch_models.gpt projects q, k and v with one Linear [32, 96] and a Split in 3 along its
    columns (TorchScript: sizes as an input; dynamo: num_outputs): each rank takes its chunk of each part,
    so the blocks split as the 4 heads allow, 2 and 4 ways, not 8."""
    pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    from tests.torch_models import export_onnx, tokens
    from tests.torch_models import gpt as torch_gpt

    path = export_onnx(torch_gpt(layers=2, hidden=32, heads=4), tmp_path / "gpt.onnx", tokens(2),
                       dynamic_batch=False, dynamo=dynamo)
    check_offers(path, {"blocks.0": {1, 2, 4}, "blocks.1": {1, 2, 4}})


@pytest.mark.parametrize("op,sizes", [("MatMul", "input"), ("Gemm", "equal")])
def test_a_fused_qkv_offers_what_its_heads_allow(tmp_path, op, sizes):
    """tests/onnx_models.fused_qkv_attention (4 heads of 8 behind one [32, 96] product and a Split in
    3): each layer takes 2 and 4, not 8."""
    from tests.onnx_models import fused_qkv_attention

    path = str(tmp_path / "fused.onnx")
    onnx.save(fused_qkv_attention(op=op, sizes=sizes), path)
    check_offers(path, {"layer0": {1, 2, 4}, "layer1": {1, 2, 4}})


def test_a_fused_qkv_at_operator_granularity(tmp_path):
    """Operator nodes: the 12 operators of each layer that read or make a tensor split along the 4
    heads (the q/k/v Reshapes and Transposes, scores, scale, softmax, context, its Transpose, the
    heads-merging Reshape) take 2 and 4; the fused product, its bias Add and the Split (96 columns: 3
    parts of 32, each cut 8 ways into 4), the output projection, its bias and the residual take 8 too. A
    t = 8 plan alternates: the Split's t = 8 stage gathers q, k and v for the heads' t = 1 stage."""
    from tests.onnx_models import fused_qkv_attention

    path = str(tmp_path / "fused.onnx")
    onnx.save(fused_qkv_attention(), path)
    heads = [f"{z}_{s}" for z in "qkv" for s in ("heads", "t")] + [
        "scores", "scaled", "softmax", "context", "context_t", "merge_heads"]
    check_offers(path, {f"layer{i}/{x}": {1, 2, 4} for i in (0, 1) for x in heads}, granularity="op")


def test_a_fused_output_with_a_second_reader_offers_no_split_of_its_layer(tmp_path):
    """layer0's fused output is read by an Identity beside the Split: not a fused projection, so its
    Split cannot be divided and layer0 takes no t; layer1 takes 2 and 4."""
    from tests.onnx_models import fused_qkv_attention

    path = str(tmp_path / "peek.onnx")
    onnx.save(fused_qkv_attention(peek=True), path)
    check_offers(path, {"layer0": {1}, "layer1": {1, 2, 4}})


def test_torch_multihead_attention_and_encoder_layer_exports(tmp_path):
    """``torch.onnx.export`` (TorchScript, a fixed shape) of nn.MultiheadAttention (a Linear after it) and
    of nn.TransformerEncoderLayer: the fused in-projection is unpacked through shapes computed at run
    time (Shape, Slice, Concat), which the front end folds, so the attention splits as its 4 heads allow
    (2 and 4 ways, each verified; 8 refused by the splitter); the Linear after it (one weighted product:
    nothing split) runs at any degree."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.fc = nn.MultiheadAttention(32, 4, batch_first=True), nn.Linear(32, 32)

        def forward(self, x):
            return self.fc(self.a(x, x, x, need_weights=False)[0])

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True, dropout=0.0)

        def forward(self, x):
            return self.l(x)

    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    mha = _torch_export(Attention().eval(), tmp_path / "mha.onnx", x)
    check_offers(mha, {"a": {1, 2, 4}, "fc": {1, 2, 4, 8}})
    check_offers(_torch_export(Encoder().eval(), tmp_path / "enc.onnx", x), {"l/self_attn": {1, 2, 4}})


def test_the_splitter_and_the_cost_model_read_one_check(tmp_path):
    """The check the cost model applies is the one ``placement split`` refuses with: same operators,
    same reason (the heads Reshape of 4 heads at t = 8)."""
    from graphs.onnx_loader import load_onnx
    from graphs.onnx_variants import split_layout

    path = str(tmp_path / "gpt.onnx")
    model = gpt(hidden=32, heads=4)
    onnx.save(model, path)
    layout = split_layout(load_onnx(path))
    refused = [op.name for i, op in enumerate(layout.ops) if layout.refusal(i, 8)]
    assert refused[0] == "layer0/attn/q_split"
    assert not any(layout.refusal(i, 4) for i in range(len(layout.ops)))
    reason = layout.refusal(layout.op_of["layer0/attn/q_split"], 8)
    assert "dimension of 4 along the split axis" in reason
    by_node, node_of = offers(path)
    forced = plan_at(model, node_of, {n: 8 if n == "layer0" else 1 for n in by_node})
    with pytest.raises(InputError, match=r"'layer0/attn/q_split' \(Reshape\).*dimension of 4 along"):
        split_stages(model, forced)
    assert np.array_equal(layout.divisible(8), [not layout.refusal(i, 8) for i in range(len(layout.ops))])


def test_every_plan_place_reports_splits_and_verifies(tmp_path, capsys):
    """``placement place`` then ``placement split --verify`` on a 4-head model over 16 small devices at
    layer granularity: where memory asks for 8 ranks per layer with the embeddings and head beside them
    (1.1 MB a device), the plan gives each layer a stage of 4 ranks alone instead (the splitter refuses
    8); where 4 ranks do (1.6 MB), two stages of 4 ranks. Every plan reported is split and matches the
    model, and none is split 8 ways."""
    import json

    from graphs.transformer import gpt as gpt_model
    from placement.cli import main

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt_model(2, hidden=256, heads=4, seq_len=8, vocab=64, weights="generated"), path)
    degrees = set()
    for mem in ("1.1e6", "1.6e6"):
        res = str(tmp_path / f"r{mem}.json")
        rc = main(["place", path, "--devices", "a100:16", "--device-memory", mem, "--granularity", "layer",
                   "-o", res])
        assert rc == 0, capsys.readouterr().err
        with open(res, encoding="utf-8") as f:
            degrees |= {s["tensorParallelDegree"] for s in json.load(f)["stages"]}
        assert main(["split", path, res, "--out-dir", str(tmp_path / f"s{mem}"), "--verify"]) == 0
        assert "verify: OK" in capsys.readouterr().out
    assert 4 in degrees and 8 not in degrees
