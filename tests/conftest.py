import os

import pytest

from tests.instances import WORKLOADS


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
