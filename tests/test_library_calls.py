"""Library calls with wrong arguments raise typed errors naming the parameter (TypeError for a wrong type,
InputError, a ValueError, for a bad value), and a library call prints nothing: its warnings are logged,
and only the command line turns them into lines on stderr."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from graphs.errors import InputError
from solvers.base import SolveOptions
from tests.onnx_models import small_cnn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- SolveOptions
@pytest.mark.parametrize("kw, error, words", [
    ({"time_limit": -1}, InputError, "time_limit=-1"),
    ({"time_limit": math.nan}, InputError, "time_limit=nan"),
    ({"time_limit": "10"}, TypeError, "time_limit"),
    ({"time_limit": True}, TypeError, "time_limit"),
    ({"threads": 0}, InputError, "threads=0"),
    ({"threads": 2.0}, TypeError, "threads"),
    ({"threads": "x"}, TypeError, "threads"),
    ({"gap": -0.1}, InputError, "gap=-0.1"),
    ({"gap": math.nan}, InputError, "gap=nan"),
    ({"gap": None}, TypeError, "gap"),
])
def test_solve_options_refuse_bad_limits_naming_them(kw, error, words):
    with pytest.raises(error, match=words):
        SolveOptions(**kw)


def test_solve_options_keep_good_limits():
    # 0 stops at once (the library's documented meaning; tests/test_dp.py relies on it); inf is no limit
    assert SolveOptions(time_limit=0).time_limit == 0
    assert SolveOptions(time_limit=math.inf).time_limit == math.inf
    assert SolveOptions(time_limit=np.float64(2.5), threads=np.int64(4), gap=0).threads == 4
    import dataclasses

    with pytest.raises(InputError, match="time_limit"):  # replace() checks too
        dataclasses.replace(SolveOptions(), time_limit=-5)


# --------------------------------------------------------------------------- in-memory ONNX models
@pytest.mark.parametrize("result, words", [
    ({}, "neither a 'devices' list nor a stage plan's 'stages'"),
    ({"status": "infeasible", "message": "too big"}, r"no placement \(status 'infeasible': too big\)"),
    ({"devices": [{"name": "gpu:0"}]}, r"devices\[0\] .* 'name' and a 'nodes' list"),
])
def test_split_and_annotate_refuse_a_result_mapping_without_a_placement(result, words):
    from placement.inmemory import annotate, split

    model = small_cnn()
    for fn in (split, annotate):
        with pytest.raises(InputError, match=f"placement: .*{words}"):
            fn(model, result)
    with pytest.raises(TypeError, match="placement: expected a Placement or a result mapping, got int"):
        split(model, 42)


# --------------------------------------------------------------------------- the torch front end
def test_torch_front_end_refuses_what_is_not_its_own():
    torch = pytest.importorskip("torch")
    from placement.torch import layer_partition, place_module, split_spec
    from tests.torch_models import mlp_sequential

    for fn in (split_spec, layer_partition):
        with pytest.raises(TypeError, match=rf"{fn.__name__}\(tp\) takes place_module's TorchPlacement, got "
                                            rf"NoneType"):
            fn(None)
    model, x = mlp_sequential(), torch.randn(2, 64)
    # a str is no list of names (its characters were read as names); one name goes in a list
    with pytest.raises(InputError, match=r"split_points='nope': give a list of module FQNs .*\['nope'\]"):
        place_module(model, (x,), split_points="nope")
    with pytest.raises(TypeError, match="split_points takes module FQNs .* got int"):
        place_module(model, (x,), split_points=3)
    with pytest.raises(TypeError, match=r"split_points takes module FQNs \(str\), got 0 \(int\)"):
        place_module(model, (x,), split_points=[0])


# --------------------------------------------------------------------------- warnings
_LIBRARY = """
import placement
from tests.onnx_models import small_cnn
p = placement.place_model(small_cnn(), devices="cpu:2", dims={"foo": 3}, max_replicas=1)
assert any("foo" in w for w in p.graph.meta["warnings"]), p.graph.meta["warnings"]
"""


def _run(args):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


def test_a_library_call_prints_nothing_and_the_command_line_prints_the_warning(tmp_path):
    """A fresh interpreter with no logging configured: the front end's warning about a dimension the
    model does not have is recorded on the graph, not printed; the command line prints it."""
    r = _run(["-c", _LIBRARY])
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout == ""
    model = str(tmp_path / "cnn.onnx")
    import onnx

    onnx.save_model(small_cnn(), model)
    r = _run(["-m", "placement", "place", model, "--devices", "cpu:2", "--dim", "foo=3", "--max-replicas",
              "1"])
    assert r.returncode == 0, r.stderr
    assert "warning: " in r.stderr and "'foo'" in r.stderr, r.stderr
