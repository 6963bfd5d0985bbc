"""The PTO backend's names (``from pypto_async.backend.pto_backend import PartialCodegenError``).

PyPTO's PTO backend raises :class:`PartialCodegenError` when a program
traced but could not be generated: some of its kernels came out, others
did not, and ``files`` holds what came out.  Here code generation is one
step that writes nothing until every check has passed, so ``files`` is
always empty; the error is raised when a kernel's body traced but does not
make a program, which is where PyPTO's codegen rejects the same kernels:

* the kernel returns a value that is not one of its tensor parameters or
  ``pl.create_tensor`` tensors (for instance a name rebound to a fresh
  result, so the value never reaches a store to an output).

It is a :class:`~pypto_async.errors.PtoCompileError` (its message starts
with the kernel's ``file:line:``) and a ``RuntimeError``, as PyPTO's is.
"""

from __future__ import annotations

from ..errors import PtoCompileError

__all__ = ["PartialCodegenError"]


class PartialCodegenError(PtoCompileError, RuntimeError):
    """A traced kernel could not be generated; ``files`` maps the files that were written (none here)."""

    def __init__(self, message: str, files: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.files: dict[str, str] = dict(files or {})
