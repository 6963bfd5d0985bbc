"""Programs: @pl.program classes and multi-region @pl.jit kernels, their task graphs, one launch each."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoError
from pypto_async.ir._deps import Edge
from pypto_async.runtime import ChipWorker
from helpers.tiers import tiered

R, C = 128, 128
F = pl.FP32


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def poison(shape):
    return np.full(shape, np.nan, np.float32)


def inferred(c):
    return {(e.src, e.dst) for e in c.task_graph.edges if e.kind == "inferred"}


def names(c):
    return [t.name for t in c.task_graph.tasks]


@pl.program
class HelloWorld:
    @pl.function(type=pl.FunctionType.InCore)
    def tile_add(self, a: pl.Tensor[[R, C], F], b: pl.Tensor[[R, C], F],
                 c: pl.Out[pl.Tensor[[R, C], F]]) -> pl.Tensor[[R, C], F]:
        ta: pl.Tile[[R, C], F] = pl.load(a, offsets=[0, 0], shapes=[R, C])
        tb: pl.Tile[[R, C], F] = pl.load(b, offsets=[0, 0], shapes=[R, C])
        return pl.store(pl.add(ta, tb), offsets=[0, 0], output_tensor=c)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orchestrator(self, a: pl.Tensor[[R, C], F], b: pl.Tensor[[R, C], F]) -> pl.Tensor[[R, C], F]:
        out_c = pl.create_tensor([R, C], dtype=F)
        out_c = self.tile_add(a, b, out_c)
        return out_c


def test_hello_world_program_is_one_task_and_its_output_a_parameter():
    c = ir.compile(HelloWorld)
    assert c.program == HelloWorld.trace()  # the IR as handed in
    assert list(c.param_names) == ["a", "b", "tensor0"] and c.output_indices == [2]
    assert names(c) == ["tile_add"] and c.task_graph.edges == ()
    a, b, out = rand((R, C), 1), rand((R, C), 2), poison((R, C))
    c(a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_from_dir_keeps_the_task_graph(tmp_path):
    c = ir.compile(HelloWorld, output_dir=tmp_path / "hello")
    again = ir.CompiledProgram.from_dir(tmp_path / "hello")
    assert again.program is None and again.task_graph == c.task_graph
    a, b, out = rand((R, C), 3), rand((R, C), 4), poison((R, C))
    again(a, b, out)
    np.testing.assert_array_equal(out, a + b)


def tiled_program(tile: int):
    @pl.program
    class Tiled:
        @pl.function(type=pl.FunctionType.InCore)
        def mul_add(self, a: pl.Tensor[[tile, tile], F], b: pl.Tensor[[tile, tile], F],
                    out: pl.Out[pl.Tensor[[tile, tile], F]]):
            ta = pl.load(a, [0, 0], [tile, tile])
            tb = pl.load(b, [0, 0], [tile, tile])
            pl.store(ta * tb + ta, [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, a: pl.Tensor[[R, C], F], b: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
            for r in range(0, R, tile):
                for q in range(0, C, tile):
                    self.mul_add(a[r:r + tile, q:q + tile], b[r:r + tile, q:q + tile], out[r:r + tile, q:q + tile])
            return out

    return Tiled


@tiered("tile", [32, 64], fast=[64])
def test_elementwise_program_over_tiles_has_no_edges_between_disjoint_tiles(tile):
    c = ir.compile(tiled_program(tile))
    assert len(c.task_graph.tasks) == (R // tile) * (C // tile) and c.task_graph.edges == ()
    a, b, out = rand((R, C), 5), rand((R, C), 6), poison((R, C))
    c(a, b, out)
    np.testing.assert_allclose(out, a * b + a, rtol=1e-6)


@pl.program
class Chain:
    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, x: pl.Tensor[[R, C], F], s: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(x, [0, 0], [R, C]) * 2.0, [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def add(self, s: pl.Tensor[[R, C], F], y: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(s, [0, 0], [R, C]) + pl.load(y, [0, 0], [R, C]), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], F], y: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        scratch = pl.create_tensor([R, C], F)
        scratch = self.scale(x, scratch)
        self.add(scratch, y, out)
        return out


@pytest.mark.slow
def test_two_stage_chain_through_scratch_infers_the_edge():
    c = ir.compile(Chain)
    assert list(c.param_names) == ["x", "y", "out"]  # the scratch tensor is no parameter
    assert c.task_graph.edges == (Edge(0, 1, "inferred", "RAW", "tensor0"),)
    x, y, out = rand((R, C), 7), rand((R, C), 8), poison((R, C))
    c(x, y, out)
    np.testing.assert_array_equal(out, x * 2 + y)


@pl.jit
def chain_with_deps(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="stage1") as t1:
        pl.store(pl.load(x, [0, 0], [R, C]) + 1.0, [0, 0], s)
    with pl.incore(name_hint="stage2", deps=[t1]):
        pl.store(pl.load(s, [0, 0], [R, C]) * 3.0, [0, 0], out)


@pl.jit
def chain_manual(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.manual_scope():
        with pl.incore(name_hint="stage1") as t1:
            pl.store(pl.load(x, [0, 0], [R, C]) + 1.0, [0, 0], s)
        with pl.incore(name_hint="stage2", deps=[t1]):
            pl.store(pl.load(s, [0, 0], [R, C]) * 3.0, [0, 0], out)
        with pl.incore(name_hint="unordered"):
            pl.store(pl.load(s, [0, 0], [R, C]), [0, 0], s)


def test_chain_with_deps_marks_the_declared_edge():
    x, s, out = rand((R, C), 9), poison((R, C)), poison((R, C))
    c = chain_with_deps.compile(x, s, out)
    assert names(c) == ["stage1", "stage2"]
    assert c.task_graph.edges == (Edge(0, 1, "declared"),)  # declared wins over the inferred RAW on s
    c(x, s, out)
    np.testing.assert_array_equal(out, (x + 1) * 3)


def test_manual_scope_orders_only_declared_edges():
    x, s, out = rand((R, C), 10), poison((R, C)), poison((R, C))
    c = chain_manual.compile(x, s, out)
    assert c.task_graph.edges == (Edge(0, 1, "declared"),)  # task 2 races on s: inference is off


def test_deps_must_name_an_earlier_task_of_the_same_kernel():
    @pl.jit
    def bad(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.incore(deps=["stage1"]):
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], out)

    with pytest.raises(PtoCompileError, match="deps= takes task ids"):
        bad.compile(rand((8, 8), 0), poison((8, 8)))


@pl.program
class Diamond:
    @pl.function(type=pl.FunctionType.InCore)
    def top(self, x: pl.Tensor[[R, C], F], s: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def left(self, s: pl.Tensor[[R, C], F], t: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(s, [0, 0], [R, C]) + 1.0, [0, 0], t)
        return t

    @pl.function(type=pl.FunctionType.InCore)
    def right(self, s: pl.Tensor[[R, C], F], t: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(s, [0, 0], [R, C]) * 2.0, [0, 0], t)
        return t

    @pl.function(type=pl.FunctionType.InCore)
    def bottom(self, a: pl.Tensor[[R, C], F], b: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(a, [0, 0], [R, C]) * pl.load(b, [0, 0], [R, C]), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], F]):
        s = self.top(x, pl.create_tensor([R, C], F, name="s"))
        l_ = self.left(s, pl.create_tensor([R, C], F, name="l"))
        r = self.right(s, pl.create_tensor([R, C], F, name="r"))
        return self.bottom(l_, r, pl.create_tensor([R, C], F, name="out"))


def test_diamond_edges_and_result():
    c = ir.compile(Diamond)
    assert names(c) == ["top", "left", "right", "bottom"] and list(c.param_names) == ["x", "out"]
    assert inferred(c) == {(0, 1), (0, 2), (1, 3), (2, 3)}  # the two middle tasks are unordered
    x, out = rand((R, C), 11), poison((R, C))
    c(x, out)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)


@pl.program
class Halves:
    @pl.function(type=pl.FunctionType.InCore)
    def neg(self, x: pl.Tensor[[R // 2, C], F], y: pl.Out[pl.Tensor[[R // 2, C], F]]):
        pl.store(-pl.load(x, [0, 0], [R // 2, C]), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def total(self, y: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(y, [0, 0], [R, C]) + 0.5, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        y = pl.create_tensor([R, C], F)
        self.neg(x[64:128], y[64:128])
        self.neg(x[0:64], y[0:64])
        self.total(y, out)
        return out


def test_disjoint_windows_of_one_tensor_do_not_order_each_other():
    c = ir.compile(Halves)
    assert inferred(c) == {(0, 2), (1, 2)}  # the reader waits for both halves, the halves for nothing
    x, out = rand((R, C), 12), poison((R, C))
    c(x, out)
    np.testing.assert_array_equal(out, -x + np.float32(0.5))


@pl.jit
def carried(x: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
    for i in pl.range(4):
        with pl.incore(name_hint="produce"):
            pl.store(pl.load(x, [i * 16, 0], [16, 32]) + 1.0, [0, 0], y)
        with pl.incore(name_hint="consume"):
            pl.store(pl.load(y, [0, 0], [16, 32]) * 2.0, [i * 16, 0], z)


@pytest.mark.slow
def test_loop_carried_write_after_read_is_ordered():
    x, y, z = rand((64, 32), 13), poison((16, 32)), poison((64, 32))
    c = carried.compile(x, y, z)
    g = c.task_graph
    assert names(c) == ["produce", "consume"] * 4
    for i in range(4):
        p, q = 2 * i, 2 * i + 1
        assert Edge(p, q, "inferred", "RAW", "y") in g.edges
        if i:
            # produce(i) overwrites the y that consume(i - 1) read
            assert Edge(q - 2, p, "inferred", "WAR", "y") in g.edges
    assert all(e.src < e.dst for e in g.edges)
    c(x, y, z)
    np.testing.assert_allclose(z, (x + 1) * 2, rtol=1e-6)


@pl.program
class Failing:
    @pl.function(type=pl.FunctionType.InCore)
    def head(self, x: pl.Tensor[[8, 8], F], n: pl.Scalar[pl.INDEX], s: pl.Out[pl.Tensor[[8, 8], F]]):
        t = pl.load(x, [0, 0], [8, 8], valid_shape=[n, 8])
        pl.store(pl.fillpad(t, pl.PadValue.zero), [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def tail(self, s: pl.Tensor[[8, 8], F], out: pl.Out[pl.Tensor[[8, 8], F]]):
        pl.store(pl.load(s, [0, 0], [8, 8]) + 1.0, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[8, 8], F], n: pl.Scalar[pl.INDEX], out: pl.Out[pl.Tensor[[8, 8], F]]):
        s = self.head(x, n, pl.create_tensor([8, 8], F), name_hint="masked_head")
        self.tail(s, out)
        return out


def test_failing_task_fails_the_launch_naming_it_and_its_dependent_does_not_run():
    c = ir.compile(Failing)
    x = rand((8, 8), 14)
    with ChipWorker() as w:
        out = poison((8, 8))
        w.run(c, x, 5, out)
        want = np.zeros((8, 8), np.float32)
        want[:5] = x[:5]
        np.testing.assert_array_equal(out, want + 1)
        out = poison((8, 8))
        with pytest.raises(PtoError, match="task masked_head"):
            w.run(c, x, 9, out)
        assert np.isnan(out).all()  # the dependent never wrote
        out = poison((8, 8))
        w.run(c, x, 8, out)  # the worker keeps working
        np.testing.assert_array_equal(out, x + 1)


def test_sync_dispatch_through_a_registered_handle():
    c = ir.compile(Diamond)
    x = rand((R, C), 15)
    e = np.exp(x.astype(np.float64))
    with ChipWorker() as w:
        h = w.register(c)
        for _ in range(2):
            out = poison((R, C))
            h(x, out)
            np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)


@pytest.mark.anyio
async def test_async_dispatch_of_a_program():
    c = ir.compile(Chain)
    x, y = rand((R, C), 16), rand((R, C), 17)
    async with ChipWorker() as w:
        h = w.register(c)
        outs = [poison((R, C)) for _ in range(3)]
        launches = [h(x, y, o) for o in outs]
        for launch in launches:
            await launch
    for o in outs:
        np.testing.assert_array_equal(o, x * 2 + y)


def test_program_errors_are_compile_errors():
    @pl.program  # a class of kernels alone is a program (a library), with no entry to compile
    class NoOrch:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[8, 8], F]):
            pass

    with pytest.raises(PtoCompileError, match="compiles one entry"):
        ir.compile(NoOrch)

    @pl.program
    class WrongShape:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[8, 8], F], y: pl.Out[pl.Tensor[[8, 8], F]]):
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[16, 8], F], y: pl.Out[pl.Tensor[[16, 8], F]]):
            self.k(x[0:8], y[0:16])

    with pytest.raises(PtoCompileError, match=r"parameter 'y' is FP32\[8, 8\], got FP32\[16, 8\]"):
        ir.compile(WrongShape)

    @pl.program
    class WritesInput:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, y: pl.Out[pl.Tensor[[8, 8], F]]):
            pl.store(pl.full([8, 8], 1.0, F), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[8, 8], F]):
            self.k(x)

    with pytest.raises(PtoCompileError, match="input of the orchestration"):
        ir.compile(WritesInput)

    @pl.program
    class Blocks:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[8, 8], F], y: pl.Out[pl.Tensor[[8, 8], F]]):
            for b in pl.spmd(2):
                pl.store(pl.load(x, [b * 4, 0], [4, 8]), [b * 4, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[8, 8], F], y: pl.Out[pl.Tensor[[8, 8], F]]):
            self.k(x, y)

    with pytest.raises(PtoCompileError, match="pl.spmd is not supported in a @pl.program"):
        ir.compile(Blocks)


T = 16


@pl.program
class Tiles64:
    @pl.function(type=pl.FunctionType.InCore)
    def relu(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.relu(pl.load(x, [0, 0], [T, 32])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def accumulate(self, y: pl.Tensor[[T, 32], F], acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(acc, [0, 0], [T, 32]) + pl.load(y, [0, 0], [T, 32]), [0, 0], acc)
        return acc

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[64 * T, 32], F], y: pl.Out[pl.Tensor[[64 * T, 32], F]],
             acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        for i in pl.range(64):
            self.relu(x[i * T:(i + 1) * T, :], y[i * T:(i + 1) * T])
        for i in pl.range(0, 64 * T, T):
            self.accumulate(y[i:i + T], acc)
        return y


def test_a_tiled_loop_of_64_tiles_is_64_tasks_from_one_loop_of_code():
    c = ir.compile(Tiles64)
    text = str(c.program)
    assert text.count("task 'relu'") == 1 and text.count("for ") == 2  # a real loop, not 64 copies
    g = c.task_graph
    assert names(c) == ["relu"] * 64 + ["accumulate"] * 64
    # each accumulate waits for the relu of its tile and for the accumulate before it, nothing else
    for k in range(64):
        assert g.preds(64 + k) == sorted({k, *([63 + k] if k else [])})
    assert all(not g.preds(k) for k in range(64))
    x, y, acc0 = rand((64 * T, 32), 18), poison((64 * T, 32)), rand((T, 32), 19)
    acc = acc0.copy()
    c(x, y, acc)
    r = np.maximum(x, 0)
    np.testing.assert_array_equal(y, r)
    np.testing.assert_allclose(acc, acc0 + r.reshape(64, T, 32).sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_window_bounds_are_checked_over_the_loop():
    @pl.program
    class Overrun:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[8, 8], F], y: pl.Out[pl.Tensor[[8, 8], F]]):
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[32, 8], F], y: pl.Out[pl.Tensor[[32, 8], F]]):
            for i in pl.range(4):
                self.k(x[i * 8 + 1:i * 8 + 9], y[i * 8:i * 8 + 8])

    with pytest.raises(PtoCompileError, match="outside"):
        ir.compile(Overrun)


@pl.jit
def two_outputs(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.incore(name_hint="first"):
        pl.store(pl.load(x, [0, 0], [8, 8]) - 1.0, [0, 0], s)
    with pl.incore(name_hint="second"):
        pl.store(pl.load(s, [0, 0], [8, 8]) * pl.load(x, [0, 0], [8, 8]), [0, 0], out)
    return s, out


def test_a_kernel_may_return_several_outputs_as_a_tuple():
    x, s, out = rand((8, 8), 20), poison((8, 8)), poison((8, 8))
    program = two_outputs.trace(x, s, out)
    assert program.ret == "s, out"
    namespace: dict = {}
    exec(program.as_python(form="jit"), namespace)
    assert namespace["two_outputs"].trace(x, s, out) == program
    got = two_outputs(x, s, out)
    assert isinstance(got, tuple) and got[0] is s and got[1] is out
    np.testing.assert_array_equal(s, x - 1)
    np.testing.assert_array_equal(out, (x - 1) * x)


@pl.jit
def tensor_level(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.incore(name_hint="sugar"):
        pl.assemble(out, pl.exp(a) * b - a, [0, 0])


def test_tensor_level_elementwise_ops_and_assemble_in_a_region():
    a, b, out = rand((16, 32), 21), rand((16, 32), 22), poison((16, 32))
    tensor_level(a, b, out)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(out, np.exp(a64) * b - a64, rtol=1e-5, atol=1e-6)


def test_a_kernel_call_with_config_runs_on_a_worker_of_that_config():
    from pypto_async.errors import PtoArgumentError
    from pypto_async.runtime import RunConfig

    x, s, out = rand((8, 8), 23), poison((8, 8)), poison((8, 8))
    got = two_outputs(x, s, out, config=RunConfig(platform="a2a3sim", cores=1))
    assert got[1] is out
    np.testing.assert_array_equal(out, (x - 1) * x)
    with ChipWorker() as w, pytest.raises(PtoArgumentError, match="not both"):
        two_outputs(x, s, out, stream=w.stream(), config=RunConfig())


def test_a_program_run_with_a_stray_tensor_address_is_refused_by_the_driver():
    """register() declares a program's argument kinds: a run whose tensor is not in device memory is refused."""
    from pypto_async._driver import ffi, lib

    c = ir.compile(Diamond)
    with ChipWorker() as w:
        h = w.register(c)
        assert h.compiled is c
        s = w.default_stream
        good = w.alloc_tensor((R, C), np.float32)
        before = lib.pto_stream_accepted(s._ptr)
        for bad in (0, good.data_ptr + good.nbytes + (1 << 20)):
            args = [good.data_ptr] * len(h.params)
            args[-1] = bad
            rc = lib.pto_stream_run_program(s._ptr, h._kptr, args, len(args), 0)
            assert rc == -lib.PTO_EINVAL
            assert "is a tensor, but its address" in ffi.string(lib.pto_last_error()).decode()
        assert lib.pto_stream_accepted(s._ptr) == before  # nothing queued
        x, out = rand((R, C), 18), poison((R, C))
        h(x, out)  # the program still runs
        e = np.exp(x.astype(np.float64))
        np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)
        good.free()


