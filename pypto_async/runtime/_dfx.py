"""DFX outputs of one call: PyPTO's ``dfx_outputs/`` directory, per call with ``config=``.

A call that carries a per-call config with a DFX switch on
(``compiled(*args, config=RunConfig(enable_chip_swimlane=True))``, the same
on ``handle(...)``, ``w.run(...)`` and ``kernel(...)``) writes what it
collected under :func:`dfx_dir`: ``<base>/dfx_outputs/``, where the base is
the config's ``save_kernels_dir`` when set, else the program's
``output_dir`` (its kernel-cache entry when it was compiled without one).
The names are PyPTO's where the content is the same kind:

``deps.json`` (``enable_dep_gen``)
    The program's tasks and the edges among them
    (:func:`pypto_async.runtime._deps_json.write_deps`, which a worker opened with
    ``enable_dep_gen`` also calls when it registers a program with a table,
    and after each completed run of one without).
``scope_stats/scope_stats.jsonl`` (``enable_scope_stats``)
    One JSON line per stream of the worker at the end of the call: its
    ring high-water marks (task window, heap, dep pool) and back-pressure
    waits; the simulator's rings are per stream, not per scope.
``merged_swimlane_<time>.json`` (``enable_chip_swimlane`` >= 1)
    A Chrome/Perfetto trace of the call's commands (PyPTO's converter
    writes the same kind of file from its records).  Every level from 1 up
    records the same here: submit, start and end of each command.
``l2_swimlane_records.json`` (``enable_chip_swimlane`` >= 1)
    PyPTO's per-task records: dispatch, start, end and finish of each task
    (a kernel's blocks) in device time, modeled by default
    (:mod:`pypto_async.runtime._swimlane_records`); ``deps.json`` beside it
    joins on ``task_id``.
``args_dump/`` (``enable_dump_args``)
    ``args_dump.json``, a manifest: one entry per tensor argument dumped,
    with the run, call, parameter, direction, stage (``"before"`` for what
    the launch reads, ``"after"`` for what it wrote), shape, dtype and the
    file of its raw bytes (C order) beside it,
    ``<run>_<call>_<param>_<stage>.bin``.  Level 2 dumps every tensor
    argument; level 1 only the program's parameters marked with
    ``pl.dump_tag(t)`` (or ``dumps=[t]`` on ``pl.submit`` / ``pl.at``) that a
    task consumes (``CompiledProgram.dump_tags``), before and after the
    launch (PyPTO dumps at each consuming task; the sim's tasks run inside
    one launch, whose arguments are what it can read back).

Several runs (processes) may write into one directory, one after another or
at once: every file name carries the run's id (:func:`run_id`, also in the
manifest's entries and the scope-stats lines), so no run overwrites
another's files, and the manifest is updated under a lock, so it lists every
run's files.

``enable_pmu`` collects nothing: the simulated cores have no counters.  A
call with DFX switches runs in sync mode only (it reads tensors back and
waits for its trace): in async mode it is refused before anything is
queued; use the worker's own config for whole-life traces there.  A
``save_kernels_dir`` that cannot be written is refused
(:class:`~pypto_async.errors.PtoArgumentError`) before anything is queued.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import itertools
import json
import os
import secrets
import threading
from pathlib import Path

from .._driver import ffi
from .._signature import SCALAR
from ..errors import PtoArgumentError, PtoNotSupported
from ._args import host_array
from ._deps_json import DFX_DIR, write_deps
from ._swimlane_records import write_swimlane_records
from ._dispatch import launch_kernel
from ._tensor import DeviceTensor

__all__ = ["DFX_DIR", "dfx_dir", "dfx_call", "run_id"]

_calls = itertools.count(1)  # a call's number in the file names, process-wide
_run: list = []  # [pid, id] of this process's run
_run_lock = threading.Lock()


def run_id() -> str:
    """Return this run's id, which the DFX file names carry: the start time and a random tag.

    One per process (a forked child gets its own), so runs that write into
    one ``save_kernels_dir`` never overwrite each other's files.
    """
    with _run_lock:
        if not _run or _run[0] != os.getpid():
            stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
            _run[:] = [os.getpid(), f"{stamp}_{secrets.token_hex(4)}"]
        return _run[1]


def dfx_dir(compiled, config=None) -> Path:
    """Where a call of `compiled` writes its DFX outputs: ``<base>/dfx_outputs`` (see the module doc)."""
    base = getattr(config, "save_kernels_dir", None) or compiled.output_dir
    return Path(base) / DFX_DIR


def _bytes_of(arg) -> bytes:
    if isinstance(arg, DeviceTensor):
        return arg.numpy().tobytes()
    h = host_array(arg, "enable_dump_args", writeable=False)
    return bytes(ffi.buffer(h.ptr, h.nbytes))


def _dump(out: Path, run: str, call: int, stage: str, params, args, wanted) -> list[dict]:
    entries = []
    for p, arg in zip(params, args):
        if p.direction == SCALAR or not wanted(p):
            continue
        name = f"{run}_{call:04d}_{p.name}_{stage}.bin"
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(_bytes_of(arg))
        os.replace(tmp, out / name)
        entries.append({"run": run, "call": call, "param": p.name, "direction": p.direction, "stage": stage,
                        "shape": list(p.shape), "dtype": p.dtype.np_name, "file": name})
    return entries


def _write_manifest(out: Path, program: str, level: int, entries: list[dict]) -> None:
    """Add `entries` to ``args_dump.json``, under a lock that every run writing into `out` takes."""
    path = out / "args_dump.json"
    lock = os.open(out, os.O_RDONLY)  # the directory itself is the lock: no file of its own
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the descriptor closes
        doc = {}
        with contextlib.suppress(OSError, ValueError, RecursionError):
            doc = json.loads(path.read_text())
        kept = doc.get("entries") if isinstance(doc, dict) else None
        kept = [e for e in kept if isinstance(e, dict)] if isinstance(kept, list) else []
        doc = {"program": program, **(doc if isinstance(doc, dict) else {}), "level": level,
               "entries": kept + entries}
        _write_json(path, doc)
    finally:
        os.close(lock)


def _write_json(path: Path, doc) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def _write_scope_stats(worker, out: Path, run: str, call: int, program: str) -> None:
    from dataclasses import asdict

    lines = [json.dumps({"run": run, "call": call, "program": program, **asdict(s)})
             for s in worker.stats().stream_stats]
    # One write in append mode: lines of runs writing at once do not interleave.
    with open(out / "scope_stats" / "scope_stats.jsonl", "a") as f:
        f.write("".join(line + "\n" for line in lines))


def _prepare(out: Path, cfg) -> None:
    """Make the directories the call writes into; refuse an unusable one (before anything is queued)."""
    dirs = [out]
    if cfg.enable_dump_args:
        dirs.append(out / "args_dump")
    if cfg.enable_scope_stats:
        dirs.append(out / "scope_stats")
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PtoArgumentError(f"save_kernels_dir: cannot write the DFX outputs into {d} "
                                   f"({exc.strerror or exc})") from exc
        if not os.access(d, os.W_OK | os.X_OK):
            raise PtoArgumentError(f"save_kernels_dir: cannot write the DFX outputs into {d} "
                                   "(permission denied)")


def dfx_call(h, full: tuple, result, stream, cfg):
    """Launch ``h(*full)`` collecting the DFX outputs `cfg` asks for; return `result` (sync mode).

    Raises
    ------
    PtoNotSupported
        In async mode, before anything is queued.
    PtoArgumentError
        If the DFX directory cannot be made or written, before anything is
        queued (or, if writing fails after the launch ran, then).
    """
    worker = h._worker
    if worker._async:
        raise PtoNotSupported(
            f"{h._label}: a per-call config with DFX switches runs in sync mode only; in async mode "
            "open the worker with them (RunConfig(enable_chip_swimlane=..., enable_scope_stats=...)) "
            "or use w.trace()")
    compiled, params = h._compiled, h._binder.params
    out = dfx_dir(compiled, cfg)
    _prepare(out, cfg)
    run, call = run_id(), next(_calls)
    level = cfg.enable_dump_args
    tags = set(getattr(compiled, "dump_tags", ()))
    dumps = out / "args_dump"
    entries: list[dict] = []
    try:
        if level:  # level 1: only the tensors marked with pl.dump_tag / dumps=
            entries += _dump(dumps, run, call, "before", params, full,
                             lambda p: p.copies_in and (level >= 2 or p.name in tags))
    except OSError as exc:
        raise PtoArgumentError(f"save_kernels_dir: cannot write the DFX outputs into {dumps} ({exc})") from exc
    graph = getattr(compiled, "task_graph", None)
    resolved = cfg.enable_dep_gen and graph is None and getattr(compiled, "kind", "kernel") == "program"
    if resolved:  # no table: the driver's resolved edges are the graph
        h.record_edges()
    if cfg.enable_chip_swimlane:
        stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
        with worker.trace(out / f"merged_swimlane_{stamp}_{run}_{call:04d}.json") as window:
            launch_kernel(worker, h, full, stream, False)
        try:  # PyPTO's per-task records beside the trace (and deps.json)
            write_swimlane_records(window.trace, out, h._name, worker.device_profile.name)
        except OSError as exc:
            raise PtoArgumentError(f"save_kernels_dir: the launch ran, but its DFX outputs could not be "
                                   f"written into {out} ({exc})") from exc
    else:
        launch_kernel(worker, h, full, stream, False)
    try:
        if level:
            entries += _dump(dumps, run, call, "after", params, full,
                             lambda p: p.copies_out and (level >= 2 or p.name in tags))
        if level:
            _write_manifest(dumps, h._name, level, entries)
        if resolved:
            graph = h.resolved_graph()
        if cfg.enable_dep_gen and graph is not None:
            write_deps(graph, out.parent, h._name)
        if cfg.enable_scope_stats:
            _write_scope_stats(worker, out, run, call, h._name)
    except OSError as exc:
        raise PtoArgumentError(f"save_kernels_dir: the launch ran, but its DFX outputs could not be written "
                               f"into {out} ({exc})") from exc
    return result
