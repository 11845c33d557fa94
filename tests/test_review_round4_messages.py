"""From a new-user review (round 4): messages that hid what was wrong.

* A Helix layout that serves 0 tokens/s (layers no node holds, a node whose layers end where no node's
  begin) was evaluated ``feasible``, exit 0, without a word on why; the solver too could return a layout
  of zero flow as ``feasible``. Now: ``invalid``, naming the layers or the node, exit 1; the solver
  returns no layout.
* ``--devices FILE`` with a device file of figures only (as ``placement calibrate`` writes) said "no
  devices given" without naming the file; now it names it, says it has no counts and how to give them.
* ``placement calibrate cpu --from-profile config.json`` printed onnx's two-line parse error; a model
  whose external data file is missing was called "truncated or corrupt". Now one line each, saying what
  the file is, or that the external data file is missing.

Expected values are by hand from the layouts and files built here.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from graphs.errors import InputError
from graphs.helix import (
    SINK,
    SOURCE,
    HelixCluster,
    HelixLink,
    HelixModel,
    HelixNode,
    NodeProfile,
    max_flow,
    unserved_reasons,
)
from placement.cli import main
from tests.instances import WORKLOADS

SINGLE24 = os.path.join(WORKLOADS, "helix", "single24.json")


def _one_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [e for e in err if not e.startswith("note:")]
    assert len(err) == 1 and err[0].startswith("error:"), err
    for w in words:
        assert w in err[0], err
    return err[0]


# ------------------------------------------------------------------------------------------- Helix
def _line(n: int, L: int, cap: float = 100.0, link: float = 1e6) -> HelixCluster:
    """``n`` identical nodes that can hold up to ``L`` layers at ``cap`` tokens/s, every pair and the
    source and sink joined by links of ``link`` tokens/s."""
    prof = NodeProfile(L, tuple([cap] * L))
    nodes = tuple(HelixNode(i, f"n{i}", "x", None, {"m": prof}) for i in range(n))
    links = [HelixLink(SOURCE, i, False, {"m": link}) for i in range(n)]
    links += [HelixLink(i, SINK, False, {"m": link}) for i in range(n)]
    links += [HelixLink(a, b, True, {"m": link}) for a in range(n) for b in range(a + 1, n)]
    return HelixCluster("line", None, nodes, tuple(links), {"m": HelixModel("m", "m", L, None)})


def test_unserved_reasons_name_the_layers_no_node_holds():
    c = _line(3, 10)
    # layers 4 and 5 are held by no node (0-3 by node 0, 6-9 by node 1): by hand, no chain
    gap = {0: (0, 4), 1: (6, 4)}
    assert max_flow(c, "m", gap) == 0.0
    assert unserved_reasons(c, "m", gap) == ["layers [4, 6) are held by no node"]
    # a single layer, and the ends of the model
    assert unserved_reasons(c, "m", {0: (0, 4), 1: (5, 5)}) == ["layer 4 is held by no node"]
    assert unserved_reasons(c, "m", {0: (1, 3), 1: (4, 4)}) == ["layer 0 is held by no node",
                                                                "layers [8, 10) are held by no node"]


def test_unserved_reasons_name_a_node_whose_layers_lead_nowhere():
    c = _line(3, 10)
    # every layer held, but node 1 ends at 6 where nothing begins, and node 2 begins at 5 where nothing
    # ends (as the review's h_over.json: [48, 57) beside [56, 64))
    over = {0: (0, 5), 1: (5, 1), 2: (5, 5)}
    assert max_flow(c, "m", over) > 0  # 0 -> 2 is a chain: nothing to say
    assert unserved_reasons(c, "m", over) == []
    over = {0: (0, 5), 1: (5, 2), 2: (6, 4)}
    assert max_flow(c, "m", over) == 0.0
    assert unserved_reasons(c, "m", over) == [
        "node 1 (layers [5, 7)) ends at layer 7, where no node's layers begin",
        "node 2 (layers [6, 10)) begins at layer 6, where no node's layers end"]


def test_unserved_reasons_with_a_chain_of_layers_name_links_or_capacities():
    # a chain of layers, but no link carries tokens: the links are the reason
    c = _line(2, 4, link=0.0)
    chain = {0: (0, 2), 1: (2, 2)}
    assert max_flow(c, "m", chain) == 0.0
    (why,) = unserved_reasons(c, "m", chain)
    assert "crosses a missing link or one of zero capacity" in why
    # a node of zero capacity at its layer count: that node
    prof = NodeProfile(4, (100.0, 0.0, 100.0, 100.0))
    c = _line(2, 4)
    c = dataclasses.replace(c, nodes=(c.nodes[0], dataclasses.replace(c.nodes[1], profiles={"m": prof})))
    assert unserved_reasons(c, "m", chain) == ["node 1 (layers [2, 4)) has capacity 0 tokens/s with 2 "
                                               "layer(s)"]


def test_the_solver_returns_no_layout_of_zero_flow():
    from solvers.base import Status
    from solvers.helix_layout import solve_layout

    # no link from the source carries tokens: by hand, every layout has flow 0
    c = _line(3, 3)
    links = tuple(dataclasses.replace(e, capacity={"m": 0.0}) if e.a == SOURCE else e for e in c.links)
    r = solve_layout(dataclasses.replace(c, links=links), "m", time_limit=10)
    assert r.value == 0.0 and not r.layout
    assert r.status not in (Status.FEASIBLE, Status.OPTIMAL)
    assert "no layout with positive flow" in r.message


def _layout_file(tmp_path, name: str, layout: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"schema": "placement-helix-layout", "version": 1, "cluster": "single24",
                                "model": "llama70b", "layout": layout, "maxflow_tokens_per_s": 2045.64}))
    return str(path)


def _review_layout(**changes) -> dict:
    """The review's layout on single24's 80 layers: 12 T4 x 2 layers [0, 24), 8 L4 x 3 [24, 48), then the
    A100s, with ``changes``."""
    t4, l4 = (1, 2, 4, 7, 8, 12, 13, 15, 16, 19, 20, 22), (0, 3, 5, 11, 14, 18, 21, 23)
    layout = {str(i): [2 * j, 2] for j, i in enumerate(t4)}
    layout.update({str(i): [24 + 3 * j, 3] for j, i in enumerate(l4)})
    layout.update({"6": [48, 8], "9": [56, 8], "10": [64, 8], "17": [72, 8]})
    layout.update({str(k): v for k, v in changes.items()})
    return layout


@pytest.fixture()
def single24():
    if not os.path.isfile(SINGLE24):
        pytest.skip(f"Helix cluster file not found at {SINGLE24} (set PLACEMENT_WORKLOADS)")
    return SINGLE24


def test_evaluate_says_a_helix_layout_serving_nothing_is_invalid(single24, tmp_path, capsys):
    whole = _layout_file(tmp_path, "whole.json", _review_layout())
    assert main(["evaluate", single24, whole]) == 0  # the chain [0, 80): served
    capsys.readouterr()
    # node 6 unused: layers 48-55 held by no node (the review's h_gap.json)
    gap = _layout_file(tmp_path, "gap.json", _review_layout(**{"6": [0, 0]}))
    assert main(["evaluate", single24, gap]) == 1
    out = capsys.readouterr()
    assert "status     invalid (serves 0 tokens/s: layers [48, 56) are held by no node" in out.out
    assert "feasible" not in out.out
    err = [e for e in out.err.strip().splitlines() if e.startswith("error:")]
    assert len(err) == 1 and gap in err[0] and "serves 0 tokens/s" in err[0]
    assert "layers [48, 56) are held by no node" in err[0]
    # node 6 on [48, 57): it ends where no node begins, node 9 begins where none ends (h_over.json)
    over = _layout_file(tmp_path, "over.json", _review_layout(**{"6": [48, 9]}))
    assert main(["evaluate", single24, over, "--json"]) == 1
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["status"] == "invalid" and data["maxflow_tokens_per_s"] == 0.0
    assert "node 6 (layers [48, 57)) ends at layer 57" in data["message"]
    assert "node 6 (layers [48, 57)) ends at layer 57, where no node's layers begin" in out.err
    assert "node 9 (layers [56, 64)) begins at layer 56, where no node's layers end" in out.err


# ------------------------------------------------------------------------------------------- --devices
def _figures_only(tmp_path) -> str:
    path = tmp_path / "cpu.toml"  # as placement calibrate writes: figures, no count
    path.write_text('[devices.cpu]\nbase = "cpu"\nfp32_tflops = 0.015\nmem_bandwidth_gbs = 42.0\n')
    return str(path)


def test_a_device_file_without_counts_is_named(tmp_path, capsys):
    from graphs.devices import parse_devices

    f = _figures_only(tmp_path)
    with pytest.raises(InputError) as e:
        parse_devices(f)
    assert str(e.value).startswith(f"{f}: ") and "no counts" in str(e.value)
    model = str(tmp_path / "m.onnx")
    assert main(["example", model, "--layers", "1"]) == 0
    capsys.readouterr()
    assert main(["place", model, "--devices", f]) == 2
    err = _one_error(capsys, f, "the figures of kind cpu but no counts", "--devices cpu:2",
                     f"--device-file {f}")
    assert "no devices given" not in err
    # what the message says works
    assert main(["place", model, "--devices", "cpu:2", "--device-file", f]) == 0
    # counts given on the command line still go with a file of figures, as before
    parse_devices("cpu:2", [f])


# ------------------------------------------------------------------------------------------- calibrate
def test_calibrate_from_profile_of_a_json_file_says_what_it_is(tmp_path, capsys):
    config = tmp_path / "llama.json"
    config.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                  "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "cpu", "--from-profile", str(config), "-o", str(out)]) == 2
    _one_error(capsys, str(config), "--from-profile takes an ONNX model (.onnx)", "an LLM model config")
    assert not out.exists()


def test_calibrate_from_profile_names_a_missing_external_data_file(tmp_path, capsys):
    import onnx

    from tests.onnx_models import small_cnn

    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(model), save_as_external_data=True, size_threshold=100, location="cnn.weights")
    (tmp_path / "cnn.weights").unlink()
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "cpu", "--from-profile", str(model), "-o", str(out)]) == 2
    err = _one_error(capsys, str(model), "the external data file cnn.weights is missing",
                     str(tmp_path / "cnn.weights"))
    assert "truncated" not in err and "corrupt" not in err
    assert not out.exists()
