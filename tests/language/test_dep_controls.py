"""Dependency controls: ``pl.at(no_dep_args=[...])``, ``pl.create_tensor(..., manual_dep=True)``,
``pl.at(allow_early_resolve=)``, and runtime scopes (``pl.scope``, ``@pl.jit(auto_scope=False)``).

The opt-outs remove edges from the task graph (``compiled.task_graph``): the tests show the
inferred edge gone, and the result still right where the program orders its tasks itself
(disjoint writes, or ``deps=``).  ``allow_early_resolve`` and an AUTO ``pl.scope`` are hints:
the graph and the result are those without them, and the hint is in the printed program.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from helpers.ir_fixtures import poison
from pypto_async.errors import PtoCompileError

N, TILE, COLS = 4, 64, 128
ROWS = N * TILE



def inferred(compiled) -> set[tuple[int, int, str]]:
    return {(e.src, e.dst, e.tensor) for e in compiled.task_graph.edges if e.kind == "inferred"}


def declared(compiled) -> set[tuple[int, int]]:
    return {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"}


# ---- no_dep_args= -------------------------------------------------------------------------


def _overwrite(no_dep: bool):
    """Every iteration accumulates into the same out tile: iteration i reads what i - 1 wrote."""

    @pl.jit
    def kern(a: pl.Tensor, out: pl.InOut[pl.Tensor]):
        for i in pl.range(N):
            with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out] if no_dep else None):
                t = pl.add(pl.load(out, [0, 0], [TILE, COLS]), pl.load(a, [i * TILE, 0], [TILE, COLS]))
                pl.store(t, [0, 0], out)
        return out

    return kern


@pytest.mark.slow
def test_no_dep_args_removes_the_tasks_edges_on_that_tensor():
    a = np.zeros((ROWS, COLS), np.float32)
    out = np.zeros((TILE, COLS), np.float32)
    tracked = _overwrite(False).compile(a, out)
    assert inferred(tracked) == {(i, i + 1, "out") for i in range(N - 1)}
    untracked = _overwrite(True).compile(a, out)
    assert len(untracked.task_graph.tasks) == N and untracked.task_graph.edges == ()


def test_no_dep_args_on_disjoint_bands_computes_right(launcher):
    """PyPTO's tasks/03-tuning quickstart: four tasks write disjoint row bands of one output."""

    @pl.jit
    def narrow(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(N):
            with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out]):
                t = pl.load(a, [i * TILE, 0], [TILE, COLS])
                pl.store(pl.mul(t, 2.0), [i * TILE, 0], out)
        return out

    torch.manual_seed(0)
    a = torch.randn(ROWS, COLS, dtype=torch.float32)
    out = torch.full((ROWS, COLS), float("nan"))
    compiled = narrow.compile(a, out)
    assert compiled.task_graph.edges == ()
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a * 2.0, rtol=1e-6, atol=0)
    p = narrow.lower(a, out)
    assert "no_dep(out)" in str(p) and "no_dep_args=[out]" in p.as_python(form="jit")


def test_no_dep_args_keeps_declared_deps_and_other_tensors(launcher, rng):
    """The consumer opts out of 'mid' but declares deps= on its producer: the RAW order holds."""

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        mid = pl.create_tensor([TILE, COLS], dtype=pl.FP32)
        with pl.at(level=pl.Level.CORE_GROUP) as produce:
            pl.store(pl.exp(pl.load(a, [0, 0], [TILE, COLS])), [0, 0], mid)
        with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[mid], deps=[produce]):
            pl.store(pl.add(pl.load(mid, [0, 0], [TILE, COLS]), 1.0), [0, 0], out)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(out, [0, 0], [TILE, COLS]), 3.0), [0, 0], out)
        return out

    a = rng.standard_normal((TILE, COLS)).astype(np.float32)
    out = poison((TILE, COLS))
    compiled = kern.compile(a, out)
    assert declared(compiled) == {(0, 1)}
    assert inferred(compiled) == {(1, 2, "out")}  # mid's RAW edge is gone; out's is not
    launcher.run(compiled, a, out)
    np.testing.assert_allclose(out, (np.exp(a) + 1.0) * 3.0, rtol=1e-5)


