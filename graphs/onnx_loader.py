"""Read an ONNX model into an operator DAG with tensor sizes (no costs yet; see :mod:`graphs.costs`).

:func:`load_onnx` reads the file without its external weights, fixes symbolic input dimensions (a
leading symbolic dimension is the batch and takes ``batch_size``; see :func:`load_onnx` for a model
whose input shape is fixed), runs ONNX shape inference and
builds an :class:`OnnxGraph`:

* one :class:`Op` per operator, in a topological order, named by its ONNX node name (unnamed nodes get
  the stable name ``<OpType>_<position in the file>``, duplicates a ``_<k>`` suffix);
* an edge ``u -> v`` for every tensor ``u`` produces that ``v`` reads;
* **constants are folded**: initializers, ``Constant`` nodes and every node whose inputs are all
  constant (e.g. the ``ConstantOfShape`` weight generators of the model-zoo files, or an ``Unsqueeze``
  of a weight) are not operators; the constant tensors an operator reads become its ``params`` (each
  once: the output of a folded ``Identity`` is the tensor it reads; see :class:`OnnxGraph` for how the
  parameter count and the memory treat a tensor several operators read). So is
  a top-level ``Shape`` whose input's dimensions it reads are all known once the symbolic input
  dimensions are fixed (``Shape -> Gather/Slice -> Concat -> Reshape``, as ``torch.onnx.export`` writes
  a ``view`` whose sizes come from ``x.size()``): its output is that shape, and what is computed from it
  and constants only is folded too (:attr:`OnnxGraph.shape_nodes`). The values of small folded
  tensors (at most 64 elements: shapes, axes) are computed (``onnx.reference``) and kept in
  :attr:`OnnxGraph.values`; those computed from a shape hold it at the dimensions the model is loaded
  at (for a symbolic batch, at ``batch_size``);
* control-flow operators (``If``, ``Loop``, ``Scan``) stay one operator; their bodies are parsed into
  ``subgraphs`` (with a repeat count) so that cost models can cost them, and the outer tensors a body
  reads become inputs (activations: edges; constants: params) of the operator.

Problems with the *model* (unknown operators, shapes inference could not determine) are warnings: they
are logged on the ``graphs.onnx`` logger and kept in :attr:`OnnxGraph.warnings`, and the costs of such
operators are estimated conservatively. A file that is not a readable ONNX model (missing, truncated,
corrupt, dangling tensor references, a cycle) raises :class:`~graphs.errors.InputError`.

Sizes are in bytes; a tensor's shape is ``None`` when its rank is unknown, and a dimension is ``None``
when inference could not determine it.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .errors import CycleError, InputError
from .onnx_batch import BATCH_NAMES, batch_from_dims, symbolic_input_dims

__all__ = ["Tensor", "Op", "Subgraph", "OnnxGraph", "load_onnx", "parse_model", "read_model",
           "stable_names", "BATCH_NAMES"]

log = logging.getLogger("graphs.onnx")

_SMALL_CONST = 64  # constants up to this many elements keep their values (loop counts, shapes)
_REFOLDS = 3  # shape inference runs again at most this many times with the values folded
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"})
_KEEP_DATA = 4096  # initializers up to this many elements keep their data for shape inference
# input slots holding statistics that training does not update
_NON_TRAINABLE_SLOTS = {"BatchNormalization": {3, 4}}


# --------------------------------------------------------------------------- exporter metadata
def module_scope(node) -> tuple[str, ...]:
    """The module path an exporter recorded for ``node`` (outermost first, the node's own name left out):
    ``torch.onnx``'s ``pkg.torch.onnx.name_scopes`` (``['', 'blocks.0', 'blocks.0.fc', 'linear_6']``)
    or its ``namespace`` (``': GPT/blocks.0: Block/fc: Linear'``); ``()`` where none is recorded."""
    import ast

    props = {p.key: p.value for p in getattr(node, "metadata_props", ())}
    text = props.get("pkg.torch.onnx.name_scopes")
    if text:
        try:
            scopes = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            scopes = None
        if isinstance(scopes, (list, tuple)) and all(isinstance(x, str) for x in scopes):
            return tuple(x for x in scopes[:-1] if x)
    text = props.get("namespace")
    if text:
        names = [part.split(": ")[0].strip() for part in text.split("/")]
        path, out = "", []
        for name in names:
            if name:
                path = f"{path}.{name}" if path else name
                out.append(path)
        return tuple(out)
    return ()


# --------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Tensor:
    """A tensor's name, shape (``None``: unknown rank; a ``None`` dimension: unknown) and element type."""

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str  # numpy name ("float32", "int64", ...) or "unknown"
    itemsize: int

    @property
    def known(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    @property
    def elements(self) -> int | None:
        return math.prod(self.shape) if self.known else None  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int | None:
        e = self.elements
        return None if e is None else e * self.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


@dataclass(frozen=True, eq=False)
class Subgraph:
    """A control-flow body: its operators and how often one run of the parent runs it. The branches
    of an ``If`` are alternatives (cost models take the dearer one)."""

    attribute: str
    ops: tuple[Op, ...]
    repeat: float


@dataclass(frozen=True, eq=False)
class Op:
    """One operator. ``inputs`` has an entry per input slot (``None`` for an omitted optional input);
    ``constant[i]`` says whether slot ``i`` holds a folded constant. ``params`` are the constants it
    holds (slot constants and those its bodies read), each stored tensor once (one read under two
    names through a folded ``Identity`` is one); ``trainable[j]`` says whether ``params[j]`` is
    a trainable weight. ``param_bytes`` is what it holds in memory: every operator that reads a tensor
    holds it, whatever other operators read it too (see :class:`OnnxGraph`). ``output_bytes``: bytes
    of its outputs that something reads (another operator or the graph's outputs) — what moving its
    result costs."""

    name: str
    op_type: str
    domain: str
    position: int  # index of the node in the file's node list
    inputs: tuple[Tensor | None, ...]
    constant: tuple[bool, ...]
    outputs: tuple[Tensor, ...]
    attrs: Mapping[str, object]
    params: tuple[Tensor, ...] = ()
    trainable: tuple[bool, ...] = ()
    subgraphs: tuple[Subgraph, ...] = ()
    output_bytes: int = 0
    sizes_estimated: bool = False  # some output size was unknown and estimated
    scope: tuple[str, ...] = ()  # the exporter's module path (outermost first), where it records one

    @property
    def activations(self) -> list[Tensor]:
        """Non-constant inputs."""
        return [t for t, c in zip(self.inputs, self.constant) if t is not None and not c]

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes or 0 for t in self.params)

    @property
    def trainable_bytes(self) -> int:
        return sum(t.nbytes or 0 for t, tr in zip(self.params, self.trainable) if tr)

    @property
    def param_elements(self) -> int:
        return sum(t.elements or 0 for t in self.params if t.is_float)


@dataclass(frozen=True, eq=False)
class OnnxGraph:
    """The operator DAG of an ONNX model (see the module doc). ``src``/``dst``: edges between op
    indices. ``parameters`` counts the elements of every floating-point constant an operator reads
    (scalars excepted), each stored tensor once, and ``parameter_bytes`` their bytes: a tensor that
    several operators read counts once, and so does one read under another name through a folded
    ``Identity`` (TorchScript's exporter stores a parameter equal to an earlier one, such as the
    identical layers of an untrained ``nn.TransformerEncoder``, once, and reads it through an
    ``Identity``; the dynamo exporter's optimizer stores equal small tensors once, up to 1,024
    elements in onnxscript 0.7, and reads them directly), so the count is the file's, which is below
    the source model's where the exporter merged equal tensors. A tensor another folded operator
    computes from constants is a tensor of its own, as an exporter's folding stores it (both torch
    exporters store the transposed copy of a tied embedding that a ``MatMul`` LM head reads beside the
    embedding). :attr:`shared` lists the tensors several operators read. ``trainable_parameters``
    leaves out statistics such as BatchNormalization's running mean and variance.

    Memory, by contrast, is per operator (:attr:`Op.param_bytes` and :attr:`Op.trainable_bytes`, which
    the costed graph's node memory and the stage models sum): a tensor is in the memory of every
    operator that reads it, and in training so are its gradient and optimizer state, and a replicated
    stage's all-reduce of that gradient. Stages that each hold a reader are each charged a copy, as each
    device needs one; a stage holding several readers of one tensor is charged a copy per reader, an
    overestimate by the extra copies (a sum over operators cannot hold a tensor once per stage), never an
    underestimate."""

    ops: tuple[Op, ...]
    src: np.ndarray
    dst: np.ndarray
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    batch_size: int
    dims: Mapping[str, int]
    opset: int
    source: str | None
    warnings: tuple[str, ...]
    parameters: int
    parameter_bytes: int
    trainable_parameters: int
    external_data: bool = False
    producer: str = ""
    graph_name: str = ""
    meta: Mapping = field(default_factory=dict)
    #: no input has a symbolic batch dimension: ``batch_size`` is 1 (a run of the model, whatever its
    #: leading dimension) or the leading dimension every input has, given as the batch size
    fixed_shape: bool = False
    #: values of the small constants (initializers, ``Constant`` outputs and folded tensors of at most 64
    #: elements: shapes, axes) by tensor name, for analyses that read an operator's shape or axes input
    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: the nodes (stable names) folded because a ``Shape`` read a known shape: those ``Shape`` nodes and
    #: the nodes computed from their outputs and constants only (see the module doc); a tool that runs
    #: the model's own nodes replaces such a ``Shape`` by its value only where its input is not at hand
    shape_nodes: frozenset[str] = frozenset()
    #: the parameter tensors (by the name they are stored under) that several operators read: their
    #: elements and how many operators read them (see the class doc for what each count does with them)
    shared: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def per_run(self) -> bool:
        """A run of the model counts as one sample, its figures per run: a fixed input shape leading with
        more than 1, and no batch size given but 1 (see :func:`load_onnx`)."""
        return self.fixed_shape and self.batch_size == 1 and any(
            t.shape and isinstance(t.shape[0], int) and t.shape[0] > 1 for t in self.inputs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops)

    def op_types(self) -> Counter:
        return Counter(op.op_type for op in self.ops)

    def index(self, name: str) -> int:
        for i, op in enumerate(self.ops):
            if op.name == name:
                return i
        raise KeyError(name)


# --------------------------------------------------------------------------- reading
def _all_tensors(graph):
    """Every tensor of an ONNX graph that can hold data: initializers and operators' tensor attributes,
    in control-flow bodies too (those ``onnx.load`` reads external data for)."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for sub in a.graphs:
                yield from _all_tensors(sub)


def _external_data_problem(tensor, base: str) -> tuple[str, str, str] | None:
    """``(location, problem, detail)`` where the external data of ``tensor`` (kept outside the model, in
    the file ``location`` relative to the model's folder ``base``) cannot be read: ``problem`` (words
    after "the external data file LOCATION") says the file is missing, not a file, unreadable or too
    short for the bytes the tensor has there (``detail``: which). ``None`` where it can be read, or the
    tensor holds its own data."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    if not uses_external_data(tensor):
        return None
    try:
        info = ExternalDataInfo(tensor)
    except ValueError as e:  # a negative offset or length
        return "", f"is described wrongly ({e})", ""
    loc = info.location
    if not loc:
        return "", "has no location (the model does not say which file holds it)", ""
    full = os.path.join(base, loc)
    if not os.path.exists(full):
        return loc, "is missing", ""
    if not os.path.isfile(full):
        return loc, "is not a file", ""
    if not os.access(full, os.R_OK):
        return loc, "cannot be read (permission denied)", ""
    offset = info.offset or 0
    end = offset + (info.length or 0)
    size = os.path.getsize(full)
    if end > size or offset > size:
        return loc, "is truncated (or not this model's)", (
            f"it holds {size:,} bytes, and the model keeps its tensor {tensor.name!r} at bytes {offset:,} "
            f"to {end:,} of it")
    return None


def _external_data_problems(tensors, base: str) -> list[str]:
    """The problems (:func:`_external_data_problem`) of the external data of ``tensors``, a sentence per
    file, naming a tensor it should hold and where the file was expected."""
    found: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for t in tensors:
        problem = _external_data_problem(t, base)
        if problem is not None:
            found.setdefault(problem[:2], (problem[2], []))[1].append(t.name)
    out = []
    for (loc, problem), (detail, names) in found.items():
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        full = os.path.join(base, loc)
        if not loc:
            out.append(f"the external data of tensor {names[0]!r}{more} {problem}")
        elif detail:
            past = f" ({len(names) - 1} more tensors lie past its end too)" if len(names) > 1 else ""
            out.append(f"the external data file {loc} {problem}: {detail}{past}; at {full}")
        else:
            out.append(f"the external data file {loc} {problem}: the model keeps its tensor {names[0]!r}"
                       f"{more} there, expected at {full}")
    return out


def _check_external_data(model, path: str) -> None:
    """An :class:`InputError` naming the external data file (and a tensor it should hold) of the ONNX
    model read from ``path`` that is missing, unreadable or truncated (onnx's own error, "should be stored
    in ..., but it is not regular file", "exceeds available data", reads like a corrupt model)."""
    problems = _external_data_problems(_all_tensors(model.graph), os.path.dirname(os.path.abspath(path)))
    if problems:
        also = f" (also: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise InputError(f"{problems[0]}{also} (this reads the model's weights)", source=path)


def _what_it_holds(path: str) -> str | None:
    """What the file at ``path`` that does not read as an ONNX model holds, where its first bytes say
    (JSON, text, a Git LFS pointer, a zip archive), as words after "the file"; ``None`` for other bytes."""
    import codecs
    import json

    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head.startswith(b"PK\x03\x04"):
        return "is a zip archive (as torch.save writes a PyTorch checkpoint)"
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    if not text.strip() or any(c < " " and c not in "\t\n\r\f" for c in text):
        return None
    if text.startswith("version https://git-lfs"):
        return ("is a Git LFS pointer, not the model's bytes (the repository was fetched without them: "
                "git lfs pull)")
    if text.lstrip()[:1] in ("{", "["):
        keys = ""
        if os.path.getsize(path) <= 1 << 24:
            try:
                with open(path, encoding="utf-8-sig") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                data = None
            if isinstance(data, dict) and data:
                names = [" ".join(str(k).split())[:40] for k in data]
                keys = f" (keys {', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
        return f"holds JSON text{keys}"
    first = text.strip().splitlines()[0]
    return f"holds text (it begins {first[:40]!r})"


def _not_onnx(path: str, what: str) -> InputError:
    return InputError(f"not an ONNX model: the file {what}, and an ONNX model is a binary protobuf file "
                      f"(as torch.onnx.export writes)", source=path)


def read_model(path: str | os.PathLike, *, load_external_data: bool = False):
    """``onnx.load`` with clear errors, one :class:`InputError` naming the file: a missing, unreadable,
    empty, truncated or corrupt file, a folder, a file that is no ONNX model (JSON, text: said so) and,
    with ``load_external_data``, an external data file (``location``, relative to the model's folder)
    that is missing, unreadable or shorter than the tensors it should hold. Without
    ``load_external_data`` the weights are not read and their file is not needed (:func:`load_onnx`)."""
    import onnx

    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("no such file", source=path)
    if os.path.isdir(path):
        raise InputError("is a directory, not an ONNX model", source=path)
    if os.path.getsize(path) == 0:
        raise InputError("the file is empty, not an ONNX model", source=path)
    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", source=path) from None
    except Exception as e:  # protobuf DecodeError and friends
        what = _what_it_holds(path)
        if what is not None:
            raise _not_onnx(path, what) from None
        detail = " ".join(str(e).split())[:200]
        raise InputError(f"not a valid ONNX model (truncated or corrupt file?): {type(e).__name__}: "
                         f"{detail}", source=path) from None
    if not model.HasField("graph") or (model.ir_version == 0 and not model.opset_import):
        what = _what_it_holds(path)
        if what is not None:
            raise _not_onnx(path, what)
        raise InputError("not an ONNX model: it has no graph or no IR version (wrong file, or truncated?)",
                         source=path)
    if len(model.graph.node) == 0:
        raise InputError("the model's graph has no operators (truncated file?)", source=path)
    if load_external_data:
        from onnx.external_data_helper import load_external_data_for_model

        _check_external_data(model, path)
        try:
            load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except OSError as e:
            raise InputError(f"cannot read its external data {e.filename or ''}: {e.strerror or e}",
                             source=path) from None
        except Exception as e:  # onnx refuses a location outside the model's folder, a symbolic link
            detail = " ".join(str(e).split())[:300]
            raise InputError(f"cannot read its external data: {detail}", source=path) from None
    return model


def load_onnx(path: str | os.PathLike, *, batch_size: int | None = None,
              dims: Mapping[str, int] | None = None) -> OnnxGraph:
    """Read ``path`` (external weights are not read) and build its :class:`OnnxGraph`.

    ``batch_size`` fixes every symbolic leading input dimension (and every dimension named like a
    batch, see :data:`BATCH_NAMES`); default 1. A model with no symbolic batch dimension has a fixed
    input shape (:attr:`OnnxGraph.fixed_shape`): its leading dimension may be a batch or a sequence, which
    the file does not say, so a run of it counts as one sample (a warning says so where some input leads
    with more than 1), unless ``batch_size`` is the leading dimension all its inputs have, which it then
    is (the figures are those of a symbolic batch at that ``batch_size``); any other ``batch_size``
    re-batches it as the serving sweep does (:func:`graphs.onnx_batch.symbolic_batch`, with a warning;
    a model whose outputs do not follow that dimension is an :class:`InputError`).
    ``dims`` fixes other symbolic dimensions by name
    (e.g. ``{"sequence": 128}``); any left over are taken as 1, with a warning.
    """
    path = os.fspath(path)
    model = read_model(path)
    external = any(t.data_location == 1 for t in model.graph.initializer)
    return parse_model(model, source=path, batch_size=batch_size, dims=dims, external_data=external)


def stable_names(nodes) -> list[str]:
    """Unique names for a node list: the node's own name, ``<OpType>_<position>`` for unnamed nodes,
    and a ``_<k>`` suffix for a name used before."""
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    out = []
    for i, n in enumerate(nodes):
        base = n.name or f"{n.op_type}_{i}"
        name = base
        if name in seen or (not n.name and name in taken):
            k = 1
            while f"{base}_{k}" in seen or f"{base}_{k}" in taken:
                k += 1
            name = f"{base}_{k}"
        seen.add(name)
        out.append(name)
    return out


# --------------------------------------------------------------------------- parsing
def parse_model(model, *, source: str | None = None, batch_size: int | None = None,
                dims: Mapping[str, int] | None = None, external_data: bool = False) -> OnnxGraph:
    """Build the :class:`OnnxGraph` of an in-memory ``onnx.ModelProto`` (see :func:`load_onnx`)."""
    import onnx

    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise InputError(f"batch size must be a positive integer, got {batch_size!r}", source=source)
    warnings: list[str] = []

    def warn(msg: str) -> None:
        warnings.append(msg)
        log.warning("%s%s", f"{source}: " if source else "", msg)

    if len(model.functions):
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as e:  # keep going: the function calls become unknown operators
            warn(f"could not inline the model's local functions ({e}); their calls are costed "
                 f"conservatively")

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    said: list[str] = []  # the dimensions' warnings: said of the model as it is read, once
    # a value given for the batch dimension by name is the batch size (a sample is one of the batch)
    batch_size, dims = batch_from_dims(model, batch_size, dims, source=source)
    dimmap, fixed = _resolve_input_dims(model.graph, batch_size or 1, dict(dims or {}), said.append)
    rebatched = not fixed and _rebatch(model.graph, batch_size)
    if not rebatched:
        for msg in said:
            warn(msg)
    else:  # the serving sweep's rule (graphs.onnx_batch): the leading dimension is the batch
        from .onnx_batch import symbolic_batch

        warn(f"the model's inputs have a fixed shape and no symbolic batch dimension (inputs: "
             f"{_input_shapes(model.graph)}): their leading dimension is taken as the batch, at {batch_size}")
        try:
            model = symbolic_batch(model)
        except InputError as e:
            raise InputError(f"batch size {batch_size}: {e}", source=source) from None
        dimmap, fixed = _resolve_input_dims(model.graph, batch_size, dict(dims or {}), warn)
    batch = (batch_size or 1) if fixed else _fixed_shape_batch(model.graph, batch_size, warn)
    infer_model = _inference_copy(model, dimmap, os.path.dirname(source) if source else None, warn)
    try:
        onnx.checker.check_model(infer_model)
    except Exception as e:
        warn(f"onnx.checker: {str(e).strip().splitlines()[0][:300]}")
    try:
        inferred = onnx.shape_inference.infer_shapes(infer_model, check_type=False, strict_mode=False,
                                                     data_prop=True)
    except Exception as e:
        warn(f"ONNX shape inference failed ({str(e).strip().splitlines()[0][:200]}); sizes come from the "
             f"shapes declared in the file")
        inferred = infer_model

    p = _Parser(dimmap, batch, warn, source, opset)
    p.fold_top(inferred.graph, model.graph)
    for _ in range(_REFOLDS):
        # a shape inference could not follow (a Reshape target computed through a Mod, say) may follow
        # from the values folded: infer again with those nodes as Constants (same place in the list)
        again = _with_folded_values(infer_model, inferred, p)
        if again is None:
            break
        try:
            refined = onnx.shape_inference.infer_shapes(again, check_type=False, strict_mode=False,
                                                        data_prop=True)
        except Exception:  # the last inference's shapes stand
            break
        infer_model, inferred = again, refined
        folded = p
        p = _Parser(dimmap, batch, warn, source, opset)
        p.shape_nodes |= folded.shape_nodes  # the folded Shape nodes are Constants in this copy
        p.computed = folded.computed  # the same constants: their values are not computed again
        p.aliases = folded.aliases  # a folded Identity may be a Constant in this copy
        p.fold_top(inferred.graph, model.graph)
    ops, src, dst = p.build_top()  # the operators are built once, from the last inference's shapes
    if not ops:
        raise InputError("every operator of the model computes only from constants: after constant "
                         "folding there is nothing to place", source=source)
    g = inferred.graph
    inputs = tuple(p.tensor(v.name) for v in g.input if v.name not in p.initializers)
    outputs = tuple(p.tensor(v.name) for v in g.output)
    p.report()
    counted: dict[str, Tensor] = {}  # by the tensor stored: an Identity's output is its input
    trainable: dict[str, Tensor] = {}
    readers: Counter = Counter()
    for op in ops:
        for t, tr in zip(op.params, op.trainable):
            if t.is_float and (t.elements or 0) > 1:  # scalars (scales, epsilons) are not parameters
                key = p.stored(t.name)
                counted[key] = t
                readers[key] += 1
                if tr:
                    trainable[key] = t
    out = OnnxGraph(
        ops=tuple(ops), src=np.asarray(src, np.int64), dst=np.asarray(dst, np.int64),
        inputs=inputs, outputs=outputs, batch_size=batch, dims=dimmap, opset=opset, fixed_shape=not fixed,
        source=source, warnings=tuple(warnings),
        parameters=sum(t.elements or 0 for t in counted.values()),
        parameter_bytes=sum(t.nbytes or 0 for t in counted.values()),
        trainable_parameters=sum(t.elements or 0 for t in trainable.values()),
        external_data=external_data, producer=f"{model.producer_name} {model.producer_version}".strip(),
        graph_name=model.graph.name, values=dict(p.values), shape_nodes=frozenset(p.shape_nodes),
        shared={k: (counted[k].elements or 0, r) for k, r in readers.items() if r > 1},
    )
    if rebatched:
        from .onnx_batch import check_batch

        check_batch(out, batch_size)  # a model whose shapes do not follow its leading dimension
    return out


def _resolve_input_dims(graph, batch: int, dims: dict[str, int], warn) -> tuple[dict[str, int], bool]:
    """Values of the symbolic dimensions of the graph inputs: leading ones and batch-like names take
    ``batch``, named ones come from ``dims``, the rest 1 (with a warning)."""
    mapping: dict[str, int] = {}
    for k, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"dimension {k!r} must be a positive integer, got {v!r}")
        mapping[k] = v
    fixed_batch = False
    rest: list[tuple[str, str]] = []
    symbolic = list(symbolic_input_dims(graph))
    for inp, axis, name in symbolic:
        if name in mapping:
            fixed_batch |= mapping[name] == batch and (axis == 0 or name.lower() in BATCH_NAMES)
            continue
        if axis == 0 or name.lower() in BATCH_NAMES:
            mapping[name] = batch
            fixed_batch = True
        else:
            rest.append((name, inp))
    seen = {name for _, _, name in symbolic}
    unused = sorted(set(dims) - seen)
    if unused:
        warn(f"dimension(s) {', '.join(map(repr, unused))} (dims / --dim) name no symbolic dimension of "
             f"the model's inputs ({', '.join(map(repr, sorted(seen))) or 'it has none'}); ignored")
    for name, inp in rest:
        if name not in mapping:
            mapping[name] = 1
            warn(f"symbolic dimension {name!r} of input {inp!r} taken as 1; fix it with "
                 f"dims={{{name!r}: N}} (--dim {name}=N)")
    return mapping, fixed_batch


def _input_shapes(graph) -> str:
    """The graph inputs (initializers aside) with their declared shapes, for a message."""
    return ", ".join(f"{name!r} {shape}" for name, shape in _shapes(graph)) or "none"


def _shapes(graph) -> list[tuple[str, list]]:
    inits = {t.name for t in graph.initializer}
    return [(vi.name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                       for d in vi.type.tensor_type.shape.dim])
            for vi in graph.input if vi.name not in inits and vi.type.HasField("tensor_type")]


