"""Giving a model with a batch fixed in the file (the model zoo's ``1 x 3 x 224 x 224``) a symbolic one,
so that it can be costed and run at other batch sizes.

:func:`symbolic_batch` renames the leading dimension of every graph input and output that has the
file's batch to ``N``, drops the stored intermediate shapes (shape inference redoes them) and rewrites
constant ``Reshape`` targets that start with the file's batch to start with ``0`` (copy the input's
leading dimension). :func:`graphs.onnx_loader.load_onnx` with ``batch_size`` then sets ``N``; a model
whose shapes do not follow is caught by :func:`check_batch` (its outputs must lead with the batch).
"""

from __future__ import annotations

from .errors import InputError

__all__ = ["symbolic_batch", "has_symbolic_batch", "check_batch"]

BATCH_DIM = "N"


def has_symbolic_batch(model) -> bool:
    """Whether some graph input has a symbolic leading dimension."""
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            return True
    return False


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
