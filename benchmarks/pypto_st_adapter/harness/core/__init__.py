"""``harness.core``: the test-case classes and the runner (see harness.py and test_runner.py)."""

from pypto_async.runtime import RunConfig, RunResult

from harness.core.harness import (
    ALL_PLATFORM_IDS,
    ONBOARD_PLATFORM_IDS,
    ONBOARD_PLATFORMS,
    PLATFORMS,
    SIM_PLATFORM_IDS,
    SIM_PLATFORMS,
    PTOTestCase,
    ScalarSpec,
    TensorSpec,
    platform_to_backend,
)
from harness.core.test_runner import TestRunner

__all__ = [
    "ALL_PLATFORM_IDS", "ONBOARD_PLATFORM_IDS", "ONBOARD_PLATFORMS", "PLATFORMS", "SIM_PLATFORM_IDS",
    "SIM_PLATFORMS", "PTOTestCase", "TensorSpec", "ScalarSpec", "RunConfig", "RunResult", "TestRunner",
    "platform_to_backend",
]
