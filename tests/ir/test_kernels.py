"""Real kernels compiled and run on the sim device, against numpy/torch references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.ir import Fused

from helpers.ir_fixtures import poison

ROWS, COLS = 128, 128


@pl.jit
def add_kernel(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [ROWS, COLS])
        tb = pl.load(b, [0, 0], [ROWS, COLS])
        pl.store(pl.add(ta, tb), [0, 0], out)
    return out


def rel_err(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.slow
def test_seed_add_kernel_torch(launcher):
    torch.manual_seed(0)
    a = torch.randn(ROWS, COLS, dtype=torch.float32)
    b = torch.randn(ROWS, COLS, dtype=torch.float32)
    out = torch.full((ROWS, COLS), float("nan"))
    compiled = ir.compile(add_kernel.lower(a, b, torch.zeros(ROWS, COLS)), platform="a2a3sim")
    assert compiled.param_names == ["a", "b", "out"]
    assert compiled.output_indices == [2]
    assert compiled.has_return is True
    assert compiled.block_num == 1
    launcher.run(compiled, a, b, out)
    torch.testing.assert_close(out, a + b, rtol=1e-6, atol=0)


# ---- softmax over rows: reductions, broadcasting of a [R, 1] tile ---------------

SM_R, SM_C, SM_TILE = 256, 96, 32


@pl.jit
def softmax_rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for r in pl.range(0, SM_R, SM_TILE):
            t = pl.load(x, [r, 0], [SM_TILE, SM_C])
            m = pl.row_max(t)
            e = pl.exp(pl.sub(t, m))
            s = pl.row_sum(e)
            pl.store(pl.div(e, s), [r, 0], y)
    return y


def test_softmax_rows(launcher, rng):
    x = (rng.standard_normal((SM_R, SM_C)) * 3).astype(np.float32)
    y = poison((SM_R, SM_C))
    compiled = softmax_rows.compile(x, y)
    launcher.run(compiled, x, y)
    want = torch.softmax(torch.from_numpy(x).double(), dim=1).numpy()
    assert rel_err(y, want) < 1e-5
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


# ---- tiled matmul: pl.range over K with an in-place accumulator, spmd over M ---------

MM_M, MM_K, MM_N, MM_TM, MM_TK = 256, 384, 160, 64, 128


@pl.jit
def tiled_matmul(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for blk in pl.spmd(MM_M // MM_TM):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc = pl.zeros([MM_TM, MM_N], pl.FP32)
            for k in pl.range(0, MM_K, MM_TK):
                ta = pl.load(a, [blk * MM_TM, k], [MM_TM, MM_TK])
                tb = pl.load(b, [k, 0], [MM_TK, MM_N])
                pl.matmul(ta, tb, acc=acc)
            pl.store(acc, [blk * MM_TM, 0], c)
    return c


def test_tiled_matmul(launcher, rng):
    a = rng.standard_normal((MM_M, MM_K)).astype(np.float32)
    b = rng.standard_normal((MM_K, MM_N)).astype(np.float32)
    c = poison((MM_M, MM_N))
    compiled = tiled_matmul.compile(a, b, c)
    assert compiled.block_num == MM_M // MM_TM
    launcher.run(compiled, a, b, c)
    assert rel_err(c, a.astype(np.float64) @ b.astype(np.float64)) < 1e-5


# ---- a fused scale-add-relu chain over 1M+ elements with spmd and range ----------

CH_N, CH_BLOCKS, CH_TILE = 1 << 21, 4, 4096


@pl.jit
def scale_add_relu(x: pl.Tensor, z: pl.Tensor, alpha: pl.Scalar[pl.FP32], y: pl.Out[pl.Tensor]):
    per_block = CH_N // CH_BLOCKS
    for b in pl.spmd(CH_BLOCKS):
        for i in pl.range(0, per_block, CH_TILE):
            tx = pl.load(x, [b * per_block + i], [CH_TILE])
            tz = pl.load(z, [b * per_block + i], [CH_TILE])
            pl.store(pl.relu(tx * alpha + tz), [b * per_block + i], y)
    return y


@pytest.mark.slow
def test_scale_add_relu_chain(launcher, rng):
    x = rng.standard_normal(CH_N).astype(np.float32)
    z = rng.standard_normal(CH_N).astype(np.float32)
    y = poison(CH_N)
    alpha = 1.75
    compiled = scale_add_relu.compile(x, z, alpha, y)
    assert compiled.block_num == CH_BLOCKS
    launcher.run(compiled, x, z, alpha, y)
    want = np.maximum(x * np.float32(alpha) + z, np.float32(0))
    np.testing.assert_array_equal(y, want)  # same operations, same rounding


def test_scale_add_relu_is_one_loop_nest_reading_each_input_once():
    x = np.zeros(CH_N, np.float32)
    prog = scale_add_relu.lower(x, x, 1.0, x)
    fused = [s for s in _walk(prog.body) if isinstance(s, Fused)]
    assert len(fused) == 1
    assert fused[0].materialize == ()  # nothing but the store leaves the chain
    text = scale_add_relu.compile(x, x, 1.0, x).source_path.read_text()
    body = text[text.index("void scale_add_relu"):]
    assert body.count("for (") == 2  # the pl.range loop and the one tile loop
    assert body.count("p_x[") == 1 and body.count("p_z[") == 1 and body.count("p_y[") == 1


def _walk(body):
    for s in body:
        yield s
        yield from _walk(getattr(s, "body", ()))


def test_softmax_fuses_into_three_chains():
    x = np.zeros((SM_R, SM_C), np.float32)
    prog = softmax_rows.lower(x, x)
    fused = [s for s in _walk(prog.body) if isinstance(s, Fused)]
    # load | sub+exp | div+store, split by the two reductions
    assert [len(f.members) for f in fused] == [1, 2, 2]


@pytest.mark.parametrize("blocks", [1, 3])
def test_spmd_block_index_in_offsets(launcher, rng, blocks):
    @pl.jit
    def rows_plus_block(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for b in pl.spmd(blocks):
            t = pl.load(x, [b * 8, 0], [8, 16])
            pl.store(t * 2.0, [b * 8, 0], y)

    x = rng.standard_normal((8 * blocks, 16)).astype(np.float32)
    y = poison(x.shape)
    launcher.run(rows_plus_block.compile(x, y), x, y)
    np.testing.assert_array_equal(y, x * 2)


def test_large_tiles_live_on_the_heap(launcher, rng):
    """Tiles beyond the stack budget are allocated per launch and freed."""

    @pl.jit
    def big(x: pl.Tensor, y: pl.Out[pl.Tensor], s: pl.Out[pl.Tensor]):
        for b in pl.spmd(2):
            t = pl.load(x, [b * 256, 0], [256, 256]) * 0.5  # 256 KiB, feeds a reduction: a buffer
            pl.store(t, [b * 256, 0], y)
            pl.store(pl.row_sum(t), [b * 256, 0], s)

    x = rng.standard_normal((512, 256)).astype(np.float32)
    y, s = poison((512, 256)), poison((512, 1))
    compiled = big.compile(x, y, s)
    assert "aligned_alloc(64, 262144)" in compiled.source_path.read_text()
    for _ in range(3):  # repeated launches: nothing leaks or double-frees
        launcher.run(compiled, x, y, s)
    np.testing.assert_array_equal(y, x * np.float32(0.5))
    assert rel_err(s, (x.astype(np.float64) * 0.5).sum(1, keepdims=True)) < 1e-5
