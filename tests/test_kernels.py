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


@pytest.mark.parametrize("outcome, code", [(KeyboardInterrupt, 130), (130, 130), (0, 0)])
def test_an_interrupted_command_says_nothing_after_its_error(monkeypatch, capsys, outcome, code):
    """A command a Ctrl-C ends (raised, or taken and returned as 130) has ``error: interrupted`` as its
    last line: no "compiled in N s" note after it (before, a cold cache printed one)."""
    from numba.core import event

    import placement.cli as cli

    def command(args):
        _compile_notice._state["listener"][1].total = 2.0  # the command's listener: as if it compiled 2 s
        if outcome is KeyboardInterrupt:
            raise KeyboardInterrupt
        return outcome

    assert event  # imported: install() registers the listener at once
    monkeypatch.setattr(_compile_notice, "_state", {"listener": None, "announced": False})
    monkeypatch.setitem(cli.COMMANDS, "inspect", command)
    assert cli.main(["inspect", "x.json"]) == code
    err = capsys.readouterr().err.splitlines()
    compiled = [line for line in err if "compiled the solver's kernels in" in line]
    assert compiled == ([] if code else ["note: compiled the solver's kernels in 2 s; later runs load "
                                         "them from the cache"])
    if outcome is KeyboardInterrupt:
        assert err[-1] == "error: interrupted"
    assert _compile_notice._state["listener"] is None  # the command's listener went with it


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


def warmed(*args, **kw):  # after the warm-up, a compile means a signature the table does not have
    warm(*args, **kw)
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


_SLOW_FIRST_CALLS = """
import sys
import time

from numba.core.dispatcher import Dispatcher, _DispatcherBase

from solvers.base import SolveOptions
from solvers.registry import solve
from tests.instances import chain
from tests.test_ip_stages import _chain_problem

# a kernel's first call with new argument types compiles or loads it (_compile_for_args), and so does
# the warm-up (compile): both made slow, as a cold cache or a loaded machine makes them
on_call = _DispatcherBase._compile_for_args
ahead = Dispatcher.compile
slept = []


def slow_call(self, *args, **kws):
    slept.append(self.py_func.__qualname__)
    time.sleep(1.5)
    return on_call(self, *args, **kws)


def slow_ahead(self, sig):
    if not slept:
        time.sleep(1.5)
        slept.append("warm")
    return ahead(self, sig)


_DispatcherBase._compile_for_args = slow_call
Dispatcher.compile = slow_ahead
case = sys.argv[1]
inst = chain(6)
graph, cluster, form = {"stages": (_chain_problem(), None, None),
                        "pipeline-model stages": (inst.graph, inst.cluster, "stages"),
                        "pipeline": (inst.graph, inst.cluster, None),
                        "auto's own limit": (inst.graph, inst.cluster, None)}[case]
# auto without a time limit stops at its own (300 s): its kernels are warmed before that clock too
solver, limit = ("auto", None) if case == "auto's own limit" else ("dp", 1.0)
t = time.perf_counter()
sol = solve(graph, cluster, solver=solver, options=SolveOptions(time_limit=limit, threads=1), form=form)
print("RESULT", sol.status.value, f"{sol.time:.3f}", f"{time.perf_counter() - t:.3f}", sorted(set(slept)))
"""


@pytest.mark.parametrize("case", ["stages", "pipeline-model stages", "pipeline", "auto's own limit"])
def test_loading_the_kernels_is_not_on_the_solvers_clock(case, tmp_path):
    """Each first call of a kernel (compiling or loading it) sleeps 1.5 s, as does the warm-up: with a 1 s
    limit the solve still proves its optimum, in well under the limit on its own clock. Before, a kernel
    in numba's cache was left for the solve to load on its clock (the first load sets up numba's code
    generator, ~0.5 s), the pipeline DP's kernels that the stage DP runs on a one-device-per-stage problem
    were not warmed at all, and the multi-threaded DP kernel (5-8 s to compile) was not in the table."""
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_FIRST_CALLS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(script), case], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(s for s in r.stdout.splitlines() if s.startswith("RESULT"))
    _, status, solve_s, wall_s, slept = line.split(" ", 4)
    # a kernel loaded on the solver's clock would put its 1.5 s sleep there; a busy machine's solve of the
    # chain itself took 0.51 s
    assert status == "optimal" and float(solve_s) < 1.0, line
    assert slept == "['warm']", line  # the warm-up's sleep only: no kernel was loaded on the clock
    assert float(wall_s) >= 1.5, line


def test_every_kernel_called_from_python_is_listed():
    """A kernel a solver calls from Python (not only from another kernel) missing from the table compiles,
    or loads, on the solver's clock: the multi-threaded DP kernel compiled for 5-8 s inside a 5 s limit."""
    import ast
    import importlib

    for module in SIGNATURES:
        path = importlib.import_module(module).__file__
        tree = ast.parse(open(path).read())
        funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        jitted = {f.name for f in funcs if any("njit" in ast.unparse(d) for d in f.decorator_list)}
        from_python = {n.id for f in funcs if f.name not in jitted for n in ast.walk(f)
                       if isinstance(n, ast.Name) and n.id in jitted}
        assert from_python <= set(SIGNATURES[module]), (module, sorted(from_python - set(SIGNATURES[module])))


def test_the_compile_note_never_lands_on_a_progress_bars_line(monkeypatch):
    """A first run compiles while a bar is drawn: the note printed on the bar's line ("placing [###  ]
    12% note: compiling ..."). It now ends the bar's line first, and the bar goes on below it."""
    import io

    from placement import _compile_notice
    from placement.outputs import Progress

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = Progress("placing", stream=err, enabled=True)
    bar(0.25)
    _compile_notice._say(_compile_notice.MESSAGE)
    bar.last = 0.0  # past the redraw interval
    bar(0.5)
    bar.done()
    lines = err.getvalue().split("\n")
    assert lines[1] == _compile_notice.MESSAGE, lines
    assert lines[0].startswith("\rplacing [") and "25.0%" in lines[0]
    assert lines[2].startswith("\rplacing [") and "50.0%" in lines[2] and lines[3] == ""
    err.truncate(0), err.seek(0)
    _compile_notice._say("note: after the bar")  # no bar open: no empty line before it
    assert err.getvalue() == "note: after the bar\n"
