"""Subscript assignment into a tensor (``out[:] = expr``, ``out[a:b, c:d] = expr``) and slice reads.

PyPTO lowers ``out[a:b, c:d] = expr`` to an assemble of ``expr`` into the
tensor; here it is the store of that tile into the window, checked as a
store is.  ``x[a:b, c:d]`` of a tensor used as an operand loads that window.
Outputs are poisoned (NaN) or random, so a store that misses or overruns
its window shows.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from pypto_async.ir._deps import Edge
from helpers.ir_fixtures import poison




@pl.jit
def two_stages(x: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage1"):
        scratch[:] = pl.add(x, x)
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage2"):
        out[:] = pl.mul(scratch, pl.exp(scratch))
    return scratch, out


def test_whole_tensor_assignment_in_regions_orders_the_stages(launcher, rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    scratch, out = poison((64, 64)), poison((64, 64))
    c = two_stages.compile(x, scratch, out)
    assert [t.name for t in c.task_graph.tasks] == ["stage1", "stage2"]
    assert c.task_graph.edges == (Edge(0, 1, "inferred", "RAW", "scratch"),)
    launcher.run(c, x, scratch, out)
    s = torch.from_numpy(x) * 2
    torch.testing.assert_close(torch.from_numpy(scratch), s)
    torch.testing.assert_close(torch.from_numpy(out), s * torch.exp(s), rtol=1e-5, atol=1e-5)


def test_the_assignment_is_a_store_in_the_ir():
    x = np.ones((64, 64), np.float32)
    text = two_stages.lower(x, x.copy(), x.copy()).as_python()
    assert "pl.store(" in text and "scratch" in text


def test_window_assignment_writes_only_its_window_from_slice_reads(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Tensor, out: pl.InOut[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[0:16, 32:64] = pl.add(x[16:32, 0:32], y[0:16, 32:64])
            out[16:32, :32] = pl.neg(x[0:16, 32:64])
        return out

    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((32, 64)).astype(np.float32)
    out = rng.standard_normal((32, 64)).astype(np.float32)
    want = out.copy()
    want[0:16, 32:64] = x[16:32, 0:32] + y[0:16, 32:64]
    want[16:32, :32] = -x[0:16, 32:64]
    k(x, y, out)
    np.testing.assert_array_equal(out, want)


def test_assignment_per_loop_iteration_with_index_bounds(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(4):
                out[i * 16:(i + 1) * 16, :] = pl.exp(pl.mul(x[i * 16:(i + 1) * 16, :], 0.5))
        return out

    x = rng.standard_normal((64, 32)).astype(np.float32)
    out = poison((64, 32))
    launcher.run(k.compile(x, out), x, out)
    torch.testing.assert_close(torch.from_numpy(out), torch.exp(torch.from_numpy(x) * 0.5))


def test_assigning_a_tensor_copies_it(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:, :] = x
        return out

    x = rng.integers(-1000, 1000, (16, 48)).astype(np.int32)
    out = np.full((16, 48), -7, np.int32)
    launcher.run(k.compile(x, out), x, out)
    np.testing.assert_array_equal(out, x)


N = 32


@pl.program
class OpaqueAssign:
    @pl.function(type=pl.FunctionType.Opaque)
    def entry(self, x: pl.Tensor[[N, N], pl.FP32], out: pl.Tensor[[N, N], pl.FP32]) -> pl.Tensor[[N, N], pl.FP32]:
        with pl.auto_incore():
            out[:] = pl.sqrt(pl.add(pl.abs(x), 1.0))
        return out


def test_an_opaque_entry_assigning_its_tensor_makes_it_an_output(launcher, rng):
    c = ir.compile(OpaqueAssign)
    x = rng.standard_normal((N, N)).astype(np.float32)
    out = poison((N, N))
    launcher.run(c, x, out)
    torch.testing.assert_close(torch.from_numpy(out), torch.sqrt(torch.from_numpy(x).abs() + 1))


X = np.ones((32, 64), np.float32)


def _lower_error(body):
    with pytest.raises(PtoCompileError) as ei:
        body.lower(X, X.copy())
    return ei


def test_assignment_of_the_wrong_shape():
    where = []

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            out[0:16, :] = pl.add(x, 1.0)

    assert_at(_lower_error(k), where[0], "out[0:16, :] = ...", "the value is FP32[32, 64] but the window is [16, 64]")


def test_assignment_of_the_wrong_dtype():
    where = []

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            out[:] = pl.cast(x, pl.FP16)

    assert_at(_lower_error(k), where[0], "the value is FP16 but 'out' is FP32", "pl.cast")


def test_assignment_into_an_input():
    where = []

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            x[:] = pl.add(x, 1.0)

    assert_at(_lower_error(k), where[0], "store to In parameter 'x'")


def test_assignment_outside_the_tensor():
    where = []

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            out[24:40, :] = pl.add(x[0:16, :], 1.0)

    assert_at(_lower_error(k), where[0], "outside [0, 32]")


def test_assignment_of_a_number():
    where = []

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            out[:] = 0.0

    assert_at(_lower_error(k), where[0], "the value must be a tile or a tensor, got 0.0", "pl.full")
