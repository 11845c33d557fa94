"""The replicated model of an ONNX model (graphs/onnx_variants.py): bytes and times of every variant by
hand on a tiny MLP, the tensor-parallel split of a transformer block, and the pipeline DP as its special
case."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from graphs.devices import PRESETS, DeviceSet, parse_device_table, parse_devices  # noqa: E402
from graphs.onnx_variants import allreduce_time, onnx_parallel_problem, tensor_split  # noqa: E402
from graphs.onnx_workload import prepare_onnx  # noqa: E402
from graphs.parallel import Stage, evaluate_plan  # noqa: E402

F32 = 4


def _mlp(path):
    """x[2, 8] -> l0/fc1 (8x16) -> l0/relu -> l0/fc2 (16x8) -> l1/fc1 -> l1/relu -> l1/fc2 -> y[2, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, x = [], [], "x"
    for layer in ("l0", "l1"):
        for nm, shape in (("fc1", (8, 16)), ("fc2", (16, 8))):
            w = f"{layer}/{nm}.weight"
            inits.append(numpy_helper.from_array(np.full(shape, 0.1, np.float32), w))
            nodes.append(helper.make_node("MatMul", [x, w], [f"{layer}/{nm}"], name=f"{layer}/{nm}"))
            x = f"{layer}/{nm}"
            if nm == "fc1":
                nodes.append(helper.make_node("Relu", [x], [f"{layer}/relu"], name=f"{layer}/relu"))
                x = f"{layer}/relu"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 8])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return str(path)


def _variants(problem, node, kind=0, t=1):
    g = problem.graph
    return {g.variants[v].name: g.variants[v] for v in g.options[(node, kind, t)]}


def test_the_bytes_and_times_of_a_tiny_mlp_by_hand(tmp_path):
    path = _mlp(tmp_path / "mlp.onnx")
    ds = parse_devices("a100:2")
    og, w = prepare_onnx(path, ds, training=True, optimizer="adam")
    assert w.graph.meta["layer"] == ("l0",) * 3 + ("l1",) * 3
    p, cls = onnx_parallel_problem(og, w.graph, ds, granularity="layer")
    assert p.graph.num_nodes == 2 and p.microbatches == 2  # default N: a power of two >= 2 devices
    l0 = int(cls[0])
    assert set(cls[:3].tolist()) == {l0} and set(cls[3:6].tolist()) == {1 - l0}
    # per micro-batch (batch 2): fc1 and relu output 2x16 floats, fc2 2x8; each weight 128 floats
    # the input's batch dimension is fixed, so one run is one "sample" (the front end's batch size, 1)
    act, wgt, b = 2 * 16 * F32, 128 * F32, og.batch_size
    assert b == 1
    v = _variants(p, l0)
    van, rc = v["vanilla"], v["activation recomp"]
    ms = 1e-3 / b  # the graph's ms per micro-batch -> s per sample
    fwd, bwd = w.graph.compute[0, :3].sum(), w.graph.compute[0, 6:9].sum()
    assert van.a == act + act + act / 2
    assert van.b == 2 * wgt * (1 + 1 + 2)  # weights, gradients, two Adam moments
    assert van.w == 2 * wgt and van.params == 2 * wgt / b
    assert van.time == pytest.approx((fwd + bwd) * ms, rel=1e-12)
    assert van.backward_time == pytest.approx(bwd * ms, rel=1e-12)  # the backward twins' part, kept apart
    assert rc.a == act / 2  # only fc2's output leaves the layer
    assert rc.b == van.b and rc.time == pytest.approx(van.time + fwd * ms, rel=1e-12)
    # recomputing runs the forward pass again in the backward pass
    assert rc.backward_time == pytest.approx((fwd + bwd) * ms, rel=1e-12)
    # tensor parallel, t = 2: fc1 column-parallel (reads x: its gradient is all-reduced), relu split,
    # fc2 row-parallel (all-reduces its output)
    t2 = _variants(p, l0, t=2)
    spec = PRESETS["a100"]
    launch = spec.launch * 1e3

    def split(x):
        return launch + (x - launch) / 2

    comm = allreduce_time(2 * 8 * F32, 2, spec.intra_bandwidth) * 2 / b
    assert comm == pytest.approx(4 * 0.5 * 128 / 300e9)
    expect = sum(split(x) for x in w.graph.compute[0, [0, 1, 2, 6, 7, 8]]) * ms + comm
    assert t2["vanilla"].time == pytest.approx(expect, rel=1e-12)
    # the backward operators and fc1's input gradient's all-reduce (fc2's output's is the forward pass's)
    back = sum(split(x) for x in w.graph.compute[0, [6, 7, 8]]) * ms + comm / 2
    assert t2["vanilla"].backward_time == pytest.approx(back, rel=1e-12)
    assert t2["vanilla"].a == act / 2 + act / 2 + act / 2  # fc2's output is whole after the all-reduce
    assert t2["vanilla"].b == van.b / 2 and t2["vanilla"].w == wgt and t2["vanilla"].params == wgt / b
    assert t2["activation recomp"].a == act / 2
    # recomputing runs the split forward pass again, fc2's output all-reduce included (comm / 2: the
    # forward one of the two all-reduces); before, the second forward pass did not pay it
    again = sum(split(x) for x in w.graph.compute[0, [0, 1, 2]]) * ms + comm / 2
    assert t2["activation recomp"].time == pytest.approx(expect + again, rel=1e-12)
    assert t2["activation recomp"].backward_time == pytest.approx(back + again, rel=1e-12)
    assert set(p.graph.degrees(0)) == {1, 2}  # t <= 2 devices


