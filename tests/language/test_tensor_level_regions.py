"""PyPTO's tensor-level code inside a ``pl.at`` region, one feature per test, against torch on random data.

Each is what PyPTO's ``examples/models/03_flash_attention.py`` needed and did not have here
(tests/models/test_pypto_models.py runs that file): a plain ``pl.slice`` of a tensor inside a
region is a tensor (so ``pl.matmul(q, kj, b_trans=True)`` takes it), ``out_dtype=`` on a matmul
of a computed value and a tensor, ``pl.assemble(..., offset=)`` of an FP16 value into an FP32
tensor, an FP16 and an FP32 operand promoting as PyPTO's type deduction does, and an ``if`` on
the loop index whose branches yield a tile and the carried tensor.  Outputs are poisoned (NaN)
first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from helpers.located import assert_at, next_line
from pypto_async.errors import PtoCompileError

R, C, N = 16, 32, 64


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan")).to(dtype)


def test_a_slice_of_a_tensor_in_a_region_is_a_tensor_that_matmul_transposes():
    @pl.jit
    def k(q: pl.Tensor, kv: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            kj = pl.slice(kv, [R, C], [R, 0])  # rows R..2R
            pl.store(pl.matmul(q, kj, b_trans=True), [0, 0], out)
        return out

    g = torch.Generator().manual_seed(1)
    q, kv = torch.randn(R, C, generator=g), torch.randn(3 * R, C, generator=g)
    out = _nan(R, R)
    k(q, kv, out)
    torch.testing.assert_close(out, q @ kv[R:2 * R].T, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_matmul_of_a_computed_value_and_a_tensor_takes_out_dtype():
    @pl.jit
    def k(p: pl.Tensor, v: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            e = pl.exp(pl.load(p, [0, 0], [R, N]))  # a computed (FP16) value
            vj = pl.slice(v, [N, C], [N, 0])
            pl.store(pl.matmul(e, vj, out_dtype=pl.FP16), [0, 0], out)
        return out

    g = torch.Generator().manual_seed(2)
    p, v = torch.rand(R, N, generator=g).half(), torch.randn(2 * N, C, generator=g).half()
    out = _nan(R, C, dtype=torch.float16)
    k(p, v, out)
    e = torch.exp(p.float()).half().float()
    want = (e @ v[N:].float()).half()
    assert want.abs().max() < 32
    # FP32 accumulation, one rounding to FP16 at the end; the FP16 exp may round its last bit either
    # way (5e-4 relative on each of 64 terms): within one FP16 ulp at |x| < 32 (2**-6 = 0.0156).
    torch.testing.assert_close(out, want, rtol=1e-3, atol=2e-2)


def test_assemble_takes_offset_and_writes_an_fp16_value_into_an_fp32_tensor():
    @pl.jit
    def k(x: pl.Tensor, out: pl.InOut[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            h = pl.cast(pl.mul(pl.load(x, [0, 0], [R, C]), 2.0), target_type=pl.FP16, mode="round")
            out = pl.assemble(out, h, offset=[R, 0])
        return out

    g = torch.Generator().manual_seed(3)
    x = torch.randn(R, C, generator=g)
    out = torch.randn(2 * R, C, generator=g)
    want = out.clone()
    want[R:] = (x * 2).half().float()  # FP16 -> FP32 is exact
    out[R:] = float("nan")
    k(x, out)
    assert torch.equal(out, want)


def test_fp16_and_fp32_operands_in_a_region_promote_to_fp32_and_a_kernel_body_refuses_them():
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ma = pl.row_max(pl.load(a, [0, 0], [R, C]))  # FP16 [R, 1]
            pl.store(pl.div(pl.sub(b, ma), ma), [0, 0], out)  # FP32 [R, C] with FP16 [R, 1]: FP32
        return out

    g = torch.Generator().manual_seed(4)
    a, b = (torch.rand(R, C, generator=g) + 0.5).half(), torch.randn(R, C, generator=g)
    out = _nan(R, C)
    k(a, b, out)
    ma = a.float().amax(-1, keepdim=True)
    torch.testing.assert_close(out, (b - ma) / ma, rtol=1e-6, atol=1e-6)
    where = []

    @pl.jit
    def body(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        where.append(next_line())
        pl.store(pl.add(ta, tb), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        body.lower(a, b, out)
    assert_at(ei, where[0], "dtype mismatch in add")


@pytest.mark.slow
def test_an_if_on_the_loop_index_yields_a_value_in_one_branch_and_the_carried_tensor_in_the_other():
    """PyPTO's ``if i == last: y = pl.yield_(value) else: y = pl.yield_(carried)`` (flash attention's attn)."""
    steps = 4

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc0 = pl.create_tensor([R, C], dtype=pl.FP32)
            res0 = pl.create_tensor([R, C], dtype=pl.FP32)
            for i, (acc, res) in pl.range(steps, init_values=(acc0, res0)):
                xi = pl.slice(x, [R, C], [i * R, 0])
                if i == 0:
                    acc_new = pl.assemble(acc, xi, [0, 0])
                    acc_y, res_y = pl.yield_(acc_new, res)
                else:
                    acc_new = pl.assemble(acc, pl.add(acc, xi), [0, 0])
                    if i == steps - 1:
                        r = pl.yield_(pl.mul(acc_new, 0.5))
                    else:
                        r = pl.yield_(res)
                    acc_y, res_y = pl.yield_(acc_new, r)
                acc_f, res_f = pl.yield_(acc_y, res_y)
            pl.store(res_f, [0, 0], out)
        return out

    g = torch.Generator().manual_seed(5)
    x = torch.randn(steps * R, C, generator=g)
    out = _nan(R, C)
    k(x, out)
    torch.testing.assert_close(out, x.view(steps, R, C).sum(0) * 0.5, rtol=1e-6, atol=1e-6)
