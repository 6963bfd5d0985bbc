"""Evaluating a kernel's annotations where they were written, strings included.

Under ``from __future__ import annotations`` every annotation is a string,
evaluated only when the kernel is traced.  A name that the string uses and
that the function *defining* the kernel binds locally (``N = pl.dynamic("N")``
then ``@pl.jit`` inside a test or a factory function) is not a global of the
kernel, nor a closure variable unless the body also uses it, so a plain
``eval`` of the string cannot find it.  PyPTO's decorators read the caller's
frame when they run; :func:`defining_scope` does the same, keeping only the
names the string annotations mention (so a kernel keeps no reference to the
rest of its creator's locals), and :func:`evaluate` gives them to the
evaluation after the function's own closure variables.

It is also where a parameter annotated with one of PyPTO's storage-only
dtypes (``pl.Tensor[[64, 64], pl.INT4]``) is refused: the annotation itself
is accepted where it is written (a module defining such a kernel for another
backend imports), and the kernel raises PtoNotSupported when it is compiled.
"""

from __future__ import annotations

import inspect
import sys

from .._dtypes import StorageDType, storage_only
from .._user_frame import user_frame

__all__ = ["defining_scope", "evaluate"]


def _names(fn) -> set[str]:
    names: set[str] = set()
    for value in (getattr(fn, "__annotations__", None) or {}).values():
        if isinstance(value, str):
            try:
                names.update(compile(value, "<annotation>", "eval").co_names)
            except SyntaxError:
                pass  # reported when the annotations are evaluated
    return names


def defining_scope(fn) -> dict:
    """The locals of the scope `fn` is defined in that its string annotations name (empty when none do).

    Called while a decorator runs: the first frame outside this package is
    the one applying it (a function's, or a class body's, and then the
    function around that class as well).
    """
    names = _names(fn)
    if not names:
        return {}
    frame = user_frame(sys._getframe(1))
    scope: dict = {}
    while frame is not None and frame.f_code.co_name != "<module>":  # a module's names are the globals
        local = frame.f_locals
        for name in names - scope.keys():
            if name in local:
                scope[name] = local[name]
        if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a function's frame: the scope the definition is in
            break
        frame = frame.f_back  # a class body: the function around it too
    return scope


def evaluate(fn, scope: dict | None = None) -> dict:
    """``inspect.get_annotations(fn, eval_str=True)``, string annotations seeing `scope` and `fn`'s closure.

    Raises
    ------
    PtoNotSupported
        If a parameter's dtype is one of the storage-only types (``pl.INT4``,
        ``pl.UINT4``, ``pl.FP4``, ``pl.HF4``, ``pl.HF8``).
    """
    if not any(isinstance(v, str) for v in (getattr(fn, "__annotations__", None) or {}).values()):
        return _checked(fn, inspect.get_annotations(fn, eval_str=True))
    local = dict(scope or {})
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    for name, cell in zip(getattr(code, "co_freevars", ()), cells):
        try:
            local[name] = cell.cell_contents
        except ValueError:  # a cell not yet bound
            pass
    return _checked(fn, inspect.get_annotations(fn, eval_str=True, locals=local))


def _checked(fn, anns: dict) -> dict:
    for name, ann in anns.items():
        dtype = getattr(ann, "dtype", None)
        if isinstance(dtype, StorageDType):
            from ..errors import PtoNotSupported

            what = "its return" if name == "return" else f"parameter {name!r}"
            raise PtoNotSupported(f"{getattr(fn, '__name__', fn)}: {what}: {storage_only(dtype)}")
    return anns
