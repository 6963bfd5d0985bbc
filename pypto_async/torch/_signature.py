"""A registered kernel's operator signature: its schema, and the checks every call passes first.

The signature comes from the kernel's annotations alone (``pl.Tensor[[16,
16], pl.FP32]``, ``pl.InOut[...]``, ``pl.Scalar[pl.FP32]``), so it is known
before any call and the same for real, fake and meta tensors.  The checks
run before anything is queued and raise
:class:`~pypto_async.errors.PtoArgumentError` naming the parameter; on
symbolic sizes (``torch.compile`` with dynamic shapes) a static dimension is
checked with ``torch._check`` instead, so it stays symbolic.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

import torch

from .._dtypes import BOOL, DataType
from .._signature import INOUT, OUT
from ..errors import PtoArgumentError, PtoNotSupported

__all__ = ["OpParam", "OpSignature", "check_identifier", "signature_of", "torch_dtype"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")



def check_identifier(name, what: str) -> None:
    """Refuse a name the dispatcher's schema cannot hold (punctuation, a keyword)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
        raise PtoArgumentError(f"{what} must be a plain identifier, not {name!r}")


def torch_dtype(dt: DataType):
    return getattr(torch, dt.np_name)


@dataclass(frozen=True)
class OpParam:
    """One parameter: ``direction`` is ``"in"``, ``"out"``, ``"inout"`` or ``"scalar"``.

    ``shape`` holds ``None`` for a ``pl.dynamic`` dimension (any extent).
    """

    name: str
    direction: str
    shape: tuple | None
    dtype: DataType

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None

    @property
    def written(self) -> bool:
        return self.direction in (OUT, INOUT)

    def schema_type(self, index: int) -> str:
        if self.is_tensor:
            return f"Tensor(a{index}!)" if self.written else "Tensor"
        if self.dtype == BOOL:
            return "bool"
        return "float" if self.dtype.is_float else "SymInt"


class OpSignature:
    """The parameters of a registered kernel and the tensors its operator returns (aliases)."""

    def __init__(self, params: tuple[OpParam, ...], returns: tuple[int, ...], label: str):
        self.params = params
        self.returns = returns
        self.label = label
        if not any(p.is_tensor for p in params):
            raise PtoNotSupported(f"{label}: a torch operator needs at least one tensor parameter")

    def schema(self, name: str, *, returns: bool) -> str:
        """``name(Tensor x, float step, Tensor(a2!) acc) -> Tensor(a2!)`` (or ``-> ()``)."""
        args = ", ".join(f"{p.schema_type(i)} {p.name}" for i, p in enumerate(self.params))
        outs = [self.params[i].schema_type(i) for i in self.returns] if returns else []
        ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
        return f"{name}({args}) -> {ret}"

    def result(self, args):
        """What the operator returns: the aliased Out/InOut arguments (one, a tuple, or None)."""
        outs = tuple(args[i] for i in self.returns)
        return outs[0] if len(outs) == 1 else (outs or None)

    def check(self, args, *, real: bool) -> None:
        """Validate a call's arguments before anything is queued (see the module).

        ``real``: the tensors must hold data on the CPU (the operator's CPU
        kernel); otherwise fake or meta tensors (tracing) are accepted too.
        """
        if len(args) != len(self.params):
            raise PtoArgumentError(f"{self.label} takes {len(self.params)} arguments "
                                   f"({', '.join(p.name for p in self.params)}), got {len(args)}")
        device = None
        for arg, p in zip(args, self.params):
            what = f"{self.label}: argument {p.name!r}"
            if not p.is_tensor:
                _check_scalar(arg, p, what)
                continue
            if not isinstance(arg, torch.Tensor):
                raise PtoArgumentError(f"{what}: expected a torch tensor, got {type(arg).__name__}")
            if device is not None and arg.device != device:
                raise PtoArgumentError(f"{what}: the tensor is on {arg.device}, the others on {device}")
            device = arg.device
            if arg.device.type not in ("cpu", "meta") or (real and arg.device.type != "cpu"):
                raise PtoArgumentError(f"{what}: the tensor is on {arg.device}; kernels here take CPU tensors "
                                       "(the simulator reads and writes host memory), pass .cpu()")
            want = torch_dtype(p.dtype)
            if arg.dtype != want:
                raise PtoArgumentError(f"{what}: expected dtype {want}, got {arg.dtype}")
            if arg.ndim != len(p.shape):
                raise PtoArgumentError(f"{what}: expected {len(p.shape)} dimensions {_shape(p.shape)}, "
                                       f"got shape {list(arg.shape)}")
            for d, (expected, actual) in enumerate(zip(p.shape, arg.shape)):
                if expected is None:
                    continue
                if isinstance(actual, int):
                    if actual != expected:
                        raise PtoArgumentError(f"{what}: expected shape {_shape(p.shape)}, got {list(arg.shape)}")
                else:  # a symbolic size while tracing: checked as a guard, not read
                    torch._check(actual == expected, lambda w=what, s=p.shape, a=arg: (
                        f"{w}: expected shape {_shape(s)}, got {list(a.shape)}"))
            if arg.layout != torch.strided or not arg.is_contiguous():
                raise PtoArgumentError(f"{what}: the tensor is not contiguous; pass .contiguous()")
            if arg.is_conj() or arg.is_neg():
                raise PtoArgumentError(f"{what}: the tensor is an unresolved conjugate or negative view")
            if arg.requires_grad and torch.is_grad_enabled():
                raise PtoArgumentError(f"{what}: the tensor requires grad; kernels registered here have no "
                                       "autograd formula (call them under torch.no_grad() or detach())")


