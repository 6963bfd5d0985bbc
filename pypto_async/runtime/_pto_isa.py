"""``runtime.ensure_pto_isa_root`` / ``pto_isa_include_dir``: PyPTO's way to the PTO-ISA headers a board build needs.

PyPTO resolves (cloning if need be) its pinned PTO-ISA checkout before it builds a runtime or an
extern kernel for silicon; its tests call it for a board only (a sim platform needs none).  The
sim builds every kernel from the C it generates, so there is no checkout to resolve: the names
are here so that such a program imports, and a call raises ``PtoNotSupported`` before anything
is read or written.
"""

from __future__ import annotations

from ..errors import PtoNotSupported

__all__ = ["ensure_pto_isa_root", "pto_isa_include_dir"]


def _refuse(name: str):
    raise PtoNotSupported(f"runtime.{name}: the sim builds kernels from its own generated C and has no PTO-ISA "
                          "checkout to resolve (PyPTO calls it for a board build only)")


def ensure_pto_isa_root() -> str:
    """The pinned PTO-ISA checkout (PyPTO); raises ``PtoNotSupported`` here: no board build needs one."""
    _refuse("ensure_pto_isa_root")


def pto_isa_include_dir():
    """The PTO-ISA include directory (PyPTO); raises ``PtoNotSupported`` here, as :func:`ensure_pto_isa_root`."""
    _refuse("pto_isa_include_dir")
