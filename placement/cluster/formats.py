"""The shared-cluster files: a job list (``JOBS.json``, also a trace for simulation) and the result.

A job list is one JSON object::

    {"cluster": {"devices": "a100:8,cpu:32", "host_memory_gb": 256},
     "lease": 600,
     "jobs": [{"name": "resnet", "model": "resnet50.onnx", "training": true, "samples": 2e6,
               "arrival": 0}, ...]}

``cluster.devices`` is the compact device form of ``placement place --devices`` (presets, or kinds from
``cluster.device_files``); ``host_memory_gb`` (decimal GB, default unlimited) is the host memory all
jobs share. ``cluster.servers`` (optional) says how the cluster is cut into servers: a number of identical
servers (every kind and the host memory divided evenly), or a list of per-server figures
``[{"devices": "v100:8,cpu:24", "host_memory_gb": 500}, ...]`` that add up to the cluster; without it the
cluster is one server. ``lease`` (optional) is the re-allocation interval of a simulation, in the
workloads' time unit. Each job: ``model`` (an ONNX model, a reference-format workload ``.json`` whose kinds
``accelerator`` and ``cpu`` map to the cluster's accelerator kind and host kind, a Piper-format workload,
or an LLM model config ``config.json`` in the Hugging Face layout, decoded on the stage model as
``placement place config.json`` does: a sample is one generated token, ``batch_size`` the sequences
decoded together, default 1, and ``context`` their tokens, default 2048), ``samples`` (work, > 0),
``arrival`` (default 0), and optionally ``name``, ``training`` / ``batch_size`` / ``optimizer`` /
``costs`` (ONNX front end), ``request`` (what the job asks for under ``fifo``, e.g. ``"a100:2,cpu:4"``),
``limit`` (the most it can use, which also bounds its curve's DP), ``host_memory_gb`` (host memory it
needs whatever it runs on, default 0), ``accelerator`` (reference workloads: which cluster kind runs
its accelerator's work; default the kind its file names, else the cluster's only one) and
``max_replicas`` (ONNX and Piper-format models: the largest data-parallel degree of a stage, default
unlimited; 1 gives an ONNX job the one-device-per-stage curve). Relative model paths are relative to
the job list.

A job's input pipeline (:mod:`~placement.cluster.inputs`, Synergy's model) is either an ``input`` section,
``{"cpu_ms_per_sample": 8.0, "sample_bytes": 110000, "dataset_gb": 140, "storage_gbps": 0.5}``
(``storage_gbps`` defaults to ``cluster.storage_gbps``), or a measured ``throughput`` table at one
accelerator count, ``{"accelerators": 1, "points": [[cpus, memory_gb, samples_per_second], ...]}`` (a full
grid; ``model`` is then optional). A job with neither is fed for free (the model before input pipelines).

Every problem is reported with the file and the job (index and name) at fault.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from graphs.errors import InputError

__all__ = ["ClusterSpec", "ServerSpec", "JobSpec", "JobList", "InputSpec", "ThroughputTable", "read_jobs",
           "parse_jobs", "parse_counts", "with_servers", "GB", "json_number"]

GB = 1e9  # host memory is given in decimal gigabytes
HOUR_MS = 3.6e6  # an ONNX job's times are milliseconds


def duration_scale(unit: str, span: float) -> tuple[float, str]:
    """``(scale, unit)`` to print a cluster's durations in (arrivals, finishes, JCTs, makespan): hours
    for milliseconds that span more than an hour (``2.492e+09`` ms reads as ``692.2`` h), else the
    workloads' own ``unit`` (a reference workload's is not said: ``""``)."""
    if unit == "ms" and math.isfinite(span) and span > HOUR_MS:
        return HOUR_MS, "h"
    return 1.0, unit


@dataclass(frozen=True)
class ServerSpec:
    """One server of the cluster: devices per cluster kind (``counts``, in the cluster's kind order) and its
    host memory (bytes, ``inf`` = unlimited)."""

    counts: tuple[int, ...]
    host_memory: float = math.inf


@dataclass(frozen=True)
class ClusterSpec:
    """The shared cluster: device kinds with counts (``devices``, a :class:`graphs.devices.DeviceSet`),
    which kinds are host CPU cores, and the host memory all jobs share (bytes, ``inf`` = unlimited)."""

    devices: object  # graphs.devices.DeviceSet
    host_memory: float = math.inf
    device_files: tuple[str, ...] = ()
    storage_gbps: float | None = None  # default storage bandwidth of a job's input pipeline (GB/s)
    servers: tuple[ServerSpec, ...] = ()  # () = one server holding everything

    @property
    def server_list(self) -> tuple[ServerSpec, ...]:
        """The servers (one holding the whole cluster when none were given)."""
        return self.servers or (ServerSpec(self.counts, self.host_memory),)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.devices.specs)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self.devices.counts)

    @property
    def host(self) -> tuple[bool, ...]:
        """Whether each kind is a host CPU core (pays no communication, uses host memory)."""
        return tuple(bool(s.host) for s in self.devices.specs)

    def describe(self) -> str:
        mem = "unlimited" if math.isinf(self.host_memory) else f"{self.host_memory / GB:g} GB"
        return f"{self.devices}, host memory {mem}"


@dataclass(frozen=True)
class InputSpec:
    """A job's input pipeline (per sample, a sample being one unit of the job's ``samples``): CPU
    milliseconds to decode and augment it, bytes read for it, the dataset's size and the storage bandwidth
    the job gets (bytes per second)."""

    cpu_ms_per_sample: float
    sample_bytes: float
    dataset_bytes: float
    storage_bytes_per_s: float


@dataclass(frozen=True)
class ThroughputTable:
    """Measured throughput (samples per second) at ``accelerators`` accelerators over a full grid of host
    cores (``cpus``) and host memory (``memory``, bytes): ``rate[i][k]`` at ``cpus[i]``, ``memory[k]``."""

    accelerators: int
    cpus: tuple[float, ...]
    memory: tuple[float, ...]
    rate: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class JobSpec:
    """One job of a job list (see the module doc). ``model`` is an absolute path."""

    name: str
    model: str
    samples: float
    arrival: float = 0.0
    training: bool | None = None
    batch_size: int | None = None
    optimizer: str | None = None
    costs: str | None = None
    request: Mapping[str, int] | None = None
    limit: Mapping[str, int] | None = None
    host_memory: float = 0.0  # bytes the job needs in host memory whatever it runs on
    accelerator: str | None = None
    index: int = 0
    input: InputSpec | None = None
    throughput: ThroughputTable | None = None
    max_replicas: int | None = None  # largest data-parallel degree of a stage (None: unlimited)
    context: int | None = None  # an LLM model config: tokens of each sequence's KV cache (None: default)
    llm: bool = False  # the model is an LLM model config (decoded on the stage model)
    source: str | None = field(default=None, compare=False)  # the job list it was read from (for messages)

    @property
    def is_onnx(self) -> bool:
        return self.model.lower().endswith(".onnx")


@dataclass(frozen=True)
class JobList:
    cluster: ClusterSpec
    jobs: tuple[JobSpec, ...]
    lease: float | None = None
    source: str | None = None
    extra: Mapping = field(default_factory=dict)


def read_jobs(path: str | os.PathLike) -> JobList:
    """Read and validate a job list (or trace) file."""
    from graphs.jsonio import read_json

    path = os.fspath(path)
    try:
        data = read_json(path)
    except InputError:
        _refuse_other_file(path)  # an ONNX model, not JSON: said so
        raise
    if not isinstance(data, dict) or "jobs" not in data:
        _refuse_other_file(path, data)  # a workload, a result...: said so, not its first missing field
    return parse_jobs(data, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def _refuse_other_file(path: str, data=None) -> None:
    """An :class:`InputError` saying what the file given as a job list is, where it is known to be
    another kind of file (:func:`placement.inputs.file_kind`)."""
    from placement.inputs import file_kind

    kind, words = file_kind(path) if data is None else file_kind(path, data)
    if kind not in ("unknown", "job-list"):
        raise InputError(f"this is {words}, not a job list: placement cluster takes a job list (JSON with "
                         f"'cluster' and 'jobs'; placement example jobs.json writes one)", source=path)


_JOB_KEYS = ("name", "model", "samples", "arrival", "training", "batch_size", "optimizer", "costs",
             "request", "limit", "host_memory_gb", "accelerator", "input", "throughput",
             "max_replicas", "context")
_INPUT_KEYS = ("cpu_ms_per_sample", "sample_bytes", "dataset_gb", "storage_gbps")


def parse_jobs(data, *, source: str | None = None, base_dir: str | None = None) -> JobList:
    """Validate an already-decoded job list; relative model paths are resolved against ``base_dir``."""
    from graphs.devices import parse_devices

    if not isinstance(data, dict):
        raise InputError("the top level must be a JSON object with 'cluster' and 'jobs'", source=source)
    unknown = sorted(set(data) - {"cluster", "jobs", "lease", "version", "comment", "seed"})
    if unknown:
        raise InputError(f"unknown top-level field(s) {', '.join(unknown)}; expected cluster, jobs and "
                         f"optionally lease", source=source)
    for key in ("cluster", "jobs"):
        if key not in data:
            raise InputError(f"missing top-level field {key!r}", source=source)
    cl = data["cluster"]
    if not isinstance(cl, dict):
        raise InputError("'cluster' must be an object like {\"devices\": \"a100:8,cpu:32\", "
                         "\"host_memory_gb\": 256}", source=source)
    bad = sorted(set(cl) - {"devices", "host_memory_gb", "device_files", "storage_gbps", "servers"})
    if bad:
        raise InputError(f"cluster: unknown field(s) {', '.join(bad)}; expected devices, host_memory_gb, "
                         f"device_files, storage_gbps, servers", source=source)
    if not isinstance(cl.get("devices"), str):
        raise InputError("cluster.devices must be a string such as \"a100:8,cpu:32\"", source=source)
    files = cl.get("device_files", [])
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise InputError("cluster.device_files must be a list of file names", source=source)
    files = tuple(_resolve(f, base_dir) for f in files)
    try:
        devices = parse_devices(cl["devices"], files)
    except InputError as e:
        raise InputError(f"cluster.devices: {e}", source=source) from None
    hosts = [s.name for s in devices.specs if s.host]
    if len(hosts) > 1:
        raise InputError(f"cluster.devices: at most one host CPU kind, got {', '.join(hosts)}", source=source)
    mem = cl.get("host_memory_gb")
    host_memory = (math.inf if mem is None
                   else _positive(mem, "cluster.host_memory_gb", source, zero=True) * GB)
    storage = cl.get("storage_gbps")
    if storage is not None:
        storage = _positive(storage, "cluster.storage_gbps", source)
    cluster = ClusterSpec(devices, host_memory, files, storage)
    if cl.get("servers") is not None:
        cluster = with_servers(cluster, cl["servers"], source=source)

    lease = data.get("lease")
    if lease is not None:
        lease = _positive(lease, "lease", source)

    jobs_raw = data["jobs"]
    if not isinstance(jobs_raw, list) or not jobs_raw:
        raise InputError("'jobs' must be a non-empty list of job objects", source=source)
    jobs, names = [], {}
    for i, j in enumerate(jobs_raw):
        jobs.append(_parse_job(i, j, cluster, source, base_dir))
        nm = jobs[-1].name
        if nm in names:
            raise InputError(f"jobs[{i}]: name {nm!r} is already used by jobs[{names[nm]}]", source=source)
        names[nm] = i
    extra = {k: data[k] for k in ("seed", "comment") if k in data}
    return JobList(cluster, tuple(jobs), lease, source, extra)


def _parse_job(i: int, j, cluster: ClusterSpec, source, base_dir) -> JobSpec:
    if not isinstance(j, dict):
        raise InputError(f"jobs[{i}] must be an object with at least 'model' and 'samples'", source=source)
    where = f"jobs[{i}]" + (f" ({j['name']})" if isinstance(j.get("name"), str) else "")
    unknown = sorted(set(j) - set(_JOB_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(_JOB_KEYS)}",
                         source=source)
    name = j.get("name", f"job{i}")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: name must be a non-empty string", source=source)
    for key in ("model", "samples"):
        if key not in j and not (key == "model" and "throughput" in j):
            raise InputError(f"{where}: missing field {key!r}", source=source)
    if "input" in j and "throughput" in j:
        raise InputError(f"{where}: give either an input section or a measured throughput table, not both",
                         source=source)
    throughput = _parse_table(j["throughput"], f"{where}: throughput", source) if "throughput" in j else None
    if "model" not in j:  # a measured table alone: no graph, nothing for the front ends to check
        return _table_job(i, j, name, where, throughput, cluster, source)
    if not isinstance(j["model"], str) or not j["model"]:
        raise InputError(f"{where}: model must be a path to an ONNX model or a reference-format workload",
                         source=source)
    model = _resolve(j["model"], base_dir)
    if os.path.splitext(model)[1].lower() not in (".onnx", ".json"):
        raise InputError(f"{where}: model {j['model']!r} is neither an ONNX model (.onnx) nor a JSON "
                         f"workload (.json: reference or Piper format, or an LLM model config)",
                         source=source)
    samples = _positive(j["samples"], f"{where}: samples", source)
    arrival = _positive(j.get("arrival", 0), f"{where}: arrival", source, zero=True)
    training = j.get("training")
    if training is not None and not isinstance(training, bool):
        raise InputError(f"{where}: training must be true or false", source=source)
    batch = j.get("batch_size")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise InputError(f"{where}: batch_size must be a positive integer", source=source)
    max_replicas = j.get("max_replicas")
    if max_replicas is not None and (isinstance(max_replicas, bool) or not isinstance(max_replicas, int)
                                     or max_replicas < 1):
        raise InputError(f"{where}: max_replicas must be a positive integer (1: one device per stage), "
                         f"got {max_replicas!r}", source=source)
    for key in ("optimizer", "costs", "accelerator"):
        if j.get(key) is not None and not isinstance(j[key], str):
            raise InputError(f"{where}: {key} must be a string", source=source)
    llm = _is_llm_config(model)
    context = j.get("context")
    if context is not None and not llm:
        raise InputError(f"{where}: context applies to LLM model configs (config.json with "
                         f"num_hidden_layers and hidden_size), not to {j['model']!r}", source=source)
    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
        raise InputError(f"{where}: context must be a positive integer (tokens), got {context!r}",
                         source=source)
    onnx_only = [k for k in ("optimizer", "costs") + (() if llm else ("batch_size",)) if j.get(k) is not None]
    if llm and (onnx_only or training):
        what = onnx_only + (["training"] if training else [])
        verb = "applies" if len(what) == 1 else "apply"
        raise InputError(f"{where}: {', '.join(what)} only {verb} to ONNX models; an LLM model config "
                         f"({j['model']}) is decoded (inference) with the device catalog's figures",
                         source=source)
    if model.lower().endswith(".json") and (onnx_only or training):
        what = onnx_only + (["training"] if training else [])
        verb = "applies" if len(what) == 1 else "apply"
        raise InputError(f"{where}: {', '.join(what)} only {verb} to ONNX models; a reference-format "
                         f"workload carries its own costs (and is a training graph or not)", source=source)
    costs = j.get("costs")
    if costs is not None and costs not in ("roofline", "profile"):
        costs = _resolve(costs, base_dir)
    request = parse_counts(j.get("request"), cluster, f"{where}: request", source)
    limit = parse_counts(j.get("limit"), cluster, f"{where}: limit", source)
    hm = j.get("host_memory_gb", 0)
    host_memory = _positive(hm, f"{where}: host_memory_gb", source, zero=True) * GB
    acc = _accelerator(j, where, cluster, source)
    _check_request(request, limit, cluster, where, source, throughput, acc)
    inp = _parse_input(j["input"], f"{where}: input", cluster, source) if "input" in j else None
    return JobSpec(name=name, model=model, samples=samples, arrival=arrival, training=training,
                   batch_size=batch, optimizer=j.get("optimizer"), costs=costs, request=request,
                   limit=limit, host_memory=host_memory, accelerator=acc, index=i, input=inp,
                   throughput=throughput, max_replicas=max_replicas, context=context, llm=llm,
                   source=source)


def _is_llm_config(path: str) -> bool:
    """Whether the model file ``path`` is an LLM model config (``.json`` with ``num_hidden_layers`` and
    ``hidden_size``, :func:`graphs.llm.is_llm_config`). A file that cannot be read is not: the curve's
    reader reports it."""
    if not path.lower().endswith(".json"):
        return False
    from graphs.jsonio import read_json
    from graphs.llm import is_llm_config

    try:
        return is_llm_config(read_json(path))
    except InputError:
        return False


def _accelerator(j, where, cluster: ClusterSpec, source) -> str | None:
    acc = j.get("accelerator")
    if acc is None:
        return None
    if not isinstance(acc, str):
        raise InputError(f"{where}: accelerator must be a string", source=source)
    acc = acc.strip().lower()
    kinds = dict(zip(cluster.kinds, cluster.host))
    if acc not in kinds or kinds[acc]:
        accels = [k for k, h in kinds.items() if not h]
        raise InputError(f"{where}: accelerator {acc!r} is not an accelerator kind of the cluster "
                         f"({', '.join(accels) or 'none'})", source=source)
    return acc


def _table_job(i, j, name, where, table, cluster: ClusterSpec, source) -> JobSpec:
    """A job given by its measured throughput table only (no model)."""
    model_only = [k for k in ("training", "batch_size", "optimizer", "costs", "input", "max_replicas",
                              "context")
                  if k in j]
    if model_only:
        raise InputError(f"{where}: {', '.join(model_only)} need a model; a job given by its throughput "
                         f"table alone has none", source=source)
    samples = _positive(j["samples"], f"{where}: samples", source)
    arrival = _positive(j.get("arrival", 0), f"{where}: arrival", source, zero=True)
    hm = _positive(j.get("host_memory_gb", 0), f"{where}: host_memory_gb", source, zero=True) * GB
    request = parse_counts(j.get("request"), cluster, f"{where}: request", source)
    limit = parse_counts(j.get("limit"), cluster, f"{where}: limit", source)
    acc = _accelerator(j, where, cluster, source)
    _check_table_accelerators(table, limit, cluster, where, source, acc)
    _check_request(request, limit, cluster, where, source, table, acc)
    return JobSpec(name=name, model="", samples=samples, arrival=arrival, request=request, limit=limit,
                   host_memory=hm, accelerator=acc, index=i, throughput=table, source=source)


def _check_table_accelerators(table, limit, cluster: ClusterSpec, where: str, source, acc=None) -> None:
    """A measured job runs on exactly its table's accelerator count: a cluster (or a ``limit``) with fewer
    of its kind cannot run it. Its kind: ``acc``, else the cluster's only accelerator kind (with several
    and none named, the curve asks which)."""
    accels = [k for k, h in zip(cluster.kinds, cluster.host) if not h]
    kind = acc or (accels[0] if len(accels) == 1 else None)
    if kind is None:
        return
    have = dict(zip(cluster.kinds, cluster.counts))[kind]
    if have < table.accelerators:
        raise InputError(f"{where}: throughput.accelerators: the table is measured at {table.accelerators} "
                         f"{kind}, the cluster has {have} (a measured job runs on exactly that many)",
                         source=source)
    if limit is not None and limit.get(kind, have) < table.accelerators:
        raise InputError(f"{where}: throughput.accelerators: the table is measured at {table.accelerators} "
                         f"{kind}, above its limit ({limit[kind]} {kind}; a measured job runs on exactly "
                         f"that many)", source=source)


def _check_request(request, limit, cluster: ClusterSpec, where: str, source, table=None, acc=None) -> None:
    """A request is what the job runs on under ``fifo`` (and its GPU demand under Synergy's policies): one
    it could not get or could not use is refused here, never clipped: more of a kind than the cluster
    has, more than the job's ``limit``, or, for a measured throughput table, accelerators other than the
    table's count on its kind."""
    if request is None:
        return
    for k, n in zip(cluster.kinds, cluster.counts):
        if request.get(k, 0) > n:
            raise InputError(f"{where}: request asks for {request[k]} {k}, the cluster has {n}",
                             source=source)
        if limit is not None and k in limit and request.get(k, 0) > limit[k]:
            raise InputError(f"{where}: request asks for {request[k]} {k}, above its limit ({limit[k]})",
                             source=source)
    if table is not None:
        accels = [k for k, h in zip(cluster.kinds, cluster.host) if not h]
        kind = acc or (accels[0] if len(accels) == 1 else None)
        for k in accels:
            want = table.accelerators if k == kind else 0
            got = request.get(k, 0)
            if kind is not None and got and got != want:
                raise InputError(f"{where}: request asks for {got} {k}, but its throughput table is measured "
                                 f"at {want} {k} (a measured job runs on exactly that many; request "
                                 f"{kind}:{table.accelerators} or leave it out)", source=source)


def _parse_input(d, where: str, cluster: ClusterSpec, source) -> InputSpec:
    if not isinstance(d, dict):
        raise InputError(f"{where} must be an object like {{\"cpu_ms_per_sample\": 8.0, \"sample_bytes\": "
                         f"110000, \"dataset_gb\": 140, \"storage_gbps\": 0.5}}", source=source)
    unknown = sorted(set(d) - set(_INPUT_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(_INPUT_KEYS)}",
                         source=source)
    for key in _INPUT_KEYS[:3]:
        if key not in d:
            raise InputError(f"{where}: missing field {key!r}", source=source)
    cpu = _positive(d["cpu_ms_per_sample"], f"{where}.cpu_ms_per_sample", source, zero=True)
    size = _positive(d["sample_bytes"], f"{where}.sample_bytes", source, zero=True)
    data = _positive(d["dataset_gb"], f"{where}.dataset_gb", source, zero=True) * GB
    if "storage_gbps" in d:
        storage = _positive(d["storage_gbps"], f"{where}.storage_gbps", source)
    elif cluster.storage_gbps is not None:
        storage = cluster.storage_gbps
    else:
        raise InputError(f"{where}: missing field 'storage_gbps' and the cluster sets no default "
                         f"(cluster.storage_gbps)", source=source)
    return InputSpec(cpu, size, data, storage * GB)


def _parse_table(d, where: str, source) -> ThroughputTable:
    shape = '{"accelerators": 1, "points": [[cpus, memory_gb, samples_per_second], ...]}'
    if not isinstance(d, dict) or set(d) != {"accelerators", "points"}:
        raise InputError(f"{where} must be an object {shape}", source=source)
    g = d["accelerators"]
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise InputError(f"{where}.accelerators must be a positive integer, got {json.dumps(g)[:40]}",
                         source=source)
    pts = d["points"]
    if not isinstance(pts, list) or not pts:
        raise InputError(f"{where}.points must be a non-empty list of [cpus, memory_gb, samples_per_second]",
                         source=source)
    grid: dict[tuple[float, float], float] = {}
    for k, p in enumerate(pts):
        if not isinstance(p, list) or len(p) != 3:
            raise InputError(f"{where}.points[{k}] must be [cpus, memory_gb, samples_per_second]",
                             source=source)
        c = _positive(p[0], f"{where}.points[{k}] cpus", source)
        m = _positive(p[1], f"{where}.points[{k}] memory_gb", source, zero=True)
        r = _positive(p[2], f"{where}.points[{k}] samples_per_second", source)
        if (c, m) in grid:
            raise InputError(f"{where}.points[{k}]: ({c:g} cpus, {m:g} GB) is measured twice", source=source)
        grid[(c, m)] = r
    cpus = sorted({c for c, _ in grid})
    mems = sorted({m for _, m in grid})
    missing = [(c, m) for c in cpus for m in mems if (c, m) not in grid]
    if missing:
        c, m = missing[0]
        raise InputError(f"{where}.points must form a full grid of cpus x memory_gb: ({c:g} cpus, {m:g} GB) "
                         f"is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                         source=source)
    return ThroughputTable(g, tuple(cpus), tuple(m * GB for m in mems),
                           tuple(tuple(grid[(c, m)] for m in mems) for c in cpus))


def with_servers(cluster: ClusterSpec, servers, *, source: str | None = None,
                 what: str = "cluster.servers") -> ClusterSpec:
    """``cluster`` cut into ``servers``: a positive number of identical servers (each kind's count and the
    host memory divisible evenly), or a list of ``{"devices": ..., "host_memory_gb": ...}`` adding up to
    the cluster (see the module doc)."""
    import dataclasses

    if isinstance(servers, bool) or not isinstance(servers, (int, list)):
        raise InputError(f"{what} must be a number of identical servers or a list of "
                         f"{{\"devices\": \"v100:8,cpu:24\", \"host_memory_gb\": 500}}", source=source)
    if isinstance(servers, int):
        if servers < 1:
            raise InputError(f"{what} must be at least 1, got {servers}", source=source)
        uneven = [f"{k}:{n}" for k, n in zip(cluster.kinds, cluster.counts) if n % servers]
        if uneven:
            raise InputError(f"{what}: {servers} identical servers cannot split {', '.join(uneven)} evenly; "
                             f"give the servers as a list instead", source=source)
        one = ServerSpec(tuple(n // servers for n in cluster.counts), cluster.host_memory / servers)
        return dataclasses.replace(cluster, servers=(one,) * servers)
    if not servers:
        raise InputError(f"{what} must not be empty", source=source)
    out = []
    for i, s in enumerate(servers):
        here = f"{what}[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("devices"), str):
            raise InputError(f"{here} must be an object like {{\"devices\": \"v100:8,cpu:24\", "
                             f"\"host_memory_gb\": 500}}", source=source)
        bad = sorted(set(s) - {"devices", "host_memory_gb"})
        if bad:
            raise InputError(f"{here}: unknown field(s) {', '.join(bad)}; expected devices, host_memory_gb",
                             source=source)
        counts = parse_counts(s["devices"], cluster, f"{here}.devices", source)
        mem = s.get("host_memory_gb")
        mem = math.inf if mem is None else _positive(mem, f"{here}.host_memory_gb", source, zero=True) * GB
        out.append(ServerSpec(tuple(counts.get(k, 0) for k in cluster.kinds), mem))
    for t, (k, n) in enumerate(zip(cluster.kinds, cluster.counts)):
        total = sum(s.counts[t] for s in out)
        if total != n:
            raise InputError(f"{what}: the servers hold {total} {k}, cluster.devices has {n}", source=source)
    mem = sum(s.host_memory for s in out)
    if not (math.isinf(mem) and math.isinf(cluster.host_memory)) and not math.isclose(
            mem, cluster.host_memory, rel_tol=1e-9):
        raise InputError(f"{what}: the servers hold {mem / GB:g} GB of host memory, cluster.host_memory_gb "
                         f"is {cluster.host_memory / GB:g}", source=source)
    return dataclasses.replace(cluster, servers=tuple(out))


def parse_counts(value, cluster: ClusterSpec, what: str, source: str | None = None) -> dict[str, int] | None:
    """``"a100:2,cpu:4"`` or ``{"a100": 2, "cpu": 4}`` -> ``{"a100": 2, "cpu": 4}`` (kinds of the
    cluster; kinds not named: 0). ``None`` stays ``None``."""
    if value is None:
        return None
    pairs: list[tuple[str, object]] = []
    if isinstance(value, str):
        for part in value.split(","):
            name, sep, count = part.strip().partition(":")
            pairs.append((name.strip().lower(), count.strip() if sep else "1"))
    elif isinstance(value, dict):
        pairs = [(str(k).strip().lower(), v) for k, v in value.items()]
    else:
        raise InputError(f"{what} must be a string like \"a100:2,cpu:4\" or an object of counts",
                         source=source)
    out: dict[str, int] = {}
    for name, count in pairs:
        if name not in cluster.kinds:
            raise InputError(f"{what}: the cluster has no device kind {name!r} (it has "
                             f"{', '.join(cluster.kinds)})", source=source)
        if isinstance(count, str) and count.isdigit():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InputError(f"{what}: count of {name!r} must be a non-negative integer, got {count!r}",
                             source=source)
        out[name] = count
    return out


def _resolve(path: str, base_dir: str | None) -> str:
    path = os.path.expanduser(path)
    if not os.path.isabs(path) and base_dir:
        path = os.path.join(base_dir, path)
    return os.path.normpath(path)


def _positive(value, what: str, source, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{what} must be a finite number, got {json.dumps(value)[:40]}", source=source)
    if value < 0 or (value == 0 and not zero):
        raise InputError(f"{what} must be {'non-negative' if zero else 'positive'}, got {value}",
                         source=source)
    return float(value)


def json_number(x: float | None):
    """A float for JSON: ``None`` for infinity or NaN (JSON has neither)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)
