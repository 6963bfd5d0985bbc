"""``runtime.Worker``: PyPTO's abstract runtime handle, the type both worker levels are.

``ChipWorker`` (one chip) and ``DistributedWorker`` (several) are registered
as its subclasses, so ``isinstance(w, Worker)`` holds for either and library
code can type-hint against it.  It names the calls every level answers:
``malloc``, ``free``, ``copy_to``, ``copy_from``, ``run`` and ``register``.
It is abstract: ``Worker()`` raises ``TypeError``, and a class deriving from
it must define those six calls before it can be made.
"""

from __future__ import annotations

import abc

from ._distributed import DistributedWorker
from ._worker import ChipWorker

__all__ = ["Worker"]


class Worker(abc.ABC):
    """The calls every runtime handle answers; ``ChipWorker`` and ``DistributedWorker`` are Workers."""

    @abc.abstractmethod
    def malloc(self, nbytes: int, *, worker_id: int = 0) -> int:
        """Allocate `nbytes` of device memory; return its address."""

    @abc.abstractmethod
    def free(self, ptr: int, *, worker_id: int = 0) -> None:
        """Free an address :meth:`malloc` returned."""

    @abc.abstractmethod
    def copy_to(self, dst_dev_ptr: int, src_host_ptr, nbytes: int, *, worker_id: int = 0) -> None:
        """Copy `nbytes` from the host to the device."""

    @abc.abstractmethod
    def copy_from(self, dst_host_ptr, src_dev_ptr: int, nbytes: int, *, worker_id: int = 0) -> None:
        """Copy `nbytes` from the device to the host."""

    @abc.abstractmethod
    def run(self, compiled, *args, **kwargs):
        """Dispatch `compiled` on this worker."""

    @abc.abstractmethod
    def register(self, compiled):
        """Register `compiled` here; return a handle that dispatches it."""


# ABCMeta.register, called on the metaclass: the class's own ``register`` is PyPTO's instance call.
for _level in (ChipWorker, DistributedWorker):
    abc.ABCMeta.register(Worker, _level)
del _level
