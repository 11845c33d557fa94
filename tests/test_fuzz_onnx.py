"""Property-based tests of the ONNX reader: truncated, bit-flipped and structurally broken models give
a clear InputError naming the file (or load and place correctly), never another exception or a hang."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphs.errors import InputError, PlacementError
from graphs.evaluate import evaluate
from graphs.onnx_workload import onnx_workload
from solvers.auto import solve
from solvers.base import SolveOptions, Status
from tests.onnx_models import small_cnn

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _bytes() -> bytes:
    return small_cnn().SerializeToString()


def _check(path, tmp):
    try:
        w = onnx_workload(path, "t4:2,cpu:1")
    except InputError as e:
        assert str(path) in str(e)
        return
    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=10))
    assert sol.status in (Status.OPTIMAL, Status.FEASIBLE, Status.INFEASIBLE)
    if sol.assignment is not None:
        assert evaluate(w.graph, w.cluster, sol.assignment).valid


@FUZZ
@given(st.data())
def test_truncated_models(tmp_path, data):
    blob = _bytes()
    cut = data.draw(st.integers(0, len(blob) - 1))
    path = tmp_path / "cut.onnx"
    path.write_bytes(blob[:cut])
    _check(str(path), tmp_path)


@FUZZ
@given(st.data())
def test_bit_flipped_models(tmp_path, data):
    blob = bytearray(_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    path = tmp_path / "flip.onnx"
    path.write_bytes(bytes(blob))
    _check(str(path), tmp_path)


@FUZZ
@given(st.sampled_from(["drop_node", "dangle_input", "cycle", "duplicate_output", "empty"]),
       st.integers(0, 5))
def test_structurally_broken_graphs(tmp_path, kind, k):
    import onnx

    m = small_cnn()
    nodes = m.graph.node
    k = k % len(nodes)
    if kind == "drop_node":
        del nodes[k]
    elif kind == "dangle_input":
        target = next(n for n in list(nodes[k:]) + list(nodes) if len(n.input))
        target.input[0] = "no_such_tensor"
    elif kind == "cycle":
        nodes[0].input[0] = nodes[-1].output[0]
    elif kind == "duplicate_output":
        nodes[k].output[0] = nodes[(k + 1) % len(nodes)].output[0]
    else:
        del nodes[:]
    path = tmp_path / f"{kind}.onnx"
    onnx.save(m, str(path))
    try:
        _check(str(path), tmp_path)
    except PlacementError as e:  # any typed error is a clear one
        assert str(e)


def test_fuzz_helpers_build_a_valid_model():
    assert np.frombuffer(_bytes(), dtype=np.uint8).size > 100
