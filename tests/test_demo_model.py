"""The demo's modeled speed-up: at its pipeline's bound, whatever the host's speed (issue 28)."""

from __future__ import annotations

import asyncio
import io

import pytest

from pypto_async import _demo


def _run(tmp_path, graph: bool, depth: int):
    return asyncio.run(_demo._demo(64, 256, 32, depth, tmp_path, io.StringIO(), False, graph=graph))


@pytest.mark.slow
def test_the_modeled_speed_up_is_within_ten_percent_of_its_bound(tmp_path):
    """The demo as ``pypto-async demo`` runs it: three streams, three batches in flight."""
    r = _run(tmp_path, False, 3)
    m = r.model
    speedup = m["serial_ns"] / m["pipelined_ns"]
    # The bound: serial time over its busiest engine's (two copy engines: H2D and D2H overlap).
    busiest = max(m["compute_ns"], m["h2d_ns"], m["d2h_ns"])
    assert m["bound"] == pytest.approx(m["serial_ns"] / busiest)
    assert m["bound"] > 1.5  # a pipeline with something to gain
    assert 0.9 * m["bound"] <= speedup <= m["bound"] * 1.0001, m


@pytest.mark.slow
def test_the_modeled_times_do_not_follow_the_host(tmp_path):
    """Two runs on a host whose speed differs from run to run model the same device time."""
    a, b = _run(tmp_path / "a", False, 3).model, _run(tmp_path / "b", False, 3).model
    assert a["serial_ns"] == b["serial_ns"]
    assert a["h2d_ns"] == b["h2d_ns"] and a["d2h_ns"] == b["d2h_ns"]


@pytest.mark.slow  # three demo runs of the graph loop: a second or more
def test_the_graph_loop_is_within_ten_percent_of_its_bound_in_every_run(tmp_path):
    """--graph: replays of independent graphs, whose streams compete for the copy engines; the model
    places the copies in modeled order (ready time, then stream), not in the order the host ran them,
    so every run comes out the same, at the pipeline's bound."""
    runs = [_run(tmp_path / str(i), True, 4).model for i in range(3)]
    for m in runs:
        speedup = m["serial_ns"] / m["pipelined_ns"]
        assert m["bound"] > 1.5
        assert 0.9 * m["bound"] <= speedup <= m["bound"] * 1.0001, m
    assert len({m["pipelined_ns"] for m in runs}) == 1, runs


@pytest.mark.slow
def test_the_report_prints_the_modeled_and_the_wall_speed_up_side_by_side(tmp_path):
    r = _run(tmp_path, False, 3)
    m = r.model
    speedup = m["serial_ns"] / m["pipelined_ns"]
    text = _demo.format_report(r)
    line = next(x for x in text.splitlines() if "speed-up: modeled" in x)
    assert f"modeled {speedup:.2f}x, {speedup / m['bound']:.0%} of its bound {m['bound']:.2f}x" in line
    assert f"host wall {r.serial_s / r.pipelined_s:.2f}x" in line
