"""The call signature of a compiled program, as the runtime reads it.

This is the contract between :mod:`pypto_async.ir` (which produces compiled
programs) and :mod:`pypto_async.runtime` (which launches them).  The runtime
never imports the IR: it reads these attributes from any object that has them.

A compiled program has:

``platform`` (str)
    ``"sim"``, or one of its aliases ``"a2a3sim"``/``"a5sim"`` (:data:`PLATFORMS`;
    the runtime compares platforms through :func:`normalize_platform`).
``params`` (tuple of :class:`ParamSpec`)
    One per kernel argument, in call order.
``lib_path`` (pathlib.Path) and ``symbol`` (str)
    The shared object and the kernel function ``void symbol(const pto_block *, void *const *)``.
``block_num`` (int)
    Blocks per launch (``pl.spmd(n)`` gives n; otherwise 1).
``param_names``, ``output_indices``, ``has_return``
    As in PyPTO's ``CompiledProgram``: the parameters' names, the indices of
    the ``Out``/``InOut`` parameters, and whether a call returns its outputs.

Argument slots (``void *const *args`` in the kernel): a tensor parameter gets
its device address; a scalar parameter gets its value converted to the
parameter's dtype, stored little-endian in the low bytes of the 64-bit slot
(the kernel ``memcpy``s it out).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._dtypes import DataType

__all__ = ["ParamSpec", "IN", "OUT", "INOUT", "SCALAR", "PLATFORMS", "normalize_platform"]

IN = "in"
OUT = "out"
INOUT = "inout"
SCALAR = "scalar"

#: Every platform name a program may be compiled for, mapped to the platform
#: the driver opens.  The simulator answers to three names.
PLATFORMS = {"sim": "sim", "a2a3sim": "sim", "a5sim": "sim"}


def normalize_platform(platform: str) -> str:
    """Return the canonical name of a platform (``"a2a3sim"`` → ``"sim"``).

    Unknown names are returned unchanged (lower-cased): the driver decides
    whether it supports them.
    """
    key = platform.strip().lower()
    return PLATFORMS.get(key, key)


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter: its name, direction, static shape and dtype.

    ``direction`` is one of ``"in"``, ``"out"``, ``"inout"``, ``"scalar"``;
    ``shape`` is a tuple of ints for tensors and ``()`` for scalars.
    """

    name: str
    direction: str
    shape: tuple[int, ...]
    dtype: DataType

    def __post_init__(self):
        # Plain attributes, read on every launch that orders tensors across streams.
        object.__setattr__(self, "reads", self.direction in (IN, INOUT))
        object.__setattr__(self, "writes", self.direction in (OUT, INOUT))

    @property
    def is_tensor(self) -> bool:
        return self.direction != SCALAR

    @property
    def copies_in(self) -> bool:
        """True if a host array for this parameter is copied to the device (the kernel reads it)."""
        return self.reads

    @property
    def copies_out(self) -> bool:
        """True if a host array for this parameter is copied back after the launch (the kernel writes it)."""
        return self.writes

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n
