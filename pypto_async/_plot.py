"""Render a swimlane trace as a PNG timeline.

The picture is the trace's Chrome/Perfetto layout (``runtime/_chrome.py``)
drawn again: a trace JSON is read back into the trace model first
(``Trace.from_chrome``), so the lanes, slices and arrows are the ones Perfetto shows
and the overlap in the title is the trace's own :class:`TraceSummary`.

The picture has one lane per track of the trace: streams first, then compute
cores, then copy engines, in the trace's own ``thread_sort_index`` order.
Slices are coloured by kind (copies by direction, kernels and their blocks,
scheduler work in grey, failed commands outlined in red) and a program's
tasks by their function, each named in the legend and on its bars where they
are wide enough (:func:`task_colors`); event waits are
joined to their records by thin arrows, and the time axis is in µs, ms or s,
whichever reads best.  Overlap is visible as bars stacked in the same column.
Under the title: the trace's overlap of compute and copies (when it has
both), and, for a trace with a program's tasks, their summary
(:func:`task_line`).

matplotlib is imported only when you render, and only its object-oriented API
with the Agg canvas is used: no pyplot, no global backend switch, so rendering
is safe from any thread and inside programs that use matplotlib themselves.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping

from .runtime._chrome import Layout, Track, layout
from .runtime._trace import Trace, TraceSummary

__all__ = ["load_trace", "render_trace", "KIND_COLORS", "TASK_PALETTE", "task_colors", "task_line"]

#: Fill colour per slice kind (the ``cat`` of an ``"X"`` event).
KIND_COLORS: Mapping[str, str] = {
    "h2d": "#3b78c2",
    "d2h": "#e8862a",
    "d2d": "#8e63b8",
    "memset": "#9c7a5b",
    "launch": "#3a9b4c",
    "program": "#2e7d5b",
    "block": "#59b86a",
    "wait": "#d5d8dc",
    "record": "#5f6368",
    "free": "#c0c4c8",
    "notify": "#c0c4c8",
    "delay": "#e6b84f",
    "latch": "#d9534f",
}
_LEGEND_LABELS = {
    "h2d": "copy host→device",
    "d2h": "copy device→host",
    "d2d": "copy device→device",
    "memset": "memset",
    "launch": "kernel launch",
    "program": "program launch",
    "block": "kernel block",
    "wait": "waiting on an event",
    "record": "event record",
    "free": "free",
    "notify": "notify",
    "delay": "delay",
    "latch": "latch (held)",
}
_OTHER_COLOR = "#b0b0b0"
_MAX_ARROWS = 400
#: Colours of a program's task functions, in the order of their names (then again, lighter).
#: (Apart from the kinds' colours: the copies' blues and oranges, the kernels' greens.)
TASK_PALETTE = ("#17a2a2", "#c2185b", "#c9a227", "#3949ab", "#8d6e63", "#7cb342", "#ef6f6c", "#00838f",
                "#ad1457", "#9e9d24", "#5e35b1", "#455a64")
_MAX_TASK_LEGEND = 16  # functions named in the legend; the rest are "other tasks"
_LABEL_MIN = 0.045  # a bar this share of the span wide or wider carries its task's name


def task_colors(names) -> dict[str, str]:
    """The colour of each task function (a task slice's name), by sorted name: stable across runs.

    Past the palette the colours repeat; the legend names the first
    ``_MAX_TASK_LEGEND`` functions and counts the rest.
    """
    return {n: TASK_PALETTE[i % len(TASK_PALETTE)] for i, n in enumerate(sorted(set(names)))}


def _task_name(sl) -> str:
    return sl.record.name or "task"


def task_line(summary: TraceSummary, task_slices) -> str | None:
    """The title's line for a trace of tasks: their count and functions, wall and core-busy time, concurrency."""
    if not task_slices:
        return None
    names = {_task_name(sl) for sl in task_slices}
    tasks = len({(sl.record.token, sl.record.block) for sl in task_slices})
    busy = sum(sl.dur for sl in task_slices)
    return (f"{tasks} {'task' if tasks == 1 else 'tasks'} of {len(names)} "
            f"{'function' if len(names) == 1 else 'functions'} · "
            f"wall {summary.wall_ns / 1000:,.1f} µs · core busy {busy:,.1f} µs · "
            f"concurrency {summary.concurrency:.2f}x")


def load_trace(path: str | os.PathLike) -> dict:
    """Read a Chrome trace JSON file and check that it has trace events.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file is not JSON (or nested too deeply for the parser), or
        not a trace (an object with a ``traceEvents`` list, or a bare list
        of events).
    """
    path = pathlib.Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a Chrome trace (JSON nested too deeply to read)") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no 'traceEvents' list)")
    return doc


def _lanes(lay: Layout) -> list[Track]:
    # Streams first, then cores, then copy engines, then host threads, each in the trace's sort order.
    group = {"stream": 0, "core": 1, "copy": 2, "host": 3}  # host: the host threads, in wall time
    return sorted(lay.tracks, key=lambda t: (group[t.kind], t.sort_index, t.tid))


def _time_unit(span_us: float) -> tuple[str, float]:
    if span_us < 5_000:
        return "µs", 1.0
    if span_us < 5_000_000:
        return "ms", 1e-3
    return "s", 1e-6


def _overlap_line(summary: TraceSummary) -> str | None:
    if not (summary.compute_ns and summary.copy_ns):
        return None
    return (f"compute busy {summary.compute_ns / 1000:,.0f} µs · copy busy {summary.copy_ns / 1000:,.0f} µs · "
            f"overlapped {summary.overlapped_ns / 1000:,.0f} µs ({summary.overlap:.0%} of the shorter)")


