"""The reference-format reader: a clear error, naming file and node/edge, for every bad-input class."""

import json

import numpy as np
import pytest

from graphs.errors import CycleError, InputError
from graphs.reference import parse_split, read_split, read_workload


def doc(nodes=None, edges=None, **top):
    d = {"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
         "nodes": nodes if nodes is not None else [
             {"id": 1, "supportedOnFpga": 1, "cpuLatency": 2.0, "fpgaLatency": 1.0, "size": 10},
             {"id": 2, "supportedOnFpga": 1, "cpuLatency": 4.0, "fpgaLatency": 2.0},
             {"id": 3, "supportedOnFpga": 0, "cpuLatency": 1.0, "fpgaLatency": 0.0},
         ],
         "edges": edges if edges is not None else [
             {"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.25},
         ]}
    d.update(top)
    return d


def write(tmp_path, data, name="w.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_reads_a_valid_file(tmp_path):
    w = read_workload(write(tmp_path, doc()))
    g, cl = w.graph, w.cluster
    assert g.kinds == ("accelerator", "cpu") and g.num_nodes == 3 and g.num_edges == 2
    assert [k.name for k in cl.kinds] == ["accelerator", "cpu"]
    assert cl.kinds[0].count == 2 and cl.kinds[0].memory == 100.0 and cl.kinds[0].pays_communication
    assert cl.kinds[1].memory is None and not cl.kinds[1].pays_communication
    assert np.isinf(g.compute[0, 2])  # unsupported on the accelerator
    assert g.comm[0].tolist() == [0.5, 0.25, 0.0] and g.memory.tolist() == [10, 0, 0]


def bad(tmp_path, data, pattern, exc=InputError):
    path = write(tmp_path, data)
    with pytest.raises(exc) as e:
        read_workload(path)
    assert path in str(e.value)
    assert e.match(pattern)


def test_cycle_is_named(tmp_path):
    edges = [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.25},
             {"sourceId": 3, "destId": 1, "cost": 0.0}]
    bad(tmp_path, doc(edges=edges), r"cycle: (1 -> 2 -> 3|2 -> 3 -> 1|3 -> 1 -> 2)", CycleError)


def test_self_loop(tmp_path):
    bad(tmp_path, doc(edges=[{"sourceId": 2, "destId": 2, "cost": 0}]), r"cycle: 2 -> 2", CycleError)


def test_dangling_edge(tmp_path):
    bad(tmp_path, doc(edges=[{"sourceId": 1, "destId": 9, "cost": 0}]), r"edge 1 -> 9: node 9 does not exist")


def test_duplicate_ids(tmp_path):
    d = doc()
    d["nodes"][2]["id"] = 1
    bad(tmp_path, d, r"node id 1 is used twice")


@pytest.mark.parametrize("field,value,pattern", [
    ("cpuLatency", -1.0, r"node 2: cpuLatency must not be negative"),
    ("fpgaLatency", "fast", r"node 2: fpgaLatency must be a number"),
    ("size", None, r"node 2: size must be a number"),
    ("supportedOnFpga", 2, r"node 2: supportedOnFpga must be true/false or 0/1"),
    ("isBackwardNode", "yes", r"node 2: isBackwardNode must be"),
])
def test_bad_node_fields(tmp_path, field, value, pattern):
    d = doc()
    d["nodes"][1][field] = value
    bad(tmp_path, d, pattern)


def test_nan_and_inf_costs(tmp_path):
    text = json.dumps(doc()).replace('"cpuLatency": 4.0', '"cpuLatency": NaN')
    bad(tmp_path, text, r"node 2: cpuLatency must be a finite number")
    text = json.dumps(doc()).replace('"cost": 0.5', '"cost": Infinity')
    bad(tmp_path, text, r"edge 1 -> 2: cost must be a finite number")


def test_out_edges_with_different_costs(tmp_path):
    edges = [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 1, "destId": 3, "cost": 0.7}]
    bad(tmp_path, doc(edges=edges), r"node 1: its out-edges carry different costs \(0.5 and 0.7\)")


def test_backward_to_forward_edge(tmp_path):
    d = doc()
    d["nodes"][0]["isBackwardNode"] = 1
    bad(tmp_path, d, r"edge 1 -> 2 goes from a backward node to a forward node")


@pytest.mark.parametrize("missing", ["maxFPGAs", "maxCPUs", "maxSizePerFPGA", "nodes", "edges"])
def test_missing_top_level_fields(tmp_path, missing):
    d = doc()
    del d[missing]
    bad(tmp_path, d, f"missing top-level field '{missing}'")


@pytest.mark.parametrize("missing", ["id", "cpuLatency", "fpgaLatency", "supportedOnFpga"])
def test_missing_node_fields(tmp_path, missing):
    d = doc()
    del d["nodes"][1][missing]
    bad(tmp_path, d, "missing field|has no 'id'")


def test_missing_edge_fields(tmp_path):
    bad(tmp_path, doc(edges=[{"sourceId": 1, "destId": 2}]), r"edges\[0\]: missing field 'cost'")


def test_not_json_truncated_and_empty(tmp_path):
    text = json.dumps(doc())
    bad(tmp_path, text[: len(text) // 2], r"not valid JSON: .* line 1")
    bad(tmp_path, "", r"not valid JSON")
    bad(tmp_path, "[1, 2]", r"top level must be a JSON object")
    bad(tmp_path, doc(nodes=[], edges=[]), r"no nodes")
    bad(tmp_path, doc(maxFPGAs=0, maxCPUs=0), r"no device")
    bad(tmp_path, doc(maxFPGAs=1.5), r"maxFPGAs must be an integer")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_workload(str(tmp_path / "nope.json"))


def test_split_reader(tmp_path):
    w = read_workload(write(tmp_path, doc()))
    a = read_split(write(tmp_path, {"fpgas": [{"nodes": [1]}, {"nodes": [2]}], "cpus": [{"nodes": [3]}]},
                         "s.json"), w.graph, w.cluster)
    assert a.tolist() == [0, 1, 2]
    with pytest.raises(InputError, match="does not place 1 node"):
        parse_split({"fpgas": [{"nodes": [1]}], "cpus": [{"nodes": [3]}]}, w.graph, w.cluster)
    with pytest.raises(InputError, match="node 1 is placed twice"):
        parse_split({"fpgas": [{"nodes": [1]}, {"nodes": [1, 2]}], "cpus": [{"nodes": [3]}]},
                    w.graph, w.cluster)
    with pytest.raises(InputError, match="which the workload does not have"):
        parse_split({"fpgas": [{"nodes": [1, 2, 3, 7]}]}, w.graph, w.cluster)
    with pytest.raises(InputError, match="uses 3 accelerator devices but the workload has only 2"):
        parse_split({"fpgas": [{"nodes": [1]}, {"nodes": [2]}, {"nodes": [3]}]}, w.graph, w.cluster)
