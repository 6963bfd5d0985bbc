"""Launch: host copies by direction, keep-alive, results, failures, bad input (runtime/_launch.py)."""

from __future__ import annotations

import gc
import weakref

import anyio
import numpy as np
import pytest

from conftest import assert_no_device_memory, mem_stats
from pypto_async._driver import lib
from pypto_async.errors import (
    PtoArgumentError,
    PtoDependencyError,
    PtoForeignTensorError,
    PtoInvalidStateError,
    PtoKernelFault,
    PtoOutOfMemory,
    PtoTensorFreedError,
)
from pypto_async.runtime import ChipWorker, Launch, RunConfig
from pypto_async.runtime._wait import drive
from pypto_async.testing import hold

N = 64


def rand(n: int = N, seed: int | None = None) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_launch_init_disabled():
    with pytest.raises(TypeError, match=r"register\(compiled\)"):
        Launch()


# -- host arrays: what is copied, and which way ---------------------------------------------------


def test_in_is_not_copied_back_and_out_is_not_copied_in(worker, kernels):
    probe = kernels.get("probe", N)
    x = rand()
    x0 = x.copy()
    poison = float(np.random.default_rng().uniform(100, 200))
    out = np.full(N, poison, np.float32)
    worker.run(probe, x, out, poison)
    # The kernel scribbled -7777 over its device copy of x: x was not copied back.
    np.testing.assert_array_equal(x, x0)
    # The kernel adds 1000 when `out` held the poison on entry: out was not copied in.
    np.testing.assert_array_equal(out, x0)


def test_probe_sees_device_contents_it_is_given(worker, kernels):
    # Positive control for the test above: a DeviceTensor full of poison is seen as such.
    probe = kernels.get("probe", N)
    x = rand()
    poison = float(np.random.default_rng().uniform(100, 200))
    out = worker.alloc_tensor(N, np.float32, init=np.full(N, poison, np.float32))
    worker.run(probe, x, out, poison)
    np.testing.assert_array_equal(out.numpy(), x + np.float32(1000))
    out.free()


def test_inout_host_array_is_copied_both_ways(worker, kernels):
    x = rand()
    expected = x + np.float32(1)
    worker.run(kernels.get("inc", N), x)
    np.testing.assert_array_equal(x, expected)


def test_device_tensors_skip_both_copies(worker, kernels):
    add = kernels.get("add", N)
    a, b = rand(), rand()
    ta = worker.alloc_tensor(N, np.float32, init=a)
    tb = worker.alloc_tensor(N, np.float32, init=b)
    tout = worker.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32))
    before = worker.stats()
    result = worker.run(add, ta, tb, tout)  # sync mode: the outputs, as PyPTO
    after = worker.stats()
    assert result is tout
    assert (after.bytes_h2d, after.bytes_d2h) == (before.bytes_h2d, before.bytes_d2h)
    assert after.launches == before.launches + 1
    np.testing.assert_array_equal(tout.numpy(), a + b)
    for t in (ta, tb, tout):
        t.free()


def test_mixed_arguments_copy_only_host_arrays(worker, kernels):
    add = kernels.get("add", N)
    a, b = rand(), rand()
    tb = worker.alloc_tensor(N, np.float32, init=b)
    out = np.full(N, np.nan, np.float32)
    before = worker.stats()
    worker.run(add, a, tb, out)
    after = worker.stats()
    assert after.bytes_h2d - before.bytes_h2d == a.nbytes
    assert after.bytes_d2h - before.bytes_d2h == out.nbytes
    np.testing.assert_array_equal(out, a + b)
    tb.free()


def test_torch_cpu_tensors_are_host_arrays(worker, kernels):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    a, b = torch.randn(N), torch.randn(N)
    out = torch.full((N,), float("nan"))
    result = worker.run(kernels.get("add", N), a, b, out)
    assert result is out
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_scalar_parameter(worker, kernels):
    x = rand()
    out = np.zeros(N, np.float32)
    worker.run(kernels.get("scale", N), x, 2.5, out)
    np.testing.assert_array_equal(out, np.float32(2.5) * x)


def test_blocks_split_the_work(worker, kernels):
    a, b = rand(4096), rand(4096)
    out = np.full(4096, np.nan, np.float32)
    worker.run(kernels.get("add", 4096, blocks=4), a, b, out)
    np.testing.assert_array_equal(out, a + b)


