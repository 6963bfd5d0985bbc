"""``pl.op``: PyPTO's op package, the tile language's operations under one namespace.

``pl.op.tensor``, ``pl.op.tile``, ``pl.op.system`` and ``pl.op.array`` are the
modules ``pl.tensor``, ``pl.tile``, ``pl.system`` and ``pl.array`` (the same
objects), and ``pl.op.<name>`` is the op ``pl.<name>`` for every operation
(element-wise, reductions, layout, memory, matmul, cross-core, gather and the
rest).  The language's other names (``pl.range``, ``pl.at``, ``pl.jit``,
types and dtypes) are not ops and are not here.

Kernels are traced, so a call spelled ``pl.op.tensor.add(a, b)`` or
``pl.op.tile.exp(t)`` in a ``@pl.jit`` or ``@pl.program`` body computes what
``pl.tensor.add`` / ``pl.tile.exp`` compute.
"""

from . import array, system, tensor, tile
from ._layout import *  # noqa: F401,F403
from ._layout import __all__ as _layout_all
from ._memory import *  # noqa: F401,F403
from ._memory import __all__ as _memory_all
from ._ops import *  # noqa: F401,F403
from ._ops import __all__ as _ops_all
from ._ops_compose import *  # noqa: F401,F403
from ._ops_compose import __all__ as _ops_compose_all
from ._ops_crosscore import *  # noqa: F401,F403
from ._ops_crosscore import __all__ as _ops_crosscore_all
from ._ops_extended import *  # noqa: F401,F403
from ._ops_extended import __all__ as _ops_extended_all
from ._ops_gather import *  # noqa: F401,F403
from ._ops_gather import __all__ as _ops_gather_all
from ._ops_index import *  # noqa: F401,F403
from ._ops_index import __all__ as _ops_index_all
from ._ops_math import *  # noqa: F401,F403
from ._ops_math import __all__ as _ops_math_all
from ._ops_mx import *  # noqa: F401,F403
from ._ops_mx import __all__ as _ops_mx_all
from ._program import create_tensor
from ._runtime_scalars import read, write
from ._split_aiv import aic_gather, aiv_shard, get_subblock_idx
from ._submit import get_block_idx
from ._tracer import index_max as max  # noqa: A001
from ._tracer import index_min as min  # noqa: A001

dim = tensor.dim

#: Module constants of the op modules that are not operations.
_NOT_OPS = {"AUTO"}

__all__ = [
    "tensor",
    "tile",
    "system",
    "array",
    "create_tensor",
    "dim",
    "read",
    "write",
    "get_block_idx",
    "get_subblock_idx",
    "aiv_shard",
    "aic_gather",
    "min",
    "max",
    *(name for name in (*_ops_all, *_memory_all, *_layout_all, *_ops_extended_all, *_ops_compose_all,
                        *_ops_crosscore_all, *_ops_math_all, *_ops_index_all, *_ops_mx_all, *_ops_gather_all)
      if name not in _NOT_OPS),
]
del AUTO  # noqa: F821 - brought in by _ops_crosscore's star import; a constant, not an op
