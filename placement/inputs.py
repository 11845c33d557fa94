"""What a command was given, decided in one place: every command of :mod:`placement.cli` asks here which
reader and which model take its input, instead of each front end claiming files.

* :func:`workload_kind` — what a workload path holds: ``"helix"`` (a Helix LLM-serving cluster file),
  ``"llm"`` (an LLM to decode: a model config, or an ONNX decoder with its KV cache when decoding is
  asked for), ``"piper"`` (a Piper-format workload), ``"onnx"`` (another ONNX model) or ``"graph"``
  (the reference format and every other operator graph);
* :func:`model_for` — the model ``place`` and ``evaluate`` run on it: ``"helix"``, ``"llm"``,
  ``"stages"`` (the stage model: replicas, tensor parallelism, variants, memory by schedule) or
  ``"pipeline"`` (one device per stage, the NeurIPS 2020 model);
* :func:`takes_stage_model` — whether ``place`` solves an ONNX model on the stage model or with one
  device per stage (:func:`one_device_per_stage_by`: the option that chose the latter; and
  :func:`wants_serving`, :func:`serving_default`: whether a batch-size sweep or a latency target is
  asked for, and which model takes it by default);
* :func:`holds_stage_plan` — whether a result's JSON holds a stage plan (``stages``), which ``evaluate``,
  ``show``, ``split`` and ``run`` read as such;
* :func:`file_kind` — what any file given to a command is (a workload of one of the kinds above, a
  result, a frontier, a job list, a split, an ONNX model...), so that a file given in the wrong place is
  refused saying what it is and what was expected (:func:`not_a_workload`, :func:`refuse_not_result`),
  not with the first field the wrong reader misses.

Files are read only when their name says they may be one of these (``.json`` or ``.onnx``); an
unreadable file is left to the reader that takes it, which names the problem.
"""

from __future__ import annotations

import math
import os

from graphs.errors import InputError
from graphs.jsonio import read_json

__all__ = ["WORKLOAD_KINDS", "GOODPUT_FLAGS", "MODELS", "workload_kind", "model_for", "result_json",
           "refuse_empty_result", "holds_stage_plan", "asks_to_decode", "time_limit_seconds", "checked_gap",
           "takes_stage_model", "one_device_per_stage_by", "wants_serving", "serving_default", "file_kind",
           "not_a_workload", "refuse_not_result", "raw_options"]

WORKLOAD_KINDS = ("helix", "llm", "piper", "onnx", "graph")
MODELS = ("helix", "llm", "stages", "pipeline")
#: an LLM's tokens of each sequence's KV cache when none is given (``place``, ``evaluate``, cluster jobs)
DEFAULT_CONTEXT = 2048

def _json(path: str):
    """The JSON at ``path``, or ``None`` when it is not a readable ``.json`` file."""
    if not str(path).lower().endswith(".json") or not os.path.isfile(path):
        return None
    try:
        return read_json(path)
    except InputError:
        return None


#: the goodput objective's options (an LLM model config's ``--objective goodput``), as (dest, flag)
GOODPUT_FLAGS = (("requests", "--requests"), ("ttft_slo", "--ttft-slo"), ("tpot_slo", "--tpot-slo"),
                 ("disaggregate", "--disaggregate"), ("simulate", "--simulate"),
                 ("trace_seconds", "--trace-seconds"), ("plot", "--plot"))


def _decode_flag(args) -> str:
    """The option by which ``args`` ask to decode an LLM (:func:`asks_to_decode`), for its message."""
    if getattr(args, "context", None) is not None:
        return "--context"
    if getattr(args, "objective", None) == "goodput":
        return "--objective goodput"
    return next((flag for dest, flag in GOODPUT_FLAGS if getattr(args, dest, None)), "the plan's context")


def asks_to_decode(args) -> bool:
    """Do ``args`` ask to decode an LLM: ``--context``, ``--objective goodput`` or one of its options,
    or (``evaluate``) a plan that records a context?"""
    if args is None:
        return False
    if getattr(args, "context", None) is not None or getattr(args, "objective", None) == "goodput" \
            or any(getattr(args, dest, None) for dest, _ in GOODPUT_FLAGS):
        return True
    plan = getattr(args, "split", None)
    data = _json(plan) if plan else None
    section = data.get("problem") if isinstance(data, dict) else None
    return isinstance(section, dict) and "context" in section


