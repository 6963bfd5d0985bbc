"""Swimlane traces: the driver's per-command records, and what they measure.

When tracing is on, the driver writes one ``pto_trace_record`` per command it
finishes (and one per block of a launch): stream, engine, kind, name, bytes and
the submit/start/end times of ``pto_now_ns()``.  This module holds the model
of a recorded trace, :class:`Trace` (the records and the device's shape), and
its analysis, :class:`TraceSummary` (busy, copy, compute and overlapped time).

Where the other parts of tracing live:

* ``_trace_record.py``: one record (:class:`TraceRecord`) and the kind names,
  below both this module and ``_chrome.py``;
* ``_chrome.py``: the trace as Chrome/Perfetto JSON, both ways
  (:meth:`Trace.to_chrome`, :meth:`Trace.from_chrome`), on a trace's fields
  without importing this module;
* ``_recorder.py``: moving the driver's records into open trace windows;
* ``_tracing.py``: a worker's trace windows and the files it writes.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._chrome import read_chrome, to_chrome, write_json
from ._trace_record import TraceRecord, kind_code, kind_name

__all__ = ["TraceRecord", "Trace", "TraceSummary", "kind_name", "kind_code"]

def _union_ns(intervals: list[tuple[int, int]]) -> tuple[int, list[tuple[int, int]]]:
    """Return the total length of the union of [start, end) intervals, and the union."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return sum(e - s for s, e in merged), merged


@dataclass(frozen=True)
class TraceSummary:
    """What ran when, reduced to a few numbers.

    Attributes
    ----------
    wall_ns : int
        From the first command's start to the last command's end.
    compute_ns : int
        Time at least one core was running a block.
    copy_ns : int
        Time at least one copy engine was moving bytes.
    overlapped_ns : int
        Time a core and a copy engine were both busy.
    engine_busy_ns : dict
        Busy time per engine id.
    """

    wall_ns: int
    compute_ns: int
    copy_ns: int
    overlapped_ns: int
    engine_busy_ns: Mapping[int, int] = field(default_factory=dict)

    @property
    def overlap(self) -> float:
        """Fraction of the shorter of compute and copy time hidden under the other.

        1.0 means the shorter activity ran entirely alongside the other one;
        0.0 means they never ran at the same time (or one is absent).
        """
        shorter = min(self.compute_ns, self.copy_ns)
        return self.overlapped_ns / shorter if shorter else 0.0

    @property
    def concurrency(self) -> float:
        """Sum of the engines' busy time over the wall time (1.0: one engine at a time)."""
        return sum(self.engine_busy_ns.values()) / self.wall_ns if self.wall_ns else 0.0


@dataclass(frozen=True)
class Trace:
    """A recorded swimlane trace: the driver's records and the device's shape.

    Get one from :meth:`ChipWorker.trace` (a window) or from a worker opened
    with ``RunConfig(enable_chip_swimlane=True)`` (its whole life), or read
    one back from its JSON with :meth:`from_chrome`.  :meth:`to_chrome` gives
    the Chrome trace event format, :meth:`save` writes it, :meth:`summary`
    measures overlap.

    Attributes
    ----------
    records : tuple of TraceRecord
        Oldest first, as the driver finished them.
    dropped : int
        Records the driver dropped because its buffer was full.
    device : dict
        ``platform``, ``cores``, ``copy_engines`` (see ``device_shape``).
    stream_names : dict
        Track names by stream id, for streams you want named (``"default"``).
    inferred_waits : frozenset of int
        Tokens of the waits the runtime inserted itself to order DeviceTensors
        across streams (``auto_deps``), eager ones and those of graph replays
        that their graph capture inferred; their arrows are marked inferred.
    """

    records: tuple[TraceRecord, ...]
    dropped: int = 0
    device: Mapping[str, object] = field(default_factory=dict)
    stream_names: Mapping[int, str] = field(default_factory=dict)
    inferred_waits: frozenset = frozenset()

    def __len__(self) -> int:
        return len(self.records)

    def summary(self) -> TraceSummary:
        """Measure busy, copy, compute and overlapped time from the records."""
        compute: list[tuple[int, int]] = []
        copies: list[tuple[int, int]] = []
        busy: dict[int, list[tuple[int, int]]] = {}
        first, last = None, None
        for r in self.records:
            if not r.start_ns:
                continue
            first = r.start_ns if first is None else min(first, r.start_ns)
            last = r.end_ns if last is None else max(last, r.end_ns)
            if r.engine < 0:
                continue
            if r.kind_name in ("block", "task"):
                compute.append((r.start_ns, r.end_ns))
            elif r.is_copy:
                copies.append((r.start_ns, r.end_ns))
            else:
                continue
            busy.setdefault(r.engine, []).append((r.start_ns, r.end_ns))
        compute_ns, compute_u = _union_ns(compute)
        copy_ns, copy_u = _union_ns(copies)
        both_ns, _ = _union_ns(compute_u + copy_u)
        return TraceSummary(
            wall_ns=(last - first) if first is not None else 0,
            compute_ns=compute_ns,
            copy_ns=copy_ns,
            overlapped_ns=compute_ns + copy_ns - both_ns,
            engine_busy_ns={e: _union_ns(iv)[0] for e, iv in sorted(busy.items())},
        )

    # The Chrome format is _chrome.py's business; it works on any object with a trace's fields and
    # does not import this module, so these methods call it directly.

    def to_chrome(self) -> dict:
        """Return the trace in the Chrome trace event format (a JSON-ready dict).

        See :func:`pypto_async.runtime._chrome.to_chrome`.
        """
        return to_chrome(self)

    @classmethod
    def from_chrome(cls, doc) -> "Trace":
        """Read back a trace that :meth:`to_chrome` wrote (the dict, or its event list).

        See :func:`pypto_async.runtime._chrome.read_chrome`.
        """
        return cls(**read_chrome(doc))

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write :meth:`to_chrome` as JSON to ``path`` (atomically) and return the path.

        Parent directories are created.  Open the file in https://ui.perfetto.dev
        or render it with ``pypto-async trace PATH -o PATH.png``.
        """
        return write_json(path, self.to_chrome())
