"""``placement example OUT``: write an example the tool makes itself (a BERT-style ONNX encoder, a
reference-format layer graph, or a shared-cluster job list)."""

from __future__ import annotations

import os

from .. import _interrupt
from ..outputs import output_file
from .common import EXIT_OK, UsageError

__all__ = ["add_parser", "run"]

MAX_LAYERS = 1000  # larger than any reference workload; building takes seconds per hundred layers


def add_parser(sub) -> None:
    x = sub.add_parser("example", help="write an example model or workload", description="Write an "
                       "example the tool makes itself: OUT.onnx is a BERT-style encoder (ONNX, checked and "
                       "runnable in onnxruntime); OUT.json a transformer-like layer graph in the reference "
                       "format, with its own devices and costs.")
    x.add_argument("out", nargs="?", default="example.json", help="output file, .onnx or .json (default "
                   "example.json)")
    x.add_argument("--layers", type=int, default=None, help="transformer layers (encoder blocks) of the "
                   f"example, 1 to {MAX_LAYERS} (default 6; not for a job list)")
    x.add_argument("--accelerators", type=int, default=None, help=".json: number of accelerators (default 4)")
    x.add_argument("--cpus", type=int, default=None, help=".json: number of CPU cores (default 1)")
    x.add_argument("--training", action="store_true", help=".json: add the backward pass (an .onnx model "
                   "is placed for training with place --training)")


def run(args) -> int:
    from graphs.example import transformer_layer_graph

    from ..cluster.example import is_job_list_name, write_example_jobs
    from ..export import write_json

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
            raise UsageError(f"placement example: {flag} shapes {shapes}; {args.out} is {what}, which it "
                              f"does not change{hints.get(flag, '')}")
    args.layers = 6 if args.layers is None else args.layers
    args.accelerators = 4 if args.accelerators is None else args.accelerators
    args.cpus = 1 if args.cpus is None else args.cpus
    if job_list:  # jobs.json, trace.json: a shared-cluster job list
        output_file(args.out, "placement example:")
        print(write_example_jobs(args.out))
        return EXIT_OK
    if suffix not in (".onnx", ".json"):
        raise UsageError(f"placement example: {args.out!r} must end in .onnx (an ONNX model) or .json "
                          f"(a reference-format workload)")
    if not 1 <= args.layers <= MAX_LAYERS:  # 100,000 ran for minutes without a word
        raise UsageError(f"placement example: --layers must be from 1 to {MAX_LAYERS}, got {args.layers}")
    if suffix == ".json":
        for flag, n in (("--accelerators", args.accelerators), ("--cpus", args.cpus)):
            if n < 0:
                raise UsageError(f"placement example: {flag} must be 0 or more, got {n}")
        if args.accelerators + args.cpus == 0:
            raise UsageError("placement example: --accelerators 0 --cpus 0 leaves no device")
    output_file(args.out, "placement example:")
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

