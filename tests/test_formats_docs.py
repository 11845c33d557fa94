"""docs/formats.md's JSON examples are read by the readers they document: the reference-format split file
places a workload through ``placement evaluate`` and ``place --solver expert --split``, and the request
mix is read by ``graphs.llm.read_mix`` (as a file and as a bare list). The first example, the
``devices`` split: tests/test_split_and_sweep_options.py."""

import json
import os
import re

import pytest

from graphs.llm import Bucket, read_mix
from placement.cli import main

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "formats.md")


def _examples() -> list[str]:
    with open(DOC, encoding="utf-8") as f:
        return re.findall(r"^```json\n(.*?)^```", f.read(), re.S | re.M)


def test_the_page_has_its_three_examples():
    blocks = [json.loads(b) for b in _examples()]
    assert [sorted(b) for b in blocks] == [["devices"], ["cpus", "fpgas"], ["buckets"]]


def _reference_workload(path, ids: list[int], accelerators: int, cpus: int) -> str:
    """A chain of the nodes ``ids`` (in order) in the reference format, with that many devices."""
    nodes = [{"id": i, "name": f"n{i}", "cpuLatency": 4.0, "fpgaLatency": 1.0, "supportedOnFpga": 1,
              "isBackwardNode": 0, "colorClass": i, "size": 1.0} for i in ids]
    edges = [{"sourceId": a, "destId": b, "cost": 0.5} for a, b in zip(ids, ids[1:])]
    path.write_text(json.dumps({"maxSizePerFPGA": 100.0, "maxFPGAs": accelerators, "maxCPUs": cpus,
                                "nodes": nodes, "edges": edges}))
    return str(path)


@pytest.mark.parametrize("command", [["evaluate", "{w}", "{s}", "--json"],
                                     ["place", "{w}", "--solver", "expert", "--split", "{s}", "--json"]])
def test_the_reference_format_split_places_its_groups_in_order(tmp_path, capsys, command):
    """As the page says: each non-empty group of ``fpgas`` is the next device of kind accelerator, of
    ``cpus`` the next cpu; the nodes (by id) are a workload's, here a chain of them; a valid plan."""
    example = _examples()[1]
    data = json.loads(example)
    want = {f"{kind}:{i}": group["nodes"] for key, kind in (("fpgas", "accelerator"), ("cpus", "cpu"))
            for i, group in enumerate(g for g in data[key] if g["nodes"])}
    assert len(want) == 3  # the example shows two accelerators and a CPU
    split = tmp_path / "split.json"
    split.write_text(example)
    ids = sorted(n for nodes in want.values() for n in nodes)
    work = _reference_workload(tmp_path / "w.json", ids, len(data["fpgas"]), len(data["cpus"]))
    capsys.readouterr()
    assert main([a.format(w=work, s=str(split)) for a in command]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] and result["problems"] == []
    assert {d["name"]: d["node_ids"] for d in result["devices"] if d["node_ids"]} == want


def test_the_request_mix_reads_as_a_file_and_as_a_bare_list(tmp_path):
    example = _examples()[2]
    path = tmp_path / "mix.json"
    path.write_text(example)
    mix = read_mix(path)
    assert mix.buckets == (Bucket(256, 128, 5.0), Bucket(4096, 256, 1.0))
    assert mix.shares == pytest.approx([5 / 6, 1 / 6])
    assert read_mix(json.loads(example)["buckets"]).buckets == mix.buckets
