"""``placement cluster simulate ... --plot FILE``: a Ctrl-C that comes once the simulation is done, while
the command writes its output, lets the results (the JSON, the tables and the plot) be written whole,
then ends the command with 130, as ``place`` and the serving commands do. The plot was lost: ``emit``'s
own deferred block delivered the Ctrl-C before the plot was drawn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")

# two jobs given by measured throughput tables: no curve to compute, the simulation takes milliseconds
TRACE = {"cluster": {"devices": "a100:2,cpu:8"},
         "jobs": [{"name": n, "samples": s, "arrival": t,
                   "throughput": {"accelerators": 1, "points": [[2, 0, 10], [4, 0, 20]]}}
                  for n, s, t in (("a", 500, 0), ("b", 300, 5))]}


def _run(tmp_path, where: str) -> subprocess.CompletedProcess:
    """``cluster simulate`` with the console's Ctrl-C handler installed, a SIGINT sent to itself at
    ``where`` (a ``module:function`` the output path calls), as a Ctrl-C at the terminal would come."""
    (tmp_path / "trace.json").write_text(json.dumps(TRACE))
    module, name = where.split(":")
    code = textwrap.dedent(f"""
        import importlib, os, signal
        from placement import _interrupt
        _interrupt.install()
        mod = importlib.import_module({module!r})
        real = getattr(mod, {name!r})

        def interrupted(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)

        setattr(mod, {name!r}, interrupted)
        from placement.cli import main
        code = main(["cluster", "simulate", "trace.json", "--policy", "even", "--no-cache",
                     "--out", "res.json", "--plot", "alloc.png"])
        print("exit", code)
        """)
    env = dict(os.environ, PYTHONPATH=ROOT, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("where", ["placement.export:write_json",  # the JSON, first of the outputs
                                   "placement.cluster.simulate:plot_allocations"])  # the plot, last
def test_a_ctrl_c_while_cluster_simulate_writes_its_output_lets_the_plot_be_written(where, tmp_path):
    pytest.importorskip("matplotlib")
    r = _run(tmp_path, where)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "exit 130", (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines()[-1] == "error: interrupted", r.stderr
    assert json.loads((tmp_path / "res.json").read_text())["policy"] == "even"
    assert (tmp_path / "alloc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "the plot was not written whole"
    assert "plot written to" in r.stdout and "policy even" in r.stdout
