import os

import pytest

from tests.instances import WORKLOADS


@pytest.fixture(scope="session")
def workloads() -> str:
    """Path of the shared reference workloads; tests that need them skip when they are absent."""
    if not os.path.isdir(os.path.join(WORKLOADS, "throughput-inputs")):
        pytest.skip(f"reference workloads not found at {WORKLOADS} (set PLACEMENT_WORKLOADS to their folder)")
    return WORKLOADS
