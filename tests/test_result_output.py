"""Every command that writes a result goes through one output path (:func:`placement.export.emit`):
``--out`` writes the file and the text's last line says where it went, ``--json`` prints the same
document, and a search that finds no plan still writes its file, says ``infeasible`` only when that is
proven, says why, and gives byte counts in the tables' binary units."""

from __future__ import annotations

import json

import pytest

from placement.cli import main
from tests.test_llm_goodput import LLAMA2_7B
from tests.test_piper import _tiny

# a device that holds 2**30 * 1e-6 = 1073.74 bytes (1.05 KiB): the small CNN's conv (1,472 bytes of
# parameters and output at batch 1: 1.44 KiB) and fc (2,640 bytes: 2.58 KiB) fit on none
SMALL_DEVICE = '[devices.tiny]\nbase = "t4"\nmemory_gib = 0.000001\ncount = 1\n'
FITS_NOT = ("no device can hold node conv: needs 1.44 KiB but one tiny holds 1.05 KiB | node fc: needs "
            "2.58 KiB but one tiny holds 1.05 KiB")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    folder = tmp_path_factory.mktemp("m")
    (folder / "d.toml").write_text(SMALL_DEVICE)
    return str(save(small_cnn(), folder / "cnn.onnx")), str(folder / "d.toml")


def _json_alone(argv, capsys, code: int) -> dict:
    assert main(argv + ["--json"]) == code
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.mark.parametrize("models", [[], ["--max-replicas", "1"]], ids=["stages", "one-device-per-stage"])
def test_a_frontier_without_a_plan_says_infeasible_and_why_and_writes_its_file(models, cnn, tmp_path,
                                                                               capsys):
    """It said "error: no plan found", with no reason and not "infeasible" where the exact DP had proven
    that nothing fits, and wrote no file with --out."""
    model, devices = cnn
    argv = ["frontier", model, "--devices", "tiny:1", "--device-file", devices, *models]
    out = tmp_path / "f" / "frontier.json"
    assert main(argv + ["--out", str(out)]) == 1
    res = capsys.readouterr()
    assert res.err.strip() == f"error: infeasible: batch 1: {FITS_NOT}"
    text = res.out.strip().splitlines()
    assert "frontier: no plan exists at batch size 1 (proven)" in text
    assert text[-1] == f"frontier written to {out}"
    doc = json.loads(out.read_text())
    assert doc["points"] == [] and doc["proven"] is True
    assert doc["no_plan"]["1"].startswith("no device can hold node conv: needs 1472 bytes")
    assert _json_alone(argv, capsys, 1) == doc


def test_a_frontier_with_host_cores_is_not_called_infeasible(cnn, capsys):
    """The exact DP places contiguous pipelines only; with host cores the frontier's domain is larger, so
    its "no placement" proves nothing there: the program decides (here the host holds the model)."""
    model, devices = cnn
    assert main(["frontier", model, "--devices", "tiny:1,cpu:1", "--device-file", devices,
                 "--max-replicas", "1"]) == 0
    res = capsys.readouterr()
    assert "infeasible" not in res.err and "1 non-dominated plan(s)" in res.out


@pytest.mark.parametrize("models, what", [([], "plan"), (["--max-replicas", "1"], "placement")],
                         ids=["stages", "one-device-per-stage"])
def test_a_sweep_without_a_plan_at_any_size_says_infeasible_in_binary_units(models, what, cnn, tmp_path,
                                                                            capsys):
    model, devices = cnn
    out = tmp_path / "none.json"
    assert main(["place", model, "--devices", "tiny:1", "--device-file", devices, "--batch-size", "1,2",
                 *models, "--out", str(out)]) == 1
    res = capsys.readouterr()
    assert res.err.strip() == f"error: infeasible: no batch size has a {what} (at each, proven; the table " \
                              f"says why)"
    rows = res.out.splitlines()
    assert any(r.startswith("1 ") and r.endswith(FITS_NOT) for r in rows), res.out
    assert "bytes" not in res.out and rows[-1] == f"result written to {out}"
    doc = json.loads(out.read_text())
    assert doc["status"] == "infeasible"


def test_a_stage_plan_stopped_before_any_plan_says_where_its_file_went(tmp_path, capsys):
    path, out = tmp_path / "tiny.json", tmp_path / "r.json"
    path.write_text(json.dumps(_tiny()))
    argv = ["place", str(path), "--time-limit", "1e-9"]
    assert main(argv + ["--out", str(out)]) == 1
    assert capsys.readouterr().out.strip().splitlines() == [f"result written to {out}"]
    doc = json.loads(out.read_text())
    assert doc["status"] == "unknown" and doc["stages"] == []  # nothing proven
    assert _json_alone(argv, capsys, 1)["status"] == "unknown"


def test_llm_provision_writes_through_the_one_output_path(tmp_path, capsys):
    cfg, mix, prices, out = (tmp_path / n for n in ("config.json", "mix.json", "prices.json", "p.json"))
    cfg.write_text(json.dumps(LLAMA2_7B))
    mix.write_text(json.dumps({"buckets": [{"input": 128, "output": 64, "weight": 1}]}))
    prices.write_text(json.dumps({"prices": {"a100": 3.0}}))
    argv = ["provision", str(cfg), "--requests", str(mix), "--available", "a100:2", "--prices", str(prices),
            "--ttft-slo", "1000", "--tpot-slo", "100", "--target-throughput", "1"]
    assert main(argv + ["--out", str(out)]) == 0
    text = capsys.readouterr().out.strip().splitlines()
    assert text[0].startswith("cheapest instances for 1 requests/s")
    assert text[-1] == f"result written to {out}"
    assert _json_alone(argv, capsys, 0) == json.loads(out.read_text())


def test_cluster_writes_through_the_one_output_path(tmp_path, capsys):
    jobs, cache, out = str(tmp_path / "jobs.json"), str(tmp_path / "cache"), tmp_path / "c.json"
    assert main(["example", jobs]) == 0
    capsys.readouterr()
    argv = ["cluster", jobs, "--policy", "fifo", "--cache-dir", cache]
    assert main(argv + ["--out", str(out)]) == 0
    text = capsys.readouterr().out.rstrip("\n").splitlines()
    assert text[-1] == f"result written to {out}" and text[-2].strip()  # no blank line before it

    def timeless(doc: dict) -> dict:  # the allocation's solve time differs from run to run
        return {**doc, "summary": {k: v for k, v in doc["summary"].items() if k != "solve_seconds"}}

    assert timeless(_json_alone(argv, capsys, 0)) == timeless(json.loads(out.read_text()))
