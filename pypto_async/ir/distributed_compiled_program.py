"""Multi-chip (L3) programs compiled: :class:`DistributedConfig` and :class:`DistributedCompiledProgram`.

``host_fn.compile(*args, config=RunConfig(distributed_config=DistributedConfig(device_ids=[0, 1])))``
(a ``@pl.jit.host`` function) and ``ir.compile(ProgramClass, distributed_config=...)`` (a
``@pl.program`` with a HOST orchestrator) trace the host program into a plan
(:mod:`pypto_async.language.distributed_host`): its dispatches, each traced
for its rank and cut at its cross-rank operations into single-chip
segments compiled as any other program, and its SubWorker callbacks.

Run a plan with ``compiled(*args)`` (on devices opened for the call),
``compiled.prepare(callbacks={...})`` (a
:class:`~pypto_async.runtime.DistributedWorker` kept open: ``rt(*args)``,
``rt.run(compiled, *args)``) or ``DistributedWorker([c1, c2])`` for several
programs on one worker.  The runner is
:mod:`pypto_async.runtime.distributed_runner`.
"""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .._scalars import is_int
from .._signature import PLATFORMS, SCALAR
from ..errors import PtoArgumentError, PtoCompileError
from ._compile import compile as _compile_one
from ._passes import run_passes

__all__ = ["DistributedConfig", "DistributedCompiledProgram", "compile_host", "compile_program"]


@dataclass(frozen=True)
class DistributedConfig:
    """Which devices a multi-chip program runs on, as PyPTO names it.

    Parameters
    ----------
    device_ids : sequence of int
        One device per rank, distinct (rank ``r`` runs on ``device_ids[r]``).
    num_sub_workers : int
        How many host SubWorker processes PyPTO forks for callbacks; here
        callbacks run in this process, on the calling thread, so only
        ``>= 0`` is checked (and a program with callbacks needs ``>= 1``, as
        in PyPTO).
    runtime : str
        PyPTO's runtime flavour (``"tensormap_and_ringbuffer"``, its default); there is one runtime
        here, so any name is taken and chooses nothing.
    aicpu_thread_num : int
        PyPTO's scheduler threads per chip: ``0`` (the default) or at least 2, checked as PyPTO
        checks it; the simulator's scheduler threads are ``RunConfig.aicpu_thread_num``'s.
    """

    device_ids: tuple = (0,)
    num_sub_workers: int = 0
    runtime: str = "tensormap_and_ringbuffer"
    aicpu_thread_num: int = 0
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        ids = self.device_ids
        if not isinstance(ids, (list, tuple)) or not ids or not all(is_int(d) and d >= 0 for d in ids):
            raise PtoArgumentError(f"DistributedConfig(device_ids=...) takes a non-empty list of device ids >= 0, "
                                   f"got {ids!r}")
        if len(set(ids)) != len(ids):
            raise PtoArgumentError(f"DistributedConfig(device_ids=...) must be distinct, got {list(ids)}")
        object.__setattr__(self, "device_ids", tuple(int(d) for d in ids))
        n = self.num_sub_workers
        if not is_int(n) or n < 0:
            raise PtoArgumentError(f"DistributedConfig(num_sub_workers=...) must be an int >= 0, got {n!r}")
        if not isinstance(self.runtime, str) or not self.runtime:
            raise PtoArgumentError(f"DistributedConfig(runtime=...) names a runtime (a str), got {self.runtime!r}")
        t = self.aicpu_thread_num
        if not is_int(t) or t < 0 or t == 1:
            raise PtoArgumentError(f"DistributedConfig(aicpu_thread_num=...) must be 0 (the default) or at least 2, "
                                   f"got {t!r}")

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return len(self.device_ids)


def as_distributed_config(dc) -> DistributedConfig:
    """`dc` as a DistributedConfig (a dict of its fields is accepted)."""
    if isinstance(dc, DistributedConfig):
        return dc
    if isinstance(dc, dict):
        return DistributedConfig(**dc)
    raise PtoArgumentError(f"distributed_config must be a DistributedConfig, got {type(dc).__name__}")


