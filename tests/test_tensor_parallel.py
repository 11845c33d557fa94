"""Tensor-parallel stages split and run for real (placement/tensor_parallel.py): t rank sub-models per
stage holding 1/t of the split weights, segments between all-reduces and all-gathers. Every numeric
check compares with the unsplit model run whole by onnxruntime (verify_split, run_pipeline's
reference), or with the model's own weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.errors import InputError  # noqa: E402
from graphs.onnx_loader import load_onnx, parse_model  # noqa: E402
from placement.cli import main  # noqa: E402
from placement.onnx_export import read_split_manifest, split_stages, verify_split, write_split  # noqa: E402
from placement.pipeline_run import run_inputs, run_pipeline  # noqa: E402


def stage_plan(model, cuts, ts, ds=None) -> dict:
    """A stage plan of ``model``'s operators (front-end names, topological order) cut before the
    operator indices ``cuts``, with tensor-parallel degrees ``ts`` (and data-parallel ``ds``)."""
    names = list(parse_model(model).names)
    b = [0, *cuts, len(names)]
    ds = ds or [1] * len(ts)
    return {"schema": "placement-result", "version": 2, "model": "stages", "stages": [
        {"nodes": names[b[k]:b[k + 1]], "dataParallelDegree": d, "tensorParallelDegree": t, "kind": "cpu"}
        for k, (t, d) in enumerate(zip(ts, ds))]}


def gpt(**kw):
    from graphs.transformer import transformer_model

    return transformer_model(**{"layers": 2, "hidden": 32, "heads": 4, "seq_len": 8, "vocab": 50,
                                "decoder": True, **kw})


def check(model, plan, tmp_path=None):
    split = split_stages(model, plan)
    manifest = split.manifest()
    models = [s.model for s in split.submodels]
    if tmp_path is not None:  # through the files, as run and --verify read them
        write_split(split, tmp_path / "parts")
        manifest, models = read_split_manifest(tmp_path / "parts")
    rep = verify_split(model, models, manifest)
    assert rep.ok, (rep.max_abs_diff, rep.cut_max_abs_diff)
    assert rep.worst <= 1e-5
    return split, manifest, rep


def test_split_reads_the_cost_models_rule(tmp_path):
    """The layout's analysis is the cost model's own (the same arrays from the front end's graph and
    layer keys), and the splitter follows the heads through the attention."""
    from graphs.onnx_variants import tensor_split
    from graphs.onnx_workload import layer_keys
    from placement.tensor_parallel import split_layout

    path = tmp_path / "gpt.onnx"
    onnx.save(gpt(), str(path))
    og = load_onnx(str(path))
    ts = tensor_split(og, layer_keys(og))
    layout = split_layout(onnx.load(str(path)))
    for f in ("split", "out_split", "column", "row"):
        assert np.array_equal(getattr(layout.ts, f), getattr(ts, f)), f
    col = {og.ops[i].name for i in np.flatnonzero(ts.column)}
    row = {og.ops[i].name for i in np.flatnonzero(ts.row)}
    assert col == {f"layer{i}/{p}" for i in (0, 1)
                   for p in ("attn/q_proj", "attn/k_proj", "attn/v_proj", "mlp/fc1")}
    assert row == {f"layer{i}/{p}" for i in (0, 1) for p in ("attn/out_proj", "mlp/fc2")}
    assert layout.axis["layer0/attn/q_proj"] == 2
    assert layout.axis["layer0/attn/q_split"] == 2  # [b, s, heads, dh]
    assert layout.axis["layer0/attn/q_heads"] == 1  # [b, heads, s, dh]
    assert layout.axis["layer0/attn/softmax"] == 1
    assert layout.axis["layer0/attn/merge_heads"] == 2 and not layout.failed


@pytest.mark.parametrize("decoder,weights,t", [(True, "random", 2), (False, "random", 2),
                                               (True, "generated", 2), (True, "random", 4)])
def test_whole_layer_stages_match_the_model_with_two_all_reduces_per_block(tmp_path, decoder, weights, t):
    model = gpt(decoder=decoder, weights=weights)
    n = len(parse_model(model).names)
    split, manifest, _ = check(model, stage_plan(model, [], [t]), tmp_path)
    tp = manifest["submodels"][0]["tensor_parallel"]
    assert tp["degree"] == t and len(manifest["submodels"]) == 1
    # Megatron: out_proj and fc2 all-reduced in each of the 2 blocks, nothing gathered
    assert [(c["op"], c["output"]) for c in tp["collectives"]] == [
        ("allreduce", f"layer{i}/{p}") for i in (0, 1) for p in ("attn/out_proj", "mlp/fc2")]
    assert [c["after"] for c in tp["collectives"]] == [0, 1, 2, 3] and len(tp["segments"]) == 5
    assert all(len(seg["files"]) == t for seg in tp["segments"])
    # all of a block's operators but its 2 norms, 2 residual adds and the 2 biases after an all-reduce
    block = len([x for x in parse_model(model).names if x.startswith("layer0/")])
    assert tp["split_operators"] == 2 * (block - 6)
    assert n == manifest["submodels"][0]["nodes"]
    assert bool(tp["sliced_weights"]) == (weights == "generated")


def test_each_rank_holds_its_chunk_of_the_split_weights():
    """Column-parallel: the columns (and bias) of rank r's chunk; row-parallel: the rows, the bias
    after the all-reduce added once; the chunks put together are the model's weights."""
    from onnx import numpy_helper

    model = gpt()
    whole = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    split = split_stages(model, stage_plan(model, [], [2]))
    ranks = split.submodels[0].model
    held = [{t.name: numpy_helper.to_array(t) for seg in segs for t in seg.graph.initializer}
            for segs in ranks]
    q, fc2 = "layer0/attn/q_proj.weight", "layer1/mlp/fc2.weight"
    assert np.array_equal(np.concatenate([h[q + "__tp1"] for h in held], 1), whole[q])
    assert np.array_equal(np.concatenate([h["layer0/attn/q_proj.bias__tp0"] for h in held], 0),
                          whole["layer0/attn/q_proj.bias"])
    assert np.array_equal(np.concatenate([h[fc2 + "__tp0"] for h in held], 0), whole[fc2])
    for h in held:
        assert h[q + "__tp1"].shape == (32, 16) and h[fc2 + "__tp0"].shape == (64, 32)
        assert q not in h and fc2 not in h  # no rank holds a split weight whole
        assert "layer1/mlp/fc2.bias" in h  # the bias after the all-reduce: replicated, added once
        split_shape = [v for k, v in h.items() if k == "layer0/attn/q_split__tp/shape"]
        assert [list(v) for v in split_shape] == [[0, 0, 2, 8]]  # 4 heads: 2 per rank
    # each rank holds half the bytes of the split weights
    total = sum(v.nbytes for k, v in whole.items() if k.endswith(".weight") and ("proj" in k or "/fc" in k))
    per_rank = [sum(v.nbytes for k, v in h.items() if k.endswith((".weight__tp0", ".weight__tp1")))
                for h in held]
    assert per_rank == [total // 2, total // 2]


@pytest.mark.parametrize("cut", [10, 20, 25, 40, 47])
def test_a_stage_cut_inside_a_layer_gathers_and_reslices(cut):
    """A cut inside a block: the split tensors leaving the first stage are gathered there and sliced
    again by the next stage's ranks (both t = 2), as the cost model charges a gather at the boundary."""
    model = gpt(weights="generated")
    _, manifest, rep = check(model, stage_plan(model, [cut], [2, 2]))
    outs = set(manifest["submodels"][0]["outputs"])
    gathers = {c["output"] for c in manifest["submodels"][0]["tensor_parallel"]["collectives"]
               if c["op"] == "allgather"}
    assert gathers <= outs and rep.cut_max_abs_diff  # the stage boundary is compared too


def test_a_llama_decoder_with_grouped_query_attention():
    from graphs.transformer import llama_model

    model = llama_model(layers=2, hidden=64, heads=8, kv_heads=4, ffn=96, seq_len=8, vocab=50)
    _, manifest, _ = check(model, stage_plan(model, [40], [2, 1]))
    assert "tensor_parallel" in manifest["submodels"][0] and "tensor_parallel" not in manifest["submodels"][1]


def test_a_torch_onnx_export_of_a_llama(tmp_path):
    """A real ``torch.onnx`` (dynamo) export: separate q/k/v projections, rotary embeddings,
    grouped-query attention repeated by Expand/Reshape, SwiGLU."""
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from tests.torch_models import export_onnx, llama, tokens

    path = export_onnx(llama(layers=2, hidden=32, heads=4, kv_heads=2, ffn=64), tmp_path / "llama.onnx",
                       tokens(2), dynamic_batch=True, dynamo=True)
    model = onnx.load(path)
    _, manifest, _ = check(model, stage_plan(model, [], [2]))
    assert [c["op"] for c in manifest["submodels"][0]["tensor_parallel"]["collectives"]] == ["allreduce"] * 4


def test_a_fused_qkv_torch_export_splits_part_by_part(tmp_path):
    """tests/torch_models.gpt projects q, k and v with one Linear (MatMul + bias Add) and splits its
    output in 3 (TorchScript: the sizes as the Split's input): each rank takes its chunk of each of q, k
    and v, so 4 heads split 2 and 4 ways match the model; 8 ways the heads Reshape is refused by name
    (4 heads), no longer the Split."""
    pytest.importorskip("torch")
    from tests.torch_models import export_onnx, tokens
    from tests.torch_models import gpt as torch_gpt

    path = export_onnx(torch_gpt(layers=2, hidden=32, heads=4), tmp_path / "gpt.onnx", tokens(2),
                       dynamic_batch=False, dynamo=False)
    model = onnx.load(path)
    for t in (2, 4):
        _, manifest, _ = check(model, stage_plan(model, [], [t]))
        assert [op for op, _ in _collectives(manifest)] == ["allreduce"] * 4
    with pytest.raises(InputError, match=r"stage 0 .*'/blocks.0/Reshape' \(Reshape\).*dimension of 4 along"):
        split_stages(model, stage_plan(model, [], [8]))


_FUSED_FORMS = [("MatMul", "input", False), ("MatMul", "attribute", False), ("MatMul", "equal", False),
                ("Gemm", "input", False), ("Gemm", "attribute", True), ("Gemm", "equal", True)]


@pytest.mark.parametrize("t", [2, 4])
@pytest.mark.parametrize("op,sizes,trans_b", _FUSED_FORMS)
def test_a_fused_qkv_projection_splits_part_by_part(op, sizes, trans_b, t):
    """One product [32, 96] (MatMul + bias Add, or Gemm with its bias, transB or not) then a Split in 3
    (sizes as an input, an attribute or num_outputs): split t ways it matches the model with one
    all-reduce per block (the output projection), nothing gathered."""
    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention(op=op, sizes=sizes, trans_b=trans_b)
    _, manifest, _ = check(model, stage_plan(model, [], [t]))
    assert _collectives(manifest) == [("allreduce", "layer0/out"), ("allreduce", "layer1/out")]


@pytest.mark.parametrize("op,sizes,trans_b", [("MatMul", "input", False), ("Gemm", "attribute", True),
                                              ("Gemm", "equal", False)])
def test_each_rank_holds_its_chunk_of_each_part_of_a_fused_projection(op, sizes, trans_b):
    """h = 32, t = 2: rank 0 holds columns 0-15, 32-47, 64-79 of the fused [32, 96] weight and bias
    (its half of q, of k and of v), rank 1 columns 16-31, 48-63, 80-95 (rows, with transB); the Split
    makes parts of 16."""
    from onnx import numpy_helper

    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention(op=op, sizes=sizes, trans_b=trans_b)
    whole = {x.name: numpy_helper.to_array(x) for x in model.graph.initializer}
    split = split_stages(model, stage_plan(model, [], [2]))
    cols = [[*range(0, 16), *range(32, 48), *range(64, 80)], [*range(16, 32), *range(48, 64), *range(80, 96)]]
    w, b = whole["layer0/qkv.weight"], whole["layer0/qkv.bias"]
    for r, segs in enumerate(split.submodels[0].model):
        held = {x.name: numpy_helper.to_array(x) for seg in segs for x in seg.graph.initializer}
        wr = held[f"layer0/qkv.weight__tp{0 if trans_b else 1}p3"]
        assert np.array_equal(wr, w[cols[r]] if trans_b else w[:, cols[r]])
        assert np.array_equal(held["layer0/qkv.bias__tp0p3"], b[cols[r]])
        assert "layer0/qkv.weight" not in held
        split_node = next(n for seg in segs for n in seg.graph.node if n.name == "layer0/split")
        if sizes == "input":
            assert list(held[split_node.input[1]]) == [16, 16, 16]
        elif sizes == "attribute":
            assert list(next(a for a in split_node.attribute if a.name == "split").ints) == [16, 16, 16]
        else:
            assert len(split_node.input) == 1 and len(split_node.output) == 3


@pytest.mark.parametrize("trans_b", [False, True])
def test_a_generated_fused_weight_is_listed_with_its_parts(trans_b):
    """A fused weight generated by a ConstantOfShape: each rank generates its [32, 48] chunk, and the
    manifest lists it with its 3 parts, so that the check's random values are cut part by part as the
    whole model's are (cut contiguously, rank 0 would multiply by the whole of q and half of k)."""
    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention(op="Gemm", trans_b=trans_b, generated=True)
    _, manifest, _ = check(model, stage_plan(model, [], [2]))
    w = manifest["submodels"][0]["tensor_parallel"]["sliced_weights"][0]
    axis = 0 if trans_b else 1
    assert w == {"tensor": f"layer0/qkv.weight__tp{axis}p3", "from": "layer0/qkv.weight", "axis": axis,
                 "parts": 3}


@pytest.mark.parametrize("cut", [1, 2])  # after the fused MatMul; after its bias Add
@pytest.mark.parametrize("ts", [[2, 2], [2, 1], [1, 2], [4, 2]])
def test_a_stage_cut_inside_a_fused_projection_gathers_and_reslices_each_part(cut, ts):
    """A cut between the fused product and its Split: the tensor leaving a split stage is gathered part
    by part (rank chunks of q, k, v put back in place: the whole tensor the next stage or the check
    reads), and a split stage receiving it whole takes its chunk of each part."""
    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention()
    _, manifest, rep = check(model, stage_plan(model, [cut], ts))
    leaving = ["layer0/qkv", "layer0/qkv_bias"][cut - 1]
    if ts[0] > 1:
        tp = manifest["submodels"][0]["tensor_parallel"]
        assert [c for c in tp["collectives"] if c["op"] == "allgather"] == [
            {"op": "allgather", "input": leaving + "__tp", "output": leaving, "axis": 1, "parts": 3,
             "after": 0}]
    assert list(rep.cut_max_abs_diff) == [leaving]


def test_run_gathers_a_fused_projection_part_by_part_between_rank_processes():
    """``placement run``'s worker processes (a process per rank) on a cut after the fused bias Add: the
    first stage's ranks all-gather it part by part, the next stage's ranks take their chunks of each
    part again; the outputs equal the whole model's."""
    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention(generated=True)
    split = split_stages(model, stage_plan(model, [2], [2, 2]))
    manifest = split.manifest()
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=0, dims=None,
                                         batch_size=1, manifest=manifest)
    run = run_pipeline(parts, manifest, feeds, samples=3, reference=reference, timeout=240)
    assert run.tensor_parallel == (2, 2) and run.workers == 4
    assert max(run.max_abs_diff.values()) <= 1e-5


