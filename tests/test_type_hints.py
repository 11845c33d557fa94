"""The library's front doors (the functions and classes a compiler pass or a training script calls)
carry type hints on every parameter and their return, and the packages say so (PEP 561 ``py.typed``)."""

from __future__ import annotations

import importlib
import inspect
import os

import pytest

FRONT_DOORS = ["placement.api", "placement.inmemory", "placement.passes", "placement.torch"]


def _public(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for meth_name, meth in vars(obj).items():
                if inspect.isfunction(meth) and (not meth_name.startswith("_") or meth_name == "__init__"):
                    yield f"{name}.{meth_name}", meth


@pytest.mark.parametrize("module_name", FRONT_DOORS)
def test_every_public_function_of_the_front_doors_is_annotated(module_name):
    module = importlib.import_module(module_name)
    missing = []
    for name, fn in _public(module):
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                missing.append(f"{name}({p.name})")
        if sig.return_annotation is inspect.Signature.empty and not name.endswith("__init__"):
            missing.append(f"{name} -> ?")
    assert not missing, missing


@pytest.mark.parametrize("package", ["graphs", "solvers", "placement"])
def test_the_packages_are_marked_typed(package):
    path = os.path.dirname(importlib.import_module(package).__file__)
    assert os.path.isfile(os.path.join(path, "py.typed"))
