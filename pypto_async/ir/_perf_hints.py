"""Compile-time performance hints, in PyPTO's form: ``report/perf_hints.log``.

PyPTO's compiler writes what it noticed about a program's performance to
``report/perf_hints.log`` in the compile's output directory, one line per
hint, and logs one summary line pointing there.  The same two hints are made
here, with PyPTO's codes, rule names and wording:

``PH001`` (``TileInnermostDimGranularity``)
    A ``pl.load`` or ``pl.store`` whose tile's innermost dimension is smaller
    than the chip's recommended transfer granularity (512 B on a2a3, 128 B on
    a5): each row then costs a whole transfer.  The ``moves ...`` clause gives
    the volume of the valid region moved (left out when an extent is only
    known at run time); identical transfers at one source line are one hint
    with a count.
``PH-MR-001`` (``MemoryReuse``)
    A ``pl.pipeline(..., stage=n)`` loop whose staged tiles, ``n`` copies of
    them, do not fit the on-chip buffer of their memory space next to the
    tiles that live across the loop: only the stages that fit are in flight,
    the others share storage and serialize.

The chip figures (granularity, L2 line, buffer capacities) are the platform's
device profile's (:mod:`pypto_async.runtime._profile`: one source for the
model and the hints), whose figures are PyPTO's backends' for Ascend 910B
(``a2a3``; also the generic ``sim``) and Ascend 950 (``a5``); only the
allocation alignments are the compiler's own, here.  :func:`write_perf_hints` writes the file (replacing
an earlier compile's; removing it when there is nothing to say, so a fixed
hint is gone from it).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ._nodes import Assign, DynFor, For, Fused, IConst, Load, Scope, Spmd, Store

__all__ = ["Chip", "chip_of", "chip_from_profile", "perf_hints", "write_perf_hints", "PERF_HINTS_FILE"]

PERF_HINTS_FILE = "perf_hints.log"
_log = logging.getLogger("pypto_async.ir")


@dataclass(frozen=True)
class Chip:
    """The figures of a chip the hints use: a view of its device profile, plus allocation alignments."""

    arch: str
    recommended_innermost_bytes: int
    l2_cache_line_bytes: int
    #: memory space -> (capacity in bytes, allocation alignment in bytes)
    buffers: dict


#: Allocation alignment per memory space (PyPTO's backends; a compiler figure, not the chip's timing).
_ALIGN = {"Vec": 128, "Mat": 128, "Left": 64, "Right": 64, "Acc": 128, "Bias": 64}
#: Which profile field sizes each memory space.
_SPACE = {"Vec": "ub_bytes", "Mat": "l1_bytes", "Left": "l0a_bytes", "Right": "l0b_bytes", "Acc": "l0c_bytes",
          "Bias": "bias_bytes"}
#: The backend names PH001 quotes, by profile.
_ARCH = {"a2a3": "a2a3", "sim": "a2a3", "a5": "a5"}


def chip_from_profile(profile) -> Chip:
    """The hints' view of a :class:`~pypto_async.runtime.DeviceProfile`: one source for both."""
    return Chip(_ARCH.get(profile.name, profile.name), int(profile.transfer_granule_bytes),
                int(profile.l2_line_bytes),
                {space: (int(getattr(profile, field)), _ALIGN[space]) for space, field in _SPACE.items()})


def chip_of(platform: str) -> Chip:
    """The chip figures of a compile platform: its device profile's (a2a3's for an unknown one)."""
    # Upward, at call time: the chip profiles live with the runtime's RunConfig (one source of chip figures).
    from ..runtime._profile import A2A3, _BY_PLATFORM, PROFILES

    name = _BY_PLATFORM.get(str(platform).strip().lower())
    return chip_from_profile(PROFILES[name] if name else A2A3)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _static(e):
    """An index expression's value if it is a compile-time constant, else None."""
    return e.value if isinstance(e, IConst) else None


def _at(loc) -> str:
    return f" at {loc}" if loc is not None else ""


def _transfers(body, out: list) -> None:
    """Every (op name, tile shape, dtype, memory, valid, loc) load and store of `body`, in walk order."""
    for s in body:
        if isinstance(s, Fused):
            _transfers(s.members, out)
        elif isinstance(s, (For, DynFor, Spmd, Scope)):
            _transfers(s.body, out)
        elif isinstance(s, Assign) and isinstance(s.expr, Load):
            t = s.var.type
            out.append(("tile.load", t.shape, t.dtype, t.memory, t.valid, s.loc))
        elif isinstance(s, Store):
            t = s.value.type
            out.append(("tile.store", t.shape, t.dtype, t.memory, t.valid, s.loc))


