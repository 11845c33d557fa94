"""place --batch-size auto|LIST and --latency-slo, placement frontier, on a small ONNX model."""

from __future__ import annotations

import json

import pytest

from placement.cli import main
from placement.serving import batch_workload, parse_batch_sizes, sweep
from tests.onnx_models import save, small_cnn, zoo


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


def test_parse_batch_sizes():
    assert parse_batch_sizes("auto") is None
    assert parse_batch_sizes("4,1,2,2") == [1, 2, 4]
    assert parse_batch_sizes(3) == [3]
    for bad in ("0", "1,x", "", "-2"):
        with pytest.raises(Exception, match="batch"):
            parse_batch_sizes(bad)


def test_memory_grows_with_the_batch_and_fixed_batch_models_are_rebatched():
    w1 = batch_workload(zoo("squeezenet"), "t4:1", 1)
    w4 = batch_workload(zoo("squeezenet"), "t4:1", 4)
    assert w4.graph.meta["batch_size"] == 4
    assert sum(w4.graph.meta["flops"]) == pytest.approx(4 * sum(w1.graph.meta["flops"]), rel=1e-6)
    assert w4.graph.memory.sum() > w1.graph.memory.sum()
    out1 = sum(w1.graph.meta["output_bytes"])
    assert w4.graph.memory.sum() - w1.graph.memory.sum() == pytest.approx(3 * out1, rel=1e-6)


def test_auto_sweep_stops_when_memory_runs_out(cnn, tmp_path):
    # a device that holds the parameters and three batches' outputs: batch sizes 1 and 2 fit, 4 does not
    w = batch_workload(cnn, "t4:1", 1)
    params, outs = sum(w.graph.meta["param_bytes"]), sum(w.graph.meta["output_bytes"])
    dev = tmp_path / "d.toml"
    dev.write_text(f'[devices.tiny]\nbase = "t4"\nmemory_gib = {(params + 3 * outs) / 2**30!r}\n')
    sw = sweep(cnn, "tiny:1", None, device_files=[str(dev)])
    sizes = [b for b, pt, _ in sw.points if pt is not None]
    assert sizes == [1, 2] and "batch 4" in sw.stopped and "memory" in sw.stopped
    assert sw.best is not None and sw.best.batch_size == max(
        (pt for _, pt, _ in sw.points if pt), key=lambda p: p.samples_per_s).batch_size


