"""@pl.jit: specialisation per signature, annotations, scalars, every dtype round-tripping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import _dtypes
from pypto_async._signature import IN, INOUT, OUT, SCALAR
from pypto_async.errors import PtoArgumentError, PtoCompileError
from helpers.ir_fixtures import poison
from helpers.tiers import tiered


@pl.jit
def copy2d(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(0, x.shape[0], 8):
            pl.store(pl.load(x, [i, 0], [8, x.shape[1]]), [i, 0], y)
    return y


def test_jit_keeps_the_function_identity():
    assert copy2d.__name__ == "copy2d" and isinstance(copy2d, pl.JitFunction)
    assert pl.jit(copy2d) is copy2d


@pytest.mark.slow
def test_one_specialisation_per_signature():
    a = np.zeros((16, 8), np.float32)
    c1 = copy2d.compile(a, a)
    assert copy2d.compile(np.ones((16, 8), np.float32), a) is c1  # same signature, new data
    c2 = copy2d.compile(np.zeros((32, 8), np.float32), np.zeros((32, 8), np.float32))
    c3 = copy2d.compile(a.astype(np.float64), a.astype(np.float64))
    assert len({id(c1), id(c2), id(c3)}) == 3
    assert [p.shape for p in c2.params] == [(32, 8), (32, 8)]
    assert c3.params[0].dtype == pl.FP64


def test_numpy_and_torch_arguments_specialise_alike():
    a = np.zeros((16, 8), np.float32)
    assert copy2d.lower(a, a) == copy2d.lower(torch.zeros(16, 8), torch.zeros(16, 8))


@pytest.mark.parametrize("which", [0, 1])
def test_arrays_in_the_other_byte_order_are_refused(which):
    args = [np.ones((16, 8), np.float32), np.zeros((16, 8), np.float32)]
    args[which] = args[which].astype(">f4")
    name = "xy"[which]
    for entry in (copy2d.lower, copy2d.compile, copy2d):
        with pytest.raises(PtoArgumentError, match=f"copy2d: argument '{name}': dtype '>f4' is not in this "
                                                   "machine's byte order"):
            entry(*args)


def test_directions_and_scalars_in_the_signature():
    @pl.jit
    def k(a: pl.Tensor, b: pl.InOut[pl.Tensor], s: pl.Scalar[pl.INT32], t, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0], [4]) + pl.load(b, [0], [4]), [0], b)
        pl.store(pl.load(b, [0], [4]), [0], out)

    x = np.zeros(4, np.float32)
    c = k.compile(x, x, 3, 2.5, x)
    assert [(p.name, p.direction, p.dtype) for p in c.params] == [
        ("a", IN, pl.FP32), ("b", INOUT, pl.FP32), ("s", SCALAR, pl.INT32), ("t", SCALAR, pl.FP32), ("out", OUT, pl.FP32),
    ]
    assert c.output_indices == [4] and c.has_return is False  # the pure Out parameters, a list, as PyPTO


def test_scalar_parameters_of_each_kind(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, f: pl.Scalar[pl.FP64], i: pl.Scalar[pl.INT32], h: pl.Scalar[pl.BF16], y: pl.Out[pl.Tensor],
          yi: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [8, 8])
        pl.store(t * f + h, [0, 0], y)
        pl.store(pl.full([8, 8], i, pl.INT32), [0, 0], yi)

    x = rng.standard_normal((8, 8))
    y, yi = poison((8, 8), np.float64), poison((8, 8), np.int32)
    launcher.run(k.compile(x, 1.25, -42, 0.5, y, yi), x, 1.25, -42, 0.5, y, yi)
    np.testing.assert_allclose(y, x * 1.25 + 0.5, rtol=1e-15)
    assert (yi == -42).all()


def _roundtrip_kernel():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, 32, 16):
            pl.store(pl.load(x, [i, 0], [16, 24]), [i, 0], y)

    return k


def _random(dtype, rng, shape):
    if dtype == pl.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_float:
        return (rng.standard_normal(shape) * 50).astype(dtype.np_storage if dtype != pl.BF16 else np.float32)
    info = np.iinfo(dtype.np_storage)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype.np_storage)


@tiered("dtype", _dtypes.ALL_DTYPES, fast=[pl.FP32, pl.BF16, pl.FP8E5M2, pl.INT8, pl.UINT64, pl.BOOL],
        ids=lambda d: d.name)
def test_every_dtype_round_trips(launcher, rng, dtype):
    k = _roundtrip_kernel()
    if dtype == pl.BF16:
        x = torch.from_numpy(_random(dtype, rng, (32, 24))).to(torch.bfloat16)
        y = torch.full((32, 24), float("nan"), dtype=torch.bfloat16)
        launcher.run(k.compile(x, y), x, y)
        assert torch.equal(y.view(torch.uint16), x.view(torch.uint16))
        return
    x = _random(dtype, rng, (32, 24))
    y = poison((32, 24), dtype.np_storage)
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def test_bf16_as_uint16_storage_with_an_annotation(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor[[8, 8], pl.BF16], y: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
        pl.store(pl.cast(pl.load(x, [0, 0], [8, 8]), pl.FP32) * 2.0, [0, 0], y)

    src = torch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32)).to(torch.bfloat16)
    bits = src.view(torch.uint16).numpy().copy()
    y = poison((8, 8))
    launcher.run(k.compile(bits, y), bits, y)
    np.testing.assert_array_equal(y, src.float().numpy() * 2)


@pytest.mark.parametrize("dtype", [pl.FP16, pl.FP64], ids=lambda d: d.name)
def test_float_arithmetic_in_other_widths(launcher, rng, dtype):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.sqrt(pl.load(a, [0, 0], [16, 16]) * pl.load(b, [0, 0], [16, 16])), [0, 0], y)

    a = rng.uniform(0.5, 2, (16, 16)).astype(dtype.np_storage)
    b = rng.uniform(0.5, 2, (16, 16)).astype(dtype.np_storage)
    y = poison((16, 16), dtype.np_storage)
    launcher.run(k.compile(a, b, y), a, b, y)
    want = np.sqrt(a.astype(np.float64) * b.astype(np.float64))
    tol = 1e-3 if dtype == pl.FP16 else 1e-14  # FP16 computes in float, rounds once on store
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol)


def test_return_value_must_be_a_parameter():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        return pl.load(x, [0], [4])

    with pytest.raises(PtoCompileError, match="must return its tensor parameters or pl.create_tensor tensors"):
        k.lower(np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_inout_accumulates_in_place(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, acc: pl.InOut[pl.Tensor]):
        for b in pl.spmd(2):
            for i in pl.range(0, 512, 128):
                off = b * 512 + i
                pl.store(pl.load(acc, [off], [128]) + pl.load(x, [off], [128]), [off], acc)
        return acc

    x = rng.standard_normal(1024).astype(np.float32)
    acc = rng.standard_normal(1024).astype(np.float32)
    want = acc + x
    launcher.run(k.compile(x, acc), x, acc)
    np.testing.assert_array_equal(acc, want)