def _shape(shape) -> str:
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"


def _check_scalar(value, p: OpParam, what: str) -> None:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return  # a traced scalar: its value is not known here
    if p.dtype == BOOL:
        if not isinstance(value, bool):
            raise PtoArgumentError(f"{what}: expected a bool, got {type(value).__name__}")
        return
    if p.dtype.is_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PtoArgumentError(f"{what}: expected a float, got {type(value).__name__}")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise PtoArgumentError(f"{what}: expected an int, got {type(value).__name__}")
    lo, hi = p.dtype.int_range
    if not lo <= value <= hi:
        raise PtoArgumentError(f"{what}: {value} is outside the range of {p.dtype.name} [{lo}, {hi}]")


def signature_of(kernel, label: str) -> OpSignature:
    """The operator signature of a ``@pl.jit`` kernel, from its annotations.

    The tensors it returns are found by tracing it once on zero tensors of
    the declared shapes (no device work); with a ``pl.dynamic`` dimension it
    returns every ``Out``/``InOut`` tensor, in order.
    """
    from .._signature import SCALAR
    from ..language._placement import is_dynamic_dim
    from ..language._types import Scalar, ScalarAnnotation, Tensor, TensorAnnotation

    sig = kernel._sig
    anns = kernel._anns()
    params = []
    for name, par in sig.parameters.items():
        check_identifier(name, f"{label}: parameter name")
        if par.kind not in (par.POSITIONAL_ONLY, par.POSITIONAL_OR_KEYWORD):
            raise PtoArgumentError(f"{label}: parameter {name!r} must be positional")
        ann = anns.get(name)
        if ann is Tensor:
            ann = TensorAnnotation()
        elif ann is Scalar:
            ann = ScalarAnnotation()
        elif isinstance(ann, DataType):
            ann = ScalarAnnotation(ann)
        if isinstance(ann, TensorAnnotation):
            if ann.shape is None or ann.dtype is None:
                raise PtoArgumentError(
                    f"{label}: parameter {name!r} needs its shape and dtype in its annotation to be a torch "
                    f"operator, e.g. pl.Tensor[[16, 16], pl.FP32] (or pl.dynamic dimensions)")
            shape = tuple(None if is_dynamic_dim(d) else int(d) for d in ann.shape)
            params.append(OpParam(name, ann.direction, shape, ann.dtype))
        elif isinstance(ann, ScalarAnnotation):
            if ann.dtype is None:
                raise PtoArgumentError(f"{label}: scalar parameter {name!r} needs its dtype to be a torch operator, "
                                       "e.g. pl.Scalar[pl.FP32]")
            params.append(OpParam(name, SCALAR, None, ann.dtype))
        else:
            raise PtoArgumentError(f"{label}: parameter {name!r} needs a pl.Tensor[[...], dtype] or "
                                   f"pl.Scalar[dtype] annotation to be a torch operator, got {ann!r}")
    params = tuple(params)
    written = tuple(i for i, p in enumerate(params) if p.written)
    if any(p.is_tensor and None in p.shape for p in params):
        return OpSignature(params, written, label)
    from ..language._directives import RUNTIME

    # Scalars as pl.RUNTIME: a number would specialise the trace on it; only the returns are read here.
    example = [torch.zeros(p.shape, dtype=torch_dtype(p.dtype)) if p.is_tensor else RUNTIME for p in params]
    program = kernel.trace(*example)
    extra = [q.name for q in program.params[len(params):]]
    if extra:
        raise PtoNotSupported(f"{label} returns tensors it allocates itself ({', '.join(extra)}); a torch "
                              "operator writes only into its arguments: make them pl.Out parameters")
    names = [n.strip() for n in (program.ret or "").split(",") if n.strip()]
    index = {p.name: i for i, p in enumerate(params)}
    returns = []
    for n in names:
        i = index.get(n)
        if i is None or not params[i].written:
            raise PtoNotSupported(f"{label} returns {n!r}, which is not an Out/InOut parameter; a torch "
                                  "operator returns only the tensors it writes")
        returns.append(i)
    return OpSignature(params, tuple(returns), label)

