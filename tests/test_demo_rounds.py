"""The demo's host timing: the two loops take turns, and each loop's figure is the median of its rounds."""

from __future__ import annotations

import asyncio
import io
import statistics

import pytest

from pypto_async import _demo


def _run(tmp_path, monkeypatch, rounds: int):
    order = []
    serial, pipeline = _demo._serial, _demo._pipeline

    async def counted_serial(w, kernel, weight, batches, outs, check, traces=None, progress=None):
        if traces is not None:  # the warm-up passes no trace list: it is not a round
            order.append("S")
        return await serial(w, kernel, weight, batches, outs, check, traces, progress)

    async def counted_pipeline(*args):
        order.append("P")
        return await pipeline(*args)

    monkeypatch.setattr(_demo, "_serial", counted_serial)
    monkeypatch.setattr(_demo, "_pipeline", counted_pipeline)
    r = asyncio.run(_demo._demo(16, 64, 4, 2, tmp_path, io.StringIO(), False, rounds=rounds))
    return r, order


def test_the_loops_take_turns_and_each_figure_is_its_median(tmp_path, monkeypatch):
    r, order = _run(tmp_path, monkeypatch, 4)
    assert order == ["S", "P", "P", "S", "S", "P", "P", "S"]  # neither loop always follows the other
    assert len(r.serial_runs) == len(r.pipelined_runs) == 4
    assert r.serial_s == statistics.median(r.serial_runs)
    assert r.pipelined_s == statistics.median(r.pipelined_runs)
    text = _demo.format_report(r)
    assert "each loop's median of 4 rounds, the two loops taking turns" in text
    assert f"speed-up {r.serial_s / r.pipelined_s:.2f}x" in text
    # The trace written is one pipelined round's: one launch per batch.
    assert sum(rec.kind_name == "launch" for rec in r.trace.records) == 4


def test_one_round_is_one_of_each_and_says_nothing_of_medians(tmp_path, monkeypatch):
    r, order = _run(tmp_path, monkeypatch, 1)
    assert order == ["S", "P"]
    assert "median" not in _demo.format_report(r)


def test_no_rounds_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rounds"):
        asyncio.run(_demo._demo(16, 64, 4, 2, tmp_path, io.StringIO(), False, rounds=0))