def _common_lead(graph):
    """The leading dimension every input of ``graph`` has, ``None`` when they differ (or one has none)."""
    shapes = _shapes(graph)
    leads = {s[0] for _, s in shapes if s}
    return leads.pop() if len(leads) == 1 and all(s for _, s in shapes) else None


def _rebatch(graph, batch_size: int | None) -> bool:
    """A model without a symbolic batch is re-batched for a ``batch_size`` other than 1 and its inputs'
    common leading dimension (which is then the batch as it stands)."""
    return batch_size not in (None, 1) and batch_size != _common_lead(graph)


def _fixed_shape_batch(graph, batch_size: int | None, warn) -> int:
    """The batch of a model whose inputs have no symbolic batch dimension (and which is not re-batched,
    :func:`_rebatch`). Their leading dimension may be a batch or not (a sequence, as in a sequence-first
    transformer, or a channel), which the file does not say, so it is not guessed: a run of the model
    counts as one sample (``batch_size`` ``None`` or 1; a warning says so where some input leads with
    more than 1, and how to take the leading dimension as the batch), unless ``batch_size`` is the
    leading dimension every input has, which it then is."""
    common = _common_lead(graph)
    if batch_size is not None and batch_size == common:
        return batch_size
    if any(s and isinstance(s[0], int) and s[0] > 1 for _, s in _shapes(graph)):
        if not isinstance(common, int) or common < 2:
            why = "; their leading dimensions differ"
        elif _batch_lead(graph) is None:
            why = "; the outputs do not all lead with their leading dimension"
        elif batch_size is None:
            why = (f"; batch size {common} takes their leading dimension as the batch, where it is one (the "
                   f"file does not say: it may be a sequence)")
        else:
            why = f"; batch size {common} takes their leading dimension as the batch"
        warn(f"the model's inputs have a fixed shape and no symbolic batch dimension (inputs: "
             f"{_input_shapes(graph)}): a run of the model counts as one sample, its figures per run{why}")
    return 1


