"""pld.tensor.put / get with PyPTO's regions (dst_offsets, src_offsets, shape) and chunking (chunk_rows, chunk_cols).

The numbers are compared against numpy on random data (outputs poisoned);
the chunking is observed as the number of peer copies the devices ran
(``WorkerStats.copies``) and the bytes they moved (``bytes_peer``).
"""

# no ``from __future__ import annotations``: the programs' annotations name the factory's locals
import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async.errors import PtoArgumentError, PtoCompileError
from pypto_async.ir.distributed_compiled_program import DistributedConfig
from pypto_async.runtime import DistributedWorker, RunConfig
from pypto_async.runtime.distributed_runner import transfer_runs

R, C = 8, 16
rng = np.random.default_rng(606)


def _cfg(n: int) -> RunConfig:
    return RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))


def test_transfer_runs_cut_the_box_into_chunks_of_contiguous_runs():
    # a box of whole rows is one run; cut by chunk_rows, one run per chunk
    assert transfer_runs((R, C), (2, 0), (R, C), (0, 0), (4, C), 4) == [[(2 * C * 4, 0, 4 * C * 4)]]
    assert transfer_runs((R, C), (2, 0), (R, C), (0, 0), (4, C), 4, (3, 0)) == [
        [(2 * C * 4, 0, 3 * C * 4)], [(5 * C * 4, 3 * C * 4, C * 4)]]
    # half rows are a run each; chunk_cols cuts each row
    runs = transfer_runs((R, C), (0, 8), (R, C), (1, 0), (2, 8), 4)
    assert runs == [[(8 * 4, C * 4, 32), (C * 4 + 8 * 4, 2 * C * 4, 32)]]
    runs = transfer_runs((R, C), (0, 0), (R, C), (0, 0), (2, C), 4, (1, 4))
    assert len(runs) == 8 and all(len(c) == 1 and c[0][2] == 16 for c in runs)
    assert sorted(d for c in runs for d, _, _ in c) == [i * 16 for i in range(8)]
    # oversized chunks are clamped to the extent
    assert transfer_runs((R, C), (0, 0), (R, C), (0, 0), (R, C), 4, (99, 99)) == [[(0, 0, R * C * 4)]]


def _program(n: int, dst_offsets, src_offsets, shape, chunks=(0, 0), via="put", atomic=pld.AtomicType.None_):
    """Rank r stages x[r] in window src and sends the box to rank r+1's dst (put) or pulls rank r-1's (get)."""
    cr, cc = chunks

    @pl.jit.incore
    def step(x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
             src: pld.DistributedTensor[[R, C], pl.FP32], dst: pld.DistributedTensor[[R, C], pl.FP32],
             sig: pld.DistributedTensor[[n], pl.INT32]):
        me = pld.rank(pld.get_comm_ctx(src))
        src = pl.store(pl.load(x, [0, 0], [R, C]), [0, 0], src)
        dst = pl.store(pl.mul(pl.load(x, [0, 0], [R, C]), -1.0), [0, 0], dst)  # what the box leaves alone
        sig = pld.tensor.barrier(sig)
        if via == "put":
            pld.tensor.put(dst, (me + 1) % n, src, dst_offsets, src_offsets, shape, atomic=atomic, chunk_rows=cr,
                           chunk_cols=cc)
            sig = pld.tensor.barrier(sig)
            y = pl.store(pl.load(dst, [0, 0], [R, C]), [0, 0], y)
        else:
            # a plain tensor as the destination: y starts as -x, the box of it comes from the peer
            y = pl.store(pl.mul(pl.load(x, [0, 0], [R, C]), -1.0), [0, 0], y)
            pld.tensor.get(y, (me - 1) % n, src, dst_offsets, src_offsets, shape, chunk_rows=cr, chunk_cols=cc)
        return y

    @pl.jit
    def chip(x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
             src: pld.DistributedTensor[[R, C], pl.FP32], dst: pld.DistributedTensor[[R, C], pl.FP32],
             sig: pld.DistributedTensor[[n], pl.INT32]):
        return step(x, y, src, dst, sig)

    @pl.jit.host
    def host(x: pl.Tensor[[n, R, C], pl.FP32], y: pl.Out[pl.Tensor[[n, R, C], pl.FP32]]):
        sb = pld.alloc_window_buffer([R, C], dtype=pl.FP32)
        db = pld.alloc_window_buffer([R, C], dtype=pl.FP32)
        gb = pld.alloc_window_buffer([n], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            chip(x[r], y[r], pld.window(sb, [R, C]), pld.window(db, [R, C]), pld.window(gb, [n]), device=r)

    return host


def _run(n, *args, **kw):
    x = rng.standard_normal((n, R, C)).astype(np.float32)
    y = np.full(x.shape, np.nan, np.float32)
    compiled = _program(n, *args, **kw).compile(x, y, config=_cfg(n))
    with DistributedWorker(list(range(n))) as dw:
        before = [(w.stats().copies, w.stats().bytes_peer) for w in dw.workers]
        dw.run(compiled, x, y)
        after = [(w.stats().copies, w.stats().bytes_peer) for w in dw.workers]
    copies = [a[0] - b[0] for a, b in zip(after, before)]
    moved = [a[1] - b[1] for a, b in zip(after, before)]
    return x, y, copies, moved


def _want(x, dst_offsets, src_offsets, shape, via="put"):
    n = x.shape[0]
    want = -x.copy()
    (d0, d1), (s0, s1), (h, w) = dst_offsets, src_offsets, shape
    for r in range(n):
        peer = (r - 1) % n  # rank r's box came from rank r-1
        want[r, d0:d0 + h, d1:d1 + w] = x[peer, s0:s0 + h, s1:s1 + w]
    return want


@pytest.mark.parametrize("via", ["put", "get"])
def test_a_region_moves_only_its_box_and_chunks_are_one_peer_copy_per_run(via):
    n = 2
    box = ((1, 4), (3, 0), (4, 8))  # dst_offsets, src_offsets, shape: half rows, so one run per row
    x, y, whole, moved = _run(n, *box, via=via)
    np.testing.assert_array_equal(y, _want(x, *box))
    assert moved == [4 * 8 * 4] * n  # the box's bytes, on the rank that queued the copy
    x, y, chunked, moved2 = _run(n, *box, chunks=(2, 4), via=via)
    np.testing.assert_array_equal(y, _want(x, *box))
    assert moved2 == moved
    # 4 rows of 8: four runs unchunked; chunks of [2, 4]: 4 chunks of two 4-element runs, 8 copies
    assert [c - w for c, w in zip(chunked, whole)] == [8 - 4] * n


def test_an_atomic_put_of_a_box_adds_it_into_the_peers_window_and_leaves_the_rest():
    n = 2
    box = ((2, 0), (0, 8), (3, 8))
    x, y, _, moved = _run(n, *box, chunks=(1, 0), atomic=pld.AtomicType.Add)
    want = -x.copy()
    for r in range(n):
        want[r, 2:5, 0:8] += x[(r - 1) % n, 0:3, 8:16]
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert moved == [3 * 8 * 4] * n  # only the box crossed, into a temporary of the peer


def test_whole_windows_move_in_one_copy_or_one_per_row_chunk():
    n = 2
    full = ((0, 0), (0, 0), (R, C))
    x, y, one, moved = _run(n, *full)
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))
    x, y, rows, moved2 = _run(n, *full, chunks=(1, 0))
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))
    assert moved == moved2 == [R * C * 4] * n
    assert [r - o for r, o in zip(rows, one)] == [R - 1] * n