def test_place_batch_list_prints_and_writes_every_batch(cnn, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "1,4", "--max-replicas", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "best batch size" in text and "samples/s" in text and "compute utilisation (MFU" in text
    data = json.loads(out.read_text())
    rows = data["serving"]["batch_sizes"]
    assert [r["batch_size"] for r in rows] == [1, 4]
    best = max(rows, key=lambda r: r["samples_per_s"])
    assert data["serving"]["best_batch_size"] == best["batch_size"]
    assert data["frontend"]["batch_size"] == best["batch_size"]
    assert best["samples_per_s"] == pytest.approx(1e3 * best["batch_size"] / data["max_load"])
    assert main(["show", str(out), "--no-draw"]) == 0  # the result is an ordinary placement result


def test_stage_times_are_per_sample_in_both_result_forms(cnn, tmp_path):
    """stages[].time_per_sample is per sample in the one-device-per-stage form too (its device loads
    are per batch): a batch-4 plan's stage time is its device's load over 4, and it gives the plan's
    samples/s as a stage plan's does."""
    out = tmp_path / "one.json"
    assert main(["place", cnn, "--devices", "t4:2", "--batch-size", "4", "--max-replicas", "1",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["model"] == "one-device-per-stage" and data["time_unit"] == "ms"
    load = {d["name"]: d["load"] for d in data["devices"]}
    for s in data["stages"]:
        assert s["batch_size"] == 4 and s["time_per_batch"] == load[s["devices"][0]]
        assert s["time_per_sample"] == pytest.approx(load[s["devices"][0]] / 4, rel=1e-12)
    assert max(s["time_per_sample"] for s in data["stages"]) == pytest.approx(data["max_load"] / 4)
    out2 = tmp_path / "stages.json"
    assert main(["place", cnn, "--devices", "t4:2", "--batch-size", "4", "--out", str(out2)]) == 0
    plan = json.loads(out2.read_text())
    assert plan["model"] == "stages" and plan["time_unit"] == "s"
    # a stage plan's time per sample is its busiest stage's; replicas only make it faster than the
    # pipeline without them
    assert max(s["time_per_sample"] for s in plan["stages"]) * 1e3 <= \
        max(s["time_per_sample"] for s in data["stages"]) * (1 + 1e-9)


def test_a_batch_plan_says_its_max_load_is_per_batch_and_gives_the_per_sample_rate(cnn, tmp_path, capsys):
    """A batch-4 one-device-per-stage plan's max-load is per batch: the summary says so and gives the
    per-sample time and the samples/s (4 samples per max-load) beside it."""
    import re

    out = tmp_path / "r.json"
    assert main(["place", cnn, "--devices", "t4:2", "--batch-size", "4", "--max-replicas", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    m = re.search(r"max-load ([0-9.e+-]+) ms per batch of 4 \(([0-9.e+-]+) ms per sample, ([0-9.e+-]+) "
                  r"samples/s\)", text)
    assert m, text
    load = json.loads(out.read_text())["max_load"]
    assert float(m.group(1)) == pytest.approx(load, rel=5e-3)  # printed to 3-4 digits
    assert float(m.group(2)) == pytest.approx(load / 4, rel=5e-3)
    assert float(m.group(3)) == pytest.approx(4000 / load, rel=1e-5)


def test_latency_slo_infeasible_names_the_lowest_latency(cnn, capsys):
    assert main(["place", cnn, "--devices", "t4:1,cpu:1", "--latency-slo", "1e-6"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "lowest latency achievable is" in err


def test_one_device_per_stage_sweep_records_whether_its_lowest_latency_is_proven(cnn, capsys):
    """The serving section's ``lowest_latency_proven`` is the latency program's proof (it was always
    false on this model), and the message says 'achievable' only then."""
    args = ["place", cnn, "--devices", "t4:1,cpu:1", "--max-replicas", "1", "--latency-slo", "1e-6", "--json"]
    assert main(args) == 1
    captured = capsys.readouterr()
    serving = json.loads(captured.out)["serving"]
    assert serving["model"] == "one-device-per-stage" and serving["lowest_latency_ms"] > 0
    assert serving["lowest_latency_proven"] is True and "lowest latency achievable is" in captured.err


@pytest.mark.parametrize("bound", [False, True])
def test_a_missed_latency_target_is_infeasible_only_when_proven(bound):
    """One message for both models' sweeps; before, one device per stage said 'infeasible' even when
    the latency program had not proven its lowest latency."""
    from placement.cli.serving import _target_missed
    from placement.serving import Sweep

    def sweep(proven):
        return Sweep(((2, None, "no plan"), (4, None, "no plan")), None, "", 0.5, 0.75, proven, proven)

    proven, unproven = _target_missed(sweep(True), bound=bound), _target_missed(sweep(False), bound=bound)
    assert proven.startswith("error: infeasible: no plan meets the latency target of 0.5 ms at any batch")
    assert unproven.startswith("error: no plan found meets the latency target of 0.5 ms")
    assert "(not proven infeasible)" in unproven and "infeasible:" not in unproven
    if bound:  # the stage model's lowest latency is a lower bound, proven or not
        assert proven.endswith("is at least 0.75 ms (batch 2)")
        assert unproven.endswith("is at least 0.75 ms (batch 2)")
    else:
        assert proven.endswith("the lowest latency achievable is 0.75 ms (batch 2)")
        assert unproven.endswith("the lowest latency found is 0.75 ms (not proven least) (batch 2)")


def test_a_sweep_without_a_plan_writes_one_result_format_and_an_honest_status(cnn, tmp_path, capsys,
                                                                            monkeypatch):
    """No batch size meets the target: the result file is the v2 schema with no stages (one device per
    stage wrote version 1 without them), 'infeasible' where each size's solve proved it, else
    'unknown' (it said 'infeasible' whatever was proven)."""
    from placement import serving
    from solvers import slo_ip
    from solvers.base import Solution, Status

    out = tmp_path / "r.json"
    for extra in ([], ["--max-replicas", "1"]):
        assert main(["place", cnn, "--devices", "t4:1,cpu:1", "--latency-slo", "1e-6", "--out", str(out),
                     *extra]) == 1
        data = json.loads(out.read_text())
        assert (data["schema"], data["version"], data["stages"], data["devices"]) == \
            ("placement-result", 2, [], [])
        assert data["model"] == ("stages" if not extra else "one-device-per-stage")
        assert data["status"] == "infeasible", extra
        # the reason, as the error line gives it (the message was empty)
        err = capsys.readouterr().err.strip()
        assert data["message"].startswith("no plan meets the latency target of 1e-06 ms")
        assert err == f"error: infeasible: {data['message']}", extra

    def stopped(*a, **kw):
        return Solution(None, float("inf"), Status.STOPPED, "slo-ip", message="time limit reached")

    # every solve stopped by its limit: the target unmet, nothing proven
    monkeypatch.setattr(serving, "serving_point", lambda w, **kw: (None, stopped()))
    monkeypatch.setattr(slo_ip, "solve", stopped)
    assert main(["place", cnn, "--devices", "t4:1,cpu:1", "--latency-slo", "1e-6", "--out", str(out),
                 "--max-replicas", "1"]) == 1
    data = json.loads(out.read_text())
    assert data["status"] == "unknown"
    err = capsys.readouterr().err
    assert err.startswith("error: no plan found meets") and "(not proven infeasible)" in err, err
    assert err.strip() == f"error: {data['message']}"


def test_a_result_without_a_plan_is_refused_by_every_command_that_reads_one(cnn, tmp_path, capsys):
    """evaluate, show, split and run name the file and its status (show asked for --workload, evaluate
    printed an empty table 'status INVALID', split spoke of a 'replicated plan')."""
    out = tmp_path / "none.json"
    assert main(["place", cnn, "--devices", "t4:1,cpu:1", "--latency-slo", "1e-6", "--out", str(out)]) == 1
    capsys.readouterr()
    why = json.loads(out.read_text())["message"]  # the reason, which the refusals give with the status
    assert why.startswith("no plan meets the latency target")
    for argv, what in ((["evaluate", cnn, str(out)], "evaluate"), (["show", str(out), "--no-draw"], "show"),
                       (["split", cnn, str(out), "--out-dir", str(tmp_path / "s")], "split"),
                       (["run", cnn, str(out)], "run")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {out}: the result holds no plan (status infeasible: {why}); there is nothing "
                       f"to {what}"], err
    assert not (tmp_path / "s").exists()


def test_latency_slo_plan_meets_it(cnn, tmp_path, capsys):
    out = tmp_path / "s.json"
    # one device per stage: the latency model's latency of the plan kept
    assert main(["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "1,2,4", "--latency-slo", "0.05",
                 "--max-replicas", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["model"] == "one-device-per-stage" and data["latency"] <= 0.05 * (1 + 1e-9)
    # the default: replicas (the stage model), every batch size's plan within the target
    assert main(["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "1,2,4", "--latency-slo", "0.05",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["model"] == "stages"
    rows = data["serving"]["batch_sizes"]
    assert [r["batch_size"] for r in rows] == [1, 2, 4]
    assert all(r["latency_ms"] <= 0.05 * (1 + 1e-9) for r in rows)
    assert data["latency"] * 1e3 * data["serving"]["best_batch_size"] <= 0.05 * (1 + 1e-9)


def test_latency_slo_by_default_is_the_better_of_replicas_and_one_device_per_stage(cnn, capsys):
    """--latency-slo without --max-replicas: the stage model's plan when it is proven (then it serves at
    least what one device per stage does: compared with --max-replicas 1 here); where it is not, the
    one-device-per-stage program runs too and the plan serving more is kept, its proof (one device per
    stage only) no longer called optimal."""
    from types import SimpleNamespace

    from placement.cli.serving import _one_device_per_stage_too

    base = ["place", cnn, "--devices", "t4:2,l4:1", "--latency-slo", "1", "--json"]
    assert main(base) == 0
    stage = json.loads(capsys.readouterr().out)
    assert main(base + ["--max-replicas", "1"]) == 0
    one = json.loads(capsys.readouterr().out)
    row = stage["serving"]["batch_sizes"][0]
    assert stage["model"] == "stages" and row["proven"] and "note" not in stage["serving"]
    assert row["samples_per_s"] >= one["serving"]["batch_sizes"][0]["samples_per_s"] * (1 - 1e-9)

    args = SimpleNamespace(workload=cnn, latency_slo=1.0, time_limit=20.0, gap=1e-9, threads=None, seed=0,
                           backend="highs")
    fe = {"devices": "t4:2,l4:1"}

    def stage_sweep(sps):
        best = SimpleNamespace(proven=False, samples_per_s=sps)
        return SimpleNamespace(best=best, points=[(1, best, "")], lowest_proven=False)

    sw, note = _one_device_per_stage_too(args, fe, stage_sweep(1.0), 0.1)  # a poor unproven stage plan
    assert sw is not None and "one device per stage serves more" in note and "not proven best" in note
    assert sw.best.samples_per_s > 1.0 and not sw.best.proven
    assert sw.best.placement.status.value == "feasible" and sw.best.placement.solution.bound is None
    assert sw.best.latency_ms <= 1.0 * (1 + 1e-9)
    sw, note = _one_device_per_stage_too(args, fe, stage_sweep(1e12), 0.1)  # a better one: kept
    assert sw is None and "the stage plan is kept" in note
    proven = SimpleNamespace(best=SimpleNamespace(proven=True, samples_per_s=1.0), points=[],
                             lowest_proven=False)
    assert _one_device_per_stage_too(args, fe, proven, 0.1) == (None, "")


def test_bad_batch_size_is_one_error_line(cnn, capsys):
    assert main(["place", cnn, "--batch-size", "two"]) == 2
    assert capsys.readouterr().err.startswith("error:")
    assert main(["inspect", cnn, "--batch-size", "auto"]) == 2
    assert "place, frontier and provision" in capsys.readouterr().err


def test_an_infinite_latency_target_is_refused_as_not_finite(cnn, tmp_path, capsys):
    """--latency-slo inf said it "must be a positive number" (inf is one): it must be finite; leaving the
    option out is no target. One error line, exit 2, on every command that takes it and both models."""
    prices = tmp_path / "p.toml"
    prices.write_text("[prices]\na100 = 3.0\n")
    for argv in (["place", cnn, "--devices", "a100:1", "--latency-slo", "inf"],
                 ["place", cnn, "--devices", "a100:1", "--latency-slo", "inf", "--max-replicas", "1"],
                 ["provision", cnn, "--available", "a100:1", "--prices", str(prices), "--target-throughput",
                  "1", "--latency-slo", "inf"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --latency-slo must be a finite number"), err
        assert "leave --latency-slo out" in err[0]
    assert main(["place", cnn, "--devices", "a100:1", "--latency-slo", "-1", "--max-replicas", "1"]) == 2
    assert "must be a finite positive number of milliseconds, got -1.0" in capsys.readouterr().err


def test_frontier_command_writes_plans_show_accepts(cnn, tmp_path, capsys):
    out = tmp_path / "f.json"
    png = tmp_path / "f.png"
    assert main(["frontier", cnn, "--devices", "t4:1,l4:1", "--batch-size", "1,2", "--out", str(out),
                 "--plot", str(png), "--max-replicas", "1"]) == 0
    cap = capsys.readouterr()
    assert "non-dominated" in cap.out and "all proven" in cap.out
    assert png.exists() or "matplotlib" in cap.err
    data = json.loads(out.read_text())
    assert data["schema"] == "placement-frontier" and data["points"] and data["proven"]
    pts = data["points"]
    for p in pts:
        for q in pts:
            better = q["samples_per_s"] >= p["samples_per_s"] and q["latency_ms"] <= p["latency_ms"]
            assert p is q or not better
        plan = json.loads(open(p["plan_file"]).read())
        assert plan["max_load"] == pytest.approx(p["max_load_ms"])
        assert plan["latency"] == pytest.approx(p["latency_ms"])
        # without host cores every serving-domain plan is contiguous, so show simulates it
        assert plan["contiguous"] and main(["show", p["plan_file"], "--no-draw"]) == 0


def test_provision_command(cnn, tmp_path, capsys):
    prices = tmp_path / "prices.toml"
    assert main(["provision", "--example-prices", str(prices)]) == 0
    out = tmp_path / "p.json"
    args = ["provision", cnn, "--available", "t4:2,cpu:2", "--prices", str(prices), "--out", str(out),
            "--max-replicas", "1"]
    assert main(args + ["--target-throughput", "1000"]) == 0
    text = capsys.readouterr().out
    assert "cheapest for 1000 samples/s" in text and "proven cheapest" in text
    data = json.loads(out.read_text())
    assert data["provision"]["allocation"] == data["frontend"]["devices"]
    assert 1e3 / data["max_load"] >= 1000
    assert main(["show", str(out), "--no-draw"]) == 0
    assert main(args + ["--target-throughput", "1e12"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "unreachable" in err and "the most any allocation serves" in err
    assert main(["provision", cnn, "--available", "t4:1", "--target-throughput", "1"]) == 2
    assert "no price" in capsys.readouterr().err


def test_provision_over_batch_sizes_picks_the_cheapest(cnn, tmp_path, capsys):
    prices = tmp_path / "prices.toml"
    assert main(["provision", "--example-prices", str(prices)]) == 0
    argv = ["provision", cnn, "--available", "t4:2,cpu:2", "--prices", str(prices), "--target-throughput",
            "20000", "--json"]
    capsys.readouterr()
    assert main(argv + ["--batch-size", "auto"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["provision"]["per_batch_size"]
    assert len(rows) >= 2 and [r["batch_size"] for r in rows][:2] == [1, 2]
    found = [r["price_per_hour"] for r in rows if r["price_per_hour"] is not None]
    assert data["provision"]["price_per_hour"] == min(found)


def test_fixed_batch_resnet_follows_the_batch():
    from graphs.onnx_batch import check_batch
    from graphs.onnx_loader import batchable_path, load_onnx

    path = batchable_path(zoo("resnet50"))
    assert path != zoo("resnet50")  # a rebatched copy: the file's batch is fixed
    g1, g2 = load_onnx(path, batch_size=1), load_onnx(path, batch_size=2)
    check_batch(g2, 2)  # its Reshape to [1, 2048] now copies the batch
    assert g2.outputs[0].shape == (2, 1000)
    from graphs.costs import op_flops

    assert sum(op_flops(o)[0] for o in g2.ops) == pytest.approx(2 * sum(op_flops(o)[0] for o in g1.ops),
                                                                 rel=1e-6)


def test_provision_edges_are_one_error_line(tmp_path, capsys):
    """A missing model is named before anything else; --example-prices creates its folder, and a path
    that cannot be written is one error line."""
    assert main(["provision", str(tmp_path / "nope.onnx"), "--target-throughput", "10",
                 "--available", "a100:2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.onnx" in err[0] and "no such file" in err[0]
    out = tmp_path / "new" / "dir" / "prices.toml"
    assert main(["provision", "--example-prices", str(out)]) == 0 and out.read_text().strip()
    capsys.readouterr()
    assert main(["provision", "--example-prices", "/proc/x/prices.toml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --example-prices")


def test_frontier_out_in_a_missing_folder_is_created_and_an_unwritable_one_is_one_line(cnn, tmp_path, capsys):
    out = tmp_path / "new" / "dir" / "f.json"
    assert main(["frontier", cnn, "--devices", "t4:1", "--batch-size", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["points"]
    capsys.readouterr()
    assert main(["frontier", cnn, "--devices", "t4:1", "--out", "/proc/x/f.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --out /proc/x/f.json")


# ----------------------------------------------------------------- the default: replicas where they help
def test_default_sweep_replicates_a_model_that_fits_one_device(cnn, tmp_path, capsys):
    """Without --max-replicas the sweep solves the stage model: on two A100s the small CNN runs whole on
    each, so every batch size serves twice what one A100 serves (hand: one device's time / 2; inference,
    no all-reduce), and at least what one device per stage serves."""
    out = tmp_path / "r.json"
    assert main(["place", cnn, "--devices", "a100:2", "--batch-size", "1,4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "batch sizes on the stage model" in text and "best batch size" in text
    data = json.loads(out.read_text())
    assert data["model"] == "stages" and data["serving"]["best_batch_size"] in (1, 4)
    rows = {r["batch_size"]: r for r in data["serving"]["batch_sizes"]}
    for b in (1, 4):
        one = batch_workload(cnn, "a100:1", b)
        t1 = float(one.graph.compute[0].sum())  # ms per batch
        assert rows[b]["samples_per_s"] == pytest.approx(2 * 1e3 * b / t1, rel=1e-9)
    assert main(["place", cnn, "--devices", "a100:2", "--batch-size", "1,4", "--max-replicas", "1",
                 "--json"]) == 0
    per_device = {r["batch_size"]: r["samples_per_s"]
                  for r in json.loads(capsys.readouterr().out)["serving"]["batch_sizes"]}
    assert all(rows[b]["samples_per_s"] >= per_device[b] * (1 - 1e-9) for b in (1, 4))
    assert main(["show", str(out), "--no-draw"]) == 0


def test_default_sweep_of_a_layered_model_is_never_below_one_device_per_stage(tmp_path, capsys):
    """Layer nodes are refined to operators in the sweep, so the default is never slower than one
    device per stage (the stage model at operator granularity holds every such plan); on BERT-2L the
    layer plan alone is slower on these devices, so the operators' plan is the one kept."""
    model = str(tmp_path / "bert.onnx")
    assert main(["example", model, "--layers", "2"]) == 0
    capsys.readouterr()
    argv = ["place", model, "--devices", "a100:1,t4:1,cpu:2", "--batch-size", "1,8", "--json"]
    assert main(argv + ["--max-replicas", "1"]) == 0
    per_device = {r["batch_size"]: r["samples_per_s"]
                  for r in json.loads(capsys.readouterr().out)["serving"]["batch_sizes"]}
    assert main(argv + ["--granularity", "layer"]) == 0
    layers = {r["batch_size"]: r["samples_per_s"]
              for r in json.loads(capsys.readouterr().out)["serving"]["batch_sizes"]}
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    default = {r["batch_size"]: r for r in data["serving"]["batch_sizes"]}
    for b in (1, 8):
        assert default[b]["samples_per_s"] >= per_device[b] * (1 - 1e-9)
        assert default[b]["samples_per_s"] >= layers[b] * (1 - 1e-9)
    assert any(layers[b] < per_device[b] * (1 - 1e-6) for b in (1, 8))  # the refinement mattered
    assert "operator nodes" in default[8]["how"]


@pytest.fixture(scope="module")
def prices(tmp_path_factory):
    path = tmp_path_factory.mktemp("prices") / "prices.toml"
    assert main(["provision", "--example-prices", str(path)]) == 0
    return str(path)


def test_default_provision_is_never_dearer_than_one_device_per_stage(cnn, prices, capsys):
    argv = ["provision", cnn, "--available", "a100:2,t4:2", "--prices", prices, "--target-throughput",
            "50000", "--json"]
    capsys.readouterr()
    assert main(argv + ["--max-replicas", "1"]) in (0, 1)
    per_device = json.loads(capsys.readouterr().out)["provision"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["provision"]["allocation"] is not None and data["model"] == "stages"
    assert 1 / data["objective"] >= 50000 * (1 - 1e-9)
    if per_device["price_per_hour"] is not None:
        assert data["provision"]["price_per_hour"] <= per_device["price_per_hour"] + 1e-9


def test_default_provision_that_cannot_be_met_says_by_how_much(cnn, prices, capsys):
    capsys.readouterr()
    assert main(["provision", cnn, "--available", "t4:2,cpu:2", "--prices", prices,
                 "--target-throughput", "1e12"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unreachable" in err[0] and "at most" in err[0]


def test_a_sweep_with_an_option_only_one_device_per_stage_takes_runs_that_placement(cnn, capsys):
    """Without --max-replicas, an option the stage model does not take (a memory limit) keeps the sweep
    on one device per stage, as before replicas became the default; with --max-replicas 2 it is one
    error naming it."""
    assert main(["place", cnn, "--devices", "t4:2", "--batch-size", "1,2", "--memory-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("batch sizes (samples/s = 1000 x batch / max-load") and "stage model" not in out
    assert main(["place", cnn, "--devices", "t4:2", "--batch-size", "1,2", "--memory-limit", "1",
                 "--max-replicas", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-limit" in err[0]


def test_best_batch_is_proven_best_only_when_every_size_tried_is_proven():
    """A sweep printed 'proven best' for the best batch while another batch's answer was not proven."""
    from types import SimpleNamespace as P

    from placement.cli.serving import _best_batch_line
    from placement.serving import Sweep, unproven_sizes

    def pt(b, sps, proven):
        return P(batch_size=b, samples_per_s=sps, latency_ms=1.0, proven=proven)

    one, two, four = pt(1, 100.0, True), pt(2, 150.0, False), pt(4, 200.0, True)
    points = ((1, one, ""), (2, two, ""), (4, four, ""), (8, None, "out of memory"))
    # batch 8: no plan, proven none; batch 2: a plan not proven best there
    assert unproven_sizes(points, [True]) == (2,)
    assert unproven_sizes(points, [False]) == (2, 8)
    sw = Sweep(points, four, "", unproven=(2,))
    assert not sw.best_proven
    line = _best_batch_line(sw)
    assert "proven best at batch 4, NOT proven best of the batch sizes tried (batch 2: not proven)" in line
    proven = Sweep(points[:1] + points[2:], four, "", unproven=())
    assert proven.best_proven
    assert _best_batch_line(proven).endswith("; proven best of the batch sizes tried")
    assert _best_batch_line(Sweep(points, two, "", unproven=(2,))).endswith("; NOT proven best")


def test_a_sweeps_time_limit_is_the_whole_sweeps():
    """--time-limit 2 under a latency target took 13 s: each batch size, each step in it, had the
    whole limit. The sweep now stops trying sizes once the deadline has passed, and says so."""
    import time

    from placement.clock import Clock
    from placement.serving import sweep_batches

    tried = []

    def point_at(b):
        tried.append(b)
        time.sleep(0.2)
        return None, "nothing", None

    points, best, stopped = sweep_batches(point_at, [1, 2, 4, 8, 16], clock=Clock(0.3))
    assert tried == [1, 2] and [b for b, _, _ in points] == [1, 2] and best is None
    assert stopped.startswith("time limit reached") and "batch sizes 4, 8, 16 not tried" in stopped
    assert Clock(None).deadline() is None and Clock(float("inf")).deadline() is None


def test_a_sweep_cut_short_names_the_listed_sizes_it_did_not_try():
    """A list that the time limit cuts short said "batch 4 and above not tried" as auto does: a list's
    sizes not reached are named (auto's are open-ended). The deadline has passed from the start (a
    clock at 0): the first size is tried, no other."""
    from types import SimpleNamespace

    from placement.clock import Clock
    from placement.serving import sweep_batches

    def point_at(b):
        return SimpleNamespace(samples_per_s=10.0 * b, batch_size=b), "", None

    def stopped(sizes):
        return sweep_batches(point_at, sizes, clock=Clock(0.0))[2]

    assert stopped([1, 2, 4]).endswith(": batch sizes 2, 4 not tried")
    assert stopped([1, 8]).endswith(": batch size 8 not tried")
    assert stopped(None).endswith(": batch 2 and above not tried")


def test_a_sweep_ends_after_a_size_whose_search_a_ctrl_c_stopped():
    """A search that takes a Ctrl-C returns what it has (the KeyboardInterrupt is not raised again): the
    sweep went on to the next size. ``halted()`` now ends it there, and ``stopped`` says why."""
    from types import SimpleNamespace

    from placement.serving import sweep_batches

    def run(sizes, at, plan=True):
        tried = []

        def point_at(b):  # without a plan where the Ctrl-C came (``plan`` false)
            tried.append(b)
            if b == at and not plan:
                return None, "interrupted (Ctrl-C) before any placement was found", None
            return SimpleNamespace(samples_per_s=10.0 * b, batch_size=b), "", None

        points, best, stopped = sweep_batches(point_at, sizes,
                                              halted=lambda: "interrupted (Ctrl-C)" if at in tried else "")
        assert [b for b, _, _ in points] == tried
        return tried, best and best.batch_size, stopped

    assert run([1, 2, 4], 1) == ([1], 1, "interrupted (Ctrl-C): batch sizes 2, 4 not tried")
    assert run([1, 2, 4], 2) == ([1, 2], 2, "interrupted (Ctrl-C): batch size 4 not tried")
    assert run([1, 2, 4], 4) == ([1, 2, 4], 4, "interrupted (Ctrl-C)")  # the last size's search cut short
    assert run(None, 1) == ([1], 1, "interrupted (Ctrl-C): batch 2 and above not tried")
    # no plan where it came: auto stopped there anyway, but saying why ("batch 2: ..." was not a Ctrl-C's)
    assert run(None, 2, plan=False) == ([1, 2], 1, "interrupted (Ctrl-C): batch 4 and above not tried")
    assert run([1, 2, 4], 1, plan=False) == ([1], None, "interrupted (Ctrl-C): batch sizes 2, 4 not tried")


def test_place_under_a_latency_target_ends_at_a_ctrl_c_the_dp_took(cnn, tmp_path, capsys, monkeypatch):
    """``place --latency-slo X --max-replicas 1 --batch-size 1,2``: a Ctrl-C the DP start took (it
    returns the plan it has, "interrupted") ran the DP again, the integer program to the time limit (none
    by default) and the next batch size. Now batch 1's best start is the answer, not proven, the DP ran
    once, and the sweep says it was interrupted."""
    from tests.test_slo import interrupted_once

    runs = interrupted_once(monkeypatch)
    out = tmp_path / "r.json"
    code = main(["place", str(cnn), "--devices", "a100:1,t4:1", "--batch-size", "1,2", "--latency-slo", "5",
                 "--max-replicas", "1", "-o", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert len(runs) == 1, runs
    data = json.loads(out.read_text())
    sv = data["serving"]
    assert [s["batch_size"] for s in sv["batch_sizes"]] == [1]
    assert sv["stopped"] == "interrupted (Ctrl-C): batch size 2 not tried"
    assert data["status"] == "feasible" and sv["best_proven"] is False
    assert sv["batch_sizes"][0]["proven"] is False
    assert "stopped: interrupted (Ctrl-C): batch size 2 not tried" in text.out


def test_place_under_a_latency_target_interrupted_before_any_plan_exits_130(cnn, tmp_path, capsys,
                                                                            monkeypatch):
    """The same Ctrl-C before the DP had a plan: nothing to give, so the command stops as a Ctrl-C does
    (exit 130, ``error: interrupted``, no result file), not "no plan found" (exit 1) nor on to batch 2."""
    from tests.test_slo import interrupted_once

    runs = interrupted_once(monkeypatch, plan=False)
    out = tmp_path / "r.json"
    code = main(["place", str(cnn), "--devices", "a100:1,t4:1", "--batch-size", "1,2", "--latency-slo", "5",
                 "--max-replicas", "1", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    assert len(runs) == 1 and not out.exists()


@pytest.mark.parametrize("flags", [[], ["--max-replicas", "1"]])
def test_place_sweep_stops_at_its_time_limit(cnn, tmp_path, capsys, flags):
    out = tmp_path / "r.json"
    code = main(["place", str(cnn), "--devices", "a100:1,t4:1", "--batch-size", "1,2,4,8,16,32",
                 "--latency-slo", "5", "--time-limit", "0.001", "-o", str(out), *flags])
    text = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in text.err
    data = json.loads(out.read_text())
    assert [s["batch_size"] for s in data["serving"]["batch_sizes"]] == [1]
    assert data["serving"]["stopped"].startswith("time limit reached")
    # proven best of the sizes tried only where batch 1's answer is: one device per stage without host
    # cores, the DP's max-load optimum (its start, given 0.5 s as the program gave it) meets the target
    first = data["serving"]["batch_sizes"][0]
    assert data["serving"]["best_proven"] is (first["proven"] is True)
    assert (first["proven"] is True) is (flags == ["--max-replicas", "1"])


@pytest.mark.parametrize("flags,named", [(["--latency-slo", "50"], "--latency-slo 50"),
                                         (["--batch-size", "auto"], "--batch-size auto"),
                                         (["--training"], "--training only applies"),
                                         (["--training", "--costs", "roofline"], "only apply")])
def test_options_a_reference_graph_cannot_take_are_named_as_given(flags, named, tmp_path, capsys):
    """The error names the option given (not a sweep never asked for), in its own grammar."""
    from placement.cli import main

    g = tmp_path / "g.json"
    g.write_text(json.dumps({"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 0,
                             "nodes": [{"id": 1, "cpuLatency": 1.0, "fpgaLatency": 1.0, "size": 1.0}],
                             "edges": []}))
    assert main(["place", str(g), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1, err


@pytest.mark.parametrize("seed", range(3))
def test_a_max_load_optimum_that_meets_the_target_is_proven_best_under_it(seed, monkeypatch):
    """--max-replicas 1 --latency-slo: batch 1 was "slo-ip (not proven)" though the max-load optimum (the
    exact DP's) met the target, which proves it: no plan serves more, under the target or not. Without
    host cores (contiguous placements are the serving domain there), against brute force over the domain
    (tests/test_slo.py): at a target the DP optimum's latency meets, the answer is the domain's least
    max-load under it, proven, and the program does not run (a stand-in returns what a program stopped
    at its limit does: the old path left the answer unproven). With host cores the program still runs
    (the domain spreads host operators over cores out of pipeline order: the DP's optimum proves
    nothing there)."""
    import dataclasses

    import numpy as np

    from graphs.latency import latency
    from graphs.reference import Workload
    from placement.serving import serving_point
    from solvers import dp, slo_ip
    from solvers.base import SolveOptions, Status
    from tests.instances import random_instance
    from tests.test_slo import domain_points

    real, calls = slo_ip.solve, []

    def at_its_limit(graph, cluster, options=None, **kw):
        calls.append(kw)
        sol = real(graph, cluster, options, **kw)
        return dataclasses.replace(sol, status=Status.FEASIBLE) if sol.assignment is not None else sol

    monkeypatch.setattr(slo_ip, "solve", at_its_limit)
    rng = np.random.default_rng(seed)
    checked = 0
    while checked < 6:
        inst = random_instance(rng, max_items=5, training=False)
        g, cl = inst.graph, inst.cluster
        if cl.num_devices > 5:
            continue
        d = dp.solve(g, cl, SolveOptions())
        if d.assignment is None or d.status is not Status.OPTIMAL:
            continue
        target = latency(g, cl, d.assignment).total * 1.5 + 1e-9
        calls.clear()
        pt, sol = serving_point(Workload(g, cl), latency_slo=target)
        if any(not k.pays_communication and k.count > 0 for k in cl.kinds):
            assert calls  # the program ran
            continue
        best = min(load for load, lat in domain_points(inst) if lat <= target * (1 + 1e-9))
        assert pt is not None and pt.proven and sol.status is Status.OPTIMAL and not calls, sol.message
        assert pt.max_load == pytest.approx(best, rel=1e-9, abs=1e-12)
        assert pt.latency_ms <= target * (1 + 1e-9) and "no plan serves more" in sol.message
        checked += 1


def test_a_ctrl_c_the_dp_start_took_ends_the_latency_search(monkeypatch):
    """The DP start under a latency target catches a Ctrl-C and returns what it had, "interrupted": the
    search ran the DP again inside the serving program and went on (to the limit, then the next batch
    size), the Ctrl-C lost. It must end there: the DP run once, its plan the answer, not proven, and the
    result marked interrupted (the sweep stops on it)."""
    import dataclasses

    from graphs.model import Cluster, DeviceKind, Node, OpGraph
    from placement.serving import best_under_latency
    from solvers import dp
    from solvers.base import Status

    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, comm=0.1), Node("b", {"gpu": 1.0})], edges=[("a", "b")])
    cl = Cluster((DeviceKind("gpu", count=2),))
    real, calls = dp.solve, []

    def interrupted(graph, cluster, options=None):
        calls.append(1)
        sol = real(graph, cluster, options)
        return dataclasses.replace(sol, message="interrupted (Ctrl-C): the best placement so far")

    monkeypatch.setattr(dp, "solve", interrupted)
    sol = best_under_latency(g, cl, 10.0)
    assert calls == [1]
    assert sol.interrupted and sol.status == Status.FEASIBLE and sol.assignment is not None


@pytest.mark.parametrize("replicas", ["1", "2"])
def test_a_sweep_writes_and_prints_through_the_one_output_path(cnn, tmp_path, capsys, replicas):
    """A sweep's result goes out as place's does (placement.export.emit, under the Ctrl-C deferral): the
    file, then the text that ends by saying where it went; a sweep that misses its target writes its
    no-plan file, says so on stdout, and gives its error line on stderr; --json prints the file's
    document alone."""
    out = tmp_path / f"r{replicas}.json"
    args = ["place", cnn, "--devices", "t4:1,cpu:2", "--batch-size", "1,2", "--max-replicas", replicas]
    assert main(args + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.rstrip().endswith(f"result written to {out}") and "best batch size" in text
    assert json.loads(out.read_text())["serving"]["best_batch_size"] in (1, 2)
    assert main(args + ["--latency-slo", "1e-6", "--out", str(out)]) == 1
    text, err = capsys.readouterr()
    assert text.rstrip().endswith(f"result written to {out}") and "best batch size" not in text
    assert err.strip() and json.loads(out.read_text())["status"] in ("infeasible", "unknown")
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["serving"]["best_batch_size"] in (1, 2)


def test_provision_writes_and_prints_through_the_one_output_path(cnn, tmp_path, capsys):
    """provision's answer goes out as place's does (placement.export.emit): the file, then the curve and
    the plan, ending with where the plan went; --json prints the file's document alone."""
    prices, out = str(tmp_path / "prices.toml"), tmp_path / "p.json"
    assert main(["provision", "--example-prices", prices]) == 0
    args = ["provision", cnn, "--target-throughput", "10", "--available", "t4:1,cpu:2", "--prices", prices,
            "--max-replicas", "1"]
    assert main(args + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "price-throughput curve" in text and text.rstrip().endswith(f"plan written to {out}")
    doc = json.loads(out.read_text())
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["provision"] == doc["provision"]
