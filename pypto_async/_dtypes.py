"""Element types shared by the language, the IR and the runtime.

One :class:`DataType` per supported element type.  The language re-exports the
constants as ``pl.FP32`` and friends; the runtime accepts them (or a numpy or
torch dtype) wherever a dtype is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "DataType",
    "FP32",
    "FP64",
    "FP16",
    "BF16",
    "FP8E4M3FN",
    "FP8E5M2",
    "FP8E8M0",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "BOOL",
    "StorageDType",
    "INT4",
    "UINT4",
    "FP4",
    "HF4",
    "HF8",
    "STORAGE_DTYPES",
    "INTEGER_DTYPES",
    "ALL_DTYPES",
    "as_dtype",
    "holds",
    "check_native",
    "bf16_to_float32",
]


@dataclass(frozen=True)
class DataType:
    """An element type.

    ``name`` is the pl name (``"FP32"``), ``np_name`` the numpy name
    (``"float32"``; ``"bfloat16"`` has no numpy type: a numpy array holds
    it as ``uint16`` storage, the raw bits; the FP8 types, torch's
    ``"float8_e4m3fn"`` and ``"float8_e5m2"``, as ``uint8`` bits),
    ``c_type`` the C storage type,
    ``itemsize`` its bytes.
    """

    name: str
    np_name: str
    c_type: str
    itemsize: int
    is_float: bool

    @property
    def is_unsigned(self) -> bool:
        """Whether this is an unsigned integer type (UINT8 ... UINT64; BOOL is not)."""
        return self.c_type.startswith("uint") and not self.is_float

    @property
    def int_range(self) -> tuple[int, int]:
        """The ``(lowest, highest)`` value of an integer type (BOOL: ``(0, 1)``)."""
        if self.is_float:
            raise TypeError(f"{self!r} is not an integer type")
        if self.name == "BOOL":
            return (0, 1)
        bits = 8 * self.itemsize
        return (0, (1 << bits) - 1) if self.is_unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)

    @property
    def np_storage(self) -> np.dtype:
        """The numpy dtype whose bytes hold one element."""
        return np.dtype(_RAW.get(self.np_name, self.np_name))

    def get_byte(self) -> int:
        """The bytes one element takes (PyPTO's ``dtype.get_byte()``: ``pl.FP32.get_byte() == 4``)."""
        return self.itemsize

    def __repr__(self) -> str:
        return f"pl.{self.name}"


FP32 = DataType("FP32", "float32", "float", 4, True)
FP64 = DataType("FP64", "float64", "double", 8, True)
FP16 = DataType("FP16", "float16", "_Float16", 2, True)
BF16 = DataType("BF16", "bfloat16", "uint16_t", 2, True)
#: OCP FP8 (MXFP8 data): 4 exponent bits, 3 mantissa, no infinity, 448 the largest.
FP8E4M3FN = DataType("FP8E4M3FN", "float8_e4m3fn", "uint8_t", 1, True)
#: OCP FP8: 5 exponent bits, 2 mantissa, IEEE infinities and NaNs, 57344 the largest.
FP8E5M2 = DataType("FP8E5M2", "float8_e5m2", "uint8_t", 1, True)
#: OCP E8M0 (the MX block scale): an exponent alone, 2**(bits - 127); 255 is NaN, no sign, no zero.
FP8E8M0 = DataType("FP8E8M0", "float8_e8m0fnu", "uint8_t", 1, True)
INT8 = DataType("INT8", "int8", "int8_t", 1, False)
INT16 = DataType("INT16", "int16", "int16_t", 2, False)
INT32 = DataType("INT32", "int32", "int32_t", 4, False)
INT64 = DataType("INT64", "int64", "int64_t", 8, False)
UINT8 = DataType("UINT8", "uint8", "uint8_t", 1, False)
UINT16 = DataType("UINT16", "uint16", "uint16_t", 2, False)
UINT32 = DataType("UINT32", "uint32", "uint32_t", 4, False)
UINT64 = DataType("UINT64", "uint64", "uint64_t", 8, False)
BOOL = DataType("BOOL", "bool", "_Bool", 1, False)

ALL_DTYPES = (FP32, FP64, FP16, BF16, FP8E4M3FN, FP8E5M2, FP8E8M0, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL)
#: The integer element types (BOOL included), in the order of their names.
INTEGER_DTYPES = (INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL)
#: The numpy storage of the float types numpy lacks: their raw bits.
_RAW = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8", "float8_e8m0fnu": "uint8"}
_BY_NP_NAME = {d.np_name: d for d in ALL_DTYPES}


@dataclass(frozen=True)
class StorageDType:
    """One of PyPTO's element types that no sim kernel computes in: the 4-bit ones and HiFloat8.

    PyPTO names them (``pl.INT4``, ``pl.UINT4``, ``pl.FP4``, ``pl.HF4``,
    ``pl.HF8``) and gates their execution by backend: its in-core codegen
    rejects INT4 / UINT4 / HF4, and FP4 (MXFP4 E2M1, two per byte) runs on
    Ascend950 only.  Here the constants exist, with ``get_byte()`` (a 4-bit
    type rounds up to one byte, as PyPTO's does), and every use as a tensor,
    tile or cast dtype raises :class:`~pypto_async.errors.PtoNotSupported`
    naming the type, before anything is compiled or queued.
    """

    name: str
    bits: int
    is_float: bool
    note: str

    def get_byte(self) -> int:
        """The byte-addressable size of one element, rounded up to a byte (4-bit types: 1)."""
        return (self.bits + 7) // 8

    def __repr__(self) -> str:
        return f"pl.{self.name}"


INT4 = StorageDType("INT4", 4, False, "a signed 4-bit integer, packed two per byte")
UINT4 = StorageDType("UINT4", 4, False, "an unsigned 4-bit integer, packed two per byte")
FP4 = StorageDType("FP4", 4, True, "MXFP4 E2M1, packed two per byte")
HF4 = StorageDType("HF4", 4, True, "a HiSilicon 4-bit float")
HF8 = StorageDType("HF8", 8, True, "a HiSilicon 8-bit float")
STORAGE_DTYPES = (INT4, UINT4, FP4, HF4, HF8)
_STORAGE_BY_NAME = {d.name: d for d in STORAGE_DTYPES}
#: torch's spellings of the same types (``torch.float4_e2m1fn_x2`` is two FP4 values per element).
_STORAGE_BY_TORCH = {"float4_e2m1fn_x2": FP4, "int4": INT4, "uint4": UINT4, "quint4x2": UINT4}


def storage_only(d: StorageDType) -> str:
    """Why storage-only type `d` is refused (the message of the PtoNotSupported it raises)."""
    return (f"dtype pl.{d.name} ({d.note}) is not supported on the sim: PyPTO runs it only where a backend "
            f"has a kernel for it (its in-core codegen rejects INT4, UINT4 and HF4; FP4 runs on Ascend950), and "
            f"the sim has none; compute in INT8, FP8E4M3FN, FP16 or BF16 and convert on the host")


def _storage_only(d: StorageDType):
    from .errors import PtoNotSupported

    return PtoNotSupported(storage_only(d))
_BY_NAME = {d.name: d for d in ALL_DTYPES}


def as_dtype(obj) -> DataType:
    """Return the :class:`DataType` for a pl, numpy or torch dtype (or a name).

    Raises
    ------
    PtoArgumentError
        If the dtype is not one of :data:`ALL_DTYPES`, or is a numpy dtype
        in the other byte order (``">f4"`` on a little-endian host): the
        device reads and writes bytes in this machine's order only.
    """
    from .errors import PtoArgumentError

    if isinstance(obj, DataType):
        return obj
    if isinstance(obj, StorageDType):
        raise _storage_only(obj)
    if obj is None:  # np.dtype(None) would silently mean float64
        raise PtoArgumentError("dtype is required (got None)")
    if isinstance(obj, str):
        key = obj.removeprefix("torch.")
        found = _BY_NAME.get(key.upper()) or _BY_NP_NAME.get(key)
        if found is not None:
            return found
        storage = _STORAGE_BY_NAME.get(key.upper()) or _STORAGE_BY_TORCH.get(key)
        if storage is not None:
            raise _storage_only(storage)
    else:
        mod = type(obj).__module__
        if mod.startswith("torch"):
            # torch.float32 prints as "torch.float32"; no torch import needed.
            found = _BY_NP_NAME.get(str(obj).removeprefix("torch."))
            if found is not None:
                return found
            storage = _STORAGE_BY_TORCH.get(str(obj).removeprefix("torch."))
            if storage is not None:
                raise _storage_only(storage)
        else:
            try:
                dt = np.dtype(obj)
            except TypeError:
                dt = None
            found = None if dt is None else _BY_NP_NAME.get(dt.name)
            if found is not None:
                check_native(dt)
                return found
    supported = ", ".join(d.np_name for d in ALL_DTYPES)
    raise PtoArgumentError(f"unsupported dtype {obj!r}; supported: {supported}")


def holds(host: DataType, want: DataType) -> bool:
    """Whether a host array of element type `host` holds elements of `want`.

    The same type does, and so does the raw-bit storage of a float type numpy
    lacks: ``uint16`` for ``BF16``, ``uint8`` for the FP8 types (the form
    :meth:`DeviceTensor.numpy` returns them in).  A ``uint16`` array is a
    ``UINT16`` tensor everywhere else.
    """
    return host is want or host == want or (want.np_name in _RAW and host.np_name == _RAW[want.np_name])


def check_native(dt: np.dtype) -> None:
    """Raise PtoArgumentError if numpy dtype `dt` is in the other byte order (``">f4"`` here).

    The device reads and writes elements in this machine's byte order; taken
    byte for byte, a big-endian 2.0 would read as 9.2e-41.
    """
    if not dt.isnative:
        from .errors import PtoArgumentError

        raise PtoArgumentError(f"dtype {dt.str!r} is not in this machine's byte order; "
                               f"convert with .astype({dt.newbyteorder('=').str!r})")


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Return the float32 values of ``bfloat16`` storage (``uint16`` bits), exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)
