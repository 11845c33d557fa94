"""An ``input`` section changes a job's rate, never its time unit. It used to declare a reference-format
workload's unit to be ms (``stage.unit or "ms"``), so two jobs on the same file, one with an input
section and one without, were refused as measuring time in different units. The example job list's
workload is in ms and now says so; a genuinely mixed list is still an error."""

import json

import pytest

from placement.cli import main
from placement.cluster.curves import CurvePoint, JobCurve
from placement.cluster.formats import InputSpec
from placement.cluster.inputs import pipeline_curve


def _two_forms(tmp_path, strip_unit: bool) -> str:
    jobs = str(tmp_path / "jobs.json")
    assert main(["example", jobs]) == 0
    workload = tmp_path / "jobs-transformer.json"
    if strip_unit:  # a reference workload that names no unit (as the example wrote it before)
        doc = json.loads(workload.read_text())
        del doc["unit"]
        workload.write_text(json.dumps(doc))
    d = json.loads((tmp_path / "jobs.json").read_text())
    doc = {"cluster": d["cluster"],
           "jobs": [d["jobs"][0], {"name": "plain", "model": "jobs-transformer.json", "samples": 1000}]}
    path = tmp_path / "units.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("strip_unit, unit", [(False, "ms"), (True, "")])
def test_one_workload_with_and_without_an_input_section_has_one_unit(tmp_path, capsys, strip_unit, unit):
    path = _two_forms(tmp_path, strip_unit)
    capsys.readouterr()
    # before: exit 2, "different units (ms: vision; a reference workload's own unit: plain)"
    assert main(["cluster", "simulate", path, "--policy", "fifo", "--no-cache", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["unit"] == unit and [j["name"] for j in doc["jobs"]] == ["vision", "plain"]
    # a workload without a unit: its times are read as ms against the input section's, and said so
    assert ("note: job vision: its workload says no time unit" in out.err) == strip_unit


def test_the_example_job_list_is_in_ms_and_its_workload_says_so(tmp_path, capsys):
    jobs = str(tmp_path / "jobs.json")
    assert main(["example", jobs]) == 0
    assert json.loads((tmp_path / "jobs-transformer.json").read_text())["unit"] == "ms"
    capsys.readouterr()
    assert main(["cluster", "simulate", jobs, "--policy", "fifo", "--no-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unit"] == "ms"


def test_a_genuinely_mixed_list_is_still_refused(tmp_path, capsys):
    """A workload with no unit (its own) beside a measured table (ms): the input section does not make
    the workload's times ms."""
    path = _two_forms(tmp_path, strip_unit=True)
    d = json.loads(open(path).read())
    table = json.loads((tmp_path / "jobs.json").read_text())["jobs"][3]
    assert table["name"] == "measured" and "throughput" in table
    d["jobs"] = [d["jobs"][0], table]
    open(path, "w").write(json.dumps(d))
    assert main(["cluster", "simulate", path, "--policy", "fifo", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "different units" in err
    assert "ms: measured" in err and "own unit: vision" in err


@pytest.mark.parametrize("unit", ["", "ms", "s"])
def test_the_input_pipeline_curve_keeps_its_stage_curves_unit(unit):
    values = {(a, c): 1.0 if a else float("inf") for a in range(2) for c in range(3)}
    stage = JobCurve(("acc", "cpu"), (1, 2), (False, True), values, (CurvePoint((1, 0), 1.0, 0.0),),
                     unit=unit)
    c = pipeline_curve(stage, InputSpec(0.5, 0.0, 0.0, 1e9))
    assert c.unit == unit and c.points  # before: "" became "ms"
    assert any("says no time unit" in n for n in c.notes) == (unit == "")
