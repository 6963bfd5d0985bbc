"""PyPTO's call shapes: in-place and return-style calls, per-call configs, call configs.

A compiled program is called one of two ways, as in PyPTO:

* **in place**: every argument given, outputs included; the outputs are
  written into the arrays passed for them;
* **return style**: only the inputs given (every parameter but the ``Out``
  ones), for a program that returns something; the ``Out`` arrays are
  allocated here (torch tensors when an argument is a torch tensor, else
  numpy arrays) and the call returns them; each holds what the device
  temporary of its parameter holds once the kernel ran.

What a call returns, in sync mode and as the value its :class:`Launch`
awaits to: the outputs of a return-style call (one, or a tuple in parameter
order), as PyPTO; for an in-place call of a program that returns something,
its ``Out``/``InOut`` arguments (PyPTO returns None there); None for a
program that returns nothing.

A call may carry its own :class:`RunConfig` (``config=``), PyPTO's per-call
config.  Its DFX switches apply to that call (:mod:`._dfx`); what sizes the
device (rings, scheduler threads, the device's shape) is the worker's, set
when it opened, so a per-call config that asks for other sizes is refused
rather than ignored.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from .._signature import INOUT, OUT
from ..errors import PtoArgumentError, PtoPlatformMismatch
from ._config import RunConfig, as_run_config, normalize_platform, ring_size
from ._dfx import dfx_call
from ._dispatch import launch_kernel
from ._launch import Launch
from ._state import OPEN

__all__ = ["CallConfig", "ReturnStyle", "out_indices", "result_indices", "complete_args", "check_call_config",
           "build_orch_args", "build_call_config"]

#: Per-call fields that size the device: they must match the worker's config.
_DEVICE_SIZED = ("ring_task_window", "ring_heap", "ring_dep_pool", "aicpu_thread_num")


def out_indices(params) -> tuple[int, ...]:
    """The indices of the pure ``Out`` parameters (PyPTO's ``output_indices``)."""
    return tuple(i for i, p in enumerate(params) if p.direction == OUT)


def result_indices(params) -> tuple[int, ...]:
    """The indices of the ``Out`` and ``InOut`` parameters (what an in-place call returns)."""
    return tuple(i for i, p in enumerate(params) if p.direction in (OUT, INOUT))


def _any_torch_tensor(args) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor = torch.Tensor
    for a in args:
        if isinstance(a, tensor):
            return True
    return False


class ReturnStyle:
    """How return-style calls of one program make their outputs: built once, used per call.

    A new output is a numpy array or (when an argument is a torch tensor) a
    torch tensor of its ``Out`` parameter's shape and dtype.  A torch output
    is ``torch.empty``: the call's copy back writes every byte of it (the
    whole device temporary, :mod:`._group`), so nothing reads it before;
    ``torch.zeros`` of a large tensor filled it on torch's intra-op thread
    pool, and waking that pool cost a call milliseconds on a small, busy
    host.  (Filled through ``.numpy()`` it would not be torch's own memory
    any more: exporting the storage makes it non-resizable, and the runtime
    checks such a tensor's pages for being writeable at every call.)  A
    numpy output is ``np.zeros`` (``calloc``: fresh pages, no fill).

    The allocators are bound once per parameter, with the shape as
    separate ints: torch parses ``torch.empty(128, 128, dtype=...)`` in
    about a third of the time of ``torch.empty((128, 128), dtype=...)``, a
    good part of what a small output's return-style call costs over the
    in-place one.
    """

    __slots__ = ("params", "outs", "nin", "tail", "_np", "_torch")

    def __init__(self, params):
        self.params = params
        self.outs = out_indices(params)
        self.nin = len(params) - len(self.outs)
        # The usual signature: the outputs after every input, so a call's arguments are args + outputs.
        self.tail = self.outs == tuple(range(self.nin, len(params)))
        self._np = tuple(partial(np.zeros, params[i].shape, params[i].dtype.np_storage) for i in self.outs)
        self._torch = None  # made at the first call with torch tensors (torch may be imported later)

    def _torch_makers(self) -> tuple:
        torch = sys.modules["torch"]
        makers = []
        for i in self.outs:
            p = self.params[i]
            dtype = getattr(torch, p.dtype.np_name)
            makers.append(partial(torch.empty, *p.shape, dtype=dtype) if p.shape
                          else partial(torch.empty, (), dtype=dtype))
        self._torch = makers = tuple(makers)
        return makers

    def complete(self, args: tuple) -> tuple[tuple, tuple]:
        """``(every argument, the new outputs)`` for the inputs `args` (``len(args) == nin``)."""
        if _any_torch_tensor(args):
            makers = self._torch or self._torch_makers()
        else:
            makers = self._np
        new = tuple([make() for make in makers])
        if self.tail:
            return args + new, new
        full = list(args)
        for i, out in zip(self.outs, new):
            full.insert(i, out)
        return tuple(full), new

    def value(self, new: tuple):
        """What the call returns: its one output, or all of them in parameter order."""
        return new[0] if len(new) == 1 else new


def return_style(params, has_return: bool) -> ReturnStyle | None:
    """The :class:`ReturnStyle` of a program, or None if it takes no return-style calls."""
    if not has_return or not out_indices(params):
        return None
    return ReturnStyle(tuple(params))


def complete_args(params, has_return: bool, args: tuple, name: str) -> tuple[tuple, bool]:
    """Return ``(all arguments, return_style)`` for a call with `args`.

    Raises
    ------
    PtoArgumentError
        For a count that is neither every parameter nor (for a program that
        returns something) every parameter but the ``Out`` ones.
    """
    n = len(params)
    outs = out_indices(params)
    if len(args) == n:
        return tuple(args), False
    if has_return and outs and len(args) == n - len(outs):
        return ReturnStyle(tuple(params)).complete(tuple(args))[0], True
    names = ", ".join(p.name for p in params)
    forms = f"{n} (in place)" + (f" or {n - len(outs)} (return style)" if has_return and outs else "")
    raise PtoArgumentError(f"{name} takes {forms} argument(s) ({names}), got {len(args)}")


def returned(params, has_return: bool, full: tuple, return_style: bool):
    """What a call returns once it completed (see the module doc)."""
    if not has_return:
        return None
    idx = out_indices(params) if return_style else result_indices(params)
    if not idx:
        return None
    if len(idx) == 1:
        return full[idx[0]]
    return tuple(full[i] for i in idx)


def check_call_config(worker, config) -> RunConfig:
    """Validate a per-call `config` against `worker`; return it as a RunConfig.

    Raises
    ------
    PtoPlatformMismatch
        If its platform is not the worker's.
    PtoArgumentError
        If its device id differs from the worker's, or it sizes the device
        (rings, ``aicpu_thread_num``) otherwise than the worker was opened
        with: those are fixed when the worker opens.
    """
    cfg = as_run_config(config)
    wcfg = worker._config
    if normalize_platform(cfg.platform) != worker._platform:
        raise PtoPlatformMismatch(f"config= is for platform {cfg.platform!r}, but this worker runs "
                                  f"{wcfg.platform!r}")
    if cfg.device_id != wcfg.device_id:
        raise PtoArgumentError(f"config=: device_id {cfg.device_id} is not this worker's ({wcfg.device_id}); "
                               "dispatch on a ChipWorker of that device")
    for name in _DEVICE_SIZED:
        mine, theirs = getattr(cfg, name), getattr(wcfg, name)
        if name.startswith("ring_"):
            mine, theirs = ring_size(mine), ring_size(theirs)
        if mine is not None and mine != theirs:
            raise PtoArgumentError(
                f"config=: {name}={getattr(cfg, name)!r} differs from the worker's {getattr(wcfg, name)!r}; "
                f"the device is sized when the worker opens: open the ChipWorker with "
                f"RunConfig({name}={getattr(cfg, name)!r})")
    return cfg


def build_orch_args(compiled, args: tuple) -> tuple[tuple, list, bool]:
    """PyPTO's ``CompiledProgram.build_orch_args``: ``(orch_args, coerced, return_style)``.

    ``coerced`` lists every argument in parameter order, with the ``Out``
    arrays of a return-style call allocated (read them after the launch);
    ``orch_args`` is the same as a tuple, ready for ``w.run(compiled,
    *orch_args)`` (the driver's argument slots are made per launch, on the
    worker's stream).  Shapes and dtypes are checked when it launches.
    """
    name = str(getattr(compiled, "name", None) or compiled.symbol)
    full, return_style = complete_args(compiled.params, bool(compiled.has_return), tuple(args), name)
    return full, list(full), return_style


@dataclass(frozen=True)
class CallConfig:
    """What one dispatch runs with (PyPTO's ``CallConfig``): from :func:`build_call_config`.

    ``aicpu_thread_num`` and the ``ring_*`` sizes are the effective ones
    (None: the driver's default); the DFX fields are the levels;
    ``output_prefix`` is where the call's DFX outputs go (None: no DFX).
    """

    aicpu_thread_num: int | None = None
    enable_chip_swimlane: int = 0
    enable_dump_args: int = 0
    enable_pmu: int = 0
    enable_dep_gen: bool = False
    enable_scope_stats: bool = False
    ring_task_window: int | None = None
    ring_heap: int | None = None
    ring_dep_pool: int | None = None
    output_prefix: str | None = None


def build_call_config(compiled, config=None, *, aicpu_thread_num: int | None = None,
                      dfx_dir=None) -> CallConfig:
    """PyPTO's ``CompiledProgram.build_call_config``.

    ``aicpu_thread_num``: the keyword, else the config's field, else the
    program's ``runtime_config``; `dfx_dir` becomes ``output_prefix``.
    """
    cfg = as_run_config(config)
    threads = aicpu_thread_num if aicpu_thread_num is not None else cfg.aicpu_thread_num
    if threads is None:
        threads = (getattr(compiled, "runtime_config", None) or {}).get("aicpu_thread_num")
    fields: dict[str, Any] = {name: getattr(cfg, name) for name in (
        "enable_chip_swimlane", "enable_dump_args", "enable_pmu", "enable_dep_gen", "enable_scope_stats")}
    for name in ("ring_task_window", "ring_heap", "ring_dep_pool"):
        fields[name] = ring_size(getattr(cfg, name))
    return CallConfig(aicpu_thread_num=threads, output_prefix=None if dfx_dir is None else str(dfx_dir),
                      **fields)


def call(h, args: tuple, stream, config):
    """``handle(*args, config=...)`` and malformed calls: the handle's slower path.

    Completes the arguments, checks the per-call config, hands a call with
    DFX switches on to :mod:`._dfx`, and launches; returns what the handle
    returns (see the module doc).
    """
    worker = h._worker
    worker._check_open()
    cfg = None if config is None else check_call_config(worker, config)
    params = h._binder.params
    full, return_style = complete_args(params, h._has_return, tuple(args), h._name)
    if cfg is not None and cfg.any_dfx_enabled():
        return dfx_call(h, full, returned(params, h._has_return, full, return_style), stream, cfg)
    launch = launch_kernel(worker, h, full, stream, False)
    if type(launch) is not Launch:  # a node of a graph capture
        return launch
    launch._out = returned(params, h._has_return, full, return_style)
    return launch if worker._async else launch._out


def call_returning(h, rs: ReturnStyle, args: tuple, stream):
    """A return-style call without a config: `h`'s :class:`ReturnStyle` makes the outputs (see :func:`call`)."""
    worker = h._worker
    if worker._state != OPEN:
        worker._check_open()  # before anything is allocated
    full, new = rs.complete(args)
    launch = launch_kernel(worker, h, full, stream, False)
    if type(launch) is not Launch:  # a node of a graph capture
        return launch
    if h._out_idx != rs.outs:  # an InOut parameter too: the launch holds the in-place result
        launch._out = rs.value(new)
    return launch if worker._async else launch._out
