"""Messages a new-user review found unclear: each names the flag or field, in the file's own terms, and
every figure has its unit."""

from __future__ import annotations

import pytest

from graphs.errors import InputError
from placement.cli import main


@pytest.mark.parametrize("flags, words", [
    (["--accelerators", "-1"], "--accelerators must be 0 or more, got -1"),
    (["--cpus", "-2"], "--cpus must be 0 or more, got -2"),
    (["--accelerators", "0", "--cpus", "0"], "--accelerators 0 --cpus 0 leaves no device"),
])
def test_example_names_the_flag_that_leaves_no_device(tmp_path, capsys, flags, words):
    # it said "there must be at least one device" for each, naming no flag
    assert main(["example", str(tmp_path / "e.json"), *flags]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("value, shown", [(True, "true"), (None, "null"), ("12", '"12"'), (2.5, "2.5")])
def test_a_request_mix_error_shows_the_value_as_json_writes_it(value, shown):
    from graphs.llm import read_mix

    # a JSON file's `true` was shown as Python's `True`
    with pytest.raises(InputError, match=f"'input' must be a positive integer \\(tokens\\), got {shown}$"):
        read_mix({"buckets": [{"input": value, "output": 8, "weight": 1}]})


def test_show_gives_a_reference_workloads_figures_in_its_own_unit(tmp_path, capsys):
    # the table said (t) but the makespan, latency and steady-state lines had no unit at all
    wl, res = str(tmp_path / "ex.json"), str(tmp_path / "r.json")
    assert main(["example", wl]) == 0
    assert main(["place", wl, "--out", res]) == 0
    capsys.readouterr()
    assert main(["show", res, "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("makespan "))
    assert " t for " in line and " t (throughput" in line, line
    assert "times in the workload's own unit (t)" in out


@pytest.mark.parametrize("unit", [5, "", "  ", True, ["ms"]])
def test_a_reference_workloads_unit_must_name_one(tmp_path, unit):
    """``"unit": 5`` was accepted without a word (and the times read in the workload's own unit)."""
    import json

    from graphs.reference import read_workload

    path = tmp_path / "ex.json"
    assert main(["example", str(path)]) == 0
    data = json.loads(path.read_text())
    data["unit"] = unit
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match='"unit" must name the file\'s time unit'):
        read_workload(str(path))
    data["unit"] = " ms "
    path.write_text(json.dumps(data))
    assert read_workload(str(path)).graph.meta["unit"] == "ms"


def test_evaluate_reads_a_plan_of_inspects_graph_against_the_onnx_model(tmp_path, capsys):
    """A plan placed on the graph ``inspect -o`` wrote lists its stages' nodes by that graph's integer
    ids; ``evaluate MODEL.onnx`` said "stages[0] lists node 0 on a100:0, but it is not in the graph: edit
    both lists", though nothing was edited. devices[] names each id: the plan is read by those names, and
    scores as it does on the graph it was placed on. A node no list names is still refused."""
    import json

    model, costed, res = (str(tmp_path / n) for n in ("ex.onnx", "costed.json", "r.json"))
    assert main(["example", model, "--layers", "1"]) == 0
    assert main(["inspect", model, "--devices", "a100:2", "-o", costed]) == 0
    assert main(["place", costed, "--out", res]) == 0
    capsys.readouterr()

    def max_load(workload: str, result: str) -> str:
        out = str(tmp_path / "e.json")
        assert main(["evaluate", workload, result, "--out", out]) == 0, capsys.readouterr().err
        return json.loads(open(out).read())["max_load"]

    assert max_load(model, res) == pytest.approx(max_load(costed, res), rel=1e-12)
    data = json.loads(open(res).read())
    data["stages"][0]["nodes"].append(10_000)
    bad = str(tmp_path / "bad.json")
    json.dump(data, open(bad, "w"))
    assert main(["evaluate", model, bad]) == 2
    assert "stages[0] lists node 10000" in capsys.readouterr().err
