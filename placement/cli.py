"""The ``placement`` command: a thin layer over the library.

``main(argv) -> int`` does the work (tests call it directly); ``console_main`` is the entry point.
Exit codes: 0 success, 1 no placement (infeasible, or a limit hit before any was found), 2 bad usage
or bad input. User mistakes print one ``error:`` line, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import time

from . import _compile_notice, _interrupt
from .outputs import Progress as _Progress
from .outputs import output_dir as _output_dir
from .outputs import output_file as _output_file

__all__ = ["main", "console_main"]

EXIT_OK, EXIT_NO_PLACEMENT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit; we return a code instead
        raise _UsageError(f"{self.prog}: {message}")


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    from solvers.base import BACKENDS, DEFAULT_BACKEND, OBJECTIVES
    from solvers.registry import solver_names

    from .clock import LEAST_SOLVE_S

    p.add_argument("--solver", default=None,
                   help=f"solver to use (default: auto = the exact DP when it fits the limits, a labelled "
                        f"large-graph path otherwise). One of: {', '.join(solver_names())}")
    p.add_argument("--objective", default="max-load", choices=OBJECTIVES + ("goodput",),
                   help="max-load (pipelined throughput, default), split-max (training), latency, or "
                        "goodput (an LLM model config: requests/s meeting --ttft-slo and --tpot-slo, both "
                        "required, for the --requests mix)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds for the whole command from its start (after Python's own start-up), "
                   "reading the model and loading the solver included: the solve gets what is left (at "
                   f"least {LEAST_SOLVE_S:g} s, or S if less) and the best placement found by then is the "
                   "answer, its status saying so; the summary says how the time went (default: none for "
                   "the exact solvers; auto gives its large-graph path, and the integer program of "
                   "--objective latency and split-max, 300 s). A batch-size sweep, "
                   "latency target or --objective goodput shares S out over its batch sizes, naming "
                   "those it had no time for. A positive number, inf for none. The first "
                   "run after installing or updating compiles the solver's kernels first (announced on "
                   "stderr), outside S")
    p.add_argument("--gap", type=float, default=1e-4,
                   help="relative MIP gap at which an IP stops, >= 0 (default 1e-4)")
    p.add_argument("--threads", type=int, default=None,
                   help="solver threads, >= 1 (default: the DP takes the cores other work leaves free now, "
                        "HiGHS its own choice)")
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


def _add_output_options(p: argparse.ArgumentParser) -> None:
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
_OPTIMIZERS = ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw")


def _add_frontend_options(p: argparse.ArgumentParser) -> None:
    """Options of the ONNX front end (a reference-format workload carries its own costs and devices)."""
    g = p.add_argument_group("ONNX models")
    g.add_argument("--devices", default=None, metavar="SPEC",
                   help="cluster as kind:count pairs, e.g. a100:4,cpu:8 (a kind without a count is one "
                   "device; presets: cpu, v100, a100, "
                   "a100-80gb, h100, t4, l4), or a TOML/JSON device file with counts (default a100:4,cpu:1)")
    g.add_argument("--device-file", dest="device_files", action="append", default=None, metavar="FILE",
                   help="TOML/JSON file defining device kinds (repeatable)")
    g.add_argument("--costs", default=None, metavar="MODEL",
                   help="roofline (default), profile (measure this CPU with onnxruntime), or a JSON "
                   "cost table")
    from .serving_cli import batch_size_arg

    g.add_argument("--batch-size", type=batch_size_arg, default=None, metavar="N", help="value of a symbolic "
                   "batch dimension (default 1); place, frontier and provision also take auto or a list "
                   "1,2,4")
    g.add_argument("--dim", action="append", default=None, metavar="NAME=N",
                   help="value of another symbolic input dimension (repeatable)")
    g.add_argument("--training", action="store_true", default=None, help="add the backward pass")
    g.add_argument("--optimizer", default=None, choices=_OPTIMIZERS,
                   help=f"with --training: the optimizer whose state each device keeps, one of "
                   f"{', '.join(_OPTIMIZERS)} (default adam)")


def _frontend(args, sweep: bool = False) -> dict:
    """The front-end keyword arguments of ``load_workload`` (``None``: not given); ``sweep``: the batch
    size may be auto or a list."""
    import logging

    class _Warnings(logging.Handler):
        def emit(self, record):
            print(f"warning: {record.getMessage()}", file=sys.stderr)

    from .serving_cli import single_batch

    log = logging.getLogger("graphs.onnx")
    if not any(type(h).__name__ == "_Warnings" for h in log.handlers):
        log.addHandler(_Warnings())  # warnings as "warning: ..." lines on stderr
    dims = None
    if args.dim:
        dims = {}
        for item in args.dim:
            name, _, value = item.partition("=")
            if not name or not value.isdigit() or int(value) < 1:
                raise _UsageError(f"--dim {item!r}: expected NAME=N with N a positive integer")
            dims[name] = int(value)
    if args.devices is not None and not args.devices.strip():
        raise _UsageError("--devices is empty; give kind:count pairs (e.g. a100:4,cpu:1) or a device file")
    if isinstance(args.batch_size, int) and args.batch_size < 1:
        raise _UsageError("--batch-size must be at least 1")
    if args.optimizer is not None and not args.training and getattr(args, "command", None) != "show":
        raise _UsageError("--optimizer only applies to training; add --training")
    return {**_frontend_given(args), "dims": dims,
            "batch_size": args.batch_size if sweep else single_batch(args.batch_size)}


def _frontend_given(args) -> dict:
    """The ONNX front-end options as given, unchecked: what a Piper-format workload refuses, naming them
    (placement.stages.load), before any advice on how to combine them."""
    return {"devices": args.devices, "device_files": args.device_files, "costs": args.costs,
            "batch_size": args.batch_size, "dims": args.dim, "training": args.training,
            "optimizer": args.optimizer}


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(prog="placement", description="Place a DNN operator graph on a set of devices.")
    parser.add_argument("--version", action="version", version=f"placement {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("place", help="compute a placement", description="Compute a placement of a "
                       "workload (reference-format JSON, Piper file or ONNX model) and print a table: one "
                       "row per stage (its devices, replicas and tensor-parallel degree), or one per "
                       "device for a one-device-per-stage placement.")
    p.add_argument("workload", help="workload file (.json) or ONNX model (.onnx)")
    _add_solve_options(p)
    _add_output_options(p)
    p.add_argument("--model", default=None, help="Helix cluster file: the model to lay out (default: "
                   "the file's only model); the time limit there defaults to 60 s")
    p.add_argument("--engine", choices=("helix", "vllm", "sglang"), default=None,
                   help="Helix cluster file: what to write beside the layout: helix (default: the layout "
                   "only) or vllm (pipeline replicas with their flags and VLLM_PP_LAYER_PARTITION); a model "
                   "config with --objective goodput: sglang (launch_server arguments, with --disaggregate "
                   "the prefill and decode servers and the router)")
    _add_frontend_options(p)
    _stages().add_options(p)
    _llm().add_options(p)
    from .serving_cli import add_place_options

    add_place_options(p)

    e = sub.add_parser("evaluate", help="evaluate a given split or result", description="Evaluate a "
                       "placement on a workload: a result file written by placement place --out (for an "
                       "ONNX model, with the front-end options it records unless given again), or a split "
                       "(node lists per device, docs/formats.md).")
    e.add_argument("workload", help="workload file (.json) or ONNX model (.onnx)")
    e.add_argument("split", help="result file (placement place --out) or split file (node lists per "
                   "device: 'devices', or the reference format's 'fpgas' and 'cpus')")
    _add_output_options(e)
    _add_frontend_options(e)
    _stages().add_options(e)
    _llm().add_options(e)
    e.set_defaults(seed=None)  # --simulate's seed: None = not given (0), so that it is refused without it

    i = sub.add_parser("inspect", help="summarise an ONNX model", description="Print an ONNX model's "
                       "operators, parameters, FLOPs and largest tensors; with -o, also write its costed "
                       "graph in the reference JSON format. Operators are counted after constant folding "
                       "(Constant nodes and shape arithmetic on constants become values), so the count is "
                       "below the model file's node count.")
    i.add_argument("model", help="ONNX model (.onnx)")
    i.add_argument("--out", "-o", default=None, metavar="GRAPH.json",
                   help="write the annotated graph (reference format) to GRAPH.json (default: write nothing)")
    _add_frontend_options(i)

    x = sub.add_parser("example", help="write an example model or workload", description="Write an "
                       "example the tool makes itself: OUT.onnx is a BERT-style encoder (ONNX, checked and "
                       "runnable in onnxruntime); OUT.json a transformer-like layer graph in the reference "
                       "format, with its own devices and costs.")
    x.add_argument("out", nargs="?", default="example.json", help="output file, .onnx or .json (default "
                   "example.json)")
    x.add_argument("--layers", type=int, default=None, help="transformer layers (encoder blocks) of the "
                   "example (default 6; not for a job list)")
    x.add_argument("--accelerators", type=int, default=None, help=".json: number of accelerators (default 4)")
    x.add_argument("--cpus", type=int, default=None, help=".json: number of CPU cores (default 1)")
    x.add_argument("--training", action="store_true", help=".json: add the backward pass (an .onnx model "
                   "is placed for training with place --training)")

    sub.add_parser("bench", help="run the benchmark suite", add_help=False,
                   description="Run solvers x workloads and write tables; see `placement bench --help`.")
    _add_pipeline_parsers(sub)
    _add_cluster_parser(sub)
    _add_serving_parsers(sub)
    _add_calibrate_parser(sub)
    return parser


def _print_result(args, placement, out=None) -> None:
    from .export import print_json, result_dict, write_json
    from .report import format_summary, format_table

    out = out or sys.stdout
    data = result_dict(placement, result_path=args.out)
    if "frontend" in data and hasattr(args, "device_files"):
        # what the library does not keep in the graph, so that show and evaluate rebuild the same one
        from .export import source_path

        kw = _frontend(args)
        data["frontend"]["dims"] = kw["dims"]
        data["frontend"]["device_files"] = [source_path(f, args.out) for f in kw["device_files"] or ()]
    with _interrupt.deferred():  # a Ctrl-C now lets the result be written, then stops
        if args.out:
            write_json(args.out, data)
        if args.json:
            print_json(data, out)
        else:
            table = format_table(placement)
            if table:
                out.write(table + "\n\n")
            # without a plan the message is the command's error line (stderr): not said twice
            out.write(format_summary(placement, message=placement.evaluation is not None) + "\n")
            from .serving_cli import mfu_lines

            out.write(mfu_lines(placement))
            clock = getattr(args, "clock", None)  # place's: what its --time-limit covered
            if clock is not None and clock.words():
                out.write(clock.words() + "\n")
            if args.out:
                out.write(f"result written to {args.out}\n")


def _number(value: float | None, flag: str, *, low: float = 0.0, strict: bool = False) -> float | None:
    """``value`` checked: a number (not NaN) at least ``low`` (above it if ``strict``); inf is None."""
    if value is None:
        return None
    if math.isnan(value) or value < low or (strict and value == low):
        rel = "above" if strict else "at least"
        raise _UsageError(f"{flag} must be a number {rel} {low:g}, got {value!r}")
    return None if math.isinf(value) else value


def _cli_words(message: str) -> str:
    """A library message in the command line's words: the arguments and options it names become flags
    (:func:`placement._flags.cli_words`), and its byte counts read in the table's units
    (:func:`placement.report.in_cli_units`)."""
    from ._flags import cli_words
    from .report import in_cli_units

    return in_cli_units(cli_words(message))


def _stages():
    from . import stages  # stage plans: Piper-format workloads, results, the table (placement/stages.py)

    return stages


def _llm():
    from . import llm_cmd  # decoding an LLM from its model config (placement/llm_cmd.py)

    return llm_cmd


def _helix():
    from . import helix_cmd  # layouts of LLM layers on Helix clusters (placement/helix_cmd.py)

    return helix_cmd


def _refuse_stage_device_options(args) -> None:
    """The one-device-per-stage placement reads its devices from ``--devices`` and device files: the
    stage model's device options are refused, naming the option, never ignored."""
    for name in ("max_devices", "device_memory", "bandwidth"):
        if getattr(args, name, None) is not None:
            raise _UsageError(f"--{name.replace('_', '-')} applies to stage-model plans only (Piper-format "
                              f"workloads, ONNX models without --max-replicas 1); set a device kind's memory "
                              f"in a device file (--device-file) for the one-device-per-stage placement")


