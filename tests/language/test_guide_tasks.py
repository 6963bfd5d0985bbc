"""PyPTO's user guide, tasks: ``pl.submit``, ``pl.no_dep``, ``pl.system.task_dummy``, and the hints the
``@pl.program``-form print (``as_python()``) shows.

Programs in the guide's style (tasks/01-scopes, 02-submit, 03-tuning), checked against torch on
random data with outputs poisoned first, and by the task graph the compiled program carries
(``compiled.task_graph``): what a user can observe of the edges.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoNotSupported
from pypto_async.ir import Scope

def _nan(*shape):
    return torch.full(shape, float("nan"))


def _declared(compiled) -> set:
    return {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"}


def _inferred(compiled) -> set:
    return {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "inferred"}


@pl.program
class TwoStage:
    """tasks/01-scopes's quickstart: the manual scope's one edge is the declared deps=[tid]."""

    @pl.function(type=pl.FunctionType.InCore)
    def stage1(self, x: pl.Tensor[[64, 64], pl.FP32], s: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        s = pl.store(pl.add(pl.load(x, [0, 0], [64, 64]), 1.0), [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def stage2(self, s: pl.Tensor[[64, 64], pl.FP32], o: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        o = pl.store(pl.mul(pl.load(s, [0, 0], [64, 64]), 3.0), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], scratch: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
             out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.manual_scope():
            scratch, tid = pl.submit(self.stage1, x, scratch)
            out, _ = pl.submit(self.stage2, scratch, out, deps=[tid])
        return scratch, out


def test_submit_returns_the_result_and_a_task_id_for_deps(launcher):
    compiled = ir.compile(TwoStage)
    assert _declared(compiled) == {(0, 1)} and _inferred(compiled) == set()
    x, s, o = torch.randn(64, 64), _nan(64, 64), _nan(64, 64)
    launcher.run(compiled, x, s, o)
    torch.testing.assert_close(o, (x + 1.0) * 3.0, rtol=1e-6, atol=1e-6)


@pl.program
class FanIn:
    """tasks/02-submit's fan-in: a consumer waits on every producer a loop submitted, through a
    task-id array, and on a pl.system.task_dummy join."""

    @pl.function(type=pl.FunctionType.InCore)
    def producer(self, x: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        o = pl.store(pl.mul(pl.load(x, [0, 0], [16, 64]), 2.0), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.InCore)
    def consumer(self, s: pl.Tensor[[64, 64], pl.FP32], o: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        o = pl.store(pl.add(pl.load(s, [0, 0], [64, 64]), 1.0), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], mid: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
             out: pl.Out[pl.Tensor[[64, 64], pl.FP32]], out2: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.manual_scope():
            tids = pl.array.create(4, pl.TASK_ID)
            for b in pl.range(4):
                piece, tid = pl.submit(self.producer, x[b * 16:(b + 1) * 16, :], mid[b * 16:(b + 1) * 16, :])
                tids[b] = tid
            out, last = pl.submit(self.consumer, mid, out, deps=[tids])
            gate = pl.system.task_dummy(deps=[last])
            out2, _ = pl.submit(self.consumer, mid, out2, deps=[gate], allow_early_resolve=True,
                                dumps=[mid])
        return mid, out, out2


def test_submit_fans_in_through_a_task_id_array_and_a_join(launcher):
    compiled = ir.compile(FanIn)
    assert _declared(compiled) == {(0, 4), (1, 4), (2, 4), (3, 4), (4, 5)}
    x, mid, out, out2 = torch.randn(64, 64), _nan(64, 64), _nan(64, 64), _nan(64, 64)
    launcher.run(compiled, x, mid, out, out2)
    torch.testing.assert_close(out, x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out2, x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    last = [s for s in FanIn.trace().body if isinstance(s, Scope)][-1]
    assert ("allow_early_resolve", True) in last.hints and ("dumps", ("mid",)) in last.hints


@pl.program
class Untracked:
    """tasks/03-tuning's pl.no_dep: one argument of one call is not tracked."""

    @pl.function(type=pl.FunctionType.InCore)
    def band(self, x: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        o = pl.store(pl.add(pl.load(x, [0, 0], [16, 64]), 5.0), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        for b in pl.range(4):
            self.band(x[b * 16:(b + 1) * 16, :], pl.no_dep(out[0:16, :]))
        return out


def test_no_dep_takes_one_call_argument_out_of_the_graph(launcher):
    compiled = ir.compile(Untracked)
    assert compiled.task_graph.edges == ()  # four writers of one window: no WAW edge inferred
    x, out = torch.randn(64, 64), _nan(64, 64)
    launcher.run(compiled, x, out)
    torch.testing.assert_close(out[:16], x[48:] + 5.0, rtol=0, atol=0)  # tasks run in submission order here
    assert pl.no_dep(x) is x  # outside a traced body it is its argument


@pl.jit.incore
def copy_band(x: pl.Tensor, o: pl.Out[pl.Tensor]):
    o = pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], o)
    return o


