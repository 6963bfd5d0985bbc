"""DeviceTensor: allocation, data, stream-ordered frees, lifetime (runtime/_tensor.py)."""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

from conftest import mem_stats
from pypto_async._dtypes import BF16, FP32, INT32
from pypto_async.errors import (
    PtoArgumentError,
    PtoKernelFault,
    PtoDependencyError,
    PtoClosedError,
    PtoCopyFault,
    PtoForeignTensorError,
    PtoInvalidStateError,
    PtoOutOfMemory,
    PtoTensorFreedError,
)
from pypto_async.runtime import ChipWorker, DeviceTensor
from pypto_async.testing import fail_next, hold

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def test_device_tensor_init_disabled():
    with pytest.raises(TypeError, match=r"alloc_tensor\(\)"):
        DeviceTensor()


def test_alloc_describes_the_tensor(worker):
    t = worker.alloc_tensor((4, 8), np.float32)
    assert t.shape == (4, 8) and t.dtype is FP32 and t.nbytes == 128 and t.size == 32
    assert isinstance(t.data_ptr, int) and t.data_ptr > 0
    assert t.worker is worker and t.stream is worker.default_stream and not t.freed
    assert "shape=(4, 8)" in repr(t)
    t.free()
    assert t.freed and "freed" in repr(t)


@pytest.mark.parametrize("dtype", [np.float32, np.dtype("float32"), "float32", FP32, "torch"])
def test_dtype_spellings(worker, dtype):
    if dtype == "torch":
        dtype = pytest.importorskip("torch").float32
    t = worker.alloc_tensor(N, dtype)
    assert t.dtype is FP32
    t.free()


def test_init_round_trip(worker):
    x = np.random.default_rng().integers(-1000, 1000, size=(3, 5)).astype(np.int32)
    t = worker.alloc_tensor((3, 5), np.int32, init=x)
    assert t.dtype is INT32
    x_copy = x.copy()
    x[:] = 0  # sync mode: the initial copy completed before alloc_tensor returned
    np.testing.assert_array_equal(t.numpy(), x_copy)
    host = np.zeros((3, 5), np.int32)
    worker.copy_from(host, t.data_ptr, t.nbytes)  # the seed's way of reading a DeviceTensor
    np.testing.assert_array_equal(host, x_copy)
    t.free()


def test_init_is_checked(worker):
    with pytest.raises(PtoArgumentError, match=r"shape \(3,\) does not match"):
        worker.alloc_tensor(4, np.float32, init=np.zeros(3, np.float32))
    with pytest.raises(PtoArgumentError, match="dtype float64 does not match"):
        worker.alloc_tensor(4, np.float32, init=np.zeros(4, np.float64))
    with pytest.raises(PtoArgumentError, match="shape"):
        worker.alloc_tensor((2, -1), np.float32)
    with pytest.raises(PtoArgumentError, match="unsupported dtype"):
        worker.alloc_tensor(4, np.complex64)
    assert mem_stats(worker).allocations == 0


def test_out_of_device_memory(worker):
    with pytest.raises(PtoOutOfMemory):
        worker.alloc_tensor(1 << 30, np.uint8)
    t = worker.alloc_tensor(N, np.float32)  # the worker goes on
    t.free()


@pytest.mark.anyio
async def test_to_host_and_copy_directions(config):
    async with ChipWorker(config) as w:
        x, y = rand(), rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        x[:] = 0  # async mode: init was copied first, so this does not race the device copy
        u = w.alloc_tensor(N, np.float32)
        assert await w.copy(u, t) is u  # device to device
        np.testing.assert_array_equal(await u.to_host(), await t.to_host())
        await w.copy(t, y)  # host to device
        out = np.zeros(N, np.float32)
        assert await w.copy(out, t) is out  # device to host
        np.testing.assert_array_equal(out, y)
        with pytest.raises(PtoArgumentError, match="must be a DeviceTensor"):
            w.copy(out, y)
        with pytest.raises(PtoArgumentError, match="sizes differ"):
            w.copy(np.zeros(N + 1, np.float32), t)
        t.free()
        u.free()