class DistributedCompiledProgram:
    """A compiled multi-chip program: its host plan and every rank's compiled segments.

    Call it with the host function's arguments (``compiled(x, y)``) to run it
    once, on a :class:`~pypto_async.runtime.DistributedWorker` opened for the
    call; :meth:`prepare` opens one to keep.  ``output_dir`` holds
    ``plan.json``, the plan in words (ranks, segments, cross-rank operations).
    """

    def __init__(self, name, params, trace, config: DistributedConfig, platform: str, output_dir: Path,
                 callbacks=(), returned=None, sub_workers=()):
        self.name = name
        #: The host function's parameters (shapes and dtypes of the compile-time arguments).
        self.params = tuple(params)
        self.param_names = [p.name for p in self.params]
        self.distributed_config = config
        self.platform = platform
        self.device_ids = config.device_ids
        self.world_size = config.world_size
        self.steps = tuple(trace.steps)  # Dispatch and Callback, in order
        self.windows = tuple(trace.windows)
        #: The SubWorker callbacks whose body is ``...``: ``prepare(callbacks=)`` must bind each.
        self.callback_names = tuple(callbacks)
        #: Every SubWorker of the program (a ``prepare(callbacks=)`` entry may replace a concrete one's body).
        self.sub_worker_names = tuple(dict.fromkeys((*sub_workers, *callbacks)))
        self.returned = returned
        self.output_dir = Path(output_dir)
        self._write_plan()
        # the runtime sits above ir; imported when used
        from ..runtime.distributed_runner import prepare_kernels

        prepare_kernels(self)

    def __repr__(self) -> str:
        return (f"<DistributedCompiledProgram {self.name} on devices {list(self.device_ids)}: "
                f"{len(self.steps)} steps>")

    @property
    def dispatches(self) -> tuple:
        """The per-rank dispatches, in host program order."""
        return tuple(s for s in self.steps if hasattr(s, "rank"))

    def plan(self) -> dict:
        """The plan as data: per dispatch its rank and steps (segments by name, operations by kind)."""
        # the language imports ir; this one is imported when used
        from ..language.distributed_trace import CommOp

        out = {"name": self.name, "device_ids": list(self.device_ids),
               "windows": [{"shape": list(w.shape), "dtype": w.dtype.name, "bytes": w.nbytes} for w in self.windows],
               "steps": []}
        for s in self.steps:
            if hasattr(s, "rank"):
                items = []
                for st in s.compiled:
                    if isinstance(st, CommOp):
                        items.append({"op": st.kind, "window": st.tensor, "peer": st.peer, "offsets": list(st.offsets),
                                      "mode": st.mode})
                    else:
                        items.append({"segment": st.name, "artifact": str(st.output_dir)})
                out["steps"].append({"dispatch": s.name, "rank": s.rank, "steps": items})
            elif hasattr(s, "args"):
                out["steps"].append({"callback": s.name, "args": len(s.args)})
            else:  # a collective of the host orchestrator
                out["steps"].append({"collective": s.kind, "window": None if s.target is None else s.target.buffer.index,
                                     "source": None if s.source is None else s.source.buffer.index,
                                     "mode": s.mode, "root": s.root})
        return out

    def _write_plan(self) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "plan.json").write_text(json.dumps(self.plan(), indent=2))
        self._write_collective_builds()

    def _write_collective_builds(self) -> None:
        """One ``next_levels/<variant>/kernel_config.py`` per distinct host collective (PyPTO's layout).

        The file says what runs for that variant here: the collective, its
        reduction / root, its dtype and the ranks; the work itself is the
        driver's (see :mod:`pypto_async.runtime._collectives`), so no kernel
        source is written beside it.
        """
        seen = {}
        for s in self.steps:
            variant = getattr(s, "variant", None)
            if variant is not None and variant not in seen:
                seen[variant] = s
        for variant, s in seen.items():
            d = self.output_dir / "next_levels" / variant
            d.mkdir(parents=True, exist_ok=True)
            view = s.target if s.target is not None else s.source
            config = {"variant": variant, "collective": f"pld.tensor.{s.kind}", "mode": "ring" if s.ring else "mesh",
                      "reduce_op": s.mode or None, "root": s.root if s.kind == "broadcast" else None,
                      "dtype": None if view is None else view.dtype.name,
                      "shape": None if view is None else list(view.shape),
                      "world_size": self.world_size, "device_ids": list(self.device_ids),
                      "runs_as": "pypto_async driver collective between the dispatches around it"}
            lines = [f'"""{variant}: the chip-level build of one host collective of {self.name} (pypto_async)."""', ""]
            lines += [f"{k.upper()} = {v!r}" for k, v in config.items()]
            (d / "kernel_config.py").write_text("\n".join(lines) + "\n")

    def check_args(self, args) -> None:
        """Check `args` against the compiled signature (before anything is queued)."""
        # the runtime sits above ir; imported when used
        from ..runtime.distributed_runner import check_args

        check_args(self, args)

    def __call__(self, *args, config=None):
        """Run the program once on its devices, opened for this call; outputs land in the host arrays."""
        # the runtime sits above ir; imported when used
        from ..runtime._distributed import DistributedWorker

        self._check_call(args, config)
        with DistributedWorker(self.device_ids, self._run_config(config)) as dw:
            return dw.run(self, *args)

    async def run_async(self, *args, config=None):
        """:meth:`__call__` awaited: run once on devices opened in async mode, without blocking the event loop.

        Under asyncio, or trio (through anyio); outputs land in the host
        arrays, as with a call.  Arguments are checked before anything is
        queued.
        """
        # the runtime sits above ir; imported when used
        from ..runtime._distributed import DistributedWorker

        self._check_call(args, config)
        async with DistributedWorker(self.device_ids, self._run_config(config)) as dw:
            return await dw.run(self, *args)

    def _check_call(self, args, config) -> None:
        """A one-shot run's checks: its config, its arguments, no callback left to bind."""
        self._check_config(config)
        self.check_args(args)
        if self.callback_names:
            raise PtoArgumentError(f"{self.name}: callback(s) {', '.join(self.callback_names)} are bound at "
                                   f"prepare(callbacks={{...}}); run the program through what prepare() returns")

    def _run_config(self, config):
        # the runtime sits above ir; imported when used
        from ..runtime._config import as_run_config

        cfg = as_run_config(config)
        return cfg.replace(distributed_config=None, platform=self.platform)

    def _check_config(self, config) -> None:
        if config is None:
            return
        # the runtime sits above ir; imported when used
        from ..runtime._config import as_run_config

        cfg = as_run_config(config)
        if PLATFORMS.get(cfg.platform, cfg.platform) != PLATFORMS.get(self.platform, self.platform):
            raise PtoArgumentError(f"{self.name} was compiled for platform {self.platform!r}, run with "
                                   f"{cfg.platform!r}")
        dc = cfg.distributed_config
        if dc is not None and as_distributed_config(dc).device_ids != self.device_ids:
            raise PtoArgumentError(f"{self.name} was compiled for devices {list(self.device_ids)}, run with "
                                   f"{list(as_distributed_config(dc).device_ids)}")

    def prepare(self, config=None, *, extra_compiled=(), persistent: bool = False,
                reset_persistent_windows: bool | None = None, callbacks=None, sub_worker_overrides=None,
                startup_timeout_s: float | None = None):
        """Open a DistributedWorker with this program (and `extra_compiled`) prepared on it.

        Parameters
        ----------
        config : RunConfig, optional
            The run settings (as PyPTO's, it may also be given to each call).
        callbacks : dict, optional
            ``{name: fn}`` for every SubWorker whose body is ``...``; `fn`
            receives the call's tensor arguments (see
            :func:`pypto_async.runtime.distributed_runner._tensor_from_continuous`).
            An entry may also replace a concrete SubWorker's body.
        sub_worker_overrides : dict, optional
            PyPTO's older name for `callbacks` (give one of the two).
        persistent : bool
            Keep the program's window buffers across its runs on this worker
            (PyPTO's retained CommDomains) instead of allocating them per run.
        reset_persistent_windows : bool, optional
            With `persistent`, zero the kept windows before each run (the
            default, ``None``, does); ``False`` leaves them as the last run
            left them (a self-clearing signal protocol keeps them zero).
        startup_timeout_s : float, optional
            Accepted for PyPTO's signature (a positive finite number): the
            devices here start in this process, with nothing to wait for.

        Raises
        ------
        PtoArgumentError
            (a ``ValueError``) for a runtime-bound callback left unbound, or
            a name that is no callback of the program.
        """
        # the runtime sits above ir; imported when used
        from ..runtime._distributed import DistributedWorker

        if callbacks is not None and sub_worker_overrides is not None:
            raise PtoArgumentError("prepare(): give callbacks= or its older name sub_worker_overrides=, not both")
        if sub_worker_overrides is not None:
            callbacks = sub_worker_overrides
        if startup_timeout_s is not None and (isinstance(startup_timeout_s, bool) or not isinstance(
                startup_timeout_s, (int, float)) or not 0 < startup_timeout_s < float("inf")):
            raise PtoArgumentError(f"prepare(startup_timeout_s=) must be a positive finite number, got "
                                   f"{startup_timeout_s!r}")
        for name, v in (("persistent", persistent), ("reset_persistent_windows", reset_persistent_windows)):
            if not isinstance(v, bool) and not (v is None and name != "persistent"):
                raise PtoArgumentError(f"prepare({name}=) must be a bool, got {v!r}")
        return DistributedWorker([self, *extra_compiled], self._run_config(config), callbacks=callbacks,
                                 persistent=persistent, reset_persistent_windows=reset_persistent_windows)


