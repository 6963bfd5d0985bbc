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

__all__ = ["BackendType", "SIM_BACKENDS", "pto_backend"]


class BackendType(enum.Enum):
    """A code-generation target of PyPTO's; all but ``CCE`` name the sim's C backend here."""

    Ascend910B = "Ascend910B"
    Ascend950 = "Ascend950"
    PTO = "PTO"
    CCE = "CCE"


#: The BackendType names that name the simulator's backend (``ir.compile(backend_type=)``).
SIM_BACKENDS = ("Ascend910B", "Ascend950", "PTO")