def workload_kind(path: str, args=None) -> str:
    """What the workload ``path`` holds (one of :data:`WORKLOAD_KINDS`; see the module doc). An ONNX
    model asked to decode (:func:`asks_to_decode`) without past key/value inputs is an
    :class:`InputError`: it is not a decoder exported with its KV cache."""
    from graphs.llm import is_onnx_decoder

    low = str(path).lower()
    if low.endswith(".onnx"):
        if not asks_to_decode(args):
            return "onnx"
        if not is_onnx_decoder(path):
            raise InputError(f"{_decode_flag(args)} applies to an LLM decoder (--context, --objective "
                             "goodput and its options decode one): this ONNX model has no past key/value "
                             "inputs (past_key_values.N.key), so it is not a decoder exported with its KV "
                             "cache",
                             source=str(path))
        return "llm"
    data = _json(path)
    if data is None:
        return "graph"
    known = _workload_format(data)
    if known is not None:
        return known[0]
    if not (isinstance(data, dict) and "nodes" in data):  # an operator graph has nodes: only else ask
        why = not_a_workload(path, data)
        if why:
            raise InputError(why, source=str(path))
    return "graph"


_UNREAD = object()
#: the schemas of the files the tool writes that are neither workloads nor results, in words
_CLUSTER_REPORT = "a shared-cluster report (written by placement cluster --out)"
_OUTPUT_WORDS = {"placement-frontier": "a frontier (written by placement frontier --out)",
                 "placement-split": "a split manifest (written by placement split)",
                 "placement-cluster": _CLUSTER_REPORT, "placement-cluster-comparison": _CLUSTER_REPORT,
                 "placement-curve": "a cached throughput curve (written by placement cluster)",
                 "placement-provision": "an LLM provisioning (written by placement provision CONFIG.json "
                                        "--out)"}
#: the fields of a Hugging Face model config, of which an LLM config needs the first two
_LLM_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "model_type", "architectures")


def _workload_format(data) -> tuple[str, str] | None:
    """``(kind, words)`` of a workload JSON in one of the formats that say what they are (a Helix
    cluster, an LLM model config, a Piper file), else ``None`` (a reference-format graph, or another
    file)."""
    from graphs.helix import is_helix
    from graphs.llm import is_llm_config
    from graphs.piper import is_piper

    for kind, test, words in (("helix", is_helix, "a Helix cluster file"),
                              ("llm", is_llm_config, "an LLM model config"),
                              ("piper", is_piper, "a Piper-format workload")):
        try:
            if test(data):
                return kind, words
        except InputError:
            continue
    return None


def file_kind(path: str, data=_UNREAD) -> tuple[str, str]:
    """``(kind, words)``: what the file ``path`` holds (``data``: its JSON, when already read), for
    messages about a file given in the wrong place. ``kind`` is ``"onnx"``, ``"result"`` (a result of
    ``place --out``, either model), ``"helix-layout"``, ``"output"`` (a frontier, split manifest or
    cluster report: ``"frontier"`` for a frontier), ``"job-list"``, ``"split"`` (node lists per device:
    ``devices``, or the reference format's fpgas/cpus), ``"llm-partial"`` (a model config missing a
    field it needs), one of the workload kinds ``"helix"``, ``"llm"``, ``"piper"``, ``"graph"`` (with
    nodes), or ``"unknown"`` (unreadable, or none of these: the reader that takes it names the
    problem, as it does for a path that names no file)."""

    if _is_onnx(path) and os.path.isfile(path):  # a missing nope.onnx is no ONNX model: "no such file"
        return "onnx", "an ONNX model"
    if data is _UNREAD:
        data = _json(path)
    if not isinstance(data, dict):
        return "unknown", "not a file the tool reads"
    schema = data.get("schema")
    if schema == "placement-result" or data.get("format") == "placement-replicated":
        return "result", "a placement result (written by placement place --out)"
    if schema == "placement-helix-layout":
        return "helix-layout", "a Helix layout (written by placement place CLUSTER.json --model M --out)"
    if schema in _OUTPUT_WORDS:
        return ("frontier" if schema == "placement-frontier" else "output"), _OUTPUT_WORDS[schema]
    known = _workload_format(data)
    if known is not None:
        return known
    if isinstance(data.get("nodes"), list):
        return "graph", "a reference-format operator graph"
    if isinstance(data.get("jobs"), list):
        return "job-list", "a shared-cluster job list (placement cluster)"
    devices = data.get("devices")
    if isinstance(data.get("fpgas"), list) or isinstance(data.get("cpus"), list) or (
            isinstance(devices, dict) and devices and all(isinstance(v, list) for v in devices.values())):
        return "split", "a split (node lists per device)"
    has = [k for k in _LLM_FIELDS if k in data]
    if has:
        lacks = [k for k in _LLM_FIELDS[:2] if k not in data]
        return "llm-partial", (f"an LLM model config (it has {', '.join(has)}) without "
                               f"{' and '.join(repr(k) for k in lacks)}: a model config needs "
                               f"num_hidden_layers and hidden_size")
    return "unknown", "not a file the tool reads"


