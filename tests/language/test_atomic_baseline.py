"""``pl.store(..., atomic=pl.AtomicType.Add)`` adds onto what the caller's tensor holds, in every dtype PyPTO's does.

PyPTO's atomic-add store accumulates onto the destination's baseline, so a
``@pl.jit`` kernel's ``pl.Out`` parameter that one adds into is read as well
as written (copied in): the result is baseline + tile.  FP32, FP16, BF16,
INT32, INT16 and INT8, on random data against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl


@pl.jit
def add_into(x: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out, atomic=pl.AtomicType.Add)
    return out


@pl.jit
def add_twice(x: pl.Tensor, out: pl.Out[pl.Tensor]):
    for b in pl.spmd(2):  # two blocks add their halves' sum into the same window
        pl.assemble(out, pl.load(x, [b * 16, 0], [16, 32]), [0, 0], atomic=pl.AtomicType.Add)
    return out


def _data(dtype, seed):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-20, 20, (16, 32)).astype(dtype), np.full((16, 32), 3, dtype)
    return rng.standard_normal((16, 32)).astype(dtype), np.full((16, 32), 1.5, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int16, np.int8], ids=lambda d: d.__name__)
def test_an_atomic_add_store_adds_onto_the_baseline(dtype):
    x, out = _data(dtype, 1)
    want = (out.astype(np.float64) + x.astype(np.float64)).astype(dtype)
    add_into(x, out)
    np.testing.assert_array_equal(out, want)
    assert add_into.trace(x, out).params[1].direction == "inout"  # read as well as written


def test_a_bf16_atomic_add_rounds_once():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)).bfloat16()
    out = torch.full((16, 32), 1.5, dtype=torch.bfloat16)
    add_into(x, out)
    assert torch.equal(out, (x.float() + 1.5).bfloat16())


def test_blocks_adding_into_one_window_add_onto_the_baseline():
    x = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    out = np.full((16, 32), 2.0, np.float32)
    add_twice(x, out)
    np.testing.assert_allclose(out, 2.0 + x[:16] + x[16:], rtol=1e-6, atol=1e-6)
