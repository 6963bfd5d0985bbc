"""``@pl.jit.incore``: helper kernels a ``@pl.jit`` entry calls, each call a task.

A helper's body is what a ``pl.at`` region holds (loads, tile ops, stores); it
is traced once more at each call, as a region of the calling entry named
after the helper.  The call records what the task touches, by the helper's
parameter directions: each tensor argument (a parameter of the entry or a
``pl.create_tensor`` tensor) is read for ``pl.Tensor``, written for
``pl.Out``, both for ``pl.InOut``.  The tasks are ordered by those accesses
(read-after-write and the rest, :mod:`pypto_async.ir._deps`), as the
kernels of a ``@pl.program`` are.

A helper's ``pl.Tensor`` annotations need no shape: each call takes its
arguments' shapes and dtypes.
"""

from __future__ import annotations

import functools
import inspect

from .._dtypes import DataType
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ..ir._nodes import Loc
from ._annotations import defining_scope, evaluate
from ._program import call_task
from ._tracer import ScalarArg, current, user_loc
from ._types import Scalar, ScalarAnnotation, Tensor, TensorAnnotation

__all__ = ["IncoreFunction", "incore"]


class IncoreFunction:
    """A ``@pl.jit.incore`` helper: call it from a ``@pl.jit`` entry (outside any region) to make a task."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        code = fn.__code__
        self._loc = Loc(code.co_filename, code.co_firstlineno)
        self._names = list(inspect.signature(fn).parameters)
        self._scope = defining_scope(fn)  # what string annotations name there

    def __repr__(self) -> str:
        return f"<pl.jit.incore {self.__qualname__}>"

    def _annotations(self, args) -> dict:
        try:
            raw = evaluate(self.fn, self._scope)
        except PtoNotSupported:  # a storage-only dtype: its own message
            raise
        except Exception as exc:  # an annotation that does not evaluate
            raise compile_error(f"cannot evaluate the annotations of {self.__name__}: {exc}", self._loc) from exc
        anns = {}
        for name, arg in zip(self._names, args):
            ann = raw.get(name)
            if ann is Tensor:
                ann = TensorAnnotation()
            elif ann is Scalar:
                ann = ScalarAnnotation()
            elif isinstance(ann, DataType):  # a bare dtype (``n: pl.INDEX``) annotates a scalar
                ann = ScalarAnnotation(ann)
            elif ann is None:
                is_scalar = isinstance(arg, (ScalarArg, int, float)) and not isinstance(arg, bool)
                ann = ScalarAnnotation() if is_scalar else TensorAnnotation()
            if not isinstance(ann, (TensorAnnotation, ScalarAnnotation)):
                raise compile_error(f"{self.__name__}: parameter {name!r}: unsupported annotation {ann!r}",
                                    self._loc)
            anns[name] = ann
        return anns

    def __call__(self, *args, name_hint: str | None = None, deps=None):
        t = current(f"{self.__name__}(...) (a @pl.jit.incore helper; call it from a @pl.jit entry)")
        return call_task(t, self.__name__, self.fn, None, self._names, self._annotations(args), args,
                         loc=user_loc(), fn_loc=self._loc, name_hint=name_hint, deps=deps)


def incore(fn=None, *, level=None, auto_scope=None):
    """Make a Python function a helper kernel of ``@pl.jit`` entries (``@pl.jit.incore``).

    ``level`` is accepted for PyPTO's spelling (``@pl.jit.incore(level=pl.Level.AIC)``); the
    simulator runs every task on one kind of core.  ``auto_scope=`` is rejected, as in PyPTO:
    an InCore helper has no orchestration body for a runtime scope to live in.
    """
    if auto_scope is not None:
        raise PtoCompileError("@pl.jit.incore does not take auto_scope= (an InCore helper has no orchestration "
                              "body for a runtime scope); put it on the @pl.jit entry or an @pl.jit.inline helper")
    if fn is None:
        return functools.partial(incore, level=level)
    if isinstance(fn, IncoreFunction):
        return fn
    if not callable(fn):
        raise PtoCompileError(f"@pl.jit.incore decorates a function, got {fn!r}")
    return functools.update_wrapper(IncoreFunction(fn), fn, updated=())
