"""Kernel forms: ``@pl.jit.inline`` helpers, mixed cube+vector regions with ``pl.split``, and the
loop forms ``pl.unroll`` / ``pl.pipeline``.

An inline helper's body is spliced into its caller; ``pl.split``, ``pl.cross_core_slot``,
``pl.unroll`` and ``pl.pipeline`` are scheduling hints: each computes what the plain form
computes (checked against numpy/torch on random data, outputs poisoned first), and is
recorded in the IR where the printed program shows it.  Misuse is a compile error at the
user's line.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from helpers.ir_fixtures import poison
from helpers.tiers import tiered
from pypto_async.errors import PtoCompileError




# ---- @pl.jit.inline -------------------------------------------------------------------


@pl.jit.inline
def add_one(a: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [128, 128])
        pl.store(pl.add(t, 1.0), [0, 0], c)
    return c


@pl.jit.inline
def twice(a: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [128, 128])
        pl.store(pl.mul(t, 2.0), [0, 0], c)
    return c


@pl.jit
def composed(a: pl.Tensor, c: pl.Out[pl.Tensor]):
    mid = pl.create_tensor([128, 128], dtype=pl.FP32)
    mid = add_one(a, mid)
    c = twice(mid, c)
    return c


def test_inline_helpers_compose_like_pyptos_cross_function_calls(launcher):
    """PyPTO's examples/utils/cross_function_calls.py: c = (a + 1) * 2 through two inline helpers."""
    a = torch.randn(128, 128, dtype=torch.float32)
    c = torch.full((128, 128), float("nan"))
    composed(a, c)
    torch.testing.assert_close(c, (a + 1.0) * 2.0, rtol=0, atol=0)


def test_inline_regions_are_the_callers_tasks_ordered_by_what_they_touch():
    a = np.zeros((128, 128), np.float32)
    compiled = composed.compile(a, a.copy())
    graph = compiled.task_graph
    assert len(graph.tasks) == 2
    assert [(e.src, e.dst, e.hazard, e.tensor) for e in graph.edges] == [(0, 1, "RAW", "tensor0")]
    text = composed.lower(a, a.copy()).as_python(form="jit")
    assert "add_one" not in text and "twice" not in text  # spliced, not called


def test_inline_helper_inside_a_region_returns_a_tile(launcher, rng):
    @pl.jit.inline
    def scaled_sum(x, y, k=3.0):
        return pl.add(pl.mul(x, k), y)

    @pl.jit
    def kern(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [0, 0], [32, 64])
            tb = pl.load(b, [0, 0], [32, 64])
            pl.store(scaled_sum(ta, tb, k=0.5), [0, 0], out)
        return out

    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((32, 64)).astype(np.float32)
    out = poison((32, 64))
    launcher.run(kern.compile(a, b, out), a, b, out)
    np.testing.assert_allclose(out, a * 0.5 + b, rtol=1e-6)


def test_inline_outside_a_kernel_is_an_error():
    with pytest.raises(PtoCompileError, match="@pl.jit.inline helper"):
        add_one(np.zeros((128, 128), np.float32), np.zeros((128, 128), np.float32))


def test_inline_out_parameter_takes_a_tensor():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [0, 0], [128, 128])
            where.append(next_line())
            twice(a, t)
        return out

    x = np.zeros((128, 128), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "twice", "'c' is pl.Out", "pass a tensor")


def test_inline_wrong_arguments_are_an_error_at_the_call():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        twice(a)
        return out

    x = np.zeros((128, 128), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "twice", "missing a required argument")


# ---- mixed kernels: pl.split / pl.cross_core_slot ----------------------------------------


def _mixed(mode, *extra):
    @pl.jit
    def kern(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=[pl.split(mode), *extra], name_hint="mixed"):
            acc = pl.matmul(a, b, out_dtype=pl.FP32)  # cube
            pl.store(pl.add(acc, bias), [0, 0], out)  # vector
        return out

    return kern


@tiered("mode", list(pl.SplitMode), fast=[pl.SplitMode.UP_DOWN])
def test_split_mixed_kernel_matches_torch(launcher, mode):
    torch.manual_seed(0)
    a = torch.randn(128, 256, dtype=torch.float16)
    b = torch.randn(256, 128, dtype=torch.float16)
    bias = torch.randn(128, 128, dtype=torch.float32)
    out = torch.full((128, 128), float("nan"))
    kern = _mixed(mode, pl.cross_core_slot(slot_num=2))
    launcher.run(kern.compile(a, b, bias, out), a, b, bias, out)
    torch.testing.assert_close(out, a.float() @ b.float() + bias, rtol=1e-4, atol=1e-4)