def test_inference_has_no_stash_no_resync_and_no_recompute(tmp_path):
    path = _mlp(tmp_path / "mlp.onnx")
    ds = parse_devices("a100:4")
    og, w = prepare_onnx(path, ds)
    p, cls = onnx_parallel_problem(og, w.graph, ds, granularity="layer")
    for v in p.graph.variants:
        assert v.a == 0 and v.params == 0 and v.w == 0 and v.name == "vanilla" and v.backward_time == 0
        if v.t == 1:  # a layer's two weights, and its outputs held (fc1, relu 2x16 floats, fc2 2x8)
            assert v.b == 2 * 128 * F32 + (2 * 16 + 2 * 16 + 2 * 8) * F32
    # t = 2: the forward operators split, and fc2's output all-reduced once; no backward pass (a split
    # backward operator's launch was counted for each split operator)
    spec = PRESETS["a100"]
    launch = spec.launch * 1e3
    comm = allreduce_time(2 * 8 * F32, 2, spec.intra_bandwidth) / og.batch_size
    for node in range(2):
        ops = np.flatnonzero(cls == node)  # the layer's three operators
        expect = sum(launch + (x - launch) / 2 for x in w.graph.compute[0, ops]) * 1e-3 / og.batch_size + comm
        assert _variants(p, node, t=2)["vanilla"].time == pytest.approx(expect, rel=1e-12)


def test_transformer_blocks_all_reduce_twice_forward_and_twice_backward(tmp_path):
    from graphs.transformer import gpt

    path = tmp_path / "gpt.onnx"
    hidden, seq, batch = 32, 8, 2
    onnx.save(gpt(2, hidden=hidden, heads=4, seq_len=seq, vocab=50, weights="random"), str(path))
    og, w = prepare_onnx(str(path), "a100:8", training=True, batch_size=batch)
    keys = w.graph.meta["layer"]
    ts = tensor_split(og, keys)
    assert ts.blocks == ["layer0", "layer1"]
    act = batch * seq * hidden * F32
    for blk in ts.blocks:
        idx = [i for i, k in enumerate(keys) if k == blk]
        # out_proj and fc2 (forward), the q/k/v input and the fc1 input (backward): one activation each
        assert ts.allreduce[idx].sum() == 4 * act
        names = {og.ops[i].name.split("/", 1)[1]: i for i in idx}
        assert ts.split[names["attn/softmax"]] and ts.out_split[names["attn/q_proj"]]
        assert ts.split[names["mlp/fc2"]] and not ts.out_split[names["mlp/fc2"]]
        assert not ts.split[names["norm1"]] and not ts.split[names["attn_residual"]]
    assert not ts.split[[i for i, k in enumerate(keys) if k not in ts.blocks]].any()


