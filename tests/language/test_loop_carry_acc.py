"""Split-K accumulators carried through a loop, in each of the forms PyPTO's guide and tests write.

``acc = pl.matmul(...)`` on the first K block and ``acc = pl.matmul_acc(acc, ...)`` on the
others: the accumulator is a tile carried from one iteration to the next, whether it starts as
a ``pl.create_tensor`` intermediate (rebound to a tile in the loop), a tile, or an explicit
``init_values=`` carry, and whether the first block is chosen by an ``if`` on the loop index, by
``init_cond=`` or peeled before the loop.  Every form runs on random data against numpy, outputs
poisoned; a result holding only the last K block (the carry lost) fails by far more than rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl

M, N, K, KT = 24, 40, 128, 32  # N, M off the 16-element grid; four K blocks


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ints(shape, seed):
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.int8)


def _check(out, a, b, rtol=1e-4):
    want = a.astype(np.float64) @ b.astype(np.float64)
    last = a[:, K - KT:].astype(np.float64) @ b[K - KT:].astype(np.float64)
    assert np.abs(out - last).max() > 1e-2, "only the last K block was kept"
    np.testing.assert_allclose(out, want, rtol=rtol, atol=rtol * 10)


# ---- an intermediate tensor rebound to a tile in the loop --------------------------------------------------


@pl.jit
def scratch_spmd(a: pl.Tensor[[M, K], pl.INT8], b: pl.Tensor[[K, N], pl.INT8],
                 c: pl.Out[pl.Tensor[[M, N], pl.INT32]]):
    for _ in pl.spmd(1):  # PyPTO's issue 2232 form: the kernel body itself, no pl.at
        acc = pl.create_tensor([M, N], dtype=pl.INT32)
        for kb in pl.pipeline(0, K // KT, stage=2):
            k0 = kb * KT
            at = a[0:M, k0:k0 + KT]
            bt = b[k0:k0 + KT, 0:N]
            if k0 == 0:
                acc = pl.matmul(at, bt, out_dtype=pl.INT32)
            else:
                acc = pl.matmul_acc(acc, at, bt)
        c[0:M, 0:N] = acc
    return c


@pl.jit
def scratch_range(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                  c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    acc = pl.create_tensor([M, N], dtype=pl.FP32)
    for kb in pl.range(K // KT):  # no region, no spmd: the jit body is the kernel
        at = a[0:M, kb * KT:(kb + 1) * KT]
        bt = b[kb * KT:(kb + 1) * KT, 0:N]
        if kb != 0:  # the accumulating branch first
            acc = pl.matmul_acc(acc, at, bt)
        else:
            acc = pl.matmul(at, bt)
    c[0:M, 0:N] = acc
    return c


@pl.jit
def scratch_region(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                   c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.create_tensor([M, N], dtype=pl.FP32)
        for k0 in pl.range(0, K, KT):
            at = pl.load(a, [0, k0], [M, KT])
            bt = pl.load(b, [k0, 0], [KT, N])
            if k0 == 0:
                acc = pl.matmul(at, bt)
            else:
                acc = pl.matmul_acc(acc, at, bt)
        pl.store(acc, [0, 0], c)
    return c


@pl.jit
def scratch_grid(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, 2 * N], pl.FP32],
                 c: pl.Out[pl.Tensor[[M, 2 * N], pl.FP32]]):
    for j in pl.range(2):  # an output tile per iteration, each reducing all of K
        acc = pl.create_tensor([M, N], dtype=pl.FP32)
        for kb in pl.range(K // KT):
            at = a[0:M, kb * KT:(kb + 1) * KT]
            bt = b[kb * KT:(kb + 1) * KT, j * N:(j + 1) * N]
            if kb == 0:
                acc = pl.matmul(at, bt)
            else:
                acc = pl.matmul_acc(acc, at, bt)
        c[0:M, j * N:(j + 1) * N] = acc
    return c


# ---- a tile carried, by rebinding or init_values= ------------------------------------------------------


@pl.jit
def tile_if(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32], c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.tile.create([M, N], pl.FP32, target_memory=pl.MemorySpace.Acc)
        for k0 in pl.range(0, K, KT):
            at = pl.load(a, [0, k0], [M, KT], target_memory=pl.MemorySpace.Mat)
            bt = pl.load(b, [k0, 0], [KT, N], target_memory=pl.MemorySpace.Mat)
            if k0 == 0:
                acc = pl.matmul(pl.move(at, target_memory=pl.MemorySpace.Left),
                                pl.move(bt, target_memory=pl.MemorySpace.Right))
            else:
                acc = pl.matmul_acc(acc, pl.move(at, target_memory=pl.MemorySpace.Left),
                                    pl.move(bt, target_memory=pl.MemorySpace.Right))
        pl.store(acc, [0, 0], c)
    return c


@pl.jit
def tile_elif(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32], c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    for _ in pl.spmd(1):
        acc = pl.full([M, N], dtype=pl.FP32, value=0.0)  # a Vec tile the branches make a matmul result
        for kb in pl.parallel(K // KT):
            at, bt = pl.load(a, [0, kb * KT], [M, KT]), pl.load(b, [kb * KT, 0], [KT, N])
            if kb == 0:
                acc = pl.matmul(at, bt)
            elif kb == 1:
                acc = pl.matmul_acc(acc, at, bt)
            else:
                acc = pl.matmul(at, bt, acc=acc)
        pl.store(acc, [0, 0], c)
    return c


@pl.jit
def tile_yield(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
               c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        init = pl.tile.create([M, N], pl.FP32, target_memory=pl.MemorySpace.Acc)
        for kb, (prev,) in pl.range(K // KT, init_values=(init,)):  # the printed form: each branch yields
            at = pl.load(a, [0, kb * KT], [M, KT])
            bt = pl.load(b, [kb * KT, 0], [KT, N])
            if kb == 0:
                nxt = pl.yield_(pl.matmul(at, bt))
            else:
                nxt = pl.yield_(pl.matmul_acc(prev, at, bt))
            out = pl.yield_(nxt)
        pl.store(out, [0, 0], c)
    return c


@pl.jit
def tile_peeled(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.matmul(pl.load(a, [0, 0], [M, KT]), pl.load(b, [0, 0], [KT, N]))
        for k0 in pl.range(KT, K, KT):
            acc = pl.matmul_acc(acc, pl.load(a, [0, k0], [M, KT]), pl.load(b, [k0, 0], [KT, N]))
        pl.store(acc, [0, 0], c)
    return c


@pl.jit
def tile_init_cond(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                   c: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.tile.create([M, N], pl.FP32, target_memory=pl.MemorySpace.Acc)  # never zeroed
        for k0 in pl.range(0, K, KT):
            acc = pl.matmul_acc(acc, pl.load(a, [0, k0], [M, KT]), pl.load(b, [k0, 0], [KT, N]),
                                init_cond=(k0 == 0))
        pl.store(acc, [0, 0], c)
    return c


# ---- pl.matmul_acc into a window of a tile ---------------------------------------------------------------


@pl.jit
def window_init_cond(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, 2 * N], pl.FP32],
                     c: pl.Out[pl.Tensor[[M, 2 * N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.tile.create([M, 2 * N], pl.FP32, target_memory=pl.MemorySpace.Acc)
        for t in pl.range(2):
            for k0 in pl.range(0, K, KT):
                win = pl.tile.slice(acc, [M, N], [0, t * N])  # a view: accumulating into it writes acc
                pl.tile.matmul_acc(win, pl.load(a, [0, k0], [M, KT]), pl.load(b, [k0, t * N], [KT, N]),
                                   init_cond=(k0 == 0))
        pl.store(acc, [0, 0], c)
    return c


@pl.jit
def window_accumulate(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                      c: pl.Out[pl.Tensor[[2 * M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.full([2 * M, N], dtype=pl.FP32, value=1.0)
        win = pl.tile.slice(acc, [M, N], [M, 0])  # the lower half gains a @ b over two matmul_acc
        win = pl.matmul_acc(win, pl.load(a, [0, 0], [M, K // 2]), pl.load(b, [0, 0], [K // 2, N]))
        win = pl.matmul_acc(win, pl.load(a, [0, K // 2], [M, K // 2]), pl.load(b, [K // 2, 0], [K // 2, N]))
        pl.store(acc, [0, 0], c)
    return c


_FP32_FORMS = [scratch_range, scratch_region, tile_if, tile_elif, tile_yield, tile_peeled, tile_init_cond]


@pytest.mark.slow
@pytest.mark.parametrize("kernel", _FP32_FORMS, ids=lambda k: k.__name__)
def test_a_carried_accumulator_sums_every_k_block(kernel):
    a, b = _rand((M, K), 1), _rand((K, N), 2)
    c = np.full((M, N), np.nan, np.float32)
    kernel(a, b, c)
    _check(c, a, b)


@pytest.mark.slow
def test_an_intermediate_rebound_in_a_spmd_body_is_carried_exactly():
    a, b = _ints((M, K), 3), _ints((K, N), 4)
    c = np.full((M, N), -7, np.int32)
    scratch_spmd(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.slow
def test_each_output_tile_of_a_grid_reduces_all_of_k():
    a, b = _rand((M, K), 5), _rand((K, 2 * N), 6)
    c = np.full((M, 2 * N), np.nan, np.float32)
    scratch_grid(a, b, c)
    for j in range(2):
        _check(c[:, j * N:(j + 1) * N], a, b[:, j * N:(j + 1) * N])


@pytest.mark.slow
def test_matmul_acc_into_a_window_accumulates_into_the_tile():
    a, b = _rand((M, K), 7), _rand((K, 2 * N), 8)
    c = np.full((M, 2 * N), np.nan, np.float32)
    window_init_cond(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    b2 = b[:, :N].copy()
    c2 = np.full((2 * M, N), np.nan, np.float32)
    window_accumulate(a, b2, c2)
    np.testing.assert_array_equal(c2[:M], np.ones((M, N), np.float32))
    np.testing.assert_allclose(c2[M:], 1.0 + a.astype(np.float64) @ b2.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_the_carried_intermediate_is_a_tile_carried_by_the_loop():
    from pypto_async.ir._nodes import For, Spmd, Store, Update

    prog = scratch_spmd.trace(np.zeros((M, K), np.int8), np.zeros((K, N), np.int8), np.zeros((M, N), np.int32))
    (spmd,) = [s for s in prog.body if isinstance(s, Spmd)]
    (loop,) = [s for s in spmd.body if isinstance(s, For)]
    last = loop.body[-1]  # the body ends by making the merged tile the next iteration's accumulator
    assert isinstance(last, Update), last
    (store,) = [s for s in spmd.body if isinstance(s, Store)]
    assert store.value.id == last.target.id  # and the tile stored after the loop is that carry


@pl.jit
def window_partly_valid(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32],
                        c: pl.Out[pl.Tensor[[2 * M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.full([2 * M, N], dtype=pl.FP32, value=1.0)
        win = pl.tile.slice(acc, [M, N], [M, 0], valid_shape=[M - 8, N])
        win = pl.matmul_acc(win, pl.load(a, [0, 0], [M, K]), pl.load(b, [0, 0], [K, N]))
        pl.store(acc, [0, 0], c)
    return c


def test_matmul_acc_into_a_partly_valid_window_is_refused_not_lost():
    from pypto_async.errors import PtoNotSupported

    a, b = _rand((M, K), 9), _rand((K, N), 10)
    c = np.full((2 * M, N), np.nan, np.float32)
    with pytest.raises(PtoNotSupported, match="valid_shape="):
        window_partly_valid(a, b, c)
    assert np.isnan(c).all()  # refused before anything ran
