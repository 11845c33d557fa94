"""Findings of a new-user review of result files across commands: each figure means what its name says,
whichever model placed the plan, and an auto batch sweep keeps the size that served the most."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from placement.cli import main
from placement.serving import IMPROVES, sweep_batches


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    return str(save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx"))


def test_show_json_of_a_batch_plan_gives_per_sample_figures_per_sample(cnn, tmp_path, capsys):
    """``show --json`` of a one-device-per-stage plan at batch 8 gave ``time_per_sample`` and
    ``throughput`` per run of the batch (8 samples). Checked against the result file's own per-sample
    stage times, a second source: the steady period per sample is the largest of them."""
    out = str(tmp_path / "r.json")
    assert main(["place", cnn, "--devices", "a100:2,t4:2", "--batch-size", "8", "--max-replicas", "1",
                 "--out", out]) == 0
    res = json.loads(open(out).read())
    capsys.readouterr()
    assert main(["show", out, "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["samples_per_microbatch"] == 8
    per_sample = max(s["time_per_sample"] for s in res["stages"])
    assert sim["steady_time_per_sample"] == pytest.approx(per_sample, rel=1e-9)
    assert sim["steady_time_per_microbatch"] == pytest.approx(8 * per_sample, rel=1e-9)
    assert sim["time_per_sample"] * 8 == pytest.approx(sim["time_per_microbatch"], rel=1e-12)
    # throughput in samples per time unit: M micro-batches of 8 samples over the makespan
    assert sim["throughput"] == pytest.approx(8 * sim["microbatches"] / sim["makespan"], rel=1e-12)


def _sweep(rates: dict[int, float]):
    def point_at(b):
        return SimpleNamespace(batch_size=b, samples_per_s=rates[b]), "", None

    return sweep_batches(point_at, None, max_batch=max(rates))


def test_an_auto_sweep_keeps_a_last_size_that_served_more_however_little():
    """The sweep stopped at batch 4 (under 1% more than batch 2) and called batch 2, which served
    fewer samples/s, the best of the sizes tried."""
    assert IMPROVES == 0.01  # the rates below straddle it
    points, best, stopped = _sweep({1: 100.0, 2: 150.0, 4: 151.0, 8: 400.0})
    assert [b for b, _, _ in points] == [1, 2, 4]  # 151 is 0.67% above 150: the sweep ends
    assert best.batch_size == 4
    assert stopped == "batch 4: 151 samples/s, at most 1% more than batch 2's 150"


def test_an_auto_sweep_that_ends_on_a_slower_size_keeps_the_faster():
    points, best, stopped = _sweep({1: 100.0, 2: 150.0, 4: 140.0, 8: 400.0})
    assert best.batch_size == 2
    assert stopped == "batch 4: 140 samples/s, fewer than batch 2's 150"


@pytest.mark.parametrize("models", [[], ["--max-replicas", "1"]], ids=["stages", "one-device-per-stage"])
def test_a_provision_result_records_the_devices_bought(models, cnn, tmp_path, capsys):
    """The stage model's provision file recorded the devices available, so ``evaluate`` listed the ones
    not bought as idle devices of the plan."""
    prices = str(tmp_path / "prices.toml")
    out = str(tmp_path / "pv.json")
    assert main(["provision", "--example-prices", prices]) == 0
    assert main(["provision", cnn, "--target-throughput", "1000", "--available", "a100:2,t4:3,cpu:4",
                 "--prices", prices, "--out", out, *models]) == 0
    data = json.loads(open(out).read())
    bought = data["provision"]["allocation"]
    recorded = data["problem"]["devices"] if "problem" in data else data["frontend"]["devices"]
    assert recorded == bought
    n = sum(int(part.split(":")[1]) for part in bought.split(","))
    capsys.readouterr()
    assert main(["evaluate", cnn, out]) == 0
    text = capsys.readouterr().out
    assert "idle" not in text and (f"of {n} devices" in text or f"{n} devices" in text), text


def test_a_stage_plans_result_records_its_latency(cnn, tmp_path, capsys):
    """A stage plan's file had no latency, where a one-device-per-stage plan's has one. Checked against
    the simulation of ``show``: one micro-batch alone in the pipeline takes ``batch`` times it."""
    out = str(tmp_path / "r.json")
    assert main(["place", cnn, "--devices", "a100:2,t4:2", "--batch-size", "8", "--out", out]) == 0
    res = json.loads(open(out).read())
    assert res["model"] == "stages" and res["time_unit"] == "s"
    capsys.readouterr()
    assert main(["show", out, "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["samples_per_microbatch"] == 8
    assert res["latency"] * 8 == pytest.approx(sim["latency_per_microbatch"], rel=1e-9)


@pytest.mark.parametrize("models", [[], ["--max-replicas", "1"]], ids=["stages", "one-device-per-stage"])
def test_a_frontier_plan_file_says_it_is_a_frontier_point(models, cnn, tmp_path, capsys):
    """Frontier plan files said "warm start from the given plan", the words of the search step that
    last touched the plan; what the point is and what is proven of it was only in the frontier file."""
    out = str(tmp_path / "f.json")
    assert main(["frontier", cnn, "--devices", "a100:2,t4:2", "--batch-size", "1,8", "--time-limit", "10",
                 "--max-points", "3", "--out", out, *models]) == 0
    data = json.loads(open(out).read())
    assert data["points"]
    for p in data["points"]:
        plan = json.loads(open(p["plan_file"]).read())
        proof = p.get("proof") or ("proven" if p["proven"] else "not proven")
        assert plan["message"] == f"frontier plan at batch {p['batch_size']}: {proof}"
        assert plan == p["plan"]


@pytest.mark.parametrize("command", ["frontier", "provision"])
def test_frontier_and_provision_refuse_stage_options_as_place_does(command, cnn, tmp_path, capsys):
    """One check of the counts and one refusal of the stage options where one device per stage is
    placed, in place's words, for every command that takes them."""
    where = (["--devices", "a100:1"] if command == "frontier" else
             ["--available", "a100:1", "--target-throughput", "10"])
    assert main([command, cnn, *where, "--max-replicas", "1", "--microbatches", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --microbatches applies to stage plans (the stage model, the default for ONNX "
                   "models and Piper files), not to this one-device-per-stage placement (--max-replicas 1)")
    assert main([command, cnn, *where, "--microbatches", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --microbatches must be a positive integer, got 0"


def test_a_stage_devices_list_that_disagrees_with_d_and_t_is_refused(cnn, tmp_path, capsys):
    """A stage whose 'devices' list was not d x t long (a hand edit) was split and scored on d x t
    devices without a word (then with a warning); it is refused, as every edited devices list is
    (tests/test_result_edits.py)."""
    out = tmp_path / "r.json"
    assert main(["place", cnn, "--devices", "a100:4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    st = data["stages"][0]
    n = st["dataParallelDegree"] * st["tensorParallelDegree"]
    st["devices"] = st["devices"][:1] + st["devices"][:1] * (n == 1)  # one device too few or too many
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["evaluate", cnn, str(bad)]) == 2
    err = capsys.readouterr().err
    takes = ", ".join(f"{st['kind']}:{j}" for j in range(n))  # the first stage: its kind's first n
    assert err.startswith(f"error: {bad}: stages[0].devices lists {', '.join(st['devices'])}, but the stage "
                          f"takes {takes}: "), err


def test_evaluate_of_an_edited_stage_plan_says_so_in_the_tables_unit(cnn, tmp_path, capsys):
    """A hand-edited stage plan's note blamed re-measured costs only, in seconds per sample under a table
    in milliseconds."""
    out = tmp_path / "r.json"
    assert main(["place", cnn, "--devices", "a100:4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    st = data["stages"][0]
    if st["dataParallelDegree"] < 2:
        pytest.skip("the plan has no replicas to take away")
    st["dataParallelDegree"] //= 2
    st["devices"] = st["devices"][:st["dataParallelDegree"] * st["tensorParallelDegree"]]
    edited = tmp_path / "e.json"
    edited.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["evaluate", cnn, str(edited)]) == 0
    note = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("note:"))
    assert f"is not the file's {data['max_load'] * 1e3:.6g} ms per sample" in note
    assert "(the plan edited, costs re-measured, or another cost model?)" in note


def test_a_graph_written_by_inspect_keeps_its_time_unit_when_placed(cnn, tmp_path, capsys):
    """``inspect -o`` writes the costed graph with "unit": "ms"; placing that file printed its times in
    the reference format's own unit ("t") and recorded that."""
    g = tmp_path / "g.json"
    assert main(["inspect", cnn, "--devices", "t4:2", "-o", str(g)]) == 0
    assert json.loads(g.read_text())["unit"] == "ms"
    out = tmp_path / "r.json"
    capsys.readouterr()
    assert main(["place", str(g), "--out", str(out)]) == 0
    assert "ms/sample" in capsys.readouterr().out
    assert json.loads(out.read_text())["time_unit"] == "ms"