def _recorded_workload(path: str, data) -> str:
    """The workload a result records (``source``, or a stage plan's ``workload``), as a path from here
    (results store it relative to the result file); ``WORKLOAD`` when it records none."""
    src = data.get("workload") or data.get("source") if isinstance(data, dict) else None
    if not isinstance(src, str) or not src:
        return "WORKLOAD"
    if not os.path.isabs(src):
        src = os.path.join(os.path.dirname(os.path.abspath(path)), src)
        here = os.path.relpath(src)
        src = src if here.startswith(os.pardir) else here  # from here when below here, else absolute
    return src


def _first_plan_file(data) -> str | None:
    points = data.get("points") if isinstance(data, dict) else None
    first = points[0] if isinstance(points, list) and points and isinstance(points[0], dict) else {}
    return first.get("plan_file") if isinstance(first.get("plan_file"), str) else None


def not_a_workload(path: str, data=_UNREAD) -> str | None:
    """Why the file ``path`` (``data``: its JSON, when already read) is not a workload, saying what it is
    and what to do with it, when :func:`file_kind` knows it for another kind of file; ``None`` otherwise
    (a workload, or a file the workload's reader names the problem of)."""
    if data is _UNREAD:
        data = _json(path)
    kind, words = file_kind(path, data)
    if kind == "result":
        return (f"this is {words}, not a workload: evaluate it with placement evaluate "
                f"{_recorded_workload(path, data)} {path}, or simulate it with placement show {path}")
    if kind == "helix-layout":
        return f"this is {words}, not a workload: evaluate it with placement evaluate CLUSTER.json {path}"
    if kind == "frontier":
        plan = _first_plan_file(data)
        return (f"this is {words}, not a workload: each of its plans is a result file"
                + (f" ({plan}, ...): placement show {plan}" if plan else ""))
    if kind == "output":
        return f"this is {words}, not a workload"
    if kind == "job-list":
        return f"this is {words}, not a workload: run it with placement cluster {path}"
    if kind == "split":
        return f"this is {words}, not a workload: evaluate it with placement evaluate WORKLOAD {path}"
    if kind == "llm-partial":
        return f"this looks like {words}"
    return None


def refuse_not_result(path: str, command: str, data=_UNREAD, *, model: str | None = None) -> None:
    """An :class:`InputError` when the file ``path`` given as ``command``'s result (``data``: its JSON,
    when already read) is known (:func:`file_kind`) for a file that is not one: an ONNX model (with
    ``model``, the command's model argument, a JSON file: the two swapped), a workload, a frontier, a
    job list. A result, a split, a Helix layout or an unknown file pass, to the reader that takes it."""
    if data is _UNREAD:
        data = _json(path)
    kind, words = file_kind(path, data)
    takes = f"placement {command} takes a result file (written by placement place --out)" + \
        (" or a split (node lists per device)" if command == "evaluate" else "")
    if kind == "onnx":
        if model is not None and str(model).lower().endswith(".json"):  # the two arguments swapped
            raise InputError(f"placement {command} takes {'WORKLOAD' if command == 'evaluate' else 'MODEL'} "
                             f"RESULT: the model first (placement {command} {path} {model})")
        raise InputError(f"this is {words}: {takes}", source=str(path))
    if kind == "llm-partial":
        words = "an LLM model config"
    if kind in ("helix", "llm", "piper", "graph", "llm-partial"):
        raise InputError(f"this is {words}, a workload: {takes}; place it with placement place {path} "
                         f"--out RESULT.json", source=str(path))
    if kind == "frontier":
        plan = _first_plan_file(data)
        raise InputError(f"this is {words}, not one result: {takes}; each of the frontier's plans is one"
                         + (f" ({plan}, ...)" if plan else ""), source=str(path))
    if kind in ("output", "job-list"):
        raise InputError(f"this is {words}: {takes}", source=str(path))
    if kind == "helix-layout" and command != "evaluate":  # evaluate re-scores one on its cluster file
        raise InputError(f"this is {words}: placement {command} takes the placement result of a model (an "
                         f"ONNX model, an operator graph, a Piper file), not a Helix layout; score a layout "
                         f"with placement evaluate CLUSTER.json {path}", source=str(path))


