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

from ._profile import DeviceProfile, resolve_profile
from .._scalars import check_int, is_int, is_number
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
    ring_task_window : int, list of 4 ints, or None
        Command slots per stream ring, a power of two (``None``: the
        driver's default, 256).  When a stream's ring is full, new work
        waits in that stream's backlog in the driver, and enters the ring as
        commands complete (back-pressure).  PyPTO's per-level form, a list
        of four entries (one per scope-depth ring, 0 = that ring's default),
        is accepted; a stream here has one ring for every depth, sized by
        the largest entry.
    ring_heap : int, list of 4 ints, or None
        Bytes of launch arguments each stream can hold in flight (``None``:
        64 KiB), and of a program's ``pl.create_tensor`` intermediates placed
        at once (``None``: as many as device memory holds); a per-level list
        as for ``ring_task_window``.
    ring_dep_pool : int, list of 4 ints, or None
        Event waits each stream can hold in flight (``None``: 64); a
        per-level list as for ``ring_task_window``.
    aicpu_thread_num : int or None
        Scheduler threads (``None``: the driver's default, 1).
    timing : str
        Where device times come from.  ``"model"`` (the default): the device
        model's clock, from ``device_profile`` (docs/device_model.md), so
        ``Event.elapsed_ms``, ``benchmark()``'s device time, ``w.stats()``
        busy times and traces show what the chip would take, whatever the
        host's CPUs did.  ``"host"``: the host's wall clock, as the host
        threads ran the work.  Results are the same either way.
    device_profile : DeviceProfile, str, dict or None
        The chip the model times work on (``None``: the platform's:
        ``"a2a3sim"`` Ascend 910B, ``"a5sim"`` Ascend 950, ``"sim"`` a small
        generic chip); a profile, a built-in's name, a dict of its fields, or
        the path of a JSON file of them (see
        :class:`~pypto_async.runtime.DeviceProfile`).  Its cores and copy
        engines are the modeled device's.
    cores, copy_engines : int or None
        Host threads that run the cores' and copy engines' work; they never
        change the modeled device (``device_profile`` does).  Compute-core and copy-engine threads (``None``: the driver's defaults,
        ``min(4, C)`` and ``min(2, C)``, where C is the number of CPUs the
        opening thread may run on, ``len(os.sched_getaffinity(0))``: a
        process pinned to one CPU gets one of each).  More threads than CPUs
        only take turns with the host.
    device_memory : int or None
        Bytes of device memory (``None``: 1 GiB).
    spin_us : int or None
        Microseconds an idle driver thread (one per engine queue, and the
        scheduler) spins, yielding the CPU, before it sleeps (``None``: the
        driver's default, 200).  Work arriving within the window starts
        without a thread wake-up, which on a VM costs tens of microseconds;
        past it the device uses no CPU.  A thread spins only while a CPU is
        spare for the host: the awake device threads, itself included, plus
        the host thread must fit the C CPUs above (so on one CPU nothing
        spins, and on two at most one thread spins while the device is
        idle), a thread never spins on the CPU the host thread last
        submitted or waited on, and the machine's runnable threads must fit
        its CPUs (plus one for the host until its CPU is known; so nothing
        spins beside numpy's BLAS threads or on a loaded machine, and on an
        otherwise idle 2-CPU machine one thread may spin on the CPU beside a
        busy host, to take a share of its next burst of tiny tasks).  Opened on one CPU, the device's
        threads run ``SCHED_BATCH``: a woken one does not preempt the host.  Lower it to trade latency for idle CPU (``0`` is the least,
        1 µs); raise it, on a host with CPUs to spare, for the opposite.
    host_first : str
        Whether the host thread runs short device work itself.  A small
        command handed to a device thread costs two thread hand-offs (the
        submitter wakes an engine, the engine's completion wakes the host);
        with no CPU spare for the host each waits for the other thread's
        time slice.  So the thread that submits to an idle stream, or blocks
        in a wait (``sync()``, sync mode), runs short queued work itself, in
        a sleeping engine's stead: stream order, auto_deps waits, failures,
        tracing and the modeled times are those of a queued command, and its
        completion is delivered at once.  ``"auto"`` (the default): only
        while no CPU is spare for the host (the rule of ``spin_us``: on one
        CPU, beside busy BLAS threads, on a loaded machine); ``"off"``:
        never (the host only submits); ``"always"``: whenever the work is
        short, as on a host with no CPU spare (so no device thread spins).
        ``w.stats().inline_runs`` counts those runs.
    inline_us : int or None
        What short means for ``host_first`` (``None``: 50): a copy or memset
        of at most ``inline_us`` x 4 KiB, a launch whose blocks took under
        ``inline_us`` together last time it ran, a program's task of under
        5 µs.  The host thread runs at most about this long per call.
    enable_chip_swimlane : int (0 to 4) or bool
        PyPTO's swimlane collection level; ``True`` is 4 and ``False`` 0.
        The simulator records every command's submit, start and end at any
        level from 1 up (the levels above 1 add nothing here).  On the
        worker's config it traces the worker's whole life, written as
        ``pto_swimlane_<pid>_<n>.json`` (in ``save_kernels_dir``, else the
        current directory) when it closes, with each registered program's
        last run as PyPTO's ``l2_swimlane_records.json`` in its
        ``output_dir``'s ``dfx_outputs/`` (beside the ``deps.json`` that
        ``enable_dep_gen`` writes there); on a per-call config
        (``compiled(*args, config=cfg)``) it traces that call into the
        program's ``dfx_outputs/`` (see :mod:`pypto_async.runtime._dfx`).
    enable_scope_stats : bool
        Write the per-stream and per-engine statistics (ring high-water
        marks, back-pressure waits, engine busy time) as JSON next to each
        trace the worker writes (``<trace stem>.stats.json``), and once more
        when it closes (beside the swimlane file, else as
        ``pto_scope_stats_<pid>_<n>.json``); per call, as
        ``dfx_outputs/scope_stats/scope_stats.jsonl``.
    enable_dump_args : int (0, 1, 2) or bool
        PyPTO's argument-dump level, per call: 0 off, 1 (``True``) the
        tensors marked for dumping (there is no marker here, so only the
        manifest is written), 2 every tensor argument before and after the
        launch, into ``dfx_outputs/args_dump/``.
    enable_pmu : int >= 0
        PyPTO's PMU event type (0: off).  The simulated cores have no
        performance counters: accepted and kept, nothing is collected.
    enable_dep_gen : bool
        Write the program's task graph as ``dfx_outputs/deps.json`` per call.
    auto_deps : bool
        Order accesses to a DeviceTensor across streams for you (the
        default): a launch or copy that reads a tensor last written on
        another stream waits for that write on the device, and one that
        writes waits for the earlier reads and write on other streams.
        ``False`` leaves it to your ``stream.wait`` calls (see
        docs/hazards.md).
    sanitize : str or None
        ``"raise"`` or ``"warn"``: where ordering is yours (``auto_deps=False``,
        ``manual_deps``), check it: an access not ordered after a conflicting
        one on another stream raises :class:`~pypto_async.errors.PtoRaceError`
        (or warns) before anything is queued.  ``"off"``: no checks.
        ``None``: the environment variable ``PYPTO_ASYNC_SANITIZE`` (which
        the pytest plugin's ``pto_sanitize`` setting sets), else off.
    sanitize_stacks : bool
        The sanitizer's messages carry the full stack of each side, not only
        its file and line.

    Fields only the harness reads (:func:`pypto_async.runtime.run`)
    ---------------------------------------------------------------
    rtol, atol : float
        Tolerances of the golden comparison.
    golden_data_dir : str or None
        Where the harness keeps the inputs and the golden outputs.
    save_kernels : bool, save_kernels_dir : str or None
        Keep the generated kernels (any DFX switch sets ``save_kernels``);
        :meth:`compile_kwargs` forwards ``save_kernels_dir`` as
        ``ir.compile``'s ``output_dir``.
    codegen_only : bool
        Read by a harness (:func:`pypto_async.runtime.run`).  It does **not**
        stop a dispatch through a worker.

    Fields compilation reads (PyPTO's compile side)
    -----------------------------------------------
    strategy, dump_passes, dump_ptoas_passes, compile_profiling, diagnostic_phase,
    disabled_diagnostics, analyze_auto_scopes_for_deps, memory_planner, distributed_config,
    backend_type
        Forwarded to ``ir.compile`` by :meth:`compile_kwargs` (with
        ``compile_profiling`` as ``profiling``), and by
        ``kernel(*args, config=cfg)`` and ``kernel.compile(*args,
        config=cfg)``.  ``ir.compile`` says what each does on the simulator.

    Raises
    ------
    PtoArgumentError
        If a field has the wrong type or an out-of-range value; the message
        names the field.
    """

    platform: str = "sim"
    device_id: int = 0
    enable_chip_swimlane: int | bool = 0
    enable_dep_gen: bool = False
    enable_pmu: int = 0
    enable_dump_args: int | bool = 0
    enable_scope_stats: bool = False
    ring_task_window: int | tuple[int, ...] | None = None
    ring_heap: int | tuple[int, ...] | None = None
    ring_dep_pool: int | tuple[int, ...] | None = None
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
    host_first: str = "auto"
    inline_us: int | None = None
    # PyPTO's compile-side fields (see compile_kwargs and ir.compile).
    strategy: Any = None
    dump_passes: bool | int = False
    dump_ptoas_passes: bool = False
    compile_profiling: bool = False
    diagnostic_phase: Any = None
    disabled_diagnostics: Any = None
    analyze_auto_scopes_for_deps: bool = False
    memory_planner: Any = None
    distributed_config: Any = None
    backend_type: Any = None
    auto_deps: bool = True
    sanitize: str | None = None
    sanitize_stacks: bool = False
    timing: str = "model"
    device_profile: Any = None

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise PtoArgumentError(f"RunConfig.{name} {why}, not {getattr(self, name)!r}")

        if not isinstance(self.platform, str) or not self.platform.strip():
            fail("platform", "must be a non-empty str such as 'sim'")
        for name in ("enable_dep_gen", "enable_scope_stats", "save_kernels", "codegen_only",
                     "dump_ptoas_passes", "compile_profiling", "analyze_auto_scopes_for_deps",
                     "auto_deps", "sanitize_stacks"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "must be a bool")
        _check_dfx_levels(self, fail)
        _check_compile_side(self, fail)

        def check(name: str, **bounds) -> None:
            check_int(getattr(self, name), f"RunConfig.{name}", **bounds)

        if self.timing not in ("model", "host"):
            fail("timing", "must be 'model' or 'host'")
        if self.device_profile is not None:
            if not isinstance(self.device_profile, DeviceProfile):
                object.__setattr__(self, "device_profile", resolve_profile(self.device_profile, self.platform))
        if self.sanitize not in (None, "off", "raise", "warn"):
            fail("sanitize", "must be None, 'off', 'raise' or 'warn'")
        check("device_id", low=0)
        _check_rings(self, fail)
        for name in ("aicpu_thread_num", "cores", "copy_engines"):
            check(name, low=1, high=256, optional=True)
        check("device_memory", low=4096, optional=True)  # bytes
        check("spin_us", low=0, high=1_000_000, optional=True)
        if self.host_first not in _HOST_FIRST:
            fail("host_first", "must be 'auto', 'off' or 'always'")
        check("inline_us", low=1, high=1_000_000, optional=True)
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not is_number(value) or value < 0:
                fail(name, "must be a number >= 0")
        for name in ("golden_data_dir", "save_kernels_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                fail(name, "must be None or a path")

    # -- PyPTO's DFX and compile-side helpers ---------------------------------------

    def any_dfx_enabled(self) -> bool:
        """True when a DFX switch is on (swimlane, argument dump, PMU, dep_gen, scope stats)."""
        return bool(self.enable_chip_swimlane or self.enable_dump_args or self.enable_pmu
                    or self.enable_dep_gen or self.enable_scope_stats)

    def compile_options(self) -> dict[str, Any]:
        """The compile-side fields under ``ir.compile``'s names, those that are set.

        What :meth:`compile_kwargs` forwards besides ``output_dir``, and what
        ``kernel.compile(*args, config=cfg)`` compiles with (and keys its
        cache by).
        """
        out: dict[str, Any] = {}
        for name, option in _COMPILE_SIDE:
            value = getattr(self, name)
            if value is not None and value is not False:
                out[option] = value
        return out

    @property
    def device_platform(self) -> str:
        """The canonical platform name the driver is opened with (``"sim"``)."""
        return normalize_platform(self.platform)

    def compile_kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments this config forwards to ``ir.compile``.

        ``save_kernels_dir`` as ``output_dir``, and the compile-side fields
        that are set (:meth:`compile_options`); an empty dict when none is.
        Unlike PyPTO's it does not include ``platform``: pass that yourself
        (``ir.compile(p, platform=cfg.platform, **cfg.compile_kwargs())``).
        """
        out = self.compile_options()
        if self.save_kernels_dir is not None:
            out["output_dir"] = str(self.save_kernels_dir)
        return out

    @property
    def profile(self):
        """The :class:`~pypto_async.runtime.DeviceProfile` a worker opened with this config models."""
        return resolve_profile(self.device_profile, self.platform)

    def replace(self, **changes: Any) -> RunConfig:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def _device_fields(self) -> dict[str, int]:
        """The ``pto_device_config`` fields this config sets."""
        fields = {"trace": int(self.enable_chip_swimlane > 0)}
        for name in ("ring_task_window", "ring_heap", "ring_dep_pool"):
            size = ring_size(getattr(self, name))
            if size is not None:
                fields[name] = size
        fields["device_id"] = self.device_id
        for name in ("aicpu_thread_num", "cores", "copy_engines", "device_memory"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = value
        if self.spin_us is not None:
            # The driver reads 0 as "its default"; 1 us is the least spinning it takes.
            fields["spin_us"] = max(self.spin_us, 1)
        fields["host_first"] = _HOST_FIRST[self.host_first]
        if self.inline_us is not None:
            fields["inline_us"] = self.inline_us
        return fields


# -- PyPTO's fields: levels, per-level rings, the compile side ---------------------------

#: RunConfig.host_first and the driver's values (PTO_HOST_FIRST_AUTO, _OFF, _ALWAYS).
_HOST_FIRST = {"auto": 0, "off": 1, "always": 2}

#: How many scope-depth rings PyPTO's per-level ``ring_*`` lists size.
RING_LEVELS = 4

#: RunConfig's compile-side fields and the ``ir.compile`` options they become.
_COMPILE_SIDE = (
    ("strategy", "strategy"),
    ("dump_passes", "dump_passes"),
    ("dump_ptoas_passes", "dump_ptoas_passes"),
    ("compile_profiling", "profiling"),
    ("diagnostic_phase", "diagnostic_phase"),
    ("disabled_diagnostics", "disabled_diagnostics"),
    ("analyze_auto_scopes_for_deps", "analyze_auto_scopes_for_deps"),
    ("memory_planner", "memory_planner"),
    ("distributed_config", "distributed_config"),
    ("backend_type", "backend_type"),
)

_RING_LIMITS = {  # field: (least, most, power of two)
    "ring_task_window": (1, 1 << 20, True),
    "ring_heap": (256, (1 << 32) - 1, False),
    "ring_dep_pool": (1, (1 << 32) - 1, False),
}


def ring_size(value) -> int | None:
    """The one ring size a ``ring_*`` value gives a stream here (None: the driver's default).

    A stream has one ring for every scope depth, so a per-level list sizes it
    by its largest entry (0 entries keep their default; all 0 is the default).
    """
    if isinstance(value, tuple):
        return max(value) or None
    return value


def _check_level(cfg, fail, name: str, high: int, true_means: int) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool):
        object.__setattr__(cfg, name, true_means if value else 0)
    elif not is_int(value) or not 0 <= value <= high:
        fail(name, f"must be a bool or an int in [0, {high}]")


def _check_dfx_levels(cfg, fail) -> None:
    _check_level(cfg, fail, "enable_chip_swimlane", 4, 4)
    _check_level(cfg, fail, "enable_dump_args", 2, 1)
    value = cfg.enable_pmu
    if isinstance(value, bool):
        object.__setattr__(cfg, "enable_pmu", int(value))
    elif not is_int(value) or value < 0:
        fail("enable_pmu", "must be an int >= 0 (a PMU event type; 0 is off)")
    if cfg.any_dfx_enabled() and not cfg.save_kernels:
        object.__setattr__(cfg, "save_kernels", True)  # as PyPTO: DFX keeps its outputs


def _check_rings(cfg, fail) -> None:
    for name, (low, high, pow2) in _RING_LIMITS.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        what = f"a power of two in [{low}, {high}]" if pow2 else f"an int in [{low}, {high}]"
        if isinstance(value, (list, tuple)):
            value = tuple(value)
            object.__setattr__(cfg, name, value)
            if len(value) != RING_LEVELS:
                fail(name, f"as a list must have {RING_LEVELS} entries (one per scope-depth ring)")
            entries = [v for v in value if not (is_int(v) and v == 0)]
        else:
            entries = [value]
        for v in entries:
            if not is_int(v) or not low <= v <= high or (pow2 and not _power_of_two(v)):
                fail(name, f"must be None, {what}, or a list of {RING_LEVELS} such (0: keep the default)")


def _check_compile_side(cfg, fail) -> None:
    from ..ir.pass_manager import PassDumpLevel  # PyPTO's RunConfig(dump_passes=PassDumpLevel.EXPLICIT)

    if not isinstance(cfg.dump_passes, (bool, int, PassDumpLevel)):
        fail("dump_passes", "must be a bool or a dump level")
    if cfg.distributed_config is not None:
        # ir's DistributedConfig; imported when a config names one
        from ..ir.distributed_compiled_program import as_distributed_config

        as_distributed_config(cfg.distributed_config)  # a DistributedConfig (or a dict of its fields)


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
