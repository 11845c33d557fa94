"""``placement place config.json``: decoding an LLM (a model config in the Hugging Face layout) on the
stage model (:mod:`graphs.llm`): layer ranges on stages with replicas and tensor parallelism, memory =
weights + the KV cache of the batch, the objective the time per generated token.

    placement place config.json --devices a100:4,l4:8 --batch-size 64 --context 2048
                    [--microbatches N] [--max-replicas D] [--solver dp|ip|auto] [--out plan.json]

The result file is a stage plan (:func:`placement.stages.result_dict`, times in seconds per token) whose
``problem`` section records the model config's path, the devices, the batch and the context, so that
``evaluate`` re-scores it without flags.
"""

from __future__ import annotations

from graphs.errors import InputError
from graphs.jsonio import read_json

__all__ = ["add_options", "handles", "place", "evaluate"]

DEFAULT_CONTEXT = 2048


def add_options(p) -> None:
    g = p.add_argument_group("LLM model configs (config.json: decoding, one token per sample)")
    g.add_argument("--context", type=int, default=None, metavar="TOKENS",
                   help=f"tokens of each sequence's KV cache (default {DEFAULT_CONTEXT}); --batch-size is "
                        f"the number of sequences decoded together (default 1)")


def handles(path: str) -> bool:
    """Is ``path`` a model config (``num_hidden_layers`` and ``hidden_size``)?"""
    from graphs.llm import is_llm_config

    if not str(path).lower().endswith(".json"):
        return False
    try:
        return is_llm_config(read_json(path))
    except InputError:
        return False


def _problem(args, saved: dict | None = None):
    from graphs.devices import parse_devices
    from graphs.llm import decode_problem, read_config

    saved = saved or {}
    for flag in ("max_devices", "bandwidth", "device_memory", "granularity", "training", "optimizer",
                 "costs", "dim", "schedule"):
        if getattr(args, flag, None) not in (None, False, []):
            raise InputError(f"--{flag.replace('_', '-')} does not apply to a model config (it takes "
                             f"--devices, --device-file, --batch-size, --context, --microbatches, "
                             f"--max-replicas)")
    batch = args.batch_size if args.batch_size is not None else saved.get("batch_size", 1)
    if not isinstance(batch, int):
        raise InputError(f"--batch-size {batch}: a model config takes one batch size (sequences decoded "
                         f"together)")
    context = args.context if args.context is not None else saved.get("context", DEFAULT_CONTEXT)
    devices = args.devices or saved.get("devices") or "a100:4"
    ds = parse_devices(devices, args.device_files or ())
    cfg = read_config(args.workload)
    problem = decode_problem(cfg, ds, batch=batch, context=context,
                             microbatches=args.microbatches or saved.get("microbatches"),
                             max_replicas=args.max_replicas or saved.get("max_replicas"))
    settings = {"devices": str(ds), "batch_size": batch, "context": context, "model": cfg.name,
                "params": cfg.params}
    return problem, settings


def place(args) -> int:
    """Solve the decode problem of the model config ``args.workload`` and print the stage table."""
    from .stages import _emit, no_plan, plan_summary, result_dict, solve_args

    problem, settings = _problem(args)
    r = solve_args(problem, args)
    if r.plan is None:
        return no_plan(args, r)
    data = result_dict(problem, r.evaluation, status=str(r.status), solver=r.solver, time=r.time,
                       message=r.message, workload=args.workload, bound=r.bound, settings=settings)
    summary = plan_summary(problem, r.evaluation, "ms", result=r, sample="token",
                           extra=f"{settings['batch_size']} sequences at {settings['context']} tokens")
    _emit(args, data, problem, r.evaluation, summary, "ms")
    return 0


def evaluate(args) -> int:
    """Re-score a plan of a model config under the settings it records."""
    from graphs.parallel import evaluate_plan

    from .stages import _emit, plan_from_dict, plan_summary, read_stage_result, result_dict

    data = read_json(args.split)
    problem, settings = _problem(args, read_stage_result(data) if isinstance(data, dict) else None)
    ev = evaluate_plan(problem, plan_from_dict(problem, data, source=args.split))
    out = result_dict(problem, ev, status="feasible" if ev.valid else "invalid", solver="given plan",
                      message=f"plan from {args.split}", workload=args.workload, settings=settings)
    _emit(args, out, problem, ev, plan_summary(problem, ev, "ms", sample="token"), "ms")
    return 0 if ev.valid else 1
