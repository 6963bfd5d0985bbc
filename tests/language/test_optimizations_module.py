"""pl.optimizations: PyPTO's module of a region's hints holds pl.split / pl.cross_core_slot themselves."""

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from helpers.ir_fixtures import poison


def test_the_module_holds_the_same_objects():
    assert pl.optimizations.split is pl.split and pl.optimizations.cross_core_slot is pl.cross_core_slot
    assert isinstance(pl.optimizations.split(pl.SplitMode.UP_DOWN), pl.optimizations.Split)
    assert isinstance(pl.optimizations.cross_core_slot(slot_num=2), pl.optimizations.CrossCoreSlot)
    for cls in (pl.optimizations.Split, pl.optimizations.CrossCoreSlot):
        assert issubclass(cls, pl.optimizations.Optimization)


@pl.jit
def mixed(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, optimizations=[pl.optimizations.split(pl.SplitMode.LEFT_RIGHT),
                                                         pl.optimizations.cross_core_slot(slot_num=4)]):
        acc = pl.matmul(a, b, out_dtype=pl.FP32)
        pl.store(pl.add(acc, bias), [0, 0], out)
    return out


def test_a_region_takes_them_and_computes_the_unsplit_result(rng):
    a = rng.standard_normal((32, 64)).astype(np.float16)
    b = rng.standard_normal((64, 32)).astype(np.float16)
    bias = rng.standard_normal((32, 32)).astype(np.float32)
    out = poison((32, 32))
    assert "split=LEFT_RIGHT cross_core_slot=4" in str(mixed.lower(a, b, bias, out))
    mixed(a, b, bias, out)
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32) + bias, rtol=1e-3, atol=1e-3)


def test_a_bad_slot_count_is_refused():
    with pytest.raises(PtoCompileError):
        pl.optimizations.cross_core_slot(slot_num=0)
