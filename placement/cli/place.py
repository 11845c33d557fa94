"""``placement place``: read the workload, pick the model that places it (:mod:`placement.inputs`),
solve, and print and write the result. A Helix cluster file, an LLM, a batch-size sweep or latency
target and the stage model each have their own emitter; the one-device-per-stage placement's is
:func:`placement.cli.common.print_result`."""

from __future__ import annotations

import dataclasses
import os
import sys

from ..outputs import Progress, output_file
from .common import (
    EXIT_NO_PLACEMENT,
    EXIT_OK,
    UsageError,
    add_frontend_options,
    add_output_options,
    add_solve_options,
    checked_number,
    cli_words,
    frontend,
    frontend_given,
    helix_commands,
    llm_commands,
    print_result,
    refuse_for_helix,
    refuse_stage_options,
    stage_model,
)

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    p = sub.add_parser("place", help="compute a placement", description="Compute a placement of a "
                       "workload (reference-format JSON, Piper file or ONNX model) and print a table: one "
                       "row per stage (its devices, replicas and tensor-parallel degree; one device, "
                       "d = t = 1, for a one-device-per-stage placement).")
    p.add_argument("workload", help="workload file (.json) or ONNX model (.onnx)")
    add_solve_options(p)
    add_output_options(p)
    p.add_argument("--model", default=None, help="Helix cluster file: the model to lay out (default: "
                   "the file's only model); the time limit there defaults to 60 s")
    p.add_argument("--engine", choices=("helix", "vllm", "sglang"), default=None,
                   help="Helix cluster file: what to write beside the layout: helix (default: the layout "
                   "only) or vllm (pipeline replicas with their flags and VLLM_PP_LAYER_PARTITION); a model "
                   "config with --objective goodput: sglang (launch_server arguments, with --disaggregate "
                   "the prefill and decode servers and the router)")
    add_frontend_options(p)
    stage_model().add_options(p)
    llm_commands().add_options(p)
    from .serving import add_place_options

    add_place_options(p)


def run(args) -> int:
    from solvers.base import SolveOptions, Status

    from ..api import place
    from ..clock import Clock
    from ..inputs import check_counts, checked_gap, raw_options, time_limit_seconds, wants_serving
    from ..load import load_workload
    from .serving import run_place

    started = args.started  # --time-limit is the whole command's, a sweep's too (see its help)
    time_limit = time_limit_seconds(args.time_limit)
    args.clock = Clock(time_limit, started=started)
    gap = checked_gap(args.gap)
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    if args.subgraphs_per_device < 1:
        raise UsageError("--subgraphs-per-device must be at least 1")
    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    check_counts(args, ("max_replicas", "microbatches", "context"))
    checked_number(args.memory_limit, "--memory-limit", strict=True)
    if args.restarts is not None and args.restarts < 1:
        raise UsageError("--restarts must be at least 1")
    raw = raw_options(args)
    if args.solver == "expert" and not args.split:
        raise UsageError("--solver expert evaluates a given split: add --split SPLIT.json")
    if args.out:
        output_file(args.out, "--out")
    from ..inputs import model_for, workload_kind

    # what the workload is, and which model places it, decided in one place (placement/inputs.py);
    # --model says the file must be a Helix cluster (placement/cli/helix.py checks it)
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
            raise UsageError("--engine sglang applies to a model config with --objective goodput; a Helix "
                              "cluster file takes --engine helix or vllm")
        refuse_for_helix(args, add_parser)
        return helix_commands().place(args, args.clock)
    llm = model == "llm"
    if args.engine == "sglang" and not (llm and args.objective == "goodput"):
        raise UsageError("--engine sglang applies to a model config with --objective goodput")
    if args.engine is not None and args.engine != "sglang":
        raise UsageError("--engine applies to Helix cluster files (placement place CLUSTER.json --model M)")
    if llm:
        if args.objective == "goodput":
            return llm_commands().place_goodput(args)
        llm_commands().refuse_goodput_options(args)
        stage_model().refuse_serving(args)
        return llm_commands().place(args)
    from ..inputs import GOODPUT_FLAGS  # the goodput objective's options, listed once

    llm_flags = [flag for dest, flag in (("context", "--context"),) + GOODPUT_FLAGS
                 if getattr(args, dest, None) is not None]
    if args.objective == "goodput" or llm_flags:
        flag = llm_flags[0] if llm_flags else "--objective goodput"
        raise UsageError(f"{flag} applies to an LLM: a model config (config.json with num_hidden_layers and "
                          f"hidden_size) or an ONNX decoder exported with its KV cache; this workload is "
                          f"neither")
    if getattr(args, "latency_slo", None) is not None and args.solver not in (None, "auto"):
        raise UsageError(f"--solver {args.solver} does not apply with --latency-slo: a latency target picks "
                          f"its own solvers (the stage DP and the stage integer program under the target; "
                          f"the SLO integer program for one device per stage); drop --solver")
    if model == "stages":  # load, solve, emit (placement/stages.py)
        if not args.workload.lower().endswith(".onnx"):  # a Piper-format workload
            w = stage_model().load(args, frontend_given(args))
            stage_model().refuse_serving(args)
            return stage_model().place(args, w)
        if wants_serving(args):
            from .serving import run_place_stages  # a sweep or a latency target on the stage model

            return run_place_stages(args, frontend(args, sweep=True))
        return stage_model().place(args, stage_model().load(args, frontend(args)))
    refuse_stage_options(args)  # --device-memory, --schedule etc. would be silently ignored here
    if wants_serving(args):  # a batch-size sweep or a latency target (placement.serving)
        code = run_place(args, frontend(args, sweep=True))
        _note_one_device_per_stage(args, kind)
        return code
    w = load_workload(args.workload, **frontend(args))
    progress = Progress("placing", enabled=True if args.progress else None)
    limit = args.clock.for_solve(args.solver, threads=args.threads)
    opts = SolveOptions(objective=args.objective, time_limit=limit, gap=gap,
                        threads=args.threads, seed=args.seed, progress=progress,
                        subgraphs_per_device=args.subgraphs_per_device, backend=args.backend, raw=raw)
    try:
        p = place(w.graph, w.cluster, args.solver, opts)
    finally:
        progress.done()
    p = dataclasses.replace(p, solution=args.clock.credited(p.solution))
    if p.solution.interrupted and p.evaluation is not None:
        from .. import _interrupt  # the first Ctrl-C kept this placement: later ones change nothing (exit 0)

        _interrupt.stopping()
    _note_one_device_per_stage(args, kind)
    print_result(args, p)
    if p.evaluation is None:
        proven = "infeasible: " if p.solution.status is Status.INFEASIBLE else ""  # as the stage model
        print(f"error: {proven}{cli_words(p.solution.message or 'no placement found')}", file=sys.stderr)
        return EXIT_NO_PLACEMENT
    return EXIT_OK


def _note_one_device_per_stage(args, kind: str) -> None:
    """An option that switched an ONNX model (workload ``kind``) from the stage model, its default, to one
    device per stage (:func:`placement.inputs.one_device_per_stage_by`): one note naming it, never a
    silent switch. Said once the placement has run: an option refused on the way is one error line."""
    from ..inputs import one_device_per_stage_by

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

    from ..inputs import wants_serving

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

