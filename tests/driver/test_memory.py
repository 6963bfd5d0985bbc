"""native/src/memory.c: the arena allocator, stream-ordered free, stats, OOM."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import held, new_token
from pypto_async._driver import PTO_ENOMEM, check, ffi, lib
from pypto_async.errors import PtoArgumentError, PtoOutOfMemory

from helpers.raw_driver import NULL, alloc, d2h, free, info, mem_stats, new_event, sync

MiB = 1 << 20


def _try_alloc(dev, size, stream=NULL):
    out = ffi.new("pto_devptr *")
    rc = lib.pto_mem_alloc(dev, size, stream, out)
    return rc, out[0]


def test_alloc_alignment_size_and_stats(dev):
    i = info(dev)
    st0 = mem_stats(dev)
    assert st0.capacity == 64 * MiB
    assert (st0.in_use, st0.allocations, st0.reserved) == (0, 0, 0)
    sizes = [1, 100, 256, 257, 4096 + 3, MiB]
    ptrs = [alloc(dev, n) for n in sizes]
    size_out = ffi.new("uint64_t *")
    total = 0
    for p, n in zip(ptrs, sizes):
        assert p % 256 == 0
        assert i.arena_base <= p < i.arena_base + i.device_memory
        check(lib.pto_mem_size(dev, p, size_out))
        assert n <= size_out[0] and size_out[0] % 64 == 0
        total += size_out[0]
    assert len(set(ptrs)) == len(ptrs)
    st = mem_stats(dev)
    assert (st.allocations, st.in_use) == (len(sizes), total)
    assert st.reserved == total and st.peak >= total
    for p in ptrs:
        free(dev, p)
    st = mem_stats(dev)
    assert (st.allocations, st.in_use, st.reserved) == (0, 0, 0)
    assert st.peak >= total
    assert st.largest_free == st.capacity  # freed neighbours coalesced back into one extent


def test_bad_arguments(dev):
    rc, _ = _try_alloc(dev, 0)
    with pytest.raises(PtoArgumentError):
        check(rc)
    p = alloc(dev, 4096)
    with pytest.raises(PtoArgumentError):
        check(lib.pto_mem_free(dev, p + 64))  # not the start of an allocation
    with pytest.raises(PtoArgumentError):
        check(lib.pto_mem_size(dev, p + 64, ffi.new("uint64_t *")))
    free(dev, p)
    with pytest.raises(PtoArgumentError):
        check(lib.pto_mem_free(dev, p))  # double free


def test_host_ptr_aliases_device_memory(dev, stream, rng):
    p = alloc(dev, 4096)
    host = lib.pto_mem_host_ptr(dev, p)
    assert host != ffi.NULL
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    ffi.memmove(host, data.tobytes(), 4096)
    out = np.zeros(4096, dtype=np.uint8)
    d2h(stream, out, p)
    sync(stream)
    np.testing.assert_array_equal(out, data)
    free(dev, p)


def test_oom_is_an_error_and_the_device_keeps_working(dev, stream):
    rc, _ = _try_alloc(dev, 65 * MiB)
    assert rc == -PTO_ENOMEM
    with pytest.raises(PtoOutOfMemory):
        check(rc, "pto_mem_alloc")
    # Fill the arena, hit OOM, free, and allocate everything again.
    ptrs = []
    while True:
        rc, p = _try_alloc(dev, 4 * MiB, stream)
        if rc == -PTO_ENOMEM:
            break
        check(rc)
        ptrs.append(p)
    assert len(ptrs) == 16
    st = mem_stats(dev)
    assert st.alloc_failures == 2 and st.largest_free < 4 * MiB
    for p in ptrs:
        check(lib.pto_stream_free(stream, p, 0))
    sync(stream)
    st = mem_stats(dev)
    assert (st.allocations, st.pending_frees, st.largest_free) == (0, 0, st.capacity)
    big = alloc(dev, st.capacity)
    free(dev, big)


def test_debug_fail_alloc(dev):
    check(lib.pto_debug_fail_alloc(dev, 2))
    assert _try_alloc(dev, 256)[0] == -PTO_ENOMEM
    assert _try_alloc(dev, 256)[0] == -PTO_ENOMEM
    p = alloc(dev, 256)
    assert mem_stats(dev).alloc_failures == 2
    free(dev, p)


def test_stream_free_is_not_reused_by_other_streams_before_it_executes(dev, stream, stream2):
    x = alloc(dev, MiB, stream)
    with held(dev, stream):
        check(lib.pto_stream_free(stream, x, new_token()))
        st = mem_stats(dev)
        assert (st.pending_frees, st.allocations) == (1, 0)
        assert st.reserved >= st.in_use + MiB
        on_other = alloc(dev, MiB, stream2)
        on_none = alloc(dev, MiB)
        assert x not in (on_other, on_none)
        free(dev, on_other)
        free(dev, on_none)
    sync(stream)
    assert mem_stats(dev).pending_frees == 0


def test_stream_free_with_only_that_block_left(dev, stream, stream2):
    """Only the freed block fits: other streams get OOM until the free executes."""
    half = 32 * MiB
    x = alloc(dev, half, stream)
    y = alloc(dev, half, stream2)
    with held(dev, stream) as h:
        check(lib.pto_stream_free(stream, x, 0))
        assert _try_alloc(dev, half, stream2)[0] == -PTO_ENOMEM
        assert _try_alloc(dev, half)[0] == -PTO_ENOMEM
        # Same stream, free ordered behind the stream's own work only: reuse at once.
        again = alloc(dev, half, stream)
        assert again == x
        check(lib.pto_stream_free(stream, again, 0))
        assert _try_alloc(dev, half, stream2)[0] == -PTO_ENOMEM
        h.release()
        sync(stream)
    assert mem_stats(dev).pending_frees == 0
    z = alloc(dev, half, stream2)  # the free executed: any stream may have it now
    assert z == x
    free(dev, z)
    free(dev, y)


def test_stream_free_behind_an_event_wait_is_not_reused_early(dev, stream, stream2):
    half = 32 * MiB
    x = alloc(dev, half, stream)
    y = alloc(dev, half, stream2)
    ev = new_event(dev)
    with held(dev, stream2):
        check(lib.pto_stream_record(stream2, ev, 0))
        check(lib.pto_stream_wait_event(stream, ev, 0))
        check(lib.pto_stream_free(stream, x, 0))
        # A wait was pending on `stream` when the free was queued: not even
        # `stream` may take the block before the free executes.
        assert _try_alloc(dev, half, stream)[0] == -PTO_ENOMEM
    sync(stream)
    z = alloc(dev, half, stream)
    assert z == x
    free(dev, z)
    free(dev, y)
    lib.pto_event_destroy(ev)


def test_stream_free_of_unknown_pointer_is_refused(dev, stream):
    p = alloc(dev, 4096)
    with pytest.raises(PtoArgumentError):
        check(lib.pto_stream_free(stream, p + 256, 0))
    free(dev, p)
    sync(stream)


def test_stats_peak_and_pending(dev, stream):
    ptrs = [alloc(dev, MiB, stream) for _ in range(4)]
    with held(dev, stream):
        for p in ptrs:
            check(lib.pto_stream_free(stream, p, 0))
        st = mem_stats(dev)
        assert (st.allocations, st.in_use, st.pending_frees) == (0, 0, 4)
        assert st.reserved == 4 * MiB
        assert st.peak >= 4 * MiB
    sync(stream)
    st = mem_stats(dev)
    assert (st.reserved, st.pending_frees) == (0, 0)
    assert st.peak >= 4 * MiB


def test_lookup_finds_the_live_allocation_holding_an_address(dev, stream):
    """pto_mem_lookup: the ordered index's floor search, live blocks only."""
    i = info(dev)
    ptrs = [alloc(dev, n) for n in (300, 256, 5000, 1)]
    base, size = ffi.new("pto_devptr *"), ffi.new("uint64_t *")
    for p in ptrs:
        check(lib.pto_mem_size(dev, p, size))
        n = size[0]
        for addr in (p, p + 1, p + n - 1):
            assert lib.pto_mem_lookup(dev, addr, base, size) == 0
            assert (base[0], size[0]) == (p, n)
    assert lib.pto_mem_lookup(dev, i.arena_base + i.device_memory - 1, base, size) < 0  # free space
    assert lib.pto_mem_lookup(dev, 8, base, size) < 0  # not in the arena
    with held(dev, stream):
        check(lib.pto_stream_free(stream, ptrs[2], 0))
        assert lib.pto_mem_lookup(dev, ptrs[2] + 8, base, size) < 0  # its free is queued: not live
    sync(stream)
    for p in (ptrs[0], ptrs[1], ptrs[3]):
        free(dev, p)
    assert lib.pto_mem_lookup(dev, ptrs[0], base, size) < 0


