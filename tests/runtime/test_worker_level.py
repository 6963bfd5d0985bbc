"""PyPTO's ``runtime.Worker`` (the type of every runtime handle) and ``DistributedWorker``'s raw memory calls.

Data goes through each device's memory and back, checked byte for byte against the random host
source (the destination poisoned first); bad worker indices and addresses raise PtoArgumentError.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from conftest import SMALL
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import ChipWorker, DistributedWorker, RunConfig, Worker

CFG = RunConfig(**SMALL)


def round_trip(w: Worker, host: np.ndarray, *, worker_id: int = 0) -> np.ndarray:
    """Library code typed against Worker: malloc, copy_to, copy_from, free on any level."""
    ptr = w.malloc(host.nbytes, worker_id=worker_id)
    w.copy_to(ptr, host.ctypes.data, host.nbytes, worker_id=worker_id)
    back = np.full_like(host, np.nan)
    w.copy_from(back.ctypes.data, ptr, host.nbytes, worker_id=worker_id)
    w.free(ptr, worker_id=worker_id)
    return back


def test_both_levels_are_workers_and_worker_is_abstract():
    assert issubclass(ChipWorker, Worker) and issubclass(DistributedWorker, Worker)
    assert not issubclass(RunConfig, Worker)
    with pytest.raises(TypeError, match="abstract"):
        Worker()

    class Partial(Worker):
        def malloc(self, nbytes, *, worker_id=0):
            return 1

    with pytest.raises(TypeError, match="abstract"):
        Partial()

    class Whole(Partial):
        free = copy_to = copy_from = run = register = lambda self, *a, **k: None

    assert isinstance(Whole(), Worker) and Whole().malloc(8) == 1


def test_library_code_typed_against_worker_runs_on_either_level():
    rng = np.random.default_rng(3)
    host = rng.standard_normal((64, 32)).astype(np.float32)
    with ChipWorker(config=CFG) as w:
        assert isinstance(w, Worker)
        np.testing.assert_array_equal(round_trip(w, host), host)
        assert w.stats().memory_in_use == 0
    with DistributedWorker([0, 1], CFG) as dw:
        assert isinstance(dw, Worker)
        np.testing.assert_array_equal(round_trip(dw, host, worker_id=1), host)


def test_distributed_malloc_places_each_block_on_its_worker():
    rng = np.random.default_rng(5)
    first, second = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    with DistributedWorker([0, 1], CFG) as dw:
        ptrs = [dw.malloc(first.nbytes, worker_id=i) for i in (0, 1)]
        assert all(isinstance(p, int) and p > 0 for p in ptrs)
        dw.copy_to(ptrs[0], first.ctypes.data, first.nbytes)  # worker_id=0 by default
        dw.copy_to(ptrs[1], second.ctypes.data, second.nbytes, worker_id=1)
        for i, want in ((0, first), (1, second)):
            got = np.full_like(want, np.nan)
            dw.copy_from(got.ctypes.data, ptrs[i], want.nbytes, worker_id=i)
            np.testing.assert_array_equal(got, want)
        dw.workers[1].sync()
        assert dw.workers[1].stats().memory_in_use >= first.nbytes
        dw.free(ptrs[1], worker_id=1)
        dw.workers[1].sync()
        assert dw.workers[1].stats().memory_in_use == 0
        assert dw.workers[0].stats().memory_in_use >= first.nbytes  # worker 0's block is still there
        dw.free(ptrs[0])


def test_distributed_memory_calls_refuse_bad_indices_and_addresses():
    with DistributedWorker([0, 1], CFG) as dw:
        for bad in (2, -1, True, "0", 1.0):
            with pytest.raises(PtoArgumentError, match="worker_id must be a worker index, 0 to 1"):
                dw.malloc(64, worker_id=bad)
        with pytest.raises(PtoArgumentError, match="nbytes"):
            dw.malloc(0, worker_id=1)
        ptr = dw.malloc(256, worker_id=1)
        with pytest.raises(PtoArgumentError, match="not an address"):
            dw.free(ptr + 64, worker_id=1)  # an interior pointer
        for bad in (5, False):
            with pytest.raises(PtoArgumentError, match="worker_id"):
                dw.free(ptr, worker_id=bad)
            with pytest.raises(PtoArgumentError, match="worker_id"):
                dw.copy_from(np.zeros(64, np.float32).ctypes.data, ptr, 256, worker_id=bad)
        dw.free(ptr, worker_id=1)
        with pytest.raises(PtoArgumentError, match="freed already"):
            dw.free(ptr, worker_id=1)


def test_a_block_left_allocated_is_freed_when_the_worker_closes():
    with pytest.warns(ResourceWarning):
        with DistributedWorker([0, 1], CFG) as dw:
            dw.malloc(4096, worker_id=1)
    gc.collect()
