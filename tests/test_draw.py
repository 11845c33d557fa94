"""Pictures: the Gantt chart (matplotlib), the DOT drawing, and `placement show`."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.training import derive_training
from placement import draw
from placement.cli import main
from placement.simulate import simulate


def small_training():
    g = OpGraph.from_nodes([Node(f"n{i}", {"gpu": 1.0 + i}, comm=0.2) for i in range(4)],
                           [(f"n{i}", f"n{i + 1}") for i in range(3)])
    g = derive_training(g)
    cl = Cluster((DeviceKind("gpu", 2),))
    a = np.array([0, 0, 1, 1] * 2)
    return g, cl, a


@pytest.mark.parametrize("suffix", ["png", "svg"])
@pytest.mark.parametrize("overlap", [False, True])
def test_gantt_chart_writes_the_picture(tmp_path, suffix, overlap):
    pytest.importorskip("matplotlib")
    g, cl, a = small_training()
    sim = simulate(g, cl, a, schedule="gpipe", microbatches=4, overlap=overlap)
    path = draw.gantt_chart(sim, tmp_path / f"g.{suffix}", unit="ms")
    data = open(path, "rb").read()
    assert data[:4] == b"\x89PNG" if suffix == "png" else b"<svg" in data[:2000]


def test_gantt_without_matplotlib_says_how_to_install(monkeypatch):
    def missing():
        raise draw.PlotsUnavailable("drawing the Gantt chart needs matplotlib, which is not installed: "
                                    "pip install 'placement[plots]'")

    monkeypatch.setattr(draw, "_matplotlib_figure", missing)
    g, cl, a = small_training()
    with pytest.raises(draw.PlotsUnavailable, match=r"placement\[plots\]"):
        draw.gantt_chart(simulate(g, cl, a), "x.png")


def test_dot_groups_nodes_by_device_and_colours_cut_edges():
    g, cl, a = small_training()
    text = draw.graph_dot(g, cl, a, stage_order=(0, 1), title='a "quoted" title')
    assert text.startswith("digraph placement {") and text.rstrip().endswith("}")
    assert "subgraph cluster_0" in text and "subgraph cluster_1" in text
    assert 'label="gpu:0, stage 0 (4 nodes)"' in text
    for u in range(g.num_nodes):
        assert f"  n{u} [label=" in text
    cut = [ln for ln in text.splitlines() if "->" in ln and "penwidth=2" in ln]
    assert len(cut) == 2  # n1 -> n2 forward and its gradient n2_grad -> n1_grad
    assert '\\"quoted\\"' in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_dot_renders(tmp_path):
    g, cl, a = small_training()
    dot = draw.write_text(tmp_path / "g.dot", draw.graph_dot(g, cl, a))
    assert draw.render_dot(dot, tmp_path / "g.svg")
    assert b"<svg" in (tmp_path / "g.svg").read_bytes()[:3000]


def test_render_dot_without_graphviz(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert draw.render_dot(tmp_path / "g.dot", tmp_path / "g.svg") is False


def _place_example(tmp_path, *extra):
    os.chdir(tmp_path)
    assert main(["example", "ex.json", "--layers", "3", "--accelerators", "2", *extra]) == 0
    assert main(["place", "ex.json", "--out", "r.json"]) == 0


def test_show_on_a_reference_result(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _place_example(tmp_path, "--training")
    capsys.readouterr()
    assert main(["show", "r.json", "--microbatches", "6", "--out-dir", "pics"]) == 0
    out = capsys.readouterr().out
    assert "1F1B, 6 micro-batches" in out
    assert "(equal)" in out  # steady state = max-load
    assert "with communication overlapped" in out
    assert (tmp_path / "pics" / "r.graph.dot").exists()
    try:
        import matplotlib  # noqa: F401

        assert (tmp_path / "pics" / "r.gantt.png").exists()
    except ImportError:
        pass
    assert main(["show", "r.json", "--schedule", "gpipe", "--json", "--no-draw"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["simulation"]["schedule"] == "gpipe" and doc["overlapped"]["overlap"] is True
    assert main(["show", "r.json", "--no-draw", "--overlap"]) == 2  # it chose the picture: none is drawn
    assert "--overlap sets the pictures" in capsys.readouterr().err


def test_show_finds_the_workload_beside_the_result_and_reports_mismatches(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _place_example(tmp_path)
    os.mkdir("elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["show", "../r.json", "--no-draw"]) == 0  # 'ex.json' is found beside the result
    capsys.readouterr()
    data = json.loads((tmp_path / "r.json").read_text())
    old = dict(data, source=data["workload"])  # a file from before the field was called workload
    del old["workload"]
    (tmp_path / "r4.json").write_text(json.dumps(old))
    assert main(["show", "../r4.json", "--no-draw"]) == 0
    capsys.readouterr()
    data["workload"] = "gone.json"
    (tmp_path / "r2.json").write_text(json.dumps(data))
    assert main(["show", "../r2.json", "--no-draw"]) == 2
    assert "--workload" in capsys.readouterr().err
    data["workload"] = "ex.json"
    data["devices"][0]["nodes"].append("no-such-node")
    (tmp_path / "r3.json").write_text(json.dumps(data))
    assert main(["show", "../r3.json", "--no-draw"]) == 2
    assert "no-such-node" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["show", "../bad.json"]) == 2
    assert "not a placement result" in capsys.readouterr().err


def _stage_result(tmp_path, *extra) -> str:
    import onnx

    from graphs.transformer import transformer_model

    path = str(tmp_path / "dec.onnx")
    onnx.save(transformer_model(layers=2, hidden=64, decoder=True), path)
    res = str(tmp_path / "r.json")
    assert main(["place", path, "--devices", "t4:3", "--out", res, *extra]) == 0
    return res


def test_the_stage_simulation_lists_every_replica_task_in_a_schedule_that_holds(tmp_path, capsys):
    """Each replica's tasks run one at a time, a forward after the same micro-batch's forward on the
    stages feeding it, a backward after its forward; a stage's all-reduce starts on all its replicas
    at once; busy time from the tasks equals the report's."""
    from placement.results import read_stage_result
    from placement.simulate import simulate_plan, stage_links
    from placement.stages import plan_from_dict, problem_for_result

    res = _stage_result(tmp_path, "--training")
    data = json.loads(open(res).read())
    workload = os.path.join(os.path.dirname(res), data["workload"])  # recorded relative to the result
    problem = problem_for_result(read_stage_result(data), workload, source=res)
    plan = plan_from_dict(problem, data)
    sim = simulate_plan(problem, plan)
    by_replica = {}
    for t in sim.tasks:
        by_replica.setdefault((t.stage, t.replica), []).append(t)
    assert set(by_replica) == {(i, r) for i, st in enumerate(plan) for r in range(st.d)}
    done = {(t.stage, t.kind, t.index): t.start + t.duration for t in sim.tasks}
    for (i, r), tasks in by_replica.items():
        for a, b in zip(tasks, tasks[1:]):
            assert b.start >= a.start + a.duration - 1e-12
        assert sum(t.duration for t in tasks) / sim.batches / sim.microbatches == pytest.approx(
            next(x.busy_per_sample for x in sim.replicas if (x.stage, x.replica) == (i, r)), rel=1e-9)
    feeds = stage_links(problem, plan)
    for t in sim.tasks:
        if t.kind == "F":
            assert all(t.start >= done[(a, "F", t.index)] - 1e-12 for a, b in feeds if b == t.stage)
        elif t.kind == "B":
            assert t.start >= done[(t.stage, "F", t.index)] - 1e-12
    for i in range(len(plan)):
        starts = {(t.index, t.start) for t in sim.tasks if t.stage == i and t.kind == "R"}
        assert len(starts) == sim.batches  # one start per batch, shared by the replicas


