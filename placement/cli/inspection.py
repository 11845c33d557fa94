"""``placement inspect MODEL``: summarise an ONNX model (operators, parameters, FLOPs, largest
tensors), and with ``-o`` write its costed graph in the reference format."""

from __future__ import annotations

from .. import _interrupt
from ..outputs import output_file
from .common import EXIT_OK, UsageError, add_frontend_options, frontend

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    i = sub.add_parser("inspect", help="summarise an ONNX model", description="Print an ONNX model's "
                       "operators, parameters, FLOPs and largest tensors; with -o, also write its costed "
                       "graph in the reference JSON format. Operators are counted after constant folding "
                       "(Constant nodes and shape arithmetic on constants become values), so the count is "
                       "below the model file's node count.")
    i.add_argument("model", help="ONNX model (.onnx)")
    i.add_argument("--out", "-o", default=None, metavar="GRAPH.json",
                   help="write the annotated graph (reference format) to GRAPH.json (default: write nothing)")
    add_frontend_options(i)


def run(args) -> int:
    from graphs.onnx_workload import describe, prepare_onnx, reference_document

    from ..export import write_json

    if not args.model.lower().endswith(".onnx"):
        raise UsageError(f"placement inspect: {args.model!r} is not an ONNX model (.onnx)")
    if args.out:
        output_file(args.out, "--out")
    g, w = prepare_onnx(args.model, **{k: v for k, v in frontend(args).items() if v is not None})
    # what the reference format cannot hold (a second accelerator kind) is refused before anything prints
    doc = reference_document(w.graph, w.cluster) if args.out else None
    print(describe(g, w.graph, show_warnings=False))
    if w.graph.is_training:
        forward = int((~w.graph.backward).sum())
        print(f"({w.graph.num_nodes} operators in the costed graph: the {forward} of the forward pass after "
              f"constant folding, and their backward twins; the file's Constant nodes and shape arithmetic "
              f"on constants are values here)")
    else:
        print(f"({w.graph.num_nodes} operators after constant folding; the file's Constant nodes and shape "
              f"arithmetic on constants are values here)")
    if args.out:
        with _interrupt.deferred():
            write_json(args.out, doc)
        b = w.graph.batch_size  # the file records it ("batch_size"): its times are per run of the batch
        per = f" per batch of {b}" if b > 1 else ""
        print(f"annotated graph ({w.graph.num_nodes} nodes, {w.graph.meta.get('costs')} costs in ms{per}, "
              f"{w.graph.meta.get('devices')}) written to {args.out}")
    return EXIT_OK

