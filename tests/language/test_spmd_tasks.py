"""PyPTO's ``pl.spmd`` as a task boundary (tasks/02-submit, language/04-scopes): ``with pl.spmd(n) as tid``
binds a task id, not a block index.

Programs in the guide's style, checked against torch on random data with outputs poisoned first, and by
the task graph the compiled program carries (``compiled.task_graph``).
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


def _declared(compiled) -> set:
    return {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"}


@pl.jit
def two_stages(a: pl.Tensor[[128, 64], pl.FP32], b: pl.Tensor[[128, 64], pl.FP32],
               mid: pl.Out[pl.Tensor[[128, 64], pl.FP32]], out: pl.Out[pl.Tensor[[128, 64], pl.FP32]]):
    with pl.manual_scope():
        with pl.spmd(4, name_hint="stage1") as first:
            i = pl.tile.get_block_idx()
            off = i * 32
            mid = pl.store(pl.add(pl.load(a, [off, 0], [32, 64]), pl.load(b, [off, 0], [32, 64])), [off, 0], mid)
        with pl.spmd(4, name_hint="stage2", deps=[first]) as _second:
            i = pl.tile.get_block_idx()
            out = pl.store(pl.relu(pl.load(mid, [i * 32, 0], [32, 64])), [i * 32, 0], out)
    return mid, out


def test_with_spmd_as_binds_a_task_id_that_deps_takes(launcher):
    a, b = torch.randn(128, 64), torch.randn(128, 64)
    mid, out = _nan(128, 64), _nan(128, 64)
    two_stages(a, b, mid, out)
    torch.testing.assert_close(out, torch.relu(a + b), rtol=1e-6, atol=1e-6)
    compiled = two_stages.compile(a, b, mid, out)
    # Inside the manual scope the only edge is the declared one: first -> second.
    assert _declared(compiled) == {(0, 1)}
    names = [t.name for t in compiled.task_graph.tasks]
    assert names[:2] == ["stage1", "stage2"] or set(names) >= {"stage1", "stage2"}


def test_spmd_task_id_fills_a_task_id_array():
    @pl.jit
    def fan_in(a: pl.Tensor[[64, 32], pl.FP32], parts: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
               out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        tids = pl.array.create(2, pl.TASK_ID)
        with pl.manual_scope():
            for k in pl.range(2):
                with pl.spmd(2) as tid:
                    i = pl.tile.get_block_idx()
                    r = k * 32 + i * 16
                    parts = pl.store(pl.mul(pl.load(a, [r, 0], [16, 32]), 2.0), [r, 0], parts)
                tids[k] = tid
            with pl.at(level=pl.Level.CORE_GROUP, deps=[tids]):
                out = pl.store(pl.add(pl.load(parts, [0, 0], [64, 32]), 1.0), [0, 0], out)
        return parts, out

    a, parts, out = torch.randn(64, 32), _nan(64, 32), _nan(64, 32)
    fan_in(a, parts, out)
    torch.testing.assert_close(out, a * 2.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_spmd_hints_are_recorded_and_change_no_result():
    @pl.jit
    def k(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.spmd(2, sync_start=True, allow_early_resolve=True,
                     optimizations=[pl.split(pl.SplitMode.UP_DOWN)]) as tid:  # noqa: F841 - the as-form makes it one task
            i = pl.tile.get_block_idx()
            out = pl.store(pl.exp(pl.load(a, [i * 32, 0], [32, 32])), [i * 32, 0], out)
        return out

    a, out = torch.randn(64, 32), _nan(64, 32)
    k(a, out)
    torch.testing.assert_close(out, torch.exp(a), rtol=1e-5, atol=1e-6)
    text = k.lower(a, out).as_python()
    assert "allow_early_resolve=True" in text


def test_spmd_deps_without_as_and_predicate_are_refused():
    @pl.jit
    def loop_deps(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP) as t0:
            out = pl.store(pl.load(a, [0, 0], [64, 32]), [0, 0], out)
        for i in pl.spmd(2, deps=[t0]):
            out = pl.store(pl.load(a, [i * 32, 0], [32, 32]), [i * 32, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="does not accept 'deps=' here"):
        loop_deps.compile()

    @pl.jit
    def bare_deps(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP) as t0:
            out = pl.store(pl.load(a, [0, 0], [64, 32]), [0, 0], out)
        with pl.spmd(2, deps=[t0]):
            i = pl.tile.get_block_idx()
            out = pl.store(pl.load(a, [i * 32, 0], [32, 32]), [i * 32, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="does not accept 'deps=' here"):
        bare_deps.compile()

    @pl.jit
    def same_work(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.spmd(2):
            out = pl.store(pl.load(a, [0, 0], [64, 32]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="neither reads the block index"):
        same_work.compile()

    with pytest.raises(PtoCompileError, match="predicate=.... takes a comparison"):
        @pl.jit
        def pred(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
            with pl.spmd(2, predicate=True) as tid:  # noqa: F841 - refused before the body runs
                i = pl.tile.get_block_idx()
                out = pl.store(pl.load(a, [i * 32, 0], [32, 32]), [i * 32, 0], out)
            return out

        pred.compile()


@pl.program
class SpmdTids:
    """The program form: `with pl.spmd(n) as tid:` around a kernel call names that call's task."""

    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        i = pl.tile.get_block_idx()
        out = pl.store(pl.mul(pl.load(a, [i * 16, 0], [16, 32]), 3.0), [i * 16, 0], out)
        return out

    @pl.function(type=pl.FunctionType.InCore)
    def shift(self, s: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        out = pl.store(pl.add(pl.load(s, [0, 0], [64, 32]), 1.0), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[64, 32], pl.FP32], s: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
             out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.manual_scope():
            with pl.spmd(4) as tid:
                s = self.scale(a, s)
            out, _ = pl.submit(self.shift, s, out, deps=[tid])
        return s, out


def test_program_spmd_as_names_the_dispatched_task(launcher):
    compiled = ir.compile(SpmdTids)
    assert _declared(compiled) == {(0, 1)}
    a, s, out = torch.randn(64, 32), _nan(64, 32), _nan(64, 32)
    launcher.run(compiled, a, s, out)
    torch.testing.assert_close(out, a * 3.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_spmd_loop_beside_regions_is_a_task_of_its_own():
    """`for i in pl.spmd(n)` is one task of n blocks: a region beside it runs once, not once per block."""

    @pl.jit
    def k(a: pl.Tensor[[64, 32], pl.FP32], mid: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
          acc: pl.InOut[pl.Tensor[[64, 32], pl.FP32]]):
        for i in pl.spmd(2):
            mid = pl.store(pl.exp(pl.load(a, [i * 32, 0], [32, 32])), [i * 32, 0], mid)
        for j in pl.spmd(4):                                  # another block count: another task
            acc = pl.store(pl.load(a, [j * 16, 0], [16, 32]), [j * 16, 0], acc, atomic=pl.AtomicType.Add)
        with pl.at(level=pl.Level.CORE_GROUP):
            acc = pl.store(pl.load(mid, [0, 0], [64, 32]), [0, 0], acc, atomic=pl.AtomicType.Add)
        return mid, acc

    a, mid, acc = torch.randn(64, 32), _nan(64, 32), torch.randn(64, 32)
    want = acc + a + torch.exp(a)
    k(a, mid, acc)
    torch.testing.assert_close(acc, want, rtol=1e-5, atol=1e-5)
    compiled = k.compile(a, mid, acc)
    assert compiled.block_num == 1 and len(compiled.task_graph.tasks) == 3


@pl.program
class SpmdLoopInProgram:
    """`for ob in pl.spmd(n)` in a program's Opaque function: the loop variable is the block index, not a TaskId."""

    @pl.function(type=pl.FunctionType.Opaque)
    def main(self, a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        for ob in pl.spmd(4, name_hint="rows"):
            m0 = ob * 16
            out = pl.assemble(out, pl.add(pl.slice(a, [16, 32], [m0, 0]), 1.0), [m0, 0])
        return out


def test_program_spmd_loop_binds_the_block_index(launcher):
    compiled = ir.compile(SpmdLoopInProgram)
    assert len(compiled.task_graph.tasks) == 1
    a, out = torch.randn(64, 32), _nan(64, 32)
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a + 1.0, rtol=1e-6, atol=1e-6)


def test_an_inline_spmd_predicate_compares_one_element():
    @pl.jit
    def pred(a: pl.Tensor[[64, 32], pl.FP32], g: pl.Tensor[[4], pl.INT32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.spmd(2, predicate=(g[0:2] > 0)) as tid:  # noqa: F841 - refused where the region closes
            i = pl.tile.get_block_idx()
            out = pl.store(pl.load(a, [i * 32, 0], [32, 32]), [i * 32, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="compares one element"):
        pred.compile()