def _ds(memory):
    return DeviceSet((dataclasses.replace(PRESETS["a100"], memory=memory), PRESETS["cpu"]), (2, 1))


@pytest.mark.parametrize("memory", [None, 3e4, 5e3])
def test_pipeline_only_equals_the_pipeline_dp(tmp_path, memory):
    """max-replicas 1, t = 1, no recomputation, activations counted once: the pipeline model exactly (memory
    binding or not); activations stashed per micro-batch in flight agree where memory does not bind."""
    from graphs.transformer import gpt
    from solvers.base import Status
    from solvers.dp import solve as dp_solve
    from solvers.dp_stages import solve_problem

    path = tmp_path / "gpt.onnx"
    onnx.save(gpt(1, hidden=16, heads=2, seq_len=4, vocab=40, weights="random"), str(path))
    ds = _ds(memory)
    og, w = prepare_onnx(str(path), ds, training=True, batch_size=2)
    pipeline = dp_solve(w.graph, w.cluster)
    p, _ = onnx_parallel_problem(og, w.graph, ds, max_replicas=1, tensor_parallel=False, recompute=False,
                                 stash="once")
    r = solve_problem(p, time_limit=120)
    assert r.status is pipeline.status
    wf = prepare_onnx(str(path), _ds(None), training=True, batch_size=2)[1]
    free = dp_solve(wf.graph, wf.cluster)
    assert (pipeline.objective > free.objective * 1.01) == (memory is not None)  # the memory binds
    if pipeline.status is Status.OPTIMAL:
        assert r.objective * 1e3 * 2 == pytest.approx(pipeline.objective, rel=1e-9)
    if memory is None:
        q = p.with_options(graph=onnx_parallel_problem(og, w.graph, ds, max_replicas=1, tensor_parallel=False,
                                                       recompute=False)[0].graph)
        assert r.objective == pytest.approx(solve_problem(q, time_limit=120).objective, rel=1e-9)


def test_schedule_memory_of_a_two_stage_plan(tmp_path):
    path = _mlp(tmp_path / "mlp.onnx")
    ds = parse_devices("a100:2")
    og, w = prepare_onnx(path, ds, training=True, optimizer="sgd")
    p, cls = onnx_parallel_problem(og, w.graph, ds, granularity="layer", microbatches=4)
    l0 = int(cls[0])
    van = [_variants(p, u)["vanilla"] for u in (l0, 1 - l0)]
    vid = [p.graph.options[(u, 0, 1)][0] for u in (l0, 1 - l0)]
    plan = [Stage((l0,), 0, 1, 1, (vid[0],)), Stage((1 - l0,), 0, 1, 1, (vid[1],))]
    for sched, y0, versions in (("1f1b", 2, 1), ("gpipe", 4, 1), ("pipedream", 2, 2), ("2bw", 2, 2)):
        ev = evaluate_plan(p.with_options(schedule=sched), plan)
        assert ev.valid, ev.problems
        s0 = ev.stages[0]
        assert s0.in_flight == y0
        assert s0.memory == pytest.approx(van[0].a * y0 + van[0].b + (versions - 1) * van[0].w)
        assert van[0].b == 2 * 128 * F32 * 2  # SGD: weights and gradients


