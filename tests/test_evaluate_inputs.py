"""``placement evaluate`` and ``placement calibrate`` on inputs they used to get wrong: a Helix layout
re-scored (it was read as an operator graph: 'maxSizePerFPGA'), a result placed on another kind of
workload refused naming both kinds, ``--seed`` without ``--simulate`` and ``calibrate``'s options of
one form given to the other refused, naming the option, instead of ignored."""

from __future__ import annotations

import json
import os

import pytest

from placement.cli import main
from tests.instances import WORKLOADS
from tests.test_piper import _tiny

HELIX = os.path.join(WORKLOADS, "helix")
SINGLE24 = os.path.join(HELIX, "single24.json")


def _one_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    for w in words:
        assert w in err[0], err
    return err[0]


@pytest.fixture()
def helix_layout(tmp_path, capsys) -> tuple[str, dict]:
    if not os.path.isfile(SINGLE24):
        pytest.skip(f"Helix cluster files not found at {HELIX} (set PLACEMENT_WORKLOADS)")
    out = tmp_path / "layout.json"
    assert main(["place", SINGLE24, "--model", "llama70b", "--time-limit", "20", "--out", str(out)]) == 0
    capsys.readouterr()
    return str(out), json.loads(out.read_text())


@pytest.fixture()
def files(tmp_path, capsys) -> dict[str, str]:
    """A reference-format graph and its one-device-per-stage result; a Piper-format workload and its
    stage plan; a small ONNX model (not placed)."""
    paths = {"graph": str(tmp_path / "tiny.json"), "piper": str(tmp_path / "piper.json"),
             "onnx": str(tmp_path / "m.onnx"), "graph_result": str(tmp_path / "graph-result.json"),
             "stage_plan": str(tmp_path / "stage-plan.json")}
    assert main(["example", paths["graph"]]) == 0
    assert main(["place", paths["graph"], "--out", paths["graph_result"]]) == 0
    with open(paths["piper"], "w") as f:
        json.dump(_tiny(), f)
    assert main(["place", paths["piper"], "--out", paths["stage_plan"]]) == 0
    assert main(["example", paths["onnx"], "--layers", "1"]) == 0
    capsys.readouterr()
    return paths