# -- keep-alive -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cancelled_waiter_keeps_host_buffers_alive(config, kernels):
    add = kernels.get("add", N)
    async with ChipWorker(config) as w:
        a, b = rand(), rand()
        expected = a + b
        out = np.full(N, np.nan, np.float32)
        refs = [weakref.ref(a), weakref.ref(b)]
        with hold(w.default_stream) as latch:
            launch = w.run(add, a, b, out)

            async def waiter():
                await launch  # noqa: F821 (runs before the del below)

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                tg.cancel_scope.cancel()
            # The waiter is gone, and so are our references: the token map holds the arrays.
            del a, b, launch
            gc.collect()
            assert all(r() is not None for r in refs)
            latch.release()
            await w.default_stream
        np.testing.assert_array_equal(out, expected)
        gc.collect()
        assert all(r() is None for r in refs)


@pytest.mark.anyio
async def test_many_tasks_await_one_launch_some_cancelled(config, kernels, recwarn):
    # Every task still waiting gets the outputs, or the error; a cancelled one gets neither.
    async with ChipWorker(config) as w:
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        inc, fail = w.register(kernels.get("inc", N)), w.register(kernels.get("fail", N))
        for h, outcome in ((inc, "result"), (fail, "error")):
            got = []
            with hold(w.default_stream) as latch:
                launch = h(t)

                async def waiter(i):
                    try:
                        got.append((i, await launch))  # noqa: F821 (runs before the del below)
                    except PtoKernelFault as exc:
                        got.append((i, exc))

                async with anyio.create_task_group() as doomed:
                    doomed.start_soon(waiter, 0)
                    await anyio.wait_all_tasks_blocked()
                    doomed.cancel_scope.cancel()
                async with anyio.create_task_group() as waiting:
                    for i in (1, 2, 3):
                        waiting.start_soon(waiter, i)
                    await anyio.wait_all_tasks_blocked()
                    latch.release()
            assert sorted(i for i, _ in got) == [1, 2, 3]
            if outcome == "result":
                assert all(v is t for _, v in got)
            else:
                assert all(isinstance(v, PtoKernelFault) for _, v in got)
            del launch
        np.testing.assert_array_equal(await t.to_host(), x + 1)
        t.free()
    gc.collect()
    assert not [m for m in recwarn if "never retrieved" in str(m.message)]


@pytest.mark.anyio
async def test_cancelled_waits_on_a_long_launch_do_not_pile_up(config, kernels):
    # A task that keeps timing out on one long launch must not grow its waiter lists.
    async with ChipWorker(config) as w:
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        inc = w.register(kernels.get("inc", N))
        with hold(w.default_stream) as latch:
            launch = inc(t)
            for i in range(1000):
                with anyio.move_on_after(0):
                    if i % 2:
                        await launch
                    else:
                        await launch.wait()
            owaiters = launch._owaiters
            held = (len(owaiters) if type(owaiters) is list else owaiters is not None,
                    len(launch._waiters or ()))
            assert max(held) < 128, held
            assert not launch.done()
            latch.release()
            assert await launch is t
        np.testing.assert_array_equal(await t.to_host(), x + np.float32(1))
        t.free()


@pytest.mark.anyio
async def test_submitted_waits_for_room_in_the_ring(kernels, tiny_ring):
    async with ChipWorker(tiny_ring) as w:
        inc = w.register(kernels.get("inc", N))
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        await w.default_stream
        entered = anyio.Event()
        with hold(w.default_stream) as latch:
            launches = [inc(t) for _ in range(10)]
            first, last = launches[0], launches[-1]
            assert first.submitted_to_ring and not last.submitted_to_ring
            assert await first.submitted() is first  # in the ring already: no wait

            async def wait_for_entry():
                assert await last.submitted() is last
                entered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_entry)
                await anyio.wait_all_tasks_blocked()
                assert not entered.is_set()  # the ring is full behind the latch
                latch.release()
            assert last.submitted_to_ring
        for launch in launches:
            await launch
            x = x + np.float32(1)
        np.testing.assert_array_equal(await t.to_host(), x)
        t.free()


def test_a_program_with_two_outputs_returns_both(worker, kernels):
    pair = worker.register(kernels.get("pair", N))
    a = rand()
    lo = np.full(N, np.nan, np.float32)
    hi = np.full(N, np.nan, np.float32)
    result = pair(a, lo, hi)
    assert type(result) is tuple and result[0] is lo and result[1] is hi
    np.testing.assert_array_equal(lo, a - np.float32(1))
    np.testing.assert_array_equal(hi, a + np.float32(1))


