"""A user review's findings on cost models and inputs: ``--costs profile`` on devices without a CPU kind
(said, and recorded as the roofline model it falls back to), a Helix cluster file missing a field
(read as one, so that the reader names the field) and ``placement calibrate`` saying which figures are
at the fit's bound or come from benchmarks that did not settle. Nothing here measures a timing."""

from __future__ import annotations

import json
import logging

import pytest

from graphs.calibrate import Calibration, Series, device_file_text, fit_profile
from graphs.costs import compute_costs, profile_costs, recorded_costs
from graphs.devices import parse_devices, preset
from graphs.helix import is_helix
from placement.cli import main


def _stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# --------------------------------------------------------------------------- profile without a CPU kind
def test_profile_costs_without_a_cpu_kind_warn_and_record_roofline(example_onnx, caplog):
    from graphs.onnx_loader import load_onnx

    g = load_onnx(example_onnx)
    ds = parse_devices("t4:2")
    with caplog.at_level(logging.WARNING, logger="graphs.onnx"):
        c = profile_costs(g, ds)  # returns before measuring: no onnxruntime session
    assert c.model == "roofline (profile: no CPU kind)" and c.measured is None
    said = [r.getMessage() for r in caplog.records if r.name == "graphs.onnx"]
    assert len(said) == 1 and "no host CPU kind" in said[0]
    # what a result records is the model that was used, and it costs the plan the same way again
    assert recorded_costs("profile", {"costs": c.model}) == "roofline"
    assert recorded_costs(None, {"costs": c.model}) == "roofline"
    again = compute_costs(g, ds, c.model)  # the words older one-device-per-stage files recorded
    assert (again.compute == c.compute).all()


@pytest.mark.parametrize("extra", [[], ["--max-replicas", "1"]])
def test_place_profile_without_a_cpu_kind_says_so_and_records_roofline(example_onnx, tmp_path, capsys,
                                                                       extra):
    prof, roof, again = (str(tmp_path / f) for f in ("p.json", "r.json", "e.json"))
    assert main(["place", example_onnx, "--devices", "t4:2", "--costs", "profile", "--out", prof,
                 *extra]) == 0
    err = _stderr_lines(capsys)
    notes = [line for line in err if "no host CPU kind" in line]
    assert len(notes) == 1 and notes[0].startswith("warning: "), err
    assert main(["place", example_onnx, "--devices", "t4:2", "--costs", "roofline", "--out", roof,
                 *extra]) == 0
    capsys.readouterr()
    p, r = (json.load(open(f, encoding="utf-8")) for f in (prof, roof))

    def costs(d):
        return (d.get("problem") or d.get("frontend"))["costs"]

    assert costs(p) == costs(r) == "roofline"
    assert p["max_load"] == pytest.approx(r["max_load"], rel=1e-12)
    # evaluate and show of the file reproduce it
    assert main(["evaluate", example_onnx, prof, "--out", again]) == 0
    e = json.load(open(again, encoding="utf-8"))
    assert costs(e) == "roofline" and e["max_load"] == pytest.approx(p["max_load"], rel=1e-9)
    capsys.readouterr()
    assert main(["show", prof, "--no-draw"]) == 0


# --------------------------------------------------------------------------- Helix file without links
def _helix() -> dict:
    node = {"index": 0, "name": "n0", "gpu_type": "T4",
            "throughput": {"m": {"max_num_layers": 2, "capacity_tokens_per_s": {"1": 10.0, "2": 5.0}}}}
    link = {"a": "source", "b": 0, "token_capacity_per_s": {"m": 1e6}}
    return {"name": "tiny", "machine_num_dict": {"T4": 1}, "models": {"m": {"num_layers": 2}},
            "nodes": [node], "links": [link, {"a": 0, "b": "sink", "token_capacity_per_s": {"m": 1e6}}]}


def test_a_helix_file_missing_one_of_its_keys_is_still_a_helix_file():
    assert is_helix(_helix())
    for key in ("links", "nodes", "machine_num_dict"):
        data = _helix()
        data.pop(key)
        assert is_helix(data), key
    assert not is_helix({"nodes": [], "edges": []})  # a reference-format operator graph
    assert not is_helix({"nodes": [{"id": 0}], "edges": [], "machine": {}})


@pytest.mark.parametrize("key", ["links", "nodes"])
def test_place_on_a_helix_file_without_a_key_names_the_field(tmp_path, capsys, key):
    data = _helix()
    data.pop(key)
    path = tmp_path / f"h_no{key}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["place", str(path), "--model", "m"]) == 2
    err = _stderr_lines(capsys)
    assert len(err) == 1 and err[0].startswith("error: ") and str(path) in err[0], err
    assert repr(key) in err[0] and "operator graph" not in err[0], err


# --------------------------------------------------------------------------- calibrate
def _fit_model_times(g, overhead: float) -> dict[str, float]:
    """Per-operator times (ms) of the fit's own model (20 GB/s, 100 GFLOP/s MatMul, 10 GFLOP/s other)
    plus ``overhead`` seconds each; a negative one (the fit's best non-negative overhead is then 0)
    leaves out the operators it would make too short."""
    from graphs.costs import op_bytes, op_flops
    from graphs.devices import MATMUL_TYPES

    cpu = preset("cpu")
    ridge = cpu.peak() / cpu.bandwidth
    out = {}
    for op in g.ops:
        f, b = op_flops(op)[0], op_bytes(op)
        t = b / 20e9 if f < ridge * b else f / (100e9 if op.op_type in MATMUL_TYPES else 10e9)
        if t + overhead > 1e-6:
            out[op.name] = (t + overhead) * 1e3
    return out