def test_split_is_recorded_in_the_ir_and_the_python_view():
    a = np.zeros((128, 256), np.float16)
    b = np.zeros((256, 128), np.float16)
    c = np.zeros((128, 128), np.float32)
    p = _mixed(pl.SplitMode.LEFT_RIGHT, pl.cross_core_slot(slot_num=4)).lower(a, b, c, c.copy())
    assert "split=LEFT_RIGHT cross_core_slot=4" in str(p)
    assert "optimizations=[pl.split(pl.SplitMode.LEFT_RIGHT), pl.cross_core_slot(slot_num=4)]" in p.as_python(form="jit")


@pytest.mark.parametrize("opts, message", [
    (lambda: [pl.split(pl.SplitMode.UP_DOWN), pl.split(pl.SplitMode.NONE)], "Duplicate 'pl.split(...)'"),
    (lambda: [pl.cross_core_slot(slot_num=2), pl.cross_core_slot(slot_num=2)], "Duplicate 'pl.cross_core_slot"),
    (lambda: ["UP_DOWN"], "Unsupported entry"),
    (lambda: pl.split(pl.SplitMode.UP_DOWN), "must be a list"),
])
def test_bad_optimizations_are_errors_at_the_region(opts, message):
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=opts()):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], message)


def test_bad_optimization_entries_are_errors_where_they_are_made():
    with pytest.raises(PtoCompileError) as ei:
        line = next_line()
        pl.cross_core_slot(slot_num=0)
    assert_at(ei, line, "pl.cross_core_slot slot_num must be a positive integer, got 0")
    with pytest.raises(PtoCompileError) as ei:
        line = next_line()
        pl.split("UP_DOWN")
    assert_at(ei, line, "pl.split takes a pl.SplitMode")


def test_deprecated_split_slot_num_warns_and_is_recorded():
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=[pl.split(pl.SplitMode.NONE, slot_num=3)]):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.warns(DeprecationWarning, match="cross_core_slot"):
        p = kern.lower(x, x)
    assert "split=NONE cross_core_slot=3" in str(p)


# ---- pl.unroll / pl.pipeline -------------------------------------------------------------


def test_unroll_accumulates_as_range_does(launcher, rng):
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc = pl.load(a, [0, 0], [16, 32])
            for i in pl.unroll(1, 4):
                acc = pl.add(acc, pl.mul(pl.load(a, [i * 16, 0], [16, 32]), 2.0))
            pl.store(acc, [0, 0], out)
        return out

    a = rng.standard_normal((64, 32)).astype(np.float32)
    out = poison((16, 32))
    launcher.run(kern.compile(a, out), a, out)
    want = a[0:16].copy()
    for i in range(1, 4):
        want = want + a[i * 16:(i + 1) * 16] * 2.0
    np.testing.assert_allclose(out, want, rtol=1e-6)
    p = kern.lower(a, out)
    # pl.unroll takes no init_values, so the carried loop prints in pl.range's explicit form, noted
    assert "in unroll(1, 4, 1)" in str(p) and "init_values=(t0,)):  # pl.unroll" in p.as_python(form="jit")


def test_unroll_of_regions_makes_one_task_per_iteration(launcher, rng):
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.unroll(4):
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.exp(pl.load(a, [i * 64, 0], [64, 128])), [i * 64, 0], out)
        return out

    a = rng.standard_normal((256, 128)).astype(np.float32)
    out = poison((256, 128))
    compiled = kern.compile(a, out)
    launcher.run(compiled, a, out)
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)
    assert len(compiled.task_graph.tasks) == 4 and compiled.task_graph.edges == ()


@tiered("stage", [1, 2, 3], fast=[3])
def test_pipeline_double_buffers_an_incore_loop_with_a_tail(launcher, rng, stage):
    """Seven tiles (not a multiple of the stage): every one is loaded, computed and stored once."""

    @pl.jit
    def kern(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.pipeline(7, stage=stage):
                ta = pl.load(a, [i * 16, 0], [16, 64])
                tb = pl.load(b, [i * 16, 0], [16, 64])
                pl.store(pl.add(pl.mul(ta, tb), 1.0), [i * 16, 0], out)
        return out

    a = rng.standard_normal((112, 64)).astype(np.float32)
    b = rng.standard_normal((112, 64)).astype(np.float32)
    out = poison((112, 64))
    launcher.run(kern.compile(a, b, out), a, b, out)
    np.testing.assert_allclose(out, a * b + 1.0, rtol=1e-6)
    p = kern.lower(a, b, out)
    assert f"in pipeline stage={stage}(0, 7, 1)" in str(p)
    assert f"pl.pipeline(0, 7, 1, stage={stage})" in p.as_python(form="jit")


def test_pipeline_carries_init_values(launcher, rng):
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            zero = pl.mul(pl.load(a, [0, 0], [16, 16]), 0.0)
            for i, (acc,) in pl.pipeline(0, 64, 16, stage=2, init_values=(zero,)):
                nxt = pl.add(acc, pl.load(a, [i, 0], [16, 16]))
                acc = pl.yield_(nxt)
            pl.store(acc, [0, 0], out)
        return out

    a = rng.standard_normal((64, 16)).astype(np.float32)
    out = poison((16, 16))
    launcher.run(kern.compile(a, out), a, out)
    np.testing.assert_allclose(out, a.reshape(4, 16, 16).sum(0), rtol=1e-5, atol=1e-6)
    assert "pl.pipeline(0, 64, 16, stage=2, init_values=" in kern.lower(a, out).as_python(form="jit")


@pytest.mark.parametrize("form, args, kw, message", [
    ("pipeline", (4,), {}, "pl.pipeline() requires stage="),
    ("pipeline", (4,), {"stage": 0}, "stage must be >= 1, got 0"),
    ("pipeline", (4,), {"stage": 2.0}, "stage must be a compile-time constant integer"),
    ("unroll", (4,), {"init_values": ()}, "pl.unroll() cannot be combined with init_values"),
    ("unroll", (0, 4, 0), {}, "pl.unroll step must be positive"),
])
def test_bad_loop_forms_are_errors_at_the_loop(form, args, kw, message):
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            for i in getattr(pl, form)(*args, **kw):
                pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], message)