@pytest.mark.parametrize("arg, message", [
    ("tile", "entries must be tensors"),
    ("twice", "lists 'a' more than once"),
    ("scalar", "must be a list of tensors"),
])
def test_bad_no_dep_args_are_errors_at_the_region(arg, message):
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(a, [0, 0], [16, 16])
            pl.store(t, [0, 0], out)
        value = {"tile": [t], "twice": [a, a], "scalar": a}[arg]
        where.append(next_line())
        with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=value):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], message)


# ---- manual_dep= --------------------------------------------------------------------------


def _scratch_chain(manual: bool, declare: bool):
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        scratch = pl.create_tensor([TILE, COLS], pl.FP32, manual_dep=manual)
        with pl.at(level=pl.Level.CORE_GROUP) as producer:
            pl.store(pl.mul(pl.load(a, [0, 0], [TILE, COLS]), 2.0), [0, 0], scratch)
        with pl.at(level=pl.Level.CORE_GROUP, deps=[producer] if declare else None):
            pl.store(pl.sub(pl.load(scratch, [0, 0], [TILE, COLS]), 1.0), [0, 0], out)
        return out

    return kern


@pytest.mark.slow
def test_manual_dep_tensor_gives_no_edge_for_its_lifetime():
    a = np.zeros((TILE, COLS), np.float32)
    assert inferred(_scratch_chain(False, False).compile(a, a.copy())) == {(0, 1, "tensor0")}
    untracked = _scratch_chain(True, False).compile(a, a.copy())
    assert untracked.task_graph.edges == ()  # the RAW edge you wanted is gone too


def test_manual_dep_with_declared_deps_computes_right(launcher, rng):
    a = rng.standard_normal((TILE, COLS)).astype(np.float32)
    out = poison((TILE, COLS))
    kern = _scratch_chain(True, True)
    compiled = kern.compile(a, out)
    assert declared(compiled) == {(0, 1)} and inferred(compiled) == set()
    launcher.run(compiled, a, out)
    np.testing.assert_allclose(out, a * 2.0 - 1.0, rtol=1e-6)
    p = kern.lower(a, out)
    assert "scratch tensor0: FP32[64, 128] manual_dep" in str(p)
    assert "manual_dep=True)" in p.as_python(form="jit")


def test_manual_dep_must_be_a_bool():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.create_tensor([16, 16], pl.FP32, manual_dep="yes")
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "manual_dep must be a bool")


# ---- allow_early_resolve= -----------------------------------------------------------------


@pytest.mark.slow
def test_allow_early_resolve_is_a_recorded_hint(launcher, rng):
    def build(flag):
        @pl.jit
        def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
            mid = pl.create_tensor([TILE, COLS], dtype=pl.FP32)
            with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=flag):
                pl.store(pl.neg(pl.load(a, [0, 0], [TILE, COLS])), [0, 0], mid)
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.abs(pl.load(mid, [0, 0], [TILE, COLS])), [0, 0], out)
            return out

        return kern

    a = rng.standard_normal((TILE, COLS)).astype(np.float32)
    out = poison((TILE, COLS))
    hinted, plain = build(True), build(False)
    compiled = hinted.compile(a, out)
    assert compiled.task_graph.edges == plain.compile(a, out).task_graph.edges
    launcher.run(compiled, a, out)
    np.testing.assert_array_equal(out, np.abs(a))
    assert "allow_early_resolve=True" in str(hinted.lower(a, out))
    assert "allow_early_resolve" not in str(plain.lower(a, out))


def test_allow_early_resolve_must_be_a_bool():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=1):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "allow_early_resolve must be a boolean")


# ---- pl.scope / auto_scope= ---------------------------------------------------------------


def _bands(body_scope):
    @pl.jit(auto_scope=False)
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with body_scope():
            for i in pl.range(N):
                with pl.at(level=pl.Level.CORE_GROUP):
                    t = pl.load(a, [i * TILE, 0], [TILE, COLS])
                    pl.store(pl.mul(t, 2.0), [0, 0], out)  # every band to one tile: WAW edges
        return out

    return kern


def test_auto_scope_is_recorded_and_keeps_the_inferred_edges(launcher, rng):
    a = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    out = poison((TILE, COLS))
    kern = _bands(pl.scope)
    compiled = kern.compile(a, out)
    assert inferred(compiled) == {(i, i + 1, "out") for i in range(N - 1)}
    launcher.run(compiled, a, out)
    np.testing.assert_array_equal(out, a[-TILE:] * 2.0)
    assert "scope=0" in str(kern.lower(a, out))


