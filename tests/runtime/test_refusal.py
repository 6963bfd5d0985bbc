"""A launch the driver cannot take is refused whole: nothing left behind, nothing written.

The case: a program whose arguments do not fit a stream's ring heap (61 arguments are 488
bytes; ``RunConfig(ring_heap=256)`` is a legal config).  Its host arrays need 61 device
temporaries and 60 input copies; the driver refuses the kernel itself at submission.  The
runtime refuses it first, before anything is queued, with a PtoArgumentError naming the
limit.  A refusal the runtime does not foresee (here: that check switched off) still leaves
nothing behind: the temporaries are freed behind the copies already queued, and no output
copy runs, so the caller's output keeps what it held.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import assert_no_device_memory
from helpers.kernels import Kernel
from pypto_async._signature import IN, OUT, ParamSpec
from pypto_async._driver import lib
from pypto_async._dtypes import FP32
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._complete import service
from pypto_async.runtime._submit import submit, token
from pypto_async.testing import hold

N = 64
WIDE_INPUTS = 60  # and one output: 61 arguments, 488 bytes of launch arguments
HEAP = 256
POISON = -12345.0


def rand(n: int = N, seed: int | None = None) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def wide_kernel(kernels) -> Kernel:
    """61 parameters (60 inputs, one output) on the do-nothing kernel."""
    base = kernels.get("noop", N)
    params = tuple(ParamSpec(f"a{i}", IN, (N,), FP32) for i in range(WIDE_INPUTS))
    params += (ParamSpec("out", OUT, (N,), FP32),)
    return dataclasses.replace(base, name="wide", params=params, param_names=tuple(p.name for p in params),
                               output_indices=(WIDE_INPUTS,))


def wide_args():
    return [rand() for _ in range(WIDE_INPUTS)], np.full(N, POISON, np.float32)


def memory(w) -> tuple[int, int]:
    s = w.stats()
    return s.memory_allocations, s.memory_in_use


def config(**fields) -> RunConfig:
    return RunConfig(cores=1, copy_engines=1, device_memory=4 << 20, ring_heap=HEAP, **fields)


def assert_still_works(w, kernels) -> None:
    add = w.register(kernels.get("add", N))
    a, b, out = rand(), rand(), np.full(N, np.nan, np.float32)
    add(a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_arguments_past_the_ring_heap_are_refused_before_anything_is_queued(kernels):
    with ChipWorker(config()) as w:
        wide = w.register(wide_kernel(kernels))
        inputs, out = wide_args()
        before = memory(w)
        submitted = w.stats().commands_submitted
        for _ in range(3):
            with pytest.raises(PtoArgumentError, match=r"61 arguments \(488 bytes\).*256-byte ring heap"):
                wide(*inputs, out)
        assert memory(w) == before  # not one temporary, not until close
        assert w.stats().commands_submitted == submitted  # no input copy was queued
        np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))
        assert_still_works(w, kernels)
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_arguments_past_the_ring_heap_are_refused_behind_a_full_ring(kernels):
    # The same launch queued while its stream's ring is full (it would wait in the FIFO):
    # refused at the call, never run, never copied back into `out`.
    async with ChipWorker(config(ring_task_window=4)) as w:
        wide = w.register(wide_kernel(kernels))
        inc = w.register(kernels.get("inc", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        inputs, out = wide_args()
        before = memory(w)
        with hold(w.default_stream) as latch:
            queued = [inc(t) for _ in range(6)]
            assert w.default_stream.backlog > 0
            with pytest.raises(PtoArgumentError, match="ring heap"):
                wide(*inputs, out)
            latch.release()
        for launch in queued:
            await launch
        await w.wait()
        assert memory(w) == before
        np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))
        np.testing.assert_array_equal(await t.to_host(), np.full(N, 6, np.float32))
        t.free()
        await w.wait()
        assert_no_device_memory(w)


def test_block_count_past_the_driver_limit_is_refused(kernels):
    with ChipWorker(config()) as w:
        for blocks in (1 << 32, -1):
            h = w.register(dataclasses.replace(kernels.get("inc", N), block_num=blocks))
            with pytest.raises(PtoArgumentError, match=r"block_num.*\[1, 2\*\*32\)"):
                h(rand())
        assert memory(w) == (0, 0)
        assert_still_works(w, kernels)


# -- a refusal that only the driver sees ------------------------------------------------------------


class _Gate:
    """A host condition not met yet: work queued behind it waits in the stream's FIFO."""

    _entered = False


def unchecked(w, kernels):
    """The wide program registered with the runtime's fit check switched off."""
    h = w.register(wide_kernel(kernels))
    h._unfit = None
    return h


def test_driver_refusal_after_the_input_copies_leaves_nothing_behind(kernels):
    with ChipWorker(config()) as w:
        wide = unchecked(w, kernels)
        inputs, out = wide_args()
        before = memory(w)
        for _ in range(3):
            with pytest.raises(PtoArgumentError, match="exceed the 256-byte ring heap"):
                wide(*inputs, out)
        w.sync()  # the input copies already queued finish, then the temporaries' frees
        assert memory(w) == before
        assert w.stats().in_flight == 0
        np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))
        assert_still_works(w, kernels)
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_driver_refusal_in_the_fifo_writes_no_output(kernels):
    async with ChipWorker(config(ring_task_window=4)) as w:
        wide = unchecked(w, kernels)
        add = w.register(kernels.get("add", N))
        inputs, out = wide_args()
        before = memory(w)
        a, b, later = rand(), rand(), np.full(N, np.nan, np.float32)
        # Hold the stream on the host (as a launch waiting for device memory does): the driver
        # keeps a full ring's backlog itself and would refuse the launch at the call.
        s, gate = w.default_stream, _Gate()
        q = w._queue
        with q.lock:
            submit(q, s, lib.pto_stream_notify, (s._ptr, token(q, None)), None, 0, gate=gate)
        refused = wide(*inputs, out)  # waits in the FIFO: the driver sees it only later
        after = add(a, b, later)
        assert not refused.submitted_to_ring
        gate._entered = True
        with q.lock:
            service(q)  # what the pump does once the host condition is met
        with pytest.raises(PtoArgumentError, match="exceed the 256-byte ring heap"):
            await refused
        assert await after is later  # work queued behind it runs
        np.testing.assert_array_equal(later, a + b)
        await w.wait()
        assert memory(w) == before
        np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))
        assert_no_device_memory(w)
