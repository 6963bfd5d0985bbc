"""Loops over runtime bounds that carry values (PyPTO's 07_paged_attention_multi_config kernels).

A kernel loops ``pl.range(n_blocks, init_values=(acc,))`` over a scalar
parameter, carrying a tile (a matmul accumulator) or its output tensor by
reference, and ends the body with PyPTO's one-value form ``(out,) =
pl.yield_(next)``.  Outputs are poisoned (NaN); results are compared with
numpy on random data.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir

R, C, K = 16, 32, 4


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pl.function(type=pl.FunctionType.InCore)
def rows_sum(x: pl.Tensor[[K * R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP32]], n: pl.Scalar[pl.INDEX]):
    first = pl.load(x, [0, 0], [R, C])
    acc_out = first  # also the loop's start: the name bound by pl.yield_ holds the carry, not an alias
    for i, (acc,) in pl.range(1, n, init_values=(first,)):
        (acc_out,) = pl.yield_(pl.add(acc, pl.load(x, [i * R, 0], [R, C])))
    return pl.store(acc_out, [0, 0], out)


@pl.function(type=pl.FunctionType.InCore)
def rows_into(x: pl.Tensor[[K * R, C], pl.FP32], out: pl.Out[pl.Tensor[[K * R, C], pl.FP32]],
              n: pl.Scalar[pl.INDEX]):
    for i, (o,) in pl.range(n, init_values=(out,)):  # the output window, carried by reference
        o2 = pl.store(pl.exp(pl.load(x, [i * R, 0], [R, C])), [i * R, 0], o)
        (out_next,) = pl.yield_(o2)
    return out_next


@pl.program
class Carries:
    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], x: pl.Tensor[[2 * K * R, C], pl.FP32],
             s: pl.Out[pl.Tensor[[R, C], pl.FP32]], e: pl.Out[pl.Tensor[[2 * K * R, C], pl.FP32]]):
        n = pl.read(cfg, [0])
        rows_sum(pl.slice(x, [K * R, C], [0, 0]), s, n)
        rows_into(pl.slice(x, [K * R, C], [K * R, 0]), pl.slice(e, [K * R, C], [K * R, 0]), n)
        return s, e


@pytest.mark.slow  # a second on two CPUs (its program compiles)
def test_tile_and_window_carries_over_a_runtime_bound_in_a_kernel():
    c = ir.compile(Carries)
    x = _rand((2 * K * R, C), 1)
    for n in (1, 3, K):
        s, e = np.full((R, C), np.nan, np.float32), np.full((2 * K * R, C), np.nan, np.float32)
        c(np.array([n], np.int32), x, s, e)
        np.testing.assert_allclose(s, x[:n * R].reshape(n, R, C).sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(e[K * R:(K + n) * R], np.exp(x[K * R:(K + n) * R]), rtol=1e-6)