def _bf16_reference(shape):
    """Random bfloat16 values: torch's bits (uint16) and their float32 values."""
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(np.random.default_rng().standard_normal(shape).astype(np.float32) * 100)
    b = x.to(torch.bfloat16)
    return b, b.view(torch.uint16).numpy().copy(), b.float().numpy()


def test_bfloat16_round_trips_as_uint16_storage(worker):
    torch = pytest.importorskip("torch")
    b, bits, values = _bf16_reference((6, 40))
    t = worker.alloc_tensor((6, 40), BF16, init=bits)  # uint16 storage in
    got = t.numpy()
    assert got.dtype == np.uint16 and got.shape == (6, 40)
    np.testing.assert_array_equal(got, bits)
    np.testing.assert_array_equal(np.asarray(t, np.float32), values)  # the values, not the bit patterns
    b2, bits2, _ = _bf16_reference((6, 40))
    worker.copy(t, bits2)  # and back in through copy()
    np.testing.assert_array_equal(t.numpy(), bits2)
    worker.copy(t, b)  # a torch bfloat16 tensor in, and out
    out = torch.full((6, 40), float("nan"), dtype=torch.bfloat16)
    worker.copy(out, t)
    assert torch.equal(out.view(torch.uint16), b.view(torch.uint16))
    with pytest.raises(PtoArgumentError, match="dtypes differ"):
        worker.copy(np.zeros((6, 40), np.float16), t)
    t.free()


@pytest.mark.anyio
async def test_bfloat16_to_host(config):
    _, bits, _ = _bf16_reference(N)
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, "bfloat16", init=bits)
        got = await t.to_host()
        assert got.dtype == np.uint16
        np.testing.assert_array_equal(got, bits)
        t.free()


def test_asarray_copies_in_sync_mode(worker):
    x = rand().reshape(8, 8)
    t = worker.alloc_tensor((8, 8), np.float32, init=x)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (8, 8)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(np.array(t, dtype=np.float64), x.astype(np.float64))
    np.testing.assert_array_equal(np.add(t, 1), x + 1)
    with pytest.raises(ValueError, match="always copies"):  # numpy 2's contract for copy=False
        np.asarray(t, copy=False)
    t.free()


@pytest.mark.anyio
async def test_asarray_refuses_in_async_mode(config):
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32, init=rand())
        with pytest.raises(PtoInvalidStateError, match=r"await t\.to_host\(\)"):
            np.asarray(t)
        t.free()


@pytest.mark.parametrize("shape", [(), 0, (0,), (4, 0), (0, 4), [], (2, -3)])
def test_shapes_are_non_empty_and_positive(worker, shape):
    with pytest.raises(PtoArgumentError, match=r"alloc_tensor\(\): shape must be a non-empty tuple of ints > 0, "
                                               rf"not {re.escape(repr(shape))}"):
        worker.alloc_tensor(shape, np.float32)
    assert mem_stats(worker).allocations == 0


def test_copy_from_and_copy_to_name_a_buffer_they_cannot_use(worker):
    x = rand()
    t = worker.alloc_tensor(N, np.float32)
    worker.copy_to(t.data_ptr, x.tobytes(), t.nbytes)  # bytes are a fine source
    with pytest.raises(PtoArgumentError, match=r"copy_from\(host_ptr=...\): the bytes is read-only"):
        worker.copy_from(bytes(t.nbytes), t.data_ptr, t.nbytes)
    strided = memoryview(bytearray(2 * t.nbytes))[::2]
    with pytest.raises(PtoArgumentError, match=r"copy_from\(host_ptr=...\): the memoryview is not C-contiguous"):
        worker.copy_from(strided, t.data_ptr, t.nbytes)
    with pytest.raises(PtoArgumentError, match=r"copy_to\(host_ptr=...\): the memoryview is not C-contiguous"):
        worker.copy_to(t.data_ptr, strided, t.nbytes)
    buf = bytearray(t.nbytes)
    worker.copy_from(memoryview(buf), t.data_ptr, t.nbytes)
    np.testing.assert_array_equal(np.frombuffer(buf, np.float32), x)
    t.free()


