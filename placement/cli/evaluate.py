"""``placement evaluate WORKLOAD RESULT``: score a result file written by ``place`` (or a split, node
lists per device) on its workload, each kind of workload by its own reader, after refusing a result
placed on another kind of workload."""

from __future__ import annotations

import math
import sys

from ..outputs import output_file
from .common import (
    EXIT_NO_PLACEMENT,
    EXIT_OK,
    UsageError,
    add_frontend_options,
    add_output_options,
    frontend,
    frontend_given,
    helix_commands,
    llm_commands,
    print_result,
    recorded_frontend,
    refuse_for_helix,
    refuse_schedule_options,
    refuse_stage_device_options,
    stage_model,
)

__all__ = ["add_parser", "run", "note_max_load"]


def add_parser(sub) -> None:
    e = sub.add_parser("evaluate", help="evaluate a given split or result", description="Evaluate a "
                       "placement on a workload: a result file written by placement place --out (for an "
                       "ONNX model, with the front-end options it records unless given again), or a split "
                       "(node lists per device, docs/formats.md).")
    e.add_argument("workload", help="workload file (.json) or ONNX model (.onnx)")
    e.add_argument("split", help="result file (placement place --out) or split file (node lists per "
                   "device: 'devices', or the reference format's 'fpgas' and 'cpus')")
    add_output_options(e)
    add_frontend_options(e)
    stage_model().add_options(e)
    llm_commands().add_options(e)
    e.set_defaults(seed=None)  # --simulate's seed: None = not given (0), so that it is refused without it


#: what each workload kind (:data:`placement.inputs.WORKLOAD_KINDS`) is, in the words of evaluate's errors
_WORKLOAD_WORDS = {"helix": "a Helix cluster file", "llm": "an LLM (a model config or an ONNX decoder)",
                   "piper": "a Piper-format workload", "onnx": "an ONNX model",
                   "graph": "a reference-format operator graph"}
#: evaluate's options a Helix cluster file takes (every other one is refused, never ignored)
_EVALUATE_HELIX_OPTIONS = ("--out", "--json")


def _result_kind(data) -> tuple[str | None, str]:
    """The workload kind a result file (decoded JSON) was placed on, where the file says so for sure
    (``None``: it does not, or it is a split in the reference format), and its words for errors."""
    from ..results import is_stage_result

    if helix_commands().is_layout_result(data):
        return "helix", f"a Helix layout of model {data.get('model')!r} (cluster {data.get('cluster')!r})"
    if is_stage_result(data):
        settings = data.get("problem") if isinstance(data.get("problem"), dict) else data
        placed = f" (placed on {data['workload']})" if isinstance(data.get("workload"), str) else ""
        if "context" in settings:
            kind = "llm"
        elif "granularity" in settings or "costs" in settings:
            kind = "onnx"
        elif not {"devices", "batch_size", "context"} & set(settings):  # a Piper file records no front end
            kind = "piper"
        else:
            return None, "a stage plan"
        return kind, f"a stage plan (stages with replicas) of {_WORKLOAD_WORDS[kind]}{placed}"
    if isinstance(data, dict) and data.get("schema") == "placement-result":
        path = data.get("workload") or data.get("source")  # source: the name older files gave it
        placed = f" (placed on {path})" if isinstance(path, str) else ""
        if isinstance(data.get("frontend"), dict):
            return "onnx", f"a one-device-per-stage placement of an ONNX model{placed}"
        if data.get("time_unit") == "t":  # the reference format's own time unit; an ONNX model's is ms
            return "graph", f"a one-device-per-stage placement of a reference-format operator graph{placed}"
        return None, "a one-device-per-stage placement"
    return None, "a split"


def _refuse_mismatched_result(args, kind: str, data) -> None:
    """A result placed on another kind of workload than ``args.workload`` (``kind``) is refused, naming
    both, before any reader mistakes it for its own kind (a stage plan read as a split, a Helix layout as
    an operator graph)."""
    from graphs.errors import InputError

    placed, words = _result_kind(data)
    if kind == "helix" and placed != "helix":
        raise InputError(f"the result is {words}, not a Helix layout; {args.workload} is a Helix cluster "
                         f"file, which is evaluated with a layout placement place wrote for it (placement "
                         f"place {args.workload} --model M --out LAYOUT.json)", source=args.split)
    if placed is None or placed == kind:
        return
    if placed == "graph" and kind == "onnx" and isinstance(data, dict) and not data.get("stages"):
        return  # an older result may lack the fields that tell; the reader below names what does not match
    raise InputError(f"the result is {words}, but {args.workload} is {_WORKLOAD_WORDS[kind]}: a result is "
                     f"evaluated on the workload it was placed on", source=args.split)


