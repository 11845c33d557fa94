"""Every shell block of the README (past its two set-up commands) and of the docs pages runs, in a fresh
folder, with this checkout's ``placement``, and exits 0: the documentation cannot drift from the tool.
(The README's Python blocks: tests/test_readme.py; docs/clusters.md's: tests/test_cluster_docs.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAGES = ["README.md", "docs/cli.md", "docs/solvers.md", "docs/serving.md", "docs/model.md",
         "docs/library.md", "docs/performance.md"]


def _blocks(page: str) -> list[str]:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        blocks = re.findall(r"^```sh\n(.*?)^```", f.read(), re.S | re.M)
    return blocks[2:] if page == "README.md" else blocks  # the README's first two: set-up commands


CASES = [(page, i, block) for page in PAGES for i, block in enumerate(_blocks(page))]


def test_the_pages_have_runnable_examples():
    assert {page for page, _, _ in CASES} >= {"README.md", "docs/solvers.md", "docs/serving.md"}


@pytest.mark.parametrize("page, index, block", CASES, ids=[f"{p}#{i}" for p, i, _ in CASES])
def test_shell_block_runs(tmp_path, page, index, block):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "placement"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m placement "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, \
        f"{page} block {index} failed:\n{block}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