def model_for(kind: str, args) -> str:
    """The model ``place`` runs on a workload of ``kind`` with ``args`` (one of :data:`MODELS`): a Helix
    cluster and an LLM their own; a Piper workload the stage model; an ONNX model the stage model unless
    ``--max-replicas 1``, a solver without a stage form or an option only one device per stage takes asks
    for that placement (:func:`takes_stage_model`); any other graph one device per
    stage."""
    if kind in ("helix", "llm"):
        return kind
    if kind == "piper":
        return "stages"
    if kind == "onnx":
        return "stages" if takes_stage_model(args) else "pipeline"
    return "pipeline"


def result_json(path: str):
    """The JSON of the result file ``path``, read once for every question below; ``None`` when it is
    not a readable ``.json`` file (the reader that takes it then names the problem)."""
    return _json(path)


def refuse_empty_result(data, command: str, source: str) -> None:
    """A result file (``data``, read from ``source``) that holds no plan (a command that found none
    writes one, with its status: :func:`placement.results.no_plan_result`) is an :class:`InputError` for
    ``command`` (``evaluate``, ``show``, ``split``, ``run``), naming the file and its status, not a
    missing field further on."""
    if not isinstance(data, dict) or data.get("schema") != "placement-result":
        return
    if data.get("stages") == [] and not data.get("devices"):
        why = f": {data['message']}" if data.get("message") else ""
        raise InputError(f"the result holds no plan (status {data.get('status', 'unknown')}{why}); there is "
                         f"nothing to {command}", source=str(source))


def holds_stage_plan(data) -> bool:
    """Does a result's JSON, as read (:func:`result_json`), hold a stage plan (``stages``; schema version
    2, or version 1's ``"format": "placement-replicated"``)?"""
    from .results import is_stage_result

    return isinstance(data, dict) and is_stage_result(data)


def time_limit_seconds(value: float | None, flag: str = "--time-limit") -> float | None:
    """A command's time limit checked, the one rule for every ``--time-limit`` (place, frontier,
    provision, cluster's ``--time-limit`` and ``--curve-time-limit``, bench's ``--time-limit`` and
    ``--limit``): a positive number of seconds, ``inf`` (or none given) for no limit (``None``). Zero is
    refused rather than taken as "stop at once" (the library's ``time_limit=0`` does that), as NaN and
    negatives are; the error names ``flag``."""
    if value is None or value == math.inf:
        return None
    if not value > 0:  # NaN too
        raise InputError(f"{flag} must be a positive number of seconds (inf: none), got {value!r}")
    return float(value)


def checked_gap(value: float) -> float:
    """``--gap`` checked (place, frontier, provision): a relative gap ``(value - bound) / value``, so
    from 0 to 1; NaN and inf are refused, naming the flag."""
    if not 0 <= value <= 1:
        raise InputError(f"--gap must be a relative gap from 0 to 1, got {value:g}")
    return value


def _is_onnx(path: str) -> bool:
    return str(path).lower().endswith(".onnx")


def _stage_solver(name: str | None) -> bool:
    """Has ``--solver`` a stage form (:data:`solvers.registry.STAGE_SOLVERS`)? An unknown name is left
    to the registry's error."""
    from solvers.registry import ALIASES, STAGE_SOLVERS

    return name is None or ALIASES.get(name, name) in STAGE_SOLVERS


def _one_device_per_stage_only(args, library: bool = False) -> str | None:
    """The option (its flag, or with ``library`` its :func:`placement.place_model` parameter) of ``args``
    that only the one-device-per-stage placement solves so far, or ``None``: a latency objective or
    target, a batch-size sweep, a given split or a memory limit."""
    objective = getattr(args, "objective", None) or "max-load"
    if objective != "max-load":
        return f"objective {objective!r}" if library else f"--objective {objective}"
    if getattr(args, "latency_slo", None) is not None:
        return "--latency-slo"
    if isinstance(getattr(args, "batch_size", None), str):
        return f"--batch-size {args.batch_size}"
    for flag in ("split", "memory_limit"):
        if getattr(args, flag, None) is not None:
            return "--" + flag.replace("_", "-")
    return None