def test_combine_puts_the_parts_of_a_fused_projection_back_in_place():
    """12 columns in 3 parts of 4, t = 2: rank 0 holds 0, 1, 4, 5, 8, 9, rank 1 2, 3, 6, 7, 10, 11; the
    all-gather of a fused projection's tensor puts them back in order, not rank after rank."""
    from placement.tensor_parallel import chunk, combine

    x = np.arange(24).reshape(2, 12)
    r0, r1 = chunk(x, 1, 2, 0, parts=3), chunk(x, 1, 2, 1, parts=3)
    assert r0[0].tolist() == [0, 1, 4, 5, 8, 9] and r1[0].tolist() == [2, 3, 6, 7, 10, 11]
    assert np.array_equal(combine({"op": "allgather", "axis": 1, "parts": 3}, [r0, r1]), x)
    with pytest.raises(InputError, match="12 into 8 equal chunks of each of 3 parts"):
        chunk(x, 1, 8, 0, parts=3)


def test_a_split_of_a_fused_output_with_another_reader_is_still_refused():
    """layer0's fused output is read by the Split and by an Identity too: not a fused projection (the
    Identity would read the parts interleaved), so layer0's Split is refused by name; layer1 splits."""
    from tests.onnx_models import fused_qkv_attention

    model = fused_qkv_attention(peek=True)
    with pytest.raises(InputError, match=r"'layer0/split' \(Split\).*not as a fused projection's Split"):
        split_stages(model, stage_plan(model, [], [2]))
    n0 = 1 + len([x for x in parse_model(model).names if x.startswith("layer0/")])
    check(model, stage_plan(model, [n0 - 1], [1, 2]))


