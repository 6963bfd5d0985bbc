"""run(): PyPTO's system-test harness: compile, run, and compare against a golden.

``run(program, *tensors, config=cfg, golden=fn)`` does what PyPTO's harness
does with a test case, and is the path on which the harness fields of
:class:`RunConfig` act:

1. **compile** `program` (a ``@pl.program`` class, an ``ir.Program``, a
   ``@pl.jit`` function, specialised for `tensors`, or a compiled program)
   for ``cfg.platform`` with the config's compile-side fields.  With
   ``save_kernels`` (set by any DFX switch) the artifacts are written to
   ``save_kernels_dir``, else to ``build_output/<name>_<timestamp>/`` in
   the current directory; without it they stay in the kernel cache.
2. **inputs**: with ``golden_data_dir`` set, the tensors are saved there
   (``in/<param>.pt``, or ``.npy`` without torch) unless the directory holds
   them already, in which case they are read from it: a later run reuses the
   same data.
3. **golden**: ``golden(tensors)`` (PyPTO's ``compute_golden(tensors,
   params)`` form is taken too) gets every argument by parameter name, as
   copies, and writes the expected outputs into the output tensors in
   place.  With ``golden_data_dir`` the expected outputs are kept as
   ``out/<param>.pt`` and, when all are present, read instead of calling
   `golden`.
4. **run** on the innermost open worker of the config's platform and device,
   else on one opened with the config (the config's DFX switches apply),
   unless ``codegen_only``: then nothing is dispatched.
5. **compare** each output (the ``Out`` and ``InOut`` parameters, or those
   named in `outputs`) with ``|actual - expected| <= atol + rtol *
   |expected|``.

It returns a :class:`RunResult` (PyPTO's): ``passed``, ``error`` (the first
mismatching output, or a compile or launch failure, which are reported, not
raised), the largest absolute and relative errors, the mismatch count and a
sample of mismatching indices, and ``execution_time``: the wall clock of the
whole run in seconds, compile and golden included (time the device with
:func:`benchmark`).  Bad arguments to ``run`` itself raise.
"""

from __future__ import annotations

import datetime
import inspect
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import PtoArgumentError, PtoError
from ._call import complete_args, result_indices
from ._config import as_run_config
from ._entry import dispatch
from ._tensor import DeviceTensor

__all__ = ["run", "RunResult"]

_SAMPLE = 10  # mismatching indices kept in a RunResult


@dataclass
class RunResult:
    """What :func:`run` found (PyPTO's fields).

    ``execution_time`` is seconds of wall clock for the whole run (compile,
    golden, dispatch, compare); ``profile`` holds the seconds of each of
    those stages.
    """

    __test__ = False  # not a pytest test class

    passed: bool
    test_name: str | None = None
    error: str | None = None
    execution_time: float | None = None
    profile: dict[str, Any] | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_count: int = 0
    mismatch_indices: list[tuple] | None = None

    def __str__(self) -> str:
        took = f" ({self.execution_time:.2f}s)" if self.execution_time else ""
        if self.passed:
            return (f"PASS: {self.test_name}" if self.test_name else "PASS") + took
        msg = f"FAIL: {self.test_name}" if self.test_name else "FAIL"
        if self.error:
            msg += f" - {self.error}" if self.test_name else f": {self.error}"
        return msg + took


def _compile(program, tensors, cfg, output_dir):
    from .. import ir  # upward, the runtime's one arrow into ir: run() compiles what it is given

    options = {**cfg.compile_options(), "output_dir": output_dir}
    if hasattr(program, "lib_path") and hasattr(program, "params"):
        return program  # already compiled
    if hasattr(program, "lower") and hasattr(program, "trace") and not getattr(program, "__pl_program__", False):
        return program.compile(*tensors, platform=cfg.platform, **options)  # a @pl.jit function
    if getattr(program, "__pl_program__", False) and hasattr(program, "bind"):
        program = program.bind(*tensors)  # a @pl.program's pl.dynamic dimensions take the tensors' extents
    return ir.compile(program, platform=cfg.platform, **options)


def _name_of(program) -> str:
    return str(getattr(program, "name", None) or getattr(program, "__name__", None) or type(program).__name__)


