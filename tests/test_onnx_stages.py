"""Stage plans on ONNX models (placement/onnx_export.split_stages, placement/cli/split_run.py): split
writes one sub-model per stage with its replicas in the manifest; run starts d worker processes per
stage and deals samples round robin, outputs equal to the whole model's."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.errors import InputError  # noqa: E402
from graphs.onnx_loader import load_onnx  # noqa: E402
from placement.cli import main  # noqa: E402
from placement.onnx_export import (  # noqa: E402  # noqa: E402
    device_result,
    generated_weights,
    materialize,
    random_feeds,
    session,
    split_stages,
)
from placement.pipeline_run import run_pipeline  # noqa: E402
from tests.test_split import zoo  # noqa: E402


def split_stage_plan(model, data):
    """The sub-models of a stage plan and their manifest."""
    split = split_stages(model, data)
    return split, split.manifest()


def plan(path: str, ds, *, t=1) -> dict:
    """Stages of equal operator count (front-end names, topological order) with degrees ``ds``."""
    names = list(load_onnx(path).names)
    b = np.linspace(0, len(names), len(ds) + 1).round().astype(int)
    return {"format": "placement-replicated", "version": 1, "workload": path, "stages": [
        {"nodes": names[b[k]:b[k + 1]], "dataParallelDegree": d, "tensorParallelDegree": t, "kind": "cpu"}
        for k, d in enumerate(ds)]}


def test_split_lists_the_replicas():
    path = zoo("squeezenet")
    model = onnx.load(path)
    split, manifest = split_stage_plan(model, plan(path, [2, 1, 3]))
    assert len(split.submodels) == 3
    subs = manifest["submodels"]
    assert [s["replicas"] for s in subs] == [2, 1, 3]
    # each replica's devices: one each at t = 1
    assert [s["replica_devices"] for s in subs] == [[["cpu:0"], ["cpu:1"]], [["cpu:2"]],
                                                    [["cpu:3"], ["cpu:4"], ["cpu:5"]]]
    assert [s["stage"] for s in subs] == [0, 1, 2]
    assert device_result(plan(path, [2, 1, 3]))["devices"][2]["name"] == "cpu:3-5"  # its replicas


@pytest.mark.parametrize("bad,message", [
    ({"stages": []}, "non-empty"),
    ({"stages": [{"nodes": ["x"], "dataParallelDegree": 0}]}, "positive integer"),
])
def test_bad_plans_raise(bad, message):
    with pytest.raises(InputError, match=message):
        device_result(bad)


def test_a_tensor_parallel_stage_the_rule_does_not_split_runs_whole_on_every_rank():
    """SqueezeNet has no layer with two weighted matrix products, so the split rule (the cost model's)
    divides none of its operators: a t = 2 stage's ranks each run the whole stage, with no collective,
    and the split says so (split and run of transformers: tests/test_tensor_parallel.py)."""
    from placement.onnx_export import verify_split

    path = zoo("squeezenet")
    model = onnx.load(path)
    split, manifest = split_stage_plan(model, plan(path, [1, 1], t=2))
    tps = [s["tensor_parallel"] for s in manifest["submodels"]]
    assert [tp["degree"] for tp in tps] == [2, 2] and all(not tp["collectives"] for tp in tps)
    assert [tp["split_operators"] for tp in tps] == [0, 0]
    assert sum("none of its operators" in n for n in split.notes) == 2
    # one replica of 2 ranks per stage: both ranks' devices listed, once
    assert [s["replica_devices"] for s in manifest["submodels"]] == [[["cpu:0", "cpu:1"]],
                                                                     [["cpu:2", "cpu:3"]]]
    assert all("rank_devices" not in tp for tp in tps)
    rep = verify_split(model, [s.model for s in split.submodels], manifest)
    assert rep.ok and rep.worst <= 1e-4


def test_run_deals_samples_round_robin_and_matches_the_model():
    path = zoo("squeezenet")
    model = onnx.load(path)
    split, manifest = split_stage_plan(model, plan(path, [1, 2]))
    weights = generated_weights(model)
    whole = materialize(model, weights)
    sess = session(whole)
    feeds = [random_feeds(whole, sess, seed=i) for i in range(3)]
    names = [o.name for o in sess.get_outputs()]
    reference = [dict(zip(names, sess.run(names, f))) for f in feeds]
    parts = [materialize(s.model, weights) for s in split.submodels]
    run = run_pipeline(parts, manifest, feeds, samples=7, reference=reference, timeout=240)
    assert run.replicas == (1, 2) and run.workers == 3
    assert run.taken == ((7,), (4, 3))  # sample i to replica i mod d (after 2 warm-up samples)
    assert all(b > 0 for bs in run.busy_s for b in bs)
    assert max(run.max_abs_diff.values()) <= 1e-4


def test_cli_split_and_run(tmp_path, capsys):
    path = zoo("squeezenet")
    res = tmp_path / "r.json"
    res.write_text(json.dumps(plan(path, [2, 1])))
    out = tmp_path / "stages"
    assert main(["split", path, str(res), "--out-dir", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "2 replica(s) on cpu:0, cpu:1" in text and "verify: OK" in text
    # the one verify report of both plan forms: each output's difference and the cut tensors'
    assert "verify: output " in text and " cut tensor(s): max |difference| " in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["replicas"] for s in manifest["submodels"]] == [2, 1] and manifest["replicated"]
    assert main(["run", str(res), path, "--samples", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["replicas"] == [2, 1] and doc["replica_samples"] == [[2, 2], [4]]
    assert max(doc["max_abs_diff"].values()) <= 1e-4


@pytest.mark.parametrize("training", [False, True])
def test_placed_layer_plans_evaluate_show_split_and_run(tmp_path, capsys, training):
    """A result of ``placement place`` at layer granularity (nodes are layer keys; each stage lists its
    operators): an inference model with ``--max-replicas 2`` or a training one by default; evaluate,
    show, split and run all accept it."""
    from graphs.transformer import gpt

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), path)
    res = str(tmp_path / "r.json")
    args = ["place", path, "--devices", "cpu:4", "-o", res, "--json", "--granularity", "layer"]
    assert main(args + (["--training", "--batch-size", "2"] if training else ["--max-replicas", "2"])) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problem"]["granularity"] == "layer"
    assert "layer0" in {n for s in data["stages"] for n in s["nodes"]}
    assert main(["evaluate", path, res, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objective"] == pytest.approx(data["objective"], rel=1e-12)
    assert main(["show", res, "--no-draw"]) == 0
    assert "(equal)" in capsys.readouterr().out
    out = tmp_path / "stages"
    assert main(["split", path, res, "--out-dir", str(out), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["replicas"] for s in manifest["submodels"]] == [s["dataParallelDegree"] for s in data["stages"]]
    assert main(["run", path, res, "--samples", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["replicas"] == [s["dataParallelDegree"] for s in data["stages"]]
    assert max(doc["max_abs_diff"].values()) <= 1e-4


def _answer(value, status="optimal", plan=True, time=0.0):
    from solvers.base import Status, stage_solution

    return stage_solution("auto", [] if plan else None, None, value, Status(status), time)


def _layers(problem, finer, node_of=None):
    """A stage workload at layer granularity whose operator-granularity problem ``finer`` builds (the
    problems are stand-ins: ``solve_one`` answers them)."""
    from placement.stages import StageWorkload

    return StageWorkload(problem, settings={"granularity": "layer"}, node_of=node_of, finer=finer)


@pytest.mark.parametrize("layer,op,kept,status", [
    ((2.0,), (1.5,), "op", "optimal"),  # the operators cut where a layer node cannot
    ((2.0,), (2.0,), "layer", "optimal"),  # as fast: the layer plan stays
    ((2.0,), (2.0 * (1 - 1e-14),), "layer", "optimal"),  # faster by round-off only: as fast
    # stopped early above the layer plan: optimal over layer nodes proves nothing over the operators
    ((2.0,), (2.5, "feasible"), "layer", "feasible"),
    # no layer plan proves nothing of the operators'
    ((float("inf"), "infeasible", False), (float("inf"), "stopped", False), "op", "stopped"),
    ((float("inf"), "infeasible", False), (float("inf"), "infeasible", False), "layer", "infeasible"),
    ((float("inf"), "infeasible", False), (3.0, "feasible"), "op", "feasible"),
])
def test_the_operator_refinement_keeps_the_better_plan_and_an_honest_status(layer, op, kept, status):
    from placement.stages import solve_refined

    answers = {"L": _answer(*layer), "O": _answer(*op)}
    seen = []

    def solve_one(problem, time_limit):
        seen.append((problem, time_limit))
        return answers[problem]

    w, sol = solve_refined(_layers("L", lambda: ("O", "cls-O"), "cls-L"), solve_one, 60.0)
    assert w.settings["granularity"] == ("op" if kept == "op" else "layer") and w.problem == kept[0].upper()
    assert w.node_of == f"cls-{w.problem}"
    assert sol.status.value == status and "granularity" in sol.message
    assert seen[0] == ("L", 60.0) and seen[1][0] == "O" and seen[1][1] <= 60.0


def test_the_refinement_keeps_to_the_time_limit_and_survives_ctrl_c():
    import time

    from placement.stages import solve_refined

    def slow(problem, time_limit):
        time.sleep(0.3)
        return _answer(2.0, time=0.3)

    w, sol = solve_refined(_layers("L", lambda: ("O", None)), slow, 0.6)
    assert w.settings["granularity"] == "layer" and "not tried: no time left" in sol.message

    def interrupted(problem, time_limit):
        if problem == "O":
            raise KeyboardInterrupt
        return _answer(2.0)

    w, sol = solve_refined(_layers("L", lambda: ("O", None)), interrupted, None)
    assert w.settings["granularity"] == "layer" and sol.status.value == "feasible"
    assert "interrupted" in sol.message and "optimal over layer nodes" in sol.message
    # without a layer plan there is nothing to give: the Ctrl-C goes on
    with pytest.raises(KeyboardInterrupt):
        solve_refined(_layers("L", lambda: ("O", None)),
                      lambda p, t: _answer(float("inf"), "stopped", False) if p == "L" else interrupted(p, t),
                      None)


def test_kernel_loading_before_the_clock_does_not_use_up_the_refinements_time():
    """The registry loads a solve's kernels before its clock starts (about 0.5 s the first time in a
    process): that wall time is not the layer solve's, so at a 1 s limit the operators still get the
    time the layer solve left (it was taken for solve time, and the refinement skipped)."""
    import time

    from placement.stages import solve_refined

    seen = []

    def loads_then_solves(problem, time_limit):
        seen.append((problem, time_limit))
        if problem == "L":
            time.sleep(0.6)  # loading kernels: off the solve's own clock
            return _answer(2.0, time=0.05)
        return _answer(1.5, time=0.2)

    w, sol = solve_refined(_layers("L", lambda: ("O", None)), loads_then_solves, 1.0)
    assert [p for p, _ in seen] == ["L", "O"] and seen[1][1] == pytest.approx(0.95)
    assert w.settings["granularity"] == "op" and sol.objective == 1.5
    assert sol.time == pytest.approx(0.25)  # the two solves' own clocks


def test_one_refinement_rule_for_plans_and_serving():
    """solve_refined and serving's best_refined share one rule (placement.stages.Refinement): the
    budget from the layer solve's own time, no refinement with under REFINE_LEAST_S left, and one
    wording, round-off (SAME_REL) either way being as fast."""
    from placement.stages import REFINE_LEAST_S, REFINE_MIN_S, Refinement

    assert Refinement(0.05, None).budget == REFINE_MIN_S and Refinement(0.05, 1.0).budget == 0.95
    assert Refinement(0.3, 0.6).tried is False and Refinement(0.5, 0.5 + REFINE_LEAST_S).tried
    assert Refinement.verdict(2.0, 1.5) == (True, "25% faster than the layer plan")
    assert Refinement.verdict(None, 1.5) == (True, "no layer plan")
    for fine in (2.0, 2.0 * (1 - 1e-14), 2.0 * (1 + 1e-14)):
        assert Refinement.verdict(2.0, fine) == (False, "as fast")
    assert Refinement.verdict(2.0, 2.5) == (False, "no faster")
    assert Refinement.verdict(2.0, None) == (False, "no plan")

def test_a_refinement_that_fails_keeps_the_layer_plan():
    from graphs.errors import ProblemTooLargeError
    from placement.stages import solve_refined

    def finer():
        raise ProblemTooLargeError("too many operators")

    w, sol = solve_refined(_layers("L", finer), lambda p, t: _answer(2.0), None)
    assert w.settings["granularity"] == "layer" and sol.status.value == "feasible"
    assert "too many operators" in sol.message and sol.bound is None
    with pytest.raises(ProblemTooLargeError):  # nothing else to give
        solve_refined(_layers("L", finer), lambda p, t: _answer(float("inf"), "stopped", False), None)


@pytest.mark.parametrize("max_replicas", ["2", "1"])
def test_split_and_run_read_the_result_and_the_model_once(tmp_path, capsys, monkeypatch, max_replicas):
    """Each command reads its result file and its model once (a model with external weights is costly
    to read twice), for a stage plan and a one-device-per-stage plan alike."""
    import graphs.jsonio
    import graphs.onnx_loader
    import placement.inputs
    from graphs.transformer import gpt

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(1, hidden=16, heads=2, seq_len=4, vocab=20, weights="random"), path)
    res = str(tmp_path / "r.json")
    assert main(["place", path, "--devices", "cpu:3", "-o", res, "--max-replicas", max_replicas]) == 0
    capsys.readouterr()
    reads = []
    json_read, model_read = graphs.jsonio.read_json, graphs.onnx_loader.read_model

    def counted_json(p, *a, **k):
        reads.append(("json", os.path.abspath(p)))
        return json_read(p, *a, **k)

    def counted_model(p, *a, **k):
        reads.append(("model", os.path.abspath(p)))
        return model_read(p, *a, **k)

    monkeypatch.setattr(graphs.jsonio, "read_json", counted_json)
    monkeypatch.setattr(placement.inputs, "read_json", counted_json)
    monkeypatch.setattr(graphs.onnx_loader, "read_model", counted_model)
    for cmd in (["split", path, res, "--out-dir", str(tmp_path / "parts")],
                ["run", path, res, "--samples", "2", "--json"]):
        reads.clear()
        assert main(cmd) == 0, cmd
        capsys.readouterr()
        assert reads.count(("json", os.path.abspath(res))) == 1, (cmd[0], reads)
        assert reads.count(("model", os.path.abspath(path))) == 1, (cmd[0], reads)


def test_a_ctrl_c_the_layer_solve_took_ends_the_refinement():
    """The layer solve takes a Ctrl-C and returns what it has ("interrupted"): the operator solve still
    ran (the Ctrl-C lost). Now its plan is the answer, said so; without a plan the Ctrl-C goes on."""
    import dataclasses

    from placement.stages import solve_refined

    seen = []

    def solve_one(problem, time_limit):
        seen.append(problem)
        sol = _answer(2.0, "feasible")
        return dataclasses.replace(sol, message="interrupted (Ctrl-C): the best plan so far")

    w, sol = solve_refined(_layers("L", lambda: ("O", None)), solve_one, None)
    assert seen == ["L"] and w.settings["granularity"] == "layer"
    assert sol.status.value == "feasible" and "operator granularity not tried: interrupted" in sol.message
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        solve_refined(_layers("L", lambda: ("O", None)), lambda p, t: seen.append(p) or dataclasses.replace(
            _answer(float("inf"), "stopped", False), message="interrupted (Ctrl-C) before any plan"), None)
    assert seen == ["L"]


def test_a_stage_result_without_its_device_spec_is_refused_by_name(tmp_path, capsys):
    """A version-2 stage result keeps its settings under ``problem``; one without ``problem.devices``
    (hand-edited) took the top level's per-device rows as the device spec: evaluate and show ended in an
    AttributeError traceback. Now both say the result does not record its devices (exit 2)."""
    from graphs.transformer import gpt

    path = str(tmp_path / "gpt.onnx")
    onnx.save(gpt(1, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), path)
    res = tmp_path / "r.json"
    assert main(["place", path, "--devices", "cpu:2", "-o", str(res), "--time-limit", "10"]) == 0
    data = json.loads(res.read_text())
    assert isinstance(data["devices"], list) and data["problem"]["devices"]
    del data["problem"]["devices"]
    res.write_text(json.dumps(data))
    capsys.readouterr()
    for cmd in (["evaluate", path, str(res)], ["show", str(res), "--workload", path, "--no-draw"]):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "does not record its 'devices'" in err and "Traceback" not in err, err


def test_a_layer_optimum_is_optimal_only_when_the_operators_prove_it():
    """A new-user trial: a Ctrl-C in (or a budget too short for) the operator solve left the layer plan
    printed "optimal, bound = its value, gap 0%" while a plan 5% faster existed over the operators. The
    layer DP's optimum bounds nothing there. Now: optimal only when the operator solve proves the layer
    plan as fast; otherwise feasible, the bound the operators' (never above the value), else none."""
    from placement.stages import solve_refined
    from solvers.base import Status, stage_solution

    def answer(value, status, bound=None):
        return stage_solution("auto", [], None, value, Status(status), 1.0, bound=bound)

    layer = answer(2.0, "optimal", bound=2.0)
    cases = [  # the operators' answer -> (status, bound) of the layer plan kept
        (answer(2.0, "optimal", bound=2.0), ("optimal", 2.0)),
        (answer(2.4, "feasible", bound=1.6), ("feasible", 1.6)),
        (answer(2.4, "feasible", bound=2.3), ("feasible", 2.0)),  # a bound above the value is not one
        (answer(float("inf"), "stopped"), ("feasible", None)),
    ]
    for fine, (status, bound) in cases:
        answers = {"L": layer, "O": fine}
        w, sol = solve_refined(_layers("L", lambda: ("O", None)), lambda p, t, a=answers: a[p], 60.0)
        assert w.problem == "L" and sol.status.value == status, (fine.status, sol.message)
        assert sol.bound == bound and (bound is None or sol.bound <= sol.objective)
        assert ("optimal over layer nodes" in sol.message) == (status == "feasible")
    # infeasible over layer nodes, the operators not tried: not proven infeasible
    w, sol = solve_refined(_layers("L", lambda: ("O", None)),
                           lambda p, t: answer(float("inf"), "infeasible") if p == "L" else None, 0.2)
    assert sol.status.value == "stopped" and "no plan over layer nodes" in sol.message


def test_an_operator_solve_stopped_by_its_own_budget_says_so():
    """Without --time-limit the status said "(time limit reached)": the limit was the refinement's own
    budget, which the status now names."""
    from placement.report import status_parts
    from placement.stages import solve_refined
    from solvers.base import Status, stage_solution

    answers = {"L": stage_solution("auto", [], None, 2.0, Status.OPTIMAL, 1.0, bound=2.0),
               "O": stage_solution("auto", [], None, 1.5, Status.FEASIBLE, 10.0, "time limit reached",
                                   bound=1.0)}
    w, sol = solve_refined(_layers("L", lambda: ("O", None)), lambda p, t: answers[p], None)
    assert w.problem == "O"
    assert status_parts(sol)[0] == "status feasible (the operator refinement's 10 s reached)"
    # at the user's limit it is the time limit
    w, sol = solve_refined(_layers("L", lambda: ("O", None)), lambda p, t: answers[p], 11.0)
    assert status_parts(sol)[0] == "status feasible (time limit reached)"