def test_manual_scope_mode_is_manual_scope():
    a = np.zeros((ROWS, COLS), np.float32)
    out = np.zeros((TILE, COLS), np.float32)
    kern = _bands(lambda: pl.scope(mode=pl.ScopeMode.MANUAL))
    assert kern.compile(a, out).task_graph.edges == ()
    assert " manual {" in str(kern.lower(a, out))


def test_auto_scope_needs_auto_scope_false():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        with pl.scope():
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "requires @pl.jit(auto_scope=False)")


def test_inline_helper_with_auto_scope_false_may_place_a_scope(launcher, rng):
    @pl.jit.inline(auto_scope=False)
    def helper(a, out):
        with pl.scope():
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.sqrt(pl.abs(pl.load(a, [0, 0], [16, 16]))), [0, 0], out)
        return out

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        return helper(a, out)

    a = rng.standard_normal((16, 16)).astype(np.float32)
    out = poison((16, 16))
    launcher.run(kern.compile(a, out), a, out)
    np.testing.assert_allclose(out, np.sqrt(np.abs(a)), rtol=1e-6)


@pytest.mark.parametrize("where_, message", [
    ("in_region", "not valid inside a pl.at region"),
    ("in_manual", "cannot nest inside a manual scope"),
])
def test_misplaced_scopes_are_errors(where_, message):
    where = []

    @pl.jit(auto_scope=False)
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        if where_ == "in_region":
            with pl.at(level=pl.Level.CORE_GROUP):
                where.append(next_line())
                with pl.scope():
                    pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        else:
            with pl.manual_scope():
                where.append(next_line())
                with pl.scope():
                    pass
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], message)


def test_auto_scope_is_rejected_on_incore_and_must_be_a_bool():
    with pytest.raises(PtoCompileError, match="does not take auto_scope"):
        pl.jit.incore(auto_scope=False)
    with pytest.raises(PtoCompileError, match="takes a bool"):
        pl.jit(auto_scope="no")


def test_program_orchestration_with_auto_scope_false_nests_scopes(launcher, rng):
    """PyPTO's performance/05-memory form: @pl.function(auto_scope=False), a scope per loop body."""

    @pl.program
    class Prog:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, a: pl.Tensor[[16, 16], pl.FP32], out: pl.InOut[pl.Tensor[[16, 16], pl.FP32]]):
            t = pl.add(pl.load(out, [0, 0], [16, 16]), pl.load(a, [0, 0], [16, 16]))
            pl.store(t, [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration, auto_scope=False)
        def orch(self, a: pl.Tensor[[16, 16], pl.FP32], out: pl.InOut[pl.Tensor[[16, 16], pl.FP32]]):
            with pl.scope():
                for i in pl.range(4):
                    with pl.scope():
                        out = self.kernel(a, out)
                return out

    from pypto_async import ir

    a = rng.standard_normal((16, 16)).astype(np.float32)
    out = rng.standard_normal((16, 16)).astype(np.float32)
    want = out + 4 * a
    compiled = ir.compile(Prog)
    assert {(e.src, e.dst) for e in compiled.task_graph.edges} == {(0, 1), (1, 2), (2, 3)}
    launcher.run(compiled, a, out)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    assert "scope=1" in str(Prog.trace())


def test_program_orchestration_auto_scope_defaults_to_rejecting_a_scope():
    @pl.program
    class Prog:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, a: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, a: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
            with pl.scope():
                out = self.kernel(a, out)
            return out

    from pypto_async import ir

    with pytest.raises(PtoCompileError, match="requires @pl.jit\\(auto_scope=False\\)"):
        ir.compile(Prog)


def test_scopes_print_back_in_the_python_view():
    a = np.zeros((ROWS, COLS), np.float32)
    out = np.zeros((TILE, COLS), np.float32)
    p = _bands(pl.scope).lower(a, out)
    src = p.as_python(form="jit")
    assert "@pl.jit(auto_scope=False)" in src and "with pl.scope():" in src
    namespace: dict = {}
    exec(compile(src, "<as_python>", "exec"), namespace)
    assert str(namespace["kern"].lower(a, out)) == str(p)
