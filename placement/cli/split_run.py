"""``placement split MODEL RESULT`` and ``placement run MODEL RESULT``: cut an ONNX model into per-stage
sub-models as a result says (and check them with onnxruntime), or run them as a pipeline of worker
processes on this CPU beside the cost model's prediction: one device per stage's, and a stage plan's
below (``d`` worker processes per stage, ``t`` per replica of a tensor-parallel one), on
the one engine (:func:`placement.pipeline_run.run_pipeline`)."""

from __future__ import annotations

import math
import os
import sys

from .. import _interrupt
from ..outputs import aligned, output_dir, output_file
from .common import EXIT_NO_PLACEMENT, EXIT_OK, UsageError, recorded_frontend

__all__ = ["add_parser", "run_split", "run_run"]


def add_parser(sub) -> None:
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
    t.add_argument("--seed", type=int, default=0, help="seed of --verify's random inputs and weights "
                   "(default 0)")
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
    r.add_argument("--samples", "-n", type=int, default=None, metavar="N",
                   help="samples to stream, fed in whole batches of the batch size (N rounded up to a "
                        f"multiple of it, with a note; default {DEFAULT_RUNS} batches: {DEFAULT_RUNS} x "
                        f"the batch size)")
    r.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads of each session "
                   "(default 1); a worker process (a replica of a stage, or a rank of a tensor-parallel "
                   "one) runs one session at a time, so it computes on that many threads")
    r.add_argument("--optimize", action="store_true", help="let onnxruntime optimise the stage graphs "
                   "(off by default, as when profiling costs)")
    r.add_argument("--no-check", action="store_true", help="do not compare outputs with the whole model")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights (default 0)")
    r.add_argument("--json", action="store_true", help="print the measurements as JSON")
    _add_input_shape_options(r)


#: ``run`` without --samples: this many runs of the model (batches of the batch size)
DEFAULT_RUNS = 50


