"""Launches ordered by the driver alone (``pto_stream_launch_ordered``), and what it declines.

With automatic ordering and the sanitizer off, a launch on DeviceTensors its
stream used before goes to the driver with each argument's access; the
driver queues the edges it needs with the launch, in one call.  These tests
check that crossing launches do take that call and are ordered, that one
call queues several edges, that it declines (nothing queued) what the
runtime must order itself, and that the driver's path and the general one
decide alike on random programs (same edges, same counts, same numbers).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pypto_async._driver import lib
from pypto_async.runtime import ChipWorker, _dispatch
from pypto_async.testing import hold

from conftest import assert_no_device_memory

N = 64
POISON = np.float32(np.nan)


def rand(rng, n: int = N) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


@pytest.fixture
def worker(config):
    """Automatic ordering on its own: the sanitizer off, as users run it."""
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        yield w
        assert_no_device_memory(w)


@pytest.fixture
def calls(monkeypatch):
    """Counts the driver's launch calls and those it declined (with ``force``: declines them all)."""

    class Counter:
        calls = 0
        declined = 0
        force = False

    real = _dispatch._hz_launch

    def counting(*args):
        Counter.calls += 1
        rc = lib.PTO_HZ_DECLINED if Counter.force else real(*args)
        Counter.declined += rc == lib.PTO_HZ_DECLINED
        return rc

    monkeypatch.setattr(_dispatch, "_hz_launch", counting)
    return Counter


def test_crossing_launches_are_ordered_by_the_driver(worker, kernels, calls):
    """b = 2a on s1, a = 2b on s2, no explicit waits: RAW, WAR and WAW every launch, s1 held."""
    rng = np.random.default_rng(1)
    scale = worker.register(kernels.get("scale", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand(rng)
    a = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s1)
    scale.submit(a, 1.0, b, stream=s1)
    scale.submit(b, 1.0, a, stream=s2)  # first uses on s2: the general path
    inferred = worker.stats().inferred_waits
    before = calls.calls
    rounds = 12
    with hold(s1) as latch:
        for _ in range(rounds):
            scale.submit(a, 2.0, b, stream=s1)
            scale.submit(b, 2.0, a, stream=s2)
        assert not s2.query()  # everything on s2 waits for the held s1
        latch.release()
    assert calls.calls - before == 2 * rounds and calls.declined == 0
    assert worker.stats().inferred_waits - inferred == 2 * rounds
    worker.sync(timeout=10)
    np.testing.assert_allclose(a.numpy(), x * np.float32(4.0) ** rounds, rtol=1e-5)
    for t in (a, b):
        t.free()
    for s in (s1, s2):
        s.close()


def test_one_driver_call_queues_two_edges(worker, kernels, calls):
    rng = np.random.default_rng(2)
    scale = worker.register(kernels.get("scale", N))
    add = worker.register(kernels.get("add", N))
    s1, s2, s3 = worker.stream(), worker.stream(), worker.stream()
    x, y = rand(rng), rand(rng)
    xt = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    yt = worker.alloc_tensor(N, np.float32, init=y, stream=s2)
    a = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s2)
    out = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s3)
    for _ in range(2):  # first uses: the general path
        scale.submit(xt, 1.0, a, stream=s1)
        scale.submit(yt, 1.0, b, stream=s2)
        add.submit(a, b, out, stream=s3)
    worker.sync(timeout=10)
    with hold(s1) as l1, hold(s2) as l2:
        scale.submit(xt, 2.0, a, stream=s1)  # (each waits for the read on s3: WAR)
        scale.submit(yt, 3.0, b, stream=s2)
        inferred, before = worker.stats().inferred_waits, calls.calls
        add.submit(a, b, out, stream=s3)
        assert calls.calls == before + 1 and calls.declined == 0  # one driver call...
        assert worker.stats().inferred_waits == inferred + 2  # ... with two edges: s1 and s2
        l1.release()
        s1.sync(timeout=10)
        assert not s3.query()  # still waiting for s2
        l2.release()
    worker.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 2 * x + 3 * y, rtol=1e-6)
    for t in (xt, yt, a, b, out):
        t.free()
    for s in (s1, s2, s3):
        s.close()


