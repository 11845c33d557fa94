"""Every fenced block of the README and of docs/*.md is run or checked by a test, so the documentation
cannot drift from the tool (test_every_block_is_run_or_checked keeps that list complete).

Here: the shell blocks (``sh``) of the pages in PAGES run, each in a fresh folder with this checkout's
``placement``, and exit 0. The runner's conventions:

* the README's first block (install and a first placement) runs without its leading ``pip install . &&``:
  the checkout under test is what it installs. Its second, the test command, is this suite:
  tests/test_readme.py checks that CI runs it;
* a block that reads ``../shared/workloads/`` (the reference workloads beside the checkout, as the README
  says) runs in a folder beside a ``shared/workloads`` that is the tests' workloads folder
  (``$PLACEMENT_WORKLOADS``), and skips when they are absent;
* a block that runs a script of the checkout (``bash benchmarks/...``) finds ``benchmarks/`` in its
  folder; ``benchmarks/gpu_calibrate.sh`` needs onnxruntime's CUDA execution provider and skips without
  it, and test_the_gpu_block_refuses_a_machine_without_cuda then runs it to its one-line refusal;
* ``placement calibrate KIND`` running micro-benchmarks gets ``--budget 0.02 --cap 0.05`` (QUICK): its
  figures are not checked, and as typed it takes 1-2 minutes (test_calibration_blocks_as_typed, slow);
* ``placement frontier ... --time-limit S`` with S above FRONTIER_LIMIT runs with ``--time-limit``
  FRONTIER_LIMIT: the command searches until its limit whatever it is (as typed, 10 and 20 s: a fifth
  of this runner's time), and no output of it is checked; as typed, the blocks run in
  test_frontier_blocks_as_typed (slow). The frontier's stops (time limit, --max-points) are
  tests/test_frontier_cli.py's;
* an output block (``text``) in OUTPUTS is compared with what its command prints or writes: every line
  shown is printed, in that order; ``...`` stands for text left out, and in lines whose figures vary
  from run to run (timings, measured rates) a number matches any number.

Elsewhere: the README's Python blocks, tests/test_readme.py; docs/clusters.md's shell and JSON blocks,
tests/test_cluster_docs.py; docs/formats.md's JSON examples, tests/test_formats_docs.py (the first also
tests/test_split_and_sweep_options.py); the calibration messages shown as text, the tests at the end."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.instances import WORKLOADS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAGES = ["README.md", "docs/cli.md", "docs/solvers.md", "docs/serving.md", "docs/model.md",
         "docs/library.md", "docs/performance.md", "docs/calibration.md", "docs/llm_serving.md"]
README_INSTALL = "pip install . && "
QUICK = "--budget 0.02 --cap 0.05"
FRONTIER_LIMIT = 3  # seconds: a frontier line's --time-limit in the default run (see the module doc)
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"


def _read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def _fences(page: str) -> list[tuple[str, str, str]]:
    """Every fenced block of ``page``: (language, body, the last non-empty line before it)."""
    out, text = [], _read(page)
    for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", text, re.S | re.M):
        before = [line for line in text[:m.start()].splitlines() if line.strip()]
        out.append((m.group(1).strip(), m.group(2), before[-1] if before else ""))
    return out


def _blocks(page: str) -> list[tuple[int, str]]:
    """The shell blocks of ``page`` that test_shell_block_runs runs, numbered as on the page."""
    blocks = [body for lang, body, _ in _fences(page) if lang == "sh"]
    if page != "README.md":
        return list(enumerate(blocks))
    assert blocks[0].startswith(README_INSTALL), "the README's first block lost its `pip install . && `"
    return [(0, blocks[0][len(README_INSTALL):])] + list(enumerate(blocks))[2:]  # [1]: the test command


def _text_block(page: str, first: str) -> str:
    """The one ``text`` block of ``page`` whose first line starts with ``first``."""
    found = [body for lang, body, _ in _fences(page) if lang == "text" and body.startswith(first)]
    assert len(found) == 1, f"{page}: {len(found)} text blocks start with {first!r}, not one"
    return found[0]


def _quick(block: str) -> str:
    """``block`` with QUICK added to each micro-benchmark calibration (``placement calibrate KIND``
    without --from-profile, --help or a budget of its own), before a trailing comment."""
    lines = []
    for line in block.splitlines():
        cmd, hash_, comment = line.partition(" #")
        if re.match(r"placement calibrate\b", cmd) and not re.search(r"--from-profile|--help|-h\b|--budget|"
                                                                       r"--cap", cmd):
            assert not cmd.rstrip().endswith("\\"), f"continued calibrate line: give it QUICK by hand: {line}"
            line = f"{cmd.rstrip()} {QUICK}" + (f"  #{comment}" if hash_ else "")
        lines.append(line)
    return "\n".join(lines) + "\n"


def _short(block: str) -> str:
    """``block`` with each ``placement frontier`` line's ``--time-limit S`` above FRONTIER_LIMIT lowered to
    it (the module doc)."""
    def lower(m: re.Match) -> str:
        return f"--time-limit {FRONTIER_LIMIT}" if float(m.group(1)) > FRONTIER_LIMIT else m.group(0)

    return "\n".join(re.sub(r"--time-limit (\d+(?:\.\d+)?)\b", lower, line)
                     if re.match(r"placement frontier\b", line) else line
                     for line in block.splitlines()) + "\n"


def _cuda() -> bool:
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _run(block: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``block`` with bash (-euo pipefail) in a fresh folder, ``placement`` being this checkout's
    (the conventions of the module doc); returns the run and the folder."""
    bindir, cwd = tmp_path / "bin", tmp_path / "work"
    bindir.mkdir()
    cwd.mkdir()
    shim = bindir / "placement"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m placement "$@"\n')
    shim.chmod(0o755)
    if "../shared/workloads/" in block:
        if not os.path.isdir(WORKLOADS):
            pytest.skip(f"reference workloads not found at {WORKLOADS} (set PLACEMENT_WORKLOADS to their "
                        f"folder)")
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "workloads").symlink_to(os.path.abspath(WORKLOADS))
    if "benchmarks/" in block:
        (cwd / "benchmarks").symlink_to(os.path.join(ROOT, "benchmarks"))
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    return run, cwd