def test_put_and_get_options_are_checked_at_compile_time():
    x = np.zeros((2, R, C), np.float32)

    def compile_(*args, **kw):
        return _program(2, *args, **kw).compile(x, x.copy(), config=_cfg(2))

    with pytest.raises(PtoCompileError, match="pipeline=True needs both"):
        @pl.jit.incore
        def _k(w: pld.DistributedTensor[[R, C], pl.FP32]):
            pld.tensor.put(w, 0, w, chunk_rows=2, pipeline=True)
        _host_of(_k)
    with pytest.raises(PtoCompileError, match="given together"):
        compile_((0, 0), None, (R, C))
    with pytest.raises(PtoCompileError, match=r"outside \[0, 16\)"):
        compile_((0, 12), (0, 0), (2, 8))
    with pytest.raises(PtoCompileError, match="chunk_rows must be an int >= 0"):
        compile_((0, 0), (0, 0), (R, C), chunks=(-1, 0))


def _host_of(kernel):
    @pl.jit
    def chip(w: pld.DistributedTensor[[R, C], pl.FP32]):
        return kernel(w)

    @pl.jit.host
    def host(x: pl.Tensor[[2, R, C], pl.FP32]):
        b = pld.alloc_window_buffer([R, C], dtype=pl.FP32)
        for r in pl.range(pld.world_size()):
            chip(pld.window(b, [R, C]), device=r)

    return host.compile(np.zeros((2, R, C), np.float32), config=_cfg(2))


def test_copy_parts_refuses_a_part_outside_a_tensor():
    from pypto_async.runtime import _peer

    with DistributedWorker([0, 1]) as dw:
        a = dw.workers[0].alloc_tensor(16, np.float32, init=np.arange(16, dtype=np.float32))
        b = dw.workers[1].alloc_tensor(16, np.float32, init=np.zeros(16, np.float32))
        with pytest.raises(PtoArgumentError, match="outside"):
            _peer.copy_parts(b, a, [(60, 0, 8)])
        _peer.copy_parts(b, a, [(0, 32, 16), (32, 0, 8)]).sync()
        np.testing.assert_array_equal(b.numpy(), np.r_[8, 9, 10, 11, np.zeros(4), 0, 1, np.zeros(6)])
