"""The PyTorch front end: operator graph from torch.export, the snapped plan, the pipelining split spec,
and a pipelined run on CPU whose output matches the unsplit module."""

import itertools
import os
import tempfile
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, then "
                                            "'.[torch]')")

from graphs.costs import op_flops  # noqa: E402
from graphs.errors import InputError  # noqa: E402
from graphs.evaluate import evaluate  # noqa: E402
from placement.torch import (  # noqa: E402
    in_execution_order,
    layer_partition,
    operator_graph,
    place_module,
    split_spec,
)
from tests.torch_models import gpt, mlp_sequential, pipelined_rank, tokens  # noqa: E402

GPT_KW = {"layers": 4, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16}
BATCH = 8


@pytest.fixture(scope="module")
def gpt_plan():
    model = gpt(**GPT_KW)
    return model, place_module(model, (tokens(BATCH),), devices="t4:3")


def test_the_torch_submodule_does_not_shadow_torch():
    import placement.torch as pt

    assert pt._torch() is torch and torch.nn.Module is not None


def test_operator_graph_has_the_shapes_flops_and_parameters_of_the_module():
    model = gpt(**GPT_KW)
    ep = torch.export.export(model, (tokens(2),))
    g, modules = operator_graph(ep)
    assert g.parameters == sum(p.numel() for p in model.parameters() if p.numel() > 1)
    assert g.trainable_parameters == g.parameters
    assert g.batch_size == 2
    linears = [(op, m) for op, m in zip(g.ops, modules) if op.name.startswith("linear")]
    assert len(linears) == 4 * 4 + 1
    for op, m in linears:
        mod = model.get_submodule(m)
        assert isinstance(mod, torch.nn.Linear)
        flops, exact = op_flops(op)
        assert exact and flops == 2 * 2 * 16 * mod.in_features * mod.out_features
        assert op.param_bytes == sum(p.numel() * 4 for p in mod.parameters())
        assert op.output_bytes == 2 * 16 * mod.out_features * 4
    # the causal masks are folded (computed from constants only), as the ONNX front end folds them
    assert not any(op.name.startswith(("ones", "tril")) for op in g.ops)
    assert all(a < b for a, b in zip(g.src, g.dst))  # edges follow the execution order


