"""The ``harness`` package PyPTO's system tests import, over pypto_async's public API (see core/harness.py)."""

from pypto_async.runtime import RunConfig, RunResult

from harness.core.harness import DataType, PTOTestCase, TensorSpec
from harness.core.test_runner import TestRunner, TestSuite

__all__ = ["PTOTestCase", "TensorSpec", "RunConfig", "RunResult", "DataType", "TestRunner", "TestSuite"]
