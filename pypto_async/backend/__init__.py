"""PyPTO's backend names (``from pypto_async.backend import BackendType``).

PyPTO's compiler generates code for two Ascend parts, named by its
``BackendType``: ``Ascend910B`` (the a2a3 profile, PyPTO's default) and
``Ascend950`` (a5); older PyPTO releases named the code generator instead,
``BackendType.PTO`` (PTO-ISA, assembled by ``ptoas``) or ``BackendType.CCE``.
Here there is one backend, the simulator's: kernels are compiled to C, and
the simulator computes the same numbers for either part.  ``ir.compile`` (and
``RunConfig(backend_type=)``) take ``Ascend910B``, ``Ascend950`` or ``PTO`` as
naming it, and refuse ``CCE``.

:mod:`.pto_backend` holds the code generator's error, ``PartialCodegenError``
(``from pypto_async.backend.pto_backend import PartialCodegenError``).
"""

from __future__ import annotations

import enum

from . import pto_backend  # noqa: F401 - PyPTO imports it as pypto.backend.pto_backend

__all__ = ["BackendType", "SIM_BACKENDS", "pto_backend", "set_backend_type", "get_backend_type",
           "is_backend_configured", "reset_for_testing"]


class BackendType(enum.Enum):
    """A code-generation target of PyPTO's; all but ``CCE`` name the sim's C backend here."""

    Ascend910B = "Ascend910B"
    Ascend950 = "Ascend950"
    PTO = "PTO"
    CCE = "CCE"


#: The BackendType names that name the simulator's backend (``ir.compile(backend_type=)``).
SIM_BACKENDS = ("Ascend910B", "Ascend950", "PTO")


# PyPTO's process-wide backend choice (set once, before compiling; its torch-codegen guide and tests set it).
# Here it chooses nothing: every BackendType but CCE names the one simulator backend.
_configured: BackendType | None = None


def set_backend_type(backend_type: BackendType) -> None:
    """Set the process's backend type; again with the same type is a no-op, another type is refused.

    Raises
    ------
    PtoArgumentError
        For something not a BackendType, ``CCE`` (no such backend here), or a change of type.
    """
    global _configured
    from ..errors import PtoArgumentError

    if not isinstance(backend_type, BackendType) or backend_type.value not in SIM_BACKENDS:
        raise PtoArgumentError(f"set_backend_type takes one of BackendType.{', BackendType.'.join(SIM_BACKENDS)}, "
                               f"not {backend_type!r}")
    if _configured is not None and _configured is not backend_type:
        raise PtoArgumentError(f"set_backend_type: the backend is already {_configured.value}, not "
                               f"{backend_type.value} (reset_for_testing() clears it)")
    _configured = backend_type


def get_backend_type() -> BackendType:
    """The backend type set by :func:`set_backend_type` (PtoArgumentError when none was set)."""
    from ..errors import PtoArgumentError

    if _configured is None:
        raise PtoArgumentError("get_backend_type: no backend type was set (set_backend_type(BackendType.Ascend910B))")
    return _configured


def is_backend_configured() -> bool:
    """Whether :func:`set_backend_type` was called (since the last :func:`reset_for_testing`)."""
    return _configured is not None


def reset_for_testing() -> None:
    """Forget the backend type set, so another may be set (PyPTO's test-only reset)."""
    global _configured
    _configured = None
