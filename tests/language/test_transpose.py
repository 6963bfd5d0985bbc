"""pl.transpose, pl.move(transpose=True) and pl.l0c_store, against torch on random data, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError


def rand(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def poison(*shape):
    return torch.full(shape, float("nan"))


def test_transpose_swaps_the_dimensions_and_fuses_with_element_wise_ops(launcher):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor], out_t: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [32, 48])
            tt: pl.Tile[[48, 32], pl.FP32] = pl.transpose(t, axis1=0, axis2=1)
            pl.store(pl.add(pl.exp(tt), pl.load(y, [0, 0], [48, 32])), [0, 0], out)
            pl.store(pl.transpose(tt, 1, 0), [0, 0], out_t)  # and back again

    x, y, out, out_t = rand(32, 48, seed=1), rand(48, 32, seed=2), poison(48, 32), poison(32, 48)
    launcher.run(k.compile(x, y, out, out_t), x, y, out, out_t)
    torch.testing.assert_close(out, torch.exp(x.T) + y)
    torch.testing.assert_close(out_t, x)


def test_matmul_with_b_moved_transposed_is_a_times_b_t(launcher):
    S, D = 16, 64

    @pl.jit
    def qk(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            la = pl.move(pl.load(a, [0, 0], [S, D], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            rb = pl.move(pl.load(b, [0, 0], [S, D], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right,
                         transpose=True)
            pl.l0c_store(pl.matmul(la, rb), [0, 0], [S, S], out)

    a, b, out = rand(S, D, seed=3), rand(S, D, seed=4), poison(S, S)
    launcher.run(qk.compile(a, b, out), a, b, out)
    torch.testing.assert_close(out, a @ b.T, rtol=1e-4, atol=1e-4)


def test_transpose_round_trips_through_as_python(launcher):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.transpose(pl.load(x, [0, 0], [16, 8])), 2.0), [0, 0], out)

    x, out = rand(16, 8, seed=5), poison(8, 16)
    source = k.lower(x, out).as_python(form="jit")
    assert "pl.transpose(" in source
    namespace: dict = {}
    exec(compile(source, "<as_python>", "exec"), namespace)  # noqa: S102 - the printed kernel
    launcher.run(namespace["k"].compile(x, out), x, out)
    torch.testing.assert_close(out, x.T * 2)


def test_transpose_and_l0c_store_mistakes_are_compile_errors():
    @pl.jit
    def bad_axes(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.transpose(pl.load(x, [0, 0], [8, 8]), axis1=0, axis2=2), [0, 0], out)

    @pl.jit
    def vec_into_l0c_store(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.l0c_store(pl.load(x, [0, 0], [8, 8]), [0, 0], [8, 8], out)

    @pl.jit
    def one_d(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.transpose(pl.load(x, [0], [8])), [0], out)

    x, out = rand(8, 8), poison(8, 8)
    with pytest.raises(PtoCompileError, match="swaps two axes of a tile of rank 2 or more, got axis1=0, axis2=2"):
        bad_axes.compile(x, out)
    with pytest.raises(PtoCompileError, match="pl.l0c_store stores an Acc tile"):
        vec_into_l0c_store.compile(x, out)
    with pytest.raises(PtoCompileError, match="of rank 2 or more, got axis1=0, axis2=1 for the 1-D tile"):
        one_d.compile(rand(8), poison(8))