def _refuse_stage_options(args) -> None:
    """The one-device-per-stage placement has no schedule, micro-batches, granularity or stage-model
    device options to set: one error naming the option instead of ignoring it."""
    _refuse_stage_device_options(args)
    mr = getattr(args, "max_replicas", None)
    if mr is not None and mr > 1:  # replicas asked for where this placement has none
        if not str(args.workload).lower().endswith(".onnx"):
            raise _UsageError(f"--max-replicas {mr}: a reference-format operator graph is placed one "
                              f"device per stage (its nodes give no parameter sizes to replicate by); "
                              f"replicas apply to ONNX models and Piper-format workloads")
        from solvers.registry import STAGE_SOLVERS

        raise _UsageError(f"--max-replicas {mr}: the {args.solver} solver places one device per stage; "
                          f"replicas need one of: {', '.join(STAGE_SOLVERS)}")
    _refuse_schedule_options(args)


def _refuse_schedule_options(args) -> None:
    for flag in ("schedule", "microbatches", "granularity"):
        if getattr(args, flag, None) is not None:
            raise _UsageError(f"--{flag} applies to stage-model plans (Piper files, ONNX training models, "
                              f"--max-replicas above 1), not to this one-device-per-stage placement")


_HELIX_OPTIONS = ("--model", "--engine", "--time-limit", "--threads", "--out", "--json")


def _refuse_for_helix(args, command: str = "place", takes: tuple[str, ...] = _HELIX_OPTIONS,
                      keep: frozenset[str] = frozenset({"workload"})) -> None:
    """A Helix cluster file takes only ``takes`` of ``command``'s options (and its ``keep`` arguments):
    any other option set away from its default is refused, naming it, never ignored."""
    import argparse

    keep = {"help", "progress", *keep} | {o[2:].replace("-", "_") for o in takes}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        if action.dest in keep or not action.option_strings:
            continue
        if getattr(args, action.dest, action.default) != action.default:
            said = f"it takes {', '.join(takes)}" if command == "place" else \
                f"{command} takes {', '.join(takes)} with one"
            raise _UsageError(f"{action.option_strings[0]} does not apply to a Helix cluster file ({said})")


