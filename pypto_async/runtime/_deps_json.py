"""DFX output of programs: ``deps.json``, a program's tasks and the edges among them.

A worker opened with ``RunConfig(enable_dep_gen=True)`` writes it for each
program it registers, under the program's output directory, in the DFX
layout ``<output dir>/dfx_outputs/deps.json``.  :func:`write_deps` is the one
writer; call it directly to write a graph anywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["DFX_DIR", "DEPS_FILE", "deps_document", "write_deps"]

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
    tmp = out / f".{DEPS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(deps_document(graph, name), indent=2) + "\n")
    os.replace(tmp, path)
    return path
