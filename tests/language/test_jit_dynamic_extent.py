"""One ``@pl.jit`` artifact for every extent of a ``pl.dynamic`` leading dimension (PyPTO's dynamic shapes).

The extent is read at run time (a hidden scalar the call passes from the argument's shape): loop
bounds and valid extents computed from it follow it, the in-memory cache keys on the signature's
static part, and a window past the run-time extent fails the launch with the statement's line.  A
trace that needs the extent as a number (a tile as large as the tensor), or a dynamic inner
dimension (strides), compiles per extent.  Random data against numpy/torch, outputs poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoArgumentError, PtoCompileError

B = pl.dynamic("B")
R = pl.dynamic("R")
C = pl.dynamic("C")
_CAP, _TILE, _COLS = 32, 16, 128


@pl.jit
def copy_batch(a: pl.Tensor[[B, _COLS], pl.FP32], out: pl.Out[pl.Tensor[[B, _COLS], pl.FP32]]):
    """PyPTO's form: a fixed loop up to a capacity, each chunk's valid rows clamped to the run-time batch."""
    batch = pl.tensor.dim(a, 0)
    for b0 in pl.parallel(0, _CAP, _TILE):
        valid = pl.max(pl.min(_TILE, batch - b0), 0)
        with pl.at(level=pl.Level.CORE_GROUP):
            chunk = pl.slice(a, [_TILE, _COLS], [b0, 0], valid_shape=[valid, _COLS])
            out = pl.assemble(out, chunk, [b0, 0])
    return out


@pl.jit
def add_rows(a: pl.Tensor[[R, 64], pl.FP32], b: pl.Tensor[[R, 64], pl.FP16],
             c: pl.Out[pl.Tensor[[R, 64], pl.FP32]]):
    """A loop over the run-time extent itself (``a.shape[0]``), the last tile partial."""
    rows = a.shape[0]
    for i in pl.range(0, rows, 16):
        v = pl.min(16, rows - i)
        with pl.at(level=pl.Level.CORE_GROUP):
            x = pl.load(a, [i, 0], [16, 64], valid_shapes=[v, 64])
            y = pl.cast(pl.load(b, [i, 0], [16, 64], valid_shapes=[v, 64]), pl.FP32)
            pl.store(pl.add(pl.mul(x, 2.0), y), [i, 0], c)
    return c


def _rand(*shape, dtype=np.float32):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)


def test_one_artifact_serves_every_batch():
    copy_batch._cache.clear()
    for n in (_CAP, 16, 24, 17):
        a, out = torch.randn(n, _COLS), torch.full((n, _COLS), float("nan"))
        copy_batch(a, out)
        torch.testing.assert_close(out, a, rtol=0, atol=0)
    assert len(copy_batch._cache) == 1


@pytest.mark.slow
def test_a_loop_over_the_run_time_extent_follows_it():
    add_rows._cache.clear()
    for n in (48, 16, 40, 7, 1):
        a, b = _rand(n, 64), _rand(n, 64, dtype=np.float16)
        c = np.full((n, 64), np.nan, np.float32)
        add_rows(a, b, c)
        np.testing.assert_allclose(c, 2 * a + b.astype(np.float32), rtol=1e-6, atol=1e-6)
    assert len(add_rows._cache) == 1
    (compiled,) = add_rows._cache.values()
    source = compiled.source_path.read_text()
    assert "s_R" in source and "INT64_C(48)" not in source  # the extent is a run-time value of the C


def test_the_compiled_handle_passes_the_extents_itself():
    add_rows._cache.clear()
    a, b = _rand(24, 64), _rand(24, 64, dtype=np.float16)
    c = np.full((24, 64), np.nan, np.float32)
    compiled = add_rows.compile(a, b, c)
    assert [p.shape for p in compiled.params][:3] == [(24, 64)] * 3
    compiled(a, b, c)
    np.testing.assert_allclose(c, 2 * a + b.astype(np.float32), rtol=1e-6, atol=1e-6)


@pl.jit
def first_rows(a: pl.Tensor[[B, 64], pl.FP32], out: pl.InOut[pl.Tensor[[B, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(a, [0, 0], [32, 64])), [0, 0], out)
    return out


def test_a_window_past_the_run_time_extent_fails_the_launch():
    first_rows._cache.clear()
    a, out = _rand(40, 64), np.full((40, 64), np.nan, np.float32)
    first_rows(a, out)
    np.testing.assert_allclose(out[:32], np.exp(a[:32]), rtol=1e-6)
    assert np.isnan(out[32:]).all()
    small, out = _rand(16, 64), np.full((16, 64), np.nan, np.float32)
    with pytest.raises(PtoArgumentError, match=r"test_jit_dynamic_extent.py:\d+: pl.load: dim 0 of 'a' past its "
                                                r"run-time extent"):
        first_rows(small, out)
    assert np.isnan(out).all()  # nothing read out of bounds, nothing stored
    assert len(first_rows._cache) == 1


@pl.jit
def scale_whole(a: pl.Tensor[[B, 64], pl.FP32], out: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.mul(pl.load(a, [0, 0], a.shape), 3.0), [0, 0], out)  # a tile as large as the tensor
    return out


@pl.jit
def inner_dynamic(a: pl.Tensor[[16, C], pl.FP32], out: pl.Out[pl.Tensor[[16, C], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.neg(pl.load(a, [0, 0], [16, 32])), [0, 0], out)
    return out


@pytest.mark.slow
def test_a_trace_that_needs_the_extent_compiles_per_extent():
    scale_whole._cache.clear()
    inner_dynamic._cache.clear()
    for n in (16, 32):
        a, out = _rand(n, 64), np.full((n, 64), np.nan, np.float32)
        scale_whole(a, out)
        np.testing.assert_allclose(out, 3 * a, rtol=1e-6)
        a, out = _rand(16, n + 32), np.full((16, n + 32), np.nan, np.float32)
        inner_dynamic(a, out)  # an inner dimension sets the strides: compiled in
        np.testing.assert_allclose(out[:, :32], -a[:, :32], rtol=0)
    assert len(scale_whole._cache) == 2 and len(inner_dynamic._cache) == 2


@pl.jit
def offset_by(a: pl.Tensor[[B, 64], pl.FP32], B_: pl.Scalar[pl.INT64], out: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
    """A scalar parameter named like the dim's hidden scalar would be: the hidden one takes another name."""
    for i in pl.range(pl.tensor.dim(out, 0) // 16):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(a, [i * 16, 0], [16, 64]), pl.cast(B_, pl.FP32)), [i * 16, 0], out)
    return out


@pytest.mark.slow
def test_a_scalar_beside_the_run_time_extent_keeps_its_value():
    offset_by._cache.clear()
    compiled = offset_by.compile(B_=pl.RUNTIME)  # every extent, B_ read at dispatch
    for n, k in ((32, 3), (64, -5)):
        a, out = _rand(n, 64), np.full((n, 64), np.nan, np.float32)
        compiled(a, k, out)
        np.testing.assert_allclose(out, a + k, rtol=1e-6)
    assert len(offset_by._cache) == 1
    # Called with a number, the kernel specialises on it (PyPTO's rule): an artifact per value, each for every extent.
    for n, k in ((32, 3), (64, 3), (32, -5)):
        a, out = _rand(n, 64), np.full((n, 64), np.nan, np.float32)
        offset_by(a, k, out)
        np.testing.assert_allclose(out, a + k, rtol=1e-6)
    assert len(offset_by._cache) == 3


def test_one_dim_is_one_extent_across_the_arguments():
    with pytest.raises(PtoCompileError, match=r"parameter 'out' is declared \[B, 128\].*B is bound to 16"):
        copy_batch(torch.randn(16, _COLS), torch.zeros(32, _COLS))
    with pytest.raises(PtoCompileError, match=r"declared \[B, 128\] but got shape \[16, 64\]"):
        copy_batch(torch.randn(16, 64), torch.zeros(16, 64))


# ---- torch_codegen of a @pl.program whose orchestration sizes windows from its pl.dynamic dims ----------


@pl.program
class RowChunks:
    @pl.function(type=pl.FunctionType.InCore)
    def twice_plus(self, x: pl.Tensor[[R, 64], pl.FP32], y: pl.Out[pl.Tensor[[R, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64])
        y = pl.store(pl.add(pl.mul(t, 2.0), 1.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def rows_main(self, x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
        for i in pl.range(pl.tensor.dim(x, 0) // 16):
            self.twice_plus(pl.slice(x, [16, 64], [i * 16, 0]), pl.slice(y, [16, 64], [i * 16, 0]))
        return y


def test_torch_codegen_of_an_unbound_dynamic_program_reads_the_extents_per_call():
    from pypto_async.debug import torch_codegen

    ns: dict = {}
    exec(torch_codegen(RowChunks, check_shapes=True), ns)  # noqa: S102
    for n in (32, 48, 32):
        x, y = torch.randn(n, 64), torch.full((n, 64), float("nan"))
        ns["rows_main"](x, y)
        torch.testing.assert_close(y, x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
