"""Launch arguments are checked against device memory (kernel.c pti_args_check, memory.c pti_mem_find_stray).

A kernel, program or graph launch whose declared tensor argument is not an
address inside an allocation is refused at submit with -PTO_EINVAL and
nothing is queued: no core ever dereferences a stray address.
"""

from __future__ import annotations

import numpy as np
import pytest

from pypto_async._driver import check, ffi, lib
from pypto_async.errors import PtoArgumentError

from helpers.raw_driver import alloc, builtin, d2h, f32_bits, info, launch, sync

N = 256


def last_error() -> str:
    return ffi.string(lib.pto_last_error()).decode()


def refused(s, k, args) -> str:
    """Launch k with args on s, expecting a refusal that queues nothing; return the message."""
    before = lib.pto_stream_accepted(s)
    a = ffi.new("uint64_t[]", [int(x) for x in args])
    assert lib.pto_stream_launch(s, k, 1, a, len(args), 0) == -lib.PTO_EINVAL
    assert lib.pto_stream_accepted(s) == before
    return last_error()


@pytest.fixture
def buf(dev, stream):
    p = alloc(dev, N * 4, stream)
    yield p
    check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_a_builtin_launch_with_address_zero_is_refused_and_nothing_queued(dev, stream):
    msg = refused(stream, builtin(dev, "fill_f32"), [0, f32_bits(1.0), N])
    assert "fill_f32: argument 0 is a tensor" in msg and "0x0" in msg


def test_addresses_outside_every_allocation_are_refused(dev, stream, buf):
    base = info(dev).arena_base
    add = builtin(dev, "add_f32")
    far = base + info(dev).device_memory - 256  # inside the arena, never allocated
    for bad, which in ((far, 1), (buf + N * 4, 2), (base - 4096, 0), (12345, 1)):
        args = [buf, buf, buf, N]
        args[which] = bad
        msg = refused(stream, add, args)
        assert f"argument {which} is a tensor" in msg and f"0x{bad:x}" in msg


def test_an_address_inside_an_allocation_is_accepted_and_runs(dev, stream, buf, rng):
    """A tensor view's address (inside a block, not its start) is fine; the scalars are not checked."""
    out = np.full(N, np.nan, np.float32)
    launch(stream, builtin(dev, "fill_f32"), 2, [buf + 64 * 4, f32_bits(2.5), N - 64])
    check(lib.pto_stream_memset(stream, buf, 0, 64 * 4, 0))
    d2h(stream, out, buf)
    sync(stream)
    np.testing.assert_array_equal(out, np.r_[np.zeros(64), np.full(N - 64, 2.5)].astype(np.float32))


def test_an_address_freed_immediately_is_refused(dev, stream):
    p = alloc(dev, N * 4, stream)
    sync(stream)
    check(lib.pto_mem_free(dev, p))
    refused(stream, builtin(dev, "fill_f32"), [p, 0, N])


@pytest.mark.parametrize("how", ["pto_mem_free", "stream-ordered free"])
def test_an_address_accepted_before_is_refused_once_its_block_is_freed(dev, stream, how):
    """The check remembers the blocks it found (memory.c): a free forgets them, whoever checks next."""
    fill = builtin(dev, "fill_f32")
    p = alloc(dev, N * 4, stream)
    for _ in range(3):  # accepted: this thread's check has the block now
        launch(stream, fill, 1, [p + 16, f32_bits(1.0), N - 4])
    sync(stream)
    if how == "pto_mem_free":
        check(lib.pto_mem_free(dev, p))
    else:
        check(lib.pto_stream_free(stream, p, 0))
        sync(stream)  # the free command ran: the block is reclaimed
    msg = refused(stream, fill, [p + 16, f32_bits(1.0), N - 4])
    assert f"0x{p + 16:x}" in msg


def test_too_few_arguments_for_the_declared_kinds_are_refused(dev, stream, buf):
    msg = refused(stream, builtin(dev, "add_f32"), [buf, buf])
    assert "takes 4 arguments, got 2" in msg


def test_launch_after_checks_its_launch_too(dev, stream, stream2):
    e = ffi.new("pto_event **")
    check(lib.pto_event_create(dev, e))
    before = lib.pto_stream_accepted(stream)
    a = ffi.new("uint64_t[]", [0, 0, 4])
    rc = lib.pto_stream_launch_after(stream, stream2, e[0], 0, builtin(dev, "fill_f32"), 1, a, 3, 0)
    assert rc == -lib.PTO_EINVAL and "argument 0 is a tensor" in last_error()
    assert lib.pto_stream_accepted(stream) == before
    sync(stream2)
    lib.pto_event_destroy(e[0])


def test_declared_kinds_are_set_once(dev, stream, buf):
    k = builtin(dev, "noop")
    two = ffi.new("uint8_t[]", [lib.PTO_ARG_TENSOR, lib.PTO_ARG_SCALAR])
    assert lib.pto_kernel_set_arg_kinds(k, ffi.NULL, 0) == 0  # what the builtin declares already
    assert lib.pto_kernel_set_arg_kinds(k, two, 2) == -lib.PTO_EINVAL
    assert "declared already" in last_error()
    assert lib.pto_kernel_set_arg_kinds(k, ffi.new("uint8_t[]", [7]), 1) == -lib.PTO_EINVAL
    launch(stream, k, 1, [0, 0, 0])  # noop has no tensors: extra arguments pass unchecked
    sync(stream)