def _resident_pages(addr: int, n: int) -> tuple[int, int]:
    """(resident, total) pages of [addr, addr + n), by mincore(2)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    lo = addr & ~(page - 1)
    pages = (addr + n - lo + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    rc = libc.mincore(ctypes.c_void_p(lo), ctypes.c_size_t(pages * page), vec)
    assert rc == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec), pages


def _kernel_release() -> tuple[int, int]:
    import os
    import re

    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(m[1]), int(m[2])) if m else (0, 0)


@pytest.mark.skipif(_kernel_release() < (5, 14), reason="MADV_POPULATE_WRITE needs Linux 5.14 (pages fault as before)")
def test_an_allocation_is_mapped_in_when_allocated(dev):
    """Device memory is there when allocated: the sim's arena pages of a block are mapped by
    pto_mem_alloc (MADV_POPULATE_WRITE), not by the first write, a page fault per page on
    whichever engine writes first (the demo's pipelined loop: a thousand in its timed loop)."""
    a = alloc(dev, 4 * MiB)
    b = alloc(dev, 3 * MiB + 100)
    for p, n in ((a, 4 * MiB), (b, 3 * MiB + 100)):
        resident, pages = _resident_pages(p, n)
        assert resident == pages, (resident, pages)
    free(dev, b)
    c = alloc(dev, MiB)  # below the populated mark: its pages are still there
    assert _resident_pages(c, MiB)[0] == _resident_pages(c, MiB)[1]
    free(dev, a)
    free(dev, c)
