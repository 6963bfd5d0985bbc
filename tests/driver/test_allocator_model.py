"""native/src/memory.c: the allocator against a reference model of its free space.

The driver keeps free extents and handed-out blocks in ordered indexes
(treaps); the model below keeps them in plain sorted lists and follows the
documented policy: sizes rounded up to 256, first fit (the lowest extent
that fits), every freed extent merged with its neighbours.  Random
sequences of allocs and frees (immediate, and stream-ordered) must give the
same addresses, the same failures and the same counters.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import close_device, open_device
from pypto_async._driver import PTO_ENOMEM, check, ffi, lib

from helpers.raw_driver import info, mem_stats, sync

ALIGN = 256
ARENA = 1 << 20


class Model:
    """Free space as a sorted, coalesced list of (off, len); blocks by offset."""

    def __init__(self, size: int):
        self.free = [(0, size)]
        self.blocks: dict[int, int] = {}
        self.peak = 0

    def alloc(self, size: int) -> int | None:
        need = -(-size // ALIGN) * ALIGN
        for i, (off, n) in enumerate(self.free):
            if n >= need:
                if n == need:
                    del self.free[i]
                else:
                    self.free[i] = (off + need, n - need)
                self.blocks[off] = need
                self.peak = max(self.peak, self.in_use)
                return off
        return None

    def release(self, off: int) -> None:
        n = self.blocks.pop(off)
        i = bisect_left(self.free, (off, 0))
        if i < len(self.free) and off + n == self.free[i][0]:
            n += self.free.pop(i)[1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == off:
            off, n0 = self.free.pop(i - 1)
            n += n0
        insort(self.free, (off, n))

    @property
    def in_use(self) -> int:
        return sum(self.blocks.values())

    @property
    def largest(self) -> int:
        return max((n for _, n in self.free), default=0)

    def check_coalesced(self) -> None:
        for (a, n), (b, _) in zip(self.free, self.free[1:]):
            assert a + n < b


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(1, 96 * 1024)),
        st.tuples(st.just("free"), st.integers(0, 1 << 30)),
        st.tuples(st.just("sfree"), st.integers(0, 1 << 30)),
    ),
    min_size=1,
    max_size=120,
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_allocator_matches_the_first_fit_coalescing_model(seq):
    dev = open_device(device_memory=ARENA)
    try:
        base = info(dev).arena_base
        s = ffi.new("pto_stream **")
        check(lib.pto_stream_create(dev, 0, s))
        stream = s[0]
        model = Model(ARENA)
        live: list[int] = []
        out = ffi.new("pto_devptr *")
        for op, arg in seq:
            if op == "alloc":
                rc = lib.pto_mem_alloc(dev, arg, ffi.NULL, out)
                want = model.alloc(arg)
                if want is None:
                    assert rc == -PTO_ENOMEM
                else:
                    assert rc == 0 and out[0] - base == want
                    insort(live, want)
            elif live:
                off = live.pop(arg % len(live))
                if op == "free":
                    check(lib.pto_mem_free(dev, base + off))
                else:
                    # A stream-ordered free: reclaimed when its command executes.
                    check(lib.pto_stream_free(stream, base + off, 0))
                    sync(stream)
                model.release(off)
            model.check_coalesced()
            ms = mem_stats(dev)
            assert (ms.in_use, ms.allocations, ms.largest_free) == (model.in_use, len(model.blocks), model.largest)
            assert ms.peak == model.peak and ms.reserved == ms.in_use
        for off in live:
            check(lib.pto_mem_free(dev, base + off))
        lib.pto_stream_destroy(stream)
    finally:
        close_device(dev)