def test_a_graph_replay_with_a_stray_patched_address_queues_nothing(dev, stream, buf):
    """Checked before the replay queues anything: a refusal part way would leave half a replay."""
    g = ffi.new("pto_graph **")
    check(lib.pto_graph_create(dev, g))
    fill, add = builtin(dev, "fill_f32"), builtin(dev, "add_f32")
    inp = check(lib.pto_graph_add_input(g[0], N * 4))
    c0 = check(lib.pto_graph_add_launch(g[0], 0, fill, 1, ffi.new("uint64_t[]", [buf, f32_bits(1.0), N]), 3))
    c1 = check(lib.pto_graph_add_launch(g[0], 0, add, 1, ffi.new("uint64_t[]", [buf, buf, 0, N]), 4))
    check(lib.pto_graph_patch(g[0], c1, 2, inp, lib.PTO_GRAPH_WRITE))
    assert c0 == 0
    check(lib.pto_graph_instantiate(g[0]))
    check(lib.pto_stream_set_overflow(stream, 1))
    streams = ffi.new("pto_stream *[]", [stream])
    before = lib.pto_stream_accepted(stream)
    far = info(dev).arena_base + info(dev).device_memory - 4 * N * 4  # in the arena, never allocated
    rc = lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [far]), ffi.NULL, 1, 1 << 40)
    assert rc == -lib.PTO_EINVAL and "command 1 (add_f32): argument 2 is a tensor" in last_error()
    assert lib.pto_stream_accepted(stream) == before
    out = alloc(dev, N * 4, stream)
    check(lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [out]), ffi.NULL, 1, 1 << 40))
    got = np.full(N, np.nan, np.float32)
    d2h(stream, got, out)
    sync(stream)
    np.testing.assert_array_equal(got, np.full(N, 2.0, np.float32))
    check(lib.pto_stream_free(stream, out, 0))
    sync(stream)
    lib.pto_graph_destroy(g[0])


def test_a_replay_after_its_bound_or_fixed_block_is_freed_is_refused(dev, stream):
    """A replay with the bindings of an accepted one is checked again once a block it used left the arena."""
    g = ffi.new("pto_graph **")
    check(lib.pto_graph_create(dev, g))
    fill, add = builtin(dev, "fill_f32"), builtin(dev, "add_f32")
    fixed = alloc(dev, N * 4, stream)
    inp = check(lib.pto_graph_add_input(g[0], N * 4))
    check(lib.pto_graph_add_launch(g[0], 0, fill, 1, ffi.new("uint64_t[]", [fixed, f32_bits(1.5), N]), 3))
    c1 = check(lib.pto_graph_add_launch(g[0], 0, add, 1, ffi.new("uint64_t[]", [fixed, fixed, 0, N]), 4))
    check(lib.pto_graph_patch(g[0], c1, 2, inp, lib.PTO_GRAPH_WRITE))
    check(lib.pto_graph_instantiate(g[0]))
    check(lib.pto_stream_set_overflow(stream, 1))
    streams = ffi.new("pto_stream *[]", [stream])
    outs = [alloc(dev, N * 4, stream) for _ in range(2)]
    for out in (outs[0], outs[0], outs[1], outs[0]):  # the same bindings again, others, and back
        got = np.full(N, np.nan, np.float32)
        check(lib.pto_stream_memset(stream, out, 0xFF, N * 4, 0))  # poisoned: NaN
        check(lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [out]), ffi.NULL, 1, 1 << 40))
        d2h(stream, got, out)
        sync(stream)
        np.testing.assert_array_equal(got, np.full(N, 3.0, np.float32))
    check(lib.pto_stream_free(stream, outs[0], 0))
    sync(stream)
    before = lib.pto_stream_accepted(stream)
    rc = lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [outs[0]]), ffi.NULL, 1, 1 << 40)
    assert rc == -lib.PTO_EINVAL and "command 1 (add_f32): argument 2 is a tensor" in last_error()
    assert lib.pto_stream_accepted(stream) == before
    check(lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [outs[1]]), ffi.NULL, 1, 1 << 40))
    sync(stream)
    check(lib.pto_stream_free(stream, fixed, 0))
    sync(stream)
    before = lib.pto_stream_accepted(stream)
    rc = lib.pto_graph_replay(g[0], streams, 1, ffi.new("uint64_t[]", [outs[1]]), ffi.NULL, 1, 1 << 40)
    assert rc == -lib.PTO_EINVAL and "command 0 (fill_f32): argument 0 is a tensor" in last_error()
    assert lib.pto_stream_accepted(stream) == before
    check(lib.pto_stream_free(stream, outs[1], 0))
    sync(stream)
    lib.pto_graph_destroy(g[0])


def test_the_python_check_maps_the_refusal_to_an_argument_error(dev, stream):
    with pytest.raises(PtoArgumentError, match="not inside a live device allocation"):
        launch(stream, builtin(dev, "fill_f32"), 1, [0, 0, N])
