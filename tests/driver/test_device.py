"""native/src/device.c: open, info, status, synchronize, cancel, close, device lost."""

from __future__ import annotations

import os

import pytest

from helpers import held, new_token, open_device
from pypto_async._driver import (
    PTO_ECANCELED,
    PTO_EDEVLOST,
    PTO_ETIMEDOUT,
    check,
    device_config,
    ffi,
    lib,
)
from pypto_async._signature import PLATFORMS
from pypto_async.errors import PtoArgumentError, PtoDeviceLost, PtoNotSupported

from helpers.raw_driver import alloc, builtin, info, launch, notify


@pytest.mark.parametrize("platform, canonical", sorted(PLATFORMS.items()))
def test_open_platform_aliases(open_dev, platform, canonical):
    # The driver's table (platform.c) knows every name the Python table knows, with the same meaning.
    dev = open_dev(platform)
    i = info(dev)  # keep the owner alive: .platform is a view into it
    assert ffi.string(i.platform) == canonical.encode()
    assert lib.pto_device_status(dev) == 0


def test_info_reflects_config(open_dev):
    dev = open_dev(cores=3, copy_engines=1, aicpu_thread_num=2, ring_task_window=64,
                   ring_heap=4096, ring_dep_pool=8, trace=1, device_memory=8 << 20)
    i = info(dev)
    assert (i.cores, i.copy_engines, i.aicpu_thread_num) == (3, 1, 2)
    assert (i.ring_task_window, i.ring_heap, i.ring_dep_pool, i.trace) == (64, 4096, 8, 1)
    assert i.engines == 4
    assert i.device_memory == 8 << 20
    assert i.arena_base != 0


def test_defaults_follow_the_header():
    out = ffi.new("pto_device **")
    check(lib.pto_device_open(b"sim", device_config(device_memory=16 << 20), out))
    try:
        i = info(out[0])
        cpus = len(os.sched_getaffinity(0))  # the CPUs this process may use, not the machine's
        assert (i.cores, i.copy_engines, i.aicpu_thread_num) == (min(4, cpus), min(2, cpus), 1)
        assert (i.ring_task_window, i.ring_heap, i.ring_dep_pool) == (256, 64 << 10, 64)
    finally:
        lib.pto_device_close(out[0])


def test_open_rejects_bad_platform_and_config():
    with pytest.raises(PtoNotSupported):
        open_device("cuda-or-whatever")
    with pytest.raises(PtoArgumentError):
        open_device(ring_task_window=3)  # not a power of two


def test_synchronize_idle_and_held(dev, stream):
    assert lib.pto_device_synchronize(dev, 1_000_000) == 0
    with held(dev, stream):
        notify(stream, 0)
        # Held by a latch: the bounded wait must run out.
        assert lib.pto_device_synchronize(dev, 2000) == -PTO_ETIMEDOUT
    assert lib.pto_device_synchronize(dev, 10_000_000) == 0


def test_cancel_drops_queued_work_and_device_stays_usable(dev, cq, stream, stream2):
    latch_tok = new_token()
    queued = [new_token() for _ in range(5)]
    with held(dev, stream, token=latch_tok) as h:
        h.hold(stream2)
        for i, t in enumerate(queued):
            notify(stream if i % 2 else stream2, t)
        dropped = lib.pto_device_cancel(dev)
        assert dropped >= len(queued)
        recs = cq.wait(latch_tok, *queued)
    assert all(recs[t].status == -PTO_ECANCELED for t in queued)
    assert recs[latch_tok].status in (0, -PTO_ECANCELED)
    assert lib.pto_device_status(dev) == 0
    assert lib.pto_device_synchronize(dev, 10_000_000) == 0
    # New work after the cancel runs normally on both streams.
    cq.drain_all()
    after = [new_token(), new_token()]
    notify(stream, after[0])
    notify(stream2, after[1])
    recs = cq.wait(*after)
    assert [recs[t].status for t in after] == [0, 0]


def _fds_and_threads():
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))


def test_close_with_queued_work_does_not_hang_or_leak():
    before = _fds_and_threads()
    for _ in range(3):
        dev = open_device(cores=2, copy_engines=2, aicpu_thread_num=2)
        streams = []
        for _ in range(3):
            out = ffi.new("pto_stream **")
            check(lib.pto_stream_create(dev, 0, out))
            streams.append(out[0])
        ptr = alloc(dev, 1 << 20)
        buf = bytearray(1 << 20)
        spin = builtin(dev, "spin")
        latch = ffi.new("pto_latch **")
        check(lib.pto_latch_create(dev, 0, latch))  # no timeout: close must release it
        for s in streams:
            check(lib.pto_stream_latch_wait(s, latch[0], new_token()))
            check(lib.pto_stream_copy_h2d(s, ptr, ffi.from_buffer(buf), len(buf), new_token()))
            launch(s, spin, 2, [50], new_token())
            notify(s, new_token())
        check(lib.pto_stream_free(streams[-1], ptr, new_token()))
        # One stream left running (a short spin), the others latched: close cancels and joins.
        lib.pto_device_close(dev)
    assert _fds_and_threads() == before


def test_device_lost_is_sticky_and_fails_queued_work_fast(dev, cq, stream, stream2):
    queued = [new_token() for _ in range(3)]
    with held(dev, stream):
        for t in queued:
            notify(stream, t)
        check(lib.pto_debug_lose_device(dev, b"simulated ECC storm"))
        # The latch is still held: lost-device failures must not wait for it.
        recs = cq.wait(*queued, timeout_s=5.0)
        assert all(recs[t].status == -PTO_EDEVLOST for t in queued)
    assert lib.pto_device_status(dev) == -PTO_EDEVLOST
    assert lib.pto_device_status(dev) == -PTO_EDEVLOST  # sticky
    with pytest.raises(PtoDeviceLost):
        check(lib.pto_stream_notify(stream2, new_token()))
    out = ffi.new("pto_stream **")
    with pytest.raises(PtoDeviceLost):
        check(lib.pto_stream_create(dev, 0, out))
    assert lib.pto_device_synchronize(dev, 1_000_000) == -PTO_EDEVLOST
    assert lib.pto_stream_synchronize(stream2, 1_000_000) == -PTO_EDEVLOST


def test_kernel_failing_with_devlost_loses_the_device(dev, cq, stream):
    fail = builtin(dev, "fail")
    t = new_token()
    launch(stream, fail, 1, [PTO_EDEVLOST], t)
    assert cq.wait(t)[t].status == -PTO_EDEVLOST
    assert lib.pto_device_status(dev) == -PTO_EDEVLOST
    with pytest.raises(PtoDeviceLost):
        check(lib.pto_stream_notify(stream, new_token()))
