"""Task-id arrays: ``pl.array.create(n, pl.TASK_ID)``, ``arr[i] = tid`` and ``deps=[arr]``.

A consumer with ``deps=[arr]`` waits for every task stored in the array when it is submitted;
the stores are replayed instance by instance (``compiled.task_graph``).  The worked example is
PyPTO's performance/03-dependencies ``tensor_claim``: a ``manual_dep`` scratch whose writers
are collected in an array, checked against torch with the output poisoned.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from helpers.ir_fixtures import poison
from pypto_async.errors import PtoCompileError

N, TILE_ROWS, COLS = 4, 64, 128
ROWS = N * TILE_ROWS



def _claim(collect: bool):
    @pl.jit
    def tensor_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        scratch = pl.create_tensor([ROWS, COLS], pl.FP32, manual_dep=True)
        writers = pl.array.create(N, pl.TASK_ID)
        for i in pl.range(N):
            with pl.at(level=pl.Level.CORE_GROUP) as tid:
                t = pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
                pl.store(pl.mul(t, 2.0), [i * TILE_ROWS, 0], scratch)
            writers[i] = tid
        with pl.at(level=pl.Level.CORE_GROUP, deps=[writers] if collect else None):
            for i in pl.range(N):
                t = pl.load(scratch, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
                pl.store(t, [i * TILE_ROWS, 0], out)
        return out

    return tensor_claim


def test_pyptos_tensor_claim_waits_on_every_writer(launcher):
    torch.manual_seed(0)
    a = torch.randn(ROWS, COLS, dtype=torch.float32)
    out = torch.full((ROWS, COLS), float("nan"))
    compiled = _claim(True).compile(a, out)
    assert {(e.src, e.dst, e.kind) for e in compiled.task_graph.edges} == {(i, N, "declared") for i in range(N)}
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a * 2.0, rtol=1e-6, atol=0)


def test_without_the_array_the_manual_dep_consumer_has_no_edge():
    a = np.zeros((ROWS, COLS), np.float32)
    assert _claim(False).compile(a, a.copy()).task_graph.edges == ()


def test_the_array_is_in_the_printed_program_and_the_python_view_round_trips():
    a = np.zeros((ROWS, COLS), np.float32)
    kern = _claim(True)
    p = kern.lower(a, a.copy())
    assert "-> tids0[i0] of 4" in str(p) and "deps_all(tids0)" in str(p)
    src = p.as_python(form="jit")
    assert "tids0 = pl.array.create(4, pl.TASK_ID)" in src and "tids0[i0] = _task0" in src
    assert "deps=[tids0]" in src
    scope: dict = {}
    exec(compile(src, "<as_python>", "exec"), scope)
    again = scope["tensor_claim"]
    assert str(again.lower(a, a.copy())) == str(p)
    assert again.compile(a, a.copy()).task_graph == kern.compile(a, a.copy()).task_graph


def test_a_slot_stored_in_every_iteration_holds_the_last_task():
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        last = pl.array.create(1, pl.TASK_ID)
        for i in pl.range(N):
            with pl.manual_scope():
                with pl.at(level=pl.Level.CORE_GROUP) as tid:
                    pl.store(pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS]), [i * TILE_ROWS, 0], out)
            last[0] = tid
        with pl.manual_scope():
            with pl.at(level=pl.Level.CORE_GROUP, deps=[last]):
                pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
        return out

    a = np.zeros((ROWS, COLS), np.float32)
    assert [(e.src, e.dst) for e in kern.compile(a, a.copy()).task_graph.edges] == [(N - 1, N)]


def test_arrays_and_task_ids_mix_in_one_deps_list(launcher, rng):
    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        mid = pl.create_tensor([ROWS, COLS], pl.FP32, manual_dep=True)
        bands = pl.array.create(N - 1, pl.TASK_ID)
        for i in pl.range(N - 1):
            with pl.at(level=pl.Level.CORE_GROUP) as tid:
                pl.store(pl.exp(pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])), [i * TILE_ROWS, 0], mid)
            bands[i] = tid
        with pl.at(level=pl.Level.CORE_GROUP) as tail:
            t = pl.load(a, [(N - 1) * TILE_ROWS, 0], [TILE_ROWS, COLS])
            pl.store(pl.neg(t), [(N - 1) * TILE_ROWS, 0], mid)
        with pl.at(level=pl.Level.CORE_GROUP, deps=[tail, bands]):
            pl.store(pl.add(pl.load(mid, [0, 0], [ROWS, COLS]), 1.0), [0, 0], out)
        return out

    a = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    out = poison((ROWS, COLS))
    compiled = kern.compile(a, out)
    assert sorted(compiled.task_graph.preds(N)) == list(range(N))
    launcher.run(compiled, a, out)
    want = np.concatenate([np.exp(a[:-TILE_ROWS]), -a[-TILE_ROWS:]]) + 1.0
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_a_store_outside_the_array_is_a_compile_error():
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        ids = pl.array.create(N, pl.TASK_ID)
        for i in pl.range(N):
            with pl.at(level=pl.Level.CORE_GROUP) as tid:
                pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
            where.append(next_line())
            ids[i + 1] = tid
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], "tids0[i0 + 1] takes slots 1..4, outside the array's 4 slots")


@pytest.mark.parametrize("case, message", [
    ("dtype", "the element type must be pl.TASK_ID or an integer or BOOL dtype"),
    ("size", "the size must be a positive int"),
    ("const_range", "tids0[5] takes slots 5..5, outside the array's 4 slots"),
    ("not_a_tid", "takes a task id bound by"),
    ("elsewhere", "store a task id in the loop body that binds it"),
])
def test_bad_arrays_are_errors_at_the_line(case, message):
    where = []

    @pl.jit
    def kern(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP) as tid:
            pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)
        if case == "dtype":
            where.append(next_line())
            pl.array.create(4, pl.FP32)
        elif case == "size":
            where.append(next_line())
            pl.array.create(0, pl.TASK_ID)
        ids = pl.array.create(4, pl.TASK_ID)
        if case == "const_range":
            where.append(next_line())
            ids[5] = tid
        elif case == "not_a_tid":
            where.append(next_line())
            ids[0] = 3
        elif case == "read":
            where.append(next_line())
            ids[0]
        elif case == "elsewhere":
            for i in pl.range(4):
                where.append(next_line())
                ids[i] = tid
        return out

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(PtoCompileError) as ei:
        kern.lower(x, x)
    assert_at(ei, where[0], message)


PHASES = 3


@pl.program
class PhaseFence:
    """PyPTO's phase fence: each phase's tasks wait on the previous phase's, the array carried by init_values."""

    @pl.function(type=pl.FunctionType.InCore)
    def stripe(self, a: pl.Tensor[[PHASES * ROWS, COLS], pl.FP32], row: pl.Scalar[pl.INDEX],
               out: pl.Out[pl.Tensor[[PHASES * ROWS, COLS], pl.FP32]]):
        t = pl.load(a, [row, 0], [TILE_ROWS, COLS])
        return pl.store(pl.add(t, 1.0), [row, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[PHASES * ROWS, COLS], pl.FP32],
             out: pl.Out[pl.Tensor[[PHASES * ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            tids = pl.array.create(N, pl.TASK_ID)
            for phase, (prev,) in pl.range(PHASES, init_values=(tids,)):
                nxt = pl.array.create(N, pl.TASK_ID)
                for b in pl.parallel(N):
                    out, tid = pl.submit(self.stripe, a, (phase * N + b) * TILE_ROWS, out, deps=[prev])
                    nxt[b] = tid
                tids = pl.yield_(nxt)
            out, _ = pl.submit(self.stripe, a, 0, out, deps=[tids])
        return out


def test_a_carried_array_holds_the_previous_iterations_tasks(launcher):
    from pypto_async import ir

    compiled = ir.compile(PhaseFence)
    want = {(p * N + i, (p + 1) * N + j) for p in range(PHASES - 1) for i in range(N) for j in range(N)}
    want |= {((PHASES - 1) * N + i, PHASES * N) for i in range(N)}  # after the loop: the last phase's tasks
    assert {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"} == want
    a = torch.randn(PHASES * ROWS, COLS)
    out = torch.full((PHASES * ROWS, COLS), float("nan"))
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a + 1.0, rtol=1e-6, atol=0)


def test_a_carried_array_must_be_yielded_an_array():
    @pl.jit
    def k(a: pl.Tensor[[ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[ROWS, COLS], pl.FP32]]):
        tids = pl.array.create(N, pl.TASK_ID)
        for i, (prev,) in pl.range(N, init_values=(tids,)):
            with pl.at(level=pl.Level.CORE_GROUP, deps=[prev]):
                out = pl.store(pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS]), [i * TILE_ROWS, 0], out)
            tids = pl.yield_(out)
        return out

    a = np.zeros((ROWS, COLS), np.float32)
    with pytest.raises(PtoCompileError, match="must be a task-id array of 4 slots"):
        k.compile(a, a.copy())


def test_a_carried_array_prints_as_init_values_and_round_trips():
    @pl.jit
    def fence(a: pl.Tensor[[PHASES * ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[PHASES * ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            tids = pl.array.create(N, pl.TASK_ID)
            for p, (prev,) in pl.range(PHASES, init_values=(tids,)):
                nxt = pl.array.create(N, pl.TASK_ID)
                for b in pl.parallel(N):
                    with pl.at(level=pl.Level.CORE_GROUP, deps=[prev]) as tid:
                        r = (p * N + b) * TILE_ROWS
                        out = pl.store(pl.add(pl.load(a, [r, 0], [TILE_ROWS, COLS]), 1.0), [r, 0], out)
                    nxt[b] = tid
                tids = pl.yield_(nxt)
            with pl.at(level=pl.Level.CORE_GROUP, deps=[tids]):
                out = pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
        return out

    a = np.zeros((PHASES * ROWS, COLS), np.float32)
    p = fence.lower(a, a.copy())
    assert "fresh(tids2[4]) carry(tids1 = tids0; <- tids2)" in str(p)
    src = p.as_python(form="jit")
    assert "in pl.range(0, 3, 1, init_values=(tids0,))" in src and "tids1 = pl.yield_(tids2)" in src
    scope: dict = {}
    exec(compile(src, "<as_python>", "exec"), scope)
    again = scope["fence"]
    assert str(again.lower(a, a.copy())) == str(p)
    graph = fence.compile(a, a.copy()).task_graph
    assert again.compile(a, a.copy()).task_graph == graph and len(graph.edges) == 2 * N * N + N


@pl.program
class SlotsAndJoins:
    """`pl.system.task_dummy(deps=[arr])` waits on the array's tasks as they are then; `arr[i]` one slot's task."""

    @pl.function(type=pl.FunctionType.InCore)
    def stripe(self, a: pl.Tensor[[3 * ROWS, COLS], pl.FP32], row: pl.Scalar[pl.INDEX],
               out: pl.Out[pl.Tensor[[3 * ROWS, COLS], pl.FP32]]):
        t = pl.load(a, [row, 0], [TILE_ROWS, COLS])
        return pl.store(pl.mul(t, 2.0), [row, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[3 * ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[3 * ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            tids = pl.array.create(N, pl.TASK_ID)
            for b in pl.parallel(N):
                out, tid = pl.submit(self.stripe, a, b * TILE_ROWS, out)
                tids = pl.array.update_element(tids, b, tid)
            join = pl.system.task_dummy(deps=[tids])
            for b in pl.parallel(N):
                out, tid = pl.submit(self.stripe, a, (N + b) * TILE_ROWS, out, deps=[join])
                tids[b] = tid
            for b in pl.parallel(N):
                prev = pl.array.get_element(tids, (b + 1) % N)
                out, _ = pl.submit(self.stripe, a, (2 * N + b) * TILE_ROWS, out, deps=[prev])
        return out


def test_a_dummy_task_joins_an_array_and_a_slot_names_one_task(launcher):
    from pypto_async import ir

    compiled = ir.compile(SlotsAndJoins)
    dummy = N  # tasks: N stripes, the dummy, N stripes after it, N stripes each after one of those
    want = {(i, dummy) for i in range(N)} | {(dummy, N + 1 + j) for j in range(N)}
    want |= {(N + 1 + (b + 1) % N, 2 * N + 1 + b) for b in range(N)}
    assert {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"} == want
    assert "deps_at(tids0[" in str(compiled.program)
    a = torch.randn(3 * ROWS, COLS)
    out = torch.full((3 * ROWS, COLS), float("nan"))
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a * 2.0, rtol=1e-6, atol=0)


def test_a_slot_read_before_a_later_store_is_refused():
    from pypto_async.errors import PtoNotSupported

    @pl.jit
    def k(a: pl.Tensor[[ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[ROWS, COLS], pl.FP32]]):
        tids = pl.array.create(N, pl.TASK_ID)
        with pl.at(level=pl.Level.CORE_GROUP) as t0:
            out = pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
        tids[0] = t0
        stale = tids[0]
        with pl.at(level=pl.Level.CORE_GROUP) as t1:
            out = pl.store(pl.load(a, [TILE_ROWS, 0], [TILE_ROWS, COLS]), [TILE_ROWS, 0], out)
        tids[0] = t1
        with pl.at(level=pl.Level.CORE_GROUP, deps=[stale]):
            out = pl.store(pl.load(a, [2 * TILE_ROWS, 0], [TILE_ROWS, COLS]), [2 * TILE_ROWS, 0], out)
        return out

    a = np.zeros((ROWS, COLS), np.float32)
    with pytest.raises(PtoNotSupported, match="read before a later store"):
        k.compile(a, a.copy())
    with pytest.raises(PtoCompileError, match="outside the array"):
        @pl.jit
        def bad(a: pl.Tensor[[ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[ROWS, COLS], pl.FP32]]):
            tids = pl.array.create(N, pl.TASK_ID)
            with pl.at(level=pl.Level.CORE_GROUP, deps=[tids[N]]):
                out = pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
            return out

        bad.compile(a, a.copy())


STEPS = 3


@pl.program
class BranchChains:
    """PyPTO's branch chain: a task id rebound in a pl.range body, seeded with None, orders each step after the last."""

    @pl.function(type=pl.FunctionType.InCore)
    def stripe(self, a: pl.Tensor[[STEPS * ROWS, COLS], pl.FP32], row: pl.Scalar[pl.INDEX],
               out: pl.Out[pl.Tensor[[STEPS * ROWS, COLS], pl.FP32]]):
        t = pl.load(a, [row, 0], [TILE_ROWS, COLS])
        return pl.store(pl.add(t, 3.0), [row, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[STEPS * ROWS, COLS], pl.FP32],
             out: pl.Out[pl.Tensor[[STEPS * ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            for b in pl.parallel(N):
                prev = None
                for step in pl.range(STEPS):
                    out, prev = pl.submit(self.stripe, a, (step * N + b) * TILE_ROWS, out, deps=[prev])
        return out


def test_a_task_id_rebound_in_a_loop_is_the_next_iterations_dep(launcher):
    from pypto_async import ir

    compiled = ir.compile(BranchChains)
    want = {(b * STEPS + s, b * STEPS + s + 1) for b in range(N) for s in range(STEPS - 1)}  # per-branch chains
    assert {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"} == want
    a = torch.randn(STEPS * ROWS, COLS)
    out = torch.full((STEPS * ROWS, COLS), float("nan"))
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, a + 3.0, rtol=1e-6, atol=0)


def test_a_task_id_rebound_by_pl_at_as_is_carried_too():
    @pl.jit
    def k(a: pl.Tensor[[ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            with pl.at(level=pl.Level.CORE_GROUP) as prev:
                out = pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
            for i in pl.range(1, N):
                with pl.at(level=pl.Level.CORE_GROUP, deps=[prev]) as prev:
                    out = pl.store(pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS]), [i * TILE_ROWS, 0], out)
        return out

    a = np.zeros((ROWS, COLS), np.float32)
    edges = {(e.src, e.dst) for e in k.compile(a, a.copy()).task_graph.edges if e.kind == "declared"}
    assert {(i, i + 1) for i in range(N - 1)} <= edges and all(src < dst for src, dst in edges)


def test_a_task_id_bound_in_both_branches_of_an_if_stores_the_branchs_task(launcher):
    @pl.jit
    def k(a: pl.Tensor[[ROWS, COLS], pl.FP32], out: pl.Out[pl.Tensor[[ROWS, COLS], pl.FP32]]):
        with pl.manual_scope():
            tids = pl.array.create(N, pl.TASK_ID)
            for b in pl.range(N):
                r = b * TILE_ROWS
                if b >= 2:
                    with pl.at(level=pl.Level.CORE_GROUP) as tid:
                        out = pl.store(pl.mul(pl.load(a, [r, 0], [TILE_ROWS, COLS]), 2.0), [r, 0], out)
                else:
                    with pl.at(level=pl.Level.CORE_GROUP) as tid:
                        out = pl.store(pl.add(pl.load(a, [r, 0], [TILE_ROWS, COLS]), 1.0), [r, 0], out)
                tids[b] = tid
            with pl.at(level=pl.Level.CORE_GROUP, deps=[tids]):
                out = pl.store(pl.load(a, [0, 0], [TILE_ROWS, COLS]), [0, 0], out)
        return out

    a = torch.randn(ROWS, COLS)
    out = torch.full((ROWS, COLS), float("nan"))
    compiled = k.compile(a, out)
    assert {(e.src, e.dst) for e in compiled.task_graph.edges if e.kind == "declared"} == {(i, N) for i in range(N)}
    launcher.run(compiled, a, out)
    want = torch.cat([a[:2 * TILE_ROWS] + 1.0, a[2 * TILE_ROWS:] * 2.0])
    want[:TILE_ROWS] = a[:TILE_ROWS]
    torch.testing.assert_close(out, want, rtol=1e-6, atol=0)
