"""Giving a model with a batch fixed in the file (the model zoo's ``1 x 3 x 224 x 224``) a symbolic one,
so that it can be costed and run at other batch sizes.

:func:`symbolic_batch` renames the leading dimension of every graph input and output that has the
file's batch to ``N``, drops the stored intermediate shapes (shape inference redoes them) and rewrites
constant ``Reshape`` targets that start with the file's batch to start with ``0`` (copy the input's
leading dimension). :func:`graphs.onnx_loader.load_onnx` with ``batch_size`` then sets ``N``; a model
whose shapes do not follow is caught by :func:`check_batch` (its outputs must lead with the batch).

:func:`batch_from_dims` reads a value given for the model's batch dimension by name (``dims={"batch":
2}``, ``--dim batch=2``) as the batch size, so that it means what ``batch_size`` means.
"""

from __future__ import annotations

from .errors import InputError

__all__ = ["symbolic_batch", "has_symbolic_batch", "check_batch", "batch_dim_names", "batch_from_dims",
           "BATCH_NAMES"]

BATCH_DIM = "N"
#: symbolic dimension names that mean the batch wherever they appear (also :mod:`graphs.onnx_loader`'s)
BATCH_NAMES = frozenset({"batch", "batch_size", "batchsize", "n", "b", "bs", "batch_dim"})


def symbolic_input_dims(graph):
    """``(input name, axis, dimension name)`` of every symbolic dimension of ``graph``'s inputs (those
    that are no initializer), in input and axis order; a dimension with no name is ``<input>:<axis>``."""
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                yield vi.name, axis, d.dim_param or f"{vi.name}:{axis}"


def has_symbolic_batch(model) -> bool:
    """Whether some graph input has a symbolic leading dimension."""
    return any(axis == 0 for _, axis, _ in symbolic_input_dims(model.graph))


def batch_dim_names(model) -> set[str]:
    """The names of ``model``'s batch dimension: the symbolic input dimensions named like a batch
    (:data:`BATCH_NAMES`), or where none is, the inputs' symbolic leading ones (an
    exporter's ``s0``). The loader sets both kinds to the batch size; a leading one beside a dimension
    named like a batch (a sequence-first ``[seq, batch, ...]``) is not counted here, as a value given for
    it is not the batch. (A dimension with no name is ``<input>:<axis>``, as the loader calls it.)"""
    named, leading = set(), set()
    for _, axis, name in symbolic_input_dims(model.graph):
        if name.lower() in BATCH_NAMES:
            named.add(name)
        elif axis == 0:
            leading.add(name)
    return named or leading


def batch_from_dims(model, batch_size: int | None, dims, *, source: str | None = None):
    """``(batch_size, dims)`` with a value ``dims`` gives for ``model``'s batch dimension
    (:func:`batch_dim_names`) taken as the batch size and dropped from ``dims``: ``dims={"batch": 2}`` is
    ``batch_size=2`` (a sample is one of the 2, not the run of them). :class:`InputError` where the batch
    size and such a value (or a batch-like name the model lacks), or two such values, differ. A value that
    is not a positive integer is left in ``dims`` for the loader to refuse."""
    if not dims:
        return batch_size, dims
    names = batch_dim_names(model)
    given = {k: v for k, v in dims.items() if k in names
             and isinstance(v, int) and not isinstance(v, bool) and v >= 1}
    for k, v in dims.items():
        if batch_size is not None and (k in given or str(k).lower() in BATCH_NAMES) and v != batch_size:
            raise InputError(f"dimension {k!r} = {v} (dims / --dim) and batch size {batch_size} (batch_size "
                             f"/ --batch-size) both set the batch; give one of them", source=source)
    if len(set(given.values())) > 1:
        said = ", ".join(f"{k!r} = {v}" for k, v in given.items())
        raise InputError(f"dimensions {said} (dims / --dim) are all the model's batch dimension and "
                         f"differ; give one batch size (batch_size / --batch-size)", source=source)
    if not given:
        return batch_size, dims
    return next(iter(given.values())), {k: v for k, v in dims.items() if k not in given}


def symbolic_batch(model):
    """A copy of ``model`` whose fixed leading input/output dimension is the symbolic ``N`` (see the
    module doc); ``model`` itself when it already has a symbolic batch. Raises :class:`InputError` when
    the inputs disagree on their leading dimension."""
    if has_symbolic_batch(model):
        return model
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    leads = {vi.type.tensor_type.shape.dim[0].dim_value for vi in g.input
             if vi.name not in inits and vi.type.HasField("tensor_type") and vi.type.tensor_type.shape.dim}
    if len(leads) != 1:
        raise InputError(f"cannot find the batch dimension: the inputs' leading dimensions are "
                         f"{sorted(leads) or 'missing'}")
    b = leads.pop()
    for vi in list(g.input) + list(g.output):
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == b:
            dims[0].dim_param = BATCH_DIM
    del g.value_info[:]
    consumers = {n.input[1] for n in g.node if n.op_type == "Reshape" and len(n.input) > 1}
    for name in consumers & set(inits):
        shape = numpy_helper.to_array(inits[name])
        if shape.ndim == 1 and shape.size and int(shape[0]) == b:
            new = shape.copy()
            new[0] = 0  # copy the input's leading (batch) dimension
            inits[name].CopyFrom(numpy_helper.from_array(new, name))
    for n in g.node:  # Reshape targets from Constant nodes
        if n.op_type == "Constant" and n.output[0] in consumers:
            for a in n.attribute:
                if a.name == "value":
                    shape = numpy_helper.to_array(a.t)
                    if shape.ndim == 1 and shape.size and int(shape[0]) == b:
                        new = shape.copy()
                        new[0] = 0
                        a.t.CopyFrom(numpy_helper.from_array(new))
    return m


def check_batch(g, batch: int) -> None:
    """Raise :class:`InputError` when a loaded graph's outputs do not lead with ``batch``."""
    for t in g.outputs:
        if t.shape is not None and len(t.shape) and t.shape[0] != batch:
            raise InputError(f"at batch size {batch} output {t.name!r} has shape {list(t.shape)}: the model "
                             f"does not follow its batch dimension", source=g.source)
