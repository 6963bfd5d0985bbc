"""Bind call arguments to a compiled program's parameters, and validate them.

Everything here runs before anything is queued: a wrong argument raises a
:class:`~pypto_async.errors.PtoArgumentError` subclass whose message names
the parameter, and the worker is untouched.

Host arrays are numpy arrays and torch CPU tensors.  torch is never imported
here: a tensor is recognised by its type's module, and read through its own
methods.
"""

from __future__ import annotations

import struct
import sys

import numpy as np

from .._driver import ffi
from .._dtypes import DataType, as_dtype, check_native, holds
from .._signature import SCALAR
from ..errors import (
    PtoArgumentError,
    PtoDependencyError,
    PtoForeignTensorError,
)
from . import _hostmem
from ._hazards import Access
from ._tensor import DeviceTensor, freed_error

__all__ = ["HostArray", "host_array", "Binder", "check_init"]

_ndarray = np.ndarray
_from_buffer = ffi.from_buffer
_cast = ffi.cast


class HostArray:
    """A validated host buffer: its address (as cdata), size, shape and dtype."""

    __slots__ = ("obj", "ptr", "nbytes", "shape", "dtype")

    def __init__(self, obj, ptr, nbytes: int, shape: tuple[int, ...], dtype: DataType):
        self.obj = obj
        self.ptr = ptr
        self.nbytes = nbytes
        self.shape = shape
        self.dtype = dtype