def _batch_lead(graph) -> int | None:
    """The leading dimension every input of ``graph`` has (:func:`_common_lead`) where every output
    whose leading dimension the file declares has it too (as :func:`graphs.onnx_batch.check_batch`
    asks of a re-batched model), else ``None``."""
    lead = _common_lead(graph)
    if not isinstance(lead, int) or lead < 1:
        return None
    for vi in graph.output:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value != lead:
            return None
    return lead


def _with_folded_values(infer_model, inferred, p: _Parser):
    """A copy of ``infer_model`` whose top-level nodes that ``p`` folded to a value (one output) are
    ``Constant`` nodes of that value, where some such node is not a ``Constant`` yet and a node reading
    its value has an output whose shape inference left unknown; else ``None``."""
    import onnx
    from onnx import helper, numpy_helper

    todo = [i for i, n in enumerate(infer_model.graph.node) if i in p.folded
            and n.op_type != "Constant" and len(n.output) == 1 and n.output[0] in p.values]
    if not todo:
        return None
    valued = {infer_model.graph.node[i].output[0] for i in todo}
    g = inferred.graph
    typed = {v.name: v.type for v in list(g.value_info) + list(g.output)}

    def unknown(x: str) -> bool:
        tp = typed.get(x)
        return tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape") \
            or _shape_quality(tp) < 1 + len(tp.tensor_type.shape.dim)

    if not any(valued.intersection(n.input) and any(unknown(x) for x in n.output if x) for n in g.node):
        return None
    m = onnx.ModelProto()
    m.CopyFrom(infer_model)
    for i in todo:
        n = m.graph.node[i]
        value = numpy_helper.from_array(np.asarray(p.values[n.output[0]]))
        n.CopyFrom(helper.make_node("Constant", [], [n.output[0]], name=n.name, value=value))
    return m


