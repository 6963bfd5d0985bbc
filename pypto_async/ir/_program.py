"""A program: the IR's root, with its two views (the text print and ``as_python``).

It sits above :mod:`._nodes` and the printers so that the statement nodes
import no view of themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._nodes import Param, Stmt
from ._printer import format_program
from ._python import format_python

__all__ = ["Program"]


@dataclass(frozen=True)
class Program:
    """A traced kernel.

    ``stage`` is ``"traced"`` straight from the tracer and ``"lowered"`` once
    the pass pipeline has run; compiling a lowered program skips the passes.
    ``ret`` names the parameter the kernel returns, or several, comma-separated (or ``None``).
    """

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    block_num: int = 1
    ret: str | None = None
    stage: str = "traced"
    #: Intermediate tensors (``pl.create_tensor``) that live only inside one launch of the program.
    scratch: tuple[Param, ...] = ()
    #: Tensors created with ``pl.create_tensor(..., manual_dep=True)``: no task's access to them is tracked.
    manual_dep: tuple[str, ...] = ()

    def param(self, name: str) -> Param:
        for p in (*self.params, *self.scratch):
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def functions(self) -> dict[str, "Program"]:
        """The program's functions by name: a ``@pl.jit`` kernel is one function, itself."""
        return {self.name: self}

    def as_python(self) -> str:
        """Return the program as the source of a ``@pl.jit`` function that traces to an equivalent program."""
        return format_python(self)

    def __str__(self) -> str:
        return format_program(self)
