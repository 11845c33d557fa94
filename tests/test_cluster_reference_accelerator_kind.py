"""A reference-format workload that names its accelerator kind (``"accelerator": "t4"``, as ``placement
inspect -o`` writes a costed ONNX graph) runs, as a cluster job, on the cluster's kind of that name. It
ran on whatever accelerator the cluster had, by role: a graph costed for T4 was given A100s at its T4
times, without a word. A cluster without that kind is an error naming the job, the file and both kinds;
the job's ``accelerator`` maps the file onto another kind on purpose (said in a note); a file that names
no kind keeps the mapping by role."""

import json

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.curves import CurveCache, job_curve
from placement.cluster.formats import parse_jobs
from tests.test_reference_kind_names import _write


def _curve(tmp_path, devices: str, named: bool = True, **job):
    path = _write(tmp_path, "w.json", **({"accelerator": "t4"} if named else {}))
    jl = parse_jobs({"cluster": {"devices": devices},
                     "jobs": [{"name": "w", "model": path, "samples": 10, **job}]})
    return job_curve(jl.jobs[0], jl.cluster, cache=CurveCache()), path


def _used(curve) -> dict:
    best = curve.best
    return {k: n for k, n in zip(curve.kinds, best.counts) if n}


def test_a_file_costed_for_t4_runs_on_the_clusters_t4(tmp_path):
    # before: "the cluster has several accelerator kinds (a100, t4); say which one ..."
    c, _ = _curve(tmp_path, "a100:2,t4:2,cpu:1")
    assert c.limits == (0, 2, 1) and _used(c) == {"t4": 2, "cpu": 1} and c.best.time_per_sample == 2.75


def test_a_cluster_without_the_files_kind_is_an_error_naming_job_file_and_kinds(tmp_path):
    # before: run on a100 at t4's times, no note
    with pytest.raises(InputError) as e:
        _curve(tmp_path, "a100:2,cpu:1")
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "w.json")) and "job 'w'" in msg
    assert "costed for t4" in msg and "no t4" in msg and "a100" in msg
    assert "placement inspect" in msg and '"accelerator": "a100"' in msg


def test_the_command_refuses_it_with_one_error_line(tmp_path, capsys):
    path = _write(tmp_path, "w.json", accelerator="t4")
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"cluster": {"devices": "a100:2,cpu:1"},
                                "jobs": [{"name": "w", "model": path, "samples": 10}]}))
    assert main(["cluster", str(jobs), "--policy", "ftf", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "job 'w'" in err and "costed for t4" in err


def test_the_jobs_accelerator_maps_it_onto_another_kind_with_a_note(tmp_path):
    c, path = _curve(tmp_path, "a100:2,t4:2,cpu:1", accelerator="a100")
    assert c.limits == (2, 0, 1) and _used(c) == {"a100": 2, "cpu": 1}
    assert any("costed for t4" in n and "runs on a100" in n for n in c.notes)
    same, _ = _curve(tmp_path, "a100:2,t4:2,cpu:1", accelerator="t4")
    assert same.limits == (0, 2, 1) and not any("costed for" in n for n in same.notes)


def test_a_file_that_names_no_kind_keeps_the_mapping_by_role(tmp_path):
    c, _ = _curve(tmp_path, "a100:2,cpu:1", named=False)
    assert _used(c) == {"a100": 2, "cpu": 1} and c.best.time_per_sample == 2.75
    with pytest.raises(InputError, match="several accelerator kinds"):
        _curve(tmp_path, "a100:2,t4:2,cpu:1", named=False)
