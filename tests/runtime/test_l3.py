"""PyPTO's multi-chip (L3) names: pld, @pl.jit.host, DistributedConfig/DistributedCompiledProgram, callbacks.

Every program here runs on several of this process's simulated devices; the
numbers are compared against numpy on random data, outputs poisoned first.
The last tests run PyPTO's own L3 programs from a checkout at /tmp/pypto
(skipped when it is absent).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError, PtoError, PtoInvalidStateError, PtoNotSupported
from pypto_async.ir.distributed_compiled_program import DistributedCompiledProgram, DistributedConfig
from pypto_async.runtime import DistributedWorker, RunConfig
from pypto_async.language.distributed_trace import CommOp
from pypto_async.runtime.distributed_runner import _tensor_from_continuous
from helpers.tiers import tiered

ROOT = Path(__file__).resolve().parents[2]
NR = pl.dynamic("NR")
C = 16
W = 3  # the world of the tests whose windows have one row per rank

rng = np.random.default_rng(30)


def _cfg(n: int) -> RunConfig:
    return RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))


def _poisoned(shape):
    return np.full(shape, np.nan, np.float32)


# -- ranks, dispatch, scalars ------------------------------------------------------------------


@pl.jit.incore
def _scale(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]], k: pl.Scalar[pl.INT32]):
    t = pl.load(x, [0, 0], [1, C])
    y = pl.store(pl.add(pl.mul(t, pl.cast(k, target_type=pl.FP32)), 0.5), [0, 0], y)
    return y


@pl.jit
def _scale_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]], k: pl.Scalar[pl.INT32]):
    return _scale(x, y, k)


@pl.jit.host
def scale_all(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
    for r in pl.range(pld.world_size()):
        _scale_chip(x[r], y[r], r + 2, device=r)


@pytest.mark.parametrize("n", [1, 3])
def test_host_dispatches_each_rank_with_its_scalar(n):
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    compiled = scale_all.compile(x, y, config=_cfg(n))
    assert isinstance(compiled, DistributedCompiledProgram)
    assert [d.rank for d in compiled.dispatches] == list(range(n))
    compiled(x, y, config=RunConfig(platform="sim"))
    want = x * (np.arange(n, dtype=np.float32) + 2).reshape(n, 1, 1) + 0.5
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_compile_writes_the_plan_and_run_checks_args_before_queueing():
    x = rng.standard_normal((2, 1, C)).astype(np.float32)
    compiled = scale_all.compile(x, _poisoned((2, 1, C)), config=_cfg(2))
    plan = (compiled.output_dir / "plan.json").read_text()
    assert '"rank": 1' in plan and "_scale_chip" in plan
    y = _poisoned((2, 1, C))
    with pytest.raises(PtoArgumentError, match="compiled for"):
        compiled(x[:, :, :8].copy(), y)
    with pytest.raises(PtoArgumentError, match="takes 2 arguments"):
        compiled(x)
    with pytest.raises(PtoArgumentError, match="compiled for devices"):
        compiled(x, y, config=_cfg(3))
    assert np.isnan(y).all()  # nothing ran
    compiled(x, y)  # the program still runs
    np.testing.assert_allclose(y, x * np.array([2, 3], np.float32).reshape(2, 1, 1) + 0.5, rtol=1e-6)


def test_bad_config_and_device_are_refused():
    with pytest.raises(PtoArgumentError, match="distinct"):
        DistributedConfig(device_ids=[0, 0])
    with pytest.raises(PtoArgumentError, match="num_sub_workers"):
        DistributedConfig(device_ids=[0], num_sub_workers=-1)
    with pytest.raises(PtoArgumentError, match="aicpu_thread_num"):
        DistributedConfig(device_ids=[0], aicpu_thread_num=1)
    with pytest.raises(PtoArgumentError, match="runtime"):
        DistributedConfig(device_ids=[0], runtime=3)
    # PyPTO's fields, in its order: the runtime flavour and the scheduler threads are taken
    cfg = DistributedConfig([0, 1], 0, "tensormap_and_ringbuffer", 4)
    assert (cfg.world_size, cfg.runtime, cfg.aicpu_thread_num) == (2, "tensormap_and_ringbuffer", 4)
    with pytest.raises(PtoArgumentError, match="DistributedConfig"):
        RunConfig(distributed_config=[0, 1])

    @pl.jit.host
    def bad_device(x: pl.Tensor[[2, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[2, 1, C], pl.FP32]]):
        _scale_chip(x[0], y[0], 1, device=2)

    x = np.zeros((2, 1, C), np.float32)
    with pytest.raises(PtoCompileError, match="device=2"):
        bad_device.compile(x, x.copy(), config=_cfg(2))


# -- remote_load / remote_store behind a barrier -------------------------------------------------


@pl.jit.incore
def _shift_load(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                data: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32],
                k: pl.Scalar[pl.INT32]):
    ctx = pld.get_comm_ctx(data)
    me, n = pld.rank(ctx), pld.nranks(ctx)
    t = pl.load(x, [0, 0], [1, C])
    data = pl.store(pl.mul(t, 2.0), [0, 0], data)
    sig = pld.tensor.barrier(sig)
    got = pld.tile.remote_load(data, peer=(me + 1) % n, offsets=[0, 0], shape=[1, C])
    mine = pl.load(x, [0, 0], [1, C])
    y = pl.store(pl.add(got, mine), [0, 0], y)
    return y


@pl.jit
def _shift_load_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                     data: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32],
                     k: pl.Scalar[pl.INT32]):
    return _shift_load(x, y, data, sig, k)


@pl.jit.host
def shift_load(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
    buf = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([W, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _shift_load_chip(x[r], y[r], pld.window(buf, [1, C], dtype=pl.FP32), pld.window(sig, [W, 1], dtype=pl.INT32),
                         r, device=r)


@pytest.mark.slow
@tiered("n", [2, 3], fast=[3])
def test_remote_load_reads_the_peers_window_through_a_peer_copy(n):
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    compiled = shift_load.compile(x, y, config=_cfg(n))
    d0 = compiled.dispatches[0]
    assert [s.kind if isinstance(s, CommOp) else "segment" for s in d0.compiled] == [
        "segment", "barrier", "remote_load", "segment"]
    with DistributedWorker(list(range(n))) as dw:
        before = [_peer_bytes(w) for w in dw.workers]
        dw.run(compiled, x, y)
        moved = [_peer_bytes(w) - b for w, b in zip(dw.workers, before)]
    np.testing.assert_allclose(y, 2 * np.roll(x, -1, axis=0) + x, rtol=1e-6)
    assert sum(moved) >= n * C * 4  # each rank's window crossed to its neighbour by a driver peer copy


def _peer_bytes(worker) -> int:
    return worker.stats().bytes_peer


@pl.jit.incore
def _scatter_rows(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[W, C], pl.FP32]],
                  rows: pld.DistributedTensor[[W, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32]):
    ctx = pld.get_comm_ctx(rows)
    me = pld.rank(ctx)
    t = pl.load(x, [0, 0], [1, C])
    for p in pl.range(pld.nranks(ctx)):
        if p != me:
            pld.tile.remote_store(t, rows, peer=p, offsets=[me, 0])
    sig = pld.tensor.barrier(sig)
    back = pl.load(rows, [0, 0], [W, C])
    y = pl.store(back, [0, 0], y)
    return y


@pl.jit
def _scatter_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[W, C], pl.FP32]],
                  rows: pld.DistributedTensor[[W, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32]):
    return _scatter_rows(x, y, rows, sig)


@pl.jit.host
def scatter_rows(x: pl.Tensor[[W, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[W, W, C], pl.FP32]]):
    rows = pld.alloc_window_buffer([W, C], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([W, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _scatter_chip(x[r], y[r], pld.window(rows, [W, C], dtype=pl.FP32), pld.window(sig, [W, 1], dtype=pl.INT32),
                      device=r)


@pytest.mark.slow
def test_remote_store_writes_one_box_of_each_peer_and_leaves_the_rest():
    x = rng.standard_normal((W, 1, C)).astype(np.float32)
    y = _poisoned((W, W, C))
    scatter_rows(x, y, config=_cfg(W))
    want = np.zeros((W, W, C), np.float32)  # windows start zeroed
    for r in range(W):
        for p in range(W):
            if p != r:
                want[r, p] = x[p, 0]
    np.testing.assert_array_equal(y, want)


# -- put / get, notify / wait ------------------------------------------------------------------


@pl.jit.incore
def _prefix(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
            acc: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
            sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    ctx = pld.get_comm_ctx(acc)
    me, n = pld.rank(ctx), pld.nranks(ctx)
    if me > 0:
        pld.system.wait(sig, offsets=[0, 0], expected=me, cmp=pld.WaitCmp.Eq)
    total = pl.add(pl.load(inbox, [0, 0], [1, C]), pl.load(x, [0, 0], [1, C]))
    acc = pl.store(total, [0, 0], acc)
    if me + 1 < n:
        pld.tensor.put(inbox, peer=me + 1, src=acc, atomic=pld.AtomicType.None_)
        pld.system.notify(sig, peer=me + 1, offsets=[0, 0], value=me + 1, op=pld.NotifyOp.Set)
    out = pl.load(acc, [0, 0], [1, C])
    y = pl.store(out, [0, 0], y)
    return y


@pl.jit
def _prefix_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                 acc: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
                 sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    return _prefix(x, y, acc, inbox, sig)


@pl.jit.host
def prefix(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
    acc = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
    inbox = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _prefix_chip(x[r], y[r], pld.window(acc, [1, C]), pld.window(inbox, [1, C]), pld.window(sig, [1, 1]),
                     device=r)


@pytest.mark.slow
def test_a_chain_of_put_notify_wait_computes_a_prefix_sum():
    n = 4
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    # Rank 3 waits for 2, which waits for 1: the last rank is queued first and must be held back.
    prefix(x, y, config=_cfg(n))
    np.testing.assert_allclose(y, np.cumsum(x, axis=0), rtol=1e-5, atol=1e-6)


@pl.jit.incore
def _gather_add(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                src: pld.DistributedTensor[[1, C], pl.FP32], dst: pld.DistributedTensor[[1, C], pl.FP32],
                got: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    ctx = pld.get_comm_ctx(src)
    me, n = pld.rank(ctx), pld.nranks(ctx)
    src = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], src)
    pld.tensor.put(dst, peer=0, src=src, atomic=pld.AtomicType.Add)  # every rank adds into rank 0's dst
    pld.system.notify(sig, peer=0, offsets=[0, 0], value=1, op=pld.NotifyOp.AtomicAdd)
    if me == 0:
        pld.system.wait(sig, offsets=[0, 0], expected=n, cmp=pld.WaitCmp.Ge)
    sig = pld.tensor.barrier(sig)
    got = pld.tensor.get(got, peer=0, src=dst)  # and every rank pulls the sum back
    y = pl.store(pl.load(got, [0, 0], [1, C]), [0, 0], y)
    return y


@pl.jit
def _gather_add_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                     src: pld.DistributedTensor[[1, C], pl.FP32], dst: pld.DistributedTensor[[1, C], pl.FP32],
                     got: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    return _gather_add(x, y, src, dst, got, sig)


@pl.jit.host
def gather_add(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
    bufs = [pld.alloc_window_buffer([1, C], dtype=pl.FP32) for _ in range(3)]
    sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _gather_add_chip(x[r], y[r], *(pld.window(b, [1, C]) for b in bufs), pld.window(sig, [1, 1]), device=r)


@pytest.mark.slow
def test_atomic_put_and_notify_add_up_and_get_pulls_the_sum():
    n = 3
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    gather_add(x, y, config=_cfg(n))
    np.testing.assert_allclose(y, np.broadcast_to(x.sum(axis=0), (n, 1, C)), rtol=1e-5, atol=1e-6)


@pl.jit.incore
def _stuck(y: pl.Out[pl.Tensor[[1, C], pl.FP32]], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    pld.system.wait(sig, offsets=[0, 0], expected=1, cmp=pld.WaitCmp.Ge)  # nobody notifies
    y = pl.store(pl.full([1, C], 1.0, pl.FP32), [0, 0], y)
    return y


@pl.jit
def _stuck_chip(y: pl.Out[pl.Tensor[[1, C], pl.FP32]], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    return _stuck(y, sig)


@pl.jit.host
def stuck(y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
    sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _stuck_chip(y[r], pld.window(sig, [1, 1]), device=r)


@pytest.mark.slow
def test_a_wait_nobody_satisfies_is_a_deadlock_error_and_the_worker_works_on():
    y = _poisoned((2, 1, C))
    bad = stuck.compile(y, config=_cfg(2))
    x = rng.standard_normal((2, 1, C)).astype(np.float32)
    good = shift_load.compile(x, y, config=_cfg(2))
    with DistributedWorker([0, 1]) as dw:
        with pytest.raises(PtoInvalidStateError, match="deadlocked: rank 0 at wait"):
            dw.run(bad, y)
        assert np.isnan(y).all()
        dw.run(good, x, y)
    np.testing.assert_allclose(y, 2 * np.roll(x, -1, axis=0) + x, rtol=1e-6)


@pl.jit.incore
def _reduce(x: pl.Tensor[[4, C], pl.FP32], y: pl.Out[pl.Tensor[[4, C], pl.FP32]],
            win: pld.DistributedTensor[[4, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32],
            k: pl.Scalar[pl.INT32]):
    win = pl.store(pl.load(x, [0, 0], [4, C]), [0, 0], win)
    win = pld.tensor.allreduce(win, sig, op=pld.ReduceOp.Sum)
    total = pl.load(win, [0, 0], [4, C])
    win = pl.store(pl.mul(pl.load(x, [0, 0], [4, C]), -1.0), [0, 0], win)
    win = pld.tensor.allreduce(win, sig, op=pld.ReduceOp.Max, mode="ring")
    y = pl.store(pl.add(total, pl.load(win, [0, 0], [4, C])), [0, 0], y)
    return y


@pl.jit
def _reduce_chip(x: pl.Tensor[[4, C], pl.FP32], y: pl.Out[pl.Tensor[[4, C], pl.FP32]],
                 win: pld.DistributedTensor[[4, C], pl.FP32], sig: pld.DistributedTensor[[W, 1], pl.INT32],
                 k: pl.Scalar[pl.INT32]):
    return _reduce(x, y, win, sig, k)


@pl.jit.host
def reduce_all(x: pl.Tensor[[NR, 4, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 4, C], pl.FP32]]):
    win = pld.alloc_window_buffer([4, C], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([W, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _reduce_chip(x[r], y[r], pld.window(win, [4, C]), pld.window(sig, [W, 1]), r, device=r)


@pytest.mark.slow
def test_allreduce_sums_and_maxes_every_ranks_window_in_place():
    n = 3
    x = rng.standard_normal((n, 4, C)).astype(np.float32)
    y = _poisoned((n, 4, C))
    reduce_all(x, y, config=_cfg(n))
    want = x.sum(axis=0) + (-x).max(axis=0)
    np.testing.assert_allclose(y, np.broadcast_to(want, (n, 4, C)), rtol=1e-5, atol=1e-6)


# -- pl.read of a window, pl.write ------------------------------------------------------------------


@pl.jit.incore
def _tally(y: pl.Out[pl.Tensor[[W, 1], pl.INT32]], sig: pld.DistributedTensor[[W, 1], pl.INT32],
           k: pl.Scalar[pl.INT32]):
    ctx = pld.get_comm_ctx(sig)
    me = pld.rank(ctx)
    for p in pl.range(pld.nranks(ctx)):
        pld.system.notify(sig, peer=p, offsets=[me, 0], value=me + 10, op=pld.NotifyOp.Set)
    sig = pld.tensor.barrier(sig)
    for i in pl.range(W):
        pl.write(y, [i, 0], pl.read(sig, [i, 0]))
    return y


@pl.jit
def _tally_chip(y: pl.Out[pl.Tensor[[W, 1], pl.INT32]], sig: pld.DistributedTensor[[W, 1], pl.INT32],
                k: pl.Scalar[pl.INT32]):
    return _tally(y, sig, k)


@pl.jit.host
def tally(y: pl.Out[pl.Tensor[[W, W, 1], pl.INT32]]):
    sig = pld.alloc_window_buffer([W, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _tally_chip(y[r], pld.window(sig, [W, 1]), r, device=r)


@pytest.mark.slow
def test_notify_set_then_pl_read_and_pl_write_surface_a_window_cell_by_cell():
    y = np.full((W, W, 1), -1, np.int32)
    tally(y, config=_cfg(W))
    np.testing.assert_array_equal(y, np.broadcast_to((np.arange(W) + 10).reshape(1, W, 1), (W, W, 1)))


def test_pl_write_numbers_scalars_and_read_values():
    @pl.jit
    def k(idx: pl.Tensor[[4], pl.INT32], y: pl.Out[pl.Tensor[[2, 4], pl.INT32]], s: pl.Scalar[pl.INT32]):
        with pl.incore():
            for i in pl.range(4):
                pl.write(y, [0, i], pl.read(idx, [i]))
            pl.write(y, [1, 0], 7)
            pl.write(y, [1, 1], s)
            pl.write(y, [1, 2], -3)
            pl.write(y, [1, 3], pl.read(idx, [2]))
        return y

    idx = rng.integers(-100, 100, 4).astype(np.int32)
    y = np.full((2, 4), 12345, np.int32)
    k(idx, y, 41)
    np.testing.assert_array_equal(y, [idx, [7, 41, -3, idx[2]]])

    @pl.jit
    def expr(idx: pl.Tensor[[4], pl.INT32], y: pl.Out[pl.Tensor[[4], pl.INT32]]):
        with pl.incore():
            for i in pl.range(4):
                pl.write(y, [i], pl.read(idx, [i]) * 2 + i)  # an index expression: its value where it is written
        return y

    y = np.full(4, 12345, np.int32)
    expr(idx, y)
    np.testing.assert_array_equal(y, idx * 2 + np.arange(4))


def test_pl_read_of_a_window_the_same_launch_stores_is_refused():
    @pl.jit.incore
    def k(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
          w: pld.DistributedTensor[[1, C], pl.FP32], n: pl.Scalar[pl.INT32]):
        pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], w)
        return pl.store(pl.load(w, [0, 0], [1, C]), [0, 0], y)

    @pl.jit.incore
    def k2(y: pl.Out[pl.Tensor[[W, 1], pl.INT32]], sig: pld.DistributedTensor[[W, 1], pl.INT32],
           n: pl.Scalar[pl.INT32]):
        pl.store(pl.full([W, 1], 1, pl.INT32), [0, 0], sig)
        pl.write(y, [0, 0], pl.read(sig, [0, 0]))
        return y

    @pl.jit
    def chip(y: pl.Out[pl.Tensor[[W, 1], pl.INT32]], sig: pld.DistributedTensor[[W, 1], pl.INT32],
             n: pl.Scalar[pl.INT32]):
        return k2(y, sig, n)

    @pl.jit.host
    def host(y: pl.Out[pl.Tensor[[2, W, 1], pl.INT32]]):
        sig = pld.alloc_window_buffer([W, 1], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            chip(y[r], pld.window(sig, [W, 1]), r, device=r)

    with pytest.raises(PtoNotSupported, match="same launch that stores"):
        host.compile(np.zeros((2, W, 1), np.int32), config=_cfg(2))


@pl.jit.incore
def _store_then_stuck(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                      w: pld.DistributedTensor[[1, C], pl.FP32], k: pl.Scalar[pl.INT32]):
    y = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], y)
    pld.system.wait(w, offsets=[0, 0], expected=1, cmp=pld.WaitCmp.Ge)  # a float window: never 1
    return y


def test_a_failed_run_writes_none_of_its_outputs():
    host = _host_of(_store_then_stuck)
    x = rng.standard_normal((2, 1, C)).astype(np.float32)
    y = _poisoned((2, 1, C))
    with pytest.raises(PtoInvalidStateError, match="deadlocked"):
        host(x, y, config=_cfg(2))
    assert np.isnan(y).all()


# -- what the tracer refuses, at compile time ------------------------------------------------------


def _host_of(kernel, n_windows=1):
    @pl.jit
    def chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
             w: pld.DistributedTensor[[1, C], pl.FP32], k: pl.Scalar[pl.INT32]):
        return kernel(x, y, w, k)

    @pl.jit.host
    def host(x: pl.Tensor[[2, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[2, 1, C], pl.FP32]]):
        buf = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
        for r in pl.range(pld.world_size()):
            chip(x[r], y[r], pld.window(buf, [1, C]), 3, device=r)

    return host


def _compile_err(kernel, exc, match):
    host = _host_of(kernel)
    x = np.zeros((2, 1, C), np.float32)
    with pytest.raises(exc, match=match):
        host.compile(x, x.copy(), config=_cfg(2))


def test_a_peer_outside_the_ranks_is_refused():
    @pl.jit.incore
    def k(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
          w: pld.DistributedTensor[[1, C], pl.FP32], n: pl.Scalar[pl.INT32]):
        t = pld.tile.remote_load(w, peer=pld.nranks(pld.get_comm_ctx(w)), offsets=[0, 0], shape=[1, C])
        return pl.store(t, [0, 0], y)

    _compile_err(k, PtoCompileError, "peer 2 is not a rank")


def test_a_box_outside_the_window_is_refused():
    @pl.jit.incore
    def k(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
          w: pld.DistributedTensor[[1, C], pl.FP32], n: pl.Scalar[pl.INT32]):
        t = pld.tile.remote_load(w, peer=0, offsets=[0, 8], shape=[1, C])
        return pl.store(t, [0, 0], y)

    _compile_err(k, PtoCompileError, "outside")


@pytest.mark.slow
def test_a_tile_living_across_a_cross_rank_operation_is_carried_through_a_spill_tensor():
    @pl.jit.incore
    def k(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
          w: pld.DistributedTensor[[1, C], pl.FP32], n: pl.Scalar[pl.INT32]):
        t = pl.mul(pl.load(x, [0, 0], [1, C]), 3.0)
        pld.tensor.barrier(w)
        return pl.store(pl.add(t, 1.0), [0, 0], y)

    host = _host_of(k)
    x = rng.standard_normal((2, 1, C)).astype(np.float32)
    y = _poisoned((2, 1, C))
    compiled = host.compile(x, y, config=_cfg(2))
    assert any(p.name.startswith("__pld_spill") for p in compiled.dispatches[0].params)
    compiled(x, y)
    np.testing.assert_allclose(y, 3 * x + 1, rtol=1e-6)


def test_a_cross_rank_operation_in_a_runtime_loop_is_refused():
    @pl.jit.incore
    def k(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
          w: pld.DistributedTensor[[1, C], pl.FP32], n: pl.Scalar[pl.INT32]):
        for _ in pl.range(n):  # a runtime bound: a loop of the generated code
            pld.tensor.barrier(w)
        return pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], y)

    _compile_err(k, PtoCompileError, "cannot sit inside a traced loop")


def test_cross_rank_operations_outside_a_host_program_are_refused():
    @pl.jit
    def alone(x: pl.InOut[pl.Tensor[[1, C], pl.FP32]]):
        pld.tensor.barrier(x)
        return x

    with pytest.raises(PtoCompileError, match="@pl.jit.host"):
        alone.compile(np.zeros((1, C), np.float32))


def test_pl_range_is_still_a_loop_outside_a_host_program():
    @pl.jit
    def k(x: pl.Tensor[[4, C], pl.FP32], y: pl.Out[pl.Tensor[[4, C], pl.FP32]]):
        for i in pl.range(4):
            with pl.incore():
                pl.store(pl.load(x, [i, 0], [1, C]), [i, 0], y)
        return y

    text = k.lower(np.zeros((4, C), np.float32), np.zeros((4, C), np.float32)).as_python()
    assert "pl.range" in text


# -- @pl.program with HOST functions, callbacks ------------------------------------------------------

N = 32


@pl.program
class _Inspect:
    @pl.function(type=pl.FunctionType.InCore)
    def add(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
            f: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return pl.store(pl.add(pl.load(a, [0, 0], [N, N]), pl.load(b, [0, 0], [N, N])), [0, 0], f)

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             f: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return self.add(a, b, f)

    @pl.function(level=pl.Level.HOST, role=pl.Role.SubWorker)
    def bound_later(f: pl.Tensor[[N, N], pl.FP32]):
        ...

    @pl.function(level=pl.Level.HOST, role=pl.Role.SubWorker)
    def own_body(f: pl.Tensor[[N, N], pl.FP32]):
        _SEEN.append(f.clone())

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             f: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        out = self.chip(a, b, f)
        self.bound_later(out)
        self.own_body(out)
        return out


_SEEN: list = []


@pytest.mark.slow  # imports torch
def test_host_functions_and_runtime_bound_callbacks():
    torch = pytest.importorskip("torch")
    assert _Inspect.get_function("bound_later").requires_runtime_binding is True
    assert _Inspect.get_function("own_body").requires_runtime_binding is False
    assert _Inspect.get_function("chip").func_type is pl.FunctionType.Orchestration
    compiled = ir.compile(_Inspect, platform="sim", distributed_config=DistributedConfig(device_ids=[0],
                                                                                         num_sub_workers=1))
    assert compiled.callback_names == ("bound_later",)
    a = torch.from_numpy(rng.standard_normal((N, N)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((N, N)).astype(np.float32))
    f = torch.full((N, N), float("nan"))
    with pytest.raises(PtoArgumentError, match="must be bound") as info:
        compiled.prepare()
    assert isinstance(info.value, ValueError)  # PyPTO's exception type too
    with pytest.raises(PtoArgumentError, match="are not sub-workers"):
        compiled.prepare(callbacks={"bound_later": print, "nope": print})
    with pytest.raises(PtoArgumentError, match="prepare"):
        compiled(a, b, f)
    seen = []
    _SEEN.clear()
    with compiled.prepare(callbacks={"bound_later": lambda args: seen.append(_tensor_from_continuous(args[0]).clone())}) as rt:
        rt(a, b, f)
    torch.testing.assert_close(f, a + b)
    torch.testing.assert_close(seen[0], a + b)
    torch.testing.assert_close(_SEEN[0], a + b)


@pl.program
class _Bound:
    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, a: pl.Tensor[[N, N], pl.FP32], f: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return pl.store(pl.mul(pl.load(a, [0, 0], [N, N]), 3.0), [0, 0], f)

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, a: pl.Tensor[[N, N], pl.FP32], f: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return self.scale(a, f)

    @pl.function(level=pl.Level.HOST, role=pl.Role.SubWorker)
    def check(f: pl.Tensor[[N, N], pl.FP32]):
        """Bound at prepare()."""
        ...

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, a: pl.Tensor[[N, N], pl.FP32], f: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        out = self.chip(a, f, device=1)
        self.check(out)


def test_a_bound_callback_sees_the_chip_result_on_the_host():
    compiled = ir.compile(_Bound, platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1],
                                                                                       num_sub_workers=1))
    assert compiled.dispatches[0].rank == 1
    a = rng.standard_normal((N, N)).astype(np.float32)
    f = _poisoned((N, N))
    seen = []
    with compiled.prepare(callbacks={"check": lambda args: seen.append(np.array(args[0].array))}) as rt:
        rt(a, f)
        rt(a * 2, f)
    np.testing.assert_allclose(f, 6 * a, rtol=1e-6)
    np.testing.assert_allclose(seen[0], 3 * a, rtol=1e-6)
    np.testing.assert_allclose(seen[1], 6 * a, rtol=1e-6)


def test_subworkers_need_sub_workers():
    with pytest.raises(PtoArgumentError, match="num_sub_workers"):
        ir.compile(_Inspect, platform="sim", distributed_config=DistributedConfig(device_ids=[0]))


# -- several programs on one worker, a resident tensor -------------------------------------------------


@pl.jit.incore
def _double(p: pl.Tensor, kv: pl.Out[pl.Tensor]):
    t = pl.load(p, [0, 0], [N, N])
    return pl.store(pl.add(t, t), [0, 0], kv)


@pl.jit
def _double_chip(p: pl.Tensor, kv: pl.Out[pl.Tensor]):
    return _double(p, kv)


@pl.jit.host
def fill(p: pl.Tensor, kv: pl.Out[pl.Tensor]):
    return _double_chip(p, kv)


@pl.jit.incore
def _use(t: pl.Tensor, kv: pl.Tensor, o: pl.Out[pl.Tensor]):
    return pl.store(pl.mul(pl.load(t, [0, 0], [N, N]), pl.load(kv, [0, 0], [N, N])), [0, 0], o)


@pl.jit
def _use_chip(t: pl.Tensor, kv: pl.Tensor, o: pl.Out[pl.Tensor]):
    return _use(t, kv, o)


@pl.jit.host
def use(t: pl.Tensor, kv: pl.Tensor, o: pl.Out[pl.Tensor]):
    return _use_chip(t, kv, o)


@pytest.mark.slow
def test_two_programs_share_one_worker_and_a_resident_tensor():
    cfg = _cfg(1)
    p = rng.standard_normal((N, N)).astype(np.float32)
    o = _poisoned((N, N))
    fill_c = fill.compile(p, np.zeros_like(p), config=cfg)
    use_c = use.compile(p, p, o, config=cfg)
    with DistributedWorker([fill_c, use_c]) as rt:
        with pytest.raises(PtoArgumentError, match="rt.run"):
            rt(p, o)
        kv = rt.alloc_tensor((N, N), np.float32)
        rt.run(fill_c, p, kv)
        for step in range(2):
            t = rng.standard_normal((N, N)).astype(np.float32)
            rt.run(use_c, t, kv, o)
            np.testing.assert_allclose(o, t * (2 * p), rtol=1e-6)
        rt.free_tensor(kv)
        with DistributedWorker([fill_c]) as other:
            elsewhere = other.alloc_tensor((N, N), np.float32)
            o[...] = np.nan
            with pytest.raises(PtoArgumentError, match="another worker"):
                rt.run(use_c, p, elsewhere, o)  # refused before anything is queued
            assert np.isnan(o).all()
    with pytest.raises(PtoError):
        rt.run(use_c, p, p, o)  # closed


# -- PyPTO's own programs (a checkout at /tmp/pypto) ----------------------------------------------

PYPTO = Path("/tmp/pypto")
PROGRAMS = [
    ("examples/distributed/01_hello_rank.py", ()),
    ("examples/distributed/02_programming_model.py", ()),
    ("examples/distributed/03_window_buffer.py", ()),
    ("examples/distributed/04_barrier.py", ()),
    ("examples/distributed/04_barrier.py", ("--use-builtin",)),
    ("examples/distributed/05_remote_load_store.py", ()),
    ("examples/distributed/05_remote_load_store.py", ("--mode", "store")),
    ("examples/distributed/06_put_get.py", ()),
    ("examples/distributed/06_put_get.py", ("--mode", "get")),
    ("examples/distributed/07_dynamic_rank_count.py", ("-d", "0,1,2")),
    ("examples/distributed/07_dynamic_rank_count.py", ("--mode", "get", "-d", "0,1,2,3")),
    ("examples/runtime/distributed_callback.py", ()),
    ("examples/runtime/multi_program_kv_cache.py", ()),
]


def _adapt():
    import importlib.util

    name = "pypto_examples_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "pypto_examples.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name].adapt


@pytest.mark.slow
@pytest.mark.skipif(not PYPTO.is_dir(), reason="needs a PyPTO checkout at /tmp/pypto")
@pytest.mark.parametrize(("path", "argv"), PROGRAMS, ids=[f"{Path(p).stem}{''.join(a)}" for p, a in PROGRAMS])
def test_pypto_program_runs_unchanged_but_for_imports_and_platform(path, argv, tmp_path):
    src = (PYPTO / path).read_text(encoding="utf-8")
    file = tmp_path / Path(path).name
    file.write_text(_adapt()(src), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(file), *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "OK" in done.stdout
    assert "skipped" not in done.stdout  # multi_program_kv_cache prints "skipped" when it fails


# -- a plain @pl.jit kernel compiled with a distributed config -------------------------------------


def test_a_plain_jit_kernel_compiled_with_a_distributed_config_is_one_chips_program_as_in_pypto():
    # PyPTO's ir.compile makes a DistributedCompiledProgram only of a program with a HOST function;
    # a plain @pl.jit kernel given config=RunConfig(distributed_config=...) compiles for one chip,
    # and the config keys the kernel's cache.  Here it used to raise PtoNotSupported.
    from pypto_async.ir import CompiledProgram

    @pl.jit
    def add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(a, b)
        return out

    a = rng.standard_normal((32, C)).astype(np.float32)
    b = rng.standard_normal((32, C)).astype(np.float32)
    out = _poisoned(a.shape)
    compiled = add.compile(a, b, out, config=_cfg(2))
    assert isinstance(compiled, CompiledProgram) and not isinstance(compiled, DistributedCompiledProgram)
    assert add.compile(a, b, out, config=_cfg(2)) is compiled
    assert add.compile(a, b, out, config=_cfg(3)) is not compiled  # another config, another cache entry
    compiled(a, b, out)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    out[:] = np.nan
    add(a, b, out, config=_cfg(2))  # called: compiled for, and run on, one chip
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    with DistributedWorker([0, 1]) as dw:  # and a DistributedWorker runs it on every rank
        xs = rng.standard_normal((2, 32, C)).astype(np.float32)
        sa, sb = dw.alloc_stacked_tensor(xs), dw.alloc_stacked_tensor(-2 * xs)
        so = dw.alloc_stacked_tensor(_poisoned(xs.shape))
        dw.run(compiled, sa, sb, so)
        got = _poisoned(xs.shape)
        dw.copy_stacked_from(so, got)
    np.testing.assert_allclose(got, -xs, rtol=1e-6)


# -- the page ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_devices_page_example_runs():
    import re

    page = (ROOT / "docs" / "devices.md").read_text(encoding="utf-8")
    section = page[page.index("## PyPTO's distributed names"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    x = rng.standard_normal((2, 1, 64)).astype(np.float32)
    y = _poisoned((2, 1, 64))
    exec(compile(code, "docs/devices.md", "exec"), {"x": x, "y": y})  # noqa: S102 - the page's own example
    np.testing.assert_array_equal(y, np.roll(x, -1, axis=0))


# -- async mode: the plan awaited -------------------------------------------------------------------


async def _held_run(dw, compiled, *args):
    """Run `compiled` on `dw` while every rank's stream is held: the plan must wait without holding the loop.

    The run is a task of the loop; this task goes on (the plan cannot finish:
    the devices its dispatches run on are held), then releases the holds and
    awaits the run.  A plan that blocked the loop would hold it until the
    latches expired, and fail.
    """
    import contextlib

    import anyio

    from pypto_async.testing import hold

    result = {}

    async def run():
        result["value"] = await dw.run(compiled, *args)

    with contextlib.ExitStack() as holds:
        latches = [holds.enter_context(hold(w.default_stream)) for w in dw.workers]
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            for _ in range(20):
                await anyio.sleep(0)  # the run's task gets its turns, and waits on the device
            assert "value" not in result  # the devices are held: the plan has not finished, yet we run
            for latch in latches:
                latch.release()
    return result["value"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_l3_program_runs_awaited_without_blocking_the_loop(backend):
    import anyio

    n = 4
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    compiled = prefix.compile(x, y, config=_cfg(n))  # put, notify and waits that read cells on the host

    async def main():
        async with DistributedWorker(list(range(n))) as dw:
            with pytest.raises(PtoArgumentError, match="takes 2 arguments"):
                dw.run(compiled, x)  # checked before the coroutine exists
            assert np.isnan(y).all()
            await _held_run(dw, compiled, x, y)
            np.testing.assert_allclose(y, np.cumsum(x, axis=0), rtol=1e-5, atol=1e-6)
        y[:] = np.nan
        await compiled.run_async(x, y)  # one shot, on devices opened for it
        np.testing.assert_allclose(y, np.cumsum(x, axis=0), rtol=1e-5, atol=1e-6)

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_cancelled_awaited_plan_frees_what_it_made_and_the_worker_runs_on(backend):
    import anyio

    from pypto_async.testing import hold

    n = 2
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    compiled = shift_load.compile(x, y, config=_cfg(n))

    async def main():
        async with DistributedWorker(list(range(n))) as dw:
            before = [w.stats().memory_allocations for w in dw.workers]
            with hold(dw.workers[0].default_stream) as latch:
                with anyio.move_on_after(0) as scope:  # cancelled at its first wait: the device is held
                    await dw.run(compiled, x, y)
                assert scope.cancelled_caught
                latch.release()
            for w in dw.workers:
                await w.wait()
            assert [w.stats().memory_allocations for w in dw.workers] == before  # its tensors freed
            assert np.isnan(y).all()  # and nothing reached the host arrays
            await dw.run(compiled, x, y)
        np.testing.assert_allclose(y, 2 * np.roll(x, -1, axis=0) + x, rtol=1e-6)

    anyio.run(main, backend=backend)


def test_an_awaited_plan_runs_its_callbacks_off_the_loop_and_raises_a_failure():
    import asyncio
    import threading

    from pypto_async.testing import fail_next

    compiled = ir.compile(_Bound, platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1],
                                                                                       num_sub_workers=1))
    a = rng.standard_normal((N, N)).astype(np.float32)
    f = _poisoned((N, N))
    seen = []

    def check(args):
        seen.append((threading.get_ident(), np.array(args[0].array)))

    async def main():
        loop_thread = threading.get_ident()
        rt = compiled.prepare(callbacks={"check": check})
        async with rt:
            await _held_run(rt, compiled, a, f)
            assert seen[0][0] != loop_thread  # the user's host code ran in a worker thread
            np.testing.assert_allclose(seen[0][1], 3 * a, rtol=1e-6)
            np.testing.assert_allclose(f, 3 * a, rtol=1e-6)
            f[:] = np.nan
            fail_next(rt.workers[1].default_stream)  # rank 1's first command of the next run fails
            with pytest.raises(PtoError):
                await rt.run(compiled, a, f)
            assert np.isnan(f).all()  # nothing of a failed run reaches the host arrays
            await rt.run(compiled, a * 2, f)  # and the worker goes on
            np.testing.assert_allclose(f, 6 * a, rtol=1e-6)
        with pytest.raises(PtoArgumentError, match="prepare"):
            await compiled.run_async(a, f)

    asyncio.run(main())


def test_pl_cast_of_an_integer_scalar_parameter_to_a_float_operand():
    @pl.jit
    def k(x: pl.Tensor[[2, C], pl.FP32], y: pl.Out[pl.Tensor[[2, C], pl.FP32]], s: pl.Scalar[pl.INT32]):
        with pl.incore():
            pl.store(pl.mul(pl.load(x, [0, 0], [2, C]), pl.cast(s, target_type=pl.FP32)), [0, 0], y)
        return y

    x = rng.standard_normal((2, C)).astype(np.float32)
    y = _poisoned((2, C))
    k(x, y, -7)
    np.testing.assert_allclose(y, x * -7, rtol=1e-6)

    @pl.jit
    def narrowing(x: pl.Tensor[[2, C], pl.INT32], y: pl.Out[pl.Tensor[[2, C], pl.INT32]], s: pl.Scalar[pl.FP32]):
        with pl.incore():
            pl.store(pl.add(pl.load(x, [0, 0], [2, C]), pl.cast(s, target_type=pl.INT32)), [0, 0], y)
        return y

    with pytest.raises(PtoCompileError, match="converts exactly"):
        narrowing.compile(np.zeros((2, C), np.int32), np.zeros((2, C), np.int32), pl.RUNTIME)


# -- a peer (and a notify value) the host passes as a scalar argument, as PyPTO's programs do ---------


@pl.jit.incore
def _shift(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
           src: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
           sig: pld.DistributedTensor[[1, 1], pl.INT32], peer: pl.Scalar[pl.INT32], tag: pl.Scalar[pl.INT32],
           expect: pl.Scalar[pl.INT32]):
    src = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], src)
    pld.tensor.put(inbox, peer=peer, src=src, atomic=pld.AtomicType.None_)
    pld.system.notify(target=sig, peer=peer, offsets=[0, 0], value=tag, op=pld.NotifyOp.Set)
    pld.system.wait(signal=sig, offsets=[0, 0], expected=expect, cmp=pld.WaitCmp.Eq)
    y = pl.store(pl.load(inbox, [0, 0], [1, C]), [0, 0], y)
    return y


@pl.jit
def _shift_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                src: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
                sig: pld.DistributedTensor[[1, 1], pl.INT32], peer: pl.Scalar[pl.INT32], tag: pl.Scalar[pl.INT32],
                expect: pl.Scalar[pl.INT32]):
    return _shift(x, y, src, inbox, sig, peer, tag, expect)


def _shift_host(peer_of):
    @pl.jit.host
    def shift(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
        bufs = [pld.alloc_window_buffer([1, C], dtype=pl.FP32) for _ in range(2)]
        sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
        n = pld.world_size()
        for r in pl.range(n):
            _shift_chip(x[r], y[r], *(pld.window(b, [1, C]) for b in bufs), pld.window(sig, [1, 1]),
                        peer_of(r, n), 10 + r, 10 + (r - 1) % n, device=r)

    return shift


@pytest.mark.slow
def test_a_scalar_argument_the_host_gives_an_int_is_that_ranks_peer_and_notify_value():
    n = 3
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    y = _poisoned((n, 1, C))
    # each dispatch passes its own peer (r + 1 mod n) and tags as scalars: rank r receives rank r - 1's row
    _shift_host(lambda r, n: (r + 1) % n)(x, y, config=_cfg(n))
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))
    with pytest.raises(PtoCompileError, match="peer 3 is not a rank"):  # rank 2's r + 1: refused at compile time
        _shift_host(lambda r, n: r + 1).compile(x, _poisoned((n, 1, C)), config=_cfg(n))


def _tensor_push_host(kind: str):
    @pl.jit.incore
    def push(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
             inbox: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[1, 1], pl.INT32],
             peer: pl.Scalar[pl.INT32]):
        if kind == "computed":
            t = pl.load(x, [0, 0], [1, C])
            pld.tensor.remote_store(pl.add(t, t), inbox, peer, [0, 0])
        elif kind == "tensor":
            pld.tensor.remote_store(x, inbox, peer, [0, 0])  # a tensor parameter: loaded whole
        elif kind == "window":
            pld.tensor.remote_store(inbox, inbox, peer, [0, 0])
        else:
            pld.tensor.remote_store(x, inbox, peer, [0, 0], atomic=pld.AtomicType.Add)
        pld.system.notify(sig, peer, [0, 0], 1, op=pld.NotifyOp.AtomicAdd)
        pld.system.wait(sig, [0, 0], 1, cmp=pld.WaitCmp.Ge)
        y = pl.store(pl.load(inbox, [0, 0], [1, C]), [0, 0], y)
        return y

    @pl.jit
    def push_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
                  inbox: pld.DistributedTensor[[1, C], pl.FP32], sig: pld.DistributedTensor[[1, 1], pl.INT32],
                  peer: pl.Scalar[pl.INT32]):
        return push(x, y, inbox, sig, peer)

    @pl.jit.host
    def host(x: pl.Tensor[[NR, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, C], pl.FP32]]):
        inbox = pld.alloc_window_buffer([1, C], dtype=pl.FP32)
        sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
        n = pld.world_size()
        for r in pl.range(n):
            push_chip(x[r], y[r], pld.window(inbox, [1, C]), pld.window(sig, [1, 1]), (r + 1) % n, device=r)

    return host


@pytest.mark.slow
def test_pld_tensor_remote_store_pushes_a_computed_value_or_a_whole_tensor_to_the_peer():
    n = 3
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    for kind, want in (("computed", 2 * np.roll(x, 1, axis=0)), ("tensor", np.roll(x, 1, axis=0))):
        y = _poisoned((n, 1, C))
        _tensor_push_host(kind)(x, y, config=_cfg(n))
        np.testing.assert_array_equal(y, want)
    with pytest.raises(PtoCompileError, match="is a window"):
        _tensor_push_host("window").compile(x, _poisoned((n, 1, C)), config=_cfg(n))
    with pytest.raises(PtoNotSupported, match="atomic"):
        _tensor_push_host("atomic").compile(x, _poisoned((n, 1, C)), config=_cfg(n))