# ------------------------------------------------------------------------ output blocks, checked
def _pattern(shown: str, vary: bool = False) -> re.Pattern:
    """A shown line as a pattern: ``...`` (or ``…``) is any text; with ``vary``, a number any number."""
    def part(text: str) -> str:
        if not vary:
            return re.escape(text)
        pieces = re.split(f"({NUMBER})", text)
        return "".join(NUMBER if i % 2 else re.escape(p) for i, p in enumerate(pieces))
    return re.compile(".*".join(part(p) for p in re.split(r"\.\.\.|…", shown)))


def _printed(vary: str | None = None):
    """A check that every line of the output block is a line the block printed, in order (figures of
    the lines that match ``vary`` are any numbers)."""
    def check(shown: str, run: subprocess.CompletedProcess, cwd: Path) -> None:
        lines = [line.rstrip() for line in run.stdout.splitlines()]
        i = 0
        for want in shown.rstrip().splitlines():
            pattern = _pattern(want.rstrip(), vary is not None and re.search(vary, want) is not None)
            while i < len(lines) and not pattern.fullmatch(lines[i]):
                i += 1
            assert i < len(lines), f"the doc shows a line not printed (or not in this order): {want!r}\n" \
                                   f"--- printed:\n{run.stdout[-4000:]}"
            i += 1
    return check


def _helix_layout_file(shown: str, run: subprocess.CompletedProcess, cwd: Path) -> None:
    """plan.json has exactly the fields shown, and every value shown (numbers as rounded there; time_s
    varies); a number key is a node of ``layout``."""
    data = json.loads((cwd / "plan.json").read_text())
    assert set(re.findall(r'"([a-z_]+)":', shown)) == set(data)
    pairs = re.findall(r'"(\w+)": ("[^"]*"|-?[\d.]+|\[[^\]]*\])', shown)
    assert len(pairs) >= 10
    for key, value in pairs:
        got, want = (data["layout"][key] if key.isdigit() else data[key]), json.loads(value)
        if key == "time_s":
            assert isinstance(got, float) and got >= 0
        elif isinstance(want, float):
            assert round(got, len(value.split(".")[1])) == want, (key, got, value)
        else:
            assert got == want, (key, got, value)


