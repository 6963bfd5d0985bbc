"""``RunConfig(enable_dep_gen=True)`` on the worker: ``deps.json`` for programs with and without a table.

A program with a compile-time table gets its file when the worker registers
it (the table is its graph).  One whose loop bound is read when it runs has
no table: its graph is what the driver resolved in a run
(``KernelHandle.resolved_graph()``), so each completed run writes the file,
in the same place and format, sync mode before the call returns, asyncio
once the completion is delivered (and every run's by the worker's close).
"""

from __future__ import annotations

import asyncio
import json
import warnings

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

F = pl.FP32
T, N = 8, 6


@pl.program
class RTwo:
    """Per slice, two tasks through `t`; the slice count is read from `cfg` when it runs (no table)."""

    @pl.function(type=pl.FunctionType.InCore)
    def dbl(self, x: pl.Tensor[[T, 32], F], t: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(x, [0, 0], [T, 32]) * 2.0, [0, 0], t)
        return t

    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, t: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(t, [0, 0], [T, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], x: pl.Tensor[[N * T, 32], F],
             t: pl.Out[pl.Tensor[[N * T, 32], F]], y: pl.Out[pl.Tensor[[N * T, 32], F]]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            self.dbl(pl.slice(x, [T, 32], [i * T, 0]), pl.slice(t, [T, 32], [i * T, 0]))
            self.inc(pl.slice(t, [T, 32], [i * T, 0]), pl.slice(y, [T, 32], [i * T, 0]))
        return y


@pl.program
class TTwo:
    """RTwo's tasks with the slice count fixed: a compile-time table."""

    @pl.function(type=pl.FunctionType.InCore)
    def dbl(self, x: pl.Tensor[[T, 32], F], t: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(x, [0, 0], [T, 32]) * 2.0, [0, 0], t)
        return t

    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, t: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(t, [0, 0], [T, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[N * T, 32], F], t: pl.Out[pl.Tensor[[N * T, 32], F]],
             y: pl.Out[pl.Tensor[[N * T, 32], F]]):
        for i in pl.range(N):
            self.dbl(pl.slice(x, [T, 32], [i * T, 0]), pl.slice(t, [T, 32], [i * T, 0]))
            self.inc(pl.slice(t, [T, 32], [i * T, 0]), pl.slice(y, [T, 32], [i * T, 0]))
        return y


def _rand(seed):
    return np.random.default_rng(seed).standard_normal((N * T, 32)).astype(np.float32)


def _poison():
    return np.full((N * T, 32), np.nan, np.float32)


def _compile(program, out_dir, table: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = ir.compile(program, output_dir=out_dir)
    assert c.kind == "program" and (c.task_graph is not None) == table
    return c


def _doc(c) -> dict:
    return json.loads((c.output_dir / "dfx_outputs" / "deps.json").read_text())


def _edges(doc) -> set:
    return {(e["src"], e["dst"], e["kind"], e["hazard"], e["tensor"]) for e in doc["edges"]}


def _graph_edges(g) -> set:
    return {(e.src, e.dst, e.kind, e.hazard, e.tensor) for e in g.edges}


def _check(doc, g, n: int) -> None:
    """The file is `g` (a run's resolved graph): n slices of dbl then inc, inc reading its dbl's `t`."""
    assert doc["program"] and [(t["id"], t["name"]) for t in doc["tasks"]] == [(t.id, t.name) for t in g.tasks]
    assert [t["name"] for t in doc["tasks"]] == ["dbl", "inc"] * n
    assert _edges(doc) == _graph_edges(g)
    assert _edges(doc) == {(2 * i, 2 * i + 1, "inferred", "RAW", "t") for i in range(n)}


@pytest.mark.slow
def test_a_table_less_programs_run_writes_its_resolved_graph_sync(tmp_path):
    c = _compile(RTwo, tmp_path / "rtwo", table=False)
    path = c.output_dir / "dfx_outputs" / "deps.json"
    with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
        h = w.register(c)
        assert not path.exists()  # no run, no graph yet
        x, t, y = _rand(1), _poison(), _poison()
        h(np.array([N], np.int32), x, t, y)
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)  # every slice ran (no NaN left)
        _check(_doc(c), h.resolved_graph(), N)  # on disk once the call returned
        path.unlink()  # a run of the same graph writes a missing file again
        h(np.array([N], np.int32), x, t, y)
        _check(_doc(c), h.resolved_graph(), N)
        # A second run of another length: the file is that run's graph.
        x, t, y = _rand(2), _poison(), _poison()
        h(np.array([3], np.int32), x, t, y)
        np.testing.assert_allclose(y[:3 * T], x[:3 * T] * 2 + 1, rtol=1e-6)
        _check(_doc(c), h.resolved_graph(), 3)
        # The return-style call and submit() write it too.
        x = _rand(3)
        _, y = h(np.array([5], np.int32), x)
        np.testing.assert_allclose(y[:5 * T], x[:5 * T] * 2 + 1, rtol=1e-6)
        _check(_doc(c), h.resolved_graph(), 5)
        sub = h.submit(np.array([4], np.int32), x, _poison(), _poison())
        sub.sync()
        g = h.resolved_graph()
    _check(_doc(c), g, 4)  # by the close at the latest
    with ChipWorker() as w:  # off by default: no file
        c2 = _compile(RTwo, tmp_path / "off", table=False)
        w.register(c2)(np.array([2], np.int32), _rand(4), _poison(), _poison())
    assert not (c2.output_dir / "dfx_outputs" / "deps.json").exists()


def test_a_failed_run_writes_no_graph(tmp_path):
    c = _compile(RTwo, tmp_path / "rtwo", table=False)
    with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
        h = w.register(c)
        with pytest.raises(Exception, match="outside"):
            h(np.array([N + 1], np.int32), _rand(5), _poison(), _poison())  # slices past x: a task fails
    assert not (c.output_dir / "dfx_outputs" / "deps.json").exists()


def test_a_table_less_programs_run_writes_its_resolved_graph_asyncio(tmp_path):
    c = _compile(RTwo, tmp_path / "rtwo", table=False)
    path = c.output_dir / "dfx_outputs" / "deps.json"

    async def main():
        async with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
            assert w.mode == "asyncio"
            h = w.register(c)
            x, t, y = _rand(6), _poison(), _poison()
            await h(np.array([N], np.int32), x, t, y)
            np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
            g = h.resolved_graph()
            w._deps_writer.flush()  # written off the loop: wait for it here only to read it in the loop
            _check(_doc(c), g, N)
            x, t, y = _rand(7), _poison(), _poison()
            await h(np.array([2], np.int32), x, t, y)
            np.testing.assert_allclose(y[:2 * T], x[:2 * T] * 2 + 1, rtol=1e-6)
            return h.resolved_graph()

    g = asyncio.run(main())
    assert path.exists()
    _check(_doc(c), g, 2)  # the last run's, on disk once the worker closed


@pytest.mark.slow
def test_a_table_programs_file_is_written_at_registration_unchanged(tmp_path):
    c = _compile(TTwo, tmp_path / "ttwo", table=True)
    with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
        h = w.register(c)
        doc = _doc(c)  # at registration, before any run
        x, t, y = _rand(8), _poison(), _poison()
        h(x, t, y)
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
        assert _doc(c) == doc  # a run does not rewrite it
    assert [t["name"] for t in doc["tasks"]] == ["dbl", "inc"] * N
    assert _edges(doc) == _graph_edges(c.task_graph)
    assert {(s, d) for s, d, *_ in _edges(doc)} == {(2 * i, 2 * i + 1) for i in range(N)}

    async def main():
        async with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
            (c.output_dir / "dfx_outputs" / "deps.json").unlink()
            h = w.register(c)
            x, t, y = _rand(9), _poison(), _poison()
            await h(x, t, y)
            np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)

    asyncio.run(main())
    assert _doc(c) == doc