@pl.jit
def jit_no_dep(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    copy_band(x, pl.no_dep(out))
    copy_band(x, out)
    return out


def test_no_dep_on_an_incore_helper_call():
    compiled = jit_no_dep.compile()
    assert _inferred(compiled) == set()  # the first call's write to out is untracked: no WAW into the second


def test_submit_misuse_is_an_error_where_it_is_written():
    @pl.jit
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.submit(copy_band, x, out)
        return out

    with pytest.raises(PtoCompileError, match=r"first argument must be a self.<kernel> method reference"):
        k.compile()
    with pytest.raises(PtoCompileError, match="pl.submit is a DSL parser construct and cannot be called directly"):
        pl.submit(copy_band, 1)
    with pytest.raises(PtoCompileError, match="pl.system.task_dummy is a DSL parser construct"):
        pl.system.task_dummy(deps=[])


@pl.program
class Predicated:
    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[64, 64], pl.FP32], o: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        o = pl.store(pl.load(x, [0, 0], [64, 64]), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], o: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        o, _ = pl.submit(self.k, x, o, predicate=(x[0, 0] > 0))
        return o


def test_a_predicate_on_a_float_tensor_is_refused_not_ignored():
    with pytest.raises(PtoNotSupported, match=r"predicate=.*integer tensor"):
        ir.compile(Predicated)


