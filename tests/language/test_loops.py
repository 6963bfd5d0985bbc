"""Loop-carried tiles in pl.range: rebinding a name, and init_values= with pl.yield_; pl.parallel.

A pl.range body is traced once; a tile name rebound in it is carried from
one iteration to the next as Python would (each iteration reads the previous
one's value), and after the loop the name holds the last value.  Each test
runs the kernel against numpy with outputs poisoned.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from helpers.ir_fixtures import poison

X = np.zeros((64, 16), np.float32)


@pytest.mark.slow
def test_rebinding_accumulates(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        acc = pl.zeros([16, 16])
        for i in pl.range(0, 64, 16):
            acc = acc + pl.load(a, [i, 0], [16, 16])
        pl.store(acc, [0, 0], out)

    a = rng.standard_normal((64, 16)).astype(np.float32)
    out = poison((16, 16))
    launcher.run(k.compile(a, out), a, out)
    want = np.zeros((16, 16), np.float32)
    for i in range(0, 64, 16):
        want += a[i:i + 16]
    np.testing.assert_array_equal(out, want)


def test_pyptos_quickstart_carry(launcher, rng):
    """t = a + a; three times t = t + a: 5a, read after the loop."""

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [32, 32])
            t = pl.add(ta, ta)
            for i in pl.range(3):
                t = pl.add(t, ta)
            pl.assemble(out, pl.mul(t, t), [0, 0])
        return out

    a = rng.standard_normal((32, 32)).astype(np.float32)
    out = poison((32, 32))
    launcher.run(k.compile(a, out), a, out)
    t = a + a
    for _ in range(3):
        t = t + a
    np.testing.assert_array_equal(out, t * t)


def test_the_ir_carries_the_tile():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        acc = pl.zeros([16, 16])
        for i in pl.range(0, 64, 16):
            acc = acc + pl.load(a, [i, 0], [16, 16])
        pl.store(acc, [0, 0], out)

    text = str(k.trace(X, X[:16]))
    assert "%3: FP32[16, 16] = move %0 to Vec" in text  # the carried tile, before the loop
    assert "%2: FP32[16, 16] = add %3, %1" in text  # the body reads the carried tile
    assert "    %3 <- %2" in text  # and updates it last
    assert "store %3 -> out[0, 0]" in text  # after the loop, the name holds it


def test_a_swap_is_a_parallel_assignment(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, out_a: pl.Out[pl.Tensor], out_b: pl.Out[pl.Tensor]):
        ta, tb = pl.load(a, [0, 0], [8, 8]), pl.load(b, [0, 0], [8, 8])
        for i in pl.range(3):
            ta, tb = tb, ta + 1.0
        pl.store(ta, [0, 0], out_a)
        pl.store(tb, [0, 0], out_b)

    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    oa, ob = poison((8, 8)), poison((8, 8))
    launcher.run(k.compile(a, b, oa, ob), a, b, oa, ob)
    ta, tb = a, b
    for _ in range(3):
        ta, tb = tb, ta + np.float32(1)
    np.testing.assert_array_equal(oa, ta)
    np.testing.assert_array_equal(ob, tb)


@pytest.mark.slow
def test_nested_loops_carry_through_both(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        acc = pl.load(a, [0, 0], [8, 16])
        for i in pl.range(0, 64, 16):
            for j in pl.range(0, 16, 8):
                acc = pl.maximum(acc, pl.load(a, [i + j, 0], [8, 16])) * 0.5
        pl.store(acc, [0, 0], out)

    a = rng.standard_normal((64, 16)).astype(np.float32)
    out = poison((8, 16))
    launcher.run(k.compile(a, out), a, out)
    acc = a[:8].copy()
    for i in range(0, 64, 16):
        for j in range(0, 16, 8):
            acc = np.maximum(acc, a[i + j:i + j + 8]) * np.float32(0.5)
    np.testing.assert_array_equal(out, acc)


def test_a_loop_without_iterations_keeps_the_initial_value(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [8, 16])
        for i in pl.range(0):
            t = t * 3.0
        pl.store(t, [0, 0], out)

    a = rng.standard_normal((8, 16)).astype(np.float32)
    out = poison((8, 16))
    launcher.run(k.compile(a, out), a, out)
    np.testing.assert_array_equal(out, a)


@pytest.mark.slow
def test_matmul_accumulation_by_rebinding(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        acc = pl.matmul(pl.load(a, [0, 0], [16, 32]), pl.load(b, [0, 0], [32, 24]))
        for kk in pl.range(32, 128, 32):
            acc = pl.add(acc, pl.matmul(pl.load(a, [0, kk], [16, 32]), pl.load(b, [kk, 0], [32, 24])))
        pl.store(acc, [0, 0], c)

    a = rng.standard_normal((16, 128)).astype(np.float32)
    b = rng.standard_normal((128, 24)).astype(np.float32)
    c = poison((16, 24))
    launcher.run(k.compile(a, b, c), a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_init_values_and_yield(launcher, rng):
    """PyPTO's explicit form: two carried tiles, read after the loop under the yield_ names."""

    @pl.jit
    def k(a: pl.Tensor, mx: pl.Out[pl.Tensor], sm: pl.Out[pl.Tensor]):
        init_max = pl.full([8, 16], -1e30, pl.FP32)
        init_sum = pl.zeros([8, 16], pl.FP32)
        for i, (acc_max, acc_sum) in pl.range(8, init_values=(init_max, init_sum)):
            row_i = pl.load(a, [i * 8, 0], [8, 16])
            out_max, out_sum = pl.yield_(pl.maximum(acc_max, row_i), pl.add(acc_sum, row_i))
        pl.store(out_max, [0, 0], mx)
        pl.store(out_sum, [0, 0], sm)

    a = rng.standard_normal((64, 16)).astype(np.float32)
    mx, sm = poison((8, 16)), poison((8, 16))
    launcher.run(k.compile(a, mx, sm), a, mx, sm)
    blocks = a.reshape(8, 8, 16)
    np.testing.assert_array_equal(mx, blocks.max(axis=0))
    want = np.zeros((8, 16), np.float32)
    for blk in blocks:
        want += blk
    np.testing.assert_array_equal(sm, want)