def _output_dir(output_dir, name: str) -> Path:
    if output_dir is not None:
        return Path(output_dir)
    return Path(tempfile.mkdtemp(prefix=f"pypto_l3_{name}_"))


def _compiler(platform: str, kwargs: dict):
    def compile_fn(program):
        return _compile_one(run_passes(program), platform=platform, **kwargs)

    return compile_fn


def compile_host(host_fn, args, kwargs, *, config=None, platform=None, output_dir=None) -> DistributedCompiledProgram:
    """Compile a ``@pl.jit.host`` function for `args` (see :meth:`HostFunction.compile`)."""
    # the language imports ir; this one is imported when used
    from ..language.distributed_host import host_params, trace_host
    # the runtime sits above ir; imported when used
    from ..runtime._config import as_run_config

    cfg = as_run_config(config)
    platform = platform or cfg.platform
    dc = as_distributed_config(cfg.distributed_config) if cfg.distributed_config is not None else \
        DistributedConfig(device_ids=[cfg.device_id])
    opts = {k: v for k, v in cfg.compile_kwargs().items() if k not in ("distributed_config", "output_dir")}
    opts.update(kwargs)
    args = _bind(host_fn, args)
    dims: dict = {}
    params = host_params(host_fn.fn, host_fn._names, args, host_fn.__name__, host_fn._loc, dims=dims)
    scalars = {p.name: a for p, a in zip(params, args) if p.direction == SCALAR}
    key = (tuple(params), platform, dc, repr(sorted(opts.items())), tuple(sorted(scalars.items())))
    if output_dir is None and key in host_fn._compiled:
        return host_fn._compiled[key]
    trace, result = trace_host(host_fn.__name__, host_fn.fn, None, params, dc.device_ids,
                               _compiler(platform, opts), scalars,
                               lambda d: dims[id(d)][1] if id(d) in dims else None)
    compiled = DistributedCompiledProgram(host_fn.__name__, params, trace, dc, platform,
                                          _output_dir(output_dir, host_fn.__name__), returned=result)
    if output_dir is None:
        host_fn._compiled[key] = compiled
    return compiled


