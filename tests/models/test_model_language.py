"""The language PyPTO's model programs use, one feature per test, against torch on random data.

Each is what a file of PyPTO's examples/models needed and did not have here: the ``pl.tensor``
namespace (04-09), ``pl.TensorView`` (06), module-level InCore kernels called by name and index
arguments for scalar parameters (04), ``BackendType.Ascend910B`` (04, 07, 09),
``runtime.TensorSpec`` (09), and qwen3_jit's inline helpers (an ``if`` on a loop index, an
accumulator made by ``pl.create_tensor``, a tile read by the next region, a cache written
through an inline helper's parameter, ``tile[a:b]``).  Outputs are poisoned (NaN) first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from helpers.located import assert_at, next_line
from pypto_async import ir
from pypto_async.backend import BackendType
from pypto_async.errors import PtoArgumentError, PtoCompileError, PtoNotSupported
from pypto_async.runtime import RunConfig, TensorSpec

R, C = 16, 64


def _nan(*shape):
    return torch.full(shape, float("nan"))


def test_pypto_backend_names_name_the_sim_backend():
    assert {b.name for b in BackendType} >= {"Ascend910B", "Ascend950"}
    cfg = RunConfig(backend_type=BackendType.Ascend910B)
    assert cfg.compile_kwargs()["backend_type"] is BackendType.Ascend910B

    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(x, [0, 0], [R, C]), 1.0), [0, 0], out)
        return out

    x = torch.randn(R, C)
    for backend in (BackendType.Ascend910B, BackendType.Ascend950):
        out = _nan(R, C)
        k.compile(x, out, backend_type=backend)(x, out)
        assert torch.equal(out, x + 1)
    with pytest.raises(PtoArgumentError, match="backend_type"):
        k.compile(x, _nan(R, C), backend_type=BackendType.CCE)


def test_tensor_spec_makes_the_host_tensors_pypto_documents():
    g = torch.Generator().manual_seed(0)
    table = torch.arange(6, dtype=torch.int64)
    specs = [TensorSpec("a", [2, 3], torch.float32), TensorSpec("b", [4], torch.int32, init_value=7),
             TensorSpec("c", [6], torch.int32, init_value=table), TensorSpec("d", [3, 3], torch.bfloat16,
                                                                             init_value=torch.randn),
             TensorSpec("e", [2], torch.float32, init_value=lambda: torch.randn(2, generator=g)),
             TensorSpec("out", [2, 3], torch.float32, is_output=True)]
    a, b, c, d, e, out = (s.create_tensor() for s in specs)
    assert torch.equal(a, torch.zeros(2, 3)) and torch.equal(b, torch.full((4,), 7, dtype=torch.int32))
    assert c.dtype == torch.int32 and torch.equal(c, table.int())
    assert d.shape == (3, 3) and d.dtype == torch.bfloat16 and d.float().std() > 0
    assert e.shape == (2,) and [s.is_output for s in specs] == [False] * 5 + [True]
    with pytest.raises(PtoArgumentError, match="shape"):
        TensorSpec("f", [3], torch.float32, init_value=lambda: torch.zeros(2)).create_tensor()
    with pytest.raises(PtoArgumentError, match="torch.dtype"):
        TensorSpec("g", [3], "float32")


@pl.function(type=pl.FunctionType.InCore)
def scale_rows(x: pl.Tensor[[R, C], pl.FP32], n: pl.Scalar[pl.INDEX], o: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    """A module-level kernel (PyPTO's 04 form): called by name from the orchestration; n is an index."""
    t = pl.load(x, [0, 0], [R, C], valid_shape=[R, n])
    return pl.store(pl.tile.fillpad(pl.mul(t, 2.0), pad_value=pl.PadValue.zero), [0, 0], o)


@pl.program
class TensorOps:
    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[4 * R, C], pl.FP32], lens: pl.Tensor[[4], pl.INT32],
             o: pl.Out[pl.Tensor[[4 * R, C], pl.FP32]]):
        for b in pl.range(pl.tensor.dim(x, 0) // pl.tensor.dim(x, -1) * C // R):
            n = pl.tensor.read(lens, [b])
            _view = scale_rows(pl.tensor.slice(x, [R, C], [b * R, 0]), pl.min(n, C),
                               pl.tensor.slice(o, [R, C], [b * R, 0]))
        return o


@pytest.mark.slow
def test_pl_tensor_read_dim_slice_and_a_module_level_kernel_in_an_orchestration():
    x, o = torch.randn(4 * R, C), _nan(4 * R, C)
    compiled = ir.compile(TensorOps)
    for lens in ([3, 64, 17, 1], [64, 80, 1, 63]):
        compiled(x, torch.tensor(lens, dtype=torch.int32), o)
        want = torch.zeros(4 * R, C)
        for b, n in enumerate(lens):
            want[b * R:(b + 1) * R, :min(n, C)] = 2 * x[b * R:(b + 1) * R, :min(n, C)]
        assert torch.equal(o, want)


@pytest.mark.slow
def test_a_slice_valid_shape_and_a_tensor_view_make_a_kernels_loads_partial():
    @pl.function(type=pl.FunctionType.InCore)
    def pad(x: pl.Tensor[[R, C], pl.FP32, pl.TensorView(valid_shape=[R, pl.dynamic("V")], layout=pl.TensorLayout.ND)],
            o: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.tile.fillpad(pl.load(x, [0, 0], [R, C]), pad_value=pl.PadValue.min), [0, 0], o)

    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, x: pl.Tensor[[R, C], pl.FP32], lens: pl.Tensor[[1], pl.INT32],
                 o: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            o = pad(pl.tensor.slice(x, [R, C], [0, 0], valid_shape=[R, pl.tensor.read(lens, [0])]), o)
            return o

    x, o = torch.randn(R, C), _nan(R, C)
    ir.compile(P)(x, torch.tensor([9], dtype=torch.int32), o)
    want = x.clone()
    want[:, 9:] = -torch.inf
    assert torch.equal(o, want)
    with pytest.raises(PtoNotSupported, match="row-major"):
        pl.TensorView(layout=pl.TensorLayout.DN)


@pytest.mark.slow
def test_tensor_level_matmul_takes_b_trans_and_out_dtype_and_tiles_refuse_them():
    @pl.jit
    def k(q: pl.Tensor, kt: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.matmul(q, kt, b_trans=True, out_dtype=pl.FP16), [0, 0], out)
        return out

    q, kt = torch.randn(R, C).half(), torch.randn(32, C).half()
    out = torch.full((R, 32), float("nan")).half()
    k(q, kt, out)
    torch.testing.assert_close(out, (q.float() @ kt.float().T).half(), rtol=1e-3, atol=1e-2)
    where = []

    @pl.jit
    def bad(q: pl.Tensor, kt: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(kt, [0, 0], [32, C])
            where.append(next_line())
            pl.store(pl.matmul(pl.load(q, [0, 0], [R, C]), t, b_trans=True), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError) as ei:
        bad.lower(q, kt, out)
    assert_at(ei, where[0], "b_trans=True takes tensor operands")


@pytest.mark.slow
def test_qwen3_projection_form_in_an_inline_helper():
    """projection.py: an inline helper's `if k0 == 0: matmul else matmul_acc` on a create_tensor accumulator."""

    @pl.jit.inline
    def proj(a: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor]):
        for n0 in pl.parallel(0, 64, 32):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="proj"):
                acc = pl.create_tensor([R, 32], dtype=pl.FP32)
                for kb in pl.pipeline(0, 4, stage=2):
                    k0 = kb * 32
                    if k0 == 0:
                        acc = pl.matmul(a[:, k0:k0 + 32], w[k0:k0 + 32, n0:n0 + 32], out_dtype=pl.FP32)
                    else:
                        acc = pl.matmul_acc(acc, a[:, k0:k0 + 32], w[k0:k0 + 32, n0:n0 + 32])
                y = pl.assemble(y, acc, [0, n0])
        return y

    @pl.jit
    def k(a: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor]):
        y = proj(a, w, y)
        return y

    a, w, y = torch.randn(R, 128), torch.randn(128, 64), _nan(R, 64)
    k(a, w, y)
    torch.testing.assert_close(y, a @ w, rtol=1e-4, atol=1e-4)


def test_an_inline_helper_writes_the_callers_plain_tensor_parameter():
    """qwen3_decode passes its k_cache (declared pl.Tensor) to a helper's pl.Out parameter: it is written."""

    @pl.jit.inline
    def bump(x: pl.Tensor, cache: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            cache = pl.assemble(cache, pl.add(pl.load(x, [0, 0], [1, C]), 1.0), [3, 0])
        return cache

    @pl.jit
    def k(x: pl.Tensor, cache: pl.Tensor):
        bump(x, cache)

    x, cache = torch.randn(1, C), torch.randn(R, C)
    before = cache.clone()
    assert [p.direction for p in k.trace(x, cache).params] == ["in", "inout"]
    k(x, cache)
    want = before.clone()
    want[3] = x[0] + 1
    assert torch.equal(cache, want)


def test_a_tiles_window_is_a_slice():
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [R, C])
            pl.store(pl.add(t[:, 0:C // 2], t[:, C // 2:C]), [0, 0], out)
        return out

    x, out = torch.randn(R, C), _nan(R, C // 2)
    k(x, out)
    assert torch.equal(out, x[:, :C // 2] + x[:, C // 2:])