def _cmd_place(args) -> int:
    from solvers.base import SolveOptions, Status

    from .api import place
    from .clock import Clock
    from .inputs import raw_options, time_limit_seconds, wants_serving
    from .load import load_workload
    from .serving_cli import run_place

    started = time.perf_counter()  # --time-limit is the whole command's, a sweep's too (see its help)
    time_limit = time_limit_seconds(args.time_limit)
    args.clock = Clock(time_limit, started=started)
    gap = _number(args.gap, "--gap")
    if gap is None:
        raise _UsageError("--gap must be finite")
    if args.threads is not None and args.threads < 1:
        raise _UsageError(f"--threads must be at least 1, got {args.threads}")
    if args.subgraphs_per_device < 1:
        raise _UsageError("--subgraphs-per-device must be at least 1")
    if args.seed < 0:
        raise _UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    for flag in ("max_replicas", "microbatches", "context"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise _UsageError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    _number(args.memory_limit, "--memory-limit", strict=True)
    if args.restarts is not None and args.restarts < 1:
        raise _UsageError("--restarts must be at least 1")
    raw = raw_options(args)
    if args.solver == "expert" and not args.split:
        raise _UsageError("--solver expert evaluates a given split: add --split SPLIT.json")
    if args.out:
        _output_file(args.out, "--out")
    from .inputs import model_for, workload_kind

    # what the workload is, and which model places it, decided in one place (placement/inputs.py);
    # --model says the file must be a Helix cluster (placement/helix_cmd.py checks it)
    kind = workload_kind(args.workload, args)
    if args.model is not None and kind != "helix" and os.path.isfile(args.workload):
        from graphs.errors import InputError

        what = {"onnx": "an ONNX model", "llm": "an LLM", "piper": "a Piper-format workload",
                "graph": "an operator graph"}[kind]
        raise InputError(f"--model applies to Helix cluster files (nodes, links and machine_num_dict): it "
                         f"names the model to lay out; this is {what}, not one, so drop --model {args.model}",
                         source=args.workload)
    model = "helix" if args.model is not None else model_for(kind, args)
    _note_no_progress_bar(args, model)
    if model == "helix":
        if args.engine == "sglang":
            raise _UsageError("--engine sglang applies to a model config with --objective goodput; a Helix "
                              "cluster file takes --engine helix or vllm")
        _refuse_for_helix(args)
        return _helix().place(args, args.clock.solve_limit())
    llm = model == "llm"
    if args.engine == "sglang" and not (llm and args.objective == "goodput"):
        raise _UsageError("--engine sglang applies to a model config with --objective goodput")
    if args.engine is not None and args.engine != "sglang":
        raise _UsageError("--engine applies to Helix cluster files (placement place CLUSTER.json --model M)")
    if llm:
        if args.objective == "goodput":
            return _llm().place_goodput(args)
        _llm().refuse_goodput_options(args)
        _stages().refuse_serving(args)
        return _llm().place(args)
    from .llm_cmd import _GOODPUT_FLAGS  # the goodput objective's options, listed once

    llm_flags = [flag for dest, flag in (("context", "--context"),) + _GOODPUT_FLAGS
                 if getattr(args, dest, None) is not None]
    if args.objective == "goodput" or llm_flags:
        flag = llm_flags[0] if llm_flags else "--objective goodput"
        raise _UsageError(f"{flag} applies to an LLM: a model config (config.json with num_hidden_layers and "
                          f"hidden_size) or an ONNX decoder exported with its KV cache; this workload is "
                          f"neither")
    if getattr(args, "latency_slo", None) is not None and args.solver not in (None, "auto"):
        raise _UsageError(f"--solver {args.solver} does not apply with --latency-slo: a latency target picks "
                          f"its own solvers (the stage DP and the stage integer program under the target; "
                          f"the SLO integer program for one device per stage); drop --solver")
    if model == "stages":  # load, solve, emit (placement/stages.py)
        if not args.workload.lower().endswith(".onnx"):  # a Piper-format workload
            w = _stages().load(args, _frontend_given(args))
            _stages().refuse_serving(args)
            return _stages().place(args, w)
        if wants_serving(args):
            from .serving_cli import run_place_stages  # a sweep or a latency target on the stage model

            return run_place_stages(args, _frontend(args, sweep=True))
        return _stages().place(args, _stages().load(args, _frontend(args)))
    _refuse_stage_options(args)  # --device-memory, --schedule etc. would be silently ignored here
    if wants_serving(args):  # a batch-size sweep or a latency target (placement.serving)
        code = run_place(args, _frontend(args, sweep=True))
        _note_one_device_per_stage(args, kind)
        return code
    w = load_workload(args.workload, **_frontend(args))
    progress = _Progress("placing", enabled=True if args.progress else None)
    limit = args.clock.for_solve(args.solver, threads=args.threads)
    opts = SolveOptions(objective=args.objective, time_limit=limit, gap=gap,
                        threads=args.threads, seed=args.seed, progress=progress,
                        subgraphs_per_device=args.subgraphs_per_device, backend=args.backend, raw=raw)
    try:
        p = place(w.graph, w.cluster, args.solver, opts)
    finally:
        progress.done()
    p = dataclasses.replace(p, solution=args.clock.credited(p.solution))
    _note_one_device_per_stage(args, kind)
    _print_result(args, p)
    if p.evaluation is None:
        proven = "infeasible: " if p.solution.status is Status.INFEASIBLE else ""  # as the stage model
        print(f"error: {proven}{_cli_words(p.solution.message or 'no placement found')}", file=sys.stderr)
        return EXIT_NO_PLACEMENT
    return EXIT_OK


def _note_one_device_per_stage(args, kind: str) -> None:
    """An option that switched an ONNX model (workload ``kind``) from the stage model, its default, to one
    device per stage (:func:`placement.inputs.one_device_per_stage_by`): one note naming it, never a
    silent switch. Said once the placement has run: an option refused on the way is one error line."""
    from .inputs import one_device_per_stage_by

    by = one_device_per_stage_by(args) if kind == "onnx" else None
    if by is not None:
        print(f"note: {by} applies to the one-device-per-stage placement only (the stage model, an ONNX "
              f"model's default, with replicas and tensor parallelism, does not take it), so this "
              f"model is placed with one device per stage (no replicas); --max-replicas 1 says this "
              f"placement is meant", file=sys.stderr)


def _note_no_progress_bar(args, model: str) -> None:
    """``--progress`` where ``place`` draws no bar (its solvers report no progress): one note naming
    what does not, never a flag silently ignored. A bar is drawn by the solvers that report progress:
    on the stage model (an LLM's too) their stage form's (:attr:`solvers.registry.SolverInfo.
    stage_progress`), with one device per stage their max-load pipeline form's
    (:attr:`~solvers.registry.SolverInfo.progress`); and by an LLM's goodput search."""
    if not args.progress:
        return
    from solvers.registry import ALIASES, SOLVERS

    from .inputs import wants_serving

    name = ALIASES.get(args.solver or "auto", args.solver or "auto")
    info = SOLVERS.get(name)
    sweep = wants_serving(args)
    if model == "llm" and args.objective == "goodput":
        return
    stages = model in ("stages", "llm")
    if not sweep and info is not None and (info.stage_progress if stages else
                                           model == "pipeline" and args.objective == "max-load"
                                           and info.progress):
        return
    if model == "helix":
        what = "the Helix layout's integer program reports"
    elif sweep:
        what = "a batch-size sweep or latency target reports"
    elif stages:
        what = f"the {name} solver reports on the stage model (replicas)"
    elif args.objective != "max-load":
        what = f"the {args.objective} objective's integer program reports"
    else:
        what = f"the {name} solver reports"
    staged = [n for n, s in SOLVERS.items() if s.stage_progress]
    piped = [n for n, s in SOLVERS.items() if s.progress]
    print(f"note: --progress: {what} no progress, so no bar is drawn (one is by the {', '.join(staged)} "
          f"solvers on the stage model, and by the {', '.join(piped)} solvers with one device per stage and "
          f"the max-load objective)", file=sys.stderr)


#: what each workload kind (:data:`placement.inputs.WORKLOAD_KINDS`) is, in the words of evaluate's errors
_WORKLOAD_WORDS = {"helix": "a Helix cluster file", "llm": "an LLM (a model config or an ONNX decoder)",
                   "piper": "a Piper-format workload", "onnx": "an ONNX model",
                   "graph": "a reference-format operator graph"}
#: evaluate's options a Helix cluster file takes (every other one is refused, never ignored)
_EVALUATE_HELIX_OPTIONS = ("--out", "--json")


def _result_kind(data) -> tuple[str | None, str]:
    """The workload kind a result file (decoded JSON) was placed on, where the file says so for sure
    (``None``: it does not, or it is a split in the reference format), and its words for errors."""
    from .stages import is_stage_result

    if _helix().is_layout_result(data):
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
        placed = f" (placed on {data['source']})" if isinstance(data.get("source"), str) else ""
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


def _cmd_evaluate(args) -> int:
    """Score a split (reference format) or a result file written by ``place`` on the workload."""
    from graphs.jsonio import read_json
    from graphs.reference import parse_split
    from solvers.base import Solution, Status

    from .api import Placement, evaluate
    from .load import load_workload
    from .simulate import assignment_from_result, checked_result

    if args.workload.lower().endswith(".json") and str(args.split).lower().endswith(".onnx"):
        raise _UsageError(f"placement evaluate takes WORKLOAD RESULT: the model first "
                          f"(placement evaluate {args.split} {args.workload})")
    if args.out:
        _output_file(args.out, "--out")
    from .inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json, workload_kind

    if args.seed is not None and args.simulate is None:  # it seeds the simulated trace, and nothing else
        raise _UsageError("--seed applies with --simulate RATE|auto (it seeds the simulated trace of an LLM "
                          "model config's goodput result); add --simulate or drop --seed")
    if args.seed is not None and args.seed < 0:
        raise _UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if getattr(args, "context", None) is not None and args.context < 1:  # named by its flag, not the model's
        raise _UsageError(f"--context must be a positive integer (tokens), got {args.context}")
    saved = result_json(args.split)  # read once: None unless a readable .json file
    kind = workload_kind(args.workload, args)  # placement/inputs.py
    simulated = any(getattr(args, f, None) is not None for f in ("simulate", "trace_seconds", "plot"))
    if kind != "llm" and simulated:
        raise _UsageError("--simulate, --trace-seconds and --plot apply to an LLM model config's goodput "
                          "result (config.json with num_hidden_layers and hidden_size)")
    refuse_not_result(args.split, "evaluate", saved, model=args.workload)  # a frontier, a workload...
    refuse_empty_result(saved, "evaluate", args.split)
    if saved is not None:
        _refuse_mismatched_result(args, kind, saved)
    if kind == "helix":  # a layout's max-flow (placement/helix_cmd.py)
        _refuse_for_helix(args, "evaluate", _EVALUATE_HELIX_OPTIONS, frozenset({"workload", "split"}))
        return _helix().evaluate(args)
    if args.progress and getattr(args, "simulate", None) is None:  # the one step of evaluate with a bar
        print("note: --progress: evaluate draws a bar only while --simulate runs the serving simulator; "
              "scoring a plan reports no progress", file=sys.stderr)
    if kind == "llm":
        return _llm().evaluate(args)
    if kind == "piper":  # a stage plan (placement/stages.py), as every stage plan below
        return _stages().evaluate(args, _frontend_given(args))
    if kind == "onnx" and holds_stage_plan(saved):
        return _stages().evaluate(args, _frontend(args))
    _refuse_stage_device_options(args)  # a one-device-per-stage placement's evaluation
    _refuse_schedule_options(args)  # (show simulates a schedule: --schedule is show's)
    data = saved if saved is not None else read_json(args.split)  # read_json names what is wrong
    is_result = isinstance(data, dict) and data.get("schema") == "placement-result"
    given = _frontend(args)
    if is_result and args.workload.lower().endswith(".onnx"):
        # the front-end options the result was computed with, unless given again here
        given = {**_recorded_frontend(data, args.split), **{k: v for k, v in given.items() if v is not None}}
    w = load_workload(args.workload, **given)
    if is_result:
        a = assignment_from_result(checked_result(data, args.split), w.graph, w.cluster, source=args.split)
        what = "placement"
    else:
        a = parse_split(data, w.graph, w.cluster, source=args.split)
        what = "split"
    ev = evaluate(w.graph, w.cluster, a)
    sol = Solution(a, ev.max_load, Status.FEASIBLE, f"given {what}", message=f"{what} from {args.split}")
    _print_result(args, Placement(w.graph, w.cluster, sol, ev))
    recorded_value = data.get("max_load") if is_result else None
    if isinstance(recorded_value, (int, float)) and recorded_value != ev.max_load:
        print(f"note: the result file says max-load {recorded_value!r}; evaluated now {ev.max_load!r} "
              f"(costs re-measured, or another cost model?)", file=sys.stderr)
    return EXIT_OK if ev.valid else EXIT_NO_PLACEMENT


def _cmd_example(args) -> int:
    from graphs.example import transformer_layer_graph

    from .cluster.example import is_job_list_name, write_example_jobs
    from .export import write_json

    # the options that shape only some kinds of example: refused, not ignored, on the others
    given = [flag for flag, on in (("--layers", args.layers is not None),
                                   ("--accelerators", args.accelerators is not None),
                                   ("--cpus", args.cpus is not None), ("--training", args.training)) if on]
    job_list = is_job_list_name(args.out)
    suffix = os.path.splitext(args.out)[1].lower()
    if job_list or suffix == ".onnx":
        what, takes, hints = (("a shared-cluster job list", (), {}) if job_list else
                              ("an ONNX model", ("--layers",),
                               {"--training": "; place it with --training to train it",
                                "--accelerators": "; its devices are given to place with --devices",
                                "--cpus": "; its devices are given to place with --devices"}))
        for flag in (f for f in given if f not in takes):
            shapes = "a model example (.onnx, .json)" if flag == "--layers" else \
                "a reference-format layer graph (.json)"
            raise _UsageError(f"placement example: {flag} shapes {shapes}; {args.out} is {what}, which it "
                              f"does not change{hints.get(flag, '')}")
    args.layers = 6 if args.layers is None else args.layers
    args.accelerators = 4 if args.accelerators is None else args.accelerators
    args.cpus = 1 if args.cpus is None else args.cpus
    if job_list:  # jobs.json, trace.json: a shared-cluster job list
        _output_file(args.out, "placement example:")
        print(write_example_jobs(args.out))
        return EXIT_OK
    if suffix not in (".onnx", ".json"):
        raise _UsageError(f"placement example: {args.out!r} must end in .onnx (an ONNX model) or .json "
                          f"(a reference-format workload)")
    if args.layers < 1:
        raise _UsageError("placement example: --layers must be >= 1")
    if suffix == ".json" and (args.accelerators < 0 or args.cpus < 0 or args.accelerators + args.cpus == 0):
        raise _UsageError("placement example: there must be at least one device")
    _output_file(args.out, "placement example:")
    if suffix == ".onnx":
        import onnx

        from graphs.transformer import bert

        model = bert(args.layers, hidden=512, heads=8, seq_len=128)
        with _interrupt.deferred():
            onnx.save(model, args.out)
        print(f"wrote {args.out}: a {args.layers}-layer BERT-style encoder, {len(model.graph.node)} ONNX "
              f"nodes (placement counts fewer operators: constants are folded). Place it with: "
              f"placement place {args.out} --devices a100:2,t4:2,cpu:1")
        return EXIT_OK
    doc = transformer_layer_graph(args.layers, accelerators=args.accelerators, cpus=args.cpus,
                                  training=args.training)
    with _interrupt.deferred():
        write_json(args.out, doc)
    print(f"wrote {args.out}: {len(doc['nodes'])} nodes, {len(doc['edges'])} edges, "
          f"{args.accelerators} accelerators + {args.cpus} CPU(s). Place it with: placement place {args.out}")
    return EXIT_OK


def _cmd_bench(argv: list[str]) -> int:
    from .bench.suite import main as bench_main

    return bench_main(argv)


def _cmd_inspect(args) -> int:
    from graphs.onnx_workload import describe, prepare_onnx, reference_document

    from .export import write_json

    if not args.model.lower().endswith(".onnx"):
        raise _UsageError(f"placement inspect: {args.model!r} is not an ONNX model (.onnx)")
    if args.out:
        _output_file(args.out, "--out")
    g, w = prepare_onnx(args.model, **{k: v for k, v in _frontend(args).items() if v is not None})
    # what the reference format cannot hold (a second accelerator kind) is refused before anything prints
    doc = reference_document(w.graph, w.cluster) if args.out else None
    print(describe(g, w.graph, show_warnings=False))
    print(f"({w.graph.num_nodes} operators after constant folding; the file's Constant nodes and shape "
          f"arithmetic on constants are values here)")
    if args.out:
        with _interrupt.deferred():
            write_json(args.out, doc)
        print(f"annotated graph ({w.graph.num_nodes} nodes, {w.graph.meta.get('costs')} costs in ms, "
              f"{w.graph.meta.get('devices')}) written to {args.out}")
    return EXIT_OK


# ---------------------------------------------------------------- pipelines: show, split, run
def _add_pipeline_parsers(sub) -> None:
    from .simulate import SCHEDULES

    s = sub.add_parser("show", help="simulate and draw a placement", description="Simulate a placement's "
                       "pipeline (throughput, latency, bubble, per-device utilisation, stashed activations), "
                       "draw its Gantt chart (matplotlib) and its graph coloured by device, or by stage "
                       "for a stage plan (Graphviz DOT, "
                       "rendered when `dot` is installed).")
    s.add_argument("result", help="result file written by placement place --out")
    s.add_argument("--workload", default=None, metavar="PATH",
                   help="the workload or ONNX model the result is for (default: the result's 'source')")
    s.add_argument("--schedule", choices=SCHEDULES + ("pipedream", "2bw"), default=None,
                   help="stream (inference default), gpipe or 1f1b (training default); a stage plan: "
                   "1f1b, gpipe, pipedream or 2bw (default: its own; an inference plan: stream)")
    s.add_argument("--microbatches", "-m", type=int, default=None, metavar="M",
                   help="micro-batches (default 8; a stage plan: its own per batch)")
    s.add_argument("--overlap", action="store_true", help="draw the schedule with communication overlapped")
    s.add_argument("--out-dir", default=None, metavar="DIR",
                   help="where to write the pictures (default: beside the result file)")
    s.add_argument("--format", choices=("png", "svg"), default=None, help="picture format (default png)")
    s.add_argument("--no-draw", action="store_true", help="only simulate; write no pictures (--overlap, "
                   "--format and --out-dir, which are the pictures', are then refused)")
    s.add_argument("--json", action="store_true", help="print the simulation as JSON")
    _add_frontend_options(s)

    t = sub.add_parser("split", help="cut an ONNX model into per-stage sub-models", description="Write "
                       "one ONNX sub-model per stage of a placement (cut tensors as their inputs and "
                       "outputs; a stage of tensor-parallel degree t > 1: t rank sub-models, each cut into "
                       "segments at the collectives, one file per rank and segment), a manifest of which "
                       "tensor flows from which stage to which (and a tensor-parallel stage's segments and "
                       "collectives), and the "
                       "model annotated with each node's device and stage (metadata_props). --verify runs "
                       "the model and the stages with onnxruntime on random inputs and compares outputs.")
    t.add_argument("model", help="ONNX model (.onnx)")
    t.add_argument("result", help="result file written by placement place --out for this model")
    t.add_argument("--out-dir", default="stages", metavar="DIR", help="output folder (default stages/)")
    t.add_argument("--annotated", default=None, metavar="OUT.onnx",
                   help="where to write the annotated model (default DIR/<model>.placed.onnx)")
    t.add_argument("--verify", action="store_true", help="run model and stages and compare their outputs")
    t.add_argument("--tolerance", type=float, default=1e-4, help="largest absolute difference accepted "
                   "by --verify (default 1e-4)")
    t.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    _add_input_shape_options(t)

    r = sub.add_parser("run", help="run a placement as a pipeline of processes", description="Split the "
                       "model as the result says and run the stages as a pipeline of worker processes "
                       "(one per replica of a stage, t per replica of a tensor-parallel stage: one per "
                       "rank, with an onnxruntime session per segment run one after the other; queues "
                       "between them) on this CPU; "
                       "report measured throughput next to the cost model's prediction of the plan as the "
                       "result file gives it (re-scored on the model: a plan edited by hand is predicted as "
                       "edited; a stage plan: the stage evaluator's time per sample of each stage), per "
                       "batch and per sample. The inputs have the "
                       "batch size and dimensions the result was placed at; a different --batch-size or "
                       "--dim is refused, as the prediction is for the recorded ones (place again at the "
                       "other size). Place with --costs profile so that both are measured on this machine.")
    r.add_argument("model", help="the ONNX model (.onnx) the result is for")
    r.add_argument("result", help="result file written by placement place --out (the order of split; the "
                   "older order RESULT MODEL still works, with a note)")
    r.add_argument("--samples", "-n", type=int, default=50, metavar="N",
                   help="runs of the model to stream, each one batch of the batch size (default 50)")
    r.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads of each session "
                   "(default 1); a worker process (a replica of a stage, or a rank of a tensor-parallel "
                   "one) runs one session at a time, so it computes on that many threads")
    r.add_argument("--optimize", action="store_true", help="let onnxruntime optimise the stage graphs "
                   "(off by default, as when profiling costs)")
    r.add_argument("--no-check", action="store_true", help="do not compare outputs with the whole model")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    r.add_argument("--json", action="store_true", help="print the measurements as JSON")
    _add_input_shape_options(r)