def test_copy_to_and_copy_from_raw_addresses(worker):
    x = rand()
    t = worker.alloc_tensor(N, np.float32)
    worker.copy_to(t.data_ptr, x, t.nbytes)
    buf = bytearray(t.nbytes)
    worker.copy_from(buf, t.data_ptr, t.nbytes)
    np.testing.assert_array_equal(np.frombuffer(buf, np.float32), x)
    out = np.zeros(N, np.float32)
    worker.copy_from(out.ctypes.data, t.data_ptr, t.nbytes)  # an int host address
    np.testing.assert_array_equal(out, x)
    with pytest.raises(PtoArgumentError, match="fewer than nbytes"):
        worker.copy_from(bytearray(4), t.data_ptr, t.nbytes)
    with pytest.raises(PtoArgumentError, match="nbytes"):
        worker.copy_from(buf, t.data_ptr, 0)
    t.free()


def test_free_is_checked(worker, config):
    t = worker.alloc_tensor(N, np.float32)
    worker.free_tensor(t)
    with pytest.raises(PtoTensorFreedError, match="freed already"):
        t.free()
    t.close()  # idempotent
    with ChipWorker(config) as other:
        u = other.alloc_tensor(N, np.float32)
        with pytest.raises(PtoForeignTensorError):
            worker.free_tensor(u)
        with pytest.raises(PtoForeignTensorError):
            worker.copy(u, np.zeros(N, np.float32))
        u.free()
    with worker.alloc_tensor(N, np.float32) as v:
        pass
    assert v.freed


def test_free_on_one_stream_waits_for_the_others(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    a, b = worker.stream(), worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=a)
    inc(t, stream=a)
    address = t.data_ptr
    with hold(b) as latch:
        still_reading = inc.submit(t, stream=b)
        t.free()  # on a, its deallocation stream
        # Until b's use completed, no allocation on any stream may get the block back.
        others = [worker.alloc_tensor(N, np.float32, stream=s)
                  for s in (a, a, b, worker.default_stream)]
        assert address not in {o.data_ptr for o in others}
        assert not still_reading.done()
        latch.release()
        still_reading.sync(timeout=10)
    for o in others:
        o.free()
    a.close()
    b.close()


@pytest.mark.anyio
async def test_first_use_on_another_stream_waits_for_the_allocation(config, kernels):
    async with ChipWorker(config) as w:
        copy = w.register(kernels.get("copy", N))
        a, b = w.stream(), w.stream()
        x = rand()
        out = np.full(N, np.nan, np.float32)
        with hold(a) as latch:
            t = w.alloc_tensor(N, np.float32, init=x, stream=a)  # the copy waits behind the latch
            launch = copy(t, out, stream=b)
            assert not b.record().query()  # b waits for a's initial copy
            latch.release()
            await launch
        np.testing.assert_array_equal(out, x)
        t.free()
        a.close()
        b.close()


def test_tensor_collected_while_a_launch_reads_it_is_freed_behind_the_launch(worker, kernels):
    # A launch does not keep its DeviceTensor arguments alive: a tensor dropped while the
    # launch is in flight is freed in stream order, behind every stream that used it.
    copy = worker.register(kernels.get("copy", N))
    a, b = worker.stream(), worker.stream()
    x = rand()
    t = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    out = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32), stream=b)
    address = t.data_ptr
    with hold(b) as latch:
        reading = copy.submit(t, out, stream=b)
        del t
        gc.collect()
        others = [worker.alloc_tensor(N, np.float32, stream=s) for s in (a, a, b, worker.default_stream)]
        assert address not in {o.data_ptr for o in others}
        latch.release()
        assert reading.sync(timeout=10) is out
    np.testing.assert_array_equal(out.numpy(), x)
    for o in (*others, out):
        o.free()
    a.close()
    b.close()


