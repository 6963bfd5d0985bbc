"""The IR of pypto_async kernels, its passes, C code generation and compile().

``kernel.lower(*args)`` gives you a :class:`Program`; :func:`compile` turns
one into a :class:`CompiledProgram` (an artifact directory plus launch
metadata).  :data:`PIPELINE` lists the passes in the order they run.
"""

from ._codegen import CODEGEN_VERSION, generate_c
from ._compile import (
    DEFAULT_CFLAGS,
    PLATFORMS,
    SCHEMA_VERSION,
    ChipCallable,
    CompiledProgram,
    cache_dir,
    clear_cache,
    compile,
)
from ._nodes import *  # noqa: F401,F403
from ._nodes import __all__ as _nodes_all
from ._passes import PIPELINE, eliminate_dead_tiles, fuse_elementwise, infer_and_check, run_passes
from ._printer import format_program
from ._program import Program
from .distributed_compiled_program import compile  # noqa: F811 - ir.compile also takes multi-chip @pl.programs
from . import compiled_program, pass_manager  # noqa: F401 - PyPTO's module names
from .pass_manager import OptimizationStrategy  # PyPTO spells it ir.OptimizationStrategy too
from .pass_manager import PassDumpLevel
from ._function import Function, FunctionType
from ._serialize import deserialize, deserialize_from_file, serialize, serialize_to_file

__all__ = [
    "compile",
    "OptimizationStrategy",
    "CompiledProgram",
    "ChipCallable",
    "cache_dir",
    "clear_cache",
    "DEFAULT_CFLAGS",
    "PLATFORMS",
    "SCHEMA_VERSION",
    "CODEGEN_VERSION",
    "generate_c",
    "format_program",
    "Program",
    "Function",
    "FunctionType",
    "serialize",
    "deserialize",
    "serialize_to_file",
    "deserialize_from_file",
    "pass_manager",
    "PassDumpLevel",
    "PIPELINE",
    "run_passes",
    "infer_and_check",
    "eliminate_dead_tiles",
    "fuse_elementwise",
    *_nodes_all,
]
