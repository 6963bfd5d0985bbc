"""PyPTO's per-task swimlane records, ``l2_swimlane_records.json``, from a trace.

PyPTO's runtime writes, per task, four timestamps (its
docs/en/user/performance/00-swimlane.md): *dispatch* (the AICPU wrote the
task's descriptor), *start* and *end* (the core ran the kernel) and *finish*
(the AICPU observed its completion).  ``[dispatch, start]`` is the pickup
latency, ``[start, end]`` the kernel.  Successor edges are not in the
records: ``deps.json`` beside them carries the graph (the file a worker with
``enable_dep_gen`` writes), and tools join the two on ``task_id``.

Here the four come from the device model (``RunConfig(timing="model")``,
docs/device_model.md): dispatch and start from its list schedule, end from
the task's modeled duration; the model observes a completion at once, so
*finish* equals *end*.  With ``timing="host"`` they are the host's clock
(dispatch = start: a host thread has no pickup).  The file, named
``l2_swimlane_records.json`` as the issue and ``pypto-async analyze`` have it
(PyPTO's newest runtime calls the same records ``chip_swimlane_records.json``),
is the joined form PyPTO's converter hands its analyses::

    {"version": 1, "producer": "pypto_async", "program": NAME,
     "timing": "model" | "host", "profile": PROFILE, "time_unit": "us",
     "metadata": {"core_types": ["aic", ..., "aiv", ...]},
     "tasks": [{"task_id", "func_name", "core_type": "aic" | "aiv",
                "core_id", "dispatch_time_us", "start_time_us",
                "end_time_us", "finish_time_us", "duration_us",
                "submit_time_us" (modeled tasks), "status"}, ...]}

``core_id`` indexes ``metadata.core_types`` (the modeled cores, AIC first;
with host timing the host's core threads, all ``"aiv"``).  Times are µs
from the first task's submission (modeled) or dispatch.  ``task_id`` is the task's
instance (its ``id`` in ``deps.json``); a plain kernel's blocks appear as
tasks of one ``func_name`` with ``task_id`` 0 and ``block`` set, as an SPMD
task's blocks do in PyPTO's viewer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._deps_json import DFX_DIR

__all__ = ["RECORDS_FILE", "swimlane_records", "write_last_runs", "write_swimlane_records"]

RECORDS_FILE = "l2_swimlane_records.json"


def swimlane_records(trace, program: str = "program", profile: str = "", records=None) -> dict:
    """The ``l2_swimlane_records.json`` document of a trace's tasks (or a kernel's blocks).

    `records`: those of the trace's records to take (default: all of them).
    """
    dev = trace.device
    modeled = dev.get("timing") == "model"
    aic = int(dev.get("aic_cores", 0)) if modeled else 0
    cores = int(dev.get("cores", 0))
    work = [r for r in (trace.records if records is None else records)
            if r.kind_name in ("task", "block") and r.start_ns]
    origin = min((min(r.dispatch_ns or r.start_ns, r.submit_ns if modeled and r.submit_ns else r.start_ns)
                  for r in work), default=0)

    def us(ns: int) -> float:
        return round((ns - origin) / 1000.0, 3)

    tasks = []
    for r in sorted(work, key=lambda r: (r.start_ns, r.engine, r.block)):
        entry = {
            "task_id": r.block if r.kind_name == "task" else 0,
            "func_name": r.name,
            "core_type": "aic" if r.engine < aic else "aiv",
            "core_id": r.engine,
            "dispatch_time_us": us(r.dispatch_ns or r.start_ns),
            "start_time_us": us(r.start_ns),
            "end_time_us": us(r.end_ns),
            "finish_time_us": us(r.end_ns),
            "duration_us": round((r.end_ns - r.start_ns) / 1000.0, 3),
            "status": "ok" if r.status == 0 else r.status,
        }
        if r.kind_name == "block":
            entry["block"] = r.block
        elif modeled and r.submit_ns:
            entry["submit_time_us"] = us(r.submit_ns)  # the modeled orchestrator's submission
        tasks.append(entry)
    return {
        "version": 1,
        "producer": "pypto_async",
        "program": program,
        "timing": "model" if modeled else "host",
        "profile": profile,
        "time_unit": "us",
        "metadata": {"core_types": ["aic"] * aic + ["aiv"] * (cores - aic)},
        "tasks": tasks,
    }


def write_swimlane_records(trace, out_dir, program: str = "program", profile: str = "", records=None) -> Path:
    """Write :func:`swimlane_records` as ``<out_dir>/l2_swimlane_records.json`` (atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RECORDS_FILE
    tmp = out / f".{RECORDS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(swimlane_records(trace, program, profile, records), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def write_last_runs(worker, trace) -> list[Path]:
    """Write each registered program's (or kernel's) last run in `trace` as its records; return the files.

    For a worker opened with ``enable_chip_swimlane``, when it closes: the
    records go to ``<output_dir>/dfx_outputs/``, beside the ``deps.json`` a
    worker with ``enable_dep_gen`` writes there (a call's own config writes
    them per call instead: ``_dfx``).  A run is the program's (or launch's)
    command record, named by its symbol, and the task (block) records of
    that command.
    """
    by_symbol = {}
    for compiled, handle in list(worker._handles.values()):
        program = getattr(compiled, "kind", "kernel") == "program"
        by_symbol[str(compiled.program_symbol if program else compiled.symbol)] = (compiled, handle)
    last: dict[str, tuple] = {}  # symbol -> (end, stream, seq) of its last run
    for r in trace.records:
        if r.kind_name in ("program", "launch") and r.name in by_symbol:
            key = (r.end_ns, r.stream_id, r.seq)
            if r.name not in last or key > last[r.name]:
                last[r.name] = key
    if not last:
        return []
    runs: dict[tuple, list] = {(sid, seq): [] for (_, sid, seq) in last.values()}
    for r in trace.records:
        if r.kind_name in ("task", "block"):
            got = runs.get((r.stream_id, r.seq))
            if got is not None:
                got.append(r)
    written = []
    for symbol, (_, sid, seq) in last.items():
        compiled, handle = by_symbol[symbol]
        if runs[(sid, seq)] and getattr(compiled, "output_dir", None):  # (a handle-like without one: nowhere)
            written.append(write_swimlane_records(trace, Path(compiled.output_dir) / DFX_DIR, handle._name,
                                                  worker.device_profile.name, runs[(sid, seq)]))
    return written