def test_attention_is_costed_by_its_formula():
    """torch.export keeps F.scaled_dot_product_attention as one operator: its FLOPs by hand (Q K^T, 6 per
    score for Softmax as ONNX's Softmax is costed, the weighted sum of V; a causal mask does not halve
    them) and within 2% of the same attention written out, which also scales and masks the scores (1 FLOP
    per score each)."""
    import math

    b, h, tq, tk, d, dv = 2, 4, 32, 48, 32, 24

    class Fused(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    class WrittenOut(torch.nn.Module):
        def forward(self, q, k, v):
            mask = torch.ones(tq, tk, dtype=torch.bool).tril()
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v

    args = (torch.randn(b, h, tq, d), torch.randn(b, h, tk, d), torch.randn(b, h, tk, dv))
    assert torch.allclose(Fused()(*args), WrittenOut()(*args), atol=1e-5)  # the same attention
    fused, _ = operator_graph(torch.export.export(Fused(), args))
    assert [op.op_type for op in fused.ops] == ["Attention"]
    scores = b * h * tq * tk
    assert op_flops(fused.ops[0]) == (2 * scores * d + 6 * scores + 2 * scores * dv, True)
    written, _ = operator_graph(torch.export.export(WrittenOut(), args))
    total = sum(op_flops(op)[0] for op in written.ops)
    assert all(op_flops(op)[1] for op in written.ops)
    assert op_flops(fused.ops[0])[0] == pytest.approx(total, rel=0.02)


def _brute_force(tp):
    """The best plan that cuts at split points: every choice of cut points and of devices per stage."""
    p = tp.placement
    graph, cluster = p.graph, p.cluster
    n = len(tp.modules)
    positions = sorted(tp.split_points)
    best = np.inf
    D = cluster.num_devices
    for k in range(D):
        for cuts in itertools.combinations(positions, k):
            stage = np.searchsorted(np.array(cuts, dtype=np.int64), np.arange(n), side="right")
            for devs in itertools.permutations(range(D), k + 1):
                a = np.array(devs)[stage]
                ev = evaluate(graph, cluster, a)
                if ev.valid:
                    best = min(best, ev.max_load)
    return best


def test_the_snapped_plan_is_the_best_cut_at_module_boundaries(gpt_plan):
    model, tp = gpt_plan
    p = tp.placement
    assert p.status.value == "optimal" and tp.unsnapped.status.value == "optimal"
    assert tp.num_stages == 3 and len(split_spec(tp)) == 2
    # the evaluator's max-load of the snapped assignment, no better than the free cut
    assert p.max_load == evaluate(p.graph, p.cluster, p.assignment).max_load
    assert tp.unsnapped.max_load <= p.max_load + 1e-12
    # stages begin exactly where their modules begin
    for fqn in tp.stage_starts:
        first = min(i for i, m in enumerate(tp.modules) if m == fqn or m.startswith(fqn + "."))
        assert tp.stage_of_op[first] == tp.stage_of_op[first - 1] + 1
    assert list(tp.stage_of_op) == sorted(tp.stage_of_op)
    assert abs(_brute_force(tp) - p.max_load) <= 1e-9 * p.max_load
    assert tp.time_per_sample == pytest.approx(p.max_load / BATCH)


def test_heterogeneous_devices_and_training():
    model = gpt(layers=2, hidden=32, heads=2, vocab=64, seq_len=8)
    x = tokens(4, 8, 64)
    tp = place_module(model, (x,), devices="a100:1,t4:2")
    assert abs(_brute_force(tp) - tp.placement.max_load) <= 1e-9 * tp.placement.max_load
    tr = place_module(model, (x,), devices="t4:2", training=True)
    g = tr.placement.graph
    assert g.num_nodes == 2 * len(tr.modules)
    a = tr.placement.assignment
    n = len(tr.modules)
    assert np.array_equal(a[:n], a[n:])  # backward twins sit with their forward nodes
    assert tr.placement.evaluation.valid and tr.placement.evaluation.contiguous


def test_pipeline_gives_the_planned_stages_with_the_planned_parameters(gpt_plan):
    from torch.distributed.pipelining import pipeline

    model, tp = gpt_plan
    pipe = pipeline(model, mb_args=(tokens(BATCH // 2),), split_spec=split_spec(tp))
    assert pipe.num_stages == tp.num_stages
    # every stage holds the parameters of the operators we planned on it
    planned: list[set] = [set() for _ in range(tp.num_stages)]
    g_ops = tp.placement.graph.names[:len(tp.modules)]
    ep = torch.export.export(model, (tokens(BATCH),))
    graph, _ = operator_graph(ep)
    assert tuple(o.name for o in graph.ops) == g_ops
    for o, s in zip(graph.ops, tp.stage_of_op):
        planned[s].update(t.name for t, tr in zip(o.params, o.trainable) if tr)
    for k in range(tp.num_stages):
        got = {name for name, _ in pipe.get_stage_module(k).named_parameters()}
        assert got == planned[k], k


def test_pipelined_run_on_cpu_matches_the_unsplit_module(gpt_plan):
    """The ranks are forked where the platform can (torch is imported here already): spawned, each of
    them imported torch and its pipelining package again and ran the interpreter's exit, 15-20 s of the
    test's 20 s on 2 cores, where the run itself takes 2 s. The split spec goes through pickle as it
    would to spawned ranks."""
    import pickle

    import torch.multiprocessing as mp

    _, tp = gpt_plan
    world = tp.num_stages
    spec = pickle.loads(pickle.dumps(split_spec(tp)))
    assert spec == split_spec(tp)
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.pt")
        ctx = mp.start_processes(pipelined_rank, args=(world, spec, BATCH, 2, os.path.join(d, "init"), out,
                                                       GPT_KW), nprocs=world, join=False, start_method=method)
        deadline = time.monotonic() + 300  # a hung collective must not hang the suite
        while not ctx.join(timeout=2):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                pytest.fail("the pipelined run did not finish in 300 s")
        res = torch.load(out)
    assert res["stages"] == world
    assert res["shape"] == (BATCH, 16, 128)
    assert res["max_abs_diff"] <= 1e-5 * max(1.0, res["max_abs"])


def test_layer_partition_of_a_sequential_model():
    model = mlp_sequential()
    x = torch.randn(32, 64)
    tp = place_module(model, (x,), devices="t4:3", split_points="children")
    part = layer_partition(tp)
    assert part["layers"] == [str(i) for i in range(len(model))]
    assert sorted(i for s in part["stages"] for i in s) == list(range(len(model)))
    assert [len(s) for s in part["stages"]] == list(np.diff(part["parts"]))
    assert len(part["stages"]) == tp.num_stages and all(part["stages"])
    assert set(split_spec(tp)) == {part["layers"][p] for p in part["parts"][1:-1]}
    # the stages are the layer ranges: every operator of layer i is on the stage holding i
    stage_of_layer = {str(i): s for s, idx in enumerate(part["stages"]) for i in idx}
    for m, s in zip(tp.modules, tp.stage_of_op):
        assert stage_of_layer[m.split(".")[0]] == s
    with pytest.raises(InputError, match="split_points='children'"):
        layer_partition(place_module(gpt(**GPT_KW), (tokens(2),), devices="t4:3"))


def test_independent_branches_give_stages_in_execution_order():
    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = (torch.nn.Linear(256, 256) for _ in range(3))

        def forward(self, x):
            return self.a(x), self.b(x), self.c(x)

    tp = place_module(Branches().eval(), (torch.randn(64, 256),), devices="t4:2")
    p = tp.placement
    assert list(tp.stage_of_op) == sorted(tp.stage_of_op)
    assert p.evaluation.valid and p.evaluation.contiguous
    assert p.max_load == evaluate(p.graph, p.cluster, p.assignment).max_load
    assert (p.status.value == "feasible") == bool(tp.notes)
    assert len(split_spec(tp)) == tp.num_stages - 1


def test_stages_follow_the_execution_order():
    seg = np.array([0, 0, 1, 1, 2, 2, 3])
    a, moved = in_execution_order([2, 2, 0, 0, 1, 1, 1], seg)  # runs already: relabelled, not moved
    assert not moved and a.tolist() == [2, 2, 0, 0, 1, 1, 1]
    a, moved = in_execution_order([0, 0, 1, 1, 0, 0, 2], seg)  # device 0 comes back: moved to stage 1
    assert moved and a.tolist() == [0, 0, 1, 1, 1, 1, 2]
    a, moved = in_execution_order([1, 1, 0, 0, 1, 1, 0], seg)
    assert moved and a.tolist() == [1, 1, 0, 0, 0, 0, 0]


def test_bad_inputs_raise_input_errors():
    with pytest.raises(InputError, match="torch.nn.Module"):
        place_module(object(), ())
    model = mlp_sequential()
    with pytest.raises(InputError, match="name no submodule"):
        place_module(model, (torch.randn(2, 64),), split_points=["nope"])
    with pytest.raises(InputError, match="profile"):
        place_module(model, (torch.randn(2, 64),), costs="profile")
    with pytest.raises(InputError, match="torch.export failed"):
        place_module(model, (torch.randn(2, 3),))


def test_a_failed_export_is_raised_not_also_logged():
    """A bad example shape: torch's fake-tensor logger printed a 30-line traceback on stderr (its own
    handler) before the exporter raised; a library call says it once, as an InputError, and logs
    nothing. Records of the same logger after the call still pass."""
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    lg = logging.getLogger("torch._subclasses.fake_tensor")
    keep = Keep()
    lg.addHandler(keep)
    try:
        with pytest.raises(InputError, match="same reduction dim"):
            place_module(mlp_sequential(), (torch.randn(2, 3),))
        assert seen == []
        lg.error("after the export")
    finally:
        lg.removeHandler(keep)
    assert seen == ["after the export"]  # the filter went with the call


# --------------------------------------------------------------------------- stage plans (replicas)
def test_replicas_serve_a_model_that_fits_one_device():
    """Inference on two T4s: no plan beats the one-device time shared by both devices (both busy all
    the time), and one stage of two replicas reaches it; one device per stage cannot (it pays the cut)."""
    model = mlp_sequential()
    x = torch.randn(32, 64)
    alone = place_module(model, (x,), devices="t4:1").time_per_run
    tp = place_module(model, (x,), devices="t4:2", max_replicas=None)
    assert tp.placement.model == "stages" and tp.placement.status.value == "optimal"
    assert tp.time_per_run == pytest.approx(alone / 2, rel=1e-12)
    assert tp.stage_replicas == (2,) and tp.stage_devices == ("t4:0-1",) and split_spec(tp) == {}
    one = place_module(model, (x,), devices="t4:2")
    assert one.stage_replicas == () and one.time_per_run > tp.time_per_run


def test_stage_plans_are_cut_at_module_boundaries_in_execution_order(gpt_plan):
    from torch.distributed.pipelining import pipeline

    _, one = gpt_plan
    model = gpt(**GPT_KW)  # a fresh one: pipeline() has traced the fixture's already
    x = tokens(BATCH)
    tp = place_module(model, (x,), devices="t4:3", max_replicas=None)
    p = tp.placement
    assert p.status.value == "optimal" and tp.time_per_run <= one.time_per_run * (1 + 1e-12)
    assert tp.unsnapped.max_load <= tp.time_per_run * (1 + 1e-12)  # a free cut is no worse
    assert list(tp.stage_of_op) == sorted(tp.stage_of_op) and len(tp.stage_replicas) == tp.num_stages
    assert sum(tp.stage_replicas) <= 3
    for fqn in tp.stage_starts:
        assert fqn in tp.split_points.values()
    # every stage's operators are the plan's stage nodes, in pipeline order
    for k, s in enumerate(p.stages):
        ops = {i for i, st in enumerate(tp.stage_of_op) if st == k}
        assert {int(p.node_of[i]) for i in ops} == set(s.stage.nodes)
    pipe = pipeline(model, mb_args=(x[:2],), split_spec=split_spec(tp))
    assert pipe.num_stages == tp.num_stages


def test_stage_plan_options_are_checked():
    model = mlp_sequential()
    with pytest.raises(InputError, match="max_replicas must be a positive integer"):
        place_module(model, (torch.randn(2, 64),), max_replicas=0)
    tp = place_module(model, (torch.randn(8, 64),), devices="t4:2", schedule="gpipe", microbatches=4,
                      training=True)
    assert tp.placement.problem.schedule == "gpipe" and tp.placement.problem.microbatches == 4


def test_a_torch_placement_prints_as_one_line_with_its_status(gpt_plan):
    """print(place_module(...)) dumped every graph array; TorchPlacement had no status."""
    _, tp = gpt_plan
    assert tp.status is tp.placement.status
    text = repr(tp)
    assert "\n" not in text and len(text) < 400, text
    assert f"status={tp.status.value!r}" in text and f"stages={tp.num_stages}" in text


def test_the_free_cuts_value_is_named_by_the_objective():
    """With the latency objective the message said "the free cut's max-load is X", X being the free
    plan's max-load, not the latency its solve minimised. It now names the objective and gives that
    objective's value of the free cut."""
    from solvers.base import SolveOptions

    model = mlp_sequential()
    x = torch.randn(8, 64)
    for objective in ("latency", "max-load"):
        tp = place_module(model, (x,), devices="t4:2,cpu:1", solver="ip",
                          options=SolveOptions(objective=objective))
        free = tp.unsnapped.solution.objective
        assert f"the free cut's {objective} is {free:.6g}" in tp.placement.solution.message, objective
    assert tp.unsnapped.solution.objective == pytest.approx(tp.unsnapped.max_load)


@pytest.mark.parametrize("max_replicas", [1, None])
def test_a_ctrl_c_in_the_free_solve_starts_no_second_solve(max_replicas):
    """A Ctrl-C the free cut's solve took (it returns its plan, said interrupted) was followed by the
    module-boundary solve, run to the end and reported optimal, not interrupted. Now that solve does not
    start: no plan cut at module boundaries, stopped, said interrupted."""
    import os
    import signal

    from solvers.base import SolveOptions, Status

    calls = []

    def progress(fraction):
        calls.append(fraction)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    tp = place_module(mlp_sequential(), (torch.randn(32, 64),), devices="t4:3", max_replicas=max_replicas,
                      options=SolveOptions(progress=progress))
    assert tp.unsnapped.solution.interrupted and tp.placement.solution.interrupted
    assert tp.placement.status is Status.STOPPED and tp.num_stages == 0
    assert "was not sought" in tp.placement.solution.message
