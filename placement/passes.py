"""Placement as ``onnx_ir`` passes, for compilers built on ``onnx_ir.passes``.

    >>> import onnx_ir as ir
    >>> from onnx_ir.passes.common import RemoveUnusedNodesPass
    >>> from placement.passes import PlacementPass, SplitPass
    >>> split = SplitPass()
    >>> result = ir.passes.PassManager([RemoveUnusedNodesPass(), PlacementPass(devices="a100:2,cpu:1"),
    ...                                 split])(model)                          # doctest: +SKIP
    >>> split.stages, split.manifest                                            # doctest: +SKIP

:class:`PlacementPass` is an in-place pass: it places the model (:func:`placement.place_model`, same
options), writes every node's ``placement.device``, ``placement.kind`` and ``placement.stage`` metadata
and the summary (``placement.result``) into the model, and returns ``PassResult(model, modified=True)``;
the :class:`~placement.api.Placement` is kept as ``.placement``. A Ctrl-C aborts it with
``KeyboardInterrupt`` (the model left as it was), never a pipeline that carries on with a plan cut short.

:class:`SplitPass` changes nothing (it is a side-effect-only pass in ``onnx_ir``'s terms): it cuts the
model into per-stage ``onnx_ir`` models that share its weights, by the placement it is given or, by
default, by the model's annotations (what a :class:`PlacementPass` before it wrote), exactly as
:func:`placement.split` cuts it by that placement: a stage that holds values computed from the model's
shapes holds them at the input shape it was placed at (``batch_size``, ``dims``), which the summary
records (annotations written before it did are refused where a stage depends on it). It returns a
:class:`SplitResult` (a ``PassResult`` with ``stages`` and ``manifest``); since a ``PassManager``
returns a plain ``PassResult``, the last split is also kept on the pass as ``.stages``, ``.manifest``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassBase, PassResult

from .api import Placement
from .inmemory import (
    annotate_ir,
    check_place_model_args,
    device_set,
    place_model,
    placement_result,
    split_parts,
)

if TYPE_CHECKING:
    from graphs.devices import DeviceSet

__all__ = ["PlacementPass", "SplitPass", "SplitResult"]


# the keyword options PlacementPass passes on to place_model
_PLACE_MODEL_OPTIONS = frozenset(
    name for name, par in inspect.signature(place_model).parameters.items()
    if par.kind is inspect.Parameter.KEYWORD_ONLY)


def _ir_model(model, pass_name: str) -> None:
    """Refuse, before any work, a model that is not an ``onnx_ir.Model`` (a ``ModelProto`` fails only
    after the solve otherwise)."""
    if not isinstance(model, ir.Model):
        hint = (" (convert it with onnx_ir.serde.deserialize_model, or call placement.place_model / "
                "placement.split, which take a ModelProto)") if type(model).__name__ == "ModelProto" else ""
        raise TypeError(f"{pass_name} takes an onnx_ir.Model, got {type(model).__module__}."
                        f"{type(model).__name__}{hint}")


class PlacementPass(InPlacePass):
    """Place the model and annotate its nodes in place (see the module doc). ``devices`` and the
    keyword ``options`` are those of :func:`placement.place_model` (``training``, ``costs``,
    ``batch_size``, ``solver``, ``options``, ``dims``, ...); another keyword is a ``TypeError`` here,
    a bad value of one (``costs=5``) an :class:`~graphs.errors.InputError` naming it, also here, and a
    model that is not an ``onnx_ir.Model`` a ``TypeError`` when the pass runs, before any placing.

    A Ctrl-C during the solve aborts the pass: where :func:`~placement.place_model` would return the
    best plan found so far (``solution.interrupted``), the pass raises ``KeyboardInterrupt`` instead of
    annotating the model (so a ``PassManager`` stops); that plan stays in ``.placement``."""

    def __init__(self, devices: str | DeviceSet | None = None, **options: Any) -> None:
        unknown = sorted(set(options) - _PLACE_MODEL_OPTIONS)
        if unknown:  # refused here, not when the pass runs (or never)
            raise TypeError(f"PlacementPass got unknown option(s) {', '.join(unknown)}; it takes those of "
                            f"placement.place_model: {', '.join(sorted(_PLACE_MODEL_OPTIONS))}")
        # so are bad values (place_model checks them again when the pass runs)
        device_set(devices, "PlacementPass")
        check_place_model_args("PlacementPass", **options)
        self.devices = devices
        self.options = options
        self.placement: Placement | None = None

    def call(self, model: ir.Model) -> PassResult:
        _ir_model(model, "PlacementPass")
        p = place_model(model, self.devices, **self.options)
        self.placement = p
        if p.solution.interrupted:
            # place_model returns the best plan a Ctrl-C left (solution.interrupted); a pass must not
            # carry on with it: the pipeline aborts, the model unannotated, the plan kept on the pass
            raise KeyboardInterrupt(f"PlacementPass interrupted: {p.solution.message}")
        annotate_ir(model, placement_result(p))
        return PassResult(model, modified=True)


@dataclasses.dataclass
class SplitResult(PassResult):
    """A :class:`PassResult` with the stage models (in run order) and the manifest of cut tensors."""

    stages: list = dataclasses.field(default_factory=list)
    manifest: dict = dataclasses.field(default_factory=dict)


class SplitPass(PassBase):
    """Cut the model into per-stage models (see the module doc). ``placement``: a
    :class:`~placement.api.Placement`, a result mapping or a result file's path; ``None`` reads the
    model's annotations (node placement, and the input shape the model was placed at)."""

    def __init__(self, placement: Placement | Mapping | str | os.PathLike | None = None) -> None:
        self.placement = placement
        self.stages: list[ir.Model] = []
        self.manifest: dict = {}

    @property
    def in_place(self) -> Literal[True]:
        return True

    @property
    def changes_input(self) -> Literal[False]:
        return False

    def call(self, model: ir.Model) -> SplitResult:
        _ir_model(model, "SplitPass")
        s = split_parts(model, self.placement)
        self.stages = [sm.model for sm in s.submodels]
        self.manifest = s.manifest()
        return SplitResult(model, False, self.stages, self.manifest)