def test_fit_overhead_at_its_bound_is_said(example_onnx, tmp_path, monkeypatch, capsys):
    import graphs.costs
    from graphs.onnx_loader import load_onnx

    g = load_onnx(example_onnx)
    times = _fit_model_times(g, -0.5e-6)
    cal = fit_profile(g, "cpu", times)
    assert cal.launch == 0.0 and cal.at_bound("launch")
    assert "lower bound" in device_file_text(cal).split("launch_us = ")[1].splitlines()[0]
    monkeypatch.setattr(graphs.costs, "profile_ops", lambda *a, **k: times)
    out = tmp_path / "fit.toml"
    assert main(["calibrate", "cpu", "--from-profile", example_onnx, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "per-operator overhead" in line)
    assert "(fitted)" not in row and "lower bound" in row and "not determined" in row, row


def _micro(unsettled: dict) -> Calibration:
    log = [Series("launch: Add x100, 1 element", 20, 0.1, False, 0.2, 0.01, 1.0, None),
           Series("MatMul float32 128x[768, 768]", 20, 0.1, True, 0.01, 0.01, 1.0, None)]
    return Calibration(kind="cpu", base="cpu", method="micro-benchmarks (CPUExecutionProvider, cpu clock)",
                       threads=1, conv_flops=100e9, matmul_flops=100e9, fp16_flops=None, bandwidth=20e9,
                       launch=1e-6, other_flops=10e9, date="2026-01-01 00:00 UTC",
                       points={"series": [s.__dict__ for s in log], "settling": unsettled},
                       sources={"fp16": "not measured: same as fp32"})


def test_micro_benchmark_rows_say_which_did_not_settle(tmp_path, monkeypatch, capsys):
    import graphs.calibrate

    settling = {"launch": [1, ["launch: Add x100, 1 element"]], "matmul": [4, []],
                "conv": [14, ["Conv 3x3 c64 g1 56x56", "Conv 1x1 c64 g1 56x56"]]}
    cal = _micro(settling)
    assert cal.unsettled("launch") == (1, 1) and cal.unsettled("matmul") == (0, 4)
    assert cal.unsettled("conv") == (2, 14) and cal.unsettled("bandwidth") == (0, 0)
    monkeypatch.setattr(graphs.calibrate, "calibrate", lambda *a, **k: cal)
    assert main(["calibrate", "cpu", "-o", str(tmp_path / "c.toml")]) == 0
    text = capsys.readouterr().out
    rows = {line.split("  ")[1].strip(): line for line in text.splitlines() if line.startswith("  ")}
    assert rows["per-operator overhead"].endswith("(measured, not settled)")
    assert "(measured, not settled: 2 of its 14 benchmarks)" in rows["Conv, fp32"]
    assert rows["MatMul/Gemm, fp32"].endswith("(measured)")
    assert rows["memory bandwidth (large)"].endswith("(measured)")


def test_a_calibration_records_which_benchmarks_settled(monkeypatch):
    """calibrate() ties every benchmark to the figures it measures (no timing: runs are faked)."""
    import graphs.calibrate as gc

    calls = {"n": 0}

    def fake_run_times(self, models, feed, name=None):
        calls["n"] += 1
        settled = not (name or "").startswith(("launch", "Conv 3x3"))
        self.log.append(Series(name or "x", 5, 0.0, settled, 0.5, 0.0, 1.0, None))
        return [1e-3 * (j + 1) for j in range(len(models))]

    monkeypatch.setattr(gc._Timer, "run_times", fake_run_times)
    monkeypatch.setattr(gc, "probe_machine", lambda seconds=0.5: (None, None))
    cal = gc.calibrate("cpu", budget=0.01)
    assert calls["n"] == len(cal.points["series"])
    assert cal.unsettled("launch") == (1, 1)
    total = sum(1 for c in gc.CONV_SHAPES)
    bad = sum(1 for _c, _side, kern, _g in gc.CONV_SHAPES if kern == 3)
    assert cal.unsettled("conv") == (bad, total)
    assert cal.unsettled("matmul")[0] == 0 and cal.unsettled("bandwidth") == (0, 1)


def test_fitted_overhead_inside_its_bound_stays_fitted(example_onnx):
    from graphs.onnx_loader import load_onnx

    g = load_onnx(example_onnx)
    times = _fit_model_times(g, 2e-6)
    cal = fit_profile(g, "cpu", times)
    assert cal.launch == pytest.approx(2e-6, rel=1e-3) and not cal.at_bound("launch")
    assert "lower bound" not in device_file_text(cal)


def test_place_model_records_the_costs_it_used_where_a_profile_had_no_host_kind(example_onnx):
    """The library's stage path recorded the option as given ("profile") where the devices had no host
    kind to measure, so the plan's settings claimed measured costs for roofline ones."""
    from placement import place_model

    p = place_model(example_onnx, "t4:2", costs="profile")
    assert p.settings["costs"] == "roofline"
    assert p.max_load == place_model(example_onnx, "t4:2", costs="roofline").max_load
