"""The solvers' numba kernels with an empty cache: the command line says it compiles them, and the compiling
does not count against ``--time-limit`` (solvers.kernels.warm runs before the solver's clock, with the
argument types of its solves: a cold ``place --time-limit 5`` once spent the 5 s compiling, silently, and
found nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from placement import _compile_notice
from solvers.kernels import SIGNATURES, signature

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _env(tmp_path) -> dict:
    """A fresh, empty numba cache: every kernel compiles."""
    return dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
                PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


@pytest.mark.parametrize("module", sorted(SIGNATURES))
def test_each_listed_signature_fits_its_kernel(module):
    import importlib

    from numba.core.registry import CPUDispatcher

    m = importlib.import_module(module)
    for name, words in SIGNATURES[module].items():
        kernel = getattr(m, name)
        assert isinstance(kernel, CPUDispatcher), name
        assert len(signature(words)) == kernel.py_func.__code__.co_argcount, name


def test_signature_words():
    from numba.core import types

    assert signature("i f2r (i1 b) u3") == (
        types.int64, types.Array(types.float64, 2, "C", readonly=True),
        types.Tuple((types.Array(types.int64, 1, "C"), types.boolean)), types.Array(types.uint64, 3, "C"))
    with pytest.raises(ValueError):
        signature("x1")


def test_the_notice_comes_once_at_the_first_compile_and_counts_nested_ones_once(monkeypatch, capsys):
    from numba.core import event

    monkeypatch.setattr(_compile_notice, "_state", {"listener": None, "announced": False})
    listener = _compile_notice._listener(event)
    with event.install_listener("numba:compile", listener):
        for _ in range(2):
            with event.trigger_event("numba:compile", data={}):  # as a compile that compiles a callee
                with event.trigger_event("numba:compile", data={}):
                    assert listener.depth == 2
                    time.sleep(0.01)
    assert listener.depth == 0 and 0.02 <= listener.seconds() < 1.0
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [_compile_notice.MESSAGE]
    listener.total = 2.0  # as if it compiled for 2 s
    event.register("numba:compile", listener)
    _compile_notice._state["listener"] = (event, listener)
    _compile_notice.done()
    _compile_notice.done()  # counted anew: nothing more to say
    assert capsys.readouterr().err.splitlines() == [
        "note: compiled the solver's kernels in 2 s; later runs load them from the cache"]


def test_the_notice_waits_for_numba_to_be_imported_and_ends_with_the_command(tmp_path):
    """install() imports nothing (numba costs a second): it registers once numba's event module loads;
    done() takes the listener away (what runs after the command, the library, prints nothing)."""
    code = textwrap.dedent("""
        import sys
        from placement import _compile_notice
        _compile_notice.install()
        assert "numba" not in sys.modules
        from numba.core import event
        with event.trigger_event("numba:compile", data={}):
            pass
        _compile_notice.done()
        assert not any(isinstance(f, _compile_notice._AfterImport) for f in sys.meta_path)
        _compile_notice._state["announced"] = False
        with event.trigger_event("numba:compile", data={}):
            pass
        """)
    r = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [_compile_notice.MESSAGE] and r.stdout == ""


def test_the_library_prints_nothing(capfd):
    """solve() with a time limit compiles its kernels first when the cache is cold: without a word."""
    from solvers.base import SolveOptions
    from solvers.registry import solve
    from tests.instances import chain

    inst = chain(6)
    sol = solve(inst.graph, inst.cluster, solver="local-search", options=SolveOptions(time_limit=2.0))
    assert sol.found
    assert capfd.readouterr() == ("", "")


def test_a_cold_place_says_it_compiles_and_keeps_its_time_limit(tmp_path):
    """The local search's kernels compile in seconds: an empty cache, a 1 s limit. Before, the compiling
    ran on the solver's clock and unannounced."""
    from placement.cli import main

    example = str(tmp_path / "example.json")
    assert main(["example", example, "--layers", "2", "--accelerators", "2"]) == 0
    r = subprocess.run([sys.executable, "-m", "placement", "place", example, "--solver", "local-search",
                        "--time-limit", "1", "--json"], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _compile_notice.MESSAGE in r.stderr.splitlines()
    result = json.loads(r.stdout)  # the notes went to stderr: stdout is the result alone
    assert result["stats"]["compile_s"] > 0.5
    assert result["solve_time_s"] < 1.5


_NO_LATE_COMPILE = """
import sys
from numba.core import event
import solvers.kernels as kernels
from placement.cli import main

late = []
warm = kernels.warm


def warmed(*args):  # after the warm-up, a compile means a signature the table does not have
    warm(*args)
    event.register("numba:compile", Late())


class Late(event.Listener):
    def on_start(self, ev):
        late.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass


kernels.warm = warmed
code = main(sys.argv[1:])
print("LATE", sorted(set(late)))
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.parametrize("what", ["onnx-stages", "reference-pipeline"])
def test_a_cold_place_with_a_time_limit_finds_the_plan_and_compiles_nothing_late(what, tmp_path):
    """An empty cache and a 5 s limit (the first place ran 45 s and found nothing): the kernels the
    solve needs are all compiled before its clock starts, none in it."""
    from placement.cli import main

    if what == "onnx-stages":
        workload = str(tmp_path / "model.onnx")
        assert main(["example", workload, "--layers", "2"]) == 0
        extra = ["--devices", "a100:2,t4:2"]
    else:
        workload = str(tmp_path / "example.json")
        assert main(["example", workload]) == 0
        extra = []
    script = tmp_path / "late.py"
    script.write_text(_NO_LATE_COMPILE)
    r = subprocess.run([sys.executable, str(script), "place", workload, *extra, "--time-limit", "5", "--out",
                        str(tmp_path / "r.json")], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _compile_notice.MESSAGE in r.stderr.splitlines()
    assert "LATE []" in r.stdout.splitlines(), r.stdout[-2000:]
    result = json.load(open(tmp_path / "r.json"))
    assert result["status"] in ("optimal", "feasible") and result["solve_time_s"] < 6
    assert (result.get("compile_s") or result.get("stats", {}).get("compile_s")) > 1
    # the second run loads them: no note, nothing compiled; the warm-up found them in the cache
    kernels = ["solvers.dp_stages" if what == "onnx-stages" else "solvers.dp"]
    check = textwrap.dedent(f"""
        import importlib
        from solvers import kernels
        for name in {kernels!r}:
            m = importlib.import_module(name)
            assert all(kernels.cached(getattr(m, k), kernels.signature(w))
                       for k, w in kernels.SIGNATURES[name].items())
        assert not kernels.cached(m._prefix_sums if hasattr(m, "_prefix_sums") else m._prefix,
                                  kernels.signature("f1"))
        """)
    r = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([sys.executable, str(script), "place", workload, *extra, "--time-limit", "5", "--out",
                        str(tmp_path / "r.json")], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "note:" not in r.stderr and "LATE []" in r.stdout.splitlines(), r.stderr
    result = json.load(open(tmp_path / "r.json"))
    assert "compile_s" not in result and "compile_s" not in result.get("stats", {})
