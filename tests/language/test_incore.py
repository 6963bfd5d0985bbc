"""``@pl.jit.incore`` helpers, ``pl.create_tensor`` in ``@pl.jit`` entries, kernel keywords,
``compile_for_test`` and a ``@pl.program``'s ``as_python``.

In PyPTO's style: helpers called from an entry, intermediates made with
``pl.create_tensor``; each result against torch on random data, outputs
poisoned before the launch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError
from pypto_async.ir._deps import Edge

N = 64


def rand(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def poison(*shape):
    return torch.full(shape, float("nan"))


@pl.jit.incore
def matmul_kernel(a: pl.Tensor, b: pl.Tensor, output: pl.Out[pl.Tensor]):
    ta = pl.move(pl.load(a, [0, 0], [N, N], target_memory=pl.MemorySpace.Mat), target_memory=pl.MemorySpace.Left)
    tb = pl.move(pl.load(b, [0, 0], [N, N], target_memory=pl.MemorySpace.Mat), target_memory=pl.MemorySpace.Right)
    pl.store(pl.matmul(ta, tb), [0, 0], output)
    return output


@pl.jit.incore
def add_relu_kernel(x: pl.Tensor, bias: pl.Tensor, output: pl.Out[pl.Tensor]):
    pl.store(pl.relu(pl.add(pl.load(x, [0, 0], [N, N]), pl.load(bias, [0, 0], [N, N]))), [0, 0], output)
    return output


@pl.jit
def fused_linear_relu(x: pl.Tensor, w: pl.Tensor, bias: pl.Tensor, y: pl.Out[pl.Tensor]):
    mm_out = pl.create_tensor([N, N], dtype=pl.FP32)
    mm_out = matmul_kernel(x, w, mm_out)
    y = add_relu_kernel(mm_out, bias, y)
    return y


@pytest.mark.slow
def test_incore_helpers_are_tasks_ordered_by_their_directions(launcher):
    x, w, bias, y = rand(N, N, seed=1), rand(N, N, seed=2), rand(N, N, seed=3), poison(N, N)
    c = fused_linear_relu.compile(x, w, bias, y)
    assert [t.name for t in c.task_graph.tasks] == ["matmul_kernel", "add_relu_kernel"]
    assert c.task_graph.edges == (Edge(0, 1, "inferred", "RAW", "tensor0"),)  # through the intermediate
    assert list(c.param_names) == ["x", "w", "bias", "y"]  # the intermediate is scratch, no parameter
    launcher.run(c, x, w, bias, y)
    torch.testing.assert_close(y, torch.relu(x @ w + bias), rtol=1e-4, atol=1e-4)


@pl.jit.incore
def scale_into(src: pl.Tensor, dst: pl.Out[pl.Tensor], k: pl.Scalar[pl.FP32]):
    pl.store(pl.mul(pl.load(src, [0, 0], [N, N]), k), [0, 0], dst)
    return dst


@pl.jit
def read_then_overwrite(x: pl.InOut[pl.Tensor], z: pl.Tensor, y: pl.Out[pl.Tensor]):
    y = scale_into(x, y, 2.0)  # reads x
    x = scale_into(z, x, 3.0)  # then overwrites it: only a write-after-read orders the two
    return x, y


def test_a_helper_writing_what_an_earlier_one_read_waits_for_it(launcher):
    x0, z = rand(N, N, seed=4), rand(N, N, seed=11)
    x, y = x0.clone(), poison(N, N)
    c = read_then_overwrite.compile(x, z, y)
    assert c.task_graph.edges == (Edge(0, 1, "inferred", "WAR", "x"),)
    launcher.run(c, x, z, y)
    torch.testing.assert_close(y, x0 * 2)
    torch.testing.assert_close(x, z * 3)


@pl.jit
def returns_an_intermediate(x: pl.Tensor):
    out = pl.create_tensor([N, N], dtype=pl.FP32, memory_type=pl.Mem.DDR)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(x, [0, 0], [N, N])), [0, 0], out)
    return out


def test_an_entry_returning_a_created_tensor_outputs_it_after_its_parameters(launcher):
    x, out = rand(N, N, seed=5), poison(N, N)
    c = returns_an_intermediate.compile(x)
    assert list(c.param_names) == ["x", "tensor0"] and c.has_return
    assert [p.direction for p in c.params] == ["in", "out"]
    launcher.run(c, x, out)
    torch.testing.assert_close(out, torch.exp(x))


def test_create_tensor_memory_type_is_ddr_only():
    @pl.jit
    def on_chip(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.create_tensor([N, N], dtype=pl.FP32, memory_type=pl.Mem.Vec)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.copy(t, x)
            pl.copy(y, t)

    with pytest.raises(PtoCompileError, match="memory_type must be pl.MemorySpace.DDR"):
        on_chip.compile(rand(N, N), poison(N, N))


def test_helper_misuse_is_a_compile_error():
    @pl.jit
    def helper_in_region(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            scale_into(x, y, 1.0)

    @pl.jit
    def helper_writes_an_input(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        scale_into(y, x, 1.0)

    with pytest.raises(PtoCompileError, match="is a task: call it from the orchestration"):
        helper_in_region.compile(rand(N, N), poison(N, N))
    with pytest.raises(PtoCompileError, match="'x' is an input of the orchestration"):
        helper_writes_an_input.compile(rand(N, N), poison(N, N))
    with pytest.raises(PtoCompileError, match="call it from a @pl.jit entry"):
        scale_into(rand(N, N), poison(N, N), 1.0)


@pl.jit
def axpy(alpha: pl.Scalar[pl.FP32], x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.mul(pl.load(x, [0, 0], [N, N]), alpha), pl.load(y, [0, 0], [N, N])), [0, 0], out)
    return out


@pytest.mark.slow
def test_kernel_arguments_by_name(launcher):
    x, y, out = rand(N, N, seed=6), rand(N, N, seed=7), poison(N, N)
    by_position = axpy.compile(0.5, x, y, out)
    assert axpy.compile(0.5, x, out=out, y=y) is by_position  # one signature, one compile
    assert axpy.compile(alpha=0.5, x=x, y=y, out=out, extra_cflags="-O2") is not by_position  # an ir option
    launcher.run(axpy.compile(x=x, y=y, out=out, alpha=0.5), 0.5, x, y, out)
    torch.testing.assert_close(out, 0.5 * x + y)
    assert axpy.lower(0.5, x, y=y, out=out) == axpy.lower(0.5, x, y, out)


def test_kernel_keyword_mistakes_are_argument_errors():
    x, y, out = rand(N, N), rand(N, N), poison(N, N)
    with pytest.raises(PtoArgumentError, match="has no parameter 'z'"):
        axpy.trace(0.5, x, y, out, z=1)
    with pytest.raises(PtoArgumentError, match="argument 'x' given twice"):
        axpy.trace(0.5, x, y, out, x=x)
    with pytest.raises(PtoArgumentError, match="missing argument 'out'"):
        axpy.trace(0.5, x, y=y)


def test_compile_for_test_compiles_and_returns_the_lowered_program():
    x, y, out = rand(N, N), rand(N, N), poison(N, N)
    prog = axpy.compile_for_test(0.5, x, y, out=out)
    assert isinstance(prog, ir.Program) and prog.stage == "lowered"
    assert list(prog.functions) == ["axpy_incore_0", "axpy"]
    assert prog == axpy.lower(0.5, x, y, out)
    assert axpy.compile(0.5, x, y, out) is axpy.compile(0.5, x, y, out)  # the compile it made is cached


@pl.program
class FusedMatmulBias:
    @pl.function(type=pl.FunctionType.InCore)
    def matmul_kernel(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
                      output: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        ta = pl.move(pl.load(a, [0, 0], [N, N], target_memory=pl.MemorySpace.Mat),
                     target_memory=pl.MemorySpace.Left)
        tb = pl.move(pl.load(b, [0, 0], [N, N], target_memory=pl.MemorySpace.Mat),
                     target_memory=pl.MemorySpace.Right)
        return pl.store(pl.matmul(ta, tb), [0, 0], output)

    @pl.function(type=pl.FunctionType.InCore)
    def add_kernel(self, x: pl.Tensor[[N, N], pl.FP32], bias: pl.Tensor[[N, N], pl.FP32],
                   output: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return pl.store(pl.add(pl.load(x, [0, 0], [N, N]), pl.load(bias, [0, 0], [N, N])), [0, 0], output)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orchestrator(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
                     bias: pl.Tensor[[N, N], pl.FP32]) -> pl.Tensor[[N, N], pl.FP32]:
        mm = pl.create_tensor([N, N], dtype=pl.FP32)
        mm = self.matmul_kernel(a, b, mm)
        c = pl.create_tensor([N, N], dtype=pl.FP32)
        return self.add_kernel(mm, bias, c)


@pytest.mark.slow
def test_a_program_prints_as_python_that_computes_the_same(launcher):
    text = FusedMatmulBias.as_python()
    assert "@pl.jit\ndef FusedMatmulBias(" in text and "pl.create_tensor([64, 64], dtype=pl.FP32" in text
    assert "name_hint='matmul_kernel'" in text and "name_hint='add_kernel'" in text
    assert sorted(FusedMatmulBias.functions) == ["add_kernel", "matmul_kernel", "orchestrator"]
    namespace: dict = {}
    exec(compile(text, "<as_python>", "exec"), namespace)  # noqa: S102 - the printed program
    again = namespace["FusedMatmulBias"]
    a, b, bias, out = rand(N, N, seed=8), rand(N, N, seed=9), rand(N, N, seed=10), poison(N, N)
    c = again.compile(a, b, bias, out)
    assert list(c.param_names) == list(ir.compile(FusedMatmulBias).param_names)
    assert [t.name for t in c.task_graph.tasks] == ["matmul_kernel", "add_kernel"]
    launcher.run(c, a, b, bias, out)
    torch.testing.assert_close(out, a @ b + bias, rtol=1e-4, atol=1e-4)


def test_a_long_program_name_still_makes_a_loadable_kernel(launcher):
    @pl.program
    class TileAddThenAssembleRightOffsetProgramWithAnEvenLongerName:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[16, 16], pl.FP32],
              y: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
            return pl.store(pl.add(pl.load(x, [0, 0], [16, 16]), 1.0), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[16, 16], pl.FP32],
                 y: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
            return self.k(x, y)

    c = ir.compile(TileAddThenAssembleRightOffsetProgramWithAnEvenLongerName)
    assert len(c.symbol) <= 47 and c.symbol.startswith("TileAddThenAssemble")
    x, y = rand(16, 16, seed=12), poison(16, 16)
    launcher.run(c, x, y)
    torch.testing.assert_close(y, x + 1)


@pl.program
class OpaqueEntry:
    @pl.function(type=pl.FunctionType.Opaque)
    def entry(self, x: pl.Tensor[[16, 128], pl.FP32], row: pl.Tensor[[16, 1], pl.FP32],
              out: pl.Tensor[[16, 128], pl.FP32]) -> pl.Tensor[[16, 128], pl.FP32]:
        with pl.auto_incore():
            t = pl.row_expand_mul(pl.sqrt(pl.add(x, 2.0)), row)
            out = pl.assemble(out, pl.maximum(pl.neg(t), t), [0, 0])
        return out


def test_an_opaque_entry_infers_which_tensors_it_writes(launcher):
    from pypto_async.backend import BackendType

    c = ir.compile(OpaqueEntry, backend_type=BackendType.PTO, skip_ptoas=True)
    assert [(p.name, p.direction) for p in c.params] == [("x", "in"), ("row", "in"), ("out", "inout")]
    x, row, out = rand(16, 128, seed=13).abs(), rand(16, 1, seed=14), poison(16, 128)
    launcher.run(c, x, row, out)
    t = torch.sqrt(x + 2.0) * row
    torch.testing.assert_close(out, torch.maximum(-t, t))
    with pytest.raises(PtoArgumentError, match="backend_type"):
        ir.compile(OpaqueEntry, backend_type=BackendType.CCE)


def test_a_program_has_one_entry():
    # PyPTO's program may hold several Opaque functions; compiling it needs one entry.
    @pl.program
    class TwoOpaque:
        @pl.function(type=pl.FunctionType.Opaque)
        def a(self, x: pl.Tensor[[16, 16], pl.FP32]) -> pl.Tensor[[16, 16], pl.FP32]:
            return x

        @pl.function(type=pl.FunctionType.Opaque)
        def b(self, x: pl.Tensor[[16, 16], pl.FP32]) -> pl.Tensor[[16, 16], pl.FP32]:
            return x

    assert sorted(TwoOpaque.functions) == ["a", "b"]
    with pytest.raises(PtoCompileError, match="compiles one entry.*found 0 Orchestration and 2 Opaque"):
        ir.compile(TwoOpaque)


@pl.jit.incore
def plus_one(a: pl.Tensor, o: pl.Out[pl.Tensor]):
    pl.store(pl.add(pl.load(a, [0, 0], [N, N]), 1.0), [0, 0], o)
    return o


@pl.jit
def entry_returning_a_created_tensor(a: pl.Tensor):
    o = pl.create_tensor([N, N], dtype=pl.FP32)
    o = plus_one(a, o)
    return o


def test_calling_an_entry_that_returns_a_created_tensor_returns_it():
    from pypto_async.runtime import RunConfig

    x = rand(N, N, seed=15)
    got = entry_returning_a_created_tensor(x, config=RunConfig())  # PyPTO's return style: inputs only
    assert isinstance(got, torch.Tensor) and got.shape == (N, N)
    torch.testing.assert_close(got, x + 1)


@pl.jit
def tiled_plus_one(a: pl.Tensor, o: pl.Out[pl.Tensor]):
    for i in pl.range(4):
        plus_one(a[i * N:(i + 1) * N, :], o[i * N:(i + 1) * N, :])  # one task per tile
    return o


def test_helpers_called_on_windows_in_a_loop_are_independent_tasks(launcher):
    x, o = rand(4 * N, N, seed=16), poison(4 * N, N)
    c = tiled_plus_one.compile(x, o)
    assert [t.name for t in c.task_graph.tasks] == ["plus_one"] * 4
    assert c.task_graph.edges == ()  # disjoint windows order nothing
    launcher.run(c, x, o)
    torch.testing.assert_close(o, x + 1)
