"""RunConfig.host_first: the host thread runs short device work itself (native/src/engines.c, "Host first").

A small command handed to a device thread takes two thread hand-offs (the
submitter wakes an engine, the engine's completion wakes the host); with no
CPU spare for the host each waits for the other's time slice.  So a thread
that submits to an idle stream, or blocks for a completion, runs short queued
work itself.  ``host_first="always"`` forces the choice a host with no spare
CPU makes (``"auto"``); ``"off"`` never makes it.  These tests assert the
mechanism (``w.stats().inline_runs``) and that nothing a user can observe
changes: results, stream order, failures, latches, modeled times.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pypto_async.errors import PtoArgumentError, PtoCopyFault, PtoDependencyError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import fail_next, hold

N = 4096
HOST = {"timing": "host", "device_memory": 64 << 20}


@pytest.fixture
def rng():
    return np.random.default_rng(26)


async def _fetch(w, t) -> np.ndarray:
    """The device tensor t's contents, copied out by awaiting (no blocking wait on the loop)."""
    host = np.full(t.shape, np.nan, np.float32)
    await w.copy(host, t)
    return host


def _requests(w, add, rng, n: int) -> None:
    """n requests of an asyncio service, one at a time: copy in, kernel, copy out; checked against numpy."""
    async def serve():
        weight = rng.standard_normal(N).astype(np.float32)
        wd = w.alloc_tensor(N, np.float32, init=weight)
        for _ in range(n):
            x = rng.standard_normal(N).astype(np.float32)
            y = np.full(N, np.nan, np.float32)  # poisoned
            await add(x, wd, y)
            np.testing.assert_array_equal(y, x + weight)
        wd.free()
    return serve()


async def _served(kernels, rng, mode: str, n: int = 12):
    async with ChipWorker(RunConfig(host_first=mode, **HOST)) as w:
        add = w.register(kernels.get("add", N))
        await _requests(w, add, rng, n)
        return w.stats()


def test_a_host_with_no_spare_cpu_runs_short_requests_itself(kernels, rng):
    """host_first="always" (no CPU spare, forced): copies and kernels run on the awaiting thread, results exact."""
    st = asyncio.run(_served(kernels, rng, "always"))
    # Each request's copy in, kernel (once its first run is known short) and copy out.
    assert st.inline_runs >= 2 * 12, st.inline_runs
    assert st.commands_completed == st.commands_submitted


def test_host_first_off_leaves_every_command_to_the_device_threads(kernels, rng):
    """host_first="off": the same requests, the same results, nothing run by the host thread."""
    st = asyncio.run(_served(kernels, rng, "off"))
    assert st.inline_runs == 0


def test_a_blocking_wait_runs_short_work_itself(kernels, rng):
    """Sync mode: the thread that blocks for a launch runs the short work it waits for."""
    add = kernels.get("add", N)
    with ChipWorker(RunConfig(host_first="always", **HOST)) as w:
        a = w.alloc_tensor(N, np.float32, init=rng.standard_normal(N).astype(np.float32))
        b = w.alloc_tensor(N, np.float32, init=rng.standard_normal(N).astype(np.float32))
        out = w.alloc_tensor(N, np.float32)
        want = a.numpy() + b.numpy()
        before = w.stats().inline_runs
        for _ in range(5):
            w.copy(out, np.full(N, np.nan, np.float32))  # poisoned
            w.run(add, a, b, out)
            np.testing.assert_array_equal(out.numpy(), want)
        assert w.stats().inline_runs > before


def test_stream_order_holds_on_the_inline_path(kernels, rng):
    """A chain of dependent launches and copies on one stream, each run inline: the result of running them in order."""
    async def chain():
        async with ChipWorker(RunConfig(host_first="always", **HOST)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            weight = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            b = w.alloc_tensor(N, np.float32)
            wd = w.alloc_tensor(N, np.float32, init=weight)
            snap = np.full(N, np.nan, np.float32)
            last = None
            want = x.copy()
            for i in range(10):
                add(a, wd, b)  # b = a + w
                last = add(b, wd, a)  # a = b + w
                want = want + weight + weight
                if i == 4:
                    w.copy(snap, a)  # in order: after the fifth pair, before the sixth
                    want_snap = want.copy()
            await last
            await w.wait()
            np.testing.assert_allclose(await _fetch(w, a), want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(snap, want_snap, rtol=1e-5, atol=1e-5)
            return w.stats().inline_runs
    assert asyncio.run(chain()) > 0


def test_a_failure_on_the_inline_path_fails_its_dependents_then_the_stream_recovers(kernels, rng):
    """An injected fault of a command run inline: the next command fails as its dependent; observed, work runs again."""
    async def go():
        async with ChipWorker(RunConfig(host_first="always", **HOST)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            await add(a, a, out)  # the kernel's time is known: short
            s = w.default_stream
            fail_next(s, PtoCopyFault)
            first = add(a, a, out)
            second = add(out, a, out)
            with pytest.raises(PtoCopyFault):
                await first
            with pytest.raises(PtoDependencyError):
                await second
            y = rng.standard_normal(N).astype(np.float32)
            w.copy(a, y)
            await add(a, a, out)
            np.testing.assert_array_equal(await _fetch(w, out), y + y)
            return w.stats().inline_runs
    assert asyncio.run(go()) > 0


def test_nothing_runs_inline_while_a_latch_holds_the_stream(kernels, rng):
    """testing.hold still holds: work queued behind the latch waits, on no thread, until the release."""
    async def go():
        async with ChipWorker(RunConfig(host_first="always", **HOST)) as w:
            add = w.register(kernels.get("add", N))
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            await add(a, a, out)  # known short from here on
            await w.copy(out, np.full(N, np.nan, np.float32))  # poisoned
            s = w.default_stream
            with hold(s) as latch:
                before = w.stats().inline_runs
                launch = add(a, a, out)
                for _ in range(20):
                    await asyncio.sleep(0)
                assert not launch.done()
                assert w.stats().inline_runs == before
                latch.release()
                await launch
            np.testing.assert_array_equal(await _fetch(w, out), x + x)
    asyncio.run(go())


def test_an_inline_command_gets_the_modeled_times_of_a_queued_one(kernels, rng):
    """timing="model": a copy and a kernel run inline have the modeled durations they have on a device thread."""
    def durations(mode: str):
        add = kernels.get("add", N)
        with ChipWorker(RunConfig(host_first=mode, device_memory=64 << 20)) as w:
            x = rng.standard_normal(N).astype(np.float32)
            a = w.alloc_tensor(N, np.float32, init=x)
            out = w.alloc_tensor(N, np.float32)
            w.run(add, a, a, out)
            with w.trace() as tr:
                w.copy(a, x)
                w.run(add, a, a, out)
            inline = w.stats().inline_runs
            recs = [r for r in tr.trace.records if r.kind_name in ("h2d", "launch")]
            return sorted((r.kind_name, r.end_ns - r.start_ns) for r in recs), inline
    queued, none = durations("off")
    inlined, some = durations("always")
    assert none == 0 and some > 0
    assert queued == inlined


@pytest.mark.parametrize("field, value", [("host_first", "sometimes"), ("host_first", 1), ("inline_us", 0),
                                          ("inline_us", 2_000_000)])
def test_bad_host_first_settings_are_refused(field, value):
    with pytest.raises(PtoArgumentError, match=field):
        RunConfig(**{field: value})