@pytest.mark.anyio
async def test_awaiting_a_program_with_two_outputs(config, kernels):
    async with ChipWorker(config) as w:
        pair = w.register(kernels.get("pair", N))
        a = rand()
        t_lo, t_hi = w.alloc_tensor(N, np.float32), w.alloc_tensor(N, np.float32)
        got = await pair(a, t_lo, t_hi)
        assert type(got) is tuple and len(got) == 2 and got[0] is t_lo and got[1] is t_hi
        np.testing.assert_array_equal(await t_lo.to_host(), a - np.float32(1))
        np.testing.assert_array_equal(await t_hi.to_host(), a + np.float32(1))
        t_lo.free()
        t_hi.free()


@pytest.mark.slow
def test_dropped_launch_keeps_host_buffers_alive(worker, kernels):
    add = kernels.get("add", N)
    a, b = rand(), rand()
    expected = a + b
    out = np.full(N, np.nan, np.float32)
    refs = [weakref.ref(a), weakref.ref(b)]
    with hold(worker.default_stream) as latch:
        worker.register(add).submit(a, b, out)  # the Launch is dropped at once
        del a, b
        gc.collect()
        assert all(r() is not None for r in refs)
        latch.release()
        worker.default_stream.sync(timeout=10)
    np.testing.assert_array_equal(out, expected)
    gc.collect()
    assert all(r() is None for r in refs)


# -- results and state ---------------------------------------------------------------------------------


def test_result_forms(worker, kernels):
    x = rand()
    launch = worker.register(kernels.get("inc", N)).submit(x)
    launch.sync(timeout=10)
    assert launch.done() and launch.exception() is None
    assert launch.result() is x
    assert launch.stream is worker.default_stream
    assert "done" in repr(launch)


def test_result_before_completion_raises(worker, kernels):
    t = worker.alloc_tensor(N, np.float32, init=rand())
    with hold(worker.default_stream):
        launch = worker.register(kernels.get("inc", N)).submit(t)
        assert not launch.done()
        with pytest.raises(PtoInvalidStateError, match="not completed"):
            launch.result()
        with pytest.raises(PtoInvalidStateError):
            launch.exception()
    assert launch.sync(timeout=10) is t
    t.free()


@pytest.mark.anyio
async def test_await_returns_the_outputs(config, kernels):
    async with ChipWorker(config) as w:
        a, b = rand(), rand()
        out = np.zeros(N, np.float32)
        assert await w.run(kernels.get("add", N), a, b, out) is out
        np.testing.assert_array_equal(out, a + b)
        launch = w.run(kernels.get("add", N), a, b, out)
        await launch
        assert await launch is out  # a finished launch answers at once


@pytest.mark.anyio
async def test_await_submit_waits_for_the_ring_only(config, kernels):
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        h = w.register(kernels.get("inc", N))
        with hold(w.default_stream) as latch:
            launch = await h.submit(t)  # returns although the stream is held
            assert launch.submitted_to_ring and not launch.done()
            latch.release()
            assert await launch.wait() is t
        np.testing.assert_array_equal(await t.to_host(), np.ones(N, np.float32))
        t.free()


@pytest.mark.anyio
async def test_a_coroutine_that_never_suspends_still_sees_launches_complete(config, kernels):
    # Awaiting launches that entered the ring never suspends, so the completion pump
    # never runs; the launch path drains completions itself every 64 launches, so
    # finished launches resolve and release their buffers all the same.
    async with ChipWorker(config) as w:
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        h = w.register(kernels.get("inc", N))
        first = await h.submit(t)
        # Finished on the device (this waits in the driver, and resolves nothing). Whether `first`
        # is resolved yet is the runtime's business (a drain may have come already); what the
        # coroutine can count on is that it is, 64 launches later, though it never suspended.
        assert lib.pto_stream_synchronize(w.default_stream._ptr, 10_000_000) == 0
        for _ in range(64):
            await h.submit(t)  # the ring has room: no suspension
        assert first.done() and first.result() is t
        await w.default_stream
        np.testing.assert_array_equal(await t.to_host(), np.full(N, 65, np.float32))
        t.free()