def test_show_draws_a_stage_plan(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    res = _stage_result(tmp_path)
    capsys.readouterr()
    assert main(["show", res, "--out-dir", "pics"]) == 0
    assert "wrote " in capsys.readouterr().out
    assert open(tmp_path / "pics" / "r.gantt.png", "rb").read()[:4] == b"\x89PNG"
    capsys.readouterr()
    # the picture options without pictures are refused, not ignored; --overlap has nothing to overlap here
    for extra in (["--out-dir", "nope"], ["--format", "svg"], ["--overlap"]):
        assert main(["show", res, "--no-draw", *extra]) == 2 and not (tmp_path / "nope").exists()
        assert f"{extra[0]} sets the pictures" in capsys.readouterr().err
    assert main(["show", res, "--overlap"]) == 2
    assert "no separate transfer to overlap" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["show", res, "--out-dir", "afile/pics"]) == 2
    assert "--out-dir" in capsys.readouterr().err


def test_show_writes_a_stage_plan_graph_boxed_by_stage(tmp_path, capsys, monkeypatch):
    """A stage plan's graph, as a one-device-per-stage plan's: one box per stage, named with its kind,
    replicas and devices, holding exactly the stage's nodes from the result file."""
    import re

    monkeypatch.chdir(tmp_path)
    res = _stage_result(tmp_path, "--training")
    data = json.load(open(res))
    capsys.readouterr()
    assert main(["show", res, "--out-dir", "pics"]) == 0
    assert "r.graph.dot" in capsys.readouterr().out
    dot = (tmp_path / "pics" / "r.graph.dot").read_text()
    boxes = dot.split("subgraph cluster_")[1:]
    assert len(boxes) == len(data["stages"])
    seen = []
    for i, (box, st) in enumerate(zip(boxes, data["stages"])):
        label = re.search(r'label="([^"]*)"', box).group(1)
        assert label.startswith(f"stage {i}: {st['kind']} ×{st['dataParallelDegree']}")
        assert all(name in label for name in st["devices"]) and f"({len(st['nodes'])} nodes)" in label
        nodes = re.findall(r'^    n\d+ \[label=.*tooltip="([^"]*)"', box.split("  }")[0], re.M)
        assert sorted(nodes) == sorted(map(str, st["nodes"]))
        seen += nodes
    assert len(seen) == len(set(seen))  # every node in one box


def test_an_inference_stage_plan_streams(tmp_path, capsys):
    """Forwards only, batch after batch, nothing to flush: every replica busy at the plan's time per
    sample in the steady state, so the simulated period is the evaluator's (no bubble)."""
    res = _stage_result(tmp_path)
    capsys.readouterr()
    assert main(["show", res, "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["schedule"] == "stream"
    assert sim["period_per_sample"] == pytest.approx(sim["model_time_per_sample"], rel=1e-9)
    assert sim["bubble_fraction"] == pytest.approx(0.0, abs=1e-9)
    # a training plan has backwards to run: it cannot stream
    trained = _stage_result(tmp_path, "--training")
    capsys.readouterr()
    assert main(["show", trained, "--no-draw", "--schedule", "stream"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --schedule stream")
