"""Render a swimlane trace (Chrome trace JSON) as a PNG timeline.

The picture has one lane per track of the trace: streams first, then compute
cores, then copy engines, in the trace's own ``thread_sort_index`` order.
Slices are coloured by kind (copies by direction, kernels and their blocks,
scheduler work in grey, failed commands outlined in red), event waits are
joined to their records by thin arrows, and the time axis is in µs, ms or s,
whichever reads best.  Overlap is visible as bars stacked in the same column.

matplotlib is imported only when you render, and only its object-oriented API
with the Agg canvas is used: no pyplot, no global backend switch, so rendering
is safe from any thread and inside programs that use matplotlib themselves.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping

__all__ = ["load_trace", "render_trace", "lane_kind", "KIND_COLORS"]

#: Fill colour per slice category (the ``cat`` of an ``"X"`` event).
KIND_COLORS: Mapping[str, str] = {
    "h2d": "#3b78c2",
    "d2h": "#e8862a",
    "d2d": "#8e63b8",
    "memset": "#9c7a5b",
    "launch": "#3a9b4c",
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


def load_trace(path: str | os.PathLike) -> dict:
    """Read a Chrome trace JSON file and check that it has trace events.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file is not JSON, or not a trace (an object with a
        ``traceEvents`` list, or a bare list of events).
    """
    path = pathlib.Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no 'traceEvents' list)")
    return doc


def lane_kind(name: str) -> str:
    """Return ``"stream"``, ``"core"``, ``"copy"`` or ``"other"`` for a track name."""
    if name.startswith("stream"):
        return "stream"
    if name.startswith("core"):
        return "core"
    if name.startswith("copy engine"):
        return "copy"
    return "other"


def _lanes(events: list[dict]) -> list[tuple[tuple[int, int], str]]:
    names: dict[tuple[int, int], str] = {}
    order: dict[tuple[int, int], int] = {}
    used: set[tuple[int, int]] = set()
    for e in events:
        key = (e.get("pid", 0), e.get("tid", 0))
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "thread_name":
            names[key] = str(e.get("args", {}).get("name", key[1]))
        elif ph == "M" and e.get("name") == "thread_sort_index":
            order[key] = int(e.get("args", {}).get("sort_index", 0))
        elif ph == "X":
            used.add(key)
    keys = set(names) | used
    group = {"stream": 0, "core": 1, "copy": 2, "other": 3}
    return sorted(
        ((k, names.get(k, f"track {k[1]}")) for k in keys),
        key=lambda kn: (group[lane_kind(kn[1])], order.get(kn[0], kn[0][1]), kn[0]),
    )


def _time_unit(span_us: float) -> tuple[str, float]:
    if span_us < 5_000:
        return "µs", 1.0
    if span_us < 5_000_000:
        return "ms", 1e-3
    return "s", 1e-6


def _overlap_line(events: list[dict], lane_names: Mapping[tuple[int, int], str]) -> str | None:
    compute: list[tuple[float, float]] = []
    copies: list[tuple[float, float]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        kind = lane_kind(lane_names.get((e.get("pid", 0), e.get("tid", 0)), ""))
        span = (e["ts"], e["ts"] + e["dur"])
        if kind == "core":
            compute.append(span)
        elif kind == "copy":
            copies.append(span)
    if not compute or not copies:
        return None
    c, cu = _union(compute)
    k, ku = _union(copies)
    both, _ = _union(cu + ku)
    hidden = (c + k - both) / min(c, k) if min(c, k) > 0 else 0.0
    return (f"compute busy {c:,.0f} µs · copy busy {k:,.0f} µs · "
            f"overlapped {c + k - both:,.0f} µs ({hidden:.0%} of the shorter)")


def _union(spans: list[tuple[float, float]]) -> tuple[float, list[tuple[float, float]]]:
    merged: list[tuple[float, float]] = []
    for s, t in sorted(spans):
        if t <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], t))
        else:
            merged.append((s, t))
    return sum(t - s for s, t in merged), merged


def render_trace(
    trace: Mapping | str | os.PathLike,
    out: str | os.PathLike,
    *,
    title: str | None = None,
    dpi: int = 120,
    width: float = 13.0,
) -> pathlib.Path:
    """Draw a Chrome trace as a swimlane PNG and return the PNG's path.

    Parameters
    ----------
    trace : dict or path
        A trace as :meth:`~pypto_async.runtime.Trace.to_chrome` returns it, or
        the path of a trace JSON file.
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
    events = list(trace.get("traceEvents", []))
    slices = [e for e in events if e.get("ph") == "X" and "ts" in e]
    if not slices:
        raise ValueError("the trace has no slices (\"X\" events) to draw")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lanes = _lanes(events)
    row = {key: i for i, (key, _) in enumerate(lanes)}
    lane_names = dict(lanes)
    t0 = min(e["ts"] for e in slices)
    t1 = max(e["ts"] + e.get("dur", 0) for e in slices)
    unit, scale = _time_unit(max(t1 - t0, 1e-3))
    span = max(t1 - t0, 1e-3) * scale
    tick = span / 2000.0  # zero-length slices are drawn this wide

    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    failed: list[tuple[int, float, float]] = []
    for e in slices:
        key = (e.get("pid", 0), e.get("tid", 0))
        r = row[key]
        cat = str(e.get("cat", "")).split(",")[0]
        x = (e["ts"] - t0) * scale
        w = max(e.get("dur", 0) * scale, tick)
        bars.setdefault((r, cat), []).append((x, w))
        status = (e.get("args") or {}).get("status", "ok")
        if status not in ("ok", 0):
            failed.append((r, x, w))

    height = 1.6 + 0.42 * len(lanes)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    heights = {"wait": 0.22, "record": 0.5, "free": 0.3, "notify": 0.3}
    for (r, cat), spans in bars.items():
        h = heights.get(cat, 0.72)
        ax.broken_barh(spans, (r - h / 2, h), facecolors=KIND_COLORS.get(cat, _OTHER_COLOR),
                       edgecolor="none", zorder=2)
    for r, x, w in failed:
        ax.broken_barh([(x, w)], (r - 0.38, 0.76), facecolors="none", edgecolor="#c62828",
                       linewidth=1.2, zorder=3)

    # Event arrows: from each flow start to its finish.
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    ends = [e for e in events if e.get("ph") == "f" and e.get("id") in starts]
    for f in ends[:_MAX_ARROWS]:
        s = starts[f["id"]]
        sk, fk = (s.get("pid", 0), s.get("tid", 0)), (f.get("pid", 0), f.get("tid", 0))
        if sk not in row or fk not in row:
            continue
        ax.annotate("", xy=((f["ts"] - t0) * scale, row[fk]), xytext=((s["ts"] - t0) * scale, row[sk]),
                    arrowprops={"arrowstyle": "->", "color": "#7a7a7a", "lw": 0.5, "alpha": 0.55,
                                "shrinkA": 0, "shrinkB": 2},
                    zorder=4)

    ax.set_yticks(range(len(lanes)), [name for _, name in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(-span * 0.01, span * 1.01)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#e4e4e4", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    # Thin rules between the stream, core and copy-engine groups.
    kinds = [lane_kind(name) for _, name in lanes]
    for i in range(1, len(kinds)):
        if kinds[i] != kinds[i - 1]:
            ax.axhline(i - 0.5, color="#9e9e9e", linewidth=0.8, zorder=1)

    present = [c for c in KIND_COLORS if any(cat == c for _, cat in bars)]
    handles = [Patch(facecolor=KIND_COLORS[c], label=_LEGEND_LABELS[c]) for c in present]
    if failed:
        handles.append(Patch(facecolor="none", edgecolor="#c62828", label="failed"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7),
                   frameon=False, fontsize="small")
    heading = title or "swimlane"
    line = _overlap_line(events, lane_names)
    ax.set_title(heading if line is None else f"{heading}\n{line}", fontsize="medium", loc="left")

    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
