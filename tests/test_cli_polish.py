"""A new user's trial of the command line: every option honoured or refused by name (or, where it
changes the model, said in a note), and a file given in the wrong place named for what it is and what
was expected, not for the first field the wrong reader misses."""

from __future__ import annotations

import json

import pytest

from placement.cli import main


def _one_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    for w in words:
        assert w in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A reference-format workload, a result placed on it, a frontier file, a job list, a model config
    missing a field, and a file named like an ONNX model (what it holds is never read here)."""
    d = tmp_path_factory.mktemp("files")
    tiny = str(d / "tiny.json")
    assert main(["example", tiny]) == 0
    result = str(d / "result.json")
    assert main(["place", tiny, "--solver", "dp", "--out", result]) == 0
    frontier = d / "frontier.json"
    frontier.write_text(json.dumps({"schema": "placement-frontier", "version": 1, "proven": True,
                                    "points": [{"plan_file": "frontier.0.json"}]}))
    jobs = str(d / "jobs.json")
    assert main(["example", jobs]) == 0
    cfg = d / "badcfg.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    onnx = d / "model.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch\xff\xfe")
    return {"tiny": tiny, "result": result, "frontier": str(frontier), "jobs": jobs, "cfg": str(cfg),
            "onnx": str(onnx)}


@pytest.mark.parametrize("argv, words", [
    # a result file where a workload goes said "missing top-level field 'maxSizePerFPGA'"
    (["place", "{result}"], ["{result}: this is a placement result", "not a workload",
                             "placement evaluate", "{tiny}", "placement show {result}"]),
    (["evaluate", "{result}", "{result}"], ["this is a placement result", "not a workload"]),
    # a model config missing a field it needs: the same
    (["place", "{cfg}"], ["{cfg}: this looks like an LLM model config", "'num_hidden_layers'"]),
    (["place", "{frontier}"], ["this is a frontier", "not a workload", "frontier.0.json"]),
    (["place", "{jobs}"], ["this is a shared-cluster job list", "placement cluster {jobs}"]),
    # an ONNX model where a result goes said "not a UTF-8 text file"
    (["show", "{onnx}"], ["{onnx}: this is an ONNX model", "placement show takes a result file"]),
    (["split", "{result}", "{onnx}"], ["placement split takes MODEL RESULT",
                                       "placement split {onnx} {result}"]),
    # a frontier where a result goes said "a split must be an object with 'fpgas' and/or 'cpus' lists"
    (["evaluate", "{tiny}", "{frontier}"], ["{frontier}: this is a frontier", "not one result",
                                            "frontier.0.json"]),
    (["show", "{tiny}"], ["{tiny}: this is a reference-format operator graph, a workload",
                          "placement place {tiny} --out"]),
    (["evaluate", "{tiny}", "{jobs}"], ["this is a shared-cluster job list", "takes a result file"]),
])
def test_a_file_in_the_wrong_place_is_named_for_what_it_is(files, capsys, argv, words):
    capsys.readouterr()
    assert main([a.format(**files) for a in argv]) == 2
    _one_error(capsys, *(w.format(**files) for w in words))


def test_the_workload_reader_names_a_result_too(files):
    """load_workload (show --workload, evaluate) reads a workload; a result there is named as one."""
    from graphs.errors import InputError
    from placement.load import load_workload

    with pytest.raises(InputError, match="this is a placement result"):
        load_workload(files["result"])


def test_the_policy_comparison_has_one_utilisation_for_every_row(capsys):
    """fifo's one allocation held leaves jobs waiting forever: its utilisation "while the allocation
    holds" (100%) sat in the comparison beside the others' over their makespan (26%). Not comparable:
    "-", and the header says which figure the column is."""
    import math
    from types import SimpleNamespace

    from placement.cluster.command import format_comparison

    def r(policy, makespan, util):
        return SimpleNamespace(policy=policy, max_rho=math.nan if math.isinf(makespan) else 2.0,
                               avg_jct=makespan, makespan=makespan, utilisation=util, unit="ms")

    text = format_comparison([r("ftf", 1000.0, 0.26), r("fifo", math.inf, 1.0)])
    head, ftf, fifo = text.splitlines()
    assert "utilisation over makespan" in head
    assert ftf.endswith("26%") and fifo.split()[-1] == "-" and "100%" not in fifo