# (page, a piece of the shell block that prints or writes it, the output block's first line, check)
OUTPUTS = [
    ("docs/llm_serving.md", "--model llama70b --out plan.json", "max-flow ", _printed(vary=r"^time ")),
    ("docs/llm_serving.md", "--model llama70b --out plan.json", '{"schema"', _helix_layout_file),
    ("docs/llm_serving.md", "--engine vllm", "replica 1:", _printed()),
    ("docs/llm_serving.md", "--engine sglang", "  prefill server:", _printed()),
    ("docs/calibration.md", "--from-profile model.onnx", "  Conv, fp32", _printed(vary="")),
]
# output blocks checked in-process by the tests at the end: (page, first line)
CHECKED_HERE = [("docs/calibration.md", "calibration disturbed:"),
                ("docs/calibration.md", "placement calibrate cpu --strict")]


# ------------------------------------------------------------------------ the runner
CASES = [(page, i, block) for page in PAGES for i, block in _blocks(page)]


def test_the_pages_have_runnable_examples():
    assert {page for page, _, _ in CASES} >= {"README.md", "docs/solvers.md", "docs/serving.md",
                                              "docs/calibration.md", "docs/llm_serving.md"}


@pytest.mark.parametrize("page, index, block", CASES, ids=[f"{p}#{i}" for p, i, _ in CASES])
def test_shell_block_runs(tmp_path, page, index, block):
    if "benchmarks/gpu_calibrate.sh" in block and not _cuda():
        pytest.skip("needs onnxruntime's CUDA execution provider (test_the_gpu_block_refuses_... runs it)")
    run, cwd = _run(_short(_quick(block)), tmp_path)
    assert run.returncode == 0, \
        f"{page} block {index} failed:\n{block}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    for p, command, first, check in OUTPUTS:
        if p == page and command in block:
            check(_text_block(page, first), run, cwd)


def test_every_output_check_has_its_command():
    for page, command, first, _ in OUTPUTS:
        assert sum(command in block for p, _, block in CASES if p == page) == 1, (page, command)
        _text_block(page, first)


