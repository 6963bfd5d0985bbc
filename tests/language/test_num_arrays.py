"""PyPTO's arrays of numbers (language/00-types, "Container types"): ``pl.array.create(n, pl.INT32)``,
``arr[i] = v`` (``array.update_element``) and ``x = arr[i]`` (``array.get_element``).

Kernels in the guide's style, checked against numpy on random data with outputs poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoNotSupported


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pytest.mark.slow
def test_an_on_core_array_indexed_by_loop_and_runtime_values():
    """A histogram of row ids kept in an INT32 array, then each row scaled by its slot's count."""

    @pl.jit
    def counts(ids: pl.Tensor[[8], pl.INT32], x: pl.Tensor[[4, 32], pl.FP32],
               out: pl.Out[pl.Tensor[[4, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            hist = pl.array.create(4, pl.INT32)
            for i in pl.range(8):
                r = pl.read(ids, [i])
                hist[r] = hist[r] + 1                        # a runtime index
            for j in pl.range(4):
                c = pl.array.get_element(hist, j)            # a loop index
                row = pl.load(x, [j, 0], [1, 32])
                acc = pl.full([1, 32], 0.0, pl.FP32)
                for _ in pl.range(c):                        # the count bounds a loop: row * count
                    acc = pl.add(acc, row)
                out = pl.store(acc, [j, 0], out)
        return out

    rng = np.random.default_rng(5)
    ids = torch.from_numpy(rng.integers(0, 4, size=8).astype(np.int32))
    x, out = torch.randn(4, 32), _nan(4, 32)
    counts(ids, x, out)
    hist = np.bincount(ids.numpy(), minlength=4).astype(np.float32)
    np.testing.assert_allclose(out.numpy(), x.numpy() * hist[:, None], rtol=1e-6, atol=1e-6)


def test_elements_wrap_to_the_element_type_and_reads_are_snapshots():
    """Each row gets a 1.0 at the column a value names (offset by 128): the value as the element type holds it."""

    @pl.jit
    def wraps(v: pl.Tensor[[4], pl.INT64], marks: pl.InOut[pl.Tensor[[5, 512], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a8 = pl.array.create(2, pl.INT8)
            a8[0] = pl.read(v, [0])
            first = a8[0]
            a8[0] = 7                                        # a later write does not change `first`
            b = pl.array.create(1, pl.BOOL)
            b[0] = pl.read(v, [1])
            u = pl.array.create(1, pl.UINT8)
            u[0] = pl.read(v, [2])
            one = pl.full([1, 1], 1.0, pl.FP32)
            for row, value in enumerate((first, b[0], u[0], a8[0] + a8[1], a8[0])):
                marks = pl.store(one, [row, value + 128], marks)
        return marks

    rng = np.random.default_rng(9)
    v = torch.from_numpy(rng.integers(-1000, 1000, size=4).astype(np.int64))
    v[1] = 0 if rng.random() < 0.5 else v[1]
    marks = torch.zeros(5, 512)
    wraps(v, marks)
    want = [int(np.int64(v[0]).astype(np.int8)), int(v[1] != 0), int(v[2]) % 256, 7, 7]  # a slot never written is 0
    assert marks.sum().item() == 5
    assert [int(c) - 128 for c in marks.argmax(dim=1)] == want


def test_an_orchestration_array_holds_what_the_trace_knows():
    @pl.jit
    def offsets(x: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        starts = pl.array.create(2, pl.INT64)
        starts[0] = 0
        starts[1] = 32
        for k in pl.range(2):
            with pl.at(level=pl.Level.CORE_GROUP):
                r = pl.array.get_element(starts, 1) * k      # in the orchestration, read at a known index
                out = pl.store(pl.neg(pl.load(x, [r, 0], [32, 32])), [r, 0], out)
        return out

    x, out = torch.randn(64, 32), _nan(64, 32)
    offsets(x, out)
    torch.testing.assert_close(out, -x, rtol=0, atol=0)


def test_array_misuse():
    @pl.jit
    def outside(x: pl.Tensor[[8], pl.INT32], out: pl.Out[pl.Tensor[[8], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a = pl.array.create(4, pl.INT32)
            a[5] = 1
            pl.write(out, [0], 0)
        return out

    with pytest.raises(PtoCompileError, match="slots 5..5, outside the array's 4 slots"):
        outside.compile()

    @pl.jit
    def crossing(x: pl.Tensor[[8], pl.INT32], out: pl.Out[pl.Tensor[[8], pl.INT32]]):
        a = pl.array.create(4, pl.INT32)
        with pl.at(level=pl.Level.CORE_GROUP):
            a[1] = 1
            pl.write(out, [0], 0)
        return out

    with pytest.raises(PtoCompileError, match="does not cross a function boundary"):
        crossing.compile()

    @pl.jit
    def looped(x: pl.Tensor[[8], pl.INT32], out: pl.Out[pl.Tensor[[8], pl.INT32]]):
        a = pl.array.create(4, pl.INT32)
        for i in pl.range(4):
            a[i] = i
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.write(out, [i], 0)
        return out

    with pytest.raises(PtoNotSupported, match="orchestration array is written at indices known"):
        looped.compile()

    @pl.jit
    def floats(x: pl.Tensor[[8], pl.INT32], out: pl.Out[pl.Tensor[[8], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.array.create(4, pl.FP32)
            pl.write(out, [0], 0)
        return out

    with pytest.raises(PtoCompileError, match="integer or BOOL"):
        floats.compile()
