"""Small things a new user met in ``placement cluster``: a job whose model file is missing was an error
naming the file alone (now the job too, before any curve); ``placement cluster --help``, which
docs/clusters.md calls the full format, never described the job fields ``input`` and ``throughput``
(now every job field and cluster field); ``--servers`` had no default in its help (it is 1)."""

import json
import re

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.curves import job_curve
from placement.cluster.formats import _JOB_KEYS, parse_jobs


def test_a_missing_model_file_is_named_with_its_job_before_any_curve(tmp_path, capsys, monkeypatch):
    (tmp_path / "w.json").write_text(json.dumps({"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 0,
                                                  "nodes": [{"id": 1, "cpuLatency": 1, "fpgaLatency": 1,
                                                             "supportedOnFpga": 1}], "edges": []}))
    doc = {"cluster": {"devices": "a100:2,cpu:1"},
           "jobs": [{"name": "here", "model": "w.json", "samples": 10},
                    {"name": "gone", "model": "missing.onnx", "samples": 10}]}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(doc))

    def no_curves(*a, **k):
        raise AssertionError("a curve was computed before the missing file was found")

    monkeypatch.setattr("placement.cluster.inputs.job_rates", no_curves)
    assert main(["cluster", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    # before: "error: .../missing.onnx: no such file"
    assert err == f"error: {tmp_path / 'missing.onnx'}: job 'gone' (jobs[1]): model: no such file"


def test_the_library_names_the_job_too(tmp_path):
    jl = parse_jobs({"cluster": {"devices": "a100:1"},
                     "jobs": [{"name": "gone", "model": "missing.json", "samples": 1}]},
                    base_dir=str(tmp_path))
    with pytest.raises(InputError, match=r"job 'gone' \(jobs\[0\]\): model: no such file"):
        job_curve(jl.jobs[0], jl.cluster)


def _help(capsys) -> str:
    assert main(["cluster", "--help"]) == 0
    return capsys.readouterr().out


def test_the_help_describes_every_job_field(capsys):
    text = _help(capsys)
    described = set(re.findall(r"^  jobs\[\]\.(\w+)", text, re.M))
    for line in re.findall(r"^  jobs\[\]\.(.+)$", text, re.M):  # "training, batch_size, ..." on one line
        described |= {w.strip() for w in line.split(",")[1:] if w.strip().isidentifier()}
    # limit and arrival and context are told on the lines of request, samples and model
    told_inline = {"limit", "arrival", "context"}
    assert set(_JOB_KEYS) - told_inline <= described, set(_JOB_KEYS) - told_inline - described
    for key in told_inline:
        assert f"{key}:" in text
    assert "cpu_ms_per_sample" in text and "samples_per_second" in text and "cluster.storage_gbps" in text


def test_the_help_gives_servers_default(capsys):
    text = " ".join(_help(capsys).split())
    assert "--servers N cut the cluster into N identical servers" in text
    assert "default: cluster.servers, else 1" in text
