"""PyPTO's ``@pl.function`` default type, ``Opaque`` (language/01-functions): a function that takes its
plane from where it is used.

Programs in PyPTO's style, checked against torch on random data with outputs poisoned first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


def test_a_bare_pl_function_is_opaque():
    @pl.function
    def f(self, x: pl.Tensor[[16, 16], pl.FP32]):
        return x

    assert f.func_type is pl.FunctionType.Opaque


@pl.program
class Called:
    """A bare @pl.function beside an orchestration is a kernel: each call one task."""

    @pl.function
    def scale(self, x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        out = pl.store(pl.mul(pl.load(x, [0, 0], [64, 64]), 2.0), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], mid: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
             out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        mid = self.scale(x, mid)
        out = self.scale(mid, out)
        return mid, out


def test_an_opaque_function_an_orchestration_calls_is_a_kernel(launcher):
    assert Called.functions["scale"].func_type is pl.FunctionType.Opaque
    compiled = ir.compile(Called)
    assert len(compiled.task_graph.tasks) == 2
    x, mid, out = torch.randn(64, 64), _nan(64, 64), _nan(64, 64)
    launcher.run(compiled, x, mid, out)
    torch.testing.assert_close(out, x * 4.0, rtol=1e-6, atol=1e-6)


@pl.program
class Alone:
    """A bare @pl.function alone is the program's entry; its plain tile body is outlined as one InCore function."""

    @pl.function
    def k(self, x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        out = pl.store(pl.exp(pl.load(x, [0, 0], [64, 64])), [0, 0], out)
        return out


def test_an_opaque_function_alone_is_the_entry(launcher):
    assert Alone.orchestration.name == "k"
    funcs = Alone.trace().functions
    assert [f.func_type for f in funcs.values()] == [ir.FunctionType.InCore, ir.FunctionType.Orchestration]
    compiled = ir.compile(Alone)
    x, out = torch.randn(64, 64), _nan(64, 64)
    launcher.run(compiled, x, out)
    torch.testing.assert_close(out, torch.exp(x), rtol=1e-6, atol=1e-6)


def test_external_source_is_refused_clearly(tmp_path):
    from pypto_async.errors import PtoNotSupported

    src = tmp_path / "k_aiv.cpp"
    src.write_text("// a hand-written kernel\n")
    with pytest.raises(PtoNotSupported, match="external_source.*cannot run on the sim"):
        @pl.function(type=pl.FunctionType.InCore, external_source=str(src))
        def k(self, x: pl.Tensor[[16, 16], pl.FP32]):
            ...
    with pytest.raises(PtoNotSupported, match="pl.jit.extern.*cannot run on the sim"):
        @pl.jit.extern(source=str(src), core_type="aiv")
        def stub(x: pl.Tensor[[16, 16], pl.FP32]):
            ...


@pl.jit.opaque
def _two_stages(x: pl.Tensor, mid: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    for k in pl.range(2):
        with pl.at(level=pl.Level.CORE_GROUP):
            mid = pl.store(pl.exp(pl.load(x, [k * 32, 0], [32, 32])), [k * 32, 0], mid)
    with pl.at(level=pl.Level.CORE_GROUP):
        out = pl.store(pl.add(pl.load(mid, [0, 0], [64, 32]), 1.0), [0, 0], out)
    return mid, out


def test_jit_opaque_holds_loops_and_regions():
    """language/01-functions: @pl.jit.opaque may hold orchestration loops and pl.at scopes; its regions are tasks."""

    @pl.jit
    def entry(x: pl.Tensor[[64, 32], pl.FP32], mid: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
              out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        mid, out = _two_stages(x, mid, out)
        return mid, out

    x, mid, out = torch.randn(64, 32), _nan(64, 32), _nan(64, 32)
    entry(x, mid, out)
    torch.testing.assert_close(out, torch.exp(x) + 1.0, rtol=1e-5, atol=1e-6)
    graph = entry.compile(x, mid, out).task_graph
    assert len(graph.tasks) == 3 and {(e.src, e.dst) for e in graph.edges} >= {(0, 2), (1, 2)}
    assert repr(_two_stages).startswith("<pl.jit.opaque")
    with pytest.raises(PtoCompileError, match="does not take auto_scope"):
        pl.jit.opaque(auto_scope=False)


@pl.program
class Typed:
    """language/01-functions's function types: an Inline helper is spliced; AIC/AIV kernels are kernels."""

    @pl.function(type=pl.FunctionType.Inline)
    def twice(self, t):
        return pl.mul(t, 2.0)

    @pl.function(type=pl.FunctionType.AIV)
    def vec(self, x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        out = pl.store(self.twice(pl.load(x, [0, 0], [32, 32])), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.AIC)
    def cube(self, a: pl.Tensor[[32, 32], pl.FP32], b: pl.Tensor[[32, 32], pl.FP32],
             out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        out = pl.store(pl.matmul(pl.load(a, [0, 0], [32, 32], target_memory=pl.Mem.Mat),
                                 pl.load(b, [0, 0], [32, 32], target_memory=pl.Mem.Mat)), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[32, 32], pl.FP32], mid: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
             out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        mid = self.vec(x, mid)
        out = self.cube(mid, x, out)
        return mid, out


def test_inline_aic_and_aiv_function_types(launcher):
    assert sorted(Typed.kernels) == ["cube", "vec"]
    compiled = ir.compile(Typed)
    assert len(compiled.task_graph.tasks) == 2
    x, mid, out = torch.randn(32, 32), _nan(32, 32), _nan(32, 32)
    launcher.run(compiled, x, mid, out)
    torch.testing.assert_close(out, (x * 2.0) @ x, rtol=1e-4, atol=1e-4)
    # A Group function (AIC + AIV members over cross-core pipes) is tested in test_ops_crosscore.py.