def test_an_edge_from_a_closed_stream_is_declined_and_waits_for_its_end(worker, kernels, calls):
    rng = np.random.default_rng(3)
    scale = worker.register(kernels.get("scale", N))
    inc = worker.register(kernels.get("inc", N))
    s1, s2 = worker.stream(), worker.stream()
    x = rand(rng)
    a = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    out = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s2)
    scale.submit(a, 1.0, out, stream=s2)  # a known on s2
    worker.sync(timeout=10)
    with hold(s1) as latch:
        inc.submit(a, stream=s1)
        s1.close()
        declined = calls.declined
        scale.submit(a, 2.0, out, stream=s2)  # must wait for the held increment on closed s1
        assert calls.declined == declined + 1
        assert not s2.query()
        latch.release()
    worker.sync(timeout=10)
    np.testing.assert_allclose(out.numpy(), 2 * (x + 1), rtol=1e-6)
    for t in (a, out):
        t.free()
    s2.close()


def _random_program(w, kernels, seed: int) -> tuple[list, tuple]:
    """A random program of launches over 3 streams and 4 tensors, no waits; its results and counts."""
    rng = np.random.default_rng(seed)
    scale = w.register(kernels.get("scale", N))
    add = w.register(kernels.get("add", N))
    streams = [w.stream() for _ in range(3)]
    init = [rand(rng) for _ in range(4)]
    ts = [w.alloc_tensor(N, np.float32, init=x, stream=streams[0]) for x in init]
    ref = [x.copy() for x in init]
    with hold(streams[0]) as latch:  # the first writer held: whatever runs too early reads stale data
        for _ in range(40):
            s = streams[rng.integers(3)]
            i, j, k = rng.choice(4, size=3, replace=False)
            if rng.random() < 0.5:
                f = np.float32(rng.choice([0.5, 2.0, -1.0]))
                scale.submit(ts[i], float(f), ts[k], stream=s)
                ref[k] = f * ref[i]
            else:
                add.submit(ts[i], ts[j], ts[k], stream=s)
                ref[k] = ref[i] + ref[j]
        latch.release()
    w.sync(timeout=10)
    got = [t.numpy() for t in ts]
    stats = w.stats()
    for t in ts:
        t.free()
    for s in streams:
        s.close()
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5)
    return got, (stats.inferred_waits, stats.skipped_waits)


@pytest.mark.parametrize("seed", range(4))
def test_the_driver_path_and_the_general_path_decide_alike(config, kernels, calls, seed):
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        got, counts = _random_program(w, kernels, seed)
    taken = calls.calls - calls.declined
    calls.force = True
    with ChipWorker(dataclasses.replace(config, sanitize="off")) as w:
        got_general, counts_general = _random_program(w, kernels, seed)
    assert taken > 0
    assert counts == counts_general
    for a, b in zip(got, got_general):
        np.testing.assert_array_equal(a, b)


def test_a_handle_that_declares_other_accesses_for_the_same_kernel_is_ordered_the_general_way(worker, kernels,
                                                                                                  calls):
    """The driver keeps one declaration of a kernel's accesses: a second handle that differs goes the general way."""
    from pypto_async._signature import INOUT, ParamSpec

    rng = np.random.default_rng(4)
    copy = kernels.get("copy", N)
    src, dst = copy.params
    # The same library and symbol, its destination declared read too (InOut): another access.
    variant = dataclasses.replace(copy, params=(src, ParamSpec(dst.name, INOUT, dst.shape, dst.dtype)))
    plain, other = worker.register(copy), worker.register(variant)
    assert plain._kptr == other._kptr
    assert plain._ordered and not other._ordered
    s1, s2 = worker.stream(), worker.stream()
    x = rand(rng)
    a = worker.alloc_tensor(N, np.float32, init=x, stream=s1)
    b = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s1)
    c = worker.alloc_tensor(N, np.float32, init=np.full(N, POISON), stream=s1)
    plain.submit(a, b, stream=s1)
    other.submit(b, c, stream=s2)  # first uses on s2
    worker.sync(timeout=10)
    before = calls.calls
    with hold(s1) as latch:
        plain.submit(c, b, stream=s1)  # b = c, held
        other.submit(b, a, stream=s2)  # a = b: reads b after the held write (RAW), the general way
        assert calls.calls == before + 1  # only the plain handle's launch went to the driver's call
        assert not s2.query()
        latch.release()
    worker.sync(timeout=10)
    np.testing.assert_array_equal(a.numpy(), x)
    np.testing.assert_array_equal(b.numpy(), x)
    for t in (a, b, c):
        t.free()
    for s in (s1, s2):
        s.close()
