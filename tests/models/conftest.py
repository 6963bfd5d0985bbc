"""Fixtures for the model tests: the session kernel cache, a sim launcher, an rng (tests/helpers/ir_fixtures)."""

from helpers.ir_fixtures import kernel_cache, launcher, rng  # noqa: F401