def _inference_copy(model, dimmap: Mapping[str, int], base_dir: str | None = None,
                    warn: Callable[[str], None] | None = None):
    """A light copy of the model for the checker and shape inference: large or external initializers
    become typed graph inputs (no weight is read or copied), symbolic input dimensions are fixed. Small
    external integer tensors (shapes, axes) are read from ``base_dir``: inference needs their values;
    where their file cannot be read they stay typed inputs, and ``warn`` is told which file and why."""
    import onnx
    from onnx import external_data_helper, helper

    g = model.graph
    g2 = onnx.GraphProto(name=g.name)
    g2.node.extend(g.node)
    input_names = {v.name for v in g.input}
    unread = []
    for v in g.input:
        v2 = g2.input.add()
        v2.CopyFrom(v)
        _fix_dims(v2, dimmap, 0)
    for t in g.initializer:
        n = math.prod(t.dims)
        if (t.data_location == onnx.TensorProto.EXTERNAL and n <= _SMALL_CONST and base_dir is not None
                and not _dtype(t.data_type)[0].startswith(("float", "bfloat"))):
            small = onnx.TensorProto()
            small.CopyFrom(t)
            try:
                external_data_helper.load_external_data_for_tensor(small, base_dir)
                small.data_location = onnx.TensorProto.DEFAULT
                del small.external_data[:]
                g2.initializer.append(small)
                continue
            except Exception as e:  # missing weights file: the tensor stays a typed input
                unread.append((t, e))
        if t.data_location == onnx.TensorProto.EXTERNAL or n > _KEEP_DATA:
            if t.name not in input_names:
                g2.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g2.initializer.append(t)
    if unread and warn is not None:
        problems = _external_data_problems([t for t, _ in unread], os.path.abspath(base_dir or ""))
        if not problems:  # onnx refused it otherwise (a location outside the model's folder, a link)
            t, e = unread[0]
            detail = " ".join(str(e).split())[:200]
            problems = [f"the external data of tensor {t.name!r} cannot be read ({detail})"]
        for problem in problems:
            warn(f"{problem}; the shape values (or axes) it holds are not read, so the sizes computed from "
                 f"them are not known and are estimated")
    g2.sparse_initializer.extend(g.sparse_initializer)
    for v in g.output:
        v2 = g2.output.add()
        v2.CopyFrom(v)
        _fix_dims(v2, dimmap, None)
    for v in g.value_info:
        v2 = g2.value_info.add()
        v2.CopyFrom(v)
        _fix_dims(v2, dimmap, None)
    m2 = onnx.ModelProto(ir_version=max(model.ir_version, 4), producer_name=model.producer_name,
                         producer_version=model.producer_version, domain=model.domain)
    m2.opset_import.extend(model.opset_import)
    m2.functions.extend(model.functions)
    m2.graph.CopyFrom(g2)
    return m2


