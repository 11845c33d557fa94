"""What the commands of :mod:`placement.cli` share: exit codes, the usage error, the option groups
(solve, output, ONNX front end) and their checks, the refusals of options a model does not take, and
the one way a one-device-per-stage result is written and printed (:func:`print_result`).

Nothing here imports a command module, so every command module can use it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from ..inputs import refuse_schedule_options, refuse_stage_device_options

__all__ = ["EXIT_OK", "EXIT_NO_PLACEMENT", "EXIT_USAGE", "EXIT_INTERRUPTED", "UsageError", "Parser",
           "add_solve_options", "add_output_options", "add_frontend_options", "OPTIMIZERS", "frontend",
           "frontend_given", "recorded_frontend", "print_result", "checked_number", "cli_words",
           "stage_model", "llm_commands", "helix_commands", "refuse_stage_device_options",
           "refuse_stage_options", "refuse_schedule_options", "refuse_for_helix", "HELIX_OPTIONS"]

EXIT_OK, EXIT_NO_PLACEMENT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A mistake in the command line: one ``error:`` line and exit code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit; we return a code instead
        raise UsageError(f"{self.prog}: {message}")


def add_solve_options(p: argparse.ArgumentParser) -> None:
    from solvers.base import BACKENDS, DEFAULT_BACKEND, OBJECTIVES
    from solvers.registry import solver_names

    from ..clock import LEAST_SOLVE_S

    p.add_argument("--solver", default=None,
                   help=f"solver to use (default: auto = the exact DP when it fits the limits, a labelled "
                        f"large-graph path otherwise). One of: {', '.join(solver_names())}")
    p.add_argument("--objective", default="max-load", choices=OBJECTIVES + ("goodput",),
                   help="max-load (pipelined throughput, default), split-max (training), latency, or "
                        "goodput (an LLM model config: requests/s meeting --ttft-slo and --tpot-slo, both "
                        "required, for the --requests mix)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds for the whole command from its first line (only Python's own start-up comes "
                   "before), importing, reading the model and loading the solver included: the solve gets "
                   "what is left (at "
                   f"least {LEAST_SOLVE_S:g} s, or S if less) and the best placement found by then is the "
                   "answer, its status saying so; the summary says how the time went (default: none for "
                   "the exact solvers; auto gives its large-graph path, and the integer program of "
                   "--objective latency and split-max, 300 s). A batch-size sweep, "
                   "latency target or --objective goodput shares S out over its batch sizes, naming "
                   "those it had no time for. A positive number, inf for none. The first "
                   "run after installing or updating compiles the solver's kernels first (announced on "
                   "stderr), outside S")
    p.add_argument("--gap", type=float, default=1e-4,
                   help="relative MIP gap (value - bound) / value at which an integer program stops, from 0 "
                        "to 1 (default 1e-4; auto's integer program on the stage model: 1e-6 unless given; a "
                        "Helix cluster file: (bound - value) / value at which its layout search stops)")
    p.add_argument("--threads", type=int, default=None,
                   help="solver threads, >= 1 (default: the DP takes the cores other work leaves free now, "
                        "HiGHS its own choice; the DP's waiting threads sleep rather than spin unless "
                        "OMP_WAIT_POLICY says otherwise)")
    p.add_argument("--seed", type=int, default=0, help="seed of randomised solvers (default 0)")
    p.add_argument("--subgraphs-per-device", type=int, default=1, metavar="Q",
                   help="latency objective: contiguous subgraphs one accelerator may run (default 1)")
    p.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS,
                   help=f"MIP backend of the IPs (default {DEFAULT_BACKEND})")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GiB",
                   help="auto: memory its one-device-per-stage exact DP may use before the large-graph path "
                   "takes over (default: 4e9 bytes = 3.7 GiB, or half the RAM if less); on an ONNX model it "
                   "selects that placement (the stage model has no such DP), with a note")
    p.add_argument("--split", default=None, metavar="SPLIT.json",
                   help="expert: the split to evaluate (node lists per device: {\"devices\": {\"a100:0\": "
                   "[...], ...}}, or the reference format's fpgas/cpus; docs/formats.md)")
    p.add_argument("--restarts", type=int, default=None,
                   help="local-search: number of random restarts (default 10)")


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", "-o", default=None, metavar="RESULT.json", help="write the result as JSON")
    p.add_argument("--json", action="store_true", help="print the result JSON on stdout instead of a table")
    from solvers.registry import SOLVERS

    stage = ", ".join(s.name for s in SOLVERS.values() if s.stage_progress)
    pipeline = ", ".join(s.name for s in SOLVERS.values() if s.progress)
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr even when it is "
                   f"not a terminal (place: where its solver reports progress: {stage} on the stage model; "
                   f"{pipeline} with one device per stage and the max-load objective; an LLM's goodput "
                   "search; evaluate: with --simulate; elsewhere a note says there is none)")


# graphs.training.OPTIMIZERS, spelled out so that building the parser imports nothing heavy
# (tests/test_promises.py checks that the two agree)
OPTIMIZERS = ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw")


def add_frontend_options(p: argparse.ArgumentParser) -> None:
    """Options of the ONNX front end (a reference-format workload carries its own costs and devices)."""
    g = p.add_argument_group("ONNX models")
    g.add_argument("--devices", default=None, metavar="SPEC",
                   help="cluster as kind:count pairs, e.g. a100:4,cpu:8 (a kind without a count is one "
                   "device; presets: cpu, v100, a100, "
                   "a100-80gb, h100, t4, l4), or a TOML/JSON device file with counts; a file without "
                   "counts (as placement calibrate writes) gives figures only: --devices cpu:2 "
                   "--device-file FILE (default a100:4,cpu:1)")
    g.add_argument("--device-file", dest="device_files", action="append", default=None, metavar="FILE",
                   help="TOML/JSON file defining device kinds (repeatable)")
    g.add_argument("--costs", default=None, metavar="MODEL",
                   help="roofline (default), profile (measure this CPU with onnxruntime), or a JSON "
                   "cost table (times as measured: a table's \"batch_size\" is the only --batch-size it "
                   "takes; without one it is used at any batch size, with a warning above 1)")
    from .serving import batch_size_arg

    g.add_argument("--batch-size", type=batch_size_arg, default=None, metavar="N", help="value of a symbolic "
                   "batch dimension (default 1); place, frontier and provision also take auto or a list "
                   "1,2,4")
    g.add_argument("--dim", action="append", default=None, metavar="NAME=N",
                   help="value of another symbolic input dimension (repeatable); given for the batch "
                   "dimension, it is --batch-size")
    g.add_argument("--training", action="store_true", default=None, help="add the backward pass")
    g.add_argument("--optimizer", default=None, choices=OPTIMIZERS,
                   help=f"with --training: the optimizer whose state each device keeps, one of "
                   f"{', '.join(OPTIMIZERS)} (default adam)")


def frontend(args, sweep: bool = False) -> dict:
    """The front-end keyword arguments of ``load_workload`` (``None``: not given); ``sweep``: the batch
    size may be auto or a list. (The library's warnings are printed as ``warning:`` lines by the handler
    every command installs: ``placement.cli.serving._warnings_as_lines``.)"""
    from .serving import single_batch

    dims = None
    if args.dim:
        dims = {}
        for item in args.dim:
            name, _, value = item.partition("=")
            if not name or not value.isdigit() or int(value) < 1:
                raise UsageError(f"--dim {item!r}: expected NAME=N with N a positive integer")
            dims[name] = int(value)
    if args.devices is not None and not args.devices.strip():
        raise UsageError("--devices is empty; give kind:count pairs (e.g. a100:4,cpu:1) or a device file")
    if isinstance(args.batch_size, int) and args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.optimizer is not None and not args.training and getattr(args, "command", None) != "show":
        raise UsageError("--optimizer only applies to training; add --training")
    return {**frontend_given(args), "dims": dims,
            "batch_size": args.batch_size if sweep else single_batch(args.batch_size)}


def frontend_given(args) -> dict:
    """The ONNX front-end options as given, unchecked: what a Piper-format workload refuses, naming them
    (placement.stages.load), before any advice on how to combine them."""
    return {"devices": args.devices, "device_files": args.device_files, "costs": args.costs,
            "batch_size": args.batch_size, "dims": args.dim, "training": args.training,
            "optimizer": args.optimizer}



def print_result(args, placement, out=None) -> None:
    from ..export import emit
    from ..report import format_summary, format_table
    from ..results import result_dict

    out = out or sys.stdout
    data = result_dict(placement, result_path=args.out)
    if "frontend" in data and hasattr(args, "device_files"):
        # what the library does not keep in the graph, so that show and evaluate rebuild the same one
        from ..results import source_path

        kw = frontend(args)
        data["frontend"]["dims"] = kw["dims"]
        data["frontend"]["device_files"] = [source_path(f, args.out) for f in kw["device_files"] or ()]

    def text() -> str:
        from .serving import mfu_lines

        table = format_table(placement)
        # without a plan the message is the command's error line (stderr): not said twice
        lines = ([table, ""] if table else []) + [format_summary(placement, message=placement.evaluation
                                                                 is not None)]
        clock = getattr(args, "clock", None)  # place's: what its --time-limit covered
        return "\n".join(lines) + "\n" + mfu_lines(placement) + (clock.words() if clock is not None else "")

    emit(args, data, text, out)


def checked_number(value: float | None, flag: str, *, low: float = 0.0, strict: bool = False) -> float | None:
    """``value`` checked: a number (not NaN) at least ``low`` (above it if ``strict``); inf is None."""
    if value is None:
        return None
    if math.isnan(value) or value < low or (strict and value == low):
        rel = "above" if strict else "at least"
        raise UsageError(f"{flag} must be a number {rel} {low:g}, got {value!r}")
    return None if math.isinf(value) else value


def cli_words(message: str) -> str:
    """A library message in the command line's words (:func:`placement.report.cli_message`)."""
    from ..report import cli_message

    return cli_message(message)