def test_collected_tensor_is_freed(worker):
    before = mem_stats(worker).allocations
    t = worker.alloc_tensor(N, np.float32)
    assert mem_stats(worker).allocations == before + 1
    del t
    gc.collect()
    worker.default_stream.sync(timeout=10)
    assert mem_stats(worker).allocations == before


@pytest.mark.anyio
async def test_collected_tensor_is_freed_in_async_mode(config):
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32)
        del t
        gc.collect()
        await w.default_stream
        await w.default_stream
        assert mem_stats(w).allocations == 0


def test_close_frees_forgotten_tensors_with_a_warning(config):
    w = ChipWorker(config)
    t = w.alloc_tensor((2, 3), np.float32)
    with pytest.warns(ResourceWarning, match=r"shape=\(2, 3\).*never freed"):
        w.close()
    assert t.freed
    with pytest.raises(PtoClosedError):
        t.free()


@pytest.mark.anyio
async def test_a_failed_initial_copy_is_reported_by_every_use(config, kernels):
    async with ChipWorker(config) as w:
        scratch = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        fail = w.register(kernels.get("fail", N))
        with hold(w.default_stream) as latch:  # however fast the device, both are queued first
            failed = fail(scratch)
            t = w.alloc_tensor(N, np.float32, init=np.full(N, 5.0, np.float32))  # behind the fault
            latch.release()
        with pytest.raises(PtoKernelFault):
            await failed
        await w.default_stream
        copy = w.register(kernels.get("copy", N))
        for _ in range(2):  # sticky: the tensor never held its initial values
            with pytest.raises(PtoDependencyError, match="initial copy failed"):
                copy(t, np.zeros(N, np.float32))
        with pytest.raises(PtoDependencyError, match="initial copy failed"):
            await t.to_host()
        # A full overwrite makes it good again.
        await w.copy(t, np.full(N, 7.0, np.float32))
        out = np.zeros(N, np.float32)
        await copy(t, out)
        np.testing.assert_array_equal(out, np.full(N, 7.0, np.float32))
        t.free()
        scratch.free()


def test_a_failed_initial_copy_in_sync_mode_raises_and_frees(worker):
    fail_next(worker.default_stream)  # the initial copy fails on the device
    with pytest.raises(PtoCopyFault):
        worker.alloc_tensor(N, np.float32, init=np.random.default_rng().standard_normal(N).astype(np.float32))
    worker.sync(timeout=10)
    assert (mem_stats(worker).allocations, mem_stats(worker).pending_frees) == (0, 0)
    x = np.random.default_rng().standard_normal(N).astype(np.float32)
    t = worker.alloc_tensor(N, np.float32, init=x)  # the stream recovered
    np.testing.assert_array_equal(t.numpy(), x)
    t.free()


def test_tensor_allocated_behind_an_unrelated_failure_is_usable_elsewhere(worker, kernels):
    # No initial copy: the allocation point stands for no result, so a failure queued
    # before it on its stream must not fail the tensor's first use on another stream.
    a, b = worker.stream(), worker.stream()
    scratch = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=a)
    fail = worker.register(kernels.get("fail", N))
    with hold(a) as latch:
        failed = fail.submit(scratch, stream=a)
        t = worker.alloc_tensor(N, np.float32, stream=a)  # behind the failing launch
        latch.release()
    with pytest.raises(PtoKernelFault):
        failed.sync(timeout=10)
    x = rand()
    worker.copy(t, x, stream=b).sync(timeout=10)  # t's first use on b joins its allocation
    out = np.full(N, np.nan, np.float32)
    worker.copy(out, t, stream=b).sync(timeout=10)
    np.testing.assert_array_equal(out, x)
    for tensor in (t, scratch):
        tensor.free()
    a.close()
    b.close()


