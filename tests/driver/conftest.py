"""Fixtures for the driver tests: a small device per test, closed and leak-checked after."""

from __future__ import annotations

import pytest

from helpers import CompletionLog, close_device, open_device
from pypto_async._driver import check, ffi, lib


@pytest.fixture
def open_dev():
    """Return a factory ``open_dev(**config) -> pto_device *``; every device is leak-checked and closed."""
    opened = []

    def _open(platform: str = "sim", *, check_leaks: bool = True, **fields):
        dev = open_device(platform, **fields)
        opened.append((dev, check_leaks))
        return dev

    yield _open
    errors = []
    for dev, check_leaks in reversed(opened):
        try:
            close_device(dev, check_leaks=check_leaks)
        except AssertionError as exc:  # close every device before reporting
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def dev(open_dev):
    """A 64 MiB sim device with 2 cores and 2 copy engines."""
    return open_dev()


@pytest.fixture
def cq(dev):
    """The completion log of `dev`."""
    return CompletionLog(dev)


@pytest.fixture
def new_stream(dev):
    """Return a factory ``new_stream(priority=0, device=dev) -> pto_stream *``."""

    def _new(priority: int = 0, device=None):
        out = ffi.new("pto_stream **")
        check(lib.pto_stream_create(device if device is not None else dev, priority, out), "pto_stream_create")
        return out[0]

    return _new


@pytest.fixture
def stream(new_stream):
    return new_stream()


@pytest.fixture
def stream2(new_stream):
    return new_stream()


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261129)