def stage_model():
    from .. import stages  # stage plans: Piper-format workloads, results, the table (placement/stages.py)

    return stages


def llm_commands():
    from . import llm  # decoding an LLM from its model config (placement/cli/llm.py)

    return llm


def helix_commands():
    from . import helix  # layouts of LLM layers on Helix clusters (placement/cli/helix.py)

    return helix


def refuse_stage_options(args) -> None:
    """The one-device-per-stage placement has no schedule, micro-batches, granularity or stage-model
    device options to set: one error naming the option instead of ignoring it."""
    refuse_stage_device_options(args)
    mr = getattr(args, "max_replicas", None)
    if mr is not None and mr > 1:  # replicas asked for where this placement has none
        if not str(args.workload).lower().endswith(".onnx"):
            raise UsageError(f"--max-replicas {mr}: a reference-format operator graph is placed one "
                              f"device per stage (its nodes give no parameter sizes to replicate by); "
                              f"replicas apply to ONNX models and Piper-format workloads")
        from solvers.registry import STAGE_SOLVERS

        raise UsageError(f"--max-replicas {mr}: the {args.solver} solver places one device per stage; "
                          f"replicas need one of: {', '.join(STAGE_SOLVERS)}")
    refuse_schedule_options(args)


HELIX_OPTIONS = ("--model", "--engine", "--time-limit", "--gap", "--threads", "--out", "--json")


