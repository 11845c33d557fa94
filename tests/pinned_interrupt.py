"""Send one SIGINT to ``python -m placement`` at a moment a ``sitecustomize`` module pins: the runner the
interrupt tests of the Helix layout search and of the LLM searches share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def ctrl_c_at_marker(argv: list[str], tmp_path: Path, sitecustomize: str, marker: Path, env: dict[str, str],
                     timeout: float = 60.0) -> tuple[int, str, str, float]:
    """Run ``python -m placement argv`` with ``sitecustomize`` (a module that writes ``marker`` at the
    moment it pins, ``env`` its settings) on its path; send SIGINT once ``marker`` exists. Returns the
    return code, stdout, stderr and the seconds from the signal to the end; no traceback is allowed."""
    (tmp_path / "sitecustomize.py").write_text(sitecustomize)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), **env)
    proc = subprocess.Popen([sys.executable, "-m", "placement", *argv], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + timeout
        while not marker.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.003)
        assert marker.exists(), f"the moment never came (rc {proc.poll()}): {proc.stderr.read()[-2000:]}"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    return proc.returncode, out, err, time.monotonic() - sent
