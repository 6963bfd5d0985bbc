"""One traced command: the driver's ``pto_trace_record``, and the names of the command kinds.

The bottom of tracing: :mod:`._chrome` (the Chrome/Perfetto form) builds
records from JSON with these, and :mod:`._trace` (the trace model) holds
them, so neither has to import the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _driver
from .._driver import ffi

__all__ = ["TraceRecord", "kind_name", "kind_code"]

_kinds: dict[int, str] | None = None
_COPY_KINDS = frozenset({"h2d", "d2h", "d2d", "memset", "peer"})


def _kind_table() -> dict[int, str]:
    # Built from the header's constants the first time it is needed.
    global _kinds
    if _kinds is None:
        _kinds = {
            getattr(_driver, name): name[len("PTO_CMD_"):].lower()
            for name in _driver.__all__
            if name.startswith("PTO_CMD_")
        }
    return _kinds


def kind_name(kind: int) -> str:
    """Return the short name of a ``PTO_CMD_*`` kind (``"h2d"``, ``"launch"``).

    Parameters
    ----------
    kind : int
        A trace record's ``kind``.  Unknown values give ``"kind<N>"``.
    """
    return _kind_table().get(kind, f"kind{kind}")


def kind_code(name: str) -> int | None:
    """Return the ``PTO_CMD_*`` kind that :func:`kind_name` calls `name`, or None.

    Parameters
    ----------
    name : str
        A short kind name (``"h2d"``), or ``"kind<N>"`` for a kind the
        driver's header does not name.
    """
    for kind, short in _kind_table().items():
        if short == name:
            return kind
    if name.startswith("kind") and name[len("kind"):].isdigit():
        return int(name[len("kind"):])
    return None


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One command (or one block of a launch) as the driver traced it.

    The fields are those of ``pto_trace_record`` in ``pto_driver.h``; times
    are nanoseconds on ``pto_now_ns()``'s origin.  ``start_ns``, ``end_ns``
    and ``engine`` are device time: the device model's with
    ``RunConfig(timing="model")`` (the default; ``engine`` is then a modeled
    core, AIC cores first, or a modeled copy engine), else the host's.
    ``engine`` is a core for ``0 <= engine < cores``, a copy engine above
    that, and ``-1`` for work the scheduler did itself (event records and
    waits, latches, delays).  ``host_start_ns``, ``host_end_ns`` and
    ``host_engine`` are always the host's wall clock and the host thread
    that ran it (0 and -1 when unknown, as for a trace read back from JSON
    without them); ``dispatch_ns`` is when the device handed the block or
    task to its core (``start_ns`` less the pickup latency).
    """

    token: int
    seq: int
    bytes: int
    submit_ns: int
    start_ns: int
    end_ns: int
    event_id: int
    stream_id: int
    engine: int
    kind: int
    block: int
    status: int
    name: str
    graph: str = ""  # the graph whose replay queued it ("" for eager work)
    host_start_ns: int = 0
    host_end_ns: int = 0
    host_engine: int = -1
    dispatch_ns: int = 0

    @classmethod
    def from_cdata(cls, rec, string=None) -> "TraceRecord":
        """Copy a ``pto_trace_record`` cdata into a record."""
        if string is None:
            string = ffi.string
        return cls(
            int(rec.token), int(rec.seq), int(rec.bytes),
            int(rec.submit_ns), int(rec.start_ns), int(rec.end_ns),
            int(rec.event_id), int(rec.stream_id), int(rec.engine),
            int(rec.kind), int(rec.block), int(rec.status),
            string(rec.name).decode("utf-8", "replace"), "",
            int(rec.host_start_ns), int(rec.host_end_ns), int(rec.host_engine), int(rec.dispatch_ns),
        )

    @property
    def kind_name(self) -> str:
        """The kind's short name: ``"h2d"``, ``"launch"``, ``"block"``, ..."""
        return kind_name(self.kind)

    @property
    def is_copy(self) -> bool:
        """Whether the command moves bytes (a copy or a memset): copy engines run those."""
        return self.kind_name in _COPY_KINDS

    @property
    def begin_ns(self) -> int:
        """When the command started, or when it ended if it never started."""
        return self.start_ns or self.end_ns or self.submit_ns

    @property
    def duration_ns(self) -> int:
        """How long it ran (0 if it never started)."""
        return max(0, self.end_ns - self.start_ns) if self.start_ns else 0
