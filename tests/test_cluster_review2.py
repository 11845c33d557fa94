"""Regressions from the second cluster review: a non-finite lease, requests beyond the cluster, the
first-allocation columns, statuses in the JSON, --no-cache with --cache-dir, the progress bar on Ctrl-C."""

import json
import math

import pytest

from graphs.errors import InputError
from placement.cli import main
from placement.cluster.policies import Capacity
from placement.cluster.simulate import SimJob, simulate
from tests.test_cluster_policies import linear

CAP2 = Capacity(("acc", "cpu"), (2, 0), (False, True))

TWO_JOBS = {"cluster": {"devices": "a100:4,cpu:12", "host_memory_gb": 64},
            "jobs": [{"name": "a", "samples": 1000, "arrival": 0,
                      "throughput": {"accelerators": 1, "points": [[1, 0, 100], [6, 0, 400]]}},
                     {"name": "b", "samples": 1000, "arrival": 0,
                      "throughput": {"accelerators": 2, "points": [[1, 0, 100], [6, 0, 800]]}}]}


def _write(tmp_path, doc, name="jobs.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


@pytest.mark.parametrize("lease", ["inf", "nan"])
def test_cli_refuses_a_non_finite_lease_by_name(tmp_path, capsys, lease):
    path = _write(tmp_path, TWO_JOBS)
    assert main(["cluster", "simulate", path, "--policy", "ftf", "--lease", lease, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--lease" in err and "leave --lease out" in err


@pytest.mark.parametrize("lease", [math.inf, math.nan])
def test_simulate_refuses_a_non_finite_lease(lease):
    jobs = [SimJob("A", linear(2), 100, 0.0), SimJob("B", linear(2), 40, 10.0)]
    with pytest.raises(InputError, match="lease"):
        simulate(jobs, CAP2, "ftf", lease=lease)