# ------------------------------------------------------------------------------------------- Helix
def test_evaluate_rescores_a_helix_layout_to_the_value_place_reported(helix_layout, tmp_path, capsys):
    path, placed = helix_layout
    assert main(["evaluate", SINGLE24, path]) == 0
    out = capsys.readouterr()
    assert "maxSizePerFPGA" not in out.err
    assert f"max-flow   {placed['maxflow_tokens_per_s']:.2f} tokens/s" in out.out
    again = tmp_path / "again.json"
    assert main(["evaluate", SINGLE24, path, "--json", "--out", str(again)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["maxflow_tokens_per_s"] == pytest.approx(placed["maxflow_tokens_per_s"], rel=1e-9)
    assert data["layout"] == placed["layout"] and data["model"] == "llama70b"
    assert data["bound_tokens_per_s"] is None  # nothing was solved: no bound is claimed
    # what evaluate writes is a layout file again
    assert main(["evaluate", SINGLE24, str(again), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["maxflow_tokens_per_s"] == pytest.approx(
        placed["maxflow_tokens_per_s"], rel=1e-9)


def test_evaluate_refuses_a_helix_layout_the_cluster_cannot_run(helix_layout, tmp_path, capsys):
    path, placed = helix_layout
    node, (start, k) = next((n, v) for n, v in placed["layout"].items() if v[1] > 0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**placed, "layout": {**placed["layout"], node: [start, 999]}}))
    assert main(["evaluate", SINGLE24, str(bad)]) == 2
    _one_error(capsys, str(bad), f"node {node}", "max_num_layers")
    other = tmp_path / "other-model.json"
    other.write_text(json.dumps({**placed, "model": "llama7b"}))
    assert main(["evaluate", SINGLE24, str(other)]) == 2
    _one_error(capsys, str(other), "'llama7b'", "llama70b")


def test_evaluate_on_a_helix_file_refuses_options_it_would_ignore(helix_layout, capsys):
    path, _ = helix_layout
    for flag in (["--batch-size", "2"], ["--devices", "a100:2"], ["--max-replicas", "2"]):
        assert main(["evaluate", SINGLE24, path, *flag]) == 2
        _one_error(capsys, flag[0], "Helix cluster file")


def test_helix_layouts_and_other_results_are_not_crossed(helix_layout, files, capsys):
    path, _ = helix_layout
    for workload, words in ((files["graph"], "a reference-format operator graph"),
                            (files["piper"], "a Piper-format workload"), (files["onnx"], "an ONNX model")):
        assert main(["evaluate", workload, path]) == 2
        _one_error(capsys, path, "Helix layout", "llama70b", words)
    for result in (files["stage_plan"], files["graph_result"]):
        assert main(["evaluate", SINGLE24, result]) == 2
        _one_error(capsys, result, "not a Helix layout", "Helix cluster file", "--model M --out")


# ------------------------------------------------------------------------------------------- mismatches
def test_a_stage_plan_on_a_reference_format_graph_names_both_kinds(files, capsys):
    assert main(["evaluate", files["graph"], files["stage_plan"]]) == 2
    _one_error(capsys, files["stage_plan"], "stage plan", "a Piper-format workload (placed on piper.json)",
               f"{files['graph']} is a reference-format operator graph")


def test_results_of_other_workload_kinds_are_refused_naming_both(files, capsys):
    # a Piper stage plan on an ONNX model was a traceback (AttributeError); the others misleading
    cases = [(files["onnx"], files["stage_plan"], "a Piper-format workload", "an ONNX model"),
             (files["piper"], files["graph_result"], "a reference-format operator graph",
              "a Piper-format workload"),
             (files["onnx"], files["graph_result"], "a reference-format operator graph", "an ONNX model")]
    for workload, result, placed, this in cases:
        assert main(["evaluate", workload, result]) == 2
        _one_error(capsys, result, placed, f"{workload} is {this}")
    # the matching pairs still evaluate
    assert main(["evaluate", files["graph"], files["graph_result"]]) == 0
    assert main(["evaluate", files["piper"], files["stage_plan"]]) == 0


def test_a_workload_that_is_not_there_is_said_so_before_its_kind_is_guessed(files, tmp_path, capsys):
    """A missing workload, or a folder, with a result file was read as a reference-format graph by its
    name (``.json``) and refused as the wrong kind of workload."""
    missing, folder = str(tmp_path / "nofile.json"), str(tmp_path / "models")
    os.mkdir(folder)
    for result in (files["stage_plan"], files["graph_result"]):
        assert main(["evaluate", missing, result]) == 2
        assert capsys.readouterr().err.strip() == f"error: {missing}: no such file"
        assert main(["evaluate", folder, result]) == 2
        assert capsys.readouterr().err.startswith(f"error: {folder}: is a folder")


# ------------------------------------------------------------------------------------------- --seed
@pytest.mark.parametrize("seed", ["3", "0"])
def test_evaluate_seed_without_simulate_is_refused(files, capsys, seed):
    assert main(["evaluate", files["graph"], files["graph_result"], "--seed", seed]) == 2
    _one_error(capsys, "--seed applies with --simulate")


def test_evaluate_seed_without_simulate_is_refused_for_a_model_config(tmp_path, capsys):
    from tests.test_llm_sim import LLAMA2_7B

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA2_7B))
    plan = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:1", "--batch-size", "8", "--out", str(plan)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(cfg), str(plan), "--seed", "5"]) == 2
    _one_error(capsys, "--seed applies with --simulate")
    assert main(["evaluate", str(cfg), str(plan)]) == 0


# ------------------------------------------------------------------------------------------- calibrate
def _no_run(*args, **kwargs):
    raise AssertionError("the calibration ran although its options were to be refused")