def _bind(host_fn, args):
    return tuple(args)


def compile_program(program_def, platform: str = "sim", output_dir=None, *, distributed_config=None, **kwargs):
    """``ir.compile(ProgramClass, distributed_config=...)`` of a ``@pl.program`` with a HOST orchestrator.

    Nothing is traced until the program is run: a host orchestrator's
    tensors take their shapes from its annotations, so the plan is traced
    here from them.
    """
    # the language imports ir; this one is imported when used
    from ..language.distributed_host import Role, host_params, trace_host

    dc = as_distributed_config(distributed_config) if distributed_config is not None else DistributedConfig()
    host = getattr(program_def, "host_functions", {})
    orch = [f for f in host.values() if getattr(f, "role", None) is Role.Orchestrator]
    if len(orch) != 1:
        raise PtoCompileError(f"{program_def.name}: a distributed @pl.program has one "
                              f"@pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator); found {len(orch)}")
    orch = orch[0]
    subs = {n: f for n, f in host.items() if getattr(f, "role", None) is Role.SubWorker}
    bound = tuple(n for n, f in subs.items() if f.requires_runtime_binding)
    if subs and dc.num_sub_workers < 1:
        raise PtoArgumentError(f"{program_def.name}: SubWorker(s) {', '.join(subs)} run on sub workers; give "
                               f"DistributedConfig(num_sub_workers=) at least 1")
    names = orch.param_names()
    anns = orch.annotations()
    for n in names:
        a = anns.get(n)
        if getattr(a, "shape", None) is None and not hasattr(a, "dtype"):
            raise PtoCompileError(f"{program_def.name}.{orch.name}: parameter {n!r} needs a pl.Tensor[[shape], "
                                  f"dtype] annotation (a @pl.program is compiled from its annotations)")
    import numpy as np

    # the language imports ir; this one is imported when used
    from ..language._placement import dim_value

    samples = []
    for n in names:
        a = anns[n]
        if getattr(a, "shape", None) is None:
            samples.append(0)
        else:  # a pl.dynamic dimension of the orchestrator's (PyPTO's NR = pl.dynamic("world_size")): the rank count
            shape = tuple(dim_value(d, lambda _: dc.world_size) for d in a.shape)
            samples.append(np.zeros(shape, a.dtype.np_storage))
    params = host_params(orch.fn, names, samples, orch.name, orch.loc, anns=anns)
    opts = {k: v for k, v in kwargs.items()}
    me = _HostSelf(program_def, subs)
    trace, result = trace_host(program_def.name, orch.fn, me, params, dc.device_ids, _compiler(platform, opts), {},
                               lambda _: dc.world_size)  # as its annotations' dims: the rank count
    return DistributedCompiledProgram(program_def.name, params, trace, dc, platform,
                                      _output_dir(output_dir, program_def.name), callbacks=bound, returned=result,
                                      sub_workers=tuple(subs))