@pytest.mark.parametrize("dynamo,dynamic_batch", [(False, False), (True, False), (True, True)])
def test_a_gpt2_with_a_fused_c_attn_exported_by_torch(tmp_path, dynamo, dynamic_batch):
    """``torch.onnx.export`` of tests/torch_models.gpt2 (GPT-2's blocks: a fused c_attn Linear(h, 3h) then
    ``.split(h, dim=-1)``, a tied LM head): TorchScript (the sizes as the Split's input) and the default
    dynamo exporter (``num_outputs``; a symbolic batch too), split 2 and 4 ways, match the model with two
    all-reduces per block; 8 ways the 4 heads are refused by name."""
    pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    from tests.torch_models import export_onnx, gpt2, tokens

    path = export_onnx(gpt2(layers=2, hidden=32, heads=4, vocab=64, positions=16), tmp_path / "gpt2.onnx",
                       tokens(2, 8, 64), dynamic_batch=dynamic_batch, dynamo=dynamo)
    model = onnx.load(path)
    for t in (2, 4):
        split = split_stages(model, stage_plan(model, [], [t]))
        rep = verify_split(model, [s.model for s in split.submodels], split.manifest())
        assert rep.ok and rep.worst <= 1e-4, rep.max_abs_diff  # logits over a 64-word vocabulary
        assert [op for op, _ in _collectives(split.manifest())] == ["allreduce"] * 4
    with pytest.raises(InputError, match=r"stage 0 .*\(Reshape\).*dimension of 4 along the split axis"):
        split_stages(model, stage_plan(model, [], [8]))


