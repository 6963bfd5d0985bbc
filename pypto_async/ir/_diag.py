"""Diagnostics: the compile error every checker of the IR raises, located at its source line."""

from __future__ import annotations

from ..errors import PtoCompileError
from ._nodes import Loc

__all__ = ["compile_error"]


def compile_error(message: str, loc: Loc | None, cls: type[PtoCompileError] = PtoCompileError) -> PtoCompileError:
    """Return a PtoCompileError (or the subclass ``cls``) whose message starts with ``file:line:``.

    The error also carries ``file`` and ``line`` attributes (``None`` when
    the location is unknown).
    """
    text = f"{loc}: {message}" if loc is not None else message
    err = cls(text)
    err.file = loc.file if loc is not None else None
    err.line = loc.line if loc is not None else None
    return err
