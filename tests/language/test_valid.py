"""Tiles with a valid region: pl.load(valid_shape=), pl.fillpad, partial stores, runtime extents.

A tile's valid region is the leading box that holds data; the rest is
padding, unspecified until pl.fillpad writes PadValue.zero / max / min.
Outputs are poisoned (NaN), so a store that writes past the valid box, or
skips part of it, shows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoError
from helpers.ir_fixtures import poison
from helpers.tiers import tiered

PAD = {"zero": 0.0, "max": np.inf, "min": -np.inf}


@tiered("pad", sorted(PAD), fast=["min"])
def test_fillpad_writes_the_pad_value_outside_the_valid_box(launcher, rng, pad):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32], valid_shape=[10, 20])
        pl.store(pl.fillpad(t, pad_value=getattr(pl.PadValue, pad)), [0, 0], y)

    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = poison((16, 32))
    launcher.run(k.compile(x, y), x, y)
    want = np.full((16, 32), PAD[pad], np.float32)
    want[:10, :20] = x[:10, :20]
    np.testing.assert_array_equal(y, want)


def test_integer_pads_are_the_dtype_extremes(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [8, 8], valid_shapes=[8, 3])
        pl.store(pl.fillpad(t, pl.PadValue.max), [0, 0], y)
        pl.store(pl.fillpad(t, pad_value=-float("inf")), [0, 0], z)  # PyPTO's literal sugar for min

    x = rng.integers(-100, 100, (8, 8)).astype(np.int32)
    y, z = poison((8, 8), np.int32), poison((8, 8), np.int32)
    launcher.run(k.compile(x, y, z), x, y, z)
    assert (y[:, :3] == x[:, :3]).all() and (y[:, 3:] == np.iinfo(np.int32).max).all()
    assert (z[:, :3] == x[:, :3]).all() and (z[:, 3:] == np.iinfo(np.int32).min).all()


def test_reductions_over_a_padded_tile(launcher, rng):
    """Pad with min before a max, with zero before a sum: the padding then changes nothing."""

    @pl.jit
    def k(x: pl.Tensor, m: pl.Out[pl.Tensor], s: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32], valid_shape=[16, 21])
        pl.store(pl.row_max(pl.fillpad(t, pl.PadValue.min)), [0, 0], m)
        pl.store(pl.row_sum(pl.fillpad(t, pl.PadValue.zero)), [0, 0], s)

    x = rng.standard_normal((16, 32)).astype(np.float32) - 3  # all-negative rows: a zero pad would win the max
    m, s = poison((16, 1)), poison((16, 1))
    launcher.run(k.compile(x, m, s), x, m, s)
    np.testing.assert_array_equal(m, x[:, :21].max(axis=1, keepdims=True))
    np.testing.assert_allclose(s, x[:, :21].astype(np.float64).sum(axis=1, keepdims=True), rtol=1e-5)


def test_a_store_writes_only_the_valid_box(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.load(x, [0, 0], [16, 16], valid_shape=[5, 9]) * 2.0, [0, 0], y)

    x = rng.standard_normal((16, 16)).astype(np.float32)
    y = poison((16, 16))
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y[:5, :9], x[:5, :9] * np.float32(2))
    y[:5, :9] = np.nan
    assert np.isnan(y).all()  # nothing else was written


@pl.jit
def ragged_rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    """40 rows in tiles of 16: the last tile overhangs the tensor, its valid box does not."""
    for i in pl.range(0, 40, 16):
        rows = pl.min(16, 40 - i)
        t = pl.load(x, [i, 0], [16, 24], valid_shape=[rows, 24])
        pl.store(pl.exp(t), [i, 0], y)


def test_a_ragged_tail_through_a_loop_extent(launcher, rng):
    x = rng.standard_normal((40, 24)).astype(np.float32)
    y = poison((40, 24))
    launcher.run(ragged_rows.compile(x, y), x, y)
    np.testing.assert_allclose(y, np.exp(x.astype(np.float64)), rtol=1e-6)


@pl.jit
def dyn_valid_shape(data: pl.Tensor, scale: pl.FP32, vlen: pl.INDEX, output: pl.Out[pl.Tensor]):
    """PyPTO's examples/kernels/09_dyn_valid_shape.py: the valid length is a runtime scalar."""
    with pl.at(level=pl.Level.CORE_GROUP):
        s_tile = pl.load(data, [0, 0], [64, 64], valid_shapes=[64, vlen], target_memory=pl.MemorySpace.Vec)
        s_padded = pl.tile.fillpad(s_tile, pad_value=pl.PadValue.min)
        pl.store(pl.mul(s_padded, scale), [0, 0], output)
    return output


def test_a_runtime_valid_extent(launcher):
    torch.manual_seed(0)
    data = torch.randn(64, 64)
    compiled = dyn_valid_shape.compile(data, 0.5, pl.RUNTIME, data)  # vlen read at dispatch
    assert [(p.name, p.dtype.name) for p in compiled.params] == [
        ("data", "FP32"), ("scale", "FP32"), ("vlen", "INT64"), ("output", "FP32")]
    for vlen in (64, 32, 0):
        assert dyn_valid_shape.compile(data, 0.5, pl.RUNTIME, data) is compiled  # one kernel, the extent at run time
        out = torch.full((64, 64), float("nan"))
        launcher.run(compiled, data, 0.5, vlen, out)
        want = torch.full((64, 64), -float("inf"))
        want[:, :vlen] = data[:, :vlen] * 0.5
        assert torch.equal(out, want), vlen