def takes_stage_model(args, *, library: bool = False) -> bool:
    """Does ``place`` solve the stage model (replicas, tensor parallelism, schedule-aware memory) on this
    ONNX model? It does by default, for training and inference alike, when the solver has a stage form
    (:data:`solvers.registry.STAGE_SOLVERS`). ``--max-replicas 1`` asks for the one-device-per-stage
    placement, as does a solver without a stage form or an option only that placement solves so far
    (see :func:`_one_device_per_stage_only`; :func:`one_device_per_stage_by` names the one that did);
    that option together with ``--max-replicas`` above 1 is an :class:`InputError` naming it, except a
    batch-size sweep and ``--latency-slo`` (:func:`wants_serving`), which the stage model takes then
    (:mod:`placement.serving_stages`). ``library``: the rule of :func:`placement.place_model`, its errors
    naming its parameters rather than flags."""
    return _model_choice(args, library)[0]


def one_device_per_stage_by(args) -> str | None:
    """The option (as typed: ``--objective latency``, ``--split``, ``--solver local-search``...) that
    made ``place`` put this ONNX model on one device per stage where the stage model is its default, so
    that the command can say so; ``None`` where the stage model solves it, where ``--max-replicas 1``
    asked for that placement in so many words, or for any other workload."""
    return _model_choice(args)[1]


def _model_choice(args, library: bool = False) -> tuple[bool, str | None]:
    """The rule of :func:`takes_stage_model`: whether the stage model solves this ONNX model, and the
    option that chose one device per stage instead where ``--max-replicas`` was not given."""
    mr = getattr(args, "max_replicas", None)
    if not _is_onnx(args.workload) or mr == 1:
        return False, None
    flag = _one_device_per_stage_only(args, library)
    if flag is not None and wants_serving(args):
        # a sweep or a latency target: the stage model's too for inference (placement.serving_stages),
        # neither model's for training (an error follows); the option that chooses is another one
        import copy

        rest = copy.copy(args)
        rest.latency_slo, rest.batch_size = None, None
        own = _one_device_per_stage_only(rest, library)
    else:
        own = flag
    solver = getattr(args, "solver", None)
    if not _stage_solver(solver):  # with --max-replicas above 1 an error names the solver further on
        return False, (None if mr is not None else own or
                       (f"solver={solver!r}" if library else f"--solver {solver}"))
    if flag is None:
        return True, None
    if mr is None and not uses_stage_model(args):  # training
        return False, own
    if own is None:
        return True, None
    if mr is None:  # an option only one device per stage takes: that placement, as asked
        return False, own
    given, unset, one = ((f"max_replicas={mr}", "without max_replicas", "max_replicas=1") if library else
                         (f"--max-replicas {mr}", "without --max-replicas", "--max-replicas 1"))
    raise InputError(f"{own} applies to the one-device-per-stage placement only, which the stage model "
                     f"({given}: replicas, tensor parallelism; it minimises the time per sample, max-load) "
                     f"does not take; {unset}, or with {one}, that placement solves it")


def wants_serving(args) -> bool:
    """A batch-size sweep (``--batch-size auto`` or a list) or a latency target (``--latency-slo``)?
    The stage model (:mod:`placement.serving_stages`) takes them where :func:`takes_stage_model` says,
    one device per stage (:mod:`placement.serving`) otherwise."""
    return (getattr(args, "latency_slo", None) is not None
            or isinstance(getattr(args, "batch_size", None), str))


def check_counts(args, names: tuple[str, ...] = ("max_replicas", "microbatches")) -> None:
    """Each of the integer options ``names`` that ``args`` sets (``--max-replicas``, ``--microbatches``,
    ``--context``...) is at least 1, else one :class:`InputError` naming the flag: the one check of every
    command that takes them."""
    for name in names:
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")


def _one_device_why(args) -> str:
    """Why this command places one device per stage, in the words of its refusals."""
    if getattr(args, "max_replicas", None) == 1:
        return " (--max-replicas 1)"
    if not str(getattr(args, "workload", "")).lower().endswith(".onnx"):
        return " (a reference-format operator graph)"
    objective = getattr(args, "objective", None)
    if objective not in (None, "max-load"):
        return f" (--objective {objective})"
    if getattr(args, "solver", None) not in (None, "auto"):
        return f" (--solver {args.solver})"
    return ""


