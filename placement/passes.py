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
the :class:`~placement.api.Placement` is kept as ``.placement``.

:class:`SplitPass` changes nothing (it is a side-effect-only pass in ``onnx_ir``'s terms): it cuts the
model into per-stage ``onnx_ir`` models that share its weights, by the placement it is given or, by
default, by the model's annotations (what a :class:`PlacementPass` before it wrote). It returns a
:class:`SplitResult` (a ``PassResult`` with ``stages`` and ``manifest``); since a ``PassManager``
returns a plain ``PassResult``, the last split is also kept on the pass as ``.stages``, ``.manifest``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassBase, PassResult

from .api import Placement
from .inmemory import annotate_ir, place_model, placement_result, split_parts

__all__ = ["PlacementPass", "SplitPass", "SplitResult"]


class PlacementPass(InPlacePass):
    """Place the model and annotate its nodes in place (see the module doc). ``devices`` and the
    keyword ``options`` are those of :func:`placement.place_model` (``training``, ``costs``,
    ``batch_size``, ``solver``, ``options``, ``dims``, ...)."""

    def __init__(self, devices=None, **options) -> None:
        self.devices = devices
        self.options = options
        self.placement: Placement | None = None

    def call(self, model: ir.Model) -> PassResult:
        p = place_model(model, self.devices, **self.options)
        annotate_ir(model, placement_result(p))
        self.placement = p
        return PassResult(model, modified=True)


@dataclasses.dataclass
class SplitResult(PassResult):
    """A :class:`PassResult` with the stage models (in run order) and the manifest of cut tensors."""

    stages: list = dataclasses.field(default_factory=list)
    manifest: dict = dataclasses.field(default_factory=dict)


class SplitPass(PassBase):
    """Cut the model into per-stage models (see the module doc). ``placement``: a
    :class:`~placement.api.Placement` or a result mapping; ``None`` reads the model's annotations."""

    def __init__(self, placement: Placement | Mapping | None = None) -> None:
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
        s = split_parts(model, self.placement)
        self.stages = [sm.model for sm in s.submodels]
        self.manifest = s.manifest()
        return SplitResult(model, False, self.stages, self.manifest)
