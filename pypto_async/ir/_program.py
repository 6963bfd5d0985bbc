"""A program: the IR's root, with its views (the text print, its functions and ``as_python``).

It sits above :mod:`._nodes` and the printers so that the statement nodes
import no view of themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PtoArgumentError
from ._function import Function, format_outlined, outline
from ._nodes import Param, Stmt
from ._printer import format_program
from ._python import format_python

__all__ = ["Program", "DYNAMIC_EXTENT", "DynamicExtent"]

#: The extent a tensor parameter declares along a run-time (``pl.dynamic``) dimension while it is traced:
#: a value no real tensor has, so a trace that used it as a number is recognised (see ``language._jit``).
DYNAMIC_EXTENT = 2**31 - 1


class DynamicExtent(int):
    """:data:`DYNAMIC_EXTENT` for the dimension ``name``: equal to it, and printed as the name.

    The placeholder is a number only to the passes; wherever a shape is
    shown (the printed program, a parameter's repr, a message) the
    dimension reads as the ``pl.dynamic`` name it was declared with.
    """

    def __new__(cls, name: str):
        self = super().__new__(cls, DYNAMIC_EXTENT)
        self.name = name
        return self

    def __reduce__(self):
        return DynamicExtent, (self.name,)

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return self.name if not spec else format(int(self), spec)


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
    #: Parameters marked for PyPTO's selective dump (``pl.dump_tag(t)``, ``dumps=[t]``) that a task of the
    #: program consumes: ``RunConfig(enable_dump_args=1)`` dumps these (level 2 dumps every tensor).
    dump_tags: tuple[str, ...] = ()
    #: The name of the ``@pl.program`` class's Orchestration (or Opaque) function the program was traced
    #: from (PyPTO's entry: ``main``), where it differs from the class's; kept through the passes.
    entry: str | None = field(default=None, compare=False)
    #: The ``pl.dynamic`` extents the generated code reads at run time: ``(scalar, tensor, axis)`` says
    #: that dimension ``axis`` of tensor parameter ``tensor`` is the value of the hidden INT64 scalar
    #: parameter ``scalar`` (the caller passes the argument's extent there; see ``language._jit``).
    #: ``tensor``'s declared extent there is a placeholder, :data:`DYNAMIC_EXTENT`.
    dynamic: tuple[tuple[str, str, int], ...] = ()
    #: The scalar parameters the trace saw as numbers, ``(name, value)``: the body computes with the
    #: value (a shape, a Python ``range``), so a launch of the artifact must pass that value there.
    specialised: tuple[tuple[str, int | float | bool], ...] = ()

    def param(self, name: str) -> Param:
        for p in (*self.params, *self.scratch):
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def functions(self) -> dict[str, Function]:
        """The program's IR functions by name, as after PyPTO's outlining pass.

        One ``InCore`` function per region (``<name>_incore_<k>``, in trace
        order; a kernel with no ``pl.at`` is one), then the ``Orchestration``
        function, named as the program (see :mod:`._function`).
        """
        return {f.name: f for f in outline(self)}

    def as_python(self, prefix: str = "pl", concise: bool = False, form: str = "program") -> str:
        """Return the program as source.

        ``form="program"`` (PyPTO's view): the outlined ``@pl.program`` class
        of :attr:`functions`; ``concise=True`` leaves out the tiles' type
        annotations; ``prefix`` is the language module's name in it.
        ``form="jit"``: a ``@pl.jit`` function that traces to an equivalent
        program (see :mod:`._python`).
        """
        if form == "program":
            return format_outlined(self, prefix=prefix, concise=concise)
        if form == "jit":
            return format_python(self)
        raise PtoArgumentError(f"as_python(form=...) takes 'program' or 'jit', got {form!r}")

    def __str__(self) -> str:
        return format_program(self)