@pytest.mark.parametrize("vlen", [65, -1])
def test_a_runtime_extent_outside_the_tile_fails_the_launch(launcher, vlen):
    data = torch.randn(64, 64)
    compiled = dyn_valid_shape.compile(data, 0.5, pl.RUNTIME, data)
    with pytest.raises(PtoError, match="pl.load: valid extent of dimension 1 outside \\[0, 64\\]") as ei:
        launcher.run(compiled, data, 0.5, vlen, torch.zeros(64, 64))
    assert "test_valid.py:" in str(ei.value)  # the message names the kernel's line


def test_valid_regions_propagate_through_element_wise_ops():
    @pl.jit
    def k(x: pl.Tensor, r: pl.Tensor, n: pl.INDEX, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32], valid_shape=[16, n])
        u = pl.exp(t) + pl.load(r, [0, 0], [16, 1])  # a fully valid broadcast operand keeps the region
        pl.store(pl.mul(u, 2.0), [0, 0], y)

    x = np.zeros((16, 32), np.float32)
    text = str(k.trace(x, x[:, :1], pl.RUNTIME, x))
    assert "%1: FP32[16, 32] valid[16, $n] = exp %0" in text
    assert "%3: FP32[16, 32] valid[16, $n] = add %1, %2" in text


def test_slice_with_a_valid_shape_and_pad_value(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32])
        pl.store(pl.slice(t, [8, 16], [4, 8], valid_shape=[8, 5], pad_value=pl.PadValue.zero), [0, 0], y)
        pl.store(pl.slice(t, [8, 16], [4, 8], valid_shape=[3, 16]), [0, 0], z)  # no pad: a partial store

    x = rng.standard_normal((16, 32)).astype(np.float32)
    y, z = poison((8, 16)), poison((8, 16))
    launcher.run(k.compile(x, y, z), x, y, z)
    want = np.zeros((8, 16), np.float32)
    want[:, :5] = x[4:12, 8:13]
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(z[:3], x[4:7, 8:24])
    assert np.isnan(z[3:]).all()


@pytest.mark.slow
def test_matmul_of_a_partially_valid_tile(launcher):
    """PyPTO's 12_matmul_valid_shape: 5 data rows in a 16-row tile that overhangs the tensor."""

    @pl.jit
    def matmul_valid_shape(a: pl.Tensor, b: pl.Tensor, output: pl.InOut[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a_mat = pl.load(a, [0, 0], [16, 16], valid_shape=[5, 16], target_memory=pl.Mem.Mat)
            b_mat = pl.load(b, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
            result = pl.matmul(pl.move(a_mat, target_memory=pl.Mem.Left), pl.move(b_mat, target_memory=pl.Mem.Right))
            pl.store(pl.slice(result, [5, 16], [0, 0]), [0, 0], output)
        return output

    torch.manual_seed(0)
    a, b = torch.randn(5, 16), torch.randn(16, 16)
    output = torch.randn(16, 16)
    want = output.clone()
    want[:5] = a @ b
    text = str(matmul_valid_shape.trace(a, b, output))
    assert "FP32[16, 16]@Acc valid[5, 16] = matmul" in text and "FP32[5, 16]@Acc = slice" in text
    launcher.run(matmul_valid_shape.compile(a, b, output), a, b, output)
    torch.testing.assert_close(output, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_slice_inherits_its_sources_region(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, n: pl.INDEX, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32], valid_shape=[16, n])
        pl.store(pl.slice(t, [8, 16], [2, 4]), [0, 0], y)  # valid columns: n - 4, cut to [0, 16]
        pl.store(pl.slice(t, [8, 16], [2, 4], valid_shape=[3, 16]), [0, 0], z)

    x = rng.standard_normal((16, 32)).astype(np.float32)
    for n in (30, 10, 2):
        y, z = poison((8, 16)), poison((8, 16))
        launcher.run(k.compile(x, n, y, z), x, n, y, z)
        cols = min(max(n - 4, 0), 16)
        np.testing.assert_array_equal(y[:, :cols], x[2:10, 4:4 + cols])
        assert np.isnan(y[:, cols:]).all()
        np.testing.assert_array_equal(z[:3, :cols], x[2:5, 4:4 + cols])
        assert np.isnan(z[3:]).all() and np.isnan(z[:, cols:]).all()


@pl.program
class _PaddedFromSmallerTensor:
    """PyPTO's fillpad st program: a [64, 64] tile loaded from a [48, 64] kernel parameter, valid [48, 64]."""

    @pl.function(type=pl.FunctionType.InCore)
    def kernel(self, x: pl.Tensor[[48, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        t = pl.load(x, offsets=[0, 0], shapes=[64, 64], valid_shape=[48, 64])
        return pl.store(pl.fillpad(t, pad_value=pl.PadValue.zero), offsets=[0, 0], output_tensor=y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[48, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        return self.kernel(x, y)


def test_a_tile_larger_than_its_kernel_parameter_loads_its_valid_box(launcher, rng):
    from pypto_async import ir

    x = rng.standard_normal((48, 64)).astype(np.float32)
    y = poison((64, 64))
    launcher.run(ir.compile(_PaddedFromSmallerTensor), x, y)
    np.testing.assert_array_equal(y, np.concatenate([x, np.zeros((16, 64), np.float32)]))

    @pl.program
    class TooFar:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, x: pl.Tensor[[48, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            t = pl.load(x, offsets=[0, 0], shapes=[64, 64], valid_shape=[56, 64])  # past the parameter
            return pl.store(pl.fillpad(t, pad_value=pl.PadValue.zero), offsets=[0, 0], output_tensor=y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, x: pl.Tensor[[48, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            return self.kernel(x, y)

    with pytest.raises(PtoError, match="outside"):
        TooFar.trace()