def test_a_gpt2_torchscript_export_with_a_symbolic_batch_splits_at_the_placed_batch(tmp_path):
    """TorchScript with a symbolic batch computes the heads Reshape's target shape at run time (Shape,
    Gather, Concat): the front end folds it at the batch the plan was placed at (2), so 2 and 4 ways
    match the model at that batch (the manifest says so: ``shapes_at``), a check at another batch is
    refused by name, and 8 ways the 4 heads are."""
    pytest.importorskip("torch")
    from tests.torch_models import export_onnx, gpt2, tokens

    path = export_onnx(gpt2(layers=2, hidden=32, heads=4, vocab=64, positions=16), tmp_path / "gpt2.onnx",
                       tokens(2, 8, 64), dynamic_batch=True, dynamo=False)
    model = onnx.load(path)
    for t in (2, 4):
        split = split_stages(model, {**stage_plan(model, [], [t]), "problem": {"batch_size": 2, "dims": {}}})
        manifest = split.manifest()
        rep = verify_split(model, [s.model for s in split.submodels], manifest, batch_size=2)
        assert rep.ok and rep.worst <= 1e-4, rep.max_abs_diff  # logits over a 64-word vocabulary
        assert [op for op, _ in _collectives(manifest)] == ["allreduce"] * 4
        assert manifest["submodels"][0]["shapes_at"] == {"batch": 2}
    with pytest.raises(InputError, match=r"sub-model 0 .*shapes at batch=2 .*not at batch=1"):
        verify_split(model, [s.model for s in split.submodels], manifest, batch_size=1)
    with pytest.raises(InputError, match=r"'/h.0/Reshape' \(Reshape\).*dimension of 4 along the split axis"):
        split_stages(model, stage_plan(model, [], [8]))