def _work_dir(cfg, name: str) -> str | None:
    if not cfg.save_kernels:
        return None
    if cfg.save_kernels_dir is not None:
        return str(cfg.save_kernels_dir)
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S_%f")
    return str(Path.cwd() / "build_output" / f"{name}_{stamp}")


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _copy(x):
    if isinstance(x, DeviceTensor):
        return x.numpy()
    if _is_torch(x):
        return x.detach().clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    return x  # a scalar


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, DeviceTensor):
        return x.numpy()
    if _is_torch(x):
        torch = sys.modules["torch"]
        t = x.detach().cpu()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return np.asarray(x)


class _DataDir:
    """``golden_data_dir``: ``in/`` and ``out/`` tensors, ``.pt`` with torch, else ``.npy``."""

    def __init__(self, root):
        self.root = Path(root)
        self.torch = sys.modules.get("torch")

    def _path(self, kind: str, name: str) -> Path:
        return self.root / kind / f"{name}{'.pt' if self.torch is not None else '.npy'}"

    def load(self, kind: str, names) -> dict | None:
        paths = {n: self._path(kind, n) for n in names}
        if not paths or not all(p.is_file() for p in paths.values()):
            return None
        if self.torch is not None:
            return {n: self.torch.load(p, weights_only=True) for n, p in paths.items()}
        return {n: np.load(p) for n, p in paths.items()}

    def save(self, kind: str, tensors: dict) -> None:
        (self.root / kind).mkdir(parents=True, exist_ok=True)
        for name, t in tensors.items():
            path = self._path(kind, name)
            if self.torch is not None:
                self.torch.save(t if _is_torch(t) else self.torch.from_numpy(np.asarray(t)), path)
            else:
                np.save(path, _as_numpy(t))


def _call_golden(golden, tensors: dict) -> None:
    try:
        nparams = len(inspect.signature(golden).parameters)
    except (TypeError, ValueError):
        nparams = 1
    if nparams >= 2:
        golden(tensors, {"name": "Default"})
    else:
        golden(tensors)


def _restore(dst, src) -> None:
    """Write `src`'s values into the host array or DeviceTensor `dst` (the golden-data inputs)."""
    if isinstance(dst, DeviceTensor):
        dst.worker.copy_to(dst.data_ptr, np.ascontiguousarray(_as_numpy(src)).astype(dst.dtype.np_storage), dst.nbytes)
    elif _is_torch(dst):
        dst.copy_(src if _is_torch(src) else sys.modules["torch"].from_numpy(np.asarray(src)))
    elif isinstance(dst, np.ndarray):
        dst[...] = _as_numpy(src)


def _compare(name, actual, expected, rtol, atol) -> dict:
    a = _as_numpy(actual).astype(np.float64)
    e = _as_numpy(expected).astype(np.float64)
    if a.shape != e.shape:
        return {"error": f"output {name!r}: shape {a.shape}, golden {e.shape}", "count": a.size}
    diff = np.abs(a - e)
    bad = ~(diff <= atol + rtol * np.abs(e))  # NaN compares false: a NaN output is a mismatch
    rel = np.where(e != 0, diff / np.abs(np.where(e != 0, e, 1)), np.where(diff != 0, np.inf, 0))
    out = {"max_abs": float(np.nanmax(diff)) if diff.size else 0.0,
           "max_rel": float(np.nanmax(rel)) if rel.size else 0.0,
           "count": int(bad.sum()),
           "indices": [tuple(int(i) for i in ix) for ix in zip(*np.nonzero(bad))][:_SAMPLE]}
    if np.isnan(a).any() and not out["count"]:
        out["count"] = int(np.isnan(a).sum())
    if out["count"]:
        out["error"] = (f"output {name!r}: {out['count']} of {a.size} elements differ from the golden beyond "
                        f"rtol={rtol}, atol={atol} (max abs error {out['max_abs']:.3e})")
    return out