def _add_input_shape_options(p) -> None:
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="value of a symbolic batch dimension of the inputs (default: the batch size the "
                        "result records, else 1)")
    p.add_argument("--dim", action="append", default=None, metavar="NAME=N",
                   help="value of another symbolic input dimension (repeatable; default: the result's)")


def _dims(args) -> dict:
    dims = {}
    for item in args.dim or ():
        name, _, value = item.partition("=")
        if not name or not value.isdigit() or int(value) < 1:
            raise _UsageError(f"--dim {item!r}: expected NAME=N with N a positive integer")
        dims[name] = int(value)
    if args.batch_size is not None and args.batch_size < 1:
        raise _UsageError("--batch-size must be at least 1")
    return dims


def _input_shape(args, given: dict, result: dict, result_path: str, *, strict: bool) -> dict:
    """The symbolic input dimensions to feed, the ``result``'s (read from ``result_path``) recorded ones
    unless given again; sets ``args.batch_size`` likewise (else 1). ``strict`` (run, whose prediction is
    for the recorded shape): a batch size or dimension given that differs from the recorded one is
    refused. ``given``: the ``--dim`` values, as :func:`_dims` parsed them."""
    from .pipeline_run import recorded_input_shape

    batch, dims = recorded_input_shape(result)
    if strict and dims is not None:
        if batch is not None and args.batch_size not in (None, batch):
            raise _UsageError(f"placement run: --batch-size {args.batch_size}: {result_path} was placed at "
                              f"batch size {batch} and its prediction is for that batch; omit --batch-size, "
                              f"or place again with --batch-size {args.batch_size}")
        other = {k: v for k, v in given.items() if dims.get(k) != v}
        if other:
            flags = " ".join(f"--dim {k}={v}" for k, v in other.items())
            was = ", ".join(f"{k}={dims[k]}" if k in dims else f"{k} not given" for k in other)
            raise _UsageError(f"placement run: {flags}: {result_path} was placed with {was} and its "
                              f"prediction is for that; omit it, or place again with {flags}")
    if args.batch_size is None:
        args.batch_size = batch or 1
    return {**(dims or {}), **given}