def runs_for_samples(samples: int | None, batch_size: int) -> tuple[int, str | None]:
    """``placement run --samples``: the runs of the model (batches of ``batch_size``) that stream
    ``samples`` samples, rounded up to whole batches, and the note that says so where it rounds
    (``None`` otherwise); ``samples`` ``None`` (not given): :data:`DEFAULT_RUNS` batches."""
    if samples is None:
        return DEFAULT_RUNS, None
    runs = -(-samples // batch_size)
    if runs * batch_size == samples:
        return runs, None
    return runs, (f"--samples {samples} at batch size {batch_size}: {runs} batch{'es' if runs != 1 else ''} "
                  f"({runs * batch_size} samples), as the model runs whole batches")


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
            raise UsageError(f"--dim {item!r}: expected NAME=N with N a positive integer")
        dims[name] = int(value)
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    return dims


def _input_shape(args, given: dict, result: dict, result_path: str, *, strict: bool,
                 model_dims: set[str] | None = None) -> dict:
    """The symbolic input dimensions to feed, the ``result``'s (read from ``result_path``) recorded ones
    unless given again; sets ``args.batch_size`` likewise (else 1). ``strict`` (run, whose prediction is
    for the recorded shape): a batch size or dimension given that differs from the recorded one is
    refused; one the model does not have (``model_dims``: those it has, :func:`_model_dims`) changes
    nothing, and :func:`_warn_unknown_dims` says so. ``given``: the ``--dim`` values, as :func:`_dims`
    parsed them."""
    from ..results import recorded_input_shape

    batch, dims = recorded_input_shape(result)
    if strict and dims is not None:
        if batch is not None and args.batch_size not in (None, batch):
            raise UsageError(f"placement run: --batch-size {args.batch_size}: {result_path} was placed at "
                              f"batch size {batch} and its prediction is for that batch; omit --batch-size, "
                              f"or place again with --batch-size {args.batch_size}")
        from graphs.onnx_loader import BATCH_NAMES

        # a batch-like dimension given at the recorded batch size restates it (--dim batch=1 at batch 1)
        other = {k: v for k, v in given.items() if dims.get(k) != v
                 and not (k not in dims and k.lower() in BATCH_NAMES and v == (batch or 1))
                 and (model_dims is None or k in model_dims)}
        if other:
            flags = " ".join(f"--dim {k}={v}" for k, v in other.items())
            was = ", ".join(f"{k}={dims[k]}" if k in dims else f"batch size {batch or 1}"
                            if k.lower() in BATCH_NAMES else f"{k} not given" for k in other)
            raise UsageError(f"placement run: {flags}: {result_path} was placed with {was} and its "
                              f"prediction is for that; omit it, or place again with {flags}")
    if args.batch_size is None:
        args.batch_size = batch or 1
    return {**(dims or {}), **given}


def _model_dims(model) -> set[str]:
    """The names of the symbolic dimensions of ``model``'s inputs."""
    return {d.dim_param for vi in model.graph.input if vi.type.HasField("tensor_type")
            for d in vi.type.tensor_type.shape.dim if d.dim_param}


def _warn_unknown_dims(model, dims: dict) -> None:
    """A --dim naming no symbolic dimension of the model's inputs changes nothing: say so."""
    names = _model_dims(model)
    unknown = sorted(set(dims) - names)
    if unknown:
        print(f"warning: --dim {', '.join(unknown)}: no input of the model has such a dimension "
              f"({', '.join(sorted(names)) or 'it has none'}); ignored", file=sys.stderr)


def _check_inputs(args) -> None:
    """``args.model`` and ``args.result`` (split's and run's) each name a file, else an
    :class:`~graphs.errors.InputError` naming the path (``no such file``, ``is a folder``), before
    either's kind is guessed from its name: a missing ``nope.onnx`` given as the result is no ONNX model,
    nor a sign that the two were swapped."""
    from ..load import check_input_path

    check_input_path(args.model, "an ONNX model (.onnx)")
    check_input_path(args.result, "a result file (written by placement place --out)")


def _missing_folders(*folders: str) -> list[str]:
    """The folders among ``folders`` and above them that do not exist yet (absolute, each once): those
    that checking them as outputs will make. Children before their parents, for :func:`_remove_empty`."""
    missing: list[str] = []
    for folder in folders:
        up = os.path.abspath(folder)
        while up not in missing and not os.path.exists(up):
            missing.append(up)
            up = os.path.dirname(up)
    return sorted(missing, key=len, reverse=True)  # a child's path is longer than its parent's


def _remove_empty(folders: list[str]) -> None:
    """Remove each of ``folders`` (children first) that exists and is empty; ``rmdir`` removes only an
    empty folder, so nothing written into one is lost, and one that cannot be removed is left."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _read_model(path: str):
    from graphs.onnx_loader import read_model

    if not path.lower().endswith(".onnx"):
        raise UsageError(f"{path!r} is not an ONNX model (.onnx)")
    return read_model(path, load_external_data=True)


def run_split(args) -> int:
    """``placement split MODEL RESULT``: one ONNX sub-model per stage (per device of a one-device-per-stage
    plan, per tensor-parallel rank and segment of a stage with ``t > 1``), the manifest and the annotated
    model written; with ``--verify``, the split run against the model in onnxruntime."""
    import onnx

    from graphs.jsonio import read_json

    from ..onnx_export import annotate, device_result, split_model, split_stages, verify_split, write_split
    from ..pipeline_run import checked_stage_plan
    from ..results import check_stage_plan_file, checked_result

    given_dims = _dims(args)
    from ..inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    if not (args.tolerance >= 0 and math.isfinite(args.tolerance)):
        raise UsageError(f"--tolerance must be a finite non-negative number, got {args.tolerance!r}")
    if not args.verify:  # the verify options do nothing without it: refused, not ignored
        for flag, value, default in (("--tolerance", args.tolerance, 1e-4), ("--seed", args.seed, 0),
                                     ("--batch-size", args.batch_size, None), ("--dim", args.dim, None)):
            if value != default:
                raise UsageError(f"{flag} applies with --verify (it sets the check's inputs); add --verify")
    if args.seed < 0:  # numpy's generator takes no negative seed
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    _check_inputs(args)
    data = result_json(args.result)  # the result and the model are each read once (None: not .json)
    refuse_not_result(args.result, "split", data, model=args.model)  # MODEL RESULT swapped, a workload...
    data = read_json(args.result) if data is None else data  # its own error for what is not JSON
    refuse_empty_result(data, "split", args.result)
    check_stage_plan_file(data, args.result)  # as evaluate checks it: problem section, stages' devices
    dims = _input_shape(args, given_dims, data, args.result, strict=False)
    annotated = args.annotated or os.path.join(
        args.out_dir, os.path.splitext(os.path.basename(args.model))[0] + ".placed.onnx")
    stages = holds_stage_plan(data)
    # the output checks make the folders, before the model is read and the result matched to it: a
    # failure from here on removes those it made (empty: nothing was written yet), and no other
    made = _missing_folders(args.out_dir, os.path.dirname(os.path.abspath(annotated)))
    try:
        if stages:
            output_dir(args.out_dir, "--out-dir")
            output_file(annotated, "--annotated")
        model = _read_model(args.model)
        _warn_unknown_dims(model, dims)
        # cut as the file says (a result of another model is refused there), then the plan the cut is
        # checked as evaluate reads it (refused as evaluate refuses it): the split cuts the plan it scores
        if stages:  # stages with replicas d and tensor-parallel degree t
            split = split_stages(model, data, source=args.result)
            unchecked = checked_stage_plan(data, args.model, source=args.result, model=model).unchecked
            placed = device_result(data)
        else:  # one device per stage
            placed = checked_result(data, args.result)
            output_dir(args.out_dir, "--out-dir")
            output_file(annotated, "--annotated")
            split = split_model(model, placed, source=args.result)
            unchecked = _checked_device_plan(args, model, placed)[1]
    except BaseException:  # a Ctrl-C too: the folders made for files never written go with it
        _remove_empty(made)
        raise
    with _interrupt.deferred():  # a Ctrl-C now lets the files be written whole, then stops
        manifest = write_split(split, args.out_dir)
        onnx.save_model(annotate(model, placed), annotated)
    print(f"{len(split.submodels)} sub-model(s) written to {args.out_dir}/ (manifest.json); annotated model: "
          f"{annotated}")
    for line in (_stage_lines if stages else _device_lines)(manifest):
        print(f"  {line}")
    for note in split.notes:
        print(f"note: {note}")
    if unchecked:
        print(f"note: the plan is not checked against the cost model: {unchecked}; it is cut as the file "
              f"lists it")
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


def _device_lines(manifest: dict) -> list[str]:
    """One line per sub-model of a one-device-per-stage split."""
    return [f"{s['file']}: {s['device']} ({s['kind']}), {s['nodes']} operators, inputs "
            f"{_names(s['inputs'])}, outputs {_names(s['outputs'])}" for s in manifest["submodels"]]


def _stage_lines(manifest: dict) -> list[str]:
    """One line per stage of a stage plan's split: its replicas' devices, or a tensor-parallel stage's
    rank files, segments and collectives."""
    lines = []
    for s in manifest["submodels"]:
        tp = s.get("tensor_parallel")
        if tp is None:
            on = ", ".join(d for devices in s["replica_devices"] for d in devices)
            lines.append(f"{s['file']}: stage {s['stage']}, {s['replicas']} replica(s) on {on}, "
                         f"{s['nodes']} operators")
            continue
        files = [f for seg in tp["segments"] for f in seg["files"]]
        ops = {c["op"] for c in tp["collectives"]}
        groups = "; ".join(", ".join(g) for g in s["replica_devices"])
        lines.append(f"{files[0]} .. {files[-1]}: stage {s['stage']}, {s['replicas']} replica(s) of "
                     f"{tp['degree']} tensor-parallel ranks on {groups}, {s['nodes']} operators "
                     f"({tp['split_operators']} split), {len(tp['segments'])} segment(s) per rank "
                     f"between {len(tp['collectives'])} collective(s)"
                     + (f" ({', '.join(sorted(ops))})" if ops else ""))
    return lines


def _names(xs, k: int = 3) -> str:
    xs = list(xs)
    return ", ".join(xs[:k]) + (f" (+{len(xs) - k})" if len(xs) > k else "") if xs else "-"


def run_run(args) -> int:
    from graphs.jsonio import read_json

    from ..onnx_export import split_model, split_stages
    from ..pipeline_run import (
        checked_stage_plan,
        describe_runs,
        run_inputs,
        run_pipeline,
        run_report,
        stage_plan_prediction,
    )
    from ..results import check_stage_plan_file, checked_result

    for flag, value in (("--samples", args.samples), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise UsageError(f"placement run: {flag} must be at least 1, got {value}")
    if args.seed < 0:  # numpy's generator takes no negative seed
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    _check_inputs(args)
    if args.model.lower().endswith(".json") and args.result.lower().endswith(".onnx"):
        args.model, args.result = args.result, args.model
        print("note: placement run takes MODEL RESULT (as split does); RESULT MODEL is deprecated",
              file=sys.stderr)
    given_dims = _dims(args)
    from ..inputs import holds_stage_plan, refuse_empty_result, refuse_not_result, result_json

    data = result_json(args.result)  # the result and the model are each read once (None: not .json)
    refuse_not_result(args.result, "run", data)  # a workload, a frontier...: said so
    data = read_json(args.result) if data is None else data  # its own error for what is not JSON
    refuse_empty_result(data, "run", args.result)
    check_stage_plan_file(data, args.result)  # as evaluate checks it: problem section, stages' devices
    model = _read_model(args.model)  # first: a --dim it has no dimension for is said so, not refused
    dims = _input_shape(args, given_dims, data, args.result, strict=True, model_dims=_model_dims(model))
    runs, rounded = runs_for_samples(args.samples, args.batch_size)  # --samples counts samples, not batches
    if rounded:
        print(f"note: {rounded}", file=sys.stderr)
    _warn_unknown_dims(model, dims)
    # the prediction first: its notes (a plan edited by hand, a model not rebuilt) come before the run
    # a training plan runs its forward pass only: it is predicted so, where the forward part can be told
    # the plan evaluate scores, or refused as evaluate refuses it (after the split, which names a result
    # of another model): the run and its prediction are of that plan
    if holds_stage_plan(data):  # stages with replicas d and tensor-parallel degree t
        split = split_stages(model, data, source=args.result)
        checked = checked_stage_plan(data, args.model, source=args.result, model=model)
        training = bool((data.get("problem") or {}).get("training"))
        pred, by, pred_notes = stage_plan_prediction(data, args.model, runs, args.batch_size,
                                                     source=args.result, model=model, forward_only=training,
                                                     checked=checked)
    else:  # one device per stage
        result = checked_result(data, args.result)
        split = split_model(model, result, source=args.result)
        workload, why = _checked_device_plan(args, model, result)
        training = any(str(nm).endswith("_grad") for d in result["devices"] for nm in d["nodes"])
        on = [s.device for s in split.submodels]
        pred, by, pred_notes = _run_prediction(args, result, workload, why, on, runs, forward_only=training)
    manifest = split.manifest()
    for note in pred_notes:
        print(f"note: {note}", file=sys.stderr)
    parts, feeds, reference = run_inputs(model, [s.model for s in split.submodels], seed=args.seed, dims=dims,
                                         batch_size=args.batch_size, threads=args.threads,
                                         optimize=args.optimize, check=not args.no_check, manifest=manifest)
    run = run_pipeline(parts, manifest, feeds, samples=runs, threads=args.threads,
                       optimize=args.optimize, reference=reference)
    if training:
        print("note: this is a training plan; the run executes the forward pass only" + (
              "" if pred is None else ", compared with the forward pass's part of the prediction"
              if pred.forward_only else ", while the prediction includes the backward pass (not like for "
              "like)"), file=sys.stderr)
    doc = {"stages": len(run.replicas), "replicas": list(run.replicas),
           "tensor_parallel": list(run.tensor_parallel), "workers": run.workers,
           **run_report(run, pred, args.batch_size, predicted_by=by, training=training),
           "utilisation": list(run.utilisation),
           "replica_busy_s": [list(b) for b in run.busy_s], "replica_samples": [list(t) for t in run.taken],
           "max_abs_diff": run.max_abs_diff, "notes": list(split.notes) + pred_notes}
    ok = run.max_abs_diff is None or all(d <= 1e-4 for d in run.max_abs_diff.values())
    if args.json:
        from ..export import print_json

        print_json(doc)
        return EXIT_OK if ok else EXIT_NO_PLACEMENT
    for note in split.notes:
        print(f"note: {note}")
    b = args.batch_size
    print(f"{describe_runs(run.samples, b)} through {len(run.replicas)} stage(s) on {run.workers} worker "
          f"process(es) in {run.wall_s:.3f} s")
    per = "ms/sample" if b == 1 else "ms/batch"
    rows = [["stage", "devices", "replicas", "t", f"predicted {per}", f"measured {per}", "busy",
             f"{'samples' if b == 1 else 'batches'} per replica"]]
    tps = run.tensor_parallel or (1,) * len(run.replicas)
    # the predicted loads per row where the prediction has one per sub-model (not a device cut into several)
    loads = pred.stage_loads if pred is not None and len(pred.stage_loads) == len(split.submodels) else None
    for k, (sub, entry) in enumerate(zip(split.submodels, manifest["submodels"])):
        on = ", ".join(d for devices in entry["replica_devices"] for d in devices) \
            if entry.get("replica_devices") else sub.label
        p = loads[k] if loads is not None else math.nan
        rows.append([str(k), on, str(run.replicas[k]), str(tps[k]), f"{p:.3f}", f"{run.stage_ms[k]:.3f}",
                     f"{100 * run.utilisation[k]:.1f}%", ", ".join(map(str, run.taken[k]))])
    print(aligned(rows, lambda i: 2 <= i <= 6))  # the figures (replicas to busy) to the right
    _print_run_summary(doc, run, ok)
    return EXIT_OK if ok else EXIT_NO_PLACEMENT


def _checked_device_plan(args, model, result: dict):
    """A one-device-per-stage ``result`` (read from ``args.result``) as ``placement evaluate`` reads it:
    the workload rebuilt from the ONNX model (``model``, as split and run read it) costed with the
    front-end settings the result records, and the placement read on it by
    :func:`placement.results.assignment_from_result` (its ``devices[]`` against the model and the
    cluster, its ``stages[]`` against its ``devices[]``), which raises :class:`~graphs.errors.InputError`
    where evaluate refuses the result. ``(workload, None)``; ``(None, why)`` where the result records no
    front-end settings or its workload cannot be rebuilt (the placement is then not checked)."""
    from graphs.errors import PlacementError
    from graphs.onnx_workload import onnx_workload

    from ..results import assignment_from_result

    if not isinstance(result.get("frontend"), dict) or not result["frontend"]:
        return None, "it records no front-end settings to rebuild the model's costs from"
    frontend = recorded_frontend(result, args.result)
    try:
        w = onnx_workload(args.model, model=model, **frontend)
    except PlacementError as e:
        return None, f"the model's costs could not be rebuilt as placed ({e})"
    assignment_from_result(result, w.graph, w.cluster, source=args.result)
    return w, None


def _run_prediction(args, result: dict, w, why: str | None, run_devices: list[str], runs: int, *,
                    forward_only: bool = False):
    """``placement run``'s prediction of a one-device-per-stage result for ``runs`` runs of the model:
    ``(prediction, predicted_by, notes)``. The plan as it stands (``devices[].nodes``, perhaps edited by
    hand) is scored again by the evaluator on ``w``, the workload :func:`_checked_device_plan` rebuilt
    (the model costed with the front-end settings the result records); a result without one (``why``
    says why) is predicted from its recorded loads, and a note says so. A plan that does not score gets
    no prediction. ``forward_only`` (a training plan, whose forward pass alone runs): the forward pass's
    part of the rebuilt plan's loads; the recorded loads do not keep it apart (the whole step is
    predicted then, with a note)."""
    from graphs.errors import PlacementError

    from ..pipeline_run import predicted_time_per_sample, rescored_time_per_sample

    if w is not None:
        frontend = recorded_frontend(result, args.result)
        order = list(dict.fromkeys(run_devices))  # a device cut into several sub-models: once
        unit = w.graph.meta.get("unit") or result.get("time_unit") or "ms"
        try:
            pred, notes = rescored_time_per_sample(result, w.graph, w.cluster, runs, order=order,
                                                   unit=unit, forward_only=forward_only)
        except PlacementError as e:
            return None, f"the plan as it stands is not scored: {e}", []
        edited = any(n.startswith("the result's recorded") for n in notes)
        if edited and frontend.get("costs") == "profile":
            notes.append("the costs were profiled again to score the plan, so its loads also differ from "
                         "the recorded ones by the measurement's noise")
        by = "the evaluator's loads of the plan as it stands (model rebuilt as placed)"
        return pred, f"the forward pass's part of {by}" if pred.forward_only else by, notes
    pred = predicted_time_per_sample(result, runs)
    notes = [f"predicted from the result's recorded loads: {why}; a plan edited by hand is predicted as it "
             f"was placed"]
    if forward_only:
        notes.append("the prediction is of the forward and backward passes: the recorded loads do not keep "
                     "the forward pass apart")
    return pred, "the result's recorded loads", notes


def _print_run_summary(doc: dict, run, ok: bool) -> None:
    """The lines every ``placement run`` ends with, whichever plan ran: throughput and the prediction
    (:func:`placement.pipeline_run.format_run_summary`), then whether the outputs match."""
    from ..pipeline_run import format_run_summary

    for line in format_run_summary(doc):
        print(line)
    if run.max_abs_diff is not None:
        worst = max(run.max_abs_diff.values(), default=0.0)
        print(f"outputs match the whole model: {'yes' if ok else 'NO'} (max abs diff {worst:.3g})")
