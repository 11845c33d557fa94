"""The README's library example runs and prints what it says; the README keeps its two set-up commands."""

import contextlib
import io
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_readme_library_example_runs_and_its_comments_are_true():
    code = re.search(r"<!-- readme-example.*?```python\n(.*?)```", _readme(), re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    lines = buf.getvalue().splitlines()
    assert lines[0] == "optimal 7.4"
    assert lines[-1] == "9.0"
    for expected in re.findall(r"#\s*(optimal [\d.]+|[\d.]+)\s*(?:\(|$)", code, re.M):
        assert any(line.startswith(expected) or line == expected for line in lines), expected


def test_readme_has_the_two_setup_commands_and_ci_runs_the_second():
    blocks = re.findall(r"```sh\n(.*?)```", _readme(), re.S)
    install, tests = blocks[0].strip(), blocks[1].strip()
    assert install.startswith("pip install ") and "placement place" in install
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert tests in f.read()


def test_api_doctest():
    import doctest

    import placement.api

    result = doctest.testmod(placement.api)
    assert result.attempted > 0, "placement.api lost its doctest examples"
    assert result.failed == 0


def _run_block(marker: str) -> tuple[str, list[str]]:
    """Run the README's python block after ``<!-- marker`` and check every ``# expected`` comment of a
    print line against what that print printed (in order)."""
    code = re.search(rf"<!-- {marker}.*?```python\n(.*?)```", _readme(), re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    lines = buf.getvalue().splitlines()
    expected = [m.strip() for m in re.findall(r"^print\(.*\)\s*#\s*(.*)$", code, re.M)]
    assert lines == expected
    return code, lines


def test_readme_onnx_pass_pipeline_runs():
    _run_block("readme-onnx-pass")


def test_readme_torch_split_runs():
    import pytest

    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    _run_block("readme-torch")
