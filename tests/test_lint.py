"""The code base stays ruff clean (configuration in pyproject.toml)."""

import os
import shutil
import subprocess

import pytest


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    root = os.path.join(os.path.dirname(__file__), "..")
    r = subprocess.run([ruff, "check", "--no-cache", "graphs", "solvers", "placement", "tests", "benchmarks"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