def test_heads_that_do_not_divide_by_t_are_refused():
    model = gpt(hidden=48, heads=3)
    with pytest.raises(InputError, match=r"stage 1 \(tensor-parallel degree 2\): operator "
                                         r"'layer0/attn/q_split' \(Reshape\).* 3 along the split axis"):
        split_stages(model, stage_plan(model, [3], [1, 2]))
    check(model, stage_plan(model, [3], [1, 3]))  # 3 heads split 3 ways is fine


def _softmax_model():
    """Two layers of two weighted products each: ``l0`` has a Softmax over the features between them
    (along the column-parallel split axis), ``l1`` a Relu."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for layer, act in (("l0", "Softmax"), ("l1", "Relu")):
        for k, (a, b) in enumerate(((8, 16), (16, 8))):
            w = f"{layer}.w{k}"
            inits.append(numpy_helper.from_array(rng.standard_normal((a, b)).astype(np.float32), w))
            nodes.append(helper.make_node("MatMul", [x, w], [f"{layer}/fc{k}"], name=f"{layer}/fc{k}"))
            x = f"{layer}/fc{k}"
            if k == 0:
                nodes.append(helper.make_node(act, [x], [f"{layer}/act"], name=f"{layer}/act"))
                x = f"{layer}/act"
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 8])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_operator_the_rule_splits_but_split_cannot_divide_is_refused_by_stage_and_name():
    model = _softmax_model()
    with pytest.raises(InputError, match=r"stage 0 .*'l0/act' \(Softmax\).*normalises along the split axis"):
        split_stages(model, stage_plan(model, [], [2]))
    # the other layer alone divides: the first stage whole, the second split
    _, manifest, _ = check(model, stage_plan(model, [3], [1, 2]))
    assert [c["op"] for c in manifest["submodels"][1]["tensor_parallel"]["collectives"]] == ["allreduce"]


def test_a_wrong_rank_is_caught_by_verify():
    """verify compares with the whole model: rank 1 running rank 0's weights sums the wrong chunks."""
    model = gpt()
    split = split_stages(model, stage_plan(model, [], [2]))
    ranks = split.submodels[0].model
    rep = verify_split(model, [(ranks[0], ranks[0])], split.manifest())
    assert not rep.ok and rep.worst > 1e-3