@pl.program
class GatedClobber:
    """PyPTO's predicated dispatch: the clobber runs only where gate[0, 0] > 0, and its dependent runs either way."""

    @pl.function(type=pl.FunctionType.InCore)
    def fill(self, x: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        return pl.store(pl.tile.full([32, 32], dtype=pl.FP32, value=42.0), [0, 0], x)

    @pl.function(type=pl.FunctionType.InCore)
    def clobber(self, a: pl.Tensor[[32, 32], pl.FP32], x: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        return pl.store(pl.load(a, [0, 0], [32, 32]), [0, 0], x)

    @pl.function(type=pl.FunctionType.InCore)
    def copy(self, x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        return pl.store(pl.add(pl.load(x, [0, 0], [32, 32]), 1.0), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[32, 32], pl.FP32], gate: pl.Tensor[[4, 8], pl.INT32],
             x: pl.Out[pl.Tensor[[32, 32], pl.FP32]], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.manual_scope():
            x, t0 = pl.submit(self.fill, x)
            x, t1 = pl.submit(self.clobber, a, x, deps=[t0], predicate=(gate[1, 2] >= 3))
            out, _ = pl.submit(self.copy, x, out, deps=[t1])
        return out


@pytest.mark.parametrize("value", [2, 3, -7])
def test_a_predicated_task_runs_only_where_its_predicate_holds(launcher, value):
    compiled = ir.compile(GatedClobber)
    a = torch.randn(32, 32)
    gate = torch.randint(-100, 100, (4, 8), dtype=torch.int32)
    gate[1, 2] = value
    x, out = torch.full((32, 32), float("nan")), torch.full((32, 32), float("nan"))
    launcher.run(compiled, a, gate, x, out)
    want = a if value >= 3 else torch.full((32, 32), 42.0)
    torch.testing.assert_close(x, want, rtol=0, atol=0)
    torch.testing.assert_close(out, want + 1.0, rtol=1e-6, atol=1e-6)


def test_a_predicate_is_one_element_against_a_value():
    @pl.program
    class Window:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            return pl.store(pl.tile.full([8, 8], dtype=pl.FP32, value=1.0), [0, 0], o)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, g: pl.Tensor[[8, 8], pl.INT32], o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            o, _ = pl.submit(self.k, o, predicate=(g[0:2, 0:1] > 0))
            return o

    with pytest.raises(PtoCompileError, match="compares one element"):
        ir.compile(Window)

    @pl.program
    class NotAComparison:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            return pl.store(pl.tile.full([8, 8], dtype=pl.FP32, value=1.0), [0, 0], o)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, g: pl.Tensor[[8, 8], pl.INT32], o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            o, _ = pl.submit(self.k, o, predicate=True)
            return o

    with pytest.raises(PtoCompileError, match="takes a comparison of one element"):
        ir.compile(NotAComparison)


# ---- the hints in the @pl.program-form print -----------------------------------------------------


@pl.jit
def hinted(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    for j in pl.unroll(2):
        with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out], allow_early_resolve=True,
                   optimizations=[pl.split(pl.SplitMode.UP_DOWN), pl.cross_core_slot(slot_num=3)]):
            for i in pl.pipeline(4, stage=2):
                t = pl.add(pl.load(a, [j * 64 + i * 16, 0], [16, 32]), pl.load(b, [i * 16, 0], [16, 32]))
                pl.store(t, [j * 64 + i * 16, 0], out)
    for j in pl.parallel(2):
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=[pl.split(pl.SplitMode.NONE)]):
            pl.store(pl.load(b, [j * 32, 0], [32, 32]), [j * 32, 0], out)
    return out


def _scopes(body):
    for s in body:
        if isinstance(s, Scope):
            yield s
        yield from _scopes(getattr(s, "body", ()))


def test_the_program_form_shows_the_hints_and_compiles_back_to_them(launcher):
    a, b = np.random.default_rng(5).standard_normal((2, 128, 32)).astype(np.float32)
    b = b[:64].copy()
    program = hinted.lower(a, b, np.zeros_like(a))
    src = program.as_python()
    assert ('    @pl.function(type=pl.FunctionType.AIV)\n'  # lowered: a vector-only function
            '    def hinted_incore_0(self, ') in src
    assert '        pl.func_attr({"split": pl.SplitMode.UP_DOWN, "slot_num": 3})\n' in src
    assert "for i1 in pl.pipeline(0, 4, 1, stage=2):" in src
    assert "for i0 in pl.unroll(0, 2, 1):" in src and "in pl.parallel(0, 2, 1):" in src
    assert "out, _ = pl.submit(self.hinted_incore_0, a, b, pl.no_dep(out), i0, allow_early_resolve=True)" in src
    ns: dict = {}
    exec(compile(src, "<hinted.as_python()>", "exec"), ns)  # noqa: S102 - the printed program
    again = ns["hinted"]
    # Printed as PyPTO types it after its passes (AIV), the function reads back placed on a vector core:
    # what the device model infers for a task without matmul work anyway.
    assert [(tuple(h for h in s.hints if h != ("core", "AIV")), s.no_dep) for s in _scopes(again.trace().body)] == \
        [(s.hints, s.no_dep) for s in _scopes(program.body)]
    out = np.full_like(a, np.nan)
    launcher.run(ir.compile(again), a, b, out)
    np.testing.assert_array_equal(out[:64], b)  # the parallel loop's copies land last
    np.testing.assert_allclose(out[64:], a[64:] + b, rtol=1e-6)


@pl.program
class Attributed:
    """language/01-functions's pl.func_attr prologue: function-level hints, recorded on each task."""

    @pl.function(type=pl.FunctionType.InCore)
    def kernel(self, x: pl.Tensor[[64, 64], pl.FP32], w: pl.Tensor[[64, 64], pl.FP32],
               out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        pl.func_attr({"stationary": w, "split": pl.SplitMode.UP_DOWN})
        out = pl.store(pl.add(pl.load(x, [0, 0], [64, 64]), pl.load(w, [0, 0], [64, 64])), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 64], pl.FP32], w: pl.Tensor[[64, 64], pl.FP32],
             out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        out = self.kernel(x, w, out)
        return out


def test_func_attr_declares_hints_that_change_no_result(launcher):
    (task,) = _scopes(Attributed.trace().body)
    assert task.hints == (("stationary", "w"), ("split", "UP_DOWN"))
    x, w, out = torch.randn(64, 64), torch.randn(64, 64), _nan(64, 64)
    launcher.run(ir.compile(Attributed), x, w, out)
    torch.testing.assert_close(out, x + w, rtol=0, atol=0)
    assert '        pl.func_attr({"stationary": w, "split": pl.SplitMode.UP_DOWN})\n' in Attributed.trace().as_python()


def _attr_kernel(body: str):
    ns: dict = {"pl": pl}
    exec(compile(f"""
@pl.jit.incore
def helper(x: pl.Tensor, out: pl.Out[pl.Tensor]):
{body}
    out = pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)
    return out

@pl.jit
def entry(x: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
    helper(x, out)
    return out
""", "<attrs>", "exec"), ns)
    return ns["entry"]


@pytest.mark.parametrize("body, message", [
    ("    pl.func_attr({'split': 'UP_DOWN'})", "'split' takes a pl.SplitMode"),
    ("    pl.func_attr({'slot_num': 0})", "'slot_num' takes a positive int"),
    ("    pl.func_attr({'tile': 3})", "unknown attribute 'tile'"),
    ("    pl.func_attr({'stationary': 3})", "'stationary' takes a tensor parameter"),
    ("    pl.func_attr({'split': pl.SplitMode.UP_DOWN})\n    pl.func_attr({'split': pl.SplitMode.NONE})",
     "'split' is declared twice"),
    ("    t = pl.load(x, [0, 0], [16, 16])\n    pl.func_attr({'split': pl.SplitMode.UP_DOWN})",
     "must appear before every other statement"),
])
def test_bad_func_attrs_are_errors_at_their_line(body, message):
    with pytest.raises(PtoCompileError, match=message) as excinfo:
        _attr_kernel(body).compile()
    assert excinfo.value.file == "<attrs>"


def test_func_attr_outside_an_incore_body_is_an_error():
    @pl.jit
    def k(x: pl.Tensor[[16, 16], pl.FP32]):
        pl.func_attr({"split": pl.SplitMode.UP_DOWN})

    with pytest.raises(PtoCompileError, match="pl.func_attr belongs at the top of an InCore function"):
        k.compile()


def test_decorator_attrs_are_deprecated_and_checked():
    with pytest.warns(DeprecationWarning, match="pl.func_attr"):
        pl.function(type=pl.FunctionType.InCore, attrs={"split": pl.SplitMode.LEFT_RIGHT})
    with pytest.raises(PtoCompileError, match="takes a dict"):
        pl.function(type=pl.FunctionType.InCore, attrs=[("split", 1)])


# ---- pl.spmd_submit, pl.tile.get_block_idx ---------------------------------------------------------


@pl.program
class Blocks:
    """tasks/02-submit's pl.spmd_submit: one task run by core_num blocks, each on its own band."""

    @pl.function(type=pl.FunctionType.InCore)
    def band(self, x: pl.Tensor[[64, 32], pl.FP32], o: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        b = pl.tile.get_block_idx()
        t = pl.load(x, [b * 16, 0], [16, 32])
        o = pl.store(pl.mul(t, 2.0), [b * 16, 0], o)
        return o

    @pl.function(type=pl.FunctionType.InCore)
    def after(self, o: pl.Tensor[[64, 32], pl.FP32], y: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        y = pl.store(pl.neg(pl.load(o, [0, 0], [64, 32])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[64, 32], pl.FP32], o: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
             y: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        o, tid = pl.spmd_submit(self.band, x, o, core_num=4, sync_start=True)
        y, _ = pl.submit(self.after, o, y, deps=[tid])
        return o, y


def test_spmd_submit_is_one_task_of_core_num_blocks(launcher):
    compiled = ir.compile(Blocks)
    assert len(compiled.task_graph.tasks) == 2 and _declared(compiled) == {(0, 1)}
    x, o, y = torch.randn(64, 32), _nan(64, 32), _nan(64, 32)
    launcher.run(compiled, x, o, y)
    expected = x * 2.0  # each block its own band: every row written once
    torch.testing.assert_close(o, expected, rtol=0, atol=0)
    torch.testing.assert_close(y, -expected, rtol=0, atol=0)
    first = next(_scopes(Blocks.trace().body))
    assert ("core_num", 4) in first.hints and ("sync_start", True) in first.hints


@pl.jit
def spmd_rows(x: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
    for b in pl.spmd(4):
        i = pl.tile.get_block_idx()
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.exp(pl.load(x, [i * 16, 0], [16, 32])), [i * 16, 0], out)
    return out


def test_get_block_idx_is_the_spmd_blocks_index(launcher):
    x, out = torch.randn(64, 32), _nan(64, 32)
    spmd_rows(x, out)
    torch.testing.assert_close(out, torch.exp(x), rtol=1e-6, atol=1e-6)


def test_spmd_submit_needs_core_num_and_get_block_idx_a_block():
    @pl.program
    class NoCores:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[64, 32], pl.FP32], o: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
            o = pl.store(pl.load(x, [0, 0], [64, 32]), [0, 0], o)
            return o

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, x: pl.Tensor[[64, 32], pl.FP32], o: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
            o, _ = pl.spmd_submit(self.k, x, o)
            return o

    with pytest.raises(PtoCompileError, match="pl.spmd_submit requires core_num="):
        ir.compile(NoCores)

    @pl.jit
    def k(x: pl.Tensor[[64, 32], pl.FP32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.tile.get_block_idx()

    with pytest.raises(PtoCompileError, match="get_block_idx\\(\\) is the block index"):
        k.compile()


@pl.program
class SpmdDispatch:
    """language/04-scopes's dispatch form: `with pl.spmd(4):` around a kernel call of a program."""

    @pl.function(type=pl.FunctionType.InCore)
    def kernel(self, a: pl.Tensor[[64, 32], pl.FP32], b: pl.Tensor[[64, 32], pl.FP32],
               out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        i = pl.tile.get_block_idx()
        t = pl.add(pl.load(a, [i * 16, 0], [16, 32]), pl.load(b, [i * 16, 0], [16, 32]))
        out = pl.store(t, [i * 16, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[64, 32], pl.FP32], b: pl.Tensor[[64, 32], pl.FP32],
             out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.spmd(4):
            out = self.kernel(a, b, out)
        return out


def test_spmd_dispatch_form_runs_a_kernel_on_n_blocks(launcher):
    a, b, out = torch.randn(64, 32), torch.randn(64, 32), _nan(64, 32)
    compiled = ir.compile(SpmdDispatch)
    assert len(compiled.task_graph.tasks) == 1
    launcher.run(compiled, a, b, out)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_a_program_of_kernels_alone_is_a_program_with_nothing_to_compile():
    @pl.program
    class Kernels:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
            out = pl.store(pl.load(x, [0, 0], [64, 64]), [0, 0], out)
            return out

    assert list(Kernels.functions) == ["kernel"] and pl.FP32.get_byte() == 4 and pl.FP16.get_byte() == 2
    with pytest.raises(PtoCompileError, match="compiles one entry"):
        ir.compile(Kernels)