def render_trace(
    trace: Trace | Mapping | list | str | os.PathLike,
    out: str | os.PathLike,
    *,
    title: str | None = None,
    dpi: int = 120,
    width: float = 13.0,
) -> pathlib.Path:
    """Draw a trace as a swimlane PNG and return the PNG's path.

    Parameters
    ----------
    trace : Trace, dict or path
        A trace, its Chrome form as ``Trace.to_chrome`` returns it (or that
        form's event list), or the path of a trace JSON file.
    out : path
        Where to write the PNG; parent directories are created.
    title : str, optional
        The figure's title (default: the file name, or "swimlane").
    dpi, width : optional
        Resolution and width in inches; the height follows the lane count.

    Raises
    ------
    ValueError
        If ``trace`` has no slices to draw, or is not a trace.
    """
    if isinstance(trace, (str, os.PathLike)):
        if title is None:
            title = pathlib.Path(trace).name
        trace = load_trace(trace)
    fig = _figure(trace, title, dpi, width)
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def _figure(trace, title: str | None, dpi: int, width: float):
    """The swimlane figure of a trace (or of its Chrome form), not yet saved."""
    if not isinstance(trace, Trace):
        trace = Trace.from_chrome(trace)
    lay = layout(trace)
    slices = lay.slices
    if not slices:
        raise ValueError("the trace has no slices (\"X\" events) to draw")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lanes = _lanes(lay)
    row = {t.tid: i for i, t in enumerate(lanes)}
    t0 = min(sl.ts for sl in slices)
    t1 = max(sl.ts + sl.dur for sl in slices)
    unit, scale = _time_unit(max(t1 - t0, 1e-3))
    span = max(t1 - t0, 1e-3) * scale
    tick = span / 2000.0  # zero-length slices are drawn this wide

    task_slices = [sl for sl in slices if sl.record.kind_name == "task"]
    colors = task_colors(_task_name(sl) for sl in task_slices)
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    failed: list[tuple[int, float, float]] = []
    labels: list[tuple[int, float, float, str]] = []
    for sl in slices:
        r = row[sl.tid]
        x = (sl.ts - t0) * scale
        w = max(sl.dur * scale, tick)
        cat = sl.record.kind_name
        if cat == "task":  # coloured by its function
            cat = f"task:{_task_name(sl)}"
            if w >= _LABEL_MIN * span:
                labels.append((r, x, w, _task_name(sl)))
        bars.setdefault((r, cat), []).append((x, w))
        if sl.record.status != 0:
            failed.append((r, x, w))

    height = 1.6 + 0.42 * len(lanes)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    heights = {"wait": 0.22, "record": 0.5, "free": 0.3, "notify": 0.3}
    for (r, cat), spans in bars.items():
        h = heights.get(cat, 0.72)
        color = colors[cat[5:]] if cat.startswith("task:") else KIND_COLORS.get(cat, _OTHER_COLOR)
        ax.broken_barh(spans, (r - h / 2, h), facecolors=color, edgecolor="none", zorder=2)
    for r, x, w, name in labels:
        ax.text(x + w / 2, r, name, ha="center", va="center", fontsize="x-small", color="white",
                clip_on=True, zorder=5)
    for r, x, w in failed:
        ax.broken_barh([(x, w)], (r - 0.38, 0.76), facecolors="none", edgecolor="#c62828",
                       linewidth=1.2, zorder=3)

    # Event arrows: from each event record to the waits on it (dashed: inferred by the runtime).
    for fl in lay.flows[:_MAX_ARROWS]:
        ax.annotate("", xy=((fl.dst_ts - t0) * scale, row[fl.dst_tid]),
                    xytext=((fl.src_ts - t0) * scale, row[fl.src_tid]),
                    arrowprops={"arrowstyle": "->", "color": "#7a7a7a", "lw": 0.5, "alpha": 0.55,
                                "shrinkA": 0, "shrinkB": 2, "linestyle": "--" if fl.inferred else "-"},
                    zorder=4)

    ax.set_yticks(range(len(lanes)), [t.name for t in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(-span * 0.01, span * 1.01)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#e4e4e4", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    # Thin rules between the stream, core and copy-engine groups.
    kinds = [t.kind for t in lanes]
    for i in range(1, len(kinds)):
        if kinds[i] != kinds[i - 1]:
            ax.axhline(i - 0.5, color="#9e9e9e", linewidth=0.8, zorder=1)

    present = [c for c in KIND_COLORS if any(cat == c for _, cat in bars)]
    handles = [Patch(facecolor=KIND_COLORS[c], label=_LEGEND_LABELS[c]) for c in present]
    named = sorted(colors)
    handles += [Patch(facecolor=colors[n], label=f"task {n}") for n in named[:_MAX_TASK_LEGEND]]
    if len(named) > _MAX_TASK_LEGEND:
        handles.append(Patch(facecolor=_OTHER_COLOR, label=f"{len(named) - _MAX_TASK_LEGEND} more task functions"))
    if failed:
        handles.append(Patch(facecolor="none", edgecolor="#c62828", label="failed"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7),
                   frameon=False, fontsize="small")
    heading = title or "swimlane"
    summary = trace.summary()
    lines = [x for x in (_overlap_line(summary), task_line(summary, task_slices)) if x is not None]
    ax.set_title("\n".join([heading, *lines]), fontsize="medium", loc="left")
    return fig
