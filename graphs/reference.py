"""The reference workload format (NeurIPS 2020 device-placement paper; see ``shared/workloads/FORMAT.md``).

A workload file maps onto our model with two device kinds: ``accelerator`` (``maxFPGAs`` devices of
``maxSizePerFPGA`` bytes, paying communication) and ``cpu`` (``maxCPUs`` cores, unlimited memory, no
communication). A file that names them (top-level ``"accelerator"`` and ``"cpu"``, as ``placement inspect
-o`` writes an ONNX model's costed graph: ``"t4"``) gives the kinds those names; one that gives a
``"batch_size"`` (``inspect -o`` at ``--batch-size N``) has its times per run of that batch, as the ONNX
model's at that batch are (``graph.meta["batch_size"]``, :attr:`OpGraph.batch_size`). Every problem is
reported with the file name and the node or edge at fault. A split (:func:`parse_split`) comes in this
format's ``fpgas``/``cpus`` form, or names the devices of any cluster.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .jsonio import read_json, shown
from .model import Cluster, DeviceKind, OpGraph

__all__ = ["Workload", "ACCELERATOR", "CPU", "read_workload", "parse_workload", "read_split",
           "parse_split", "reference_cluster", "reference_kinds"]

ACCELERATOR = "accelerator"
CPU = "cpu"


@dataclass(frozen=True)
class Workload:
    """A placement problem: the operator graph and the cluster to place it on."""

    graph: OpGraph
    cluster: Cluster


def reference_cluster(accelerators: int, cpus: int, accelerator_memory: float | None, *,
                      names: tuple[str, str] = (ACCELERATOR, CPU)) -> Cluster:
    """The two-kind cluster of the reference format; ``names``: its accelerator's and its CPU's kind
    names (the generic ones unless the file names them)."""
    return Cluster((DeviceKind(names[0], accelerators, accelerator_memory, True),
                    DeviceKind(names[1], cpus, None, False)))


def reference_kinds(graph: OpGraph, cluster: Cluster) -> dict[str, str] | None:
    """The kinds the reference format's device lists stand for on ``cluster``: ``{"fpgas": accelerator
    kind, "cpus": CPU kind}``. A reference-format workload's own two kinds, under the names its file
    gives them (or the generic ``accelerator`` and ``cpu``); any other cluster whose kinds are among the
    generic names; else ``None`` (the cluster has no kinds of the format's)."""
    names = tuple(k.name for k in cluster.kinds)
    if (graph.meta.get("format") == "reference" and names == tuple(graph.kinds) and len(names) == 2
            and cluster.kinds[0].pays_communication and not cluster.kinds[1].pays_communication):
        return {"fpgas": names[0], "cpus": names[1]}
    if set(names) <= {ACCELERATOR, CPU}:
        return {"fpgas": ACCELERATOR, "cpus": CPU}
    return None


def _kind_name(data: dict, key: str, default: str, source: str | None) -> str:
    """The kind name the file gives under ``key`` (``default`` without one, or ``null``)."""
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or not value or any(c in ":,@" or c.isspace() for c in value):
        raise InputError(f"{key} (the name of its {default} kind) must be a non-empty name without ':', ',', "
                         f"'@' or spaces, got {json.dumps(value)[:40]}", source=source)
    return value


def read_workload(path: str | os.PathLike) -> Workload:
    """Read and validate a reference-format workload file."""
    path = os.fspath(path)
    return parse_workload(read_json(path), source=path)


def _num(value, what: str, source: str | None, *, integer: bool = False, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} must be a number, got {json.dumps(value)[:40]}", source=source)
    try:
        value = float(value)
    except OverflowError:
        raise InputError(f"{what} is too large: {str(value)[:30]}...", source=source) from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InputError(f"{what} must be a finite number, got {value}", source=source)
    if value < 0:
        raise InputError(f"{what} must not be negative, got {value}", source=source)
    if integer and value != int(value):
        raise InputError(f"{what} must be an integer, got {value}", source=source)
    return value


_MISSING = object()


def _num_column(rows: list, key: str, where, source, *, default=_MISSING, missing=None) -> np.ndarray:
    """``rows[i][key]`` for every row as a float array; a clear error names the first bad row."""
    vals = [r.get(key, default) for r in rows]
    if all(type(v) is float or type(v) is int for v in vals):
        try:
            arr = np.array(vals, dtype=np.float64)
        except OverflowError:
            arr = None
        if arr is not None and np.isfinite(arr).all() and not (arr < 0).any():
            return arr
    for i, v in enumerate(vals):
        if v is _MISSING:
            raise InputError(missing(i) if missing else f"{where(i)}: missing field {key!r}", source=source)
        _num(v, f"{where(i)}: {key}", source)
    raise AssertionError("unreachable: a bad value must have been reported")


def _flag_column(rows: list, key: str, where, source, *, default=_MISSING) -> np.ndarray:
    vals = [r.get(key, default) for r in rows]
    if all(v is True or v is False or (type(v) is int and (v == 0 or v == 1)) for v in vals):
        return np.array(vals, dtype=bool)
    for i, v in enumerate(vals):
        if v is _MISSING:
            raise InputError(f"{where(i)}: missing field {key!r}", source=source)
        _flag(v, f"{where(i)}: {key}", source)
    raise AssertionError("unreachable: a bad flag must have been reported")


def _flag(value, what: str, source: str | None) -> bool:
    if value in (True, False, 0, 1) and not isinstance(value, float):
        return bool(value)
    raise InputError(f"{what} must be true/false or 0/1, got {json.dumps(value)[:40]}", source=source)


def _node_id(value, what: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be an integer id, got {json.dumps(value)[:40]}", source=source)
    return value


def parse_workload(data, *, source: str | None = None) -> Workload:
    """Validate an already-decoded workload document (see :func:`read_workload`)."""
    if not isinstance(data, dict):
        raise InputError("the top level must be a JSON object with 'nodes' and 'edges'", source=source)
    for key in ("maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges"):
        if key not in data:
            raise InputError(f"missing top-level field {key!r}", source=source)
    cap = _num(data["maxSizePerFPGA"], "maxSizePerFPGA", source, allow_inf=True)
    k = int(_num(data["maxFPGAs"], "maxFPGAs", source, integer=True))
    cpus = int(_num(data["maxCPUs"], "maxCPUs", source, integer=True))
    nodes, edges = data["nodes"], data["edges"]
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise InputError("'nodes' and 'edges' must be lists", source=source)
    if not nodes:
        raise InputError("the graph has no nodes", source=source)
    if k + cpus == 0:
        raise InputError("maxFPGAs and maxCPUs are both 0: there is no device to place on", source=source)
    kinds = (_kind_name(data, "accelerator", ACCELERATOR, source), _kind_name(data, "cpu", CPU, source))
    if kinds[0] == kinds[1]:
        raise InputError(f"accelerator and cpu name the same kind {kinds[0]!r}: the format's two kinds need "
                         f"two names", source=source)

    n = len(nodes)
    for i, nd in enumerate(nodes):
        if type(nd) is not dict:
            raise InputError(f"nodes[{i}] must be an object", source=source)
    # Columns are checked in bulk; the item-by-item checks only run to name the first offender.
    raw_ids = [nd.get("id", _MISSING) for nd in nodes]
    if not all(type(x) is int for x in raw_ids):
        for i, x in enumerate(raw_ids):
            if x is _MISSING:
                raise InputError(f"nodes[{i}] has no 'id'", source=source)
            _node_id(x, f"nodes[{i}].id", source)
    ids: list[int] = raw_ids
    index = {nid: i for i, nid in enumerate(ids)}
    if len(index) != n:
        seen: dict[int, int] = {}
        for i, nid in enumerate(ids):
            if nid in seen:
                raise InputError(f"node id {nid} is used twice (nodes[{seen[nid]}] and nodes[{i}])",
                                 source=source)
            seen[nid] = i

    def where(i: int) -> str:
        return f"node {ids[i]}"

    cpu = _num_column(nodes, "cpuLatency", where, source)
    fpga = _num_column(nodes, "fpgaLatency", where, source)
    mem = _num_column(nodes, "size", where, source, default=0)
    supported = _flag_column(nodes, "supportedOnFpga", where, source)
    bwd = _flag_column(nodes, "isBackwardNode", where, source, default=False)
    fpga[~supported] = math.inf
    raw_color = [nd.get("colorClass") for nd in nodes]
    if not all(x is None or type(x) is int for x in raw_color):
        for i, x in enumerate(raw_color):
            if x is not None:
                _node_id(x, f"{where(i)}: colorClass", source)
    present = [x for x in raw_color if x is not None]
    if all(0 <= x < 2**62 for x in present):  # keep the file's class numbers (baselines use them)
        color = np.array([-1 if x is None else x for x in raw_color], dtype=np.int64)
    else:  # they only need to be told apart: renumber densely (negative or beyond int64)
        dense: dict[int, int] = {}
        color = np.array([-1 if x is None else dense.setdefault(x, len(dense)) for x in raw_color],
                         dtype=np.int64)
    names = [str(nd["name"]) if nd.get("name") is not None else str(nid) for nd, nid in zip(nodes, ids)]

    for j, e in enumerate(edges):
        if type(e) is not dict:
            raise InputError(f"edges[{j}] must be an object", source=source)

    srcs = [e.get("sourceId", _MISSING) for e in edges]
    dsts = [e.get("destId", _MISSING) for e in edges]
    for key, col in (("sourceId", srcs), ("destId", dsts)):
        if not all(type(x) is int for x in col):
            for j, x in enumerate(col):
                if x is _MISSING:
                    raise InputError(f"edges[{j}]: missing field {key!r}", source=source)
                _node_id(x, f"edges[{j}].{key}", source)
    si = np.array([index.get(x, -1) for x in srcs], dtype=np.int64)
    di = np.array([index.get(x, -1) for x in dsts], dtype=np.int64)
    if (si < 0).any() or (di < 0).any():
        j = int(np.flatnonzero((si < 0) | (di < 0))[0])
        x = srcs[j] if si[j] < 0 else dsts[j]
        raise InputError(f"edge {srcs[j]} -> {dsts[j]}: node {x} does not exist (dangling edge)",
                         source=source)
    cost = _num_column(edges, "cost", lambda j: f"edge {srcs[j]} -> {dsts[j]}", source,
                       missing=lambda j: f"edges[{j}]: missing field 'cost'")
    comm = np.zeros(n)
    if si.size:
        order = np.lexsort((cost, si))
        s_sorted, c_sorted = si[order], cost[order]
        clash = (s_sorted[1:] == s_sorted[:-1]) & (c_sorted[1:] != c_sorted[:-1])
        if clash.any():
            k_ = int(np.flatnonzero(clash)[0])
            raise InputError(f"node {ids[s_sorted[k_]]}: its out-edges carry different costs "
                             f"({c_sorted[k_]} and {c_sorted[k_ + 1]}); a node's output is one tensor, "
                             f"so all its out-edges must cost the same", source=source)
        comm[si] = cost
    pairs = np.stack([si, di], axis=1)
    unit = data.get("unit")
    if unit is not None and not (isinstance(unit, str) and unit.strip()):
        raise InputError(f'"unit" must name the file\'s time unit (e.g. "ms"), got {shown(unit)}; leave it '
                         f"out for the workload's own unit", source=source)

    batch = batch_size_field(data, "the samples its times are per run of", source)

    graph = OpGraph.build(
        names=names, ids=ids, kinds=kinds,
        compute=np.vstack([fpga, cpu]), comm=np.vstack([comm, comm]), memory=mem,
        edges=pairs, backward=bwd, colocation=color, source=source,
        # a file that names its time unit (an ONNX model written by `placement inspect -o`: ms) keeps it;
        # the reference workloads' own times have none ("t" in a result file)
        # a file that gives its batch size has its times per run of that batch, as the ONNX model's
        meta={"format": "reference",
              **({"unit": unit.strip()} if unit is not None else {}),
              **({"batch_size": batch} if batch is not None else {})},
    )
    return Workload(graph, reference_cluster(k, cpus, cap, names=kinds))


def batch_size_field(data: dict, meaning: str, source: str | None) -> int | None:
    """A file's optional top-level ``"batch_size"`` (a workload's: the samples of one run its times are
    for; a cost table's: the batch its times were measured at), ``None`` where it gives none; anything
    but a positive integer is an :class:`InputError` naming the file, the field and ``meaning``."""
    b = data.get("batch_size")
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
        raise InputError(f'"batch_size" ({meaning}) must be a positive integer, got {shown(b)[:40]}',
                         source=source)
    return b


def read_split(path: str | os.PathLike, graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Read a split file and return the assignment (device number per node index); see
    :func:`parse_split` for its two forms."""
    path = os.fspath(path)
    return parse_split(read_json(path), graph, cluster, source=path)


#: the reference format's split keys, and the device kind each lists the devices of (a workload's own
#: kinds may have other names: :func:`reference_kinds`)
_REFERENCE_KEYS = {"fpgas": ACCELERATOR, "cpus": CPU}
_SHOWN = 5  # offenders named per problem


def _some(items: list, sep: str = ", ") -> str:
    more = f" ... ({len(items)} in all)" if len(items) > _SHOWN else ""
    return sep.join(str(x) for x in items[:_SHOWN]) + more


def _its_devices(names: list[str]) -> str:
    """A cluster's device names, the first few, for a message."""
    return f"its devices: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"


def parse_split(data, graph: OpGraph, cluster: Cluster, *, source: str | None = None) -> np.ndarray:
    """The assignment (device number per node index) a decoded split file gives, in either form:

    - ``{"devices": {"a100:0": [nodes], "cpu:0": [nodes], ...}}``: any cluster's devices by the names the
      tool prints (``kind:index``, :meth:`Cluster.device_name`);
    - the reference result format, ``{"fpgas": [{"nodes": [...]}, ...], "cpus": [...]}``: the groups of
      each list go to the devices of kind ``accelerator`` (``cpu``) in order, empty groups skipped (a
      reference-format workload's own kinds, under whatever names its file gives them:
      :func:`reference_kinds`).

    A node is named by its id or its name. Backward nodes that the split does not list go where their
    colocated forward node is. :class:`InputError` names every device or node at fault at once: an
    unknown device, an unknown node, a node placed twice, nodes left unplaced (a few of each)."""
    if not isinstance(data, dict) or not ({"devices", *_REFERENCE_KEYS} & set(data)):
        raise InputError("a split must be an object with 'devices' (device name -> node list), or the "
                         "reference format's 'fpgas' and/or 'cpus' lists", source=source)
    if "devices" in data and _REFERENCE_KEYS.keys() & set(data):
        raise InputError("a split takes either 'devices' or the reference format's 'fpgas'/'cpus', not "
                         "both", source=source)
    if "devices" in data:
        groups, problems = _device_groups(data, cluster)
    else:
        keys = reference_kinds(graph, cluster) or _REFERENCE_KEYS
        groups, problems = _reference_groups(data, cluster, keys)
    if problems:  # the file's structure is wrong: the nodes are not worth checking yet
        raise InputError("; ".join(problems), source=source)
    assignment, problems = _assign(groups, graph)
    if problems:
        raise InputError("; ".join(problems), source=source)
    return assignment


def _device_groups(data: dict, cluster: Cluster) -> tuple[list, list[str]]:
    """``[(where, device number, nodes)]`` of a ``devices`` split, and the problems found."""
    devices = data["devices"]
    if not isinstance(devices, dict):
        return [], ["'devices' must be an object mapping device names (a100:0, cpu:0...) to node lists"]
    number = {cluster.device_name(d): d for d in range(cluster.num_devices)}
    groups, unknown, problems = [], [], []
    for name, nodes in devices.items():
        if name not in number:
            unknown.append(name)
        elif not isinstance(nodes, list):
            problems.append(f"devices[{name!r}] must be a list of node ids or names")
        else:
            groups.append((f"device {name}", number[name], nodes))
    if unknown:
        problems.insert(0, f"device(s) {_some(unknown)} not in the cluster ({_its_devices(list(number))})")
    return groups, problems


def _reference_groups(data: dict, cluster: Cluster, keys: dict[str, str]) -> tuple[list, list[str]]:
    """``[(where, device number, nodes)]`` of a reference-format split (``fpgas``/``cpus``: the devices of
    the kinds ``keys`` names), and the problems found."""
    first, dev = {}, 0
    for kind in cluster.kinds:
        first[kind.name] = dev
        dev += kind.count
    groups, problems = [], []
    for key, kind_name in keys.items():
        lists = data.get(key, [])
        if not isinstance(lists, list):
            problems.append(f"{key!r} must be a list")
            continue
        used = []
        for gi, g in enumerate(lists):
            if not isinstance(g, dict) or not isinstance(g.get("nodes", []), list):
                problems.append(f"{key}[{gi}] must be an object with a 'nodes' list")
            elif g.get("nodes"):
                used.append((gi, g["nodes"]))
        if not used:
            continue
        kinds = {k.name: k for k in cluster.kinds}
        if kind_name not in kinds:
            names = [cluster.device_name(d) for d in range(cluster.num_devices)]
            problems.append(f"{key!r} lists the reference format's {kind_name} devices, and this cluster has "
                            f"no {kind_name!r} kind: name its devices instead, as in "
                            f"{{\"devices\": {{\"{names[0]}\": [nodes], ...}}}} ({_its_devices(names)})")
        elif len(used) > kinds[kind_name].count:
            problems.append(f"the split uses {len(used)} {kind_name} devices but the workload has only "
                            f"{kinds[kind_name].count}")
        else:
            groups += [(f"{key}[{gi}]", first[kind_name] + slot, nodes)
                       for slot, (gi, nodes) in enumerate(used)]
    return groups, problems


def _assign(groups: list, graph: OpGraph) -> tuple[np.ndarray, list[str]]:
    """The assignment ``groups`` (``[(where, device number, nodes)]``) give ``graph``'s nodes, and the
    problems: unknown nodes, nodes placed twice, nodes left unplaced."""
    by_id = {nid: i for i, nid in enumerate(graph.ids)}
    by_name = {name: i for i, name in enumerate(graph.names)}
    assignment = np.full(graph.num_nodes, -1, np.int64)
    placed_by: dict[int, str] = {}
    unknown, twice = {}, []
    for where, dev, nodes in groups:
        for x in nodes:
            i = (by_id.get(x, by_name.get(x)) if type(x) is int
                 else by_name.get(x, by_id.get(x)) if type(x) is str else None)
            if i is None:
                unknown.setdefault(where, []).append(json.dumps(x)[:40] if type(x) is not int else x)
            elif assignment[i] >= 0:
                twice.append(f"node {x} is placed twice ({placed_by[i]} and {where})")
            else:
                assignment[i], placed_by[i] = dev, where
    problems = [f"{where} lists node(s) {_some(xs)}, which the workload does not have"
                for where, xs in unknown.items()]
    if twice:
        problems.append(_some(twice, "; "))
    missing = np.flatnonzero(assignment < 0)
    if missing.size:
        # A backward node follows its colocated forward node.
        cls_dev: dict[int, int] = {}
        for i in np.flatnonzero(assignment >= 0):
            c = int(graph.colocation[i])
            if c >= 0:
                cls_dev.setdefault(c, int(assignment[i]))
        for i in missing:
            c = int(graph.colocation[i])
            if graph.backward[i] and c in cls_dev:
                assignment[i] = cls_dev[c]
        missing = np.flatnonzero(assignment < 0)
        if missing.size and not unknown:  # a misspelt node is also missing: its own problem says so
            problems.append(f"the split does not place {missing.size} node(s): "
                            f"{_some([graph.ids[i] for i in missing])}")
    return assignment, problems