def refuse_for_helix(args, add_parser, command: str = "place", takes: tuple[str, ...] = HELIX_OPTIONS,
                     keep: frozenset[str] = frozenset({"workload"})) -> None:
    """A Helix cluster file takes only ``takes`` of ``command``'s options (and its ``keep`` arguments):
    any other option set away from its default is refused, naming it, never ignored. ``add_parser``:
    the command module's, which declares those options and their defaults."""
    keep = {"help", "progress", *keep} | {o[2:].replace("-", "_") for o in takes}
    sub = Parser(prog="placement").add_subparsers(dest="command", parser_class=Parser)
    add_parser(sub)
    for action in sub.choices[command]._actions:
        if action.dest in keep or not action.option_strings:
            continue
        if getattr(args, action.dest, action.default) != action.default:
            said = f"it takes {', '.join(takes)}" if command == "place" else \
                f"{command} takes {', '.join(takes)} with one"
            raise UsageError(f"{action.option_strings[0]} does not apply to a Helix cluster file ({said})")


def recorded_frontend(data: dict, result_path: str) -> dict:
    """The front-end options a result records (device files relative to the result file)."""
    rec = {k: v for k, v in (data.get("frontend") or {}).items() if v not in (None, False, [], {})}
    if "device_files" in rec:
        base = os.path.dirname(os.path.abspath(result_path))
        rec["device_files"] = [os.path.join(base, f) for f in rec["device_files"]]
    return rec

