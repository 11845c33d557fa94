"""Shared-cluster mode: several jobs on one heterogeneous cluster, allocated from their throughput curves.

* :mod:`~placement.cluster.curves`: a job's best time per sample for every allocation (one DP run),
  cached per model, cost model and options;
* :mod:`~placement.cluster.inputs`: a job's input pipeline (Synergy's model: the minimum of its
  accelerator, CPU-preprocessing and storage rates, or a measured table over cores and memory);
* :mod:`~placement.cluster.policies`: ``ftf`` (Themis's finish-time fairness, minimised exactly, or
  with Themis's fairness knob: an auction among the most unfair jobs, the leftover to the others),
  ``joint`` (accelerator counts, host-core stages, CPU and memory chosen jointly; ``sensitive`` is its
  old name), ``even`` (every accelerator kind split evenly; ``proportional`` before issue #26) and
  ``fifo``, over the whole cluster as one pool;
* :mod:`~placement.cluster.synergy` (``simulate_rounds``; ``allocate_rounds_once``, one round held):
  Synergy as Synergy does it, in rounds on the cluster's servers: a base scheduler (FIFO, LAS, SRTF,
  FTF) picks the jobs and their GPUs, then ``proportional`` (GPU-proportional CPU and memory, capped at
  that share), ``tune`` (Synergy-TUNE) or ``opt`` (the Synergy-OPT bound);
* :mod:`~placement.cluster.traces`: Philly-like traces over Synergy's profiled jobs;
* :mod:`~placement.cluster.simulate` (``simulate``): arrivals, completions and leases over time, per-job
  finish time and rho, average JCT, makespan, utilisation, and a plot of allocations over time;
* :mod:`~placement.cluster.formats`: the job list / trace file (``JOBS.json``).

The command line is ``placement cluster JOBS.json --policy ftf`` and ``placement cluster simulate
TRACE.json --policy ftf`` (:mod:`~placement.cluster.command`).
"""

from .curves import CurveCache, CurvePoint, JobCurve, graph_curve, job_curve
from .formats import (
    ClusterSpec,
    InputSpec,
    JobList,
    JobSpec,
    ServerSpec,
    ThroughputTable,
    parse_jobs,
    read_jobs,
    with_servers,
)
from .inputs import PipelineCurve, job_rates, pipeline_curve
from .policies import POLICIES, Allocation, Capacity, Decision, JobState, allocate, fair_share_time
from .simulate import JobOutcome, SimJob, SimResult, allocate_once
from .synergy import GpuJob, simulate_rounds

__all__ = [
    "CurveCache", "CurvePoint", "JobCurve", "graph_curve", "job_curve",
    "ClusterSpec", "InputSpec", "JobList", "JobSpec", "ServerSpec", "ThroughputTable", "parse_jobs",
    "read_jobs", "with_servers", "GpuJob", "simulate_rounds",
    "PipelineCurve", "job_rates", "pipeline_curve",
    "POLICIES", "Allocation", "Capacity", "Decision", "JobState", "allocate", "fair_share_time",
    "JobOutcome", "SimJob", "SimResult", "allocate_once",
]
# ``simulate`` (the function) stays in :mod:`placement.cluster.simulate`: exporting it here would hide
# the module of the same name