@functools.wraps(_compile_one)
def compile(program, platform: str = "sim", output_dir=None, **kwargs):  # noqa: A001
    """``ir.compile``: a ``@pl.program`` with HOST functions (or given ``distributed_config``) is a multi-chip one."""
    if getattr(program, "__pl_program__", False) and (getattr(program, "host_functions", None)
                                                       or kwargs.get("distributed_config") is not None):
        return compile_program(program, platform, output_dir, **kwargs)
    return _compile_one(program, platform, output_dir, **kwargs)


class _HostSelf:
    """The ``self`` a HOST orchestrator sees: chip orchestrations (dispatches) and SubWorkers (callbacks)."""

    def __init__(self, program_def, subs):
        self._def = program_def
        self._subs = subs

    def __getattr__(self, name):
        # the language imports ir; this one is imported when used
        from ..language.distributed_host import Callback, HostTensor, host_active, record_dispatch

        subs = self.__dict__["_subs"]
        pdef = self.__dict__["_def"]
        if name in subs:
            f = subs[name]

            def call(*args):
                h = host_active()
                for a in args:
                    if not isinstance(a, HostTensor):
                        raise PtoCompileError(f"{name}(...): a SubWorker takes the host program's tensors, "
                                              f"got {a!r}")
                h.steps.append(Callback(name, tuple(args), None if f.requires_runtime_binding else f.fn))

            return call
        chip = pdef.chip_orchestration(name)
        if chip is None:
            raise AttributeError(f"{pdef.name} has no chip orchestration or SubWorker {name!r}")

        def dispatch(*args, device=None):
            # the language imports ir; this one is imported when used
            from ..language._tracer import user_loc
            # the language imports ir; this one is imported when used
            from ..language.distributed_host import _rank_of

            h = host_active()
            loc = user_loc()
            rank = _rank_of(h, device, loc)
            sub = pdef.with_entry(name).bind(*args)  # pl.dynamic dims take this dispatch's extents
            fn_names = sub.orchestration.param_names()
            if len(args) != len(fn_names):
                raise PtoCompileError(f"{name} takes {len(fn_names)} arguments, got {len(args)}")
            d = record_dispatch(h, name, rank, fn_names, args, sub.trace, loc)
            ret = d.segmented.program.ret
            if not ret:
                return None
            vals = [d.args.get(n.strip()) for n in ret.split(",")]
            return vals[0] if len(vals) == 1 else tuple(vals)

        return dispatch