def test_every_block_is_run_or_checked():
    """Each fenced block of README.md and docs/*.md: a shell block of a page the runner here (or
    tests/test_cluster_docs.py) runs, a README Python block behind a marker tests/test_readme.py looks
    for, a JSON example of docs/clusters.md or docs/formats.md, or an output block checked here."""
    with open(os.path.join(ROOT, "tests", "test_readme.py"), encoding="utf-8") as f:
        readme_test = f.read()
    text_claims = [(p, first) for p, _, first, _ in OUTPUTS] + CHECKED_HERE
    docs = sorted(n for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md"))
    pages = ["README.md"] + [f"docs/{n}" for n in docs]
    unrun, claimed = [], []
    for page in pages:
        for lang, body, before in _fences(page):
            marker = re.match(r"<!-- (readme-[\w-]+)", before)
            readme_block = page == "README.md" and marker is not None and marker.group(1) in readme_test
            claims = [first for p, first in text_claims if p == page and body.startswith(first)]
            ok = {"sh": page in PAGES or page == "docs/clusters.md",
                  "python": readme_block,
                  "json": page in ("docs/clusters.md", "docs/formats.md"),
                  "text": len(claims) == 1}.get(lang, False)
            claimed += [(page, first) for first in claims]
            if not ok:
                unrun.append(f"{page}: ```{lang} {body.splitlines()[0] if body.strip() else ''}")
    assert unrun == [], "blocks no test runs or checks:\n" + "\n".join(unrun)
    assert sorted(claimed) == sorted(text_claims)  # every claim is one block's


# ------------------------------------------------------------------------ blocks that need more
QUICKENED = [(page, i, block) for page, i, block in CASES if _quick(block) != block]


def test_the_quick_calibrations_are_the_micro_benchmark_lines():
    assert [(page, i) for page, i, _ in QUICKENED] == [("docs/calibration.md", 0)]
    changed = [line for line in _quick(QUICKENED[0][2]).splitlines() if QUICK in line]
    assert changed == [f"placement calibrate cpu -o cpu.toml {QUICK}  # micro-benchmarks, one thread (1-2 "
                       "minutes on a busy 2-core machine)"]


@pytest.mark.slow
@pytest.mark.parametrize("page, index, block", QUICKENED, ids=[f"{p}#{i}" for p, i, _ in QUICKENED])
def test_calibration_blocks_as_typed(tmp_path, page, index, block):
    run, _ = _run(block, tmp_path)
    assert run.returncode == 0, f"{page} block {index} failed:\n{block}\n{run.stderr[-2000:]}"


SHORTENED = [(page, i, block) for page, i, block in CASES if _short(block) != block]


def test_the_shortened_blocks_are_the_frontier_lines():
    """_short changes the --time-limit of the frontier lines only, nothing else of them or of the block."""
    assert [(page, i) for page, i, _ in SHORTENED] == [("docs/serving.md", 0), ("docs/serving.md", 1)]
    for _, _, block in SHORTENED:
        lines, short = block.splitlines(), _short(block).splitlines()
        assert len(lines) == len(short)
        changed = [(a, b) for a, b in zip(lines, short) if a != b]
        assert changed and all(a.startswith("placement frontier ") for a, _ in changed)
        for a, b in changed:
            assert re.sub(r"--time-limit \S+", "", a) == re.sub(r"--time-limit \S+", "", b)
            assert f"--time-limit {FRONTIER_LIMIT} " in b + " "


@pytest.mark.slow
@pytest.mark.parametrize("page, index, block", SHORTENED, ids=[f"{p}#{i}" for p, i, _ in SHORTENED])
def test_frontier_blocks_as_typed(tmp_path, page, index, block):
    """The blocks test_shell_block_runs runs with a shorter frontier --time-limit, as typed."""
    run, _ = _run(_quick(block), tmp_path)
    assert run.returncode == 0, f"{page} block {index} failed:\n{block}\n{run.stderr[-2000:]}"


def test_the_gpu_block_refuses_a_machine_without_cuda(tmp_path):
    """Without the CUDA provider the block's command line is read (script, kind and options) and refused
    in one line, writing nothing; a bad option would be argparse's usage error instead."""
    if _cuda():
        pytest.skip("onnxruntime has the CUDA provider here: test_shell_block_runs runs the block")
    [block] = [b for p, _, b in CASES if p == "docs/calibration.md" and "benchmarks/gpu_calibrate.sh" in b]
    run, cwd = _run(block, tmp_path)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1, run.stderr
    assert err[0].startswith("error: cannot calibrate 'h100'") and "CUDA" in err[0]
    assert sorted(p.name for p in cwd.iterdir()) == ["benchmarks"]


def test_the_disturbed_calibration_line_is_what_calibrate_prints(monkeypatch, tmp_path, capsys):
    """The line shown, from a calibration with its figures (load, cores, other work's cores): the bound
    it quotes is the one the tool computes from them."""
    import graphs.calibrate as gc
    from graphs.calibrate import assess
    from placement.cli import main
    from tests.test_calibrate import _cal
    from tests.test_calibrate_robust import _series

    shown = _text_block("docs/calibration.md", "calibration disturbed:").strip()
    load, cores, used = re.search(r"load ([\d.]+) on (\d+) cores.*used ([\d.]+) core", shown).groups()
    d = assess(_series(), cpus=int(cores), threads=1, clock="cpu", load_before=float(load),
               load_after=float(load), competing_before=float(used), competing_during=float(used))
    monkeypatch.setattr(gc, "calibrate", lambda *a, **k: _cal(disturbance=d))
    assert main(["calibrate", "cpu", "-o", str(tmp_path / "cpu.toml")]) == 0
    assert capsys.readouterr().err.strip() == shown


def test_the_strict_refusal_is_what_calibrate_prints(monkeypatch, tmp_path, capsys):
    """The command shown, on a machine as busy as the line says (another process on one core), refuses
    before any benchmark with the line shown (``(...)``: the reasons), exit 2, no file."""
    import graphs.calibrate as gc
    from placement.cli import main

    shown = _text_block("docs/calibration.md", "placement calibrate cpu --strict")
    command, error = shown.strip().splitlines()  # the command typed and the one line it prints
    load, cores = re.search(r"load ([\d.]+) on (\d+) cores", error).groups()
    monkeypatch.setattr(gc, "probe_machine", lambda seconds=0.5: (1.0, float(load)))
    monkeypatch.setattr(gc.os, "cpu_count", lambda: int(cores))
    monkeypatch.setattr(gc, "_Timer", None)  # a benchmark would fail loudly: none may run
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 2
    err = capsys.readouterr().err.strip()
    assert _pattern(error).fullmatch(err), f"shown: {error}\nprinted: {err}"
    assert list(tmp_path.iterdir()) == []
