"""``pypto-async trace`` of a program: tasks named and coloured by function, a legend, a summary line."""

from __future__ import annotations

import json

import pytest

from pypto_async import _driver as drv
from pypto_async._plot import TASK_PALETTE, _figure, render_trace, task_colors, task_line
from pypto_async.runtime._chrome import layout
from pypto_async.runtime._trace import Trace

from runtime.test_trace import rec


def _program_trace(names=("top", "left", "right", "bottom")) -> Trace:
    """A diamond program on two cores, no copies: top; left and right side by side; bottom."""
    spans = {"top": (0, 10, 30), "left": (0, 30, 60), "right": (1, 30, 50), "bottom": (0, 60, 90)}
    records = [rec(drv.PTO_CMD_PROGRAM, 1, 0, 100, name="Diamond_program", token=2, seq=1)]
    for i, n in enumerate(names):
        core, a, b = spans.get(n, (i % 2, 10 + i, 11 + i))
        records.append(rec(drv.PTO_CMD_TASK, 1, a, b, engine=core, name=n, token=2, block=i))
    return Trace(tuple(records), device={"platform": "sim", "cores": 2, "copy_engines": 0})


def _labels(fig) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


@pytest.mark.slow
def test_tasks_are_coloured_by_function_with_a_legend_and_the_summary_line():
    trace = _program_trace()
    fig = _figure(trace, "diamond", 80, 10.0)
    assert _labels(fig) == ["program launch", "task bottom", "task left", "task right", "task top"]
    colors = task_colors(["top", "left", "right", "bottom"])
    handles = {t.get_text(): h for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
    from matplotlib.colors import to_rgba

    for name, c in colors.items():
        assert tuple(handles[f"task {name}"].get_facecolor()) == to_rgba(c)
    ax = fig.axes[0]
    bar_colors = {tuple(pc.get_facecolor()[0]) for pc in ax.collections}
    assert {to_rgba(c) for c in colors.values()} <= bar_colors  # each function's bars in its colour
    # Every bar here is at least 20 of the 100 µs: each carries its task's name.
    assert sorted(t.get_text() for t in ax.texts) == ["bottom", "left", "right", "top"]
    assert ax.get_title(loc="left") == ("diamond\n4 tasks of 4 functions · wall 100.0 µs · core busy 100.0 µs · "
                                        "concurrency 1.00x")


@pytest.mark.slow
def test_the_json_of_a_program_trace_draws_the_same_legend_and_title(tmp_path):
    trace = _program_trace()
    doc = json.loads(json.dumps(trace.to_chrome()))
    a, b = _figure(trace, "t", 80, 10.0), _figure(doc, "t", 80, 10.0)
    assert _labels(a) == _labels(b)
    assert a.axes[0].get_title(loc="left") == b.axes[0].get_title(loc="left")
    src = tmp_path / "p.json"
    src.write_text(json.dumps(doc))
    png = render_trace(src, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_task_colours_follow_sorted_names_and_many_functions_are_counted():
    assert task_colors(["b", "a", "b"]) == {"a": TASK_PALETTE[0], "b": TASK_PALETTE[1]}
    names = [f"k{i:02d}" for i in range(20)]
    fig = _figure(_program_trace(names), None, 60, 10.0)
    labels = _labels(fig)
    assert labels[1:17] == [f"task k{i:02d}" for i in range(16)]
    assert labels[17:] == ["4 more task functions"]


def test_a_trace_without_tasks_has_no_task_line():
    trace = Trace((rec(drv.PTO_CMD_LAUNCH, 1, 0, 10, name="k"), rec(drv.PTO_CMD_BLOCK, 1, 0, 10, engine=0, name="k")),
                  device={"platform": "sim", "cores": 1, "copy_engines": 0})
    assert task_line(trace.summary(), []) is None
    fig = _figure(trace, "k", 60, 10.0)
    assert fig.axes[0].get_title(loc="left") == "k"


def test_one_task_of_one_function_is_singular():
    trace = _program_trace(("top",))
    tasks = [s for s in layout(trace).slices if s.record.kind_name == "task"]
    assert task_line(trace.summary(), tasks).startswith("1 task of 1 function · ")