def test_hints_and_loop_forms_round_trip_through_the_python_view():
    @pl.jit
    def kern(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        for j in pl.unroll(2):
            with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out], allow_early_resolve=True,
                       optimizations=[pl.split(pl.SplitMode.UP_DOWN), pl.cross_core_slot(slot_num=3)]):
                for i in pl.pipeline(4, stage=2):
                    t = pl.add(pl.load(a, [j * 64 + i * 16, 0], [16, 32]), pl.load(b, [i * 16, 0], [16, 32]))
                    pl.store(t, [j * 64 + i * 16, 0], out)
        return out

    a = np.zeros((128, 32), np.float32)
    b = np.zeros((64, 32), np.float32)
    p = kern.lower(a, b, a.copy())
    namespace: dict = {}
    exec(compile(p.as_python(form="jit"), "<as_python>", "exec"), namespace)
    assert str(namespace["kern"].lower(a, b, a.copy())) == str(p)


@pytest.mark.slow
def test_a_tile_read_in_another_region_goes_through_a_tensor(launcher):
    """03_mixed_kernel's staged form with a tile across the two scopes: each region is a task, so the
    tile the vector task reads is stored by the cube task to an intermediate (as PyPTO's outlining
    makes it an output of the first InCore function); it read garbage before that."""

    @pl.jit
    def staged(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="cube_only"):
            acc = pl.matmul(a, b, out_dtype=pl.FP32)
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="vector_only"):
            pl.store(pl.add(acc, bias), [0, 0], out)
        return out

    torch.manual_seed(2)
    a = torch.randn(128, 256, dtype=torch.float16)
    b = torch.randn(256, 128, dtype=torch.float16)
    bias = torch.randn(128, 128, dtype=torch.float32)
    out = torch.full((128, 128), float("nan"))
    program = staged.lower(a, b, bias, out)
    assert len(program.scratch) == 1  # the one tile that crosses, stored once
    launcher.run(staged.compile(a, b, bias, out), a, b, bias, out)
    torch.testing.assert_close(out, a.float() @ b.float() + bias, rtol=1e-4, atol=1e-4)


def test_a_tile_of_a_region_in_a_loop_that_has_ended_is_a_compile_error():
    where = []

    @pl.jit
    def late(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(2):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="in_loop"):
                t = pl.add(a, 1.0)
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="after"):
            where.append(next_line())
            pl.store(pl.mul(t, 2.0), [0, 0], out)
        return out

    a = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        late.lower(a, a.copy())
    assert_at(ei, where[0], "computed in a region inside a loop that has ended")


@pytest.mark.slow
def test_the_staged_form_through_a_tensor_matches_torch(launcher):
    @pl.jit
    def staged(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, out: pl.Out[pl.Tensor]):
        mid = pl.create_tensor([128, 128], dtype=pl.FP32)
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="cube_only"):
            pl.store(pl.matmul(a, b, out_dtype=pl.FP32), [0, 0], mid)
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="vector_only"):
            pl.store(pl.add(mid, bias), [0, 0], out)
        return out

    torch.manual_seed(1)
    a = torch.randn(128, 256, dtype=torch.float16)
    b = torch.randn(256, 128, dtype=torch.float16)
    bias = torch.randn(128, 128, dtype=torch.float32)
    out = torch.full((128, 128), float("nan"))
    launcher.run(staged.compile(a, b, bias, out), a, b, bias, out)
    torch.testing.assert_close(out, a.float() @ b.float() + bias, rtol=1e-4, atol=1e-4)
