"""How the console ends after a Ctrl-C, and how ``run`` gets there quickly (``benchmarks/bench_interrupt.py
--run-exits`` measures the time; these tests pin the causes it found, without timing anything).

* ``run`` started each worker with its model among ``Process.start()``'s arguments: start() writes them
  into a pipe the child reads only once its Python is up (0.4-1.5 s on a busy machine), with Ctrl-C
  held back meanwhile. The model now goes on the worker's queue after the start.
* ``run`` waited on its queues in deferred slices of 0.5 s: a Ctrl-C taken by another thread (one of
  onnxruntime's) waited out the slice.
* After exit 130 the interpreter's teardown (freeing onnxruntime, numpy, the models) took 0.1-0.5 s on a
  busy machine; the console now runs the exit handlers and leaves without it.
* A Ctrl-C that landed in a weakref callback (``WeakSet._remove`` as ``run``'s objects went) was printed
  as "Exception ignored in ..." and lost, the command exiting 0; one that landed in the console's own
  frames after the command was a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")


def _python(code: str, cwd, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, start_new_session=True)


def _bytes_in(x) -> int:
    """The bytes objects' sizes in ``x`` (nested lists, tuples, dicts), summed."""
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    if isinstance(x, (list, tuple)):
        return sum(_bytes_in(y) for y in x)
    if isinstance(x, dict):
        return sum(_bytes_in(y) for y in x.values())
    return 0


class _Started(Exception):
    pass


def test_run_starts_its_workers_without_their_models_in_the_start_arguments(monkeypatch):
    """``Process.start()`` blocks until the child has read its arguments from a pipe (64 KiB), and the
    child reads them only once its Python is up: with a model of megabytes among them, each start took
    as long as a child's start-up, a Ctrl-C held back meanwhile (exits of 2-2.8 s under load). The
    arguments must stay far under the pipe's buffer; the model is sent after the start."""
    from placement import pipeline_run

    started = []

    class Process:
        def __init__(self, target=None, args=(), daemon=None):
            self.args = args

        def start(self):
            started.append(self.args)
            raise _Started  # enough: what start() would have written

    class Context:
        def Queue(self):  # noqa: N802 - multiprocessing's name
            import queue

            q = queue.Queue()
            q.cancel_join_thread = q.close = lambda: None
            return q

    Context.Process = Process

    monkeypatch.setattr(pipeline_run.mp, "get_context", lambda method: Context())
    model = b"\0" * (4 << 20)  # a 4 MiB sub-model
    manifest = {"submodels": [{"inputs": ["x"], "replicas": 2}], "outputs": ["y"]}
    with pytest.raises(_Started):
        pipeline_run.run_pipeline([model], manifest, [{"x": np.zeros(1, np.float32)}], samples=1)
    assert started
    assert _bytes_in(started[0]) < 4096, "the model is among the worker's start arguments"


def test_the_workers_model_comes_first_on_its_queue():
    """The model a worker is started without is the first message on its queue, put once it runs."""
    import queue

    from placement.pipeline_run import _start_workers

    class Process:
        def __init__(self, target=None, args=(), daemon=None):
            pass

        def start(self):
            pass

    class Context:
        pass

    Context.Process = Process
    qs = [queue.Queue(), queue.Queue()]
    procs: list = []
    _start_workers(Context(), procs, [(None, (), (qs[0], b"model 0")), (None, (), (qs[1], b"model 1")),
                                      (None, ())])
    assert len(procs) == 3
    assert [q.get_nowait() for q in qs] == [b"model 0", b"model 1"]


def test_runs_waits_hold_a_ctrl_c_back_for_a_short_slice_only():
    """Each of run's waits on a queue is a deferred() block: a Ctrl-C taken by another thread (often
    one of onnxruntime's) is delivered only at the block's end. Slices of 0.5 s kept it that long."""
    import queue
    import time

    from placement.pipeline_run import _get

    asked = []

    class Recording:
        def get(self, block=True, timeout=None):
            asked.append(timeout)
            if len(asked) < 3:
                raise queue.Empty
            return "item"

    assert _get(Recording(), time.monotonic() + 60, []) == "item"
    assert asked and all(t is not None and t <= 0.1 for t in asked), asked


