"""Session fixtures shared by tests/ir and tests/language.

``kernel_cache`` (autouse) points ``PYPTO_ASYNC_CACHE_DIR`` at a fresh
directory for the session, so no test reads or writes the user's cache.
``launcher`` is one sim device (2 cores) for the session.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.launcher import Launcher

__all__ = ["kernel_cache", "launcher", "rng", "poison"]


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("kernel-cache")
        mp.setenv("PYPTO_ASYNC_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def launcher():
    lx = Launcher(cores=2)
    yield lx
    lx.close()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def poison(shape, dtype=np.float32) -> np.ndarray:
    """Return an output array filled with NaN (floats) or 0xAB bytes (others)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dtype=dt)
    return np.frombuffer(b"\xab" * (int(np.prod(shape)) * dt.itemsize), dtype=dt).reshape(shape).copy()