def test_device_topology_figures_and_file_keys():
    a = PRESETS["a100"]
    assert a.server_size == 8 and a.intra_bandwidth == 300e9 and a.inter_bandwidth == 25e9
    specs, _ = parse_device_table({"g": {"base": "v100", "server_size": 4, "nvlink_gbs": 100,
                                         "network_gbs": 12.5}})
    g = specs["g"]
    assert (g.server_size, g.intra_bandwidth, g.inter_bandwidth) == (4, 100e9, 12.5e9)
    from graphs.errors import InputError

    with pytest.raises(InputError, match="server_size"):
        parse_device_table({"g": {"base": "v100", "server_size": 0}})
    assert math.isinf(PRESETS["cpu"].link_bandwidth) and PRESETS["cpu"].server_size is None


# ---------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def gpt2_path(tmp_path_factory):
    from graphs.transformer import gpt

    path = tmp_path_factory.mktemp("cli") / "gpt.onnx"
    onnx.save(gpt(2, hidden=64, heads=4, seq_len=16, vocab=100, weights="random"), str(path))
    return str(path)


def test_cli_training_is_replicated_by_default(gpt2_path, tmp_path, capsys):
    import json

    from graphs.devices import parse_devices
    from placement.cli import main
    from solvers.dp_stages import solve_problem

    out = tmp_path / "r.json"
    args = ["place", gpt2_path, "--training", "--devices", "a100:4,v100:4", "--batch-size", "4",
            "--granularity", "layer"]
    assert main(args + ["--out", str(out), "--schedule", "gpipe", "--microbatches", "8"]) == 0
    text = capsys.readouterr().out
    assert "schedule gpipe, 8 micro-batches per batch, layer granularity" in text
    doc = json.loads(out.read_text())
    # printed in ms (as the pipeline-only table), memory in binary units; the JSON holds seconds
    assert doc["time_unit"] == "s" and "load (ms/sample)" in text and "memory / device" in text
    shown = float(text.split("max-load ")[1].split(" ms per sample")[0])
    assert "status optimal" in text
    assert shown == pytest.approx(doc["objective"] * 1e3, rel=1e-8)
    assert "iB " in text.splitlines()[1] and " GB" not in text
    assert doc["model"] == "stages" and doc["problem"]["schedule"] == "gpipe"
    assert doc["problem"]["granularity"] == "layer" and doc["problem"]["batch_size"] == 4
    names = [n for s in doc["stages"] for n in s["nodes"]]
    assert sorted(names) == sorted(["embeddings", "layer0", "layer1", "final_norm", "lm_head"])
    ops = [o for s in doc["stages"] for o in s["operators"]]
    assert "layer0/attn/q_proj" in ops and "layer0/attn/q_proj_grad" in ops
    for s in doc["stages"]:
        assert s["in_flight"] == 8 // s["dataParallelDegree"]  # GPipe: the replica's whole share
    # the same as the library's optimum
    ds = parse_devices("a100:4,v100:4")
    og, w = prepare_onnx(gpt2_path, ds, training=True, batch_size=4)
    p, _ = onnx_parallel_problem(og, w.graph, ds, microbatches=8, schedule="gpipe", granularity="layer")
    assert doc["objective"] == pytest.approx(solve_problem(p).objective, rel=1e-12)
    # evaluate re-scores the plan with its own settings
    assert main(["evaluate", gpt2_path, str(out), "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["objective"] == pytest.approx(doc["objective"], rel=1e-12) and ev["valid"]
    # a plan that breaks a rule, a degree that does not divide N: INVALID, exit 1; an unknown node: one
    # error line, exit 2
    d0 = doc["stages"][0]["dataParallelDegree"]
    doc["stages"][0]["dataParallelDegree"] = 3
    devices = [s.pop("devices") for s in doc["stages"]]  # derived from d: dropped with the edit
    out.write_text(json.dumps(doc))
    assert main(["evaluate", gpt2_path, str(out)]) == 1
    assert "data-parallel degree 3 does not divide 8 micro-batches" in capsys.readouterr().out
    doc["stages"][0]["dataParallelDegree"] = d0
    for s, names in zip(doc["stages"], devices):
        s["devices"] = names
    doc["stages"][0]["nodes"][0] = "layer9"
    out.write_text(json.dumps(doc))
    assert main(["evaluate", gpt2_path, str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "unknown node 'layer9'" in err and err.count("\n") == 1


def test_cli_max_replicas_1_is_the_one_device_per_stage_placement(gpt2_path, capsys):
    import json

    from placement.cli import main
    from solvers.dp import solve as dp_solve

    assert main(["place", gpt2_path, "--training", "--devices", "a100:2,cpu:1", "--max-replicas", "1",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "one-device-per-stage"  # d = t = 1, one device per stage
    w = prepare_onnx(gpt2_path, "a100:2,cpu:1", training=True)[1]
    assert doc["max_load"] == pytest.approx(dp_solve(w.graph, w.cluster).objective, rel=1e-9)
    # an inference graph has replicas by default too; --max-replicas 1 keeps one device per stage
    assert main(["place", gpt2_path, "--devices", "a100:2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "stages"
    assert main(["place", gpt2_path, "--devices", "a100:2", "--max-replicas", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "one-device-per-stage"


def test_cli_bad_options(gpt2_path, capsys):
    from placement.cli import main

    assert main(["place", gpt2_path, "--training", "--max-devices", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--max-devices" in err and err.count("\n") == 1
    assert main(["place", gpt2_path, "--training", "--devices", "a100:2", "--device-memory", "1e5"]) == 1
    assert "error:" in capsys.readouterr().err


def test_replicated_optimum_is_no_worse_than_pipeline_only_or_data_parallel(gpt2_path):
    from benchmarks.bench_parallel_plans import data_parallel
    from solvers.dp_stages import solve_problem

    ds = parse_devices("a100:2,v100:2")
    og, w = prepare_onnx(gpt2_path, ds, training=True, batch_size=8)
    full, _ = onnx_parallel_problem(og, w.graph, ds, granularity="layer")
    pipe, _ = onnx_parallel_problem(og, w.graph, ds, granularity="layer", max_replicas=1,
                                    tensor_parallel=False)
    r, q = solve_problem(full), solve_problem(pipe)
    assert r.evaluation.valid and q.evaluation.valid
    assert all(s.stage.d == 1 and s.stage.t == 1 for s in q.evaluation.stages)
    dp = data_parallel(full)
    assert dp is not None and dp[0].valid and dp[0].stages[0].stage.d == 2
    assert r.objective <= min(q.objective, dp[0].objective) * (1 + 1e-12)


@pytest.mark.parametrize("memory", [None, 1.5e4, 1e4])
def test_pipeline_only_equals_the_pipeline_dp_on_a_cnn_with_two_accelerator_kinds(tmp_path, memory):
    """The same on a CNN (no layer names) over v100 and a100, memory loose, binding and infeasible."""
    from solvers.base import Status
    from solvers.dp import solve as dp_solve
    from solvers.dp_stages import solve_problem
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), tmp_path / "cnn.onnx")
    ds = DeviceSet(tuple(dataclasses.replace(PRESETS[k], memory=memory) for k in ("v100", "a100")), (2, 1))
    og, w = prepare_onnx(path, ds, training=True, batch_size=8)
    pipeline = dp_solve(w.graph, w.cluster)
    assert pipeline.status is (Status.INFEASIBLE if memory == 1e4 else Status.OPTIMAL)
    p, _ = onnx_parallel_problem(og, w.graph, ds, max_replicas=1, tensor_parallel=False, recompute=False,
                                 stash="once")
    r = solve_problem(p, time_limit=120)
    if pipeline.status is Status.OPTIMAL:
        assert r.status is Status.OPTIMAL
        assert r.objective * 1e3 * 8 == pytest.approx(pipeline.objective, rel=1e-9)
    else:
        assert r.plan is None


def test_a_stage_cut_inside_a_block_pays_the_gather(gpt2_path):
    """At operator granularity a split output that crosses a stage boundary inside its block (q_proj ->
    its bias) pays a gather (as an all-reduce) as a sync term of the producer's tensor-parallel variants."""
    ds = parse_devices("a100:4")
    og, w = prepare_onnx(gpt2_path, ds, training=True, batch_size=2)
    p, cls = onnx_parallel_problem(og, w.graph, ds)
    g = p.graph
    q = int(cls[[op.name for op in og.ops].index("layer0/attn/q_proj")])
    bias = int(cls[[op.name for op in og.ops].index("layer0/attn/q_proj/bias")])
    out = [e for e in range(g.num_tensors) if g.tensor_src[e] == q and bias in g.consumers(e)]
    nbytes = 2 * 16 * 64 * F32  # batch x sequence x width, float32
    bw = PRESETS["a100"].intra_bandwidth
    assert len(out) == 1  # the forward output (the gradient to norm1's twin is all-reduced in the block)
    for t in (2, 4):
        for v in _variants(p, q, t=t).values():
            assert set(v.sync_out) == set(out)
            assert all(x == pytest.approx(4 * (t - 1) / t * nbytes / bw / 2) for x in v.sync_out.values())
    assert all(not v.sync_out for v in _variants(p, q).values())  # t = 1: nothing split
    norm = int(cls[[op.name for op in og.ops].index("layer0/norm1")])
    assert all(not v.sync_out for v in _variants(p, norm, t=2).values())  # replicated: nothing to gather


def test_every_operator_pair_of_a_cnn_and_replication_beating_the_pipeline_only_optimum(tmp_path):
    """At operator granularity every node is a forward operator with its backward twin: vanilla stashes
    the operator's output, recomputation stashes less for one more forward pass with the same ``B``; with
    4 A100s and 2 CPU cores replicas beat the pipeline-only optimum (both proven optimal)."""
    from solvers.base import Status
    from solvers.dp_stages import solve_problem
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), tmp_path / "cnn.onnx")
    ds = parse_devices("a100:4,cpu:2")
    og, w = prepare_onnx(path, ds, training=True, batch_size=64)
    p, cls = onnx_parallel_problem(og, w.graph, ds, microbatches=8, granularity="op")
    g = p.graph
    assert g.num_nodes == og.num_ops and sorted(cls[:og.num_ops].tolist()) == list(range(g.num_nodes))
    assert (cls[og.num_ops:] == cls[:og.num_ops]).all()  # each backward twin with its forward operator
    out = {op.name: op.output_bytes for op in og.ops}
    for (u, _k, t), vids in g.options.items():
        vs = {g.variants[v].name: g.variants[v] for v in vids}
        van = vs["vanilla"]
        assert t == 1 and van.a == pytest.approx(out[g.names[u]])
        if "activation recomp" in vs:
            rec = vs["activation recomp"]
            assert rec.a < van.a and rec.b == van.b and rec.time > van.time
    # replicas resync over bytes per second (the model's times are seconds per sample)
    assert p.kinds[0].bandwidth == PRESETS["a100"].link_bandwidth
    r = solve_problem(p)
    assert r.status is Status.OPTIMAL and evaluate_plan(p, r.plan).valid
    one = solve_problem(p.with_options(max_replicas=1))
    assert one.status is Status.OPTIMAL and all(s.d == 1 for s in one.plan)
    assert r.objective < one.objective and any(s.d > 1 for s in r.plan)


def test_bad_arguments_are_input_errors(tmp_path):
    from graphs.errors import InputError
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), tmp_path / "cnn.onnx")
    ds = parse_devices("a100:2")
    og, w = prepare_onnx(path, ds, training=True)
    with pytest.raises(InputError, match="granularity"):
        onnx_parallel_problem(og, w.graph, ds, granularity="block")
    with pytest.raises(InputError, match="stash"):
        onnx_parallel_problem(og, w.graph, ds, stash="never")