def test_run_starts_d_times_t_workers_and_matches_the_model():
    """A stage of 2 replicas of 2 ranks and a t = 2 stage after it (cut inside a block): 6 processes,
    samples dealt round robin to the replicas, outputs equal to the whole model's."""
    model = gpt(weights="generated")
    split = split_stages(model, stage_plan(model, [25], [2, 2], [2, 1]))
    manifest = split.manifest()
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=0, dims=None,
                                         batch_size=2, manifest=manifest)
    run = run_pipeline(parts, manifest, feeds, samples=5, reference=reference, timeout=240)
    assert run.replicas == (2, 1) and run.tensor_parallel == (2, 2) and run.workers == 6
    assert run.taken == ((3, 2), (5,))
    assert all(b > 0 for bs in run.busy_s for b in bs)
    assert max(run.max_abs_diff.values()) <= 1e-5


def test_cli_split_verify_and_run_a_placed_tensor_parallel_plan(tmp_path, capsys):
    """A plan ``placement place`` made (layer granularity) with its stage tensor-parallel: two a100s and
    one micro-batch (d must divide it), so the stage is t = 2; split --verify and run take it from the
    files, as evaluate scores it (no note that it was not checked)."""
    from graphs.transformer import gpt as gpt_model

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt_model(2, hidden=32, heads=4, seq_len=8, vocab=50, weights="generated"), path)
    res = tmp_path / "r.json"
    assert main(["place", path, "--devices", "a100:2", "--microbatches", "1", "-o", str(res), "--json",
                 "--granularity", "layer"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["tensorParallelDegree"], s["dataParallelDegree"]) for s in data["stages"]] == [(2, 1)]
    assert main(["evaluate", path, str(res)]) == 0
    capsys.readouterr()
    out = tmp_path / "stages"
    assert main(["split", path, str(res), "--out-dir", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "2 tensor-parallel ranks on a100:0, a100:1" in text and "verify: OK" in text
    assert "not checked" not in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(s["tensor_parallel"]["degree"] == 2 for s in manifest["submodels"])
    assert main(["run", path, str(res), "--samples", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensor_parallel"] == [2] * len(data["stages"]) and doc["workers"] == 2 * len(data["stages"])
    assert max(doc["max_abs_diff"].values()) <= 1e-4
    assert doc["predicted_ms_per_batch"] is not None  # the plan evaluate scores, predicted as it scores it


def _mlp_model(spec, *, add=False, extra_output=False, body=False):
    """Layers of MatMuls (``spec``: layer -> the weights' shapes), a Relu after each layer's first one,
    weights scaled by 1/sqrt(fan-in). ``add``: the last layer adds, after its first product, the
    previous layer's output (read whole across layers, sliced by the split ``Add``); ``extra_output``:
    the first layer's output is a model output too; ``body``: the model ends with an ``If`` whose
    branches read the last layer's output from the enclosing graph."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x, prev = [], [], "x", None
    layers = list(spec.items())
    for li, (layer, dims) in enumerate(layers):
        for k, (a, b) in enumerate(dims):
            w = f"{layer}.w{k}"
            value = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
            inits.append(numpy_helper.from_array(value, w))
            nodes.append(helper.make_node("MatMul", [x, w], [f"{layer}/fc{k}"], name=f"{layer}/fc{k}"))
            x = f"{layer}/fc{k}"
            if k == 0:
                nodes.append(helper.make_node("Relu", [x], [f"{layer}/act"], name=f"{layer}/act"))
                x = f"{layer}/act"
                if add and li == len(layers) - 1:
                    nodes.append(helper.make_node("Add", [x, prev], [f"{layer}/add"], name=f"{layer}/add"))
                    x = f"{layer}/add"
        prev = x
    outs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)]
    if body:
        cond = numpy_helper.from_array(np.array(True), "head/cond")
        inits.append(cond)
        branch = [helper.make_graph([helper.make_node(op, [x], [f"head/{op}"], name=f"head/{op}")], op, [],
                                    [helper.make_tensor_value_info(f"head/{op}", TensorProto.FLOAT, None)])
                  for op in ("Identity", "Neg")]
        nodes.append(helper.make_node("If", ["head/cond"], ["head/if"], name="head/if",
                                      then_branch=branch[0], else_branch=branch[1]))
        outs = [helper.make_tensor_value_info("head/if", TensorProto.FLOAT, None)]
    if extra_output:
        first = f"{layers[0][0]}/fc{len(layers[0][1]) - 1}"
        outs.append(helper.make_tensor_value_info(first, TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], outs,
                          initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


# l0 ends column-parallel (col, row, col): its split output l0/fc2 is read whole by the next layer
_COL_END = {"l0": [(8, 16), (16, 8), (8, 16)], "l1": [(16, 8), (8, 8)]}


def _collectives(manifest, k=0):
    return [(c["op"], c["output"]) for c in manifest["submodels"][k]["tensor_parallel"]["collectives"]]


@pytest.mark.parametrize("extra_output", [False, True])
def test_a_split_tensor_read_whole_by_the_next_layers_split_product_is_gathered(tmp_path, extra_output):
    """A layer ending column-parallel feeds the next layer's column-parallel product: its split output
    is gathered once where it leaves the layer (as the cost model charges), in the stage, also when it
    is a model output too."""
    model = _mlp_model(_COL_END, extra_output=extra_output)
    from placement.tensor_parallel import split_layout

    layout = split_layout(model)
    assert [bool(layout.ts.column[layout.op_of[c]]) for c in ("l0/fc0", "l0/fc2", "l1/fc0")] == [True] * 3
    _, manifest, _ = check(model, stage_plan(model, [], [2]), tmp_path)
    assert _collectives(manifest) == [("allreduce", "l0/fc1"), ("allgather", "l0/fc2"),
                                      ("allreduce", "l1/fc1")]
    tp = manifest["submodels"][0]["tensor_parallel"]
    assert [c["after"] for c in tp["collectives"]] == [0, 1, 2] and len(tp["segments"]) == 3
    assert "l0/fc2" in tp["segments"][2]["inputs"]


@pytest.mark.parametrize("cut,ts,gathers", [
    (3, [1, 2], [[], ["l0/fc2"]]),  # l0/fc2 made in stage 1, read there by l1/fc0
    (4, [2, 2], [["l0/fc2"], []]),  # l0/fc2 leaves stage 0: gathered there, read whole by stage 1
    (4, [2, 1], [["l0/fc2"], None]),
    (5, [2, 2], [["l0/fc2", "l1/fc0"], []]),  # and l1/fc0 gathered where it leaves stage 0
])
def test_a_layer_ending_column_parallel_cut_into_stages(cut, ts, gathers):
    model = _mlp_model(_COL_END)
    _, manifest, rep = check(model, stage_plan(model, [cut], ts))
    got = [[x for op, x in _collectives(manifest, k) if op == "allgather"] if t > 1 else None
           for k, t in enumerate(ts)]
    assert got == [g if t > 1 else None for g, t in zip(gathers, ts)]
    assert rep.cut_max_abs_diff


def test_a_split_operator_slicing_a_whole_tensor_split_elsewhere_gathers_it_first():
    """l1's split Add reads l0's split output whole (another layer) and slices it to its chunk: the
    tensor is gathered first, once, for both of l1's readers."""
    model = _mlp_model({"l0": [(8, 16), (16, 8), (8, 16)], "l1": [(16, 16), (16, 8)]}, add=True)
    _, manifest, _ = check(model, stage_plan(model, [], [2]))
    assert _collectives(manifest) == [("allreduce", "l0/fc1"), ("allgather", "l0/fc2"),
                                      ("allreduce", "l1/fc1")]


def test_a_body_reading_a_split_tensor_from_the_enclosing_graph_gets_it_gathered():
    """An ``If`` (not split) whose branches read the layer's split output from the enclosing graph."""
    model = _mlp_model({"l0": [(8, 16), (16, 8), (8, 16)]}, body=True)
    _, manifest, _ = check(model, stage_plan(model, [], [2]))
    assert _collectives(manifest) == [("allreduce", "l0/fc1"), ("allgather", "l0/fc2")]


def test_run_and_the_cli_on_a_layer_ending_column_parallel(tmp_path, capsys):
    """split --verify and run (a process per rank) from the files, outputs equal to the whole model's."""
    model = _mlp_model(_COL_END)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    res = tmp_path / "r.json"
    res.write_text(json.dumps(stage_plan(model, [5], [2, 2])))  # l0/fc2 gathered inside stage 0
    assert main(["split", path, str(res), "--out-dir", str(tmp_path / "stages"), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "stages" / "manifest.json").read_text())
    assert [c[1] for c in _collectives(manifest) if c[0] == "allgather"] == ["l0/fc2", "l1/fc0"]
    assert main(["run", path, str(res), "--samples", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensor_parallel"] == [2, 2] and doc["workers"] == 4
    assert max(doc["max_abs_diff"].values()) <= 1e-5


def test_the_manifest_lists_every_device_of_each_replica(tmp_path):
    """Stage 0 (2 replicas of 2 ranks) takes cpu:0-3, replica q ranks on cpu:2q, cpu:2q+1; stage 1 the
    next device. The file says so in ``replica_devices``; ``tensor_parallel`` is a JSON object in it."""
    model = gpt()
    split = split_stages(model, stage_plan(model, [25], [2, 1], [2, 1]))
    write_split(split, tmp_path / "parts")
    raw = json.loads((tmp_path / "parts" / "manifest.json").read_text())
    assert raw["version"] == 2
    assert [s["replica_devices"] for s in raw["submodels"]] == [[["cpu:0", "cpu:1"], ["cpu:2", "cpu:3"]],
                                                                [["cpu:4"]]]
    assert [s["replicas"] for s in raw["submodels"]] == [2, 1]
    tp = raw["submodels"][0]["tensor_parallel"]
    assert isinstance(tp, dict) and tp["degree"] == 2 and "rank_devices" not in tp
    manifest, _ = read_split_manifest(tmp_path / "parts")
    assert manifest == raw


def test_a_version_1_manifest_is_read_as_version_2(tmp_path):
    """A folder written the old way (rank 0's device per replica, the ranks' in ``tensor_parallel.
    rank_devices``) reads back with each replica's devices, and verifies as before."""
    model = gpt()
    split = split_stages(model, stage_plan(model, [25], [2, 1], [2, 1]))
    new = write_split(split, tmp_path / "parts")
    old = json.loads(json.dumps(new))
    old["version"] = 1
    s0, s1 = old["submodels"]
    s0["tensor_parallel"]["rank_devices"] = s0["replica_devices"]
    s0["replica_devices"] = ["cpu:0", "cpu:2"]
    s1["replica_devices"] = ["cpu:4"]
    (tmp_path / "parts" / "manifest.json").write_text(json.dumps(old))
    manifest, models = read_split_manifest(tmp_path / "parts")
    assert manifest == new
    assert verify_split(model, models, manifest).ok
    old["version"] = 3
    (tmp_path / "parts" / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(InputError, match="manifest version 3"):
        read_split_manifest(tmp_path / "parts")
