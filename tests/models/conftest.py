"""Fixtures for the model tests: the session kernel cache, a sim launcher, an rng (tests/helpers/ir_fixtures).

Set ``PYPTO_ASYNC_LONG=1`` for the real-shape model runs (minutes each on two CPUs), as for the
reliability suite's long profiles; the slow tier runs the same programs at small shapes.
"""

import os

import pytest

from helpers.ir_fixtures import kernel_cache, launcher, rng  # noqa: F401

LONG = os.environ.get("PYPTO_ASYNC_LONG", "") not in ("", "0")
long_profile = pytest.mark.skipif(not LONG, reason="a real-shape model run: set PYPTO_ASYNC_LONG=1")
