"""ChipWorker: opening, modes, registration, closing, threads, fork (runtime/_worker.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import sys
import threading
import warnings

import anyio
import numpy as np
import pytest
from conftest import mem_stats

from pypto_async._driver import ffi, lib
from pypto_async.errors import (
    PtoArgumentError,
    PtoCanceledError,
    PtoClosedError,
    PtoDependencyError,
    PtoDeviceLost,
    PtoInvalidStateError,
    PtoKernelFault,
    PtoLoadError,
    PtoNotSupported,
    PtoPlatformMismatch,
    PtoTimeout,
)
from pypto_async.runtime import ChipWorker, KernelHandle, RunConfig, WorkerStats
from pypto_async.runtime._complete import _SHED_BYTES
from pypto_async.runtime._submit import submit, token
from pypto_async.testing import hold

N = 64


def rand(n: int = N) -> np.ndarray:
    return np.random.default_rng().standard_normal(n).astype(np.float32)


def test_kernel_handle_init_disabled():
    with pytest.raises(TypeError, match=r"register\(compiled\)"):
        KernelHandle()


def test_open_and_close(config):
    w = ChipWorker(config)
    assert not w.is_closed and w.mode == "sync" and w.platform == "sim"
    assert w.config is config
    w.close()
    w.close()  # idempotent
    assert w.is_closed and "closed" in repr(w)


def test_config_may_be_a_dict():
    with ChipWorker({"platform": "a2a3sim", "cores": 1}) as w:
        assert w.platform == "sim" and w.config.cores == 1
    with pytest.raises(PtoArgumentError, match="unknown RunConfig field"):
        ChipWorker({"cores": 1, "bogus": 2})
    with pytest.raises(PtoArgumentError, match="RunConfig, a dict or None"):
        ChipWorker(42)


def test_unknown_platform_is_refused():
    with pytest.raises(PtoNotSupported):
        ChipWorker(RunConfig(platform="nosuchplatform"))


def test_every_public_method_checks_open(config, kernels):
    w = ChipWorker(config)
    handle = w.register(kernels.get("inc", N))
    stream = w.stream()
    w.close()
    calls = [
        lambda: w.stream(),
        lambda: w.default_stream,
        lambda: w.register(kernels.get("add", N)),
        lambda: w.run(kernels.get("inc", N), rand()),
        lambda: handle(rand()),
        lambda: handle.submit(rand()),
        lambda: w.alloc_tensor(N, np.float32),
        lambda: w.copy(np.zeros(N, np.float32), np.zeros(N, np.float32)),
        lambda: w.copy_from(bytearray(8), 4096, 8),
        lambda: w.copy_to(4096, bytearray(8), 8),
        lambda: w.stats(),
        lambda: stream.record(),
        lambda: stream.sync(),
        lambda: w.use_stream(stream).__enter__(),
    ]
    for call in calls:
        with pytest.raises(PtoClosedError, match="closed"):
            call()


def test_register_checks_the_platform_first(worker, kernels):
    with pytest.raises(PtoPlatformMismatch, match="compiled for platform 'othersim'"):
        worker.register(kernels.get("inc", N, platform="othersim"))
    # An alias of the worker's platform is the same platform.
    worker.register(kernels.get("inc", N, platform="a5sim"))(rand())


def test_register_loads_once_and_returns_the_same_handle(worker, kernels):
    program = kernels.get("inc", N)
    handle = worker.register(program)
    assert worker.register(program) is handle
    assert handle.compiled is program and handle.worker is worker and handle.name == "inc"
    assert [p.name for p in handle.params] == ["x"]
    # A second program from the same library and symbol shares the loaded kernel.
    again = worker.register(dataclasses.replace(program))
    assert again is not handle and again._kptr == handle._kptr


def test_register_refuses_what_is_not_a_program(worker, kernels, tmp_path):
    with pytest.raises(PtoArgumentError, match="not a compiled program"):
        worker.register(object())
    missing = dataclasses.replace(kernels.get("inc", N), lib_path=tmp_path / "missing.so")
    with pytest.raises(PtoLoadError):
        worker.register(missing)


def test_run_is_the_one_shot_form(worker, kernels):
    a, b = rand(), rand()
    out = np.zeros(N, np.float32)
    assert worker.run(kernels.get("add", N), a, b, out) is out  # sync mode: the outputs, as PyPTO
    np.testing.assert_array_equal(out, a + b)


def test_stats(worker, kernels):
    before = worker.stats()
    assert isinstance(before, WorkerStats)
    x = rand()
    worker.run(kernels.get("inc", N), x)
    after = worker.stats()
    assert after.launches == before.launches + 1
    assert after.copies == before.copies + 2
    assert after.bytes_h2d - before.bytes_h2d == x.nbytes == after.bytes_d2h - before.bytes_d2h
    assert after.completions > before.completions and after.wakeups >= 1
    assert after.completions_per_wakeup >= 1.0
    assert after.memory_peak >= x.nbytes and after.memory_capacity == 64 << 20
    assert after.streams == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.launches = 0


def test_close_finishes_queued_work(config, kernels):
    w = ChipWorker(config)
    t = w.alloc_tensor(N, np.float32, init=np.zeros(N, np.float32))
    out = np.zeros(N, np.float32)
    inc = w.register(kernels.get("inc", N))
    launches = [inc.submit(t) for _ in range(20)]
    copied = w.copy(out, t)
    t.free()
    w.close()
    assert all(launch.done() and launch.exception() is None for launch in launches)
    copied.result()
    np.testing.assert_array_equal(out, np.full(N, 20, np.float32))


def test_close_timeout_cancels_queued_work(config, kernels):
    w = ChipWorker(config)
    t = w.alloc_tensor(N, np.float32)
    inc = w.register(kernels.get("inc", N))
    # A latch that outlives the worker: closing the device releases it (testing.hold() must not).
    latch = ffi.new("pto_latch **")
    assert lib.pto_latch_create(w._dev, 30_000_000, latch) == 0
    stream = w.default_stream
    q = w._queue
    with q.lock:
        submit(q, stream, lib.pto_stream_latch_wait, (stream._ptr, latch[0], token(q, None)), None, 0)
    stuck = inc.submit(t)
    t.free()
    with pytest.warns(RuntimeWarning, match=r"dropped \d+ command"):
        w.close(timeout=0.05)
    assert w.is_closed
    assert isinstance(stuck.exception(), PtoCanceledError)


def test_unclosed_worker_warns_when_collected(config):
    w = ChipWorker(config)
    with pytest.warns(ResourceWarning, match="unclosed"):
        del w
        gc.collect()


def test_awaiting_a_sync_mode_worker_raises(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    t = worker.alloc_tensor(N, np.float32)

    async def main():
        with hold(worker.default_stream):
            pending = inc.submit(t)
            with pytest.raises(PtoInvalidStateError, match="sync mode"):
                await pending.wait()
        return pending

    asyncio.run(main()).sync(timeout=10)
    t.free()


def test_a_worker_per_thread(config, kernels):
    add = kernels.get("add", N)
    errors = []

    def work():
        try:
            with ChipWorker(config) as w:
                h = w.register(add)
                for _ in range(30):
                    a, b = rand(), rand()
                    out = np.zeros(N, np.float32)
                    h(a, b, out)
                    np.testing.assert_array_equal(out, a + b)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_threads_sharing_a_sync_worker(worker, kernels):
    h = worker.register(kernels.get("add", N))
    errors = []

    def work(stream):
        try:
            for _ in range(30):
                a, b = rand(), rand()
                out = np.zeros(N, np.float32)
                h(a, b, out, stream=stream)
                np.testing.assert_array_equal(out, a + b)
        except BaseException as exc:
            errors.append(exc)

    streams = [worker.stream() for _ in range(2)] + [None, None]
    threads = [threading.Thread(target=work, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for s in streams[:2]:
        s.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_using_a_worker_in_a_forked_child_raises(worker):
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            worker.stats()
        except PtoInvalidStateError as exc:
            code = 0 if "forked child" in str(exc) else 4
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    worker.stats()  # the parent's worker is fine


def test_chip_swimlane_turns_the_trace_on(kernels, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the worker writes its swimlane trace file here on close
    with ChipWorker(RunConfig(enable_chip_swimlane=True, cores=1, copy_engines=1,
                              device_memory=16 << 20)) as w:
        w.run(kernels.get("inc", N), rand())
        records = ffi.new("pto_trace_record[]", 64)
        n = lib.pto_trace_read(w._dev, records, 64)
        names = {ffi.string(records[i].name).decode() for i in range(n)}
        assert {"h2d", "d2h"} <= names and any("k_inc" in name for name in names)
    with ChipWorker(RunConfig(cores=1, copy_engines=1, device_memory=16 << 20)) as w:
        w.run(kernels.get("inc", N), rand())
        assert lib.pto_trace_read(w._dev, ffi.new("pto_trace_record[]", 8), 8) == 0


def test_close_returns_on_a_lost_device(config):
    w = ChipWorker(config)
    t = w.alloc_tensor(N, np.float32)  # still referenced: close() frees it, and says so
    assert lib.pto_debug_lose_device(w._dev, b"lost on purpose") == 0
    with pytest.warns(ResourceWarning, match="never freed"):
        w.close(timeout=5)
    assert w.is_closed and t.freed


# -- waiting for everything: sync() and wait() ---------------------------------------------------


def test_sync_waits_for_every_stream(kernels):
    with ChipWorker(RunConfig(cores=2, copy_engines=1, device_memory=16 << 20)) as w:
        inc = w.register(kernels.get("inc", N))
        fail = w.register(kernels.get("fail", N))
        a, b, c = w.stream(), w.stream(), w.stream()
        xs = [rand() for _ in range(3)]
        ts = [w.alloc_tensor(N, np.float32, init=x) for x in xs]
        w.sync(timeout=10)
        with hold(a) as la, hold(b) as lb, hold(c) as lc:
            launches = [inc.submit(t, stream=s) for t, s in zip(ts, (a, b, c))]
            failed = fail.submit(rand(), stream=a)
            c.close()  # the work a closed stream still holds counts too
            with pytest.raises(PtoTimeout, match="did not complete within"):
                w.sync(timeout=0.05)
            la.release()
            lb.release()
            with pytest.raises(PtoTimeout):
                w.sync(timeout=0.05)  # c is still held
            assert not launches[2].done()
            lc.release()
            with pytest.raises(PtoDependencyError) as info:
                w.sync(timeout=10)  # the failure stream a carries, delivered
            assert all(launch.done() for launch in launches) and failed.done()
        assert info.value.__cause__ is failed.exception()
        assert isinstance(failed.exception(), PtoKernelFault)
        for t, x in zip(ts, xs):
            np.testing.assert_array_equal(t.numpy(), x + np.float32(1))
            t.free()
        w.sync(timeout=10)
        assert mem_stats(w).allocations == 0 and mem_stats(w).pending_frees == 0
    with pytest.raises(PtoClosedError):
        w.sync()


def test_sync_covers_the_frees_of_collected_tensors(worker):
    t = worker.alloc_tensor(N, np.float32, init=rand())
    with hold(worker.default_stream) as latch:
        del t
        gc.collect()  # the free is deferred to the worker, behind the held stream
        latch.release()
        worker.sync(timeout=10)
    assert mem_stats(worker).allocations == 0 and mem_stats(worker).pending_frees == 0


@pytest.mark.slow
def test_a_drained_token_map_lets_go_of_the_table_of_its_peak(worker, kernels):
    # 12,000 commands in flight at once grow the token map's table past the limit; once they
    # all completed it is let go, so what a garbage collection walks in the map is what is in
    # flight, not its history (a dict otherwise keeps its largest table, and every collection
    # that finds the map young walks all of it).  The map works on afterwards.
    s = worker.stream()
    with hold(s):
        ts = [worker.alloc_tensor(N, np.float32, stream=s) for _ in range(12_000)]
        peak = sys.getsizeof(worker._queue.pending)
    worker.sync(timeout=30)
    in_flight, drained = len(worker._queue.pending), sys.getsizeof(worker._queue.pending)
    for t in ts:
        t.free()
    worker.sync(timeout=30)
    assert peak > _SHED_BYTES  # the map did grow past the limit: the test can fail
    assert in_flight == 0 and drained < _SHED_BYTES // 16
    inc = worker.register(kernels.get("inc", N))
    x = rand()
    t = worker.alloc_tensor(N, np.float32, init=x)
    inc.submit(t)
    np.testing.assert_array_equal(t.numpy(), x + 1)
    assert not worker._queue.pending
    t.free()


def test_sync_raises_on_a_lost_device(config, kernels):
    w = ChipWorker(config)
    inc = w.register(kernels.get("inc", N))
    t = w.alloc_tensor(N, np.float32, init=rand())  # left to close(), which says so
    with hold(w.default_stream):
        launch = inc.submit(t)
        assert lib.pto_debug_lose_device(w._dev, b"lost on purpose") == 0
        with pytest.raises(PtoDeviceLost, match="device was lost"):
            w.sync(timeout=10)
        assert isinstance(launch.exception(), PtoDeviceLost)
        in_flight = len(w._queue.pending)
        with pytest.raises(PtoDeviceLost):  # refused at submission, leaving nothing behind
            inc.submit(t)
        assert len(w._queue.pending) == in_flight
    with pytest.warns(ResourceWarning, match="never freed"):
        w.close(timeout=5)


@pytest.mark.anyio
async def test_wait_covers_only_the_work_queued_before_it(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc", N))
        a, b = w.stream(), w.stream()
        x, y = rand(), rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        u = w.alloc_tensor(N, np.float32, init=y)
        await w.wait()
        finished = anyio.Event()

        async def waiter():
            await w.wait()
            finished.set()

        with hold(a) as la:
            before = inc(t, stream=a)
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()  # its sync point is taken
                with hold(b) as lb:
                    after = inc(u, stream=b)  # queued once the wait began: not waited for
                    await inc(rand(), stream=w.stream())  # other completions run the pump
                    await anyio.wait_all_tasks_blocked()
                    assert not finished.is_set()
                    la.release()
                    with anyio.fail_after(10):
                        await finished.wait()
                    assert before.done() and not after.done()
                    lb.release()
                    await after
        np.testing.assert_array_equal(await t.to_host(), x + np.float32(1))
        np.testing.assert_array_equal(await u.to_host(), y + np.float32(1))
        t.free()
        u.free()


@pytest.mark.anyio
async def test_wait_ends_when_the_worker_closes_under_it(config, kernels):
    w = ChipWorker(config)
    await w.open()
    inc = w.register(kernels.get("inc", N))
    t = w.alloc_tensor(N, np.float32, init=rand())
    outcome = []

    async def waiter():
        try:
            await w.wait()
        except PtoClosedError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        with hold(w.default_stream, timeout=60):  # never released: close() must cancel it
            launch = inc(t)
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            t.free()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "dropped N command(s)"
                await w.aclose(timeout=0.2)
    assert len(outcome) == 1 and isinstance(launch.exception(), PtoCanceledError)


@pytest.mark.anyio
async def test_sync_from_another_thread_on_an_async_worker(config, kernels):
    async with ChipWorker(config) as w:
        inc = w.register(kernels.get("inc", N))
        x = rand()
        t = w.alloc_tensor(N, np.float32, init=x)
        with hold(w.default_stream) as latch:
            launch = inc(t)
            seen = []

            def blocking():
                w.sync(timeout=10)  # the loop's pump completes it: this thread only waits
                seen.append(launch.done())

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, blocking)
                await anyio.sleep(0.01)
                latch.release()
        assert seen == [True]
        np.testing.assert_array_equal(await t.to_host(), x + np.float32(1))
        t.free()


def test_wait_in_sync_mode_is_refused(worker, kernels):
    inc = worker.register(kernels.get("inc", N))
    t = worker.alloc_tensor(N, np.float32, init=rand())
    with hold(worker.default_stream):
        inc.submit(t)
        with pytest.raises(PtoInvalidStateError, match="sync mode"):
            asyncio.run(worker.wait())
    worker.sync(timeout=10)
    t.free()
