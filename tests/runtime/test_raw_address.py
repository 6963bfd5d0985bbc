"""A copy by raw device address finds its DeviceTensor through an ordered index, not a scan."""

from __future__ import annotations

import threading
import time

import numpy as np

from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import hold

from conftest import SMALL


class _NoScan:
    """Stands in for the worker's set of live tensors: membership only, never iterated."""

    def __init__(self, inner):
        self.inner = inner

    def __contains__(self, t):
        return t in self.inner

    def __iter__(self):
        raise AssertionError("a raw-address copy scanned every live tensor")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_raw_address_copy_is_ordered_as_its_tensor_without_scanning_the_live_ones(kernels):
    n = 256
    with ChipWorker(RunConfig(**SMALL)) as w:
        scale = w.register(kernels.get("scale", n))
        s1, s2 = w.stream(), w.stream()
        rng = np.random.default_rng(5)
        others = [w.alloc_tensor(n, np.float32, stream=s1) for _ in range(50)]
        x = rng.standard_normal(n).astype(np.float32)
        src = w.alloc_tensor(n, np.float32, init=x, stream=s1)
        a = w.alloc_tensor(n, np.float32, init=np.full(n, np.nan, np.float32), stream=s1)
        mem = w._memory
        assert mem.tensor_at(a.data_ptr + 4 * 100) is a and mem.tensor_at(others[7].data_ptr) is others[7]
        mem.tensors = _NoScan(mem.tensors)
        errors = []

        def copy_back_half():
            try:  # the back half of a, by address, on another stream: waits for the write on s1
                w.copy_from(out, a.data_ptr + 4 * (n // 2), out.nbytes, stream=s2)
            except Exception as exc:  # reported below
                errors.append(exc)

        try:
            out = np.full(n // 2, np.nan, np.float32)
            with hold(s1) as latch:
                scale.submit(src, 2.0, a, stream=s1)
                th = threading.Thread(target=copy_back_half)
                th.start()
                while th.is_alive() and s2.query():  # until its wait and copy are queued on s2
                    time.sleep(0.001)
                latch.release()
                th.join()
        finally:
            mem.tensors = mem.tensors.inner
        assert errors == []
        np.testing.assert_allclose(out, 2 * x[n // 2:], rtol=1e-6)
        for t in (*others, src, a):
            t.free()
        assert mem.tensor_at(a.data_ptr) is None  # freed
