"""The code base stays ruff clean (configuration in pyproject.toml).

Ruff runs as ``python -m ruff`` from the test's own interpreter, so the test runs wherever the test
extra is installed (CI) instead of depending on a ``ruff`` executable on PATH.
"""

import importlib.util
import os
import subprocess
import sys


def test_ruff_clean():
    assert importlib.util.find_spec("ruff") is not None, "ruff is in the test extra: pip install -e '.[test]'"
    root = os.path.join(os.path.dirname(__file__), "..")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "graphs", "solvers", "placement",
                        "tests", "benchmarks"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
