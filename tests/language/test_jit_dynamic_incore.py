"""A run-time ``pl.dynamic`` extent through ``@pl.jit.incore`` helpers and tensor windows (PyPTO's user guide).

The entry's leading extent is read at run time (one artifact for every extent, the cache holding one entry):
passed whole to a helper whose annotation names the same dimension, cut into fixed windows by a loop over
it (the last one partial through ``valid_shape=``), or sliced as a window whose size is the extent itself.
A window past the run-time extent fails the launch at the helper's statement, nothing stored.  Random data
against numpy, outputs poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoArgumentError, PtoNotSupported

N = pl.dynamic("N")
_TILE = 32


def _rand(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def _poison(*shape):
    return np.full(shape, np.nan, np.float32)


# ---- the user guide's form: the entry dynamic too, the helper moving a fixed tile ------------------------


@pl.jit.incore
def rows(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    out = pl.store(pl.mul(pl.load(x, [0, 0], [_TILE, 64]), 2.0), [0, 0], out)
    return out


@pl.jit
def drive(x: pl.Tensor[[N, 64], pl.FP32], out: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    return rows(x, out)


def test_the_guides_dynamic_entry_shares_one_artifact():
    drive._cache.clear()
    for extent in (_TILE, 3 * _TILE, _TILE + 5):
        x = torch.randn(extent, 64)
        out = torch.full((extent, 64), float("nan"))
        drive(x, out)
        torch.testing.assert_close(out[:_TILE], x[:_TILE] * 2.0, rtol=1e-6, atol=1e-6)
    assert len(drive._cache) == 1


# ---- a loop over the run-time extent, a fixed window per task ----------------------------------------------


@pl.jit.incore
def twice_plus(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    y = pl.store(pl.add(pl.mul(pl.load(x, [0, 0], [16, 64]), 2.0), 1.0), [0, 0], y)
    return y


@pl.jit
def chunks(x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    for i in pl.range(0, pl.tensor.dim(x, 0), 16):
        twice_plus(pl.slice(x, [16, 64], [i, 0]), pl.slice(y, [16, 64], [i, 0]))
    return y


def test_a_task_per_window_of_the_run_time_extent():
    chunks._cache.clear()
    for n in (48, 16, 80):
        x, y = _rand(n, 64), _poison(n, 64)
        chunks(x, y)
        np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6, atol=1e-6)
    assert len(chunks._cache) == 1


def test_a_window_past_the_run_time_extent_fails_at_the_helpers_load():
    chunks._cache.clear()
    x, y = _rand(40, 64), _poison(40, 64)  # the third window, rows 32..48, runs past the 40 rows
    with pytest.raises(PtoArgumentError, match=r"task twice_plus: test_jit_dynamic_incore.py:\d+: pl.load: "
                                               r"dim 0 of 'x' past its run-time extent"):
        chunks(x, y)
    assert np.isnan(y).all()  # the launch failed before any task stored
    assert len(chunks._cache) == 1


@pl.jit.incore
def exp16(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    y = pl.store(pl.exp(pl.load(x, [0, 0], [16, 64])), [0, 0], y)
    return y


@pl.jit
def ragged(x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    n = x.shape[0]
    for i in pl.range(0, n, 16):
        v = pl.min(16, n - i)
        exp16(pl.slice(x, [16, 64], [i, 0], valid_shape=[v, 64]), pl.slice(y, [16, 64], [i, 0], valid_shape=[v, 64]))
    return y


def test_the_last_window_is_partial_through_valid_shape():
    ragged._cache.clear()
    for n in (40, 7, 32):
        x, y = _rand(n, 64), _poison(n, 64)
        ragged(x, y)
        np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    assert len(ragged._cache) == 1


# ---- a window whose size is the run-time extent, passed to a helper that loops over it -------------------


@pl.jit.incore
def negate(x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    n = pl.tensor.dim(x, 0)
    for i in pl.range(0, n, 8):
        y = pl.store(pl.neg(pl.load(x, [i, 0], [8, 64])), [i, 0], y)
    return y


@pl.jit
def whole_window(x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    n = pl.tensor.dim(x, 0)
    negate(pl.slice(x, [n, 64], [0, 0]), pl.slice(y, [n, 64], [0, 0]))
    return y


def test_a_window_as_large_as_the_run_time_extent():
    whole_window._cache.clear()
    for n in (32, 8, 56):
        x, y = _rand(n, 64), _poison(n, 64)
        whole_window(x, y)
        np.testing.assert_allclose(y, -x, rtol=0)
    assert len(whole_window._cache) == 1


# ---- kernel.compile() with no arguments: the artifact for every extent -------------------------------------


def test_compile_from_the_signature_gives_the_handle_for_every_extent():
    chunks._cache.clear()
    compiled = chunks.compile()  # PyPTO's: the dynamic dim needs no value
    assert [str(p.shape) for p in compiled.params] == ["(N, 64)", "(N, 64)", "()"]  # N: the placeholder's name
    assert "2147483647" not in repr(compiled.params) and "2147483647" not in str(compiled.program)
    for n in (32, 64):
        x, y = _rand(n, 64), _poison(n, 64)
        compiled(x, y)
        np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6, atol=1e-6)
    chunks(_rand(16, 64), _poison(16, 64))
    assert len(chunks._cache) == 1  # compile() and the call share the one entry
    with pytest.raises(PtoArgumentError, match=r"chunks: argument 'y' is declared \[N, 64\], got shape \[32, 32\]: "
                                               r"dimension 1 is 32, not 64"):
        compiled(_rand(32, 64), _poison(32, 32))


C = pl.dynamic("C")


@pl.jit
def inner(x: pl.Tensor[[16, C], pl.FP32], y: pl.Out[pl.Tensor[[16, C], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.neg(pl.load(x, [0, 0], [16, 16])), [0, 0], y)
    return y


@pl.jit
def whole_tile(x: pl.Tensor[[N, 64], pl.FP32], y: pl.Out[pl.Tensor[[N, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.neg(pl.load(x, [0, 0], x.shape)), [0, 0], y)
    return y


def test_compile_from_the_signature_says_which_extent_it_needs():
    with pytest.raises(PtoNotSupported, match=r"inner.compile\(\) with no arguments: parameter 'x' is \[16, C\], "
                                              r"and C has no extent here: only a pl.dynamic dimension used as "
                                              r"nothing but leading extents is read at run time"):
        inner.compile()
    with pytest.raises(PtoNotSupported, match=r"whole_tile.compile\(\) with no arguments leaves N to run time, "
                                              r"but the trace needs its extent as a number"):
        whole_tile.compile()


@pytest.mark.slow
@pytest.mark.parametrize("n", [16, 24, 64, 112, 256])
def test_every_form_over_more_extents(n):
    x = _rand(n, 64)
    for kernel, ref in ((chunks, 2 * x + 1), (ragged, np.exp(x)), (whole_window, -x)):
        if kernel is chunks and n % 16:
            continue
        y = _poison(n, 64)
        kernel(x, y)
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    assert len(chunks._cache) == len(ragged._cache) == len(whole_window._cache) == 1
