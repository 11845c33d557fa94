"""The console command's exit (:func:`placement.cli._leave`): exit handlers and output kept, Python's
teardown of the loaded libraries skipped (0.3-0.8 s after the work, outside any --time-limit)."""

from __future__ import annotations

import subprocess
import sys


def _run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=120)


def test_the_exit_keeps_handlers_and_output_and_skips_the_teardown():
    """An object finalized at interpreter teardown stands for the libraries' teardown: with `_leave` it
    never runs, while the exit handlers (multiprocessing's children, logging, temporary folders) do, the
    output written without a newline is flushed, and the code is the command's."""
    body = """
import atexit, sys
from placement.cli import _leave

class Teardown:
    def __del__(self):
        print("teardown ran", flush=True)

keep = Teardown()
atexit.register(lambda: print("handler ran"))
sys.stdout.write("partial line")
sys.stderr.write("on stderr")
_leave(3)
"""
    proc = _run(body)
    assert proc.returncode == 3
    assert "partial line" in proc.stdout and "handler ran" in proc.stdout
    assert "teardown ran" not in proc.stdout and proc.stderr == "on stderr"
    # the same program leaving the ordinary way does pay for the teardown
    ordinary = _run(body.replace("_leave(3)", "sys.exit(3)"))
    assert ordinary.returncode == 3 and "teardown ran" in ordinary.stdout


def test_the_exit_waits_for_a_thread_that_still_runs(tmp_path):
    """A thread other than a daemon still running (none of the commands leaves one) gets the normal
    exit, which waits for it: its file is written."""
    done = tmp_path / "done.txt"
    body = f"""
import threading, time
from placement.cli import _leave

def work():
    time.sleep(0.5)
    open({str(done)!r}, "w").write("written")

threading.Thread(target=work).start()
_leave(0)
"""
    proc = _run(body)
    assert proc.returncode == 0, proc.stderr
    assert done.read_text() == "written"


def test_a_closed_pipe_at_the_exit_is_not_a_traceback():
    """`placement ... | head -1`: the reader gone before the exit's flush, the flush fails; the exit code
    stands and nothing is printed about it. (The child holds its output in its buffer until the parent
    has closed the pipe, then leaves.)"""
    body = """
import sys
from placement.cli import _leave
sys.stdout.write("x" * 100)
sys.stderr.write("ready\\n")
sys.stdin.read()
_leave(0)
"""
    proc = subprocess.Popen([sys.executable, "-c", body], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stderr.readline() == b"ready\n"
    proc.stdout.close()
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == "", err