def _warn_unknown_dims(model, dims: dict) -> None:
    """A --dim naming no symbolic dimension of the model's inputs changes nothing: say so."""
    names = {d.dim_param for vi in model.graph.input if vi.type.HasField("tensor_type")
             for d in vi.type.tensor_type.shape.dim if d.dim_param}
    unknown = sorted(set(dims) - names)
    if unknown:
        print(f"warning: --dim {', '.join(unknown)}: no input of the model has such a dimension "
              f"({', '.join(sorted(names)) or 'it has none'}); ignored", file=sys.stderr)


def _read_model(path: str):
    from graphs.onnx_loader import read_model

    if not path.lower().endswith(".onnx"):
        raise _UsageError(f"{path!r} is not an ONNX model (.onnx)")
    return read_model(path, load_external_data=True)


def _cmd_split(args) -> int:
    import onnx

    from graphs.jsonio import read_json

    from .onnx_export import annotate, split_model, verify_split, write_split
    from .simulate import checked_result

    given_dims = _dims(args)
    from . import stage_run  # stage plans: placement/stage_run.py
    from .inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    if not (args.tolerance >= 0 and math.isfinite(args.tolerance)):
        raise _UsageError(f"--tolerance must be a non-negative number, got {args.tolerance!r}")
    if not args.verify:  # the verify options do nothing without it: refused, not ignored
        for flag, value, default in (("--tolerance", args.tolerance, 1e-4), ("--seed", args.seed, 0),
                                     ("--batch-size", args.batch_size, None), ("--dim", args.dim, None)):
            if value != default:
                raise _UsageError(f"{flag} applies with --verify (it sets the check's inputs); add --verify")
    if args.seed < 0:  # numpy's generator takes no negative seed
        raise _UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    data = result_json(args.result)  # the result and the model are each read once (None: not .json)
    refuse_not_result(args.result, "split", data, model=args.model)  # MODEL RESULT swapped, a workload...
    data = read_json(args.result) if data is None else data  # its own error for what is not JSON
    refuse_empty_result(data, "split", args.result)
    dims = _input_shape(args, given_dims, data, args.result, strict=False)
    annotated = args.annotated or os.path.join(
        args.out_dir, os.path.splitext(os.path.basename(args.model))[0] + ".placed.onnx")
    if holds_stage_plan(data):
        _output_dir(args.out_dir, "--out-dir")
        _output_file(annotated, "--annotated")
        model = _read_model(args.model)
        _warn_unknown_dims(model, dims)
        return stage_run.split_command(args, dims, model, data)
    model = _read_model(args.model)
    _warn_unknown_dims(model, dims)
    result = checked_result(data, args.result)
    _output_dir(args.out_dir, "--out-dir")
    _output_file(annotated, "--annotated")
    split = split_model(model, result, source=args.result)
    with _interrupt.deferred():
        manifest = write_split(split, args.out_dir)
        onnx.save_model(annotate(model, result), annotated)
    print(f"{len(split.submodels)} sub-model(s) written to {args.out_dir}/ (manifest.json); annotated model: "
          f"{annotated}")
    for s in manifest["submodels"]:
        print(f"  {s['file']}: {s['device']} ({s['kind']}), {s['nodes']} operators, inputs "
              f"{_names(s['inputs'])}, outputs {_names(s['outputs'])}")
    for note in split.notes:
        print(f"note: {note}")
    if not args.verify:
        return EXIT_OK
    rep = verify_split(model, [s.model for s in split.submodels], manifest, tolerance=args.tolerance,
                       seed=args.seed, dims=dims, batch_size=args.batch_size)
    if rep.materialized:
        print(f"verify: {rep.materialized} generated weight tensor(s) replaced by random values")
    for x, d in rep.max_abs_diff.items():
        print(f"verify: output {x}: max |difference| {d:.3g} (outputs up to {rep.max_abs_value[x]:.3g})")
    if rep.cut_max_abs_diff:
        worst_cut = max(rep.cut_max_abs_diff, key=rep.cut_max_abs_diff.get)
        print(f"verify: {len(rep.cut_max_abs_diff)} cut tensor(s): max |difference| "
              f"{rep.cut_max_abs_diff[worst_cut]:.3g} ({worst_cut}, values up to "
              f"{rep.cut_max_abs_value[worst_cut]:.3g})")
    if rep.ok:
        print(f"verify: OK, the stages compute the model's outputs (max abs diff {rep.worst:.3g} <= "
              f"{args.tolerance:g})")
        return EXIT_OK
    print(f"error: verify failed: max abs diff {rep.worst:.3g} > {args.tolerance:g}", file=sys.stderr)
    return EXIT_NO_PLACEMENT


