"""A wrong argument of ``place_model``, ``place_module`` or ``PlacementPass`` is an :class:`InputError`
naming the parameter, never a bare exception from deep inside (a wrong type is also a ``TypeError``);
and a module whose export fails on data-dependent control flow is refused without a line printed."""

import logging
import math

import onnx_ir as ir
import pytest

import placement
from graphs.errors import InputError
from graphs.transformer import transformer_model
from placement.passes import PlacementPass


@pytest.fixture(scope="module")
def small_model():
    return transformer_model(layers=2, hidden=64)


def _refused(call, name: str) -> InputError:
    """The error ``call`` raises: an InputError (so a PlacementError) that names ``name``."""
    with pytest.raises(InputError) as e:
        call()
    assert isinstance(e.value, placement.PlacementError)
    assert name in str(e.value), str(e.value)
    return e.value


# --------------------------------------------------------------------------- place_model
@pytest.mark.parametrize("kw, name", [
    ({"costs": 5}, "costs"),
    ({"costs": ["roofline"]}, "costs"),
    ({"costs": b"roofline"}, "costs"),
    ({"costs": " "}, "costs"),
    ({"dims": [("batch", 4)]}, "dims"),
    ({"dims": "batch=4"}, "dims"),
    ({"dims": {1: 2}}, "dims"),
    ({"dims": {"batch": "4"}}, "dims"),
    ({"dims": {"batch": True}}, "dims"),
    ({"dims": {"batch": 0}}, "dims"),
    ({"dims": {"batch": math.nan}}, "dims"),
    ({"training": True, "backward_factor": "2"}, "backward_factor"),
    ({"training": True, "backward_factor": None}, "backward_factor"),
    ({"training": True, "backward_factor": True}, "backward_factor"),
    ({"training": True, "backward_factor": math.nan}, "backward_factor"),
    ({"training": True, "backward_factor": -1.0}, "backward_factor"),
    ({"training": True, "optimizer": 5}, "optimizer"),
    ({"training": True, "optimizer": None}, "optimizer"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": True}, "batch_size"),
    ({"batch_size": "4"}, "batch_size"),
    ({"solver": 5}, "solver"),
    ({"solver": ""}, "solver"),
    ({"options": 5}, "options"),
    ({"schedule": ""}, "schedule"),
    ({"granularity": ""}, "granularity"),
    ({"tensor_parallel": 1}, "tensor_parallel"),
    ({"training": 1}, "training"),
    ({"devices": 4}, "devices"),
])
def test_place_model_refuses_a_bad_argument_naming_it(small_model, kw, name):
    kw = {"devices": "t4:2", **kw}
    _refused(lambda: placement.place_model(small_model, **kw), name)


def test_place_model_refuses_what_is_no_model_naming_it():
    _refused(lambda: placement.place_model(5, devices="t4:2"), "model")


@pytest.mark.parametrize("kw", [{"devices": 4}, {"options": 5}, {"costs": 5}, {"dims": [("batch", 4)]},
                                {"training": "yes"}, {"solver": 5}])
def test_a_wrong_type_is_also_a_type_error(small_model, kw):
    # the docs promise a TypeError for devices, training and options: it stays one, and an InputError too
    e = _refused(lambda: placement.place_model(small_model, **{"devices": "t4:2", **kw}), next(iter(kw)))
    assert isinstance(e, TypeError)


# --------------------------------------------------------------------------- PlacementPass
@pytest.mark.parametrize("kw, name", [
    ({"costs": 5}, "costs"),
    ({"dims": [("batch", 4)]}, "dims"),
    ({"training": True, "backward_factor": "2"}, "backward_factor"),
    ({"solver": 5}, "solver"),
    ({"options": 5}, "options"),
    ({"schedule": ""}, "schedule"),
    ({"tensor_parallel": 1}, "tensor_parallel"),
    ({"devices": 4}, "devices"),
])
def test_placement_pass_refuses_a_bad_argument_naming_it(small_model, kw, name):
    kw = {"devices": "t4:2", **kw}
    model = ir.serde.deserialize_model(small_model)
    _refused(lambda: PlacementPass(**kw)(model), name)


# --------------------------------------------------------------------------- place_module
def _module():
    torch = pytest.importorskip("torch")
    from tests.torch_models import mlp_sequential

    return mlp_sequential(), torch.randn(2, 64)


@pytest.mark.parametrize("kw, name", [
    ({"costs": 5}, "costs"),
    ({"costs": ["roofline"]}, "costs"),
    ({"costs": ""}, "costs"),
    ({"training": True, "backward_factor": "2"}, "backward_factor"),
    ({"training": True, "backward_factor": None}, "backward_factor"),
    ({"training": True, "backward_factor": True}, "backward_factor"),
    ({"training": True, "backward_factor": math.nan}, "backward_factor"),
    ({"training": True, "optimizer": 5}, "optimizer"),
    ({"solver": 5}, "solver"),
    ({"solver": ""}, "solver"),
    ({"options": 5}, "options"),
    ({"split_points": [1]}, "split_points"),
    ({"split_points": 3}, "split_points"),
    ({"split_points": {"0": 1}}, "split_points"),
    ({"strict": "yes"}, "strict"),
    ({"strict": None}, "strict"),
    ({"max_replicas": True}, "max_replicas"),
    ({"schedule": ""}, "schedule"),
    ({"training": 1}, "training"),
    ({"devices": ["a100:2"]}, "devices"),
])
def test_place_module_refuses_a_bad_argument_naming_it(kw, name):
    from placement.torch import place_module

    model, x = _module()
    kw = {"devices": "t4:2", **kw}
    _refused(lambda: place_module(model, (x,), **kw), name)


def test_place_module_refuses_bad_example_inputs_naming_them():
    from placement.torch import place_module

    model, x = _module()
    # a tensor is no tuple of inputs: it was read as its rows (one row: silently another shape)
    _refused(lambda: place_module(model, x, devices="t4:2"), "example_args")
    _refused(lambda: place_module(model, 5, devices="t4:2"), "example_args")
    _refused(lambda: place_module(model, None, devices="t4:2"), "example_args")
    _refused(lambda: place_module(model, (x,), [x], devices="t4:2"), "example_kwargs")
    _refused(lambda: place_module(model, (x,), 5, devices="t4:2"), "example_kwargs")
    _refused(lambda: place_module(5, (x,), devices="t4:2"), "module")


# --------------------------------------------------------------------------- nothing printed
_TORCH_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch._subclasses.fake_tensor",
                  "torch.export._trace")


def test_a_data_dependent_module_is_refused_and_nothing_is_printed(capfd):
    """``if x.sum() > 0:`` cannot be exported: torch logged a symbolic-shapes warning and printed the
    partial graph twice on stderr (about 21 lines) before the InputError; now the error says it alone.
    Records of those loggers after the call still pass (the hold goes with the call)."""
    torch = pytest.importorskip("torch")
    from placement.torch import place_module

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            if x.sum() > 0:
                return self.b(self.a(x))
            return self.a(x)

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    keep = Keep()
    for name in _TORCH_LOGGERS:
        logging.getLogger(name).addHandler(keep)
    try:
        capfd.readouterr()
        with pytest.raises(InputError, match="torch.export failed: .*data-dependent"):
            place_module(Branchy(), (torch.randn(4, 8),), devices="t4:2")
        out, err = capfd.readouterr()
        assert out == "" and err == "", err
        assert seen == []
        logging.getLogger(_TORCH_LOGGERS[0]).error("after the export")
    finally:
        for name in _TORCH_LOGGERS:
            logging.getLogger(name).removeHandler(keep)
    assert seen == ["after the export"]
