"""The tile language: write kernels as ``@pl.jit`` Python functions.

``import pypto_async.language as pl``.  A kernel's parameters are annotated
``pl.Tensor`` (input), ``pl.Out[pl.Tensor]``, ``pl.InOut[pl.Tensor]`` or
``pl.Scalar[dtype]``; its body loads tiles, computes with tile ops, and stores
tiles back, inside ``pl.at`` scopes, ``pl.range`` loops and ``pl.spmd``
blocks.  Calling the kernel traces it for the arguments' shapes and dtypes,
compiles it (once per signature) and dispatches it through the runtime.

Semantics worth knowing:

* Element-wise ops broadcast like numpy (a ``[rows, 1]`` or ``[1, cols]``
  tile against a 2-D tile); a Python number or a ``pl.Scalar`` parameter may
  stand on either side of a binary op.
* FP16 and BF16 tiles compute in FP32 and round once, when cast or stored;
  matmul of FP32/FP16/BF16 tiles gives FP32, of FP64 gives FP64.  Integer
  ``div`` on integers rounds toward zero, as PyPTO's (0 for a zero divisor); integer arithmetic wraps.
* ``pl.matmul(a, b, acc=t)`` / ``pl.matmul_acc(t, a, b)`` update ``t`` in
  place, so an accumulator carries across ``pl.range`` iterations.
* Distinct tensor arguments must not overlap in memory (the generated code
  declares them ``restrict``); use ``pl.InOut`` to update a tensor in place.
* Tiles live in PyPTO's memory spaces (``pl.MemorySpace``, ``pl.Mem``) and
  the placement rules are checked: loads land in Vec or Mat, Left/Right/Bias
  are reached only by ``pl.move`` and read only by the cube, Acc only by
  matmul.  The sim computes the same numbers in every space.
* A tile may be partially valid (``pl.load(..., valid_shape=)``): the rest is
  padding until ``pl.fillpad``; stores write the valid box only.
* A tile name rebound in a ``pl.range`` body is carried across iterations
  (``init_values=`` / ``pl.yield_`` is the explicit form).
"""

from .._dtypes import (ALL_DTYPES, BF16, BOOL, FP8E4M3FN, FP8E5M2, FP8E8M0, FP16, FP32, FP64, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32,
                       UINT64, DataType)
from .._dtypes import FP4, HF4, HF8, INT4, UINT4  # PyPTO's storage-only types: named, refused when used
from . import array, system, tile
from ._carry import yield_
from ._control import TaskId, at, auto_incore, incore, manual_scope, parallel, range, spmd
from ._jit import JitFunction, jit
from ._hints import CrossCoreSlot, ScopeMode, Split, SplitMode, cross_core_slot, scope, split
from ._inline import InlineFunction
from ._inline import inline
from ._loops import cond, pipeline, unroll, while_
from .array import TASK_ID
from ._program import FunctionType, ProgramDef, create_tensor, func_attr, function, program
from ._layout import *  # noqa: F401,F403
from ._layout import __all__ as _layout_all
from ._memory import *  # noqa: F401,F403
from ._memory import __all__ as _memory_all
from ._ops import *  # noqa: F401,F403
from ._ops import __all__ as _ops_all
from ._ops_extended import *  # noqa: F401,F403
from ._ops_extended import __all__ as _ops_extended_all
from ._ops_compose import *  # noqa: F401,F403
from ._ops_compose import __all__ as _ops_compose_all
from ._ops_crosscore import *  # noqa: F401,F403
from ._ops_crosscore import __all__ as _ops_crosscore_all
from ._ops_math import *  # noqa: F401,F403
from ._ops_math import __all__ as _ops_math_all
from ._ops_index import *  # noqa: F401,F403
from ._ops_index import __all__ as _ops_index_all
from ._ops_mx import *  # noqa: F401,F403
from ._ops_mx import __all__ as _ops_mx_all
from ._ops_sync import PipeType
from ._ops_mx import MxLayout

