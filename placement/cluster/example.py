"""An example job list for ``placement cluster`` (``placement example jobs.json``): a shared cluster and
four jobs with input pipelines, three over a transformer layer graph the tool writes next to it and one
given by a measured throughput table."""

from __future__ import annotations

import os

__all__ = ["is_job_list_name", "write_example_jobs"]


def is_job_list_name(path: str) -> bool:
    """Whether ``placement example PATH`` means a job list: a ``.json`` name containing ``jobs`` or
    ``trace`` (``jobs.json``, ``my-trace.json``)."""
    stem, ext = os.path.splitext(os.path.basename(path).lower())
    return ext == ".json" and ("jobs" in stem or "trace" in stem)


def example_jobs(model: str) -> dict:
    """The example job list, its jobs on the reference-format workload ``model`` (a path relative to the
    job list)."""
    return {
        "comment": "placement cluster simulate THIS_FILE --policy all; README_cluster.md explains the fields",
        "cluster": {"devices": "a100:4,cpu:12", "host_memory_gb": 128, "storage_gbps": 0.5},
        "lease": 600000,
        "jobs": [
            {"name": "vision", "model": model, "samples": 2e5, "arrival": 0,
             "input": {"cpu_ms_per_sample": 8.0, "sample_bytes": 110000, "dataset_gb": 140,
                       "storage_gbps": 0.5}},
            {"name": "speech", "model": model, "samples": 1.5e5, "arrival": 0,
             "input": {"cpu_ms_per_sample": 1.0, "sample_bytes": 2000000, "dataset_gb": 90}},
            {"name": "language", "model": model, "samples": 2e5, "arrival": 3e5,
             "input": {"cpu_ms_per_sample": 0.3, "sample_bytes": 4000, "dataset_gb": 20}},
            {"name": "measured", "samples": 4e5, "arrival": 6e5,
             "throughput": {"accelerators": 1,
                            "points": [[1, 0, 150], [1, 32, 160], [3, 0, 420], [3, 32, 450],
                                       [6, 0, 700], [6, 32, 900]]}},
        ],
    }


def write_example_jobs(path: str) -> str:
    """Write the example job list to ``path`` and its workload next to it (``<stem>-transformer.json``);
    return a line saying what was written."""
    from graphs.example import transformer_layer_graph
    from placement.export import write_json

    stem = os.path.splitext(path)[0]
    model = f"{stem}-transformer.json"
    # its times are milliseconds, the unit of the jobs' input sections and of the measured table: said in
    # the file, so a job on it has that unit with an input section or without one
    workload = transformer_layer_graph(2, hidden=512, seq=128, batch=4, accelerators=4, cpus=2, training=True)
    write_json(model, {**workload, "unit": "ms"})
    write_json(path, example_jobs(os.path.basename(model)))
    return (f"wrote {path}: a job list of 4 jobs with input pipelines on a100:4,cpu:12 (its workload: "
            f"{model}). Run it with: placement cluster simulate {path} --policy all")