def _names(xs, k: int = 3) -> str:
    xs = list(xs)
    return ", ".join(xs[:k]) + (f" (+{len(xs) - k})" if len(xs) > k else "") if xs else "-"


def _cmd_run(args) -> int:
    from graphs.jsonio import read_json

    from .onnx_export import split_model
    from .pipeline_run import describe_runs, format_run_summary, run_inputs, run_pipeline, run_report
    from .simulate import checked_result

    if args.samples < 1 or args.threads < 1:
        raise _UsageError("placement run: --samples and --threads must be at least 1")
    if args.seed < 0:  # numpy's generator takes no negative seed
        raise _UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.model.lower().endswith(".json") and args.result.lower().endswith(".onnx"):
        args.model, args.result = args.result, args.model
        print("note: placement run takes MODEL RESULT (as split does); RESULT MODEL is deprecated",
              file=sys.stderr)
    given_dims = _dims(args)
    from . import stage_run  # stage plans: placement/stage_run.py
    from .inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    data = result_json(args.result)  # the result and the model are each read once (None: not .json)
    refuse_not_result(args.result, "run", data)  # a workload, a frontier...: said so
    data = read_json(args.result) if data is None else data  # its own error for what is not JSON
    refuse_empty_result(data, "run", args.result)
    dims = _input_shape(args, given_dims, data, args.result, strict=True)
    model = _read_model(args.model)
    _warn_unknown_dims(model, dims)
    if holds_stage_plan(data):
        return stage_run.run_command(args, dims, model, data)
    result = checked_result(data, args.result)
    split = split_model(model, result, source=args.result)
    manifest = split.manifest()
    # the prediction first: its notes (a plan edited by hand, a workload not rebuilt) come before the run
    pred, by, pred_notes = _run_prediction(args, model, result, [s.device for s in split.submodels])
    for note in pred_notes:
        print(f"note: {note}", file=sys.stderr)
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=args.seed, dims=dims,
                                         batch_size=args.batch_size, threads=args.threads,
                                         optimize=args.optimize, check=not args.no_check)
    run = run_pipeline(parts, manifest, feeds, samples=args.samples, threads=args.threads,
                       optimize=args.optimize, reference=reference)
    if any(str(nm).endswith("_grad") for d in result["devices"] for nm in d["nodes"]):
        print("note: this is a training placement; the run executes the forward pass only, while the "
              "prediction includes the backward pass", file=sys.stderr)
    doc = {"stages": run.workers, **run_report(run, pred, args.batch_size, predicted_by=by),
           "utilisation": list(run.utilisation), "max_abs_diff": run.max_abs_diff,
           "notes": list(split.notes) + pred_notes}
    ok = run.max_abs_diff is None or all(d <= 1e-4 for d in run.max_abs_diff.values())
    if args.json:
        from .export import print_json

        print_json(doc)
    else:
        for note in split.notes:
            print(f"note: {note}")
        print(f"{describe_runs(run.samples, args.batch_size)} through {run.workers} stage process(es) in "
              f"{run.wall_s:.3f} s")
        per = "per sample" if args.batch_size == 1 else "per batch"
        print(f"{'stage':<6}{'device':<14}{'predicted ms':>14}{'measured ms':>13}{'busy':>8}  ({per})")
        for k, s in enumerate(split.submodels):
            p = pred.stage_loads[k] if pred is not None and len(pred.stage_loads) == len(split.submodels) \
                else math.nan
            print(f"{k:<6}{s.label:<14}{p:>14.3f}{run.stage_ms[k]:>13.3f}{100 * run.utilisation[k]:>7.1f}%")
        for line in format_run_summary(doc):
            print(line)
        if run.max_abs_diff is not None:
            worst = max(run.max_abs_diff.values(), default=0.0)
            print(f"outputs match the whole model: {'yes' if ok else 'NO'} (max abs diff {worst:.3g})")
    return EXIT_OK if ok else EXIT_NO_PLACEMENT