def run(args) -> int:
    """Score a split (reference format) or a result file written by ``place`` on the workload."""
    from graphs.jsonio import read_json
    from graphs.reference import parse_split
    from solvers.base import Solution, Status

    from ..api import Placement, evaluate
    from ..load import check_input_path, check_workload_path, load_workload
    from ..results import assignment_from_result, checked_result

    # both name files before either's kind is guessed from its name: a missing nope.onnx given as the
    # result is no ONNX model, nor a sign that the two were swapped
    check_workload_path(args.workload)
    check_input_path(args.split, "a result file (written by placement place --out) or a split")
    if args.workload.lower().endswith(".json") and str(args.split).lower().endswith(".onnx"):
        raise UsageError(f"placement evaluate takes WORKLOAD RESULT: the model first "
                          f"(placement evaluate {args.split} {args.workload})")
    if args.out:
        output_file(args.out, "--out")
    from ..inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json, workload_kind

    if args.seed is not None and args.simulate is None:  # it seeds the simulated trace, and nothing else
        raise UsageError("--seed applies with --simulate RATE|auto (it seeds the simulated trace of an LLM "
                          "model config's goodput result); add --simulate or drop --seed")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if getattr(args, "context", None) is not None and args.context < 1:  # named by its flag, not the model's
        raise UsageError(f"--context must be a positive integer (tokens), got {args.context}")
    saved = result_json(args.split)  # read once: None unless a readable .json file
    kind = workload_kind(args.workload, args)  # placement/inputs.py
    simulated = any(getattr(args, f, None) is not None for f in ("simulate", "trace_seconds", "plot"))
    if kind != "llm" and simulated:
        raise UsageError("--simulate, --trace-seconds and --plot apply to an LLM model config's goodput "
                          "result (config.json with num_hidden_layers and hidden_size)")
    refuse_not_result(args.split, "evaluate", saved, model=args.workload)  # a frontier, a workload...
    refuse_empty_result(saved, "evaluate", args.split)
    if saved is not None:
        _refuse_mismatched_result(args, kind, saved)
    if kind == "helix":  # a layout's max-flow (placement/cli/helix.py)
        refuse_for_helix(args, add_parser, "evaluate", _EVALUATE_HELIX_OPTIONS,
                         frozenset({"workload", "split"}))
        return helix_commands().evaluate(args)
    if args.progress and getattr(args, "simulate", None) is None:  # the one step of evaluate with a bar
        print("note: --progress: evaluate draws a bar only while --simulate runs the serving simulator; "
              "scoring a plan reports no progress", file=sys.stderr)
    if kind == "llm":
        return llm_commands().evaluate(args)
    if kind == "piper":  # a stage plan (placement/stages.py), as every stage plan below
        return stage_model().evaluate(args, frontend_given(args))
    if kind == "onnx" and holds_stage_plan(saved):
        given = frontend(args)
        # the settings the plan was placed with: version 2 keeps them under problem, version 1 at the top
        settings = saved.get("problem") if isinstance(saved.get("problem"), dict) else saved
        recorded = saved.get("max_load")
        if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
            recorded *= 1e3  # in the ms per sample the table above prints, not the file's seconds
        typed = {**given, "schedule": getattr(args, "schedule", None),
                 "microbatches": getattr(args, "microbatches", None)}
        return stage_model().evaluate(args, given, on_value=lambda value: note_max_load(
            recorded, "ms per sample", value * 1e3, "ms per sample",
            _changed_settings(typed, settings, args.split)))
    refuse_stage_device_options(args)  # a one-device-per-stage placement's evaluation
    refuse_schedule_options(args)  # (show simulates a schedule: --schedule is show's)
    data = saved if saved is not None else read_json(args.split)  # read_json names what is wrong
    is_result = isinstance(data, dict) and data.get("schema") == "placement-result"
    typed = given = frontend(args)
    if is_result and args.workload.lower().endswith(".onnx"):
        # the front-end options the result was computed with, unless given again here
        given = {**recorded_frontend(data, args.split), **{k: v for k, v in typed.items() if v is not None}}
    w = load_workload(args.workload, **given)
    if is_result:
        a = assignment_from_result(checked_result(data, args.split), w.graph, w.cluster, source=args.split)
        what = "placement"
    else:
        a = parse_split(data, w.graph, w.cluster, source=args.split)
        what = "split"
    ev = evaluate(w.graph, w.cluster, a)
    # a plan that breaks a constraint is no placement: "invalid", as a stage plan's evaluation says
    status = Status.FEASIBLE if ev.valid else Status.INVALID
    # a split-max result is scored on its objective too (max forward load + max backward load), beside
    # the max-load, as place printed and wrote it
    split = is_result and data.get("objective_name") == "split-max"
    if split:
        from graphs.evaluate import split_max
    value = split_max(w.graph, w.cluster, a) if split else ev.max_load
    sol = Solution(a, value, status, f"given {what}", message=f"{what} from {args.split}")
    print_result(args, Placement(w.graph, w.cluster, sol, ev, "split-max" if split else "max-load"))
    recorded = data.get("max_load") if is_result else None
    if is_result:
        now = _max_load_words(data, w.graph.meta.get("unit"), w.graph.batch_size)
        note_max_load(recorded, _max_load_words(data), ev.max_load, now,
                       _changed_settings(typed, data.get("frontend"), args.split))
    return EXIT_OK if ev.valid else EXIT_NO_PLACEMENT


