"""``pl.parse(code)`` and ``pl.loads(path)``: a ``@pl.function`` from source text, as an IR function;
``pl.parse_program`` / ``pl.loads_program``: a ``@pl.program`` class from source text.

The source defines one function decorated ``@pl.function`` (no ``self``),
every parameter annotated with its shape and dtype (``pl.Tensor[[128],
pl.FP32]``, ``pl.Out[...]``, ``pl.Scalar[pl.FP32]``).  ``pl`` is injected
when the source does not import it; imports of PyPTO's modules
(``import pypto.language as pl``) are read as this package's.  The
function is traced for its annotated parameters and lowered; what it
returns is its result: one of its tensors, or a value that becomes an
output tensor of the returned annotation's shape (``ret0``, after its
parameters), as PyPTO's functions return new tensors.

The result is an :class:`~pypto_async.ir.Function` of type ``Opaque``:
its ``params`` are the declared ones, ``return_types`` what it returns,
and its ``program`` the lowered program (with ``ret0`` among its
parameters) that ``ir.compile`` takes.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from pathlib import Path

from ..ir._function import Function, FunctionType
from ..ir._nodes import Param
from ..ir._passes import run_passes
from ._program import _annotation, _Function
from ._tracer import Tile
from ._types import TensorAnnotation

__all__ = ["parse", "loads", "parse_program", "loads_program"]

_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)pypto(?=[\s.])", re.MULTILINE)
_BARE = re.compile(r"^(\s*)import\s+pypto(?=[ \t]*(?:#.*)?$)", re.MULTILINE)


def parse(code: str, filename: str = "<pl.parse>") -> Function:
    """Return the one ``@pl.function`` that ``code`` defines, traced and lowered (see the module).

    Raises
    ------
    SyntaxError
        If ``code`` is not Python.
    ValueError
        If ``code`` defines no ``@pl.function``, or more than one.
    PtoCompileError
        If the function does not trace (an annotation without a shape, an unsupported op, ...).
    """
    namespace = _run(code, filename)
    found = [v for k, v in namespace.items() if isinstance(v, _Function) and not k.startswith("__")]
    if not found:
        raise ValueError(f"{filename}: no @pl.function is defined")
    if len(found) > 1:
        raise ValueError(f"{filename}: {len(found)} @pl.function definitions ({', '.join(f.name for f in found)}); "
                         f"pl.parse takes one")
    return _lower(found[0])


def parse_program(code: str, filename: str = "<pl.parse_program>"):
    """Return the one ``@pl.program`` class that ``code`` defines (imports and ``pl`` as :func:`parse`).

    The result is what the decorator made (``ir.compile`` takes it; its
    ``functions`` and ``as_python`` are its views).

    Raises
    ------
    SyntaxError
        If ``code`` is not Python.
    ValueError
        If ``code`` defines no ``@pl.program``, or more than one.
    """
    from ._program import ProgramDef

    namespace = _run(code, filename)
    found = [v for k, v in namespace.items() if isinstance(v, ProgramDef) and not k.startswith("__")]
    if not found:
        raise ValueError(f"{filename}: no @pl.program is defined")
    if len(found) > 1:
        raise ValueError(f"{filename}: {len(found)} @pl.program definitions ({', '.join(p.name for p in found)}); "
                         f"pl.parse_program takes one")
    return found[0]


def loads_program(path):
    """Return the one ``@pl.program`` the file at ``path`` defines (see :func:`parse_program`)."""
    path = Path(path)
    return parse_program(path.read_text(), filename=str(path))


def _run(code: str, filename: str) -> dict:
    """Execute DSL source (PyPTO's imports read as this package's, ``pl`` injected); return its namespace."""
    import pypto_async.language as pl

    source = _IMPORT.sub(r"\1pypto_async", _BARE.sub(r"\1import pypto_async as pypto", code))
    namespace: dict = {"pl": pl, "__name__": "__pl_parse__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - parsing the caller's DSL source
    return namespace


def loads(path) -> Function:
    """Return the one ``@pl.function`` the file at ``path`` defines (see :func:`parse`)."""
    path = Path(path)
    return parse(path.read_text(), filename=str(path))


def _lower(f: _Function) -> Function:
    from ._jit import JitFunction
    from ._memory import store

    anns = f.annotations()
    names = list(inspect.signature(f.fn).parameters)
    params = [_param(n, _annotation(anns.get(n, TensorAnnotation()), f"{f.name}: parameter {n!r}", f.loc))
              for n in names]
    ret = anns.get("return")
    out = None
    if ret is not None:
        ret = _annotation(ret, f"{f.name}: its return annotation", f.loc)
        out = Param("ret0", "out", ret.shape, ret.dtype)

    def body(*proxies):
        result = f.fn(*proxies[:len(names)])
        if isinstance(result, Tile) and out is not None:
            target = proxies[len(names)]
            store(result, [0] * len(out.shape), target)
            return target
        return result

    body.__name__ = f.name
    kernel = JitFunction(body)
    kernel._loc = f.loc  # errors name the parsed function's line
    program = run_passes(kernel._trace([*params, *([out] if out is not None else [])]))
    returned = program.ret.split(", ") if program.ret else []
    if out is not None and "ret0" not in returned:
        program = replace(program, params=tuple(p for p in program.params if p.name != "ret0"))
    rets = tuple(program.param(n) for n in returned)
    return Function(f.name, FunctionType.Opaque, tuple(params), program.body, program, returns=rets)


def _param(name: str, ann) -> Param:
    if isinstance(ann, TensorAnnotation):
        return Param(name, ann.direction, ann.shape, ann.dtype)
    return Param(name, "scalar", (), ann.dtype)

