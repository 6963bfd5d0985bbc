"""``@pl.jit.inline``: a helper whose body is spliced into the kernel that calls it.

Calling an inline helper while a ``@pl.jit`` kernel (or a ``@pl.program``
function) is traced runs its Python body right there, on the caller's
tensors and tiles: its ``pl.at`` regions become the caller's regions (tasks,
ordered with the caller's others by the tensors they touch), its loops the
caller's loops.  Nothing is outlined and no task boundary is added: the
program is what it would be had the body been written at the call site.  What
it returns (a tensor, a tile, a tuple, or nothing) is the call's value.

A helper's annotations are checked against the call: a ``pl.Out`` or
``pl.InOut`` parameter takes a tensor.  The body writes the caller's tensor in
place (PyPTO: the parameter is an alias of the caller's variable), so a
``@pl.jit`` kernel's own parameter declared plain ``pl.Tensor`` that it passes
there becomes ``InOut``: the kernel writes it.  ``auto_scope=False``
(``@pl.jit.inline(auto_scope=False)``) lets the body place AUTO runtime
scopes (``pl.scope()``), as on ``@pl.jit``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

from .._signature import IN, INOUT, OUT
from ..errors import PtoCompileError, PtoNotSupported
from ..ir._diag import compile_error
from ..ir._nodes import Loc
from ._annotations import defining_scope, evaluate
from ._tracer import TensorArg, current, user_loc
from ._types import TensorAnnotation

__all__ = ["InlineFunction", "inline", "OpaqueFunction", "opaque"]


_DIRECTION = {OUT: "Out", INOUT: "InOut"}


class InlineFunction:
    """A ``@pl.jit.inline`` helper: call it while a kernel is traced to splice its body there."""

    def __init__(self, fn, auto_scope: bool = True):
        self.fn = fn
        self.auto_scope = auto_scope
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        code = fn.__code__
        self._loc = Loc(code.co_filename, code.co_firstlineno)
        self._sig = inspect.signature(fn)
        self._scope = defining_scope(fn)  # what string annotations name there

    def __repr__(self) -> str:
        return f"<pl.jit.inline {self.__qualname__}>"

    def _check(self, bound: inspect.BoundArguments, loc) -> None:
        try:
            anns = evaluate(self.fn, getattr(self, "_scope", None))
        except PtoNotSupported:  # a storage-only dtype: its own message
            raise
        except Exception as exc:  # an annotation that does not evaluate
            raise compile_error(f"cannot evaluate the annotations of {self.__name__}: {exc}", self._loc) from exc
        for name, value in bound.arguments.items():
            ann = anns.get(name)
            if isinstance(ann, TensorAnnotation) and ann.direction in (OUT, INOUT) and not isinstance(value, TensorArg):
                raise compile_error(f"{self.__name__}: parameter {name!r} is pl.{_DIRECTION[ann.direction]}: "
                                    f"pass a tensor, got {type(value).__name__}", loc)
            if isinstance(ann, TensorAnnotation) and ann.direction in (OUT, INOUT):
                _written(current("pl.jit.inline"), value.name)

    def __call__(self, *args, **kwargs):
        t = current(f"{self.__name__}(...) (a @pl.jit.inline helper; call it from a @pl.jit kernel)")
        loc = user_loc()
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise compile_error(f"{self.__name__}: {exc}", loc) from None
        bound.apply_defaults()
        self._check(bound, loc)
        before = getattr(t, "auto_scope", True)
        t.auto_scope = self.auto_scope
        from ._branch import traced_fn

        try:  # its `if` statements rewritten, as a @pl.jit body's are (a runtime condition traces both branches)
            return traced_fn(self.fn)(*bound.args, **bound.kwargs)
        finally:
            t.auto_scope = before


def _written(t, name: str) -> None:
    """Make kernel parameter ``name``, declared ``In``, an ``InOut`` one: an inline helper writes it."""
    p = t.params.get(name)
    if p is None or p.direction != IN or not getattr(t, "promotable", False):
        return
    t.params[name] = dataclasses.replace(p, direction=INOUT)


def decorate(fn, auto_scope, cls, spelling: str, again):
    """The body of ``@pl.jit`` and ``@pl.jit.inline``: wrap `fn` in `cls`, bare or called with ``auto_scope=``.

    `again` is the decorator itself (``@d(auto_scope=False)`` returns it
    bound); `spelling` names it in errors.
    """
    if not isinstance(auto_scope, bool):
        raise PtoCompileError(f"{spelling}(auto_scope=...) takes a bool, got {auto_scope!r}")
    if fn is None:
        return functools.partial(again, auto_scope=auto_scope)
    if isinstance(fn, cls):
        return fn
    if not callable(fn):
        raise PtoCompileError(f"{spelling} decorates a function, got {fn!r}")
    return functools.update_wrapper(cls(fn, auto_scope), fn, updated=())


def inline(fn=None, *, auto_scope: bool = True):
    """Make a Python function a helper spliced into each kernel that calls it (``@pl.jit.inline``)."""
    return decorate(fn, auto_scope, InlineFunction, "@pl.jit.inline", inline)


class OpaqueFunction(InlineFunction):
    """A ``@pl.jit.opaque`` sub-function: its orchestration loops and ``pl.at`` regions, traced at the call.

    PyPTO keeps it a separate ``Opaque`` IR function that the passes
    outline; its regions are tasks of the program either way, ordered with
    the caller's by the tensors they touch, so here its body is traced where
    it is called (as a ``@pl.jit.inline`` helper's): the results and the
    task graph are PyPTO's, and no function of its own appears in
    ``Program.functions``.
    """

    def __repr__(self) -> str:
        return f"<pl.jit.opaque {self.__qualname__}>"


def opaque(fn=None, *, auto_scope=None):
    """Make a Python function a sub-function of ``@pl.jit`` entries that holds loops and regions (``@pl.jit.opaque``).

    ``auto_scope=`` is rejected, as in PyPTO (put it on the entry or an ``@pl.jit.inline`` helper).
    """
    if auto_scope is not None:
        raise PtoCompileError("@pl.jit.opaque does not take auto_scope=; put it on the @pl.jit entry or an "
                              "@pl.jit.inline helper")
    if fn is None:
        return opaque
    return decorate(fn, True, OpaqueFunction, "@pl.jit.opaque", opaque)