@pytest.mark.parametrize("what", ["program", "kernel"])
def test_compile_decides_kernel_or_program_once_and_derives_edges_once(what, monkeypatch, tmp_path):
    # ir.compile lowers once into a value that carries the answer (ir/_target.py); the task
    # graph it derives feeds both the metadata and the generated C.
    from pypto_async.ir import _deps, _program_codegen, _target

    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))  # a miss: the C is generated
    asked, derived = [], []
    real_ask, real_graph = _program_codegen.is_task_program, _deps.task_graph
    monkeypatch.setattr(_target, "is_task_program", lambda *a, **k: asked.append(1) or real_ask(*a, **k))
    monkeypatch.setattr(_program_codegen, "task_graph", lambda *a, **k: derived.append(1) or real_graph(*a, **k))
    a, b = rand((R, C), 5), rand((R, C), 6)
    if what == "program":
        c = ir.compile(HelloWorld)
        out = poison((R, C))
        c(a, b, out)
    else:
        @pl.jit
        def tile_add(x: pl.Tensor[[R, C], F], y: pl.Tensor[[R, C], F], z: pl.Out[pl.Tensor[[R, C], F]]):
            tx = pl.load(x, offsets=[0, 0], shapes=[R, C])
            ty = pl.load(y, offsets=[0, 0], shapes=[R, C])
            pl.store(pl.add(tx, ty), offsets=[0, 0], output_tensor=z)

        out = poison((R, C))
        c = ir.compile(tile_add.lower(a, b, out))
        c(a, b, out)
    assert c.kind == what
    assert (len(asked), len(derived)) == (1, 1)
    np.testing.assert_array_equal(out, a + b)
