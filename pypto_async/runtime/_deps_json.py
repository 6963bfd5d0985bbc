"""DFX output of programs: ``deps.json``, a program's tasks and the edges among them.

A worker opened with ``RunConfig(enable_dep_gen=True)`` writes it under the
program's output directory, in the DFX layout
``<output dir>/dfx_outputs/deps.json``: when it registers a program with a
compile-time table, and after each completed run of one without
(:class:`DepsWriter`, the graph the driver resolved in that run).  :func:`write_deps` is the one
writer; call it directly to write a graph anywhere.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

__all__ = ["DFX_DIR", "DEPS_FILE", "DepsWriter", "deps_document", "write_deps"]

DFX_DIR = "dfx_outputs"
DEPS_FILE = "deps.json"


def deps_document(graph, name: str) -> dict:
    """The JSON document of a :class:`~pypto_async.ir._deps.TaskGraph`.

    ``tasks``: ``{"id", "name"}`` in submission order; ``edges``: ``{"src",
    "dst", "kind", "hazard", "tensor"}`` with ``kind`` ``"inferred"`` (from
    the buffers both tasks touch: ``hazard`` RAW, WAR or WAW, on ``tensor``)
    or ``"declared"`` (``deps=``).
    """
    return {
        "program": name,
        "tasks": [{"id": t.id, "name": t.name} for t in graph.tasks],
        "edges": [{"src": e.src, "dst": e.dst, "kind": e.kind, "hazard": e.hazard, "tensor": e.tensor}
                  for e in graph.edges],
    }


def write_deps(graph, output_dir, name: str = "program") -> Path:
    """Write `graph` as ``<output_dir>/dfx_outputs/deps.json`` (atomically); return its path."""
    out = Path(output_dir) / DFX_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / DEPS_FILE
    tmp = out / f".{DEPS_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps(deps_document(graph, name), indent=2) + "\n")
    os.replace(tmp, path)
    return path


class DepsWriter:
    """A worker's writer of ``deps.json`` for programs without a compile-time table.

    Such a program's graph is known only once a run has been resolved
    (:meth:`~pypto_async.runtime.KernelHandle.resolved_graph`).  A worker
    opened with ``enable_dep_gen`` hands each completed run of one to
    :meth:`note` where the completion is delivered (async mode); the graph
    is read and written by a Python thread of its own, so neither the
    completion path nor an event loop waits for the file.  A handle noted
    again before its file was written is written once, with its latest
    run's graph.  A sync-mode call writes on its own thread
    (:meth:`write_now`).  A graph equal to the one last written there is
    not written again.  :meth:`flush` waits until every noted run is on
    disk (the worker does when it closes).
    """

    def __init__(self):
        self._cv = threading.Condition()
        self._pending: dict[int, object] = {}  # id(handle) -> handle, noted and not written yet
        self._busy = False  # the thread is writing (or about to)
        self._errors: list[str] = []
        self.launches: dict = {}  # a run not finished yet -> its handle (the runtime's _DepsLaunch)
        self._written: dict[int, tuple] = {}  # id(handle) -> (graph, output dir) last written
        self._pid = os.getpid()  # a forked child has no writer thread: it waits for nothing

    def note(self, handle) -> None:
        """Write `handle`'s resolved graph soon (any thread; takes only this writer's lock)."""
        if os.getpid() != self._pid:
            return
        with self._cv:
            self._pending[id(handle)] = handle
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._run, name="pypto-deps-writer", daemon=True).start()

    def write_now(self, handle) -> None:
        """Write `handle`'s resolved graph on this thread (a sync-mode caller's), after what was noted before."""
        self.flush()
        self._write(handle)
        self.flush()  # report this write's error, if any

    def _write(self, handle) -> None:
        try:
            graph = handle.resolved_graph()
            if graph is None:
                return
            out = Path(handle.compiled.output_dir)
            last = self._written.get(id(handle))
            if last is not None and last[0] == graph and last[1] == out and (out / DFX_DIR / DEPS_FILE).exists():
                return  # the same graph as the file's (runs of one shape): not written again
            write_deps(graph, out, handle.name)
            self._written[id(handle)] = (graph, out)
        except Exception as exc:  # noqa: BLE001 - a diagnostic file must not break the worker
            with self._cv:
                self._errors.append(f"{handle.name}: {exc}")

    def _run(self) -> None:
        while True:
            with self._cv:
                if not self._pending:
                    self._busy = False
                    self._cv.notify_all()
                    return
                _, handle = self._pending.popitem()
            self._write(handle)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every noted run's file is written; warn about any that could not be.  False on timeout."""
        if os.getpid() != self._pid:
            return True
        with self._cv:
            done = self._cv.wait_for(lambda: not self._busy, timeout)
            errors, self._errors = self._errors, []
        if errors:
            import warnings

            warnings.warn("pypto_async: could not write deps.json: " + "; ".join(errors), RuntimeWarning,
                          stacklevel=3)
        return done