def _max_load_words(data: dict, unit: str | None = None, batch: int | None = None) -> str:
    """The unit of a one-device-per-stage result's max-load (``data``, the file), in words: its
    ``time_unit`` (``unit``: the one evaluated now), per run of the batch for an ONNX model (per batch of
    ``batch``, else of the batch size the file records). A stage plan's note is in the ms per sample
    its table prints (:func:`run`)."""
    unit = unit or data.get("time_unit") or "t"
    if not isinstance(data.get("frontend"), dict):
        return unit  # a reference-format graph's time, in its own unit
    batch = batch or data["frontend"].get("batch_size")
    return f"{unit} per batch of {batch}" if batch else f"{unit} per run of the batch"


def _kinds(devices: str) -> list[str]:
    """A ``--devices`` text's ``kind:count`` parts, in any order and spacing (one set of devices)."""
    return sorted("".join(part.split()) for part in devices.split(",") if part.strip())


def _changed_settings(given: dict, recorded, result_path: str) -> list[str]:
    """The settings given on the command line that differ from those the result file ``result_path``
    records (``recorded``: its ``frontend``, or a stage plan's ``problem``), each as ``--flag VALUE,
    the file records ...``: ``given`` holds the ONNX front end's (:func:`frontend`) and, for a stage
    plan, ``schedule`` and ``microbatches``."""
    import os

    if not isinstance(recorded, dict):
        return []
    here = os.path.dirname(os.path.abspath(result_path))
    out = []
    for key, flag in (("schedule", "--schedule"), ("microbatches", "--microbatches")):  # a stage plan's
        v, rv = given.get(key), recorded.get(key)
        if v is not None and rv is not None and v != rv:
            out.append(f"{flag} {v}, the file records {rv}")
    b, rb = given.get("batch_size"), recorded.get("batch_size")
    if b is not None and rb is not None and b != rb:
        out.append(f"--batch-size {b}, the file records batch {rb}")
    d, rd = given.get("devices"), recorded.get("devices")
    if d is not None and isinstance(rd, str) and _kinds(d) != _kinds(rd):
        out.append(f"--devices {d}, the file records {rd}")
    f, rf = given.get("device_files"), recorded.get("device_files") or []
    # the file stores its device files relative to itself
    if f is not None and sorted(map(os.path.abspath, f)) != sorted(os.path.join(here, x) for x in rf):
        out.append(f"--device-file {', '.join(f)}, the file records {', '.join(rf) or 'none'}")
    c, rc = given.get("costs"), recorded.get("costs")
    if c is not None and isinstance(rc, dict):  # a profile's measurements: given again, measured again
        out.append(f"--costs {c}{' (measured now)' if c == 'profile' else ''}, the file records its own "
                   f"measurements")
    elif c is not None and c != (rc or "roofline") and os.path.abspath(c) != os.path.abspath(rc or ""):
        out.append(f"--costs {c}, the file records {rc or 'roofline'}")
    rdims = recorded.get("dims") or {}
    for name, v in (given.get("dims") or {}).items():
        if rdims.get(name) != v:
            out.append(f"--dim {name}={v}, the file records {name}={rdims.get(name, 'none')}")
    if given.get("training") and not recorded.get("training"):
        out.append("--training, the file records inference")
    o, ro = given.get("optimizer"), recorded.get("optimizer")
    ro = ro or ("adam" if recorded.get("training") else None)  # training's default optimizer
    if o is not None and o != ro:
        out.append(f"--optimizer {o}, the file records {ro or 'none'}")
    return out


def note_max_load(recorded, then: str, value: float, now: str, changed: list[str]) -> None:
    """The note when the max-load evaluated now (``value`` in ``now``'s unit) is not the file's
    (``recorded``, in ``then``'s unit): the settings given that differ from the file's (``changed``) say
    why; with none changed, re-measured costs are the guess. Nothing for a file that records no
    max-load, nor where the two agree."""
    if not isinstance(recorded, (int, float)) or isinstance(recorded, bool):
        return
    if math.isclose(recorded, value, rel_tol=1e-9):
        return
    this = f"{value:.6g} {now}"
    why = ("evaluated at " + "; ".join(changed) if changed else
           "with the settings it records (the plan edited, costs re-measured, or another cost model?)")
    print(f"note: the max-load {this} is not the file's {recorded:.6g} {then}: {why}", file=sys.stderr)