def refuse_stage_device_options(args) -> None:
    """The one-device-per-stage placement reads its devices from ``--devices`` and device files (an ONNX
    model) or from the workload file itself (a reference-format operator graph): the stage model's
    device options are refused, naming the option and what sets that figure here, never ignored."""
    for name in ("max_devices", "device_memory", "bandwidth"):
        if getattr(args, name, None) is not None:
            flag = f"--{name.replace('_', '-')}"
            if not str(getattr(args, "workload", "")).lower().endswith(".onnx"):
                raise InputError(f"{flag} does not apply to a reference-format operator graph: "
                                 f"{_REFERENCE_FIGURES[name]}, and no option "
                                 f"changes that (edit the file)")
            # the stage model takes --device-memory on an ONNX model; --max-devices and --bandwidth are
            # a Piper file's alone (placement.stages.load refuses them on an ONNX model)
            where = "of Piper-format workloads" if name != "device_memory" else \
                "of Piper-format workloads and ONNX models"
            raise InputError(f"{flag} applies to stage-model plans only ({where}), not to this "
                             f"one-device-per-stage placement"
                             f"{_one_device_why(args)}: {_ONE_DEVICE_FIGURES[name]}")


#: where a reference-format operator graph's device figures come from (graphs.reference.parse_workload)
_REFERENCE_FIGURES = {
    "max_devices": "its device counts come from the file itself (maxFPGAs accelerators, maxCPUs CPUs)",
    "device_memory": "its accelerators' memory comes from the file itself (maxSizePerFPGA)",
    "bandwidth": "its transfer times come from the file itself (each edge's cost)"}
#: what sets the same figure for an ONNX model placed one device per stage
_ONE_DEVICE_FIGURES = {
    "max_devices": "set the device counts with --devices (e.g. --devices a100:3,cpu:1)",
    "device_memory": "set a device kind's memory in a device file (--device-file FILE, memory_gib)",
    "bandwidth": "set a device kind's link bandwidth in a device file (--device-file FILE, link_gbs)"}


def refuse_schedule_options(args) -> None:
    """``--schedule``, ``--microbatches`` or ``--granularity`` where one device per stage is placed: one
    :class:`InputError` naming the option and why that placement was chosen, never an option ignored."""
    for flag in ("schedule", "microbatches", "granularity"):
        if getattr(args, flag, None) is not None:
            raise InputError(f"--{flag} applies to stage plans (the stage model, the default for ONNX models "
                              f"and Piper files), not to this one-device-per-stage placement"
                              f"{_one_device_why(args)}")


def uses_stage_model(args) -> bool:
    """Does a command with ``--max-replicas`` (``frontier``, ``provision``) solve the stage model? Above
    1 asks for it, 1 for one device per stage; without it, :func:`serving_default`. ``place`` decides by
    :func:`takes_stage_model`, which also weighs its solver and its one-device-per-stage options."""
    mr = getattr(args, "max_replicas", None)
    return mr > 1 if mr is not None else serving_default(args)


def serving_default(args) -> bool:
    """Does a serving command without ``--max-replicas`` take the stage model? For inference, yes: without
    a latency target a plan with replicas is never slower than one device per stage (the stage model at
    operator granularity holds every such plan, and layer nodes are refined). With ``--latency-slo``
    (``place`` and ``provision``), where the stage answer is not proven the one-device-per-stage search
    also runs in the time left and the better answer is kept
    (``placement.cli.serving._one_device_per_stage_too`` and
    ``_one_device_per_stage_provision_too``): a stage plan's latency runs its stages one after another,
    a one-device-per-stage plan's lets independent branches overlap."""
    return not getattr(args, "training", False)


def raw_options(args) -> dict:
    """``place``'s ``--memory-limit`` (GiB, in bytes; ``inf``: none), ``--split`` and ``--restarts`` as
    ``SolveOptions.raw`` takes them (:data:`solvers.registry.RAW_OPTIONS`), for ``place`` and its
    sweeps alike; ``frontier`` and ``provision`` have none of them. The values are checked by the
    command line before."""
    raw = {}
    memory_limit = getattr(args, "memory_limit", None)
    if memory_limit is not None and math.isfinite(memory_limit):
        raw["memory_limit"] = memory_limit * 2**30
    for key in ("split", "restarts"):
        if getattr(args, key, None) is not None:
            raw[key] = getattr(args, key)
    return raw