def _run_prediction(args, model, result: dict, run_devices: list[str]):
    """``placement run``'s prediction of a one-device-per-stage result: ``(prediction, predicted_by,
    notes)``. The plan as it stands (``devices[].nodes``, perhaps edited by hand) is scored again by the
    evaluator on the model (``model``, as run read it) costed with the front-end settings the result
    records; a result that records none, or whose workload cannot be rebuilt, is predicted from its
    recorded loads, and a note says so. A plan that does not score (it does not match the rebuilt
    model) gets no prediction."""
    from graphs.errors import PlacementError
    from graphs.onnx_workload import onnx_workload

    from .pipeline_run import predicted_time_per_sample, rescored_time_per_sample

    if not isinstance(result.get("frontend"), dict) or not result["frontend"]:
        why = "it records no front-end settings to rebuild the model's costs from"
    else:
        frontend = _recorded_frontend(result, args.result)
        try:
            w = onnx_workload(args.model, model=model, **frontend)
        except PlacementError as e:
            why = f"the model's costs could not be rebuilt as placed ({e})"
        else:
            order = list(dict.fromkeys(run_devices))  # a device cut into several sub-models: once
            unit = w.graph.meta.get("unit") or result.get("time_unit") or "ms"
            try:
                pred, notes = rescored_time_per_sample(result, w.graph, w.cluster, args.samples, order=order,
                                                       unit=unit)
            except PlacementError as e:
                return None, f"the plan as it stands is not scored: {e}", []
            edited = any(n.startswith("the result's recorded") for n in notes)
            if edited and frontend.get("costs") == "profile":
                notes.append("the costs were profiled again to score the plan, so its loads also differ from "
                             "the recorded ones by the measurement's noise")
            return pred, "the evaluator's loads of the plan as it stands (model rebuilt as placed)", notes
    pred = predicted_time_per_sample(result, args.samples)
    return pred, "the result's recorded loads", [f"predicted from the result's recorded loads: {why}; a plan "
                                                 f"edited by hand is predicted as it was placed"]


def _recorded_frontend(data: dict, result_path: str) -> dict:
    """The front-end options a result records (device files relative to the result file)."""
    rec = {k: v for k, v in (data.get("frontend") or {}).items() if v not in (None, False, [], {})}
    if "device_files" in rec:
        base = os.path.dirname(os.path.abspath(result_path))
        rec["device_files"] = [os.path.join(base, f) for f in rec["device_files"]]
    return rec


def _load_for_result(args, data: dict):
    """The workload a result is for: --workload, else the result's source (relative to the result file,
    as results store it; then as written, for results of older versions, relative to where they ran)."""
    from .load import load_workload

    path = args.workload or data.get("source")
    if not path:
        raise _UsageError(f"{args.result}: the result does not say which workload it is for; pass "
                          f"--workload PATH")
    if not args.workload:
        beside = os.path.join(os.path.dirname(os.path.abspath(args.result)), path)
        if os.path.exists(beside):
            path = beside
        elif not os.path.exists(path):
            raise _UsageError(f"{args.result}: its workload {path!r} was not found; pass --workload PATH")
    given = {k: v for k, v in _frontend(args).items() if v is not None}
    if path.lower().endswith(".onnx"):
        given = {**_recorded_frontend(data, args.result), **given}  # the result's own, unless overridden
    if given.get("optimizer") and not given.get("training"):
        raise _UsageError("--optimizer only applies to training; add --training (or show a training result)")
    return load_workload(path, **given)


def _cmd_show(args) -> int:
    from graphs.evaluate import evaluate

    from .draw import PlotsUnavailable, gantt_chart, graph_dot, write_graph
    from .simulate import SCHEDULES as SIM_SCHEDULES
    from .simulate import assignment_from_result, checked_result, read_result, simulate

    if args.microbatches is not None and args.microbatches < 1:
        raise _UsageError("placement show: --microbatches must be at least 1")
    from . import stage_show  # a stage plan (result JSON with stages): placement/stage_show.py
    from .inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    if args.no_draw:  # the picture options do nothing without pictures: refused, not ignored
        for flag, given in (("--overlap", args.overlap), ("--format", args.format is not None),
                            ("--out-dir", args.out_dir is not None)):
            if given:
                raise _UsageError(f"placement show: {flag} sets the pictures, and --no-draw draws none; "
                                  f"drop one of them")
    args.format = args.format or "png"
    saved = result_json(args.result)
    refuse_not_result(args.result, "show", saved)  # an ONNX model, a workload, a frontier...: said so
    refuse_empty_result(saved, "show", args.result)
    if holds_stage_plan(saved):
        if args.overlap:
            raise _UsageError("placement show: --overlap draws a one-device-per-stage plan's transfers as "
                              "their own events; a stage plan's stage time counts its communication with "
                              "its compute, so there is no separate transfer to overlap")
        return stage_show.show(args, _frontend(args))
    data = read_result(args.result) if saved is None else checked_result(saved, args.result)
    if args.schedule not in SIM_SCHEDULES + (None,):
        raise _UsageError(f"placement show: schedule {args.schedule} applies to stage plans (replicas) only")
    args.microbatches = 8 if args.microbatches is None else args.microbatches
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.result))
    if not args.no_draw:
        _output_dir(out_dir, "--out-dir")
    w = _load_for_result(args, data)
    a = assignment_from_result(data, w.graph, w.cluster, source=args.result)
    ev = evaluate(w.graph, w.cluster, a)
    unit = w.graph.meta.get("unit", "")
    sim = simulate(w.graph, w.cluster, a, schedule=args.schedule, microbatches=args.microbatches)
    over = simulate(w.graph, w.cluster, a, schedule=sim.schedule, microbatches=args.microbatches,
                    overlap=True)
    if args.json:
        from .export import print_json

        print_json({"result": args.result, "simulation": sim.summary(), "overlapped": over.summary()})
    else:
        from graphs.latency import inference_latency

        lat = inference_latency(w.graph, w.cluster, a)  # None for a training graph, as Placement.latency
        print(_format_simulation(sim, over, unit, None if lat is None else lat.total,
                                 batch=w.graph.batch_size))
        from .serving_cli import show_mfu_lines

        sys.stdout.write(show_mfu_lines(w.graph, w.cluster, a, sim.steady_time_per_sample))
    old = data.get("max_load")
    if isinstance(old, (int, float)) and not math.isclose(old, ev.max_load, rel_tol=1e-6, abs_tol=1e-12):
        print(f"note: with the costs loaded now the max-load is {ev.max_load:.6g}; the result says {old:.6g} "
              f"(costs re-measured, or another cost model?)", file=sys.stderr)
    if args.no_draw:
        return EXIT_OK
    stem = os.path.join(out_dir, os.path.splitext(os.path.basename(args.result))[0])
    shown = sim if not args.overlap else over
    written = []
    try:
        written.append(gantt_chart(shown, f"{stem}.gantt.{args.format}", unit=unit))
    except PlotsUnavailable as e:
        print(f"note: {e}; Gantt chart not drawn", file=sys.stderr)
    paths, note = write_graph(stem, graph_dot(w.graph, w.cluster, a, stage_order=ev.stage_order,
                                              title=os.path.basename(args.result)), args.format)
    written += paths
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not args.json:
        print("wrote " + ", ".join(written))
    return EXIT_OK


