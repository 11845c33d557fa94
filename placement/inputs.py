"""What a command was given, decided in one place: every command of :mod:`placement.cli` asks here which
reader and which model take its input, instead of each front end claiming files.

* :func:`workload_kind` — what a workload path holds: ``"helix"`` (a Helix LLM-serving cluster file),
  ``"llm"`` (an LLM to decode: a model config, or an ONNX decoder with its KV cache when decoding is
  asked for), ``"piper"`` (a Piper-format workload), ``"onnx"`` (another ONNX model) or ``"graph"``
  (the reference format and every other operator graph);
* :func:`model_for` — the model ``place`` and ``evaluate`` run on it: ``"helix"``, ``"llm"``,
  ``"stages"`` (the stage model: replicas, tensor parallelism, variants, memory by schedule) or
  ``"pipeline"`` (one device per stage, the NeurIPS 2020 model);
* :func:`holds_stage_plan` — whether a result file holds a stage plan (``stages``), which ``evaluate``,
  ``show``, ``split`` and ``run`` read as such.

Files are read only when their name says they may be one of these (``.json`` or ``.onnx``); an
unreadable file is left to the reader that takes it, which names the problem.
"""

from __future__ import annotations

import os

from graphs.errors import InputError
from graphs.jsonio import read_json

__all__ = ["WORKLOAD_KINDS", "MODELS", "workload_kind", "model_for", "holds_stage_plan", "asks_to_decode"]

WORKLOAD_KINDS = ("helix", "llm", "piper", "onnx", "graph")
MODELS = ("helix", "llm", "stages", "pipeline")

def _json(path: str):
    """The JSON at ``path``, or ``None`` when it is not a readable ``.json`` file."""
    if not str(path).lower().endswith(".json") or not os.path.isfile(path):
        return None
    try:
        return read_json(path)
    except InputError:
        return None


def asks_to_decode(args) -> bool:
    """Do ``args`` ask to decode an LLM: ``--context``, ``--objective goodput`` or one of its options,
    or (``evaluate``) a plan that records a context?"""
    from .llm_cmd import _GOODPUT_FLAGS  # the goodput objective's options

    if args is None:
        return False
    if getattr(args, "context", None) is not None or getattr(args, "objective", None) == "goodput" \
            or any(getattr(args, dest, None) for dest, _ in _GOODPUT_FLAGS):
        return True
    plan = getattr(args, "split", None)
    data = _json(plan) if plan else None
    section = data.get("problem") if isinstance(data, dict) else None
    return isinstance(section, dict) and "context" in section


def workload_kind(path: str, args=None) -> str:
    """What the workload ``path`` holds (one of :data:`WORKLOAD_KINDS`; see the module doc). An ONNX
    model asked to decode (:func:`asks_to_decode`) without past key/value inputs is an
    :class:`InputError`: it is not a decoder exported with its KV cache."""
    from graphs.helix import is_helix
    from graphs.llm import is_llm_config, is_onnx_decoder
    from graphs.piper import is_piper

    low = str(path).lower()
    if low.endswith(".onnx"):
        if not asks_to_decode(args):
            return "onnx"
        if not is_onnx_decoder(path):
            raise InputError("--context and --objective goodput decode an LLM: this ONNX model has no past "
                             "key/value inputs (past_key_values.N.key), so it is not a decoder exported with "
                             "its KV cache", source=str(path))
        return "llm"
    data = _json(path)
    if data is None:
        return "graph"
    for kind, test in (("helix", is_helix), ("llm", is_llm_config), ("piper", is_piper)):
        try:
            if test(data):
                return kind
        except InputError:
            continue
    return "graph"


def model_for(kind: str, args) -> str:
    """The model ``place`` runs on a workload of ``kind`` with ``args`` (one of :data:`MODELS`): a Helix
    cluster and an LLM their own; a Piper workload the stage model; an ONNX model the stage model unless
    ``--max-replicas 1``, a solver without a stage form or an option only one device per stage takes asks
    for that placement (:func:`placement.onnx_stages.takes_stage_model`); any other graph one device per
    stage."""
    if kind in ("helix", "llm"):
        return kind
    if kind == "piper":
        return "stages"
    if kind == "onnx":
        from .onnx_stages import takes_stage_model

        return "stages" if takes_stage_model(args) else "pipeline"
    return "pipeline"


def holds_stage_plan(path: str) -> bool:
    """Does the result file ``path`` hold a stage plan (``stages``; schema version 2, or version 1's
    ``"format": "placement-replicated"``)?"""
    from .stages import is_stage_result

    data = _json(path)
    return data is not None and is_stage_result(data)