def _is_torch_tensor(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def host_array(obj, what: str, *, writeable: bool) -> HostArray:
    """Return a :class:`HostArray` for a numpy array or torch CPU tensor.

    A ``uint16`` array (numpy or torch) is a ``UINT16`` array; where a
    ``BF16`` one is wanted it is taken as ``bfloat16`` storage, the form
    :meth:`DeviceTensor.numpy` returns (``_dtypes.holds``).

    Parameters
    ----------
    obj
        The array.
    what : str
        How to name it in an error ("argument 'out'").
    writeable : bool
        Whether the device will write into it.

    Raises
    ------
    PtoArgumentError
        If it is not a host array, not C-contiguous, not on the CPU, not
        writeable when it must be, of an unsupported dtype, or in the other
        byte order.
    """
    if isinstance(obj, _ndarray):
        flags = obj.flags
        if not flags.c_contiguous:
            raise PtoArgumentError(f"{what}: the array is not C-contiguous; pass np.ascontiguousarray(...)")
        if writeable and not flags.writeable:
            raise PtoArgumentError(f"{what}: the array is read-only but the device writes it")
        dtype = _np_dtype(obj.dtype, what)
        # from_buffer keeps the array's buffer exported while the cdata lives.
        ptr = _from_buffer(obj, require_writable=writeable) if obj.nbytes else _cast("void *", 0)
        return HostArray(obj, ptr, obj.nbytes, obj.shape, dtype)
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise PtoArgumentError(f"{what}: the tensor is on {obj.device}, not on the CPU; pass .cpu()")
        if not obj.is_contiguous():
            raise PtoArgumentError(f"{what}: the tensor is not contiguous; pass .contiguous()")
        dtype = _torch_dtype(obj.dtype, what)
        nbytes = obj.numel() * obj.element_size()
        addr = obj.data_ptr()
        # torch keeps no writeable flag: a tensor over memory torch did not
        # allocate (from_numpy, frombuffer; its storage is not resizable) may
        # sit on a read-only mapping, where the device's write would kill the
        # process.  torch's own allocations are always writeable.
        if (writeable and nbytes and not obj.untyped_storage().resizable()
                and not _hostmem.writeable(addr, nbytes)):
            raise PtoArgumentError(f"{what}: the tensor's memory is read-only but the device writes it")
        return HostArray(obj, _cast("void *", addr), nbytes, tuple(obj.shape), dtype)
    if isinstance(obj, DeviceTensor):
        raise PtoArgumentError(f"{what}: expected a host array here, got a DeviceTensor")
    raise PtoArgumentError(
        f"{what}: expected a numpy array, a torch CPU tensor or a DeviceTensor, "
        f"not {type(obj).__name__}"
    )


# Every dtype a host array was seen with, once it was accepted.  A dtype in the
# other byte order (">f4" beside "<f4") is a different key that never gets in.
_NP_DTYPE_CACHE: dict[np.dtype, DataType] = {}
_TORCH_DTYPE_CACHE: dict = {}


def _np_dtype(dt: np.dtype, what: str) -> DataType:
    found = _NP_DTYPE_CACHE.get(dt)
    if found is None:
        found = _NP_DTYPE_CACHE[dt] = _host_dtype(dt, what)
    return found


def _torch_dtype(dt, what: str) -> DataType:
    found = _TORCH_DTYPE_CACHE.get(dt)
    if found is None:
        found = _TORCH_DTYPE_CACHE[dt] = _host_dtype(dt, what)
    return found


def _host_dtype(dt, what: str) -> DataType:
    try:
        if isinstance(dt, np.dtype):
            check_native(dt)
        return as_dtype(dt)
    except PtoArgumentError as exc:
        raise PtoArgumentError(f"{what}: {exc}") from None


def _host_dtype_name(obj, dtype: DataType) -> str:
    """How to name a host array's dtype in a message."""
    return dtype.np_name


def check_init(t: DeviceTensor, what: str) -> None:
    """Raise if `t`'s initial copy failed, or fails; forget it once it succeeded.

    A copy still in flight is left to the device, where work ordered after
    it fails as its dependent if it fails; unless its stream's failure it
    was queued behind was observed since (``DeviceTensor._init_doomed``),
    which lets work queued from then on run though the copy fails.
    """
    launch = t._init
    if not launch._done and not t._init_doomed():
        return
    if launch._done:
        if launch._exc is None:
            t._init = None
            return
        cause = launch._exc
        why = str(cause)
    else:
        cause = None
        why = (f"{launch._name} on stream {launch._stream.id} was queued behind a failure of that stream, "
               "which the host has observed since; the copy fails as its dependent")
    launch._mark_retrieved()  # reported here: it does not warn when it fails later
    exc = PtoDependencyError(f"{what}: the DeviceTensor's initial copy failed: {why}", status="PTO_EDEP")
    exc.__cause__ = cause
    raise exc


# -- scalars ----------------------------------------------------------------------------

_STRUCT = {"FP32": "<f", "FP64": "<d", "FP16": "<e", "INT8": "<b", "INT16": "<h", "INT32": "<i",
           "INT64": "<q", "UINT8": "<B", "UINT16": "<H", "UINT32": "<I", "UINT64": "<Q", "BOOL": "<?"}


def _bf16_bits(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:  # NaN stays NaN
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even


def _zero_d_item(value, dtype: DataType, what: str):
    """The Python number in a 0-d numpy array or torch CPU tensor, the same way for both."""
    if isinstance(value, DeviceTensor) or value.ndim != 0:
        raise PtoArgumentError(f"{what}: expected a {dtype.name} scalar, not an array (is a scalar argument "
                               f"left out? arguments bind in parameter order; a return-style call passes every "
                               f"parameter but the Out ones)")
    if not isinstance(value, _ndarray) and value.device.type != "cpu":
        raise PtoArgumentError(f"{what}: the 0-d tensor is on {value.device}, not on the CPU; pass .cpu()")
    return value.item()


def scalar_bits(value, dtype: DataType, what: str) -> int:
    """Return the 64-bit argument slot for a scalar: its bytes, little-endian, low first.

    A 0-d numpy array or torch CPU tensor stands for the number it holds.

    Raises
    ------
    PtoArgumentError
        If the value is not a number of a kind the dtype takes, or does not fit.
    """
    if isinstance(value, (DeviceTensor, _ndarray)) or _is_torch_tensor(value):
        value = _zero_d_item(value, dtype, what)
    if isinstance(value, np.generic):
        value = value.item()
    if dtype.is_float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PtoArgumentError(f"{what}: expected a number for a {dtype.name} scalar, "
                                   f"not {type(value).__name__}")
        if dtype.name == "BF16":
            return _bf16_bits(float(value))
        try:
            raw = struct.pack(_STRUCT[dtype.name], float(value))
        except OverflowError:
            raise PtoArgumentError(f"{what}: {value!r} does not fit a {dtype.name} scalar") from None
    elif dtype.name == "BOOL":
        if not isinstance(value, (bool, int)):
            raise PtoArgumentError(f"{what}: expected a bool, not {type(value).__name__}")
        raw = struct.pack("<?", bool(value))
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PtoArgumentError(f"{what}: expected an int for a {dtype.name} scalar, "
                                   f"not {type(value).__name__}")
        try:
            raw = struct.pack(_STRUCT[dtype.name], value)
        except struct.error:
            raise PtoArgumentError(f"{what}: {value!r} does not fit a {dtype.name} scalar") from None
    return int.from_bytes(raw, "little")


# -- binding ---------------------------------------------------------------------------------


class Binder:
    """Validate arguments against one program's parameters and collect what to queue.

    Built once per registration; :meth:`bind` runs per launch, so it reads
    precomputed ``(shape, dtype, (label, param, access))`` rows: ``shape`` is
    None for a scalar (no DeviceTensor's shape is), and the inner tuple is what
    only the slower cases read (``access``: the parameter as ordering reads it,
    :class:`~._hazards.Access`).
    """

    __slots__ = ("params", "nparams", "labels", "program", "_rows")

    def __init__(self, params, program: str, specialised=None):
        self.params = tuple(params)
        self.nparams = len(self.params)
        self.labels = tuple(f"{program}: argument {p.name!r}" for p in self.params)
        self.program = program
        fixed = specialised or {}
        self._rows = tuple((_row_shape(p, label, fixed), p.dtype, (label, p, Access.of(p)))
                           for p, label in zip(self.params, self.labels))

    def arity_error(self, n: int) -> PtoArgumentError:
        names = ", ".join(p.name for p in self.params)
        return PtoArgumentError(
            f"{self.program} takes {self.nparams} argument(s) ({names}), got {n}"
        )

    def bind(self, worker, stream, args):
        """Return ``(values, hosts, joins)`` for a call on `stream`, or raise.

        ``values`` holds one 64-bit slot per parameter (device address or
        scalar bits; 0 for host arrays, to be filled with their temporaries);
        ``hosts`` is None or a list of ``(index, HostArray, param)``;
        ``joins`` is None or the ``(DeviceTensor, Access)`` that need the slow
        path of ordering (:func:`~._hazards.order`): first uses on `stream`,
        and tensors whose ordering is manual.  The driver orders the rest with
        the launch (``pto_stream_launch_ordered``).
        """
        if len(args) != self.nparams:
            raise self.arity_error(len(args))
        values = []
        append = values.append
        hosts = joins = None
        for arg, (shape, dtype, row) in zip(args, self._rows):
            if type(arg) is DeviceTensor:
                # The common case first: a tensor of this worker, alive, of the right shape and dtype
                # (a scalar's row has no shape: _tensor_error refuses the tensor).
                if (arg._worker is not worker or arg._freed or arg._shape != shape
                        or (arg._dtype is not dtype and arg._dtype != dtype)):
                    self._tensor_error(worker, arg, row[0], row[1])
                if arg._init is not None:
                    check_init(arg, row[0])
                append(arg._ptr)
                # The common case: used on this stream before, ordered by the driver.
                if stream not in arg._streams or arg._manual:
                    if joins is None:
                        joins = [(arg, row[2])]
                    else:
                        joins.append((arg, row[2]))
            elif shape is None:  # a scalar
                append(scalar_bits(arg, dtype, row[0]))
            elif type(shape) is _Specialised:  # a scalar the artifact was compiled for one value of
                append(shape.check(arg, dtype, row[0]))
            else:
                label, p, _ = row
                h = host_array(arg, label, writeable=p.copies_out)
                if h.shape != shape or not holds(h.dtype, dtype):
                    _mismatch(label, p, h.shape, _host_dtype_name(arg, h.dtype))
                if hosts is None:
                    hosts = []
                hosts.append((len(values), h, p))
                append(0)
        return values, hosts, joins

    def accesses(self, args) -> list:
        """The ``(DeviceTensor, Access)`` of a call's tensor arguments, for ordering (:meth:`~._hazards.Hazards.order`)."""
        return [(arg, row[2][2]) for arg, row in zip(args, self._rows) if type(arg) is DeviceTensor]

    @staticmethod
    def _tensor_error(worker, arg, label: str, p) -> None:
        """Raise for a DeviceTensor that :meth:`bind`'s fast test turned away, or return if it is fine.

        Fine only for a capture's input placeholder (``_freed`` carries its
        :class:`~._capture.Placeholder`) in its own capture's recording, with
        the right shape and dtype: anywhere else it has no device address.
        """
        if arg._worker is not worker:
            raise PtoForeignTensorError(f"{label}: the DeviceTensor belongs to another ChipWorker; move "
                                        "it to this one first with w.copy(dst, src) (a peer copy)")
        mark = arg._freed
        if mark and (mark is True or not mark.recording()):
            raise freed_error(arg, label)
        if p.direction == SCALAR:
            raise PtoArgumentError(f"{label}: expected a {p.dtype.name} scalar, not a DeviceTensor")
        if arg._shape != p.shape or (arg._dtype is not p.dtype and arg._dtype != p.dtype):
            _mismatch(label, p, arg._shape, arg._dtype.np_name)


class _Specialised:
    """The binder's row shape for a scalar parameter compiled in as a number: a launch passes that number."""

    __slots__ = ("name", "value", "bits")

    def __init__(self, name: str, value, bits: int):
        self.name = name
        self.value = value
        self.bits = bits

    def check(self, arg, dtype: DataType, label: str) -> int:
        bits = scalar_bits(arg, dtype, label)
        if bits != self.bits:
            raise PtoArgumentError(
                f"{label}: the artifact was compiled for {self.name}={self.value!r} (a number given for a "
                f"scalar specialises the artifact: the body computes with it), got {arg!r}; compile for "
                f"this value, or give {self.name}=pl.RUNTIME to pass a value at each launch")
        return bits


def _row_shape(p, label: str, specialised: dict):
    """A parameter's shape as :meth:`Binder.bind` tests it: None for a scalar, :class:`_Specialised` for a fixed one."""
    if p.direction != SCALAR:
        return p.shape
    if p.name not in specialised:
        return None
    value = specialised[p.name]
    return _Specialised(p.name, value, scalar_bits(value, p.dtype, label))


def _mismatch(label: str, p, shape, dtype_name: str) -> None:
    if tuple(shape) != p.shape:
        raise PtoArgumentError(f"{label}: expected shape {p.shape}, got {tuple(shape)}")
    raise PtoArgumentError(f"{label}: expected dtype {p.dtype.np_name}, got {dtype_name}")
