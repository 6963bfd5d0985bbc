"""The IR view: ``kernel.lower(...).functions`` and ``as_python()`` as after PyPTO's outlining pass.

A lowered program is an orchestration function and one InCore function per
region (``<name>_incore_<k>``); ``as_python()`` prints that as a
``@pl.program`` class, and executing it gives a program that computes the same.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError

from helpers.ir_fixtures import poison

R, C = 64, 128


@pl.jit
def looped(a: pl.Tensor, b: pl.Tensor, n: pl.Scalar[pl.FP32], out: pl.Out[pl.Tensor]):
    for i in pl.range(2):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [i * 32, 0], [32, C])
            u = pl.load(b, [i * 32, 0], [32, C])
            pl.store(pl.add(pl.mul(t, n), u), [i * 32, 0], out)
    return out


@pl.jit
def two_regions(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [32, C])
        pl.store(pl.mul(t, 2.0), [0, 0], out)
    with pl.at(level=pl.Level.CORE_GROUP):
        u = pl.load(b, [32, 0], [32, C])
        v = pl.load(out, [0, 0], [32, C])
        pl.store(pl.add(u, v), [32, 0], out)
    return out


@pl.jit
def no_region(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    pl.store(pl.exp(pl.load(a, [0, 0], [32, C])), [0, 0], out)
    return out


def _args(rng, *extra):
    a = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    return a, b, *extra, poison((R, C))


def test_each_region_is_an_incore_function_and_the_orchestration_keeps_the_loop(rng):
    program = looped.lower(*_args(rng, pl.RUNTIME))  # n a runtime scalar: a parameter of the region
    fns = program.functions
    assert list(fns) == ["looped_incore_0", "looped"]
    kernel, orch = fns["looped_incore_0"], fns["looped"]
    # Lowered, a vector-only function is AIV (PyPTO's ExpandMixedKernel types every InCore function by its core).
    assert kernel.name == "looped_incore_0" and kernel.func_type is ir.FunctionType.AIV
    assert looped.trace(*_args(rng, pl.RUNTIME)).functions["looped_incore_0"].func_type is ir.FunctionType.InCore
    assert orch.func_type is ir.FunctionType.Orchestration and orch.params == program.params
    # Tensors by what the body does with them, then the scalars it reads, then the orchestration's index.
    assert [(q.name, q.direction) for q in kernel.params] == [
        ("a", "in"), ("b", "in"), ("out", "out"), ("n", "scalar"), ("i0", "scalar")]
    assert [q.name for q in kernel.return_types] == ["out"]
    assert pl.FunctionType is ir.FunctionType  # the language's @pl.function types are the IR's


def test_as_python_prints_the_outlined_program(rng):
    program = looped.lower(*_args(rng, pl.RUNTIME))
    src = program.as_python()
    assert "@pl.program" in src and "class looped:" in src and "pl.at" not in src
    assert "    def looped_incore_0(self, a: pl.Tensor[[64, 128], pl.FP32]," in src
    assert "i0: pl.Scalar[pl.INT64]) -> pl.Tensor[[64, 128], pl.FP32]:" in src
    assert "        for i0 in pl.range(0, 2, 1):\n            out = self.looped_incore_0(a, b, out, n, i0)" in src
    assert "t0: pl.Tile[[32, 128], pl.FP32] = pl.load(a, [(i0 * 32), 0], [32, 128])" in src
    concise = program.as_python(concise=True)
    assert "pl.Tile[" not in concise and "t0 = pl.load(a, [(i0 * 32), 0], [32, 128])" in concise
    assert program.functions["looped_incore_0"].as_python().startswith(
        "@pl.function(type=pl.FunctionType.AIV)\ndef looped_incore_0(self, a:")
    assert "@pl.jit" in program.as_python(form="jit")
    with pytest.raises(PtoArgumentError, match="form"):
        program.as_python(form="class")


@pl.jit
def cores(a: pl.Tensor[[R, R], pl.FP32], mm: pl.Out[pl.Tensor[[R, R], pl.FP32]],
          mixed: pl.Out[pl.Tensor[[R, R], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [R, R], target_memory=pl.Mem.Mat)
        mm = pl.store(pl.matmul(t, t), [0, 0], mm)
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [R, R], target_memory=pl.Mem.Mat)
        mixed = pl.store(pl.exp(pl.matmul(t, t)), [0, 0], mixed)
    return mm, mixed


@pytest.mark.slow
def test_a_lowered_function_is_typed_by_its_core(rng):
    """Cube-only is AIC; a mixed function (PyPTO: an AIC and an AIV under a Group) is one kernel here, InCore."""
    a = rng.standard_normal((R, R)).astype(np.float32) / 8
    mm, mixed = poison((R, R)), poison((R, R))
    fns = cores.lower(a, mm, mixed).functions
    assert [f.func_type for f in fns.values()] == [
        ir.FunctionType.AIC, ir.FunctionType.InCore, ir.FunctionType.Orchestration]
    ns: dict = {}
    exec(compile(cores.lower(a, mm, mixed).as_python(), "<cores.as_python()>", "exec"), ns)  # noqa: S102
    ir.compile(ns["cores"])(a, mm, mixed)
    np.testing.assert_allclose(mm, a @ a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mixed, np.exp(a @ a), rtol=1e-4, atol=1e-5)


def test_a_kernel_without_a_region_is_one_incore_function(rng):
    a, _, out = _args(rng)
    fns = no_region.lower(a, out).functions
    assert list(fns) == ["no_region_incore_0", "no_region"]
    assert [(q.name, q.direction) for q in fns["no_region_incore_0"].params] == [("a", "in"), ("out", "out")]


def test_the_printed_program_computes_what_the_kernel_does(rng):
    a, b, out = _args(rng)
    src = two_regions.lower(a, b, out).as_python()
    assert "out: pl.InOut[" in src  # the second region reads what the first wrote
    ns: dict = {}
    exec(compile(src, "<two_regions.as_python()>", "exec"), ns)  # noqa: S102 - the printed program
    compiled = ir.compile(ns["two_regions"])
    compiled(a, b, out)
    np.testing.assert_allclose(out[:32], 2 * a[:32], rtol=1e-6)
    np.testing.assert_allclose(out[32:], b[32:] + 2 * a[:32], rtol=1e-6)


@pl.jit
def staged(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="one") as a:
        pl.store(pl.load(x, [0, 0], [8, 8]) + 1.0, [0, 0], s)
    with pl.manual_scope():
        with pl.incore(name_hint="two", deps=[a]):
            pl.store(pl.load(s, [0, 0], [8, 8]) * 2.0, [0, 0], out)


def test_the_outlined_program_shows_names_manual_scopes_and_deps(rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    src = staged.trace(x, poison((8, 8)), poison((8, 8))).as_python()
    assert "        s = self.staged_incore_0(x, s, name_hint='one')\n" in src
    assert ("        with pl.manual_scope():\n"
            "            out = self.staged_incore_1(s, out, name_hint='two')  # task 1: deps=[task 0]\n") in src