def _format_simulation(sim, over, unit: str, model_latency: float | None = None, batch: int = 1) -> str:
    """``show``'s summary; ``batch``: the samples in one run of the model (an ONNX model's batch size),
    whose figures are then per batch, and said so."""
    u = f" {unit}" if unit else ""
    item = "sample" if batch == 1 else f"batch ({batch} samples)"
    cu = f" [{unit or 't'}]"
    name = {"stream": "streaming inference", "gpipe": "GPipe", "1f1b": "1F1B"}[sim.schedule]
    # "busy/wall" (busy time over the makespan), not the table of `place`'s "load/max" (load over max-load)
    rows = [["stage", "device", "kind", "load" + cu, "busy" + cu, "busy/wall", "compute/wall", "peak stash"]]
    for r in sim.stages:
        stash = "-" if r.peak_stashed is None else str(r.peak_stashed)
        if r.peak_stash_bytes is not None:
            from .report import human_bytes

            stash += f" ({human_bytes(r.peak_stash_bytes)})"
        rows.append([str(r.stage), r.name, r.kind, f"{r.load:.4g}", f"{r.busy:.4g}",
                     f"{100 * r.utilisation:.1f}%", f"{100 * r.compute_utilisation:.1f}%", stash])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"pipeline of {len(sim.stages)} stage(s), {name}, {sim.microbatches} micro-batches"
             + (f" (each a batch of {batch} samples: one run of the model)" if batch > 1 else "")]
    lines += ["  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
    steady = sim.steady_time_per_sample
    same = math.isclose(steady, sim.max_load, rel_tol=1e-9, abs_tol=1e-12)
    extra = "equal" if same else f"the schedule adds {steady / sim.max_load - 1:.1%}"
    gain = _gain(steady, over.steady_time_per_sample)
    one = "one-sample" if batch == 1 else "one-batch"
    per_s = {"ms": 1e3, "s": 1.0}.get(unit)  # time units per second (None: a workload's own unit)

    def rate(per_item: float) -> str:  # a time per batch (batch samples) as samples/s, and batches/s
        if not per_item > 0:
            return "samples/s unbounded"
        if per_s is None:
            return f"{batch / per_item:.6g} samples per {unit or 'time unit'}"
        text = f"{batch * per_s / per_item:,.6g} samples/s"
        return text if batch == 1 else f"{text}, {per_s / per_item:,.6g} batches/s"
    lat = f"{one} latency {sim.latency:.6g}{u} in this schedule (each stage receives, computes and " \
          f"sends as a whole)"
    if model_latency is not None and math.isfinite(model_latency):
        lat += f"; the latency model of `place` gives {model_latency:.6g}{u} (operators start as soon as " \
               f"their inputs are ready, host operators in parallel)"
    lines += [
        f"makespan {sim.makespan:.6g}{u} for {sim.microbatches} micro-batches; time per {item} "
        f"{sim.time_per_sample:.6g}{u} (throughput {rate(sim.time_per_sample)})",
        f"steady state: {steady:.6g}{u} per {item} ({rate(steady)}); max-load {sim.max_load:.6g}{u} "
        f"({extra})",
        lat,
        f"bubble {100 * sim.bubble_fraction:.1f}%",
        f"with communication overlapped: steady {over.steady_time_per_sample:.6g}{u} per {item} ({gain}), "
        f"makespan {over.makespan:.6g}{u}, bubble {100 * over.bubble_fraction:.1f}%",
    ]
    return "\n".join(lines)


def _gain(before: float, after: float) -> str:
    if after <= 0 or before <= after * (1 + 1e-9):
        return "no gain"
    return f"{before / after - 1:.1%} more throughput"


_COMMANDS = {"place": _cmd_place, "evaluate": _cmd_evaluate, "example": _cmd_example,
             "inspect": _cmd_inspect}
_COMMANDS.update(show=_cmd_show, split=_cmd_split, run=_cmd_run)


# ---------------------------------------------------------------- shared cluster (placement/cluster/)
def _add_cluster_parser(sub) -> None:
    from .cluster.command import add_parser

    add_parser(sub)


def _cmd_cluster(args) -> int:
    from .cluster.command import run

    return run(args)


_COMMANDS.update(cluster=_cmd_cluster)


def _add_serving_parsers(sub) -> None:
    from .serving_cli import add_parser

    add_parser(sub)


# ---------------------------------------------------------------- calibrate (placement/calibrate_cmd.py)
def _add_calibrate_parser(sub) -> None:
    from .calibrate_cmd import add_parser

    add_parser(sub)


def _cmd_serving(args) -> int:
    from .inputs import workload_kind
    from .serving_cli import run

    if args.command == "provision" and args.model and not args.example_prices \
            and workload_kind(args.model) == "llm":
        return _llm().provision_command(args)  # an LLM config: the cheapest instances per bucket
    return run(args)


def _cmd_calibrate(args) -> int:
    from .calibrate_cmd import run

    return run(args)


_COMMANDS.update(frontier=_cmd_serving, provision=_cmd_serving)
_COMMANDS.update(calibrate=_cmd_calibrate)


@contextlib.contextmanager
def _user_errors(codes: list):
    """Turn the library's typed errors into one line on stderr and an exit code."""
    try:
        yield
    except KeyboardInterrupt:
        _interrupt.quiet()  # a second Ctrl-C while we exit changes nothing
        print("error: interrupted", file=sys.stderr)
        codes.append(EXIT_INTERRUPTED)
    except BrokenPipeError:
        codes.append(EXIT_OK)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        codes.append(EXIT_USAGE)
    except Exception as e:
        from graphs.errors import InfeasibleError, PlacementError

        if isinstance(e, InfeasibleError):
            print(f"error: infeasible: {_cli_words(str(e))}", file=sys.stderr)
            codes.append(EXIT_NO_PLACEMENT)
        elif isinstance(e, PlacementError):
            print(f"error: {_cli_words(str(e))}", file=sys.stderr)
            codes.append(EXIT_USAGE)
        else:
            raise


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    codes: list[int] = []
    with _user_errors(codes):
        argv = sys.argv[1:] if argv is None else list(argv)
        from .serving_cli import _warnings_as_lines

        _warnings_as_lines()  # every command: the library logs its warnings and never prints them
        if argv[:1] == ["bench"]:  # the suite parses its own options (placement.bench)
            return _cmd_bench(argv[1:])
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as e:  # --help, --version
            return int(e.code or 0)
        if extra:  # named by the command that does not take them (argparse names the top-level program)
            where = f"placement {args.command}" if getattr(args, "command", None) else "placement"
            raise _UsageError(f"{where}: unrecognized arguments: {' '.join(extra)}")
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        _compile_notice.install()  # a cold numba cache compiles for a minute: say so (stderr)
        try:
            return _COMMANDS[args.command](args)
        finally:
            _compile_notice.done()
    return codes[0] if codes else EXIT_OK


def console_main() -> None:
    """Run the command line and exit with its code, Ctrl-C delivered by :mod:`placement._interrupt` (the
    console script, :func:`placement._console.main`, installs it from its first line and calls this)."""
    _interrupt.install()
    code = main()
    _interrupt.quiet()  # nothing left to stop: a late Ctrl-C must not turn exit into a traceback
    _interrupt.exit_past_abandoned_solver(code)  # HiGHS still running after a cancel: no C++ teardown
    sys.exit(code)