def test_event_of_a_launch(worker, kernels):
    t = worker.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    h = worker.register(kernels.get("inc", N))
    with hold(worker.default_stream) as latch:
        launch = h.submit(t)
        event = launch.event
        assert event is launch.event
        assert not event.query()
        latch.release()
        event.sync(timeout=10)
    assert event.query()
    assert launch.sync(timeout=10) is t
    assert launch.event.query()
    t.free()


# -- failures -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_kernel_fault_then_dependency_error_then_recovery(config, kernels):
    async with ChipWorker(config) as w:
        fail = w.register(kernels.get("fail", N))
        inc = w.register(kernels.get("inc", N))
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        # Nothing held: `second` goes right behind the failing launch, and fails as its dependent
        # whenever the runtime happens to drain the failure's record (the launch path's inline
        # service, the pump).  Only delivering the failure to the user observes it.
        first = fail(t)
        second = inc(t)
        # Draining every record up to them (what the pump may do at any time) delivers nothing,
        # so nothing is observed, and work queued now still fails as a dependent.
        assert drive(w._queue, second.done, 10)
        assert first.done()
        third = inc(t)
        with pytest.raises(PtoKernelFault, match="failing on purpose") as fault:
            await first
        with pytest.raises(PtoDependencyError) as dep:
            await second
        assert dep.value.__cause__ is fault.value
        assert "k_fail" in str(dep.value) and "first failure" in str(dep.value)
        with pytest.raises(PtoDependencyError) as dep3:
            await third
        assert dep3.value.__cause__ is fault.value
        # The stream recovers: later work runs, and the dependent launch did not run.
        await inc(t)
        np.testing.assert_array_equal(await t.to_host(), np.ones(N, np.float32))
        t.free()
        await w.default_stream
        assert_no_device_memory(w)


def test_kernel_fault_in_sync_mode(worker, kernels):
    x = rand()
    with pytest.raises(PtoKernelFault):
        worker.run(kernels.get("fail", N), x)
    # Temporaries of the failed launch were freed, and the worker goes on.
    out = np.zeros(N, np.float32)
    worker.run(kernels.get("scale", N), x, 3.0, out)
    np.testing.assert_array_equal(out, np.float32(3.0) * x)


def test_unretrieved_failure_warns_when_collected(worker, kernels):
    launch = worker.register(kernels.get("fail", N)).submit(rand())
    # The stream's sync raises a dependency error of it, as an event would: the launch's own
    # error is still unretrieved.
    with pytest.raises(PtoDependencyError) as info:
        worker.default_stream.sync(timeout=10)
    assert launch.done()
    del info
    with pytest.warns(RuntimeWarning, match="never retrieved"):
        del launch
        gc.collect()


def test_retrieved_failure_does_not_warn(worker, kernels, recwarn):
    launch = worker.register(kernels.get("fail", N)).submit(rand())
    with pytest.raises(PtoDependencyError):
        worker.default_stream.sync(timeout=10)
    assert isinstance(launch.exception(), PtoKernelFault)
    del launch
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# -- bad input: rejected before anything is queued --------------------------------------------------------


def _bad_inputs(worker, kernels, other):
    a, b, out = rand(), rand(), np.zeros(N, np.float32)
    freed = worker.alloc_tensor(N, np.float32)
    freed.free()
    foreign = other.alloc_tensor(N, np.float32)
    readonly = np.zeros(N, np.float32)
    readonly.flags.writeable = False
    cases = [
        ((a,), PtoArgumentError, r"takes 3 \(in place\) or 2 \(return style\) argument"),
        ((a, b, out, out), PtoArgumentError, "takes 3 "),
        ((rand(N + 1), b, out), PtoArgumentError, r"'a'.*shape \(64,\)"),
        ((a, b.astype(np.float64), out), PtoArgumentError, r"'b'.*dtype float32"),
        ((a, np.zeros((N, 2), np.float32)[:, 0], out), PtoArgumentError, r"'b'.*C-contiguous"),
        ((a, b, readonly), PtoArgumentError, r"'out'.*read-only"),
        ((a, freed, out), PtoTensorFreedError, r"'b'.*freed"),
        ((foreign, b, out), PtoForeignTensorError, r"'a'.*another ChipWorker"),
        ((a, "b", out), PtoArgumentError, r"'b'.*not str"),
    ]
    return cases, foreign


