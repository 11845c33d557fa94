import os
import sys
import tempfile

# Where the environment asks for no bytecode (PYTHONDONTWRITEBYTECODE), every module of the project and
# of the tests was compiled from source again in this process and in each command a test starts (about
# 0.2 s each, 8 s of collecting): the test run keeps its bytecode under a folder of its own, outside the
# checkout, instead. Set before the imports below, and passed on to the commands the tests start.
if sys.dont_write_bytecode:
    _PYCACHE = os.path.join(tempfile.gettempdir(), f"placement-tests-pycache-{os.getuid()}"
                            if hasattr(os, "getuid") else "placement-tests-pycache")
    sys.pycache_prefix, sys.dont_write_bytecode = _PYCACHE, False
    os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest  # noqa: E402

from tests.instances import WORKLOADS  # noqa: E402


@pytest.fixture(scope="session")
def workloads() -> str:
    """Path of the shared reference workloads; tests that need them skip when they are absent."""
    if not os.path.isdir(os.path.join(WORKLOADS, "throughput-inputs")):
        pytest.skip(f"reference workloads not found at {WORKLOADS} (set PLACEMENT_WORKLOADS to their folder)")
    return WORKLOADS


@pytest.fixture(scope="session")
def example_onnx(tmp_path_factory) -> str:
    """A 2-layer BERT-style encoder the tool writes (``placement example model.onnx --layers 2``)."""
    pytest.importorskip("onnx")
    from placement.cli import main

    path = str(tmp_path_factory.mktemp("example") / "model.onnx")
    assert main(["example", path, "--layers", "2"]) == 0
    return path


@pytest.fixture(scope="session")
def gpt2_4l_onnx(tmp_path_factory) -> str:
    """A 4-layer GPT-2-style ``torch.onnx`` export with a symbolic batch (tests/test_frontier_cli.py and
    tests/test_frontier_interrupt.py run it; exported once)."""
    pytest.importorskip("torch")
    from tests.torch_models import export_onnx, gpt2, tokens

    path = tmp_path_factory.mktemp("gpt2") / "gpt2_4l.onnx"
    return export_onnx(gpt2(layers=4, hidden=64, heads=4, vocab=128, positions=32), path, tokens(1, 16, 128))


@pytest.fixture(scope="session")
def llama_4l_onnx(tmp_path_factory) -> str:
    """A 4-layer Llama-style ``torch.onnx`` export with a symbolic batch: 13,719 DP ideals (its shape
    arithmetic folded by the front end), and the DP over every allocation of a100:2,t4:2 takes about
    45 s on a CPU of the CI's kind (tests/test_frontier_cli.py and tests/test_frontier_interrupt.py run
    it; exported once)."""
    pytest.importorskip("torch")
    from tests.torch_models import export_onnx, llama, tokens

    path = tmp_path_factory.mktemp("llama") / "llama_4l.onnx"
    return export_onnx(llama(layers=4, hidden=64, heads=4, kv_heads=2, ffn=128), path, tokens(1, 16, 256))
