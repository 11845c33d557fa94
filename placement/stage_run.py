"""A stage plan applied to its ONNX model: ``placement split`` writes one sub-model per stage with the
stage's replicas listed in the manifest, and ``placement run`` runs ``d`` worker processes for a stage of
data-parallel degree ``d``, samples dealt round robin (:func:`placement.pipeline_run.run_pipeline`, the one
engine for both models: a one-device-per-stage placement is the ``d = 1`` case).

The plan is a result JSON with ``stages`` (schema version 2, or version 1's ``"format":
"placement-replicated"``): each stage's ``nodes`` name the model's operators (or its ``operators`` do),
``dataParallelDegree`` is ``d`` and ``tensorParallelDegree`` is ``t``.

**Split.** The stages become a one-device-per-stage placement (each stage a device named by its
devices, ``cpu:3-5``) cut by :func:`placement.onnx_export.split_stages`; every manifest entry then has
``replicas`` (``d``) and ``replica_devices`` (each replica's ``t`` devices in rank order: the result's
own device names, or ``kind:index`` numbered per kind across the stages in pipeline order, ``d * t`` per
stage). A stage with ``t > 1`` is split ``t`` ways (:mod:`placement.tensor_parallel`): its entry's
``tensor_parallel`` lists the ranks' segment files and the collectives between the segments; a stage
holding an operator the splitter cannot divide ``t`` ways is refused by name (the cost model offers
``t`` only where it can).

**Run.** Each worker is one process with one onnxruntime session on ``threads`` threads (a
tensor-parallel rank: one session per segment); a stage of degree ``t`` runs ``d * t`` workers, the
ranks of a replica exchanging the tensors of every collective through queues. The parent feeds every
sample at once, times the stream after a warm-up that reaches every replica, and compares the outputs
with the whole model's.

The library functions print nothing; ``split_command`` and ``run_command`` are the CLI's handlers.
Problems raise :class:`~graphs.errors.InputError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from graphs.errors import InputError

from .onnx_export import device_result, replica_plan

__all__ = ["device_result", "replica_plan", "split_stage_plan", "stage_prediction", "split_command",
           "run_command"]


def split_stage_plan(model, data: Mapping, *, source: str | None = None):
    """``(split, manifest)``: the sub-models of the plan's stages (:func:`placement.onnx_export.
    split_model` of :func:`placement.onnx_export.device_result`), the manifest listing every sub-model's
    ``replicas`` and ``replica_devices``."""
    from .onnx_export import split_stages

    split = split_stages(model, data, source=source)
    return split, split.manifest()


def stage_prediction(data: Mapping, model_path: str, samples: int, batch_size: int, *,
                     source: str | None = None, model=None):
    """``placement run``'s prediction of the stage plan ``data`` for ``samples`` runs at ``batch_size``:
    ``(prediction, predicted_by, notes)``. The stages as they stand (their nodes, ``d`` and ``t``,
    perhaps edited by hand) are scored again by :func:`graphs.parallel.evaluate_plan` on the problem
    rebuilt from the settings the result records (:func:`placement.stages.workload_for_result`, the ONNX
    model at ``model_path``; ``model``: its ``onnx.ModelProto`` where run has read it, not read again); a
    result that records too little to rebuild it is predicted from its recorded times per sample, and a
    note says so. A plan that does not score on the rebuilt problem gets no prediction (``None``, and
    why)."""
    from .pipeline_run import predicted_stage_plan, rescored_stage_plan
    from .stages import plan_from_dict, workload_for_result

    why = _unrebuildable(data)
    if why is None:
        try:
            w = workload_for_result(dict(data), model_path, source=source, model=model)
        except InputError as e:
            why = f"the problem could not be rebuilt from it ({e})"
    if why is None:
        try:
            plan = plan_from_dict(w.problem, dict(data), source=source)
            _check_operators(w, data, source)
            pred, notes = rescored_stage_plan(data, w.problem, plan, samples, batch_size)
        except InputError as e:
            return None, f"the plan as it stands is not scored: {e}", []
        return pred, "the stage evaluator's time per sample of each stage of the plan as it stands", notes
    try:
        pred = predicted_stage_plan(data, samples, batch_size)
    except InputError as e:
        return None, f"{e}; {why}", []
    return (pred, "the stage evaluator's time per sample of each stage, as the result records it",
            [f"predicted from the result's recorded times per sample: {why}; a plan edited by hand is "
             f"predicted as it was placed"])


def _unrebuildable(data: Mapping) -> str | None:
    """Why a version-2 result's ``problem`` section cannot rebuild its problem, where the reader would not
    say: without the section's device spec (a string) it would take the file's top-level ``devices`` (one
    row per device) for one. ``None``: it may."""
    if data.get("format") == "placement-replicated":  # version 1: flat, the reader checks it
        return None
    problem = data.get("problem")
    if not isinstance(problem, Mapping):
        return "it records no 'problem' section"
    if not isinstance(problem.get("devices"), str) or not problem["devices"].strip():
        return "its 'problem' section records no device spec ('devices')"
    return None


def _check_operators(w, data: Mapping, source: str | None) -> None:
    """The split runs a stage's ``operators`` where the result lists them, the evaluator scores its
    ``nodes``: a stage whose two lists disagree (one edited by hand, not the other) would be predicted as
    another plan than the one run, so it is refused by name."""
    if w.graph is None or w.node_of is None:
        return
    members: dict[int, set[str]] = {}
    for u, c in enumerate(w.node_of):
        members.setdefault(int(c), set()).add(w.graph.names[u])
    index = {str(x): i for i, x in enumerate(w.problem.graph.ids)}
    for i, s in enumerate(data["stages"]):
        ops = s.get("operators")
        if not isinstance(ops, list) or not ops:
            continue
        want = {op for x in s["nodes"] for op in members.get(index.get(str(x), -1), ())}
        if set(map(str, ops)) != want:
            raise InputError(f"stages[{i}]: its 'operators' are not the operators of its 'nodes' (edit both, "
                             f"or drop 'operators'): the run splits the operators, the cost model scores "
                             f"the nodes", source=source)


# --------------------------------------------------------------------------- command line
def split_command(args, dims: dict, model, data: dict) -> int:
    """``placement split MODEL RESULT`` for a stage plan: ``model`` the ONNX model and ``data`` the
    result, each as the command read it."""
    import os

    import onnx

    from .onnx_export import annotate, verify_split, write_split

    split, _ = split_stage_plan(model, data, source=args.result)
    manifest = write_split(split, args.out_dir)
    annotated = args.annotated or os.path.join(
        args.out_dir, os.path.splitext(os.path.basename(args.model))[0] + ".placed.onnx")
    onnx.save_model(annotate(model, device_result(data)), annotated)
    print(f"{len(split.submodels)} sub-model(s) written to {args.out_dir}/ (manifest.json); annotated model: "
          f"{annotated}")
    for s in manifest["submodels"]:
        tp = s.get("tensor_parallel")
        if tp is None:
            on = ", ".join(d for devices in s["replica_devices"] for d in devices)
            print(f"  {s['file']}: stage {s['stage']}, {s['replicas']} replica(s) on {on}, "
                  f"{s['nodes']} operators")
            continue
        files = [f for seg in tp["segments"] for f in seg["files"]]
        ops = {c["op"] for c in tp["collectives"]}
        groups = "; ".join(", ".join(g) for g in s["replica_devices"])
        print(f"  {files[0]} .. {files[-1]}: stage {s['stage']}, {s['replicas']} replica(s) of "
              f"{tp['degree']} tensor-parallel ranks on {groups}, {s['nodes']} operators "
              f"({tp['split_operators']} split), {len(tp['segments'])} segment(s) per rank "
              f"between {len(tp['collectives'])} collective(s)"
              + (f" ({', '.join(sorted(ops))})" if ops else ""))
    for note in split.notes:
        print(f"note: {note}")
    if not args.verify:
        return 0
    rep = verify_split(model, [s.model for s in split.submodels], manifest, tolerance=args.tolerance,
                       seed=args.seed, dims=dims, batch_size=args.batch_size)
    print(f"verify: {'OK' if rep.ok else 'FAILED'}, max abs diff {rep.worst:.3g} "
          f"(tolerance {args.tolerance:g})")
    return 0 if rep.ok else 1


def run_command(args, dims: dict, model, data: dict) -> int:
    """``placement run MODEL RESULT`` for a stage plan (``model`` and ``data`` as the command read
    them): ``d`` processes per stage, at ``args.batch_size``, next to the stage evaluator's prediction
    of the plan as it stands (:func:`stage_prediction`)."""
    import sys

    from .export import print_json
    from .pipeline_run import describe_runs, format_run_summary, run_inputs, run_pipeline, run_report

    split, manifest = split_stage_plan(model, data, source=args.result)
    # the prediction first: its notes (a plan edited by hand, a problem not rebuilt) come before the run
    pred, by, pred_notes = stage_prediction(data, args.model, args.samples, args.batch_size,
                                            source=args.result, model=model)
    for note in pred_notes:
        print(f"note: {note}", file=sys.stderr)
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=args.seed, dims=dims,
                                         batch_size=args.batch_size, threads=args.threads,
                                         optimize=args.optimize, check=not args.no_check, manifest=manifest)
    run = run_pipeline(parts, manifest, feeds, samples=args.samples, threads=args.threads,
                       optimize=args.optimize, reference=reference)
    ok = run.max_abs_diff is None or all(d <= 1e-4 for d in run.max_abs_diff.values())
    if pred is not None and len(pred.stage_loads) != len(split.submodels):
        pred, by = None, f"the plan has {len(pred.stage_loads)} stages but {len(split.submodels)} sub-models"
    if (data.get("problem") or {}).get("training"):
        print("note: this is a training plan; the run executes the forward pass only, while the prediction "
              "includes the backward pass", file=sys.stderr)
    doc = {"replicas": list(run.replicas), "tensor_parallel": list(run.tensor_parallel),
           "workers": run.workers,
           **run_report(run, pred, args.batch_size, predicted_by=by),
           "replica_busy_s": [list(b) for b in run.busy_s], "replica_samples": [list(t) for t in run.taken],
           "max_abs_diff": run.max_abs_diff, "notes": list(split.notes) + pred_notes}
    if args.json:
        print_json(doc)
    else:
        b = args.batch_size
        print(f"{describe_runs(run.samples, b)} through {len(run.replicas)} stage(s) on {run.workers} worker "
              f"process(es) in {run.wall_s:.3f} s")
        per = "ms/sample" if b == 1 else "ms/batch"
        print(f"{'stage':<6}{'replicas':>9}{'t':>3}{'predicted ' + per:>20}{'measured ' + per:>19}  "
              f"{'samples' if b == 1 else 'batches'} per replica")
        for k, (d, tp, ms, t) in enumerate(zip(run.replicas, run.tensor_parallel, run.stage_ms, run.taken)):
            p = pred.stage_loads[k] if pred is not None else float("nan")
            print(f"{k:<6}{d:>9}{tp:>3}{p:>20.3f}{ms:>19.3f}  {', '.join(map(str, t))}")
        for line in format_run_summary(doc):
            print(line)
        if run.max_abs_diff is not None:
            worst = max(run.max_abs_diff.values(), default=0.0)
            print(f"outputs match the whole model: {'yes' if ok else 'NO'} (max abs diff {worst:.3g})")
    return 0 if ok else 1