def _fix_dims(vi, dimmap: Mapping[str, int], batch_axis_default) -> None:
    if not vi.type.HasField("tensor_type"):
        return
    for axis, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            continue
        key = d.dim_param or f"{vi.name}:{axis}"
        if key in dimmap:
            d.dim_value = dimmap[key]


class _Folded(NamedTuple):
    """One graph's nodes as :meth:`_Parser._fold` read, ordered and folded them (for ``_build``)."""

    graph: object
    names: list[str]
    nodes: list
    reads: list[list[str]]
    body_reads: list[list[str]]
    produced: dict[str, int]
    local: set[str]
    order: list[int]
    consts: set[str]
    const_node: list[bool]
    outer_defined: frozenset[str]


class _Parser:
    """Turns the (shape-inferred) graph and its bodies into ops; collects size problems for one report."""

    def __init__(self, dimmap, batch, warn, source, opset: int = 0):
        self.dimmap = dict(dimmap)
        self.batch = batch
        self.warn = warn
        self.source = source
        self.opset = opset
        self.shape_nodes: set[str] = set()  # folded because a Shape read a known shape
        self.folded: set[int] = set()  # top-level nodes folded (their positions in the file)
        self.types: dict[str, object] = {}  # tensor name -> TypeProto (all scopes; names are unique)
        self.initializers: set[str] = set()
        #: folded ``Identity`` outputs -> the constant they name again (an exporter's reference to a
        #: tensor it stores once: TorchScript writes one for every parameter equal to an earlier one)
        self.aliases: dict[str, str] = {}
        self.values: dict[str, np.ndarray] = {}  # small constant values
        self.computed: dict[tuple, list[np.ndarray]] = {}  # _folded_value's outputs by node and input values
        self.refined: dict[str, Tensor] = {}  # shapes we know better than inference
        self.unresolved: Counter = Counter()  # symbolic dims taken as guesses
        self.estimated: list[str] = []  # ops whose output size was estimated
        self.unknown_ops: Counter = Counter()
        self.loops_guessed: list[str] = []

    # ---------------------------------------------------------------- tensors
    def collect_types(self, g) -> None:
        for v in list(g.value_info) + list(g.input) + list(g.output):
            if v.type.HasField("tensor_type") and _shape_quality(v.type) > _shape_quality(
                    self.types.get(v.name)):
                self.types[v.name] = v.type
        for t in g.initializer:
            if t.name not in self.types:
                self.types[t.name] = _tensor_type_of(t)
        for n in g.node:
            for a in n.attribute:
                if a.type == 5:  # GRAPH
                    self.collect_types(a.g)
                elif a.type == 10:  # GRAPHS
                    for sg in a.graphs:
                        self.collect_types(sg)

    def stored(self, name: str) -> str:
        """The constant tensor ``name`` is, through folded ``Identity`` nodes (itself when it is none's
        output)."""
        return self.aliases.get(name, name)

    def tensor(self, name: str) -> Tensor:
        if name in self.refined:
            return self.refined[name]
        tp = self.types.get(name)
        if tp is None or not tp.HasField("tensor_type"):
            return Tensor(name, None, "unknown", 4)
        tt = tp.tensor_type
        dtype, itemsize = _dtype(tt.elem_type)
        if not tt.HasField("shape"):
            return Tensor(name, None, dtype, itemsize)
        shape: list[int | None] = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                shape.append(int(d.dim_value))
            elif d.dim_param and d.dim_param in self.dimmap:
                shape.append(self.dimmap[d.dim_param])
            elif d.dim_param and (axis == 0 or d.dim_param.lower() in BATCH_NAMES):
                self.unresolved[d.dim_param] += 1
                shape.append(self.batch)
            else:
                shape.append(None)
        return Tensor(name, tuple(shape), dtype, itemsize)

    # ---------------------------------------------------------------- graphs
    def fold_top(self, g, original_graph) -> None:
        """Read the types of the inferred copy ``g`` of ``original_graph`` (whose initializers are the
        constants) and fold its constants (:attr:`values`, :attr:`folded`, :attr:`shape_nodes`: what
        decides whether shape inference runs again); :meth:`build_top` then builds the operators."""
        self.collect_types(g)
        names = stable_names(original_graph.node)
        self.initializers = ({t.name for t in original_graph.initializer}
                             | {t.values.name for t in original_graph.sparse_initializer})
        self._top = self._fold(g, names, outer_consts=frozenset(), outer_defined=frozenset(), top=True)

    def build_top(self):
        """The operators and edges of the graph :meth:`fold_top` folded."""
        ops, src, dst, _, _ = self._build(self._top)
        return ops, src, dst

    def _graph(self, g, names, *, outer_consts, outer_defined, top):
        """Parse one graph (top level or a body). Returns ops, edges, and the outer tensors it reads
        (activations, constants)."""
        return self._build(self._fold(g, names, outer_consts=outer_consts, outer_defined=outer_defined,
                                      top=top))

    def _fold(self, g, names, *, outer_consts, outer_defined, top) -> _Folded:
        """Check one graph's reads, order its nodes and fold its constants (the first half of
        :meth:`_graph`)."""
        from onnx import numpy_helper

        inits = {t.name for t in g.initializer} | (self.initializers if top else set())
        for t in g.initializer:
            if math.prod(t.dims) <= _SMALL_CONST and t.data_location != 1:
                try:
                    self.values[t.name] = numpy_helper.to_array(t)
                except Exception:
                    pass
        graph_inputs = {v.name for v in g.input} - inits
        nodes = list(g.node)
        produced: dict[str, int] = {}
        for i, n in enumerate(nodes):
            for o in n.output:
                if o:
                    produced[o] = i
        local = inits | graph_inputs | set(produced)
        # what each node reads, bodies included (outer references of a body are node inputs here)
        reads: list[list[str]] = []
        body_reads: list[list[str]] = []
        bodies = [_subgraphs(n) for n in nodes]
        for n, subs in zip(nodes, bodies):
            r = [x for x in n.input if x]
            b: list[str] = []
            for sg in subs:
                b.extend(x for x in _free_names(sg) if x not in b)
            reads.append(r)
            body_reads.append(b)
        where = "" if top else f" (in the body of a control-flow operator of graph {g.name!r})"
        for i, n in enumerate(nodes):
            for x in reads[i] + body_reads[i]:
                if x not in local and x not in outer_defined:
                    raise InputError(f"node {names[i]!r} ({n.op_type}) reads tensor {x!r}, which no node "
                                     f"produces and which is neither a graph input nor an initializer"
                                     f"{where} (truncated or corrupt file?)", source=self.source)
        order = self._toposort(nodes, names, reads, body_reads, produced)

        consts = set(inits) | set(outer_consts)
        const_node = [False] * len(nodes)
        from_shape: set[str] = set()  # constants computed from a folded Shape's output
        for i in order:
            n = nodes[i]
            if bodies[i]:
                continue
            constant = all(x in consts for x in reads[i])
            # a body's shapes may change from one iteration to the next: only the top level's are known
            shape = self._known_shape(n) if top else None
            if shape is not None or constant:
                const_node[i] = True
                if top:
                    self.folded.add(i)
                consts.update(o for o in n.output if o)
                if (n.op_type == "Identity" and n.domain in ("", "ai.onnx") and constant and n.input
                        and n.input[0] and n.output and n.output[0]):
                    self.aliases[n.output[0]] = self.stored(n.input[0])
                if n.op_type == "Constant":
                    self._constant_value(n)
                elif shape is not None:
                    self.values[n.output[0]] = shape
                else:
                    self._folded_value(n)
                if not constant or from_shape.intersection(reads[i]):
                    from_shape.update(o for o in n.output if o)
                    self.shape_nodes.add(names[i])
        return _Folded(g, names, nodes, reads, body_reads, produced, local, order, consts, const_node,
                       outer_defined)

    def _build(self, f: _Folded):
        """Build the operators of a graph :meth:`_fold` folded: ops, edges, and the outer tensors it reads
        (activations, constants)."""
        g, names, nodes, reads, body_reads, produced, local, order, consts, const_node, outer_defined = f
        # parse every non-constant node
        keep = [i for i in order if not const_node[i]]
        index = {i: k for k, i in enumerate(keep)}
        consumed: set[str] = {v.name for v in g.output}
        for i in keep:
            consumed.update(reads[i])
            consumed.update(body_reads[i])
        ops: list[Op] = []
        src: list[int] = []
        dst: list[int] = []
        outer_acts: set[str] = set()
        outer_const_reads: set[str] = set()
        for i in keep:
            n = nodes[i]
            op = self._op(n, names[i], i, consts, consumed, outer_defined | local)
            ops.append(op)
            for x in dict.fromkeys(reads[i] + body_reads[i]):
                if x in consts:
                    if x not in local:
                        outer_const_reads.add(x)
                    continue
                if x in produced:
                    j = produced[x]
                    if not const_node[j]:
                        src.append(index[j])
                        dst.append(index[i])
                elif x not in local:
                    outer_acts.add(x)
        return ops, src, dst, outer_acts, outer_const_reads

    def _toposort(self, nodes, names, reads, body_reads, produced) -> list[int]:
        n = len(nodes)
        indeg = [0] * n
        succ: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            for j in {produced[x] for x in reads[i] + body_reads[i] if x in produced}:
                if j == i:
                    raise CycleError([names[i]], source=self.source)
                succ[j].append(i)
                indeg[i] += 1
        ready = [i for i in range(n) if indeg[i] == 0]  # a heap: the file's order when it is sorted
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) < n:
            left = [names[i] for i in range(n) if indeg[i] > 0]
            raise CycleError(left[:20], source=self.source)
        return order

    def _constant_value(self, n) -> None:
        from onnx import helper, numpy_helper

        for a in n.attribute:
            if a.name == "value" and a.type == 4:  # TENSOR
                if math.prod(a.t.dims) <= _SMALL_CONST:
                    try:
                        self.values[n.output[0]] = numpy_helper.to_array(a.t)
                    except Exception:
                        pass
                if n.output[0] not in self.types:
                    self.types[n.output[0]] = _tensor_type_of(a.t)
            elif a.name in ("value_int", "value_float", "value_ints", "value_floats"):
                self.values[n.output[0]] = np.asarray(helper.get_attribute_value(a))

    def _known_shape(self, n) -> np.ndarray | None:
        """The output of a ``Shape`` node ``n`` whose input's dimensions it reads are all known (inferred,
        or fixed by the symbolic dimensions' values), else ``None``."""
        if n.op_type != "Shape" or n.domain not in ("", "ai.onnx") or not n.input or not n.input[0]:
            return None
        tp = self.types.get(n.input[0])
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in tp.tensor_type.shape.dim:  # not Parser.tensor's: a dimension it guesses is not known
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(self.dimmap.get(d.dim_param) if d.dim_param else None)
        attrs = {a.name: a.i for a in n.attribute if a.name in ("start", "end")}
        read = dims[slice(attrs.get("start", 0), attrs.get("end", len(dims)))]  # ONNX clamps as Python
        return None if None in read else np.array(read, np.int64)

    def _folded_value(self, n) -> None:
        """Keep the outputs of the folded node ``n`` in :attr:`values` where its inputs' values are kept
        and its outputs are small (shapes, axes), computed by ``onnx.reference``."""
        ins = [x for x in n.input if x]
        if n.domain not in ("", "ai.onnx") or not all(x in self.values for x in ins) or n.op_type in _RANDOM:
            return
        for o in n.output:
            t = self.tensor(o) if o else None
            if t is not None and (t.elements is None or t.elements > _SMALL_CONST):
                return
        # the same arithmetic on the same values recurs in every layer: computed once per model
        key = (n.op_type, tuple(a.SerializeToString() for a in n.attribute), tuple(bool(o) for o in n.output),
               tuple((v.dtype.str, v.shape, v.tobytes()) if x else None
                     for x, v in ((x, self.values.get(x)) for x in n.input)))
        outs = self.computed.get(key)
        if outs is None:
            from onnx.reference import ReferenceEvaluator

            try:
                outs = ReferenceEvaluator(n, opsets={"": self.opset}).run(None,
                                                                          {x: self.values[x] for x in ins})
            except Exception:  # an operator the reference runtime lacks: the value stays unknown, as before
                return
            self.computed[key] = outs = [np.asarray(v) for v in outs]
        for o, v in zip(n.output, outs):
            if o:
                self.values[o] = v.copy()

    def _op(self, n, name, position, consts, consumed, defined) -> Op:
        import onnx

        inputs = tuple(self.tensor(x) if x else None for x in n.input)
        constant = tuple(bool(x) and x in consts for x in n.input)
        outputs = tuple(self._carried(n, inputs, k, self.tensor(o)) for k, o in enumerate(n.output) if o)
        attrs = {}
        for a in n.attribute:
            if a.type in (1, 2, 3, 6, 7, 8):  # FLOAT INT STRING FLOATS INTS STRINGS
                v = onnx.helper.get_attribute_value(a)
                attrs[a.name] = v.decode() if isinstance(v, bytes) else (
                    [x.decode() if isinstance(x, bytes) else x for x in v] if isinstance(v, list) else v)
        domain = n.domain if n.domain not in ("ai.onnx",) else ""
        if not _known_op(n.op_type, domain):
            self.unknown_ops[f"{n.op_type}" + (f" ({domain})" if domain else "")] += 1

        params: dict[str, Tensor] = {}
        trainable: dict[str, bool] = {}
        frozen = _NON_TRAINABLE_SLOTS.get(n.op_type, set())
        # keyed by the tensor stored: an operator reading one tensor under two names holds it once
        for slot, (t, c) in enumerate(zip(inputs, constant)):
            if t is not None and c and self.stored(t.name) not in params:
                params[self.stored(t.name)] = t
                trainable[self.stored(t.name)] = _trainable(t) and slot not in frozen

        subgraphs: list[Subgraph] = []
        for attr, sg in _named_subgraphs(n):
            body_ops, _, _, acts, const_reads = self._graph(
                sg, stable_names(sg.node), outer_consts=frozenset(consts), outer_defined=frozenset(defined),
                top=False)
            subgraphs.append(Subgraph(attr, tuple(body_ops), self._repeat(n, name, inputs)))
            for b in body_ops:
                for t, tr in zip(b.params, b.trainable):
                    params.setdefault(self.stored(t.name), t)
                    trainable.setdefault(self.stored(t.name), tr)
            for x in sorted(const_reads):
                t = self.tensor(x)
                params.setdefault(self.stored(x), t)
                trainable.setdefault(self.stored(x), _trainable(t))
            for x in sorted(sg_init.name for sg_init in sg.initializer):
                t = self.tensor(x)
                params.setdefault(self.stored(x), t)
                trainable.setdefault(self.stored(x), _trainable(t))

        out_bytes = 0
        estimated = False
        for t in outputs:
            if t.name not in consumed:
                continue
            b = t.nbytes
            if b is None:
                b = self._estimate(n, inputs, constant, t)
                estimated = True
            out_bytes += b
        if estimated:
            self.estimated.append(name)
        return Op(name=name, op_type=n.op_type, domain=domain, position=position, inputs=inputs,
                  constant=constant, outputs=outputs, attrs=attrs, params=tuple(params.values()),
                  trainable=tuple(trainable[k] for k in params), subgraphs=tuple(subgraphs),
                  output_bytes=int(out_bytes), sizes_estimated=estimated, scope=module_scope(n))

    def _carried(self, n, inputs, k: int, t: Tensor) -> Tensor:
        """A loop-carried output has its initial value's shape when inference left it unknown."""
        if t.known:
            return t
        first = {"Loop": 2, "Scan": 0}.get(n.op_type)
        if first is None:
            return t
        states = len(inputs) - (2 if n.op_type == "Loop" else
                                next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0))
        src = inputs[first + k] if k < states and first + k < len(inputs) else None
        if src is None or not src.known:
            return t
        self.refined[t.name] = out = Tensor(t.name, src.shape, src.dtype, src.itemsize)
        return out

    def _estimate(self, n, inputs, constant, t: Tensor) -> int:
        """A stand-in size for an output whose shape is unknown: the shape of the largest activation
        input (kept for the operators downstream), or one element per batch row."""
        known = [x for x, c in zip(inputs, constant) if x is not None and not c and x.known]
        if not known:
            return self.batch * t.itemsize
        big = max(known, key=lambda x: x.elements)
        self.refined[t.name] = guess = Tensor(t.name, big.shape, t.dtype, t.itemsize)
        return guess.nbytes

    def _repeat(self, n, name, inputs) -> float:
        if n.op_type == "Loop":
            m = n.input[0] if n.input else ""
            v = self.values.get(m) if m else None
            if v is not None and v.size == 1:
                return float(max(int(v.reshape(-1)[0]), 0))
            self.loops_guessed.append(name)
            return 1.0
        if n.op_type == "Scan":
            k = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
            axes = next((list(a.ints) for a in n.attribute if a.name == "scan_input_axes"), [])
            scans = [t for t in inputs[len(inputs) - k:] if t is not None] if k else []
            if scans and scans[0].shape is not None:
                axis = axes[0] if axes else 0
                if -len(scans[0].shape) <= axis < len(scans[0].shape) and scans[0].shape[axis] is not None:
                    return float(scans[0].shape[axis])
            self.loops_guessed.append(name)
            return 1.0
        return 1.0

    def report(self) -> None:
        if self.unknown_ops:
            shown = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(self.unknown_ops.items()))
            self.warn(f"unknown operator type(s), not in the ONNX standard: {shown}; their output sizes "
                      f"may be unknown and their costs are conservative estimates")
        if self.estimated:
            shown = ", ".join(self.estimated[:8]) + (" ..." if len(self.estimated) > 8 else "")
            self.warn(f"{len(self.estimated)} operator(s) have outputs whose shape inference could not "
                      f"determine; their sizes are estimated from their inputs: {shown}")
        if self.unresolved:
            shown = ", ".join(sorted(self.unresolved))
            self.warn(f"symbolic dimension(s) {shown} left by shape inference taken as the batch size "
                      f"{self.batch}")
        if self.loops_guessed:
            self.warn(f"trip count unknown for {', '.join(self.loops_guessed[:8])}: its body is costed "
                      f"as running once")


