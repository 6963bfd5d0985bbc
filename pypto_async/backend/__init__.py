"""PyPTO's backend names (``from pypto_async.backend import BackendType``).

PyPTO's compiler has code generators for Ascend parts: ``BackendType.PTO``
(PTO-ISA, assembled by ``ptoas``) and ``BackendType.CCE``.  Here there is one
backend, the simulator's: kernels are compiled to C.  ``ir.compile`` takes
``backend_type=BackendType.PTO`` as naming it (PyPTO's default backend, the
one its examples pass), and refuses ``CCE``.

:mod:`.pto_backend` holds the code generator's error, ``PartialCodegenError``
(``from pypto_async.backend.pto_backend import PartialCodegenError``).
"""

from __future__ import annotations

import enum

from . import pto_backend  # noqa: F401 - PyPTO imports it as pypto.backend.pto_backend

__all__ = ["BackendType", "pto_backend"]


class BackendType(enum.Enum):
    """A code generator of PyPTO's: ``PTO`` is the sim's C backend here; ``CCE`` is not available."""

    PTO = "PTO"
    CCE = "CCE"
