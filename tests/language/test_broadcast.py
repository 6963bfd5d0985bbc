"""Reductions with PyPTO's scratch tile, and the row/col expand (broadcast) family, against numpy.

Written as PyPTO's softmax and normalization examples write them:
``pl.create_tile`` for the scratch tile, ``pl.row_max(t, tmp)``,
``pl.row_expand_sub``, ``pl.col_expand_mul``, ``pl.reshape`` of a row vector.
Outputs are poisoned before each launch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.tiers import tiered

R, C = 32, 64


def rel_err(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pl.jit
def tile_softmax(a: pl.Tensor, output: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        tile_a = pl.load(a, [0, 0], [R, C])
        max_tmp = pl.create_tile([R, C], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
        row_max = pl.row_max(tile_a, max_tmp)
        exp_shifted = pl.exp(pl.row_expand_sub(tile_a, row_max))
        sum_tmp = pl.create_tile([R, C], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
        row_sum = pl.row_sum(exp_shifted, sum_tmp)
        pl.store(pl.row_expand_div(exp_shifted, row_sum), [0, 0], output)
    return output


def test_softmax_with_scratch_tiles(launcher):
    torch.manual_seed(0)
    a = torch.randn(R, C) * 3
    out = torch.full((R, C), float("nan"))
    launcher.run(tile_softmax.compile(a, out), a, out)
    torch.testing.assert_close(out, torch.softmax(a, dim=-1), rtol=1e-5, atol=1e-6)


def test_scratch_tiles_are_not_computed():
    """The scratch tile only satisfies PyPTO's signature: nothing reads it, so it is dropped."""
    a = np.zeros((R, C), np.float32)
    text = str(tile_softmax.lower(a, a))
    assert "full 0:FP32" not in text and "row_max %0" in text


@pl.jit
def layer_norm(x: pl.Tensor, gamma: pl.Tensor, beta: pl.Tensor, output: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        tile_x = pl.load(x, [0, 0], [R, C])
        tile_gamma = pl.load(gamma, [0, 0], [1, C])
        tile_beta = pl.load(beta, [0, 0], [1, C])
        tmp = pl.create_tile([R, C], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
        mean = pl.row_sum(tile_x, tmp)
        mean_t = pl.mul(pl.reshape(mean, [1, R]), 1.0 / C)  # [R, 1] -> [1, R] and back, as PyPTO's example
        mean = pl.reshape(mean_t, [R, 1])
        centered = pl.row_expand_sub(tile_x, mean)
        var = pl.row_sum(pl.mul(centered, centered), tmp)
        std = pl.reshape(pl.sqrt(pl.add(pl.mul(pl.reshape(var, [1, R]), 1.0 / C), 1e-5)), [R, 1])
        scaled = pl.col_expand_mul(pl.row_expand_div(centered, std), tile_gamma)
        beta_full = pl.col_expand(scaled, tile_beta)
        pl.store(pl.add(scaled, beta_full), [0, 0], output)
    return output


def test_layer_norm(launcher):
    torch.manual_seed(1)
    x, gamma, beta = torch.randn(R, C), torch.randn(1, C), torch.randn(1, C)
    out = torch.full((R, C), float("nan"))
    launcher.run(layer_norm.compile(x, gamma, beta, out), x, gamma, beta, out)
    want = torch.nn.functional.layer_norm(x.double(), (C,), eps=1e-5) * gamma.double() + beta.double()
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


EXPAND = {
    "row_expand_add": ("row", np.add),
    "row_expand_sub": ("row", np.subtract),
    "row_expand_mul": ("row", np.multiply),
    "row_expand_div": ("row", np.divide),
    "col_expand_add": ("col", np.add),
    "col_expand_sub": ("col", np.subtract),
    "col_expand_mul": ("col", np.multiply),
    "col_expand_div": ("col", np.divide),
}


@tiered("name", sorted(EXPAND), fast=["col_expand_div", "row_expand_sub"])
def test_expand_ops(launcher, rng, name):
    along, ref = EXPAND[name]
    vshape = (R, 1) if along == "row" else (1, C)
    fn = getattr(pl, name)

    @pl.jit
    def k(x: pl.Tensor, v: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, R, R // 2):  # the tile op inside a loop too
            pl.store(fn(pl.load(x, [i, 0], [R // 2, C]), pl.load(v, [i if along == "row" else 0, 0],
                                                                  [R // 2, 1] if along == "row" else [1, C])),
                     [i, 0], y)

    x = rng.standard_normal((R, C)).astype(np.float32)
    v = (np.sign(rng.standard_normal(vshape)) * rng.uniform(0.5, 2, vshape)).astype(np.float32)
    y = poison((R, C))
    launcher.run(k.compile(x, v, y), x, v, y)
    assert rel_err(y, ref(x.astype(np.float64), v.astype(np.float64))) < 1e-6


@pytest.mark.parametrize("along", ["row", "col"])
def test_expand_broadcasts_a_vector(launcher, rng, along):
    @pl.jit
    def k(x: pl.Tensor, v: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [R, C])
        if along == "row":
            pl.store(pl.row_expand(t, pl.load(v, [0, 0], [R, 1])), [0, 0], y)
        else:
            pl.store(pl.col_expand(t, pl.load(v, [0, 0], [1, C])), [0, 0], y)

    x = rng.standard_normal((R, C)).astype(np.float32)
    v = rng.standard_normal((R, 1) if along == "row" else (1, C)).astype(np.float32)
    y = poison((R, C))
    launcher.run(k.compile(x, v, y), x, v, y)
    np.testing.assert_array_equal(y, np.broadcast_to(v, (R, C)))


@tiered("op", ["row_max", "row_sum", "row_min", "col_sum"], fast=["row_max", "col_sum"])
def test_reductions_take_a_scratch_tile(launcher, rng, op):
    @pl.jit
    def k(x: pl.Tensor, y1: pl.Out[pl.Tensor], y2: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [R, C])
        tmp = pl.create_tile([R, C], dtype=pl.FP32, target_memory=pl.MemorySpace.Vec)
        pl.store(getattr(pl, op)(t, tmp), [0, 0], y1)
        pl.store(getattr(pl, op)(t), [0, 0], y2)  # the one-argument form, beside it

    shape = (1, C) if op.startswith("col") else (R, 1)
    x = rng.standard_normal((R, C)).astype(np.float32)
    y1, y2 = poison(shape), poison(shape)
    launcher.run(k.compile(x, y1, y2), x, y1, y2)
    axis = 0 if op.startswith("col") else 1
    ref = {"max": np.max, "sum": np.sum, "min": np.min}[op.split("_")[1]]
    want = ref(x.astype(np.float64), axis=axis, keepdims=True)
    assert rel_err(y1, want) < 1e-6
    if op == "col_sum":  # the scratch tile selects the pairwise order (PyPTO's): other roundings, as close
        assert rel_err(y2, want) < 1e-6
    else:
        np.testing.assert_array_equal(y1, y2)