#: PyPTO's MX scale layouts (the third item of a scale tensor's pl.Tensor[...]).
MX_A_ZZ, MX_B_NN = MxLayout.MX_A_ZZ, MxLayout.MX_B_NN
from ._ops_gather import *  # noqa: F401,F403
from ._ops_gather import __all__ as _ops_gather_all
from ._runtime_scalars import read, write
from ._split_aiv import aic_gather, aiv_shard, get_subblock_idx, split_aiv
from ._submit import dump_tag, get_block_idx, no_dep, spmd_submit, submit
from ._directives import RUNTIME, const, static_assert, static_print
from ._tracer import Index, ScalarArg, TensorArg, Tile
from ._tracer import index_max as max  # noqa: A001
from ._tracer import index_min as min  # noqa: A001
from ._placement import MemRef, cluster, dynamic
from ._placement import DynamicDim as DynVar  # PyPTO's name of what pl.dynamic returns
from ._view import TensorLayout, TensorView, TileView
from ._parse import loads, loads_program, parse, parse_program
from . import tensor
from ._types import AtomicType, InOut, Level, Mem, MemorySpace, Out, PadValue, Scalar, Tensor
from .distributed_host import Role
from . import op  # PyPTO's op package: pl.op.tensor, pl.op.tile, pl.op.<name>
from . import optimizations, prefetch
from .prefetch import AsyncEvent, AsyncSession, PrefetchAsyncContext

#: PyPTO's index dtype: a 64-bit integer here (``n: pl.INDEX`` is an INT64 scalar parameter).
INDEX = INT64

#: PyPTO's layout names: ``pl.ND`` (row-major, the default), ``pl.DN``, ``pl.NZ``.
ND, DN, NZ = TensorLayout.ND, TensorLayout.DN, TensorLayout.NZ
dim = tensor.dim  # PyPTO's pl.dim: only at tensor level
JITFunction = JitFunction  # PyPTO's spelling (pypto.jit.JITFunction)
#: PyPTO's type alias of a shape or offset argument: an int or a traced integer value.
IntLike = int | Index | ScalarArg


class _Annotation:
    """``pl.Tuple[T1, T2]`` / ``pl.Array[n, dtype]``: PyPTO's type annotations, which a kernel's tracing reads no further."""

    def __init__(self, name: str, args=()):
        self._name, self.args = name, args

    def __getitem__(self, args):
        return _Annotation(self._name, args if isinstance(args, tuple) else (args,))

    def __repr__(self) -> str:
        return f"pl.{self._name}" + (f"[{', '.join(map(repr, self.args))}]" if self.args else "")


Tuple = _Annotation("Tuple")
Array = _Annotation("Array")

__all__ = [
    "jit",
    "JitFunction",
    "JITFunction",
    "DynVar",
    "IntLike",
    "Tensor",
    "Out",
    "InOut",
    "Scalar",
    "Level",
    "Role",
    "MemorySpace",
    "Mem",
    "PadValue",
    "AtomicType",
    "at",
    "incore",
    "auto_incore",
    "manual_scope",
    "TaskId",
    "program",
    "function",
    "func_attr",
    "FunctionType",
    "ProgramDef",
    "create_tensor",
    "range",
    "parallel",
    "yield_",
    "unroll",
    "pipeline",
    "while_",
    "cond",
    "SplitMode",
    "Split",
    "CrossCoreSlot",
    "split",
    "cross_core_slot",
    "ScopeMode",
    "scope",
    "InlineFunction",
    "array",
    "TASK_ID",
    "spmd",
    "tile",
    "tensor",
    "system",
    "op",
    "prefetch",
    "optimizations",
    "PrefetchAsyncContext",
    "AsyncEvent",
    "AsyncSession",
    "MemRef",
    "TensorView",
    "TileView",
    "TensorLayout",
    "dynamic",
    "cluster",
    "parse",
    "loads",
    "parse_program",
    "loads_program",
    "inline",
    "Tile",
    "Index",
    "TensorArg",
    "ScalarArg",
    "DataType",
    "ALL_DTYPES",
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
    "INT4",
    "UINT4",
    "FP4",
    "HF4",
    "HF8",
    "INDEX",
    "ND",
    "DN",
    "NZ",
    "dim",
    "Tuple",
    "Array",
    "min",
    "max",
    "read",
    "write",
    "submit",
    "spmd_submit",
    "get_block_idx",
    "get_subblock_idx",
    "split_aiv",
    "aiv_shard",
    "aic_gather",
    "no_dep",
    "dump_tag",
    "static_print",
    "static_assert",
    "const",
    "RUNTIME",
    *_ops_all,
    *_memory_all,
    *_layout_all,
    *_ops_extended_all,
    *_ops_compose_all,
    *_ops_crosscore_all,
    *_ops_math_all,
    *_ops_index_all,
    *_ops_mx_all,
    "PipeType",
    "MX_A_ZZ",
    "MX_B_NN",
    *_ops_gather_all,
]