def run(program, *tensors, config=None, golden=None, outputs=None, test_name: str | None = None) -> RunResult:
    """Compile `program`, run it with `tensors`, compare with `golden` (see the module doc).

    Parameters
    ----------
    program
        A ``@pl.program`` class, an ``ir.Program``, a ``@pl.jit`` function or
        a compiled program.
    *tensors
        Its arguments in parameter order (host arrays, DeviceTensors,
        scalars); the inputs alone for a return-style call.
    config : RunConfig or dict, optional
        The platform, the compile side, the DFX switches and the harness
        fields ``rtol``, ``atol``, ``golden_data_dir``, ``save_kernels``,
        ``save_kernels_dir`` and ``codegen_only``.
    golden : callable, optional
        ``golden(tensors)`` or ``golden(tensors, params)``: writes the
        expected outputs into `tensors` (by parameter name) in place.
        Without one, nothing is compared.
    outputs : iterable of str, optional
        The parameters to compare (default: the ``Out`` and ``InOut`` ones).
    test_name : str, optional
        Carried into the result.

    Returns
    -------
    RunResult
        Or, given no tensors (and no `golden` or `outputs`), the compiled
        program itself, as PyPTO's ``run(program, config=...)`` returns it:
        call it with the tensors (``compiled(*tensors, config=...)``); a
        compile error is raised then.

    Raises
    ------
    PtoArgumentError
        For a bad config, a `golden` that is not callable, or an output name
        that is not a parameter.
    """
    t_start = time.perf_counter()
    cfg = as_run_config(config)
    if golden is not None and not callable(golden):
        raise PtoArgumentError(f"run(): golden must be callable, not {type(golden).__name__}")
    name = _name_of(program)
    profile: dict[str, float] = {}

    def done(**fields) -> RunResult:
        return RunResult(test_name=test_name, execution_time=time.perf_counter() - t_start, profile=profile,
                         **fields)

    if not tensors and golden is None and outputs is None:
        # PyPTO's compile-only form, run(program, config=...): the compiled program, to call with tensors.
        return _compile(program, tensors, cfg, _work_dir(cfg, name))
    try:
        compiled = _compile(program, tensors, cfg, _work_dir(cfg, name))
    except PtoArgumentError:
        raise
    except PtoError as exc:
        return done(passed=False, error=f"compile failed: {exc}")
    profile["compile_s"] = time.perf_counter() - t_start
    params = compiled.params
    names = [p.name for p in params]
    full, _ = complete_args(params, bool(compiled.has_return), tuple(tensors), str(compiled.name))
    wanted = list(outputs) if outputs is not None else [names[i] for i in result_indices(params)]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise PtoArgumentError(f"run(): outputs {unknown} are not parameters of {compiled.name!r} ({names})")

    t = time.perf_counter()
    data = _DataDir(cfg.golden_data_dir) if cfg.golden_data_dir is not None else None
    tensor_names = [n for n, p in zip(names, params) if p.is_tensor]
    if data is not None:
        saved = data.load("in", tensor_names)
        if saved is None:
            data.save("in", {n: _copy(a) for n, a, p in zip(names, full, params) if p.is_tensor})
        else:
            for n, a in zip(names, full):
                if n in saved:
                    _restore(a, saved[n])
    expected = None
    if golden is not None:
        expected = data.load("out", wanted) if data is not None else None
        if expected is None:
            work = {n: _copy(a) for n, a in zip(names, full)}
            _call_golden(golden, work)
            expected = {n: work[n] for n in wanted}
            if data is not None:
                data.save("out", expected)
    profile["golden_s"] = time.perf_counter() - t
    if cfg.codegen_only:
        return done(passed=True)

    t = time.perf_counter()
    try:
        dispatch(compiled, full, config=cfg)
    except PtoArgumentError:
        raise
    except PtoError as exc:
        return done(passed=False, error=f"run failed: {type(exc).__name__}: {exc}")
    profile["run_s"] = time.perf_counter() - t
    if expected is None:
        return done(passed=True)

    t = time.perf_counter()
    worst = {"max_abs": 0.0, "max_rel": 0.0, "count": 0, "indices": [], "error": None}
    for n in wanted:
        got = _compare(n, full[names.index(n)], expected[n], cfg.rtol, cfg.atol)
        worst["max_abs"] = max(worst["max_abs"], got.get("max_abs", 0.0))
        worst["max_rel"] = max(worst["max_rel"], got.get("max_rel", 0.0))
        worst["count"] += got["count"]
        if got.get("error") and worst["error"] is None:
            worst["error"], worst["indices"] = got["error"], got.get("indices", [])
    profile["compare_s"] = time.perf_counter() - t
    return done(passed=worst["count"] == 0, error=worst["error"], max_abs_error=worst["max_abs"],
                max_rel_error=worst["max_rel"], mismatch_count=worst["count"],
                mismatch_indices=worst["indices"] or None)