def test_yield_of_a_single_value(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i, (acc,) in pl.range(4, init_values=(pl.load(a, [0, 0], [8, 16]),)):
            res = pl.yield_(acc * 2.0)
        pl.store(res, [0, 0], out)

    a = rng.standard_normal((8, 16)).astype(np.float32)
    out = poison((8, 16))
    launcher.run(k.compile(a, out), a, out)
    np.testing.assert_array_equal(out, a * np.float32(16))


def test_parallel_is_a_loop(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.parallel(0, 64, 16):
            pl.store(pl.exp(pl.load(a, [i, 0], [16, 16])), [i, 0], out)

    a = rng.standard_normal((64, 16)).astype(np.float32)
    out = poison((64, 16))
    assert "for i0 in parallel(0, 64, 16) {" in str(k.trace(a, out))  # the hint is recorded
    launcher.run(k.compile(a, out), a, out)
    np.testing.assert_allclose(out, np.exp(a.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("n", [1, 5])
def test_bare_dtype_and_index_scalar_parameters(launcher, rng, n):
    @pl.jit
    def k(a: pl.Tensor, scale: pl.FP32, n_valid: pl.INDEX, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [8, 8], valid_shape=[n_valid, 8])
        pl.store(pl.fillpad(t * scale, pl.PadValue.zero), [0, 0], out)

    a = rng.standard_normal((8, 8)).astype(np.float32)
    out = poison((8, 8))
    c = k.compile(a, 0.25, n, out)
    assert [p.dtype for p in c.params[1:3]] == [pl.FP32, pl.INDEX] and pl.INDEX == pl.INT64
    launcher.run(c, a, 0.25, n, out)
    want = np.zeros((8, 8), np.float32)
    want[:n] = a[:n] * np.float32(0.25)
    np.testing.assert_array_equal(out, want)


@pl.program
class _CarryRebind:
    """PyPTO's orchestration carry-rebind (its issue #1286): each iteration reads the tensor the last one wrote."""

    @pl.function(type=pl.FunctionType.InCore)
    def add_one(self, src: pl.Tensor[[16, 64], pl.FP32], dst: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        return pl.store(pl.add(pl.load(src, [0, 0], [16, 64]), 1.0), [0, 0], dst)

    @pl.function(type=pl.FunctionType.InCore)
    def copy(self, src: pl.Tensor[[16, 64], pl.FP32], dst: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        return pl.store(pl.load(src, [0, 0], [16, 64]), [0, 0], dst)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[16, 64], pl.FP32], c: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        cur = pl.create_tensor([16, 64], dtype=pl.FP32)
        cur = self.copy(a, cur)
        for _ in pl.range(4):
            nxt = pl.create_tensor([16, 64], dtype=pl.FP32)
            nxt = self.add_one(cur, nxt)
            cur = nxt
        return self.copy(cur, c)


@pl.program
class _FreshEachIteration:
    @pl.function(type=pl.FunctionType.InCore)
    def add_one(self, src: pl.Tensor[[16, 64], pl.FP32], dst: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        return pl.store(pl.add(pl.load(src, [0, 0], [16, 64]), 1.0), [0, 0], dst)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[16, 64], pl.FP32], c: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        t = pl.create_tensor([16, 64], dtype=pl.FP32)
        for _ in pl.range(2):
            t = pl.create_tensor([16, 64], dtype=pl.FP32)  # rebound, but the old tensor is never read
            t = self.add_one(a, t)
            c = self.add_one(t, c)
        return c


@pl.program
class _CarryFromInput:
    @pl.function(type=pl.FunctionType.InCore)
    def add_one(self, src: pl.Tensor[[16, 64], pl.FP32], dst: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        return pl.store(pl.add(pl.load(src, [0, 0], [16, 64]), 1.0), [0, 0], dst)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[16, 64], pl.FP32], c: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        cur = a
        for _ in pl.range(3):
            nxt = pl.create_tensor([16, 64], dtype=pl.FP32)
            nxt = self.add_one(cur, nxt)
            cur = nxt  # would copy into the input 'a'
        return self.add_one(cur, c)


@pytest.mark.slow
def test_an_orchestration_tensor_rebound_across_iterations_is_carried(launcher, rng):
    from pypto_async import ir
    from pypto_async.errors import PtoCompileError

    a = rng.standard_normal((16, 64)).astype(np.float32)
    out = poison((16, 64))
    launcher.run(ir.compile(_CarryRebind), a, out)  # each iteration reads the tensor the one before wrote
    np.testing.assert_allclose(out, a + 4.0, rtol=1e-6)
    assert "cur_carry" in str(_CarryRebind.trace())
    out = poison((16, 64))
    launcher.run(ir.compile(_FreshEachIteration), a, out)  # a name only rebound to fresh tensors: no copy
    np.testing.assert_allclose(out, a + 2.0, rtol=1e-6)
    assert "_carry" not in str(_FreshEachIteration.trace())
    with pytest.raises(PtoCompileError, match=r"tensor 'cur' is rebound .* 'a' is an input"):
        _CarryFromInput.trace()


@pl.program
class _ContinueOnIndex:
    """PyPTO's for_loop_continue: ``if i % 2 != 0: continue`` on a pl.range index (known only at run time)."""

    @pl.function(type=pl.FunctionType.InCore)
    def k(self, a: pl.Tensor[[256, 64], pl.FP32], c: pl.InOut[pl.Tensor[[256, 64], pl.FP32]]):
        for i in pl.range(4):
            if i % 2 != 0:
                continue
            if i == 2:
                t = pl.load(a, [i * 64, 0], [64, 64])
                out = pl.store(pl.mul(t, 3.0), [i * 64, 0], c)
                continue
            t = pl.load(a, [i * 64, 0], [64, 64])
            out = pl.store(pl.add(t, 1.0), [i * 64, 0], c)  # bound in one branch only: the tensor c all the same
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[256, 64], pl.FP32], c: pl.InOut[pl.Tensor[[256, 64], pl.FP32]]):
        return self.k(a, c)


@pytest.mark.slow
def test_continue_under_a_runtime_if_skips_the_rest_of_the_iteration(launcher, rng):
    from pypto_async import ir

    a = rng.standard_normal((256, 64)).astype(np.float32)
    c = np.full((256, 64), 7.0, np.float32)
    launcher.run(ir.compile(_ContinueOnIndex), a, c)
    want = np.full((256, 64), 7.0, np.float32)
    want[0:64], want[128:192] = a[0:64] + 1.0, a[128:192] * 3.0
    np.testing.assert_allclose(c, want, rtol=1e-6)
