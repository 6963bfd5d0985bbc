"""Peer copies and collectives are accesses like any other: ordered for you, and seen by the sanitizer.

A peer copy writes its destination and reads its source; a collective reads
each rank's shard of its source and writes its shard of the result.  A later
use of those tensors on another stream of their worker, one that never used
them before included, is ordered after that work (automatic ordering), or
raises :class:`~pypto_async.errors.PtoRaceError` under
``RunConfig(auto_deps=False, sanitize="raise")``.

The race is made deterministic with a latch: the stream that runs the copy
(or a rank of the collective) is held, the use is queued on a new stream of
the same worker while another stream of that worker runs freely, and the
value at the end could only come out with the ordering (without it the use
reads, or overwrites, the bytes from before the copy).
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from conftest import SMALL
from pypto_async.errors import PtoRaceError
from pypto_async.runtime import ChipWorker, DistributedWorker, RunConfig
from pypto_async.testing import hold

N = 4096
SANITIZED = {"auto_deps": False, "sanitize": "raise"}

pytestmark = pytest.mark.anyio


def rand(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def poison(shape) -> np.ndarray:
    return np.full(shape, -7777, np.float32)


async def held_back(launch, grace: float = 0.25) -> bool:
    """True if `launch` does not complete within `grace` seconds (it must not: what it waits for is held).

    Passing never depends on the grace: a launch ordered behind a held latch
    cannot complete.  The grace only gives a launch that wrongly runs at once
    the time to finish, so that the test sees it.
    """
    with anyio.move_on_after(grace):
        await launch
    return not launch.done()


def workers(**extra):
    return ChipWorker(RunConfig(device_id=0, **SMALL, **extra)), ChipWorker(RunConfig(device_id=1, **SMALL, **extra))


# -- a peer copy on a stream of the destination's worker ---------------------------------------


@pytest.mark.parametrize("reader", ["copy to host", "kernel"])
@pytest.mark.parametrize("known", [False, True], ids=["new streams", "streams that used it"])
async def test_a_use_of_the_destination_on_another_stream_waits_for_the_copy(kernels, reader, known):
    # New streams: the regression (they joined tb's allocation, before the copy).  Streams that
    # used tb before: the driver orders them with their launch (pto_stream_launch_ordered), where they
    # used to wait for the copy at once.
    x = rand(N)
    a, b = workers()
    async with a, b:
        inc = b.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32, init=poison(N))
        copier, later = b.stream(), b.stream()
        if known:
            scratch = poison(N)
            await b.copy(scratch, tb, stream=copier)
            await b.copy(scratch, tb, stream=later)
        await b.default_stream.record()  # tb's initial copy is over: only the peer copy is pending
        out = poison(N)
        with hold(copier) as latch:
            copy = a.copy(tb, ta, stream=copier)  # held on b's stream
            use = b.copy(out, tb, stream=later) if reader == "copy to host" else inc(tb, stream=later)
            await b.stream().record()  # b's device goes on meanwhile
            assert not use.done()
            latch.release()
            await copy
            await use
        if reader == "copy to host":
            np.testing.assert_array_equal(out, x)  # without the wait: the poison
        else:
            np.testing.assert_array_equal(await tb.to_host(), x + 1)  # without it: x, the copy last
        ta.free()
        tb.free()


async def test_a_first_use_of_the_destination_unordered_is_a_race_for_the_sanitizer():
    x = rand(N)
    a, b = workers(**SANITIZED)
    async with a, b:
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32, init=poison(N))
        await b.default_stream.record()
        copier, later = b.stream(), b.stream()
        out = poison(N)
        with hold(copier) as latch:
            copy = a.copy(tb, ta, stream=copier)
            with pytest.raises(PtoRaceError, match="copy peer"):
                b.copy(out, tb, stream=later)
            latch.release()
            await copy
        np.testing.assert_array_equal(out, poison(N))  # refused before anything was queued
        later.wait(copy)  # ordered by hand, it is no race
        await b.copy(out, tb, stream=later)
        np.testing.assert_array_equal(out, x)
        ta.free()
        tb.free()


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
async def test_a_first_write_of_the_source_on_a_new_stream_waits_for_a_copy_on_its_worker(kernels):
    # Write after read: the copy runs on a stream of the source's worker and reads ta there.
    x = rand(N)
    a, b = workers()
    async with a, b:
        inc = a.register(kernels.get("inc", N))
        ta = a.alloc_tensor(N, np.float32, init=x)
        tb = b.alloc_tensor(N, np.float32, init=poison(N))
        await a.default_stream.record()
        copier, later = a.stream(), a.stream()
        with hold(copier) as latch:
            copy = a.copy(tb, ta, stream=copier)
            overwrite = inc(ta, stream=later)
            assert await held_back(overwrite)
            latch.release()
            await copy
            await overwrite
        np.testing.assert_array_equal(await tb.to_host(), x)  # the copy read ta before the overwrite
        np.testing.assert_array_equal(await ta.to_host(), x + 1)
        ta.free()
        tb.free()


# -- collectives ------------------------------------------------------------------------------


def stacked_inputs(seed=0):
    return rand((3, N), seed)


@pytest.mark.parametrize("place", ["out", "in place"])
async def test_a_first_use_of_all_reduces_result_on_a_new_stream_waits_for_it(place):
    x = stacked_inputs()
    async with DistributedWorker([0, 1, 2], RunConfig(**SMALL)) as dw:
        t = dw.alloc_stacked_tensor(x)
        o = dw.alloc_stacked_tensor(poison(x.shape)) if place == "out" else t
        w1 = dw.workers[1]
        await w1.default_stream.record()
        later = w1.stream()
        out = poison(N)
        with hold(w1.default_stream) as latch:  # rank 1's part of the collective is held
            done = dw.all_reduce(t, out=o if place == "out" else None)
            read = w1.copy(out, o[1], stream=later)
            await w1.stream().record()
            assert not read.done()
            latch.release()
            await done
            await read
        np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-5, atol=1e-5)
        dw.free_stacked_tensor(t)
        if o is not t:
            dw.free_stacked_tensor(o)


async def test_a_first_use_of_all_reduces_out_unordered_is_a_race_for_the_sanitizer():
    x = stacked_inputs()
    async with DistributedWorker([0, 1, 2], RunConfig(**SMALL, **SANITIZED)) as dw:
        t = dw.alloc_stacked_tensor(x)
        o = dw.alloc_stacked_tensor(poison(x.shape))
        for w in dw.workers:
            await w.default_stream.record()
        w1 = dw.workers[1]
        later = w1.stream()
        out = poison(N)
        with hold(w1.default_stream) as latch:
            done = dw.all_reduce(t, out=o)
            with pytest.raises(PtoRaceError, match="all_reduce"):
                w1.copy(out, o[1], stream=later)
            latch.release()
            await done
        np.testing.assert_array_equal(out, poison(N))
        await w1.copy(out, o[1], stream=later)  # the collective completed: no race any more
        np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-5, atol=1e-5)
        dw.free_stacked_tensor(t)
        dw.free_stacked_tensor(o)


@pytest.mark.parametrize("sanitized", [False, True])
async def test_a_first_use_of_all_gathers_result_on_a_new_stream_is_ordered_or_a_race(sanitized):
    x = stacked_inputs()
    async with DistributedWorker([0, 1, 2], RunConfig(**SMALL, **(SANITIZED if sanitized else {}))) as dw:
        t = dw.alloc_stacked_tensor(x)
        for w in dw.workers:
            await w.default_stream.record()
        w1 = dw.workers[1]
        later = w1.stream()
        out = poison((3, N))
        with hold(w1.default_stream) as latch:
            done = dw.all_gather(t)
            g = done._result  # the result tensors, before the collective completed
            if sanitized:
                with pytest.raises(PtoRaceError, match="all_gather"):
                    w1.copy(out, g[1], stream=later)
                latch.release()
                await done
                np.testing.assert_array_equal(out, poison((3, N)))
                await w1.copy(out, g[1], stream=later)
            else:
                read = w1.copy(out, g[1], stream=later)
                await w1.stream().record()
                assert not read.done()
                latch.release()
                await done
                await read
        np.testing.assert_array_equal(out, x)
        dw.free_stacked_tensor(g)
        dw.free_stacked_tensor(t)


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
async def test_a_write_of_all_gathers_source_on_a_new_stream_waits_for_the_gather(kernels):
    x = stacked_inputs()
    async with DistributedWorker([0, 1, 2], RunConfig(**SMALL)) as dw:
        t = dw.alloc_stacked_tensor(x)
        w1 = dw.workers[1]
        inc = w1.register(kernels.get("inc", N))
        await w1.default_stream.record()
        later = w1.stream()
        with hold(w1.default_stream) as latch:
            done = dw.all_gather(t)
            overwrite = inc(t[1], stream=later)  # must wait until the gather has read t[1]
            assert await held_back(overwrite)
            latch.release()
            g = await done
            await overwrite
        for r in range(3):
            np.testing.assert_array_equal(await g[r].to_host(), x)
        np.testing.assert_array_equal(await t[1].to_host(), x[1] + 1)
        dw.free_stacked_tensor(g)
        dw.free_stacked_tensor(t)


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
async def test_a_write_of_a_shard_waits_for_the_neighbour_still_reading_it(kernels):
    # broadcast from root 0 over 3 ranks: rank 1 reads t[0], rank 2 reads t[1].  Rank 0's own
    # part waits for nobody; its end must still wait for rank 1's read of t[0] before a later
    # write of t[0] on a new stream of worker 0 may run.
    x = stacked_inputs()
    async with DistributedWorker([0, 1, 2], RunConfig(**SMALL)) as dw:
        t = dw.alloc_stacked_tensor(x)
        w0, w1 = dw.workers[0], dw.workers[1]
        inc = w0.register(kernels.get("inc", N))
        for w in dw.workers:
            await w.default_stream.record()
        later = w0.stream()
        with hold(w1.default_stream) as latch:  # rank 1 has not read t[0] yet
            done = dw.broadcast(t, root=0)
            overwrite = inc(t[0], stream=later)
            assert await held_back(overwrite)
            latch.release()
            await done
            await overwrite
        for r in (1, 2):
            np.testing.assert_array_equal(await t[r].to_host(), x[0])  # without the wait: x[0] + 1
        np.testing.assert_array_equal(await t[0].to_host(), x[0] + 1)
        dw.free_stacked_tensor(t)
