"""A tensor stacked along its leading dimension, one shard per device: :class:`StackedDeviceTensor`.

What a :class:`~._distributed.DistributedWorker` runs programs and
collectives (:mod:`._collectives`) on: shard ``i`` is a
:class:`~._tensor.DeviceTensor` on worker ``worker_ids[i]``.
"""

from __future__ import annotations

import numpy as np

from ..errors import PtoArgumentError
from ._checks import int_tuple
from ._tensor import DeviceTensor

__all__ = ["StackedDeviceTensor"]


class StackedDeviceTensor:
    """A ``[B, *tail]`` tensor stacked along its leading dimension, one shard per worker.

    Shard ``i`` (``x[i]``) is a :class:`~pypto_async.runtime.DeviceTensor`
    of shape ``full_shape[1:]`` resident on worker ``worker_ids[i]`` of a
    :class:`DistributedWorker` (an index into its ``workers``).  Pass it to
    :meth:`DistributedWorker.run` where the program takes one shard per
    device; :meth:`DistributedWorker.alloc_stacked_tensor` makes one from a
    host array.

    Parameters
    ----------
    shards : sequence of DeviceTensor
        ``full_shape[0]`` shards of one dtype, each of shape ``full_shape[1:]``.
    full_shape : sequence of int
        The stacked shape ``(B, *tail)``, rank 2 or more, ``B >= 1``.
    worker_ids : sequence of int
        One distinct worker index per shard.

    Raises
    ------
    PtoArgumentError
        If any of those rules is broken; the message names it.
    """

    __slots__ = ("shards", "full_shape", "worker_ids")

    def __init__(self, shards, full_shape, worker_ids):
        shards = tuple(shards)
        full_shape = int_tuple(full_shape, "full_shape")
        worker_ids = int_tuple(worker_ids, "worker_ids")
        if len(full_shape) < 2:
            raise PtoArgumentError(f"StackedDeviceTensor.full_shape must have rank >= 2, got {full_shape}")
        b = full_shape[0]
        if b < 1:
            raise PtoArgumentError(f"StackedDeviceTensor needs at least one shard in the leading dim, "
                                   f"got full_shape {full_shape}")
        tail = full_shape[1:]
        if len(shards) != b:
            raise PtoArgumentError(f"StackedDeviceTensor expects {b} shards (leading dim of {full_shape}); "
                                   f"got {len(shards)}")
        if len(worker_ids) != b:
            raise PtoArgumentError(f"StackedDeviceTensor expects {b} worker_ids (one per shard); "
                                   f"got {len(worker_ids)}")
        if len(set(worker_ids)) != b:
            raise PtoArgumentError(f"StackedDeviceTensor.worker_ids must be distinct, got {worker_ids}")
        for i, shard in enumerate(shards):
            if not isinstance(shard, DeviceTensor):
                raise PtoArgumentError(f"shard {i} must be a DeviceTensor, got {type(shard).__name__}")
            if shard.shape != tail:
                raise PtoArgumentError(f"shard {i} has shape {shard.shape}; expected per-shard shape {tail} "
                                       f"(leading dim dropped from {full_shape})")
            if shard.dtype != shards[0].dtype:
                raise PtoArgumentError(f"shard {i} dtype {shard.dtype.np_name} differs from shard 0 dtype "
                                       f"{shards[0].dtype.np_name}")
        self.shards = shards
        self.full_shape = full_shape
        self.worker_ids = worker_ids

    @property
    def dtype(self):
        """The element type shared by every shard (a pl :class:`~pypto_async.DataType`)."""
        return self.shards[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """``full_shape``."""
        return self.full_shape

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, idx) -> DeviceTensor:
        """Shard ``i``, for ``x[i]`` (and ``x[i, ...]`` or whole-shard slices after the index).

        Raises
        ------
        IndexError
            For an index out of range, or too many indices.
        PtoArgumentError
            For a leading index that is not an int, or a partial slice of a shard.
        """
        rank, rest = (idx[0], idx[1:]) if isinstance(idx, tuple) and idx else (idx, ())
        if isinstance(idx, tuple) and not idx:
            raise IndexError("StackedDeviceTensor requires a leading-dim index")
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise PtoArgumentError(f"StackedDeviceTensor leading index must be int, got {type(rank).__name__}")
        if not 0 <= rank < len(self.shards):
            raise IndexError(f"shard index {rank} out of range [0, {len(self.shards)})")
        tail = self.full_shape[1:]
        if rest.count(Ellipsis) > 1:
            raise IndexError("StackedDeviceTensor index accepts at most one Ellipsis")
        if Ellipsis in rest:
            e = rest.index(Ellipsis)
            fill = len(tail) - (len(rest) - 1)
            if fill < 0:
                raise IndexError(f"too many indices for StackedDeviceTensor of shape {self.full_shape}")
            rest = rest[:e] + (slice(None),) * fill + rest[e + 1:]
        if len(rest) > len(tail):
            raise IndexError(f"too many indices for StackedDeviceTensor of shape {self.full_shape}")
        for axis, s in enumerate(rest):
            if s != slice(None) and s != slice(0, tail[axis]):
                raise PtoArgumentError(f"StackedDeviceTensor only supports whole-shard slicing on the leading "
                                       f"dim; got {s!r} on axis {axis + 1} (shard shape {tail})")
        return self.shards[int(rank)]

    def __repr__(self) -> str:
        return (f"StackedDeviceTensor(full_shape={self.full_shape}, worker_ids={self.worker_ids}, "
                f"dtype={self.dtype.np_name})")
