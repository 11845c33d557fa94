"""docs/clusters.md: its shell blocks run (each within 20 s) and its JSON examples are valid job lists."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from placement.cluster.formats import parse_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "clusters.md")


def _blocks(lang: str) -> list[str]:
    with open(DOC, encoding="utf-8") as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), re.S)


def test_the_json_examples_are_valid_job_lists_one_with_servers():
    lists = [parse_jobs(json.loads(block)) for block in _blocks("json")]
    assert len(lists) == 3
    assert len(lists[0].cluster.servers) == 2 and lists[0].cluster.servers[0].counts == (8, 24)
    assert [job.max_replicas for job in lists[1].jobs] == [None, 1]  # replicas by default, or not
    assert any(job.input is not None for job in lists[2].jobs)  # the input-pipeline example


@pytest.mark.parametrize("block", _blocks("sh"))
def test_shell_blocks_run_in_under_20_s(block, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for line in block.strip().splitlines():
        # this checkout's code, whichever ``placement`` is installed
        cmd = re.sub(r"^placement\b", f"{sys.executable} -m placement", line.strip())
        t0 = time.perf_counter()
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{line}: {r.stderr[-2000:]}"
        assert time.perf_counter() - t0 < 20, f"{line} took over 20 s"