# --------------------------------------------------------------------------- helpers
def _subgraphs(n) -> list:
    return [g for _, g in _named_subgraphs(n)]


def _named_subgraphs(n) -> list:
    out = []
    for a in n.attribute:
        if a.type == 5:  # GRAPH
            out.append((a.name, a.g))
        elif a.type == 10:  # GRAPHS
            out.extend((f"{a.name}[{k}]", g) for k, g in enumerate(a.graphs))
    return out


def _free_names(g) -> list[str]:
    """Tensors a graph (and its nested bodies) reads from outer scopes."""
    defined = {v.name for v in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        defined.update(o for o in n.output if o)
    free: list[str] = []
    for n in g.node:
        names = [x for x in n.input if x]
        for sg in _subgraphs(n):
            names.extend(_free_names(sg))
        for x in names:
            if x not in defined and x not in free:
                free.append(x)
    return free


def _shape_quality(tp) -> int:
    """How much a type says about a shape: -1 nothing, 0 rank unknown, else 1 + known dimensions."""
    if tp is None or not tp.HasField("tensor_type"):
        return -1
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return 0
    return 1 + sum(1 for d in tt.shape.dim if d.HasField("dim_value"))


def _tensor_type_of(t):
    from onnx import helper

    return helper.make_tensor_type_proto(t.data_type, list(t.dims))


_DTYPES: dict[int, tuple[str, int]] = {}


def _dtype(elem_type: int) -> tuple[str, int]:
    if elem_type not in _DTYPES:
        from onnx import helper

        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
            name = helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
            name = {"float": "float32", "double": "float64", "bool": "bool"}.get(name, name)
            _DTYPES[elem_type] = (name, max(1, dt.itemsize) if dt.kind != "O" else 8)
        except Exception:
            _DTYPES[elem_type] = ("unknown", 4)
    return _DTYPES[elem_type]


def _trainable(t: Tensor) -> bool:
    return t.is_float and (t.elements or 0) > 1


_KNOWN: dict[tuple[str, str], bool] = {}


def _known_op(op_type: str, domain: str) -> bool:
    key = (op_type, domain)
    if key not in _KNOWN:
        import onnx.defs

        try:
            _KNOWN[key] = bool(onnx.defs.has(op_type, domain))
        except Exception:
            _KNOWN[key] = False
    return _KNOWN[key]


def graph_attrs(node):
    """The subgraphs of an ONNX node (an ``If``'s branches, a ``Loop``'s body)."""
    for a in node.attribute:
        if a.type == 5:  # GRAPH
            yield a.g
        elif a.type == 10:  # GRAPHS
            yield from a.graphs


def free_names(g) -> set[str]:
    """Names an ONNX (sub)graph reads from its enclosing scope."""
    defined = ({i.name for i in g.input} | {t.name for t in g.initializer}
               | {t.name for t in g.sparse_initializer})
    used: set[str] = set()
    for n in g.node:
        used.update(x for x in n.input if x)
        for sg in graph_attrs(n):
            used |= free_names(sg)
        defined.update(x for x in n.output if x)
    return used - defined


def node_reads(node) -> list[str]:
    """Every tensor an ONNX node reads: its inputs and what its bodies read from outside."""
    reads = [x for x in node.input if x]
    for sg in graph_attrs(node):
        reads += sorted(free_names(sg))
    return reads


def batchable_path(path: str | os.PathLike, cache_dir: str | None = None) -> str:
    """``path`` itself when the model has a symbolic batch, else the path of a copy with one
    (:func:`graphs.onnx_batch.symbolic_batch`), written once to ``cache_dir`` (default: a folder in the
    temp dir)."""
    from .onnx_batch import has_symbolic_batch, symbolic_batch

    path = os.fspath(path)
    model = read_model(path, load_external_data=True)
    if has_symbolic_batch(model):
        return path
    folder = cache_dir or os.path.join(tempfile.gettempdir(), "placement-batch")
    os.makedirs(folder, exist_ok=True)
    st = os.stat(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(folder, f"{stem}-{st.st_size:x}-{int(st.st_mtime):x}.nbatch.onnx")
    if not os.path.exists(out):
        import onnx

        new = symbolic_batch(model)
        tmp = out + f".{os.getpid()}.tmp"
        onnx.save_model(new, tmp)
        os.replace(tmp, out)
    return out
