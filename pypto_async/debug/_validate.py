"""Per-pass numeric validation: each stage of the pass pipeline run as PyTorch and compared with a golden.

:meth:`CompiledProgram.validate_ir <pypto_async.ir.CompiledProgram.validate_ir>`
hands :func:`validate_stages` the program as compiled and the program after
each pass of the pipeline (``ir._compile.pass_stages``, the stages
``dump_passes=True`` writes to ``passes_dump/``).  Each stage is generated
with :func:`~pypto_async.debug.torch_codegen`, run on a copy of the inputs,
and every tensor named in ``expected`` is compared with ``torch.allclose``:
the first stage that moves a result off the golden is the pass that broke it.

Every argument is checked before the first stage runs: a missing parameter,
an expected tensor that is not a parameter, a shape or dtype that is not the
parameter's, or a bad tolerance raises :class:`PtoArgumentError`.
"""

from __future__ import annotations

import math
from numbers import Real

from .._signature import SCALAR
from ..errors import PtoArgumentError
from ._torch_codegen import _TORCH, torch_codegen

__all__ = ["validate_stages"]


def validate_stages(stages, tensors, expected, *, rtol=5e-2, atol=5e-2) -> None:
    """Run every ``(label, program)`` of `stages` on copies of `tensors`; compare with `expected`.

    `tensors` maps each parameter's name to its torch tensor (a numpy array
    is taken too) or, for a scalar parameter, its number; `expected` maps
    the names of the tensors to compare after each stage to their goldens.
    Prints one header per stage and one line per compared tensor, as PyPTO's
    ``validate_pass_ir_codegen_results`` does.

    :raises PtoArgumentError: if an argument is not what the program takes (see the module).
    :raises AssertionError: if a stage's result is not within ``rtol``/``atol`` of its golden; the message
        names the stage and the tensor.
    """
    import torch

    rtol, atol = _tolerance("rtol", rtol), _tolerance("atol", atol)
    program = stages[0][1]
    tensors = _as_torch(torch, "tensors", tensors, scalars_of=program)
    expected = _as_torch(torch, "expected", expected)
    hidden = {sc for sc, _, _ in program.dynamic}  # the extents the caller passes: read off the tensors
    params = [p for p in program.params if p.name not in hidden]
    missing = [p.name for p in params if p.name not in tensors]
    if missing:
        raise PtoArgumentError(f"validate_ir: tensors lacks parameter(s) {', '.join(missing)} of "
                               f"{program.name}({', '.join(p.name for p in params)})")
    unknown = sorted(set(tensors) - {p.name for p in params})
    if unknown:
        raise PtoArgumentError(f"validate_ir: tensors names no parameter of {program.name}: {', '.join(unknown)}")
    dynamic_axes = {(t, a) for _, t, a in program.dynamic}
    for p in params:
        if p.direction != SCALAR:
            _check_param(torch, p, tensors[p.name], dynamic_axes)
    for key, golden in expected.items():
        p = next((q for q in params if q.name == key and q.direction != SCALAR), None)
        if p is None:
            raise PtoArgumentError(f"validate_ir: expected names {key!r}, not a tensor parameter of "
                                   f"{program.name}")
        if tuple(golden.shape) != tuple(tensors[key].shape):
            raise PtoArgumentError(f"validate_ir: expected[{key!r}] has shape {list(golden.shape)}, the "
                                   f"parameter {list(tensors[key].shape)}")
    for sc, t, a in program.dynamic:
        tensors[sc] = int(tensors[t].shape[a])

    for label, stage in stages:
        namespace: dict = {}
        exec(compile(torch_codegen(stage), f"<validate_ir {label}>", "exec"), namespace)  # noqa: S102
        run = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}
        namespace[stage.name](*(run[p.name] for p in stage.params))
        print("=" * 20, label, "=" * 20)
        for key, golden in expected.items():
            actual = run[key].to(torch.float64)
            want = golden.to(torch.float64)
            ok = bool(torch.allclose(actual, want, rtol=rtol, atol=atol))
            diff = float((actual - want).abs().max()) if actual.numel() else 0.0
            print(f"validate tensor: {key!r}, max_abs_diff: {diff:.6e}, pass: {ok}")
            if not ok:
                raise AssertionError(f"validate_ir: after {label}, tensor {key!r} differs from expected: max abs "
                                     f"diff {diff:.6e} exceeds the tolerance (rtol={rtol:.3e}, atol={atol:.3e})")


def _tolerance(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise PtoArgumentError(f"validate_ir: {name} must be a finite number >= 0, not {value!r}")
    return float(value)


def _as_torch(torch, what: str, values, scalars_of=None) -> dict:
    """`values` as a dict of torch tensors (numbers kept for `scalars_of`'s scalar parameters)."""
    import numpy as np

    if not isinstance(values, dict):
        raise PtoArgumentError(f"validate_ir: {what} must be a dict of name -> tensor, not {type(values).__name__}")
    scalars = set() if scalars_of is None else {p.name for p in scalars_of.params if p.direction == SCALAR}
    out = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise PtoArgumentError(f"validate_ir: {what} keys must be parameter names, not {key!r}")
        if key in scalars:
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if not isinstance(value, (int, float, bool, np.generic)):
                raise PtoArgumentError(f"validate_ir: {what}[{key!r}] is a scalar parameter: pass a number, "
                                       f"not {type(value).__name__}")
            out[key] = value.item() if isinstance(value, np.generic) else value
        elif isinstance(value, torch.Tensor):
            out[key] = value
        elif isinstance(value, np.ndarray):
            out[key] = torch.from_numpy(np.ascontiguousarray(value).copy())
        else:
            raise PtoArgumentError(f"validate_ir: {what}[{key!r}] must be a torch tensor or a numpy array, "
                                   f"not {type(value).__name__}")
    return out


def _check_param(torch, p, t, dynamic_axes) -> None:
    want = getattr(torch, _TORCH[p.dtype.name])
    shape_ok = len(t.shape) == len(p.shape) and all(
        (p.name, a) in dynamic_axes or d == n for a, (d, n) in enumerate(zip(p.shape, t.shape)))
    if not shape_ok or t.dtype != want:
        raise PtoArgumentError(f"validate_ir: tensors[{p.name!r}] is {list(t.shape)} {t.dtype}; the parameter is "
                               f"{list(p.shape)} {want}")
