"""A reference-format workload that names its device kinds (top-level ``"accelerator"`` and ``"cpu"``, as
``placement inspect -o`` writes an ONNX model's costed graph: ``"t4"``) gives its kinds those names; the
names were not read, the kinds were always ``accelerator`` and ``cpu`` (a T4 plan printed as
``accelerator:0``). The values do not change: the same optimum, loads and reference fields as the file
without the names."""

from __future__ import annotations

import json

import pytest

from graphs.errors import InputError
from graphs.reference import parse_split, read_workload, reference_kinds
from placement.cli import main

# three nodes in a chain, by hand: on 2 accelerators and a CPU core the best is a | b on the accelerators
# and c (unsupported there) on the CPU: loads 1 + 0.5 (sends a's output), 2 + 0.5 (receives it) + 0.25
# (sends b's), 1 (the CPU pays nothing): max load 2.75
DOC = {"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
       "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 5.0, "fpgaLatency": 1.0, "size": 10},
                 {"id": 2, "supportedOnFpga": 1, "cpuLatency": 9.0, "fpgaLatency": 2.0},
                 {"id": 3, "supportedOnFpga": 0, "cpuLatency": 1.0, "fpgaLatency": 0.0}],
       "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.25}]}


def _write(tmp_path, name: str, **top) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**DOC, **top}))
    return str(path)


def test_the_kinds_take_the_names_the_file_gives(tmp_path):
    w = read_workload(_write(tmp_path, "named.json", accelerator="t4", cpu="xeon"))
    plain = read_workload(_write(tmp_path, "plain.json"))
    assert w.graph.kinds == ("t4", "xeon") and plain.graph.kinds == ("accelerator", "cpu")
    assert [(k.name, k.count, k.memory, k.pays_communication) for k in w.cluster.kinds] == [
        ("t4", 2, 100.0, True), ("xeon", 1, None, False)]
    assert [w.cluster.device_name(d) for d in range(3)] == ["t4:0", "t4:1", "xeon:0"]
    assert (w.graph.compute.tolist(), w.graph.comm.tolist()) == (plain.graph.compute.tolist(),
                                                                  plain.graph.comm.tolist())
    assert reference_kinds(w.graph, w.cluster) == {"fpgas": "t4", "cpus": "xeon"}
    # a name left out, or null (inspect -o of a cluster without a host kind): the generic one
    one = read_workload(_write(tmp_path, "one.json", accelerator="t4", cpu=None))
    assert one.graph.kinds == ("t4", "cpu")


def test_a_reference_format_split_places_the_named_kinds(tmp_path):
    w = read_workload(_write(tmp_path, "named.json", accelerator="t4", cpu="xeon"))
    split = {"fpgas": [{"nodes": [1]}, {"nodes": [2]}], "cpus": [{"nodes": [3]}]}
    assert parse_split(split, w.graph, w.cluster).tolist() == [0, 1, 2]
    assert parse_split({"devices": {"t4:1": [1, 2], "xeon:0": [3]}}, w.graph, w.cluster).tolist() == [1, 1, 2]
    with pytest.raises(InputError, match="uses 3 t4 devices but the workload has only 2"):
        parse_split({"fpgas": [{"nodes": [1]}, {"nodes": [2]}, {"nodes": [3]}]}, w.graph, w.cluster)


@pytest.mark.parametrize("top, words", [
    ({"accelerator": 3}, "accelerator (the name of its accelerator kind) must be a non-empty name"),
    ({"accelerator": ""}, "accelerator (the name of its accelerator kind)"),
    ({"cpu": "host:0"}, "cpu (the name of its cpu kind) must be a non-empty name without ':'"),
    ({"accelerator": "big gpu"}, "without ':', ',', '@' or spaces"),
    ({"accelerator": "t4", "cpu": "t4"}, "accelerator and cpu name the same kind 't4'"),
])
def test_a_bad_kind_name_is_refused_by_its_field(top, words, tmp_path):
    path = _write(tmp_path, "bad.json", **top)
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        read_workload(path)
    assert path in str(e.value)


def test_placing_a_named_file_gives_the_same_plan_under_its_kinds_names(tmp_path, capsys):
    named, plain = _write(tmp_path, "named.json", accelerator="t4"), _write(tmp_path, "plain.json")
    outs = {}
    for path in (named, plain):
        out = tmp_path / (path.rsplit("/", 1)[1] + ".result")
        assert main(["place", path, "--out", str(out)]) == 0
        outs[path] = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert "t4:0" in text and "accelerator:0" in text  # the named file's table, then the plain one's
    a, b = outs[named], outs[plain]
    assert a["max_load"] == b["max_load"] == pytest.approx(2.75)
    assert [(d["name"], d["load"], d["nodes"]) for d in a["devices"]] == [
        (d["name"].replace("accelerator", "t4"), d["load"], d["nodes"]) for d in b["devices"]]
    assert (a["maxLoad"], a["fpgas"], a["cpus"]) == (b["maxLoad"], b["fpgas"], b["cpus"])  # reference fields
    # the split written back in the reference form evaluates the same on the named file
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"fpgas": a["fpgas"], "cpus": a["cpus"]}))
    assert main(["evaluate", named, str(split), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_load"] == pytest.approx(2.75)


def test_a_graph_written_by_inspect_keeps_its_accelerators_name(tmp_path, capsys):
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn

    model = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    g = tmp_path / "g.json"
    assert main(["inspect", model, "--devices", "t4:2,cpu:1", "-o", str(g)]) == 0
    assert json.loads(g.read_text())["accelerator"] == "t4"
    out = tmp_path / "r.json"
    capsys.readouterr()
    assert main(["place", str(g), "--out", str(out)]) == 0
    kinds = {d["kind"] for d in json.loads(out.read_text())["devices"]}
    assert kinds <= {"t4", "cpu"} and "t4" in kinds


def test_a_cluster_job_of_a_named_reference_workload_runs_on_the_clusters_accelerator(tmp_path):
    """The cluster maps the workload's two kinds to its accelerator and host: the file's accelerator kind
    (t4) onto the kind the job's ``accelerator`` names (without it, a cluster with no t4 is an error:
    tests/test_cluster_reference_accelerator_kind.py)."""
    from placement.cluster.curves import job_graph
    from placement.cluster.formats import parse_jobs

    path = _write(tmp_path, "named.json", accelerator="t4")
    job = {"name": "w", "model": path, "samples": 10, "accelerator": "a100"}
    jl = parse_jobs({"cluster": {"devices": "a100:2,cpu:1"}, "jobs": [job]})
    graph, cluster, _ = job_graph(jl.jobs[0], jl.cluster)
    assert graph.kinds == ("a100", "cpu") and [k.name for k in cluster.kinds] == ["a100", "cpu"]
    assert [k.count for k in cluster.kinds] == [2, 1]