def test_exit_after_a_ctrl_c_runs_the_exit_handlers_but_not_the_teardown(tmp_path):
    """After the command took a Ctrl-C (exit 130) the console leaves without the interpreter's teardown
    (0.1-0.5 s for run on a busy machine): the exit handlers still run (multiprocessing's unlinks the
    queues' semaphores: no "leaked semaphore" warning), an object's ``__del__`` left for the teardown
    does not."""
    r = _python("""
        import atexit, multiprocessing, sys
        from placement import cli

        class Late:
            def __del__(self):  # runs in the interpreter's teardown, not in an exit handler
                print("torn down", flush=True)

        keep = Late()
        atexit.register(lambda: print("exit handler", flush=True))
        q = multiprocessing.get_context("spawn").Queue()  # its semaphores: the resource tracker's
        q.put(1)

        def interrupted(args):
            raise KeyboardInterrupt

        cli.COMMANDS["example"] = interrupted
        sys.argv = ["placement", "example", "m.onnx"]
        cli.console_main()
        """, tmp_path)
    assert r.returncode == 130, r.stderr
    assert r.stdout.splitlines() == ["exit handler"], r.stdout
    assert r.stderr.strip().splitlines() == ["error: interrupted"], r.stderr


_IN_A_CALLBACK = """
    import os, signal, weakref

    class Thing:
        pass

    def callback(ref):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100000):  # the handler runs here, inside the weakref callback
            pass
"""


def test_a_ctrl_c_in_a_weakref_callback_is_delivered_not_lost(tmp_path):
    """A KeyboardInterrupt raised in a weakref callback cannot propagate: Python printed "Exception
    ignored in: <function ...>" and dropped it. The console's handler takes it back and delivers it at
    the next safe point."""
    r = _python("from placement import _interrupt\n_interrupt.install()\n" + textwrap.dedent(_IN_A_CALLBACK)
                + textwrap.dedent("""
        import time
        thing = Thing()
        ref = weakref.ref(thing, callback)
        try:
            del thing
            time.sleep(5)
            print("lost", flush=True)
        except KeyboardInterrupt:
            print("delivered", flush=True)
        """), tmp_path)
    assert r.stdout.split() == ["delivered"], (r.stdout, r.stderr)
    assert r.stderr == "", r.stderr


def test_a_ctrl_c_as_the_commands_objects_go_ends_it_with_130_not_exception_ignored(tmp_path):
    """``run -n 10``: a Ctrl-C at its very end printed "Exception ignored in: <function WeakSet._remove
    ...>" and the command exited 0: it landed in a weakref callback as the command's objects went. Here
    an object of the command goes as it returns, its callback taking the Ctrl-C: exit 130 and ``error:
    interrupted``, no noise."""
    r = _python(textwrap.dedent(_IN_A_CALLBACK) + textwrap.dedent("""
        import sys
        from placement import cli

        def finished(args):
            thing = Thing()
            finished.ref = weakref.ref(thing, callback)  # thing goes as the command returns
            print("result", flush=True)
            return 0

        cli.COMMANDS["example"] = finished
        sys.argv = ["placement", "example", "m.onnx"]
        cli.console_main()
        """), tmp_path)
    assert r.stdout.split() == ["result"], r.stdout
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines() == ["error: interrupted"], r.stderr


def test_a_ctrl_c_after_the_command_returned_is_no_traceback(tmp_path):
    """A Ctrl-C in the console's own frames after the command (its result shown, before the exit) was
    raised there, past the command's handling: a traceback. The command is over: it ends cleanly."""
    r = _python("""
        import os, signal, sys
        from placement import cli

        def finished(args):
            print("result", flush=True)
            return 0

        main = cli.main

        def main_then_ctrl_c(*args, **kwargs):
            code = main(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100000):  # the handler runs here, the command done
                pass
            return code

        cli.COMMANDS["example"] = finished
        cli.main = main_then_ctrl_c
        sys.argv = ["placement", "example", "m.onnx"]
        cli.console_main()
        """, tmp_path)
    assert r.stdout.split() == ["result"], r.stdout
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert (r.returncode, r.stderr.strip()) in ((0, ""), (130, "error: interrupted")), r.stderr
