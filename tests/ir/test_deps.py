"""The edge rule (ir/_deps.py): a pure function over tasks and their accesses."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from reliability.task_rule_model import overlaps

from pypto_async.ir._deps import Access, Edge, Task, edges, task_graph


def R(t, box=None):
    return Access(t, True, False, box)


def W(t, box=None):
    return Access(t, False, True, box)


def RW(t, box=None):
    return Access(t, True, True, box)


def tasks(*accesses, deps=None, manual=()):
    deps = deps or {}
    return [Task(i, f"t{i}", tuple(a), deps.get(i, ()), i in manual) for i, a in enumerate(accesses)]


def pairs(es):
    return {(e.src, e.dst, e.hazard) for e in es}


def test_read_after_write_write_after_read_write_after_write():
    es = edges(tasks([W("x")], [R("x")], [W("x")], [R("x")]))
    assert pairs(es) == {(0, 1, "RAW"), (0, 2, "WAW"), (1, 2, "WAR"), (2, 3, "RAW")}


def test_read_read_never_orders():
    assert edges(tasks([R("x")], [R("x")], [R("x"), W("y")])) == []


def test_inout_is_read_and_write():
    es = edges(tasks([RW("x")], [RW("x")], [R("x")]))
    assert pairs(es) == {(0, 1, "RAW"), (1, 2, "RAW")}  # the reader waits for the last writer only


def test_a_write_that_covers_only_part_of_an_earlier_access_keeps_it():
    half = ((0, 4),)
    es = edges(tasks([W("x")], [W("x", half)], [R("x")]))
    assert pairs(es) == {(0, 1, "WAW"), (0, 2, "RAW"), (1, 2, "RAW")}
    # a manual write is ordered after nothing, so it cannot stand in for the writes before it
    es = edges(tasks([W("x")], [W("x")], [R("x")], manual=(1,)))
    assert pairs(es) == {(0, 2, "RAW"), (1, 2, "RAW")}


def test_disjoint_windows_do_not_order_overlapping_ones_do():
    top, bottom, middle = ((0, 64), (0, 128)), ((64, 128), (0, 128)), ((32, 96), (0, 128))
    es = edges(tasks([W("x", top)], [W("x", bottom)], [R("x", middle)], [R("x")]))
    assert pairs(es) == {(0, 2, "RAW"), (1, 2, "RAW"), (0, 3, "RAW"), (1, 3, "RAW")}
    assert overlaps(None, top) and not overlaps(top, bottom) and overlaps(top, middle)


def test_declared_deps_add_to_inferred_and_manual_tasks_get_only_those():
    es = edges(tasks([W("x")], [W("y")], [R("x"), R("y")], deps={2: (1,)}))
    assert {(e.src, e.dst, e.kind) for e in es} == {(0, 2, "inferred"), (1, 2, "declared")}
    es = edges(tasks([W("x")], [R("x")], [R("x")], deps={2: (0,)}, manual=(1, 2)))
    assert es == [Edge(0, 2, "declared")]


def test_no_fan_in_cap():
    n = 300
    ts = tasks(*([W("x", ((i, i + 1),))] for i in range(n)), [R("x")])
    assert {e.src for e in edges(ts) if e.dst == n} == set(range(n))


def test_bad_deps_are_refused():
    with pytest.raises(ValueError, match="not an earlier task"):
        edges(tasks([W("x")], deps={0: (0,)}))
    with pytest.raises(ValueError, match="positions"):
        edges([Task(1, "late", ())])


@pl.jit
def staged(x: pl.Tensor, s: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="one") as a:
        pl.store(pl.load(x, [0, 0], [8, 8]) + 1.0, [0, 0], s)
    with pl.manual_scope():
        with pl.incore(name_hint="two", deps=[a]):
            pl.store(pl.load(s, [0, 0], [8, 8]) * 2.0, [0, 0], out)


def test_regions_of_a_jit_kernel_are_tasks_and_as_python_keeps_names_and_deps():
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    s, out = np.full((8, 8), np.nan, np.float32), np.full((8, 8), np.nan, np.float32)
    program = staged.trace(x, s, out)
    g = task_graph(program)
    assert [t.name for t in g.tasks] == ["one", "two"] and g.edges == (Edge(0, 1, "declared"),)
    assert g.tasks[1].manual and g.tasks[0].accesses == (R("x", ((0, 8), (0, 8))), W("s", ((0, 8), (0, 8))))
    source = program.as_python(form="jit")
    assert "name_hint='two', deps=[_task0]" in source and "pl.manual_scope()" in source
    namespace: dict = {}
    exec(source, namespace)
    assert namespace["staged"].trace(x, s, out) == program


def test_nested_regions_are_refused():
    @pl.jit
    def nested(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.incore():
            with pl.incore():
                pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], out)

    with pytest.raises(Exception, match="cannot be nested"):
        nested.trace(np.zeros((8, 8), np.float32), np.zeros((8, 8), np.float32))