def test_first_use_elsewhere_does_not_wait_for_later_work_on_the_allocation_stream(worker, kernels):
    copy = worker.register(kernels.get("copy", N))
    a, b = worker.stream(), worker.stream()
    x = rand()
    t = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    out = np.full(N, np.nan, np.float32)
    with hold(a):  # unrelated later work on a is held
        copy(t, out, stream=b)  # sync mode: returns once complete, so b did not wait for the latch
        np.testing.assert_array_equal(out, x)
    t.free()
    a.close()
    b.close()


@pytest.mark.parametrize("how", ["free", "drop", "free after closing the user"])
def test_a_free_orders_behind_another_stream_without_taking_its_failure(worker, kernels, how):
    # b reads t and fails (its fault still unobserved) when t is freed on a: the free waits for
    # b's use, but it is an ordering, not a result, so work queued on a afterwards runs.
    inc = worker.register(kernels.get("inc", N))
    fail = worker.register(kernels.get("fail", N))
    a, b = worker.stream(), worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=rand(), stream=a)
    x = rand()
    u = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    address = t.data_ptr
    with hold(b) as latch:
        failing = fail.submit(t, stream=b)  # t's first use on b, held
        if how == "free after closing the user":
            b.close()
        if how == "drop":
            del t
            gc.collect()  # freed in stream order, on a
        else:
            t.free()  # on a, its deallocation stream
        unrelated = inc.submit(u, stream=a)  # ordered behind the free's wait for b
        # Until b's use completed, no allocation on any stream may get the block back.
        others = [worker.alloc_tensor(N, np.float32, stream=s)
                  for s in (a, a, worker.default_stream)]
        assert address not in {o.data_ptr for o in others}
        assert not unrelated.done() and not a.query()
        latch.release()
        with pytest.raises(PtoKernelFault):
            failing.sync(timeout=10)
        assert unrelated.sync(timeout=10) is u
    np.testing.assert_array_equal(u.numpy(), x + 1)
    for o in (*others, u):
        o.free()
    a.close()
    b.close()


def test_fail_next_passes_an_allocation_point_by(worker):
    # An allocation without init queues only an ordering point on its stream (for first uses
    # elsewhere).  It is not a command you queued: an injected fault hits your next command,
    # not that point, so the tensor stays usable on other streams.
    a, b = worker.stream(), worker.stream()
    u = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=a)
    fail_next(a)
    t = worker.alloc_tensor(N, np.float32, stream=a)
    with pytest.raises(PtoCopyFault):
        worker.copy(u, rand(), stream=a)  # the next command you queue on a
    x = rand()
    worker.copy(t, x, stream=b)  # t's first use on b joins its allocation point
    np.testing.assert_array_equal(t.numpy(stream=b), x)
    for tensor in (t, u):
        tensor.free()
    a.close()
    b.close()


def test_fail_next_passes_the_join_of_a_free_by(worker, kernels):
    # Freeing t on a joins b, the other user, through an ordering point on b: an injected
    # fault armed on b hits the next command queued there, and the free's stream stays healthy.
    inc = worker.register(kernels.get("inc", N))
    a, b = worker.stream(), worker.stream()
    t = worker.alloc_tensor(N, np.float32, init=rand(), stream=a)
    x = rand()
    u = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    v = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32), stream=b)
    inc(t, stream=b)
    fail_next(b)
    t.free()  # on a
    inc(u, stream=a)
    with pytest.raises(PtoCopyFault):
        worker.copy(v, rand(), stream=b)
    np.testing.assert_array_equal(u.numpy(stream=a), x + 1)
    for tensor in (u, v):
        tensor.free()
    a.close()
    b.close()