@pytest.mark.parametrize("extra", [["--batch-size", "4"], ["--batch-size", "1"]])
def test_calibrate_batch_size_without_from_profile_is_refused(monkeypatch, tmp_path, capsys, extra):
    """The micro-benchmarks have no model, so a batch size has no meaning there (graphs.calibrate.calibrate
    takes none): refused, naming it, before any benchmark runs."""
    import graphs.calibrate as gc

    monkeypatch.setattr(gc, "calibrate", _no_run)
    out = tmp_path / "c.toml"
    assert main(["calibrate", "cpu", "-o", str(out), *extra]) == 2
    _one_error(capsys, "--batch-size applies with --from-profile")
    assert not out.exists()


@pytest.mark.parametrize("extra, flag", [(["--budget", "0.5"], "--budget"), (["--cap", "2"], "--cap"),
                                         (["--tolerance", "0.1"], "--tolerance"), (["--strict"], "--strict"),
                                         (["--clock", "wall"], "--clock")])
def test_calibrate_benchmark_options_with_from_profile_are_refused(monkeypatch, tmp_path, capsys, extra,
                                                                   flag):
    import graphs.calibrate as gc
    import graphs.onnx_loader as ol

    monkeypatch.setattr(gc, "fit_profile", _no_run)
    monkeypatch.setattr(ol, "load_onnx", _no_run)
    out = tmp_path / "c.toml"
    assert main(["calibrate", "cpu", "--from-profile", "m.onnx", "-o", str(out), *extra]) == 2
    _one_error(capsys, f"{flag} applies to the micro-benchmarks, not to --from-profile")
    assert not out.exists()


def test_calibrate_from_profile_checks_the_batch_size(monkeypatch, tmp_path, capsys):
    import graphs.onnx_loader as ol

    monkeypatch.setattr(ol, "load_onnx", _no_run)
    assert main(["calibrate", "cpu", "--from-profile", "m.onnx", "-o", str(tmp_path / "c.toml"),
                 "--batch-size", "0"]) == 2
    _one_error(capsys, "--batch-size must be a positive integer")


@pytest.fixture(scope="module")
def onnx_results(tmp_path_factory) -> dict[str, str]:
    """An ONNX model and three results on it: one device per stage, a stage plan at operator
    granularity, one at layer granularity."""
    d = tmp_path_factory.mktemp("evaluate-onnx")
    paths = {"model": str(d / "m.onnx"), "one": str(d / "one.json"), "op": str(d / "op.json"),
             "layer": str(d / "layer.json")}
    assert main(["example", paths["model"], "--layers", "2"]) == 0
    devices = ["--devices", "a100:2,t4:2"]
    assert main(["place", paths["model"], *devices, "--max-replicas", "1", "--out", paths["one"]]) == 0
    assert main(["place", paths["model"], *devices, "--granularity", "op", "--out", paths["op"]]) == 0
    assert main(["place", paths["model"], *devices, "--granularity", "layer", "--out", paths["layer"]]) == 0
    return paths


@pytest.mark.parametrize("extra", [["--schedule", "gpipe"], ["--microbatches", "3"],
                                   ["--granularity", "layer"]])
def test_evaluate_refuses_stage_options_on_a_one_device_per_stage_result(onnx_results, capsys, extra):
    # place refuses them for such a plan; evaluate printed the same scores, exit 0, as if they applied
    capsys.readouterr()
    assert main(["evaluate", onnx_results["model"], onnx_results["one"], *extra]) == 2
    _one_error(capsys, extra[0], "one-device-per-stage")


@pytest.mark.parametrize("plan, other", [("op", "layer"), ("layer", "op")])
def test_evaluate_at_another_granularity_names_the_granularity(onnx_results, capsys, plan, other):
    # it said "unknown node ...: was it computed for another model, device set or --training setting?"
    capsys.readouterr()
    assert main(["evaluate", onnx_results["model"], onnx_results[plan], "--granularity", other]) == 2
    _one_error(capsys, f"--granularity {other}", f"placed at {plan} granularity")
    assert main(["evaluate", onnx_results["model"], onnx_results[plan], "--granularity", plan]) == 0
