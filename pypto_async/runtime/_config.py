"""RunConfig: what a worker is opened with.

A :class:`RunConfig` carries the fields of PyPTO's ``RunConfig``, both the
ones that shape the device and the ones only a test harness reads, plus the
simulated device's shape (``cores``, ``copy_engines``, ``device_memory``).  It
is validated when you build it: a wrong value raises
:class:`~pypto_async.errors.PtoArgumentError` naming the field.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from .._checks import check_int, is_int, is_number
from .._signature import normalize_platform
from ..errors import PtoArgumentError

__all__ = ["RunConfig", "normalize_platform", "as_run_config"]


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class RunConfig:
    """Settings for a :class:`~pypto_async.runtime.ChipWorker`.

    Fields that shape the device
    ----------------------------
    platform : str
        ``"sim"`` (``"a2a3sim"`` and ``"a5sim"`` are accepted aliases).  The
        worker refuses programs compiled for another platform.
    device_id : int
        Which device of the platform, ``0 .. device_count(platform) - 1``
        (the simulator offers 8, or ``PYPTO_ASYNC_SIM_DEVICES``).  Workers of
        several devices copy to each other with :meth:`ChipWorker.copy`.
    ring_task_window : int
        Command slots per stream ring, a power of two.  When a stream's ring
        is full, new work waits in that stream's backlog in the driver, and
        enters the ring as commands complete (back-pressure).
    ring_heap : int
        Bytes of launch arguments each stream can hold in flight.
    ring_dep_pool : int
        Event waits each stream can hold in flight.
    aicpu_thread_num : int or None
        Scheduler threads (``None``: the driver's default, 1).
    cores, copy_engines : int or None
        Compute-core and copy-engine threads (``None``: the driver's defaults,
        ``min(4, CPUs)`` and 2).
    device_memory : int or None
        Bytes of device memory (``None``: 1 GiB).
    spin_us : int or None
        Microseconds an idle driver thread (one per engine queue) spins,
        yielding the CPU, before it sleeps (``None``: the driver's default,
        200).  Work arriving within the window starts without a thread
        wake-up, which on a VM costs tens of microseconds; past it the device
        uses no CPU.  Lower it to trade latency for idle CPU.
    enable_chip_swimlane : bool
        Record a trace record per command (the swimlane view) for the
        worker's whole life, written as ``pto_swimlane_<pid>_<n>.json`` (in
        ``save_kernels_dir``, else the current directory) when it closes.
    enable_scope_stats : bool
        Write the per-stream and per-engine statistics (ring high-water
        marks, back-pressure waits, engine busy time) as JSON next to each
        trace the worker writes (``<trace stem>.stats.json``), and once more
        when it closes (beside the swimlane file, else as
        ``pto_scope_stats_<pid>_<n>.json``).
    enable_dep_gen, enable_pmu, enable_dump_args : bool
        Further DFX switches of PyPTO's ``RunConfig``; accepted and kept, no
        effect on the simulator.

    Fields only a harness reads
    ---------------------------
    rtol, atol : float
        Tolerances for a golden comparison.
    golden_data_dir : str or None
        Where a harness keeps golden data.
    save_kernels : bool, save_kernels_dir : str or None
        Keep generated kernels; :meth:`compile_kwargs` forwards
        ``save_kernels_dir`` as ``ir.compile``'s ``output_dir``.
    codegen_only : bool
        Read by a harness.  It does **not** stop a dispatch through a worker.

    Raises
    ------
    PtoArgumentError
        If a field has the wrong type or an out-of-range value; the message
        names the field.
    """

    platform: str = "sim"
    device_id: int = 0
    enable_chip_swimlane: bool = False
    enable_dep_gen: bool = False
    enable_pmu: bool = False
    enable_dump_args: bool = False
    enable_scope_stats: bool = False
    ring_task_window: int = 256
    ring_heap: int = 64 * 1024
    ring_dep_pool: int = 64
    aicpu_thread_num: int | None = None
    rtol: float = 1e-5
    atol: float = 1e-5
    golden_data_dir: str | None = None
    save_kernels: bool = False
    save_kernels_dir: str | None = None
    codegen_only: bool = False
    cores: int | None = None
    copy_engines: int | None = None
    device_memory: int | None = None
    spin_us: int | None = None

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise PtoArgumentError(f"RunConfig.{name} {why}, not {getattr(self, name)!r}")

        if not isinstance(self.platform, str) or not self.platform.strip():
            fail("platform", "must be a non-empty str such as 'sim'")
        for name in ("enable_chip_swimlane", "enable_dep_gen", "enable_pmu", "enable_dump_args",
                     "enable_scope_stats", "save_kernels", "codegen_only"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "must be a bool")
        def check(name: str, **bounds) -> None:
            check_int(getattr(self, name), f"RunConfig.{name}", **bounds)

        check("device_id", low=0)
        if not is_int(self.ring_task_window) or not _power_of_two(self.ring_task_window):
            fail("ring_task_window", "must be a power of two >= 1")
        if self.ring_task_window > 1 << 20:
            fail("ring_task_window", "must be at most 1048576")
        check("ring_heap", low=256, high=(1 << 32) - 1)
        check("ring_dep_pool", low=1, high=(1 << 32) - 1)
        for name in ("aicpu_thread_num", "cores", "copy_engines"):
            check(name, low=1, high=256, optional=True)
        check("device_memory", low=4096, optional=True)  # bytes
        check("spin_us", low=0, high=1_000_000, optional=True)
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not is_number(value) or value < 0:
                fail(name, "must be a number >= 0")
        for name in ("golden_data_dir", "save_kernels_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                fail(name, "must be None or a path")

    @property
    def device_platform(self) -> str:
        """The canonical platform name the driver is opened with (``"sim"``)."""
        return normalize_platform(self.platform)

    def compile_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments this config forwards to ``ir.compile``.

        Only ``save_kernels_dir`` is forwarded, as ``output_dir``; an empty
        dict when it is not set.
        """
        if self.save_kernels_dir is None:
            return {}
        return {"output_dir": str(self.save_kernels_dir)}

    def replace(self, **changes: Any) -> RunConfig:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def _device_fields(self) -> dict[str, int]:
        """The ``pto_device_config`` fields this config sets."""
        fields = {
            "ring_task_window": self.ring_task_window,
            "ring_heap": self.ring_heap,
            "ring_dep_pool": self.ring_dep_pool,
            "trace": int(self.enable_chip_swimlane),
        }
        fields["device_id"] = self.device_id
        for name in ("aicpu_thread_num", "cores", "copy_engines", "device_memory"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = value
        if self.spin_us is not None:
            # The driver reads 0 as "its default"; 1 us is the least spinning it takes.
            fields["spin_us"] = max(self.spin_us, 1)
        return fields


def as_run_config(config: RunConfig | dict | None) -> RunConfig:
    """Return ``config`` as a :class:`RunConfig` (``None``: the defaults; a dict: its fields).

    Raises
    ------
    PtoArgumentError
        For a dict with unknown fields, or anything else that is not a
        RunConfig.
    """
    if config is None:
        return RunConfig()
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, dict):
        known = {f.name for f in dataclasses.fields(RunConfig)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise PtoArgumentError(f"unknown RunConfig field(s): {', '.join(unknown)}")
        return RunConfig(**config)
    raise PtoArgumentError(f"config must be a RunConfig, a dict or None, not {type(config).__name__}")