def test_bad_input_is_rejected_before_queueing(worker, kernels, config):
    add = worker.register(kernels.get("add", N))
    with ChipWorker(config) as other:
        cases, foreign = _bad_inputs(worker, kernels, other)
        worker.default_stream.sync(timeout=10)
        before = mem_stats(worker)
        submitted = worker.stats().commands_submitted
        for args, exc, pattern in cases:
            with pytest.raises(exc, match=pattern):
                add(*args)
        after = mem_stats(worker)
        assert (after.allocations, after.in_use) == (before.allocations, before.in_use)
        assert worker.stats().commands_submitted == submitted
        assert worker.stats().in_flight == 0
        foreign.free()
    # Still usable.
    a, b, out = rand(), rand(), np.zeros(N, np.float32)
    add(a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_torch_tensor_not_on_cpu_is_rejected(worker, kernels):
    torch = pytest.importorskip("torch")
    with pytest.raises(PtoArgumentError, match=r"'a'.*not on the CPU"):
        worker.run(kernels.get("add", N), torch.empty(N, device="meta"), rand(), np.zeros(N, np.float32))


def test_scalar_type_is_checked(worker, kernels):
    with pytest.raises(PtoArgumentError, match=r"'alpha'.*number"):
        worker.run(kernels.get("scale", N), rand(), "2", np.zeros(N, np.float32))
    with pytest.raises(PtoArgumentError, match=r"'counter'.*expected shape"):
        worker.run(kernels.get("step", N), np.zeros(2, np.int64), 0)
    with pytest.raises(PtoArgumentError, match=r"'expect'.*int"):
        worker.run(kernels.get("step", N), np.zeros(1, np.int64), 1.5)


def test_out_of_memory_for_temporaries_rolls_back(kernels):
    n = 16 << 10  # 64 KiB per array
    with ChipWorker(RunConfig(cores=1, copy_engines=1, device_memory=1 << 20)) as w:
        add = w.register(kernels.get("add", n))
        free = mem_stats(w).largest_free
        filler = w.alloc_tensor(free - int(2.5 * n * 4), np.uint8)  # room for two temporaries only
        w.default_stream.sync(timeout=10)
        before = mem_stats(w)
        with pytest.raises(PtoOutOfMemory):
            add(rand(n), rand(n), np.zeros(n, np.float32))
        after = mem_stats(w)
        assert (after.allocations, after.in_use) == (before.allocations, before.in_use)
        assert w.stats().in_flight == 0
        filler.free()
        a, b, out = rand(n), rand(n), np.zeros(n, np.float32)
        add(a, b, out)
        np.testing.assert_array_equal(out, a + b)
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_failure_poisons_work_still_waiting_for_ring_room(kernels, tiny_ring):
    # Window 4: most launches wait in the stream's FIFO when the fault is observed.  They were
    # queued before it, so they fail as dependents (as they would have in the ring), not run.
    async with ChipWorker(tiny_ring) as w:
        t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
        await w.default_stream
        fail, inc = w.register(kernels.get("fail", N)), w.register(kernels.get("inc", N))
        with hold(w.default_stream) as latch:  # the ring fills up: the rest waits in the FIFO
            first = fail(t)
            later = [inc(t) for _ in range(20)]
            assert w.default_stream.backlog > 0
            latch.release()
        with pytest.raises(PtoKernelFault) as fault:
            await first
        for launch in later:
            with pytest.raises(PtoDependencyError) as dep:
                await launch
            assert dep.value.__cause__ is fault.value
        await inc(t)  # queued after the fault was observed: runs
        np.testing.assert_array_equal(await t.to_host(), np.ones(N, np.float32))
        t.free()
        await w.default_stream
        assert_no_device_memory(w)


@pytest.mark.anyio
async def test_host_arrays_with_a_full_ring_keep_their_groups_whole(kernels, tiny_ring):
    # Launches with host arrays are five commands; with a window of 4 each group straddles the ring.
    async with ChipWorker(tiny_ring) as w:
        add = w.register(kernels.get("add", N))
        pairs = [(rand(), rand()) for _ in range(30)]
        outs = [np.full(N, np.nan, np.float32) for _ in pairs]
        with hold(w.default_stream) as latch:
            launches = [add(a, b, out) for (a, b), out in zip(pairs, outs)]
            assert w.default_stream.backlog > 0
            latch.release()
        for launch, (a, b), out in zip(launches, pairs, outs):
            assert await launch is out
            np.testing.assert_array_equal(out, a + b)
        assert w.stats().backpressure_waits > 0
        await w.default_stream
        assert_no_device_memory(w)