def _ph001(body, chip: Chip) -> list[str]:
    found: list = []
    _transfers(body, found)
    sites: dict = {}
    for op, shape, dtype, memory, valid, loc in found:
        if not shape or shape[-1] <= 0:
            continue
        inner = shape[-1] * dtype.itemsize
        if inner >= chip.recommended_innermost_bytes:
            continue
        volume = None
        extents = [(_static(e) if valid is not None else size) for e, size in
                   zip(valid if valid is not None else shape, shape)]
        if all(x is not None and x > 0 for x in extents):
            rows = _numel(extents[:-1])
            row_bytes = extents[-1] * dtype.itemsize
            volume = (rows * row_bytes, rows, row_bytes)
        key = (str(loc) if loc is not None else None, op, dtype.name, inner, shape[-1], memory, volume)
        if loc is None:  # no location to merge on: each is its own hint
            key = (*key, len(sites))
        sites[key] = sites.get(key, 0) + 1
    lines = []
    for (where, op, dtype, inner, elems, memory, volume, *_), count in sites.items():
        msg = (f"{op} has innermost dim = {inner}B (tile {dtype.lower()}[{elems}], target_memory={memory})")
        if volume is not None:
            msg += f"; moves {volume[0]}B as {volume[1]} x {volume[2]}B rows"
        msg += (f"; recommended >= {chip.recommended_innermost_bytes}B for backend {chip.arch} "
                f"(L2 cache line = {chip.l2_cache_line_bytes}B). Consider increasing tile shape on the "
                "innermost axis.")
        if count > 1:
            msg += f" ({count} occurrences at this source location)"
        lines.append(f"[perf_hint PH001] TileInnermostDimGranularity: {msg}" + (f" at {where}" if where else ""))
    return lines


def _tiles(body, out: dict) -> None:
    """Every tile a body defines, by id: (memory space, bytes)."""
    for s in body:
        if isinstance(s, Fused):
            _tiles(s.members, out)
        elif isinstance(s, (For, DynFor, Spmd, Scope)):
            _tiles(s.body, out)
        elif isinstance(s, Assign):
            t = s.var.type
            out[s.var.id] = (t.memory, _numel(t.shape) * t.dtype.itemsize)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _space_bytes(tiles: dict, chip: Chip) -> dict:
    by: dict = {}
    for memory, nbytes in tiles.values():
        if memory in chip.buffers:
            by[memory] = by.get(memory, 0) + _align(nbytes, chip.buffers[memory][1])
    return by


def _pipelines(body, chip: Chip, region_tiles: dict, lines: list, group: list) -> None:
    for s in body:
        if isinstance(s, Scope):  # a region (task): its own buffers
            inner: dict = {}
            _tiles(s.body, inner)
            _pipelines(s.body, chip, inner, lines, group)
        elif isinstance(s, For) and s.kind == "pipeline" and s.stage >= 2:
            staged: dict = {}
            _tiles(s.body, staged)
            outside = {k: v for k, v in region_tiles.items() if k not in staged}
            reserved_by = _space_bytes(outside, chip)
            for memory, slot in sorted(_space_bytes(staged, chip).items()):
                cap = chip.buffers[memory][0]
                reserved = reserved_by.get(memory, 0)
                free = max(0, cap - reserved)
                achieved = min(s.stage, free // slot) if slot else s.stage
                if achieved >= s.stage:
                    continue
                msg = (f"software pipelining requested depth {s.stage} for pipeline group {len(group)} in "
                       f"{memory}, but only {achieved} of {s.stage} buffers fit ({slot} B per stage, {free} B free")
                if reserved:
                    msg += f" after {reserved} B reserved"
                msg += f") — stages {achieved} apart share storage and serialize. "
                need = slot * s.stage
                if free == 0 or need > free:
                    msg += (f"This operand alone needs {need} B for depth {s.stage}; shrink the per-stage tile to "
                            f"<= {free // s.stage} B, or reduce the pipeline depth (e.g. `pl.pipeline(stage=)`) "
                            f"to {achieved}.")
                lines.append(f"[perf_hint PH-MR-001] MemoryReuse: {msg}{_at(s.loc)}")
            group.append(s)
            _pipelines(s.body, chip, region_tiles, lines, group)
        elif isinstance(s, (For, DynFor, Spmd)):
            _pipelines(s.body, chip, region_tiles, lines, group)


def perf_hints(program, platform: str = "sim") -> list[str]:
    """The perf-hint lines of a lowered (or traced) program for `platform`, in PyPTO's format."""
    chip = chip_of(platform)
    lines = _ph001(program.body, chip)
    top: dict = {}
    _tiles(program.body, top)
    _pipelines(program.body, chip, top, lines, [])
    return lines


def write_perf_hints(target, lines: list[str]) -> Path | None:
    """Write `lines` as ``<target>/report/perf_hints.log``; return its path (None, and no file, for no lines).

    A directory that cannot be written does not fail the compile: the hints
    are logged instead, with a warning.

    Logs PyPTO's one-line summary (``[perf_hint] N hints across M sites;
    see PATH``) at INFO on the ``pypto_async.ir`` logger.
    """
    path = Path(target) / "report" / PERF_HINTS_FILE
    if not lines:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # a read-only cache entry: the stale file stays, the compile goes on
            _log.warning("cannot remove %s (%s)", path, exc)
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{PERF_HINTS_FILE}.{os.getpid()}.tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, path)
    except OSError as exc:  # as PyPTO does: the hints go to the log instead, the compile goes on
        _log.warning("cannot write %s (%s); the perf hints follow", path, exc)
        for line in lines:
            _log.info("%s", line)
        return None
    sites = {line.rsplit(" at ", 1)[1] for line in lines if " at " in line}
    summary = f"[perf_hint] {len(lines)} {'hint' if len(lines) == 1 else 'hints'}"
    if sites:
        summary += f" across {len(sites)} {'site' if len(sites) == 1 else 'sites'}"
    _log.info("%s; see %s", summary, path)
    return path
