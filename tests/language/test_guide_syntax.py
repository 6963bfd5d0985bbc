"""PyPTO's user guide, language/06-syntax and 02-control-flow: subscript and operator sugar on tiles,
and ``@pl.function(strict_ssa=True)``.

``t[0:16, :]`` on a tile is ``pl.slice``; ``a < b`` (and ``==``, ``!=``, ``<=``, ``>``, ``>=``) on
tiles is ``pl.cmp``, a predicate for ``pl.sel``.  Checked against torch on random data, outputs
poisoned first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.jit
def pick(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Tensor[[16, 64], pl.FP32],
         lo: pl.Out[pl.Tensor[[16, 64], pl.FP32]], eq: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
         ge: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        a = pl.load(x, [0, 0], [16, 64])
        b = pl.load(y, [0, 0], [16, 64])
        lo[:] = pl.sel(a < b, a, b)
        eq[:] = pl.sel(a == a, a, 0.0)
        ge[:] = pl.sel(a >= 0.0, a, 0.0)
    return lo, eq, ge


def test_tile_comparisons_are_predicates_for_sel(launcher):
    x, y = torch.randn(16, 64), torch.randn(16, 64)
    y[0, :8] = x[0, :8]  # ties
    lo, eq, ge = _nan(16, 64), _nan(16, 64), _nan(16, 64)
    pick(x, y, lo, eq, ge)
    torch.testing.assert_close(lo, torch.where(x < y, x, y), rtol=0, atol=0)
    torch.testing.assert_close(eq, x, rtol=0, atol=0)
    torch.testing.assert_close(ge, torch.relu(x), rtol=0, atol=0)


@pl.jit
def halves(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        a = pl.load(x, [0, 0], [16, 64])
        for i in pl.range(2):
            out[i * 8:(i + 1) * 8, 0:32] = a[i * 8:(i + 1) * 8, 32:64]
            out[i * 8:(i + 1) * 8, 32:] = a[i * 8:i * 8 + 8, :32] + 1.0
    return out


def test_tile_slice_sugar_is_pl_slice(launcher):
    x, out = torch.randn(16, 64), _nan(16, 64)
    halves(x, out)
    torch.testing.assert_close(out[:, :32], x[:, 32:], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 32:], x[:, :32] + 1.0, rtol=0, atol=0)


def _sliced(expr: str):
    ns: dict = {"pl": pl}
    exec(compile(f"""
@pl.jit
def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        a = pl.load(x, [0, 0], [16, 64])
        for i in pl.range(2):
            t = {expr}
    return out
""", "<slice>", "exec"), ns)
    return ns["k"]


@pytest.mark.parametrize("expr, message", [
    ("a[0, 0]", "pl.tile.read: the tile is FP32; only integer tiles"),  # a[i, j] is pl.tile.read (06-syntax)
    ("a[0:16:2, :]", "unit-step slices"),
    ("a[0:i * 8, :]", "extent \\(stop - start\\) must be a constant"),
    ("a[0:32, :]", "pl.slice"),
])
def test_bad_tile_subscripts_are_errors(expr, message):
    with pytest.raises(PtoCompileError, match=message):
        _sliced(expr).trace(torch.zeros(16, 64), torch.zeros(16, 64))


# ---- strict_ssa --------------------------------------------------------------------------------


def test_strict_ssa_accepts_single_bindings_and_computes(launcher):
    from pypto_async import ir

    @pl.program
    class Strict:
        @pl.function(type=pl.FunctionType.InCore, strict_ssa=True)
        def k(self, x: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
            t = pl.load(x, [0, 0], [16, 64])
            u = pl.mul(t, 3.0)
            written = pl.store(u, [0, 0], o)
            return written

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, x: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
            res = self.k(x, o)
            return res

    x, o = torch.randn(16, 64), _nan(16, 64)
    launcher.run(ir.compile(Strict), x, o)
    torch.testing.assert_close(o, x * 3.0, rtol=0, atol=0)


@pytest.mark.parametrize("body, message", [
    ("    t = pl.load(x, [0, 0], [16, 64])\n    t = pl.mul(t, 2.0)", "'t' is bound again"),
    ("    o = pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], o)", "'o' is bound again"),
    ("    o[:] = pl.load(x, [0, 0], [16, 64])", "the subscript write dst\\[...\\] = src rebinds dst"),
    ("    for i in pl.range(2):\n        i = 3", "'i' is bound again"),
])
def test_strict_ssa_rejects_a_rebinding_at_its_line(body, message, tmp_path):
    path = tmp_path / "strict.py"
    path.write_text(f"""import pypto_async.language as pl


@pl.function(type=pl.FunctionType.InCore, strict_ssa=True)
def k(x: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
{body}
    return o
""")
    with pytest.raises(PtoCompileError, match=f"SSAViolationError: {message}") as excinfo:
        exec(compile(path.read_text(), str(path), "exec"), {"__name__": "strict"})
    assert excinfo.value.file == str(path) and excinfo.value.line >= 6


def test_comparing_a_tile_with_a_non_operand_stays_pythons():
    @pl.jit
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a = pl.load(x, [0, 0], [16, 64])
            assert (a == None) is False and a != "x"  # noqa: E711 - the Python comparison is the point
            out[:] = a
        return out

    body = str(k.lower(torch.zeros(16, 64), torch.zeros(16, 64)))
    assert "cmp" not in body
