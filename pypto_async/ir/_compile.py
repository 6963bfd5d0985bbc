"""Compile a program into an artifact directory, through an on-disk cache.

An artifact directory holds ``kernel.c`` (the generated source), ``kernel.so``
(built with ``$CC``, default ``cc``), ``program.txt`` (the lowered IR) and
``compiled_meta.json`` (schema version, parameters, block count, platform,
compiler, flags, IR hash, symbol).  :meth:`CompiledProgram.from_dir` rebuilds
a handle from that directory alone.

The cache lives in ``$PYPTO_ASYNC_CACHE_DIR`` (default
``~/.cache/pypto_async``); an entry is keyed by the IR hash, the compiler, its
version and the flags, and the bytes of the headers in ``pypto_async/include``
that generated kernels include (``pto_kernel.h``, ``pto_kernel_rt.h``,
``pto_gemm.h``): editing a header rebuilds the kernels built against it.  An
entry is built in a private temporary directory inside the cache and published
with one ``os.rename``: two processes that build the same kernel at once both
succeed, and the loser uses the winner's entry.  A hit costs reading and
hashing the headers and a JSON read.  With GCC, the headers every generated
kernel starts with are precompiled once per compiler, flags and header bytes
(``pch/`` in the cache), built and published the same way; a kernel built
with them is the same library, and one that fails with them is built again
without.

An entry that cannot be read (its metadata missing, empty, not JSON or not
what this version writes, or its library gone) is a miss: it is rebuilt and
the new entry replaces it, published as any other.

A :class:`CompiledProgram` pickles as its artifact (the C source, the IR text
and the metadata, which names the compiler and flags), not as paths.  The
receiving process uses the entry a local :func:`compile` made for that IR
only when the carried artifact is byte for byte that entry's; otherwise it
builds the carried source into an entry of its own, keyed by a digest of
everything carried, so a received artifact never takes the key of a local
compile (a later local :func:`compile` of the same IR builds and runs what
this process generates).  That is how a program travels to another machine
(a Ray actor); like :meth:`CompiledProgram.from_dir`, the unpickled handle
has no ``program``.

Security: an artifact is code.  Unpickling a program runs the compiler
command its metadata names, with its flags, on its C source, and loading one
(:meth:`CompiledProgram.from_dir`, ``register``, a launch) dlopens its
``kernel.so`` into this process.  Never unpickle or load a program from a
source you do not trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType

from .._dtypes import as_dtype
from .._signature import IN, INOUT, OUT, PLATFORMS, SCALAR, ParamSpec
from ..errors import (PtoArgumentError, PtoCompileError, PtoError, PtoInvalidStateError, PtoLoadError,
                      PtoNotSupported)
from ._codegen import _INCLUDES, CODEGEN_VERSION
from ._deps import Edge, Task, TaskGraph
from ._program import Program
from ._passes import PIPELINE, run_passes
from .pass_manager import PassDumpLevel
from ._perf_hints import perf_hints, write_perf_hints
from ._run_script import write_run_script
from ._printer import format_program
from ._target import Target, plan

__all__ = [
    "CompiledProgram",
    "ChipCallable",
    "compile",
    "cache_dir",
    "clear_cache",
    "DEFAULT_CFLAGS",
    "SCHEMA_VERSION",
    "PLATFORMS",
]

SCHEMA_VERSION = 1
#: ``-fwrapv``: integer tiles wrap as numpy's do (an INT32 sum past its range; UINT16 products, which C
#: computes in ``int``), where C would leave signed overflow undefined.
DEFAULT_CFLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-ffp-contract=off", "-fno-math-errno",
                  "-fwrapv")
#: The runtime a program is bound to, PyPTO's default (``ChipWorker(runtime=...)`` must match).
RUNTIME_NAME = "tensormap_and_ringbuffer"
_META = "compiled_meta.json"
_SOURCE = "kernel.c"
_LIB = "kernel.so"
_IR_TEXT = "program.txt"
_INCLUDE = Path(__file__).resolve().parent.parent / "include"
_compiler_versions: dict[tuple[str, ...], str] = {}
_gnu_compilers: dict[tuple[str, ...], bool] = {}


def cache_dir() -> Path:
    """Return the kernel cache directory (``$PYPTO_ASYNC_CACHE_DIR`` or ``~/.cache/pypto_async``)."""
    env = os.environ.get("PYPTO_ASYNC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pypto_async"


def clear_cache() -> int:
    """Remove every cached kernel (and the precompiled headers); return how many kernels were removed."""
    shutil.rmtree(cache_dir() / "pch", ignore_errors=True)
    root = cache_dir() / "kernels"
    if not root.is_dir():
        return 0
    n = 0
    for entry in root.iterdir():
        if entry.is_dir() and not entry.name.startswith("tmp-"):
            n += 1
        shutil.rmtree(entry, ignore_errors=True)
    return n


@dataclass(frozen=True)
class ChipCallable:
    """The loadable kernel: a shared object, its entry symbol and block count."""

    lib_path: Path
    symbol: str
    block_num: int


class _ClassOrHandle:
    """A name that means one method on the class and another on a handle (``CompiledProgram.load``)."""

    def __init__(self, on_class: str, on_handle: str):
        self.on_class, self.on_handle = on_class, on_handle

    def __get__(self, obj, cls=None):
        return getattr(cls, self.on_class) if obj is None else getattr(obj, self.on_handle)


class CompiledProgram:
    """A handle to compiled artifacts plus what the runtime needs to launch them.

    Build one with :func:`pypto_async.ir.compile`, ``kernel.compile(*args)``
    or :meth:`from_dir`; call it (``compiled(*args, stream=None)``) to
    dispatch it through the runtime.

    As PyPTO's, the handle also stands for its artifact directory:
    ``str(compiled)`` and ``os.fspath(compiled)`` are ``output_dir``, and two
    handles of one directory (or a handle and that path) compare equal.
    """

    __test__ = False  # not a pytest test class, whatever a test module imports it as

    def __init__(self, output_dir: Path, meta: dict, program: Program | None):
        self.output_dir = Path(output_dir)
        self.platform: str = meta["platform"]
        self.backend_type: str = PLATFORMS.get(self.platform, self.platform)
        self.params = tuple(
            ParamSpec(p["name"], p["direction"], tuple(p["shape"]), as_dtype(p["dtype"])) for p in meta["params"]
        )
        #: The parameters' names, in call order (a list, as PyPTO's).
        self.param_names = [p.name for p in self.params]
        #: The indices of the pure ``Out`` parameters, those a return-style call allocates (as PyPTO's).
        self.output_indices = [i for i, p in enumerate(self.params) if p.direction == OUT]
        self.has_return: bool = meta["has_return"]
        self.block_num: int = meta["block_num"]
        self.symbol: str = meta["symbol"]
        self.lib_path = self.output_dir / _LIB
        self.source_path = self.output_dir / _SOURCE
        self.ir_hash: str = meta["ir_hash"]
        self.compiler: str = meta["compiler"]
        self.flags: tuple[str, ...] = tuple(meta["flags"])
        self.name: str = meta["name"]
        self.program = program
        self.chip_callable = ChipCallable(self.lib_path, self.symbol, self.block_num)
        self.runtime_name = RUNTIME_NAME
        self.runtime_config = {"block_num": self.block_num}
        #: ``"program"``: a task graph the device runs (its orchestration and tasks, one launch);
        #: ``"kernel"``: one kernel function.
        self.kind: str = meta.get("kind", "kernel")
        #: A program's descriptor entry (``pto_program_load``); ``symbol`` is its one-kernel entry.
        self.program_symbol: str | None = meta.get("program_symbol")
        #: The most tasks one ``pl.manual_scope()`` of the program holds (they stay in the task window).
        self.largest_scope: int = meta.get("largest_scope", 0)
        #: The parameters ``enable_dump_args=1`` dumps (marked with ``pl.dump_tag`` / ``dumps=``).
        self.dump_tags: tuple[str, ...] = tuple(str(n) for n in meta.get("dump_tags", ()))
        #: The scalar parameters compiled in as numbers (``kernel.compile(n=128)``), name to value: a
        #: launch passes that value there (another raises :class:`~pypto_async.errors.PtoArgumentError`).
        self.specialised: dict[str, int | float | bool] = dict(meta.get("specialised", {}))
        graph = meta.get("task_graph")
        #: The program's tasks (id and name, in submission order) and edges (a :class:`TaskGraph`);
        #: ``None`` when the program submits more than :data:`~pypto_async.ir._deps.MAX_TASKS` tasks.
        self.task_graph = None if graph is None else _graph_from_meta(graph)

    @classmethod
    def from_dir(cls, path, *, platform: str | None = None, backend_type=None) -> "CompiledProgram":
        """Rebuild a handle from an artifact directory alone (``program`` is None).

        ``platform`` and ``backend_type`` (PyPTO's overrides of the persisted ones) are taken when
        they name the simulator, the one platform an artifact here is built for; another raises
        :class:`PtoNotSupported` (a platform) or :class:`PtoArgumentError` (a backend).

        Loading the handle (``register``, a launch) dlopens the
        directory's ``kernel.so``, running its code in this process: never
        load a directory from a source you do not trust.

        Raises
        ------
        PtoLoadError
            If the directory lacks the metadata or the library, or the
            metadata is not JSON, not of a schema this version reads, or
            lacks a field or has one of the wrong type (the message names
            the directory and the field).
        """
        if platform is not None and platform not in PLATFORMS:
            raise PtoNotSupported(f"CompiledProgram.from_dir: unknown platform {platform!r}; supported: "
                                  f"{', '.join(PLATFORMS)}")
        if backend_type is not None:
            _pypto_options({"backend_type": backend_type}, platform or "sim")
        path = Path(path)
        meta = _read_meta(path)
        if not (path / _LIB).is_file():
            raise PtoLoadError(f"{path}: {_LIB} is missing")
        return cls(path, meta, None)

    load = _ClassOrHandle("from_dir", "_load_now")

    def _load_now(self) -> None:
        """Load the kernel library now, to find a broken artifact before the first launch.

        This is ``compiled.load()`` (PyPTO's eager load; a launch or
        ``register`` loads it anyway); ``CompiledProgram.load(path)``, on
        the class, is :meth:`from_dir`.  It dlopens ``kernel.so`` into this
        process, as a launch does.

        Raises
        ------
        PtoLoadError
            If the library is missing, cannot be loaded, or lacks the
            program's entry symbol.
        """
        import ctypes

        try:
            lib = ctypes.CDLL(str(self.lib_path))
        except OSError as exc:
            raise PtoLoadError(f"{self.name}: cannot load {self.lib_path} ({exc})") from exc
        for symbol in filter(None, (self.symbol, self.program_symbol)):
            if not hasattr(lib, symbol):
                raise PtoLoadError(f"{self.name}: {self.lib_path} has no symbol {symbol!r}")

    def __reduce__(self):
        """Pickle as the artifact; see :func:`_from_artifact` for the receiving side.

        Unpickling runs the C compiler command and flags the pickled
        metadata names on the pickled source, and a launch then
        dlopens what it built: never unpickle a program from a source
        you do not trust.
        """
        return (_from_artifact, (self._artifact(),))

    def _artifact(self) -> dict:
        try:
            return {
                "meta": json.loads((self.output_dir / _META).read_text()),
                "source": self.source_path.read_text(),
                "ir_text": (self.output_dir / _IR_TEXT).read_text(),
            }
        except (OSError, ValueError) as exc:
            raise PtoLoadError(f"cannot pickle {self.name!r}: its artifact directory {self.output_dir} "
                               f"is incomplete ({exc})") from exc

    def __call__(self, *args, stream=None, config=None):
        """Dispatch through the runtime (``pypto_async.runtime._entry.dispatch``).

        In place (every argument) or return style (the inputs only: the
        ``Out`` arrays are allocated and returned), as PyPTO's.  With
        ``config=RunConfig(...)`` it runs on the innermost open worker of
        that platform and device, else on a worker opened for the call, and
        the config's DFX switches apply to it.
        """
        return _dispatch(self, args, stream, config)

    def validate_ir(self, tensors: dict, expected: dict, *, rtol: float = 5e-2, atol: float = 5e-2) -> None:
        """Run the program after each pass as PyTorch and compare its results with `expected`.

        PyPTO's per-pass check: the program as handed to :func:`compile`,
        then the program after each pass of the pipeline (the stages
        ``dump_passes=True`` writes as ``passes_dump/NN_<pass>.txt``), is
        generated with :func:`pypto_async.debug.torch_codegen` and run on a
        copy of `tensors`; after each, every tensor `expected` names must be
        within ``torch.allclose(rtol=, atol=)`` of its golden.  The first
        stage that fails names the pass that changed the result.  Each stage
        prints a header and one ``validate tensor: ...`` line per tensor, as
        PyPTO's does.  The passes run again in memory, so ``dump_passes``
        is not needed.

        Parameters
        ----------
        tensors : dict
            Every parameter's value by name: a torch tensor (or a numpy
            array) of its shape and dtype, a number for a scalar.
        expected : dict
            Goldens by parameter name, for the tensors to compare.
        rtol, atol : float
            The tolerances, as PyPTO's defaults.

        Raises
        ------
        PtoInvalidStateError
            If the handle has no program (:meth:`from_dir`, unpickled).
        PtoArgumentError
            If a parameter is missing or not of its shape and dtype, an
            expected tensor is not a parameter, or a tolerance is negative;
            checked before any stage runs.
        AssertionError
            If a stage's result is off its golden (the message names the
            stage and the tensor).
        """
        from ..debug._validate import validate_stages  # upward: debug generates torch from this IR

        if self.program is None:
            raise PtoInvalidStateError(f"{self.name}: this handle was rebuilt from {self.output_dir} and has no "
                                       f"program to run through the passes; validate the handle ir.compile returned")
        stages = [(f"{i:02d}_{label}", stage) for i, (label, stage) in enumerate(pass_stages(self.program))]
        validate_stages(stages, tensors, expected, rtol=rtol, atol=atol)

    @property
    def orchestration_names(self) -> list[str]:
        """PyPTO's names of separately callable orchestrations: always empty here.

        A program here has one entry (one orchestration); call it directly.
        """
        return []

    def build_orch_args(self, *args, worker=None):
        """Check the call shape and complete `args`: ``(orch_args, coerced, return_style)``.

        See :func:`pypto_async.runtime._call.build_orch_args`: ``coerced``
        holds every argument in parameter order (the ``Out`` arrays of a
        return-style call allocated), ``orch_args`` the same as a tuple for
        ``w.run(compiled, *orch_args)``.  `worker` (PyPTO's: the worker that
        will dispatch them) may be given or not: the argument slots are made
        per launch, by whichever worker runs them.
        """
        from ..runtime._call import build_orch_args  # upward: the runtime is optional for compiling

        return build_orch_args(self, args)

    def build_call_config(self, config=None, *, aicpu_thread_num=None, dfx_dir=None):
        """Return the :class:`~pypto_async.runtime._call.CallConfig` one dispatch runs with.

        ``aicpu_thread_num`` is the keyword, else the config's, else the
        program's ``runtime_config``; `dfx_dir` becomes ``output_prefix``.
        """
        from ..runtime._call import build_call_config  # upward: the runtime is optional for compiling

        return build_call_config(self, config, aicpu_thread_num=aicpu_thread_num, dfx_dir=dfx_dir)

    def __fspath__(self) -> str:
        """The artifact directory, for code that takes what ``ir.compile`` returns as a path (PyPTO's older form)."""
        return str(self.output_dir)

    def __str__(self) -> str:
        """The artifact directory, as PyPTO's (``os.path.join(str(compiled), "kernel.c")``)."""
        return str(self.output_dir)

    def __eq__(self, other) -> bool:
        """Whether `other` is a handle of, or a path to, the same artifact directory (PyPTO's equality)."""
        if isinstance(other, CompiledProgram):
            return self.output_dir == other.output_dir
        if isinstance(other, (str, os.PathLike)):
            return str(self.output_dir) == os.fspath(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.output_dir)

    def __getitem__(self, name: str):
        """PyPTO's ``compiled[<orchestration>]``: there are none here (:attr:`orchestration_names` is empty).

        Raises
        ------
        KeyError
            Always, naming the program: call the handle itself.
        """
        raise KeyError(f"{self.name} has no orchestration {name!r}: a program here has one entry; call the "
                       f"handle itself (orchestration_names is empty)")

    def __repr__(self) -> str:
        return (
            f"<CompiledProgram {self.name} platform={self.platform!r} blocks={self.block_num} "
            f"params={list(self.param_names)} dir={str(self.output_dir)!r}>"
        )


def _from_artifact(artifact: dict, *_older) -> CompiledProgram:
    """Rebuild a pickled program through this process's kernel cache.

    The entry a local :func:`compile` made for the same IR, compiler, flags
    and platform is used when the carried artifact (source, IR text and
    metadata) is exactly what that entry holds, so a program unpickled where
    it was compiled costs a cache lookup.  Anything else is built from the
    carried source into an entry keyed by a digest of the whole artifact too:
    a received build never takes the key of a local compile, so it is never
    what a later local :func:`compile` runs.

    This runs the compiler command the metadata names on the carried source;
    a program from an untrusted source must not be unpickled.  (`_older`: a
    flag earlier versions pickled too, ignored.)

    Raises
    ------
    PtoLoadError
        If the artifact is malformed or its metadata not of a schema this
        version reads.
    """
    where = "a pickled program"
    if not isinstance(artifact, dict):
        raise PtoLoadError(f"{where}: the artifact is a {type(artifact).__name__}, not a dict")
    for field in ("source", "ir_text"):
        if not isinstance(artifact.get(field), str):
            raise PtoLoadError(f"{where}: artifact field {field!r} is missing or not a string")
    meta = _check_meta(artifact.get("meta"), where)
    cc = tuple(shlex.split(meta["compiler"]))
    flags = tuple(meta["flags"])
    root = cache_dir() / "kernels"
    local = root / _cache_key(meta["ir_hash"], meta["symbol"], cc, flags, meta["platform"])
    if _holds(local, artifact, meta):
        return CompiledProgram(local, meta, None)
    entry = root / _received_key(local.name, artifact["source"], artifact["ir_text"], meta)
    got = _entry_meta(entry, meta["ir_hash"], meta["symbol"])
    if got is None:
        got = _publish(root, entry, artifact["source"], artifact["ir_text"], meta, cc, flags)
    return CompiledProgram(entry, got, None)


def _holds(entry: Path, artifact: dict, meta: dict) -> bool:
    """Whether cache `entry` is readable and holds exactly the carried artifact."""
    if _entry_meta(entry, meta["ir_hash"], meta["symbol"]) != meta:
        return False
    try:
        return ((entry / _SOURCE).read_text() == artifact["source"]
                and (entry / _IR_TEXT).read_text() == artifact["ir_text"])
    except (OSError, ValueError):
        return False


def _received_key(local_key: str, source: str, ir_text: str, meta: dict) -> str:
    """The cache entry's name for a received artifact: the local key and a digest of all it carries."""
    digest = hashlib.sha256()
    for part in (source, ir_text, json.dumps(meta, sort_keys=True)):
        data = part.encode()
        digest.update(f"{len(data)}\n".encode())
        digest.update(data)
    key_src = json.dumps(["received", local_key, digest.hexdigest()])
    return hashlib.sha256(key_src.encode()).hexdigest()[:32]


# The fields of compiled_meta.json a handle reads: the types each must have (``int`` excludes bool).
_REQUIRED = {"name": str, "symbol": str, "platform": str, "block_num": int, "has_return": bool,
             "params": list, "compiler": str, "flags": list, "ir_hash": str}
_OPTIONAL = {"kind": str, "program_symbol": (str, NoneType), "largest_scope": int,
             "task_graph": (dict, NoneType), "dump_tags": list, "specialised": dict}
_DIRECTIONS = (IN, OUT, INOUT, SCALAR)


def _is(value, types) -> bool:
    if isinstance(value, bool) and types is int:
        return False
    return isinstance(value, types)


def _read_meta(path: Path) -> dict:
    """Read and check ``compiled_meta.json`` of artifact directory `path`.

    Raises
    ------
    PtoLoadError
        Naming `path` and what is wrong (see :func:`_check_meta`).
    """
    try:
        text = (path / _META).read_text()
    except (OSError, ValueError) as exc:
        raise PtoLoadError(f"{path}: not an artifact directory ({exc})") from exc
    try:
        meta = json.loads(text)
    except ValueError as exc:
        what = "empty" if not text.strip() else f"not JSON ({exc})"
        raise PtoLoadError(f"{path}: {_META} is {what}") from None
    except RecursionError:
        raise PtoLoadError(f"{path}: {_META} is nested too deeply to be metadata") from None
    return _check_meta(meta, str(path))


def _check_meta(meta, where: str) -> dict:
    """Return `meta` if it is compiled metadata this version reads, else raise :class:`PtoLoadError`.

    `where` (a directory, or "a pickled program") starts the message, which
    names the field that is missing or of the wrong type.
    """
    if not isinstance(meta, dict):
        raise PtoLoadError(f"{where}: {_META} holds a {type(meta).__name__}, not an object")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise PtoLoadError(f"{where}: {_META} schema {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}")

    def bad(field: str, want: str):
        got = "missing" if field not in meta else f"{type(meta[field]).__name__} {meta[field]!r}"[:80]
        raise PtoLoadError(f"{where}: {_META} field {field!r} must be {want}, got {got}")

    for field, types in _REQUIRED.items():
        if field not in meta or not _is(meta[field], types):
            bad(field, f"a {types.__name__}")
    for field, types in _OPTIONAL.items():
        if field in meta and not _is(meta[field], types):
            bad(field, " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,))))
    if meta.get("kind", "kernel") not in ("kernel", "program"):
        bad("kind", "'kernel' or 'program'")
    if meta.get("kind") == "program" and not isinstance(meta.get("program_symbol"), str):
        bad("program_symbol", "a str for a program")
    if not all(isinstance(f, str) for f in meta["flags"]):
        bad("flags", "a list of str")
    if not shlex.split(meta["compiler"]):
        bad("compiler", "a command")
    for i, p in enumerate(meta["params"]):
        ok = (isinstance(p, dict) and isinstance(p.get("name"), str) and p.get("direction") in _DIRECTIONS
              and isinstance(p.get("shape"), list) and all(_is(d, int) for d in p["shape"])
              and isinstance(p.get("dtype"), str))
        if ok:
            try:
                as_dtype(p["dtype"])
            except (PtoError, KeyError, ValueError, TypeError):
                ok = False
        if not ok:
            raise PtoLoadError(f"{where}: {_META} field 'params' entry {i} must be an object with a str name, "
                               f"a direction in {list(_DIRECTIONS)}, a list of int shape and a dtype name, "
                               f"got {p!r}"[:300])
    scalars = {p["name"]: p for p in meta["params"] if p["direction"] == SCALAR}
    for name, value in meta.get("specialised", {}).items():
        if name not in scalars or not isinstance(value, (int, float)):
            bad("specialised", "an object of scalar parameter names to numbers")
    graph = meta.get("task_graph")
    if graph is not None:
        try:
            _graph_from_meta(graph)
        except (KeyError, TypeError, AttributeError):
            raise PtoLoadError(f"{where}: {_META} field 'task_graph' must hold 'tasks' "
                               "(id, name) and 'edges' (src, dst, kind, hazard, tensor)") from None
    return meta


def _entry_meta(entry: Path, ir_hash: str, symbol: str) -> dict | None:
    """Return the metadata of cache `entry` when it is usable for `ir_hash` and `symbol`, else None (a miss)."""
    try:
        meta = _read_meta(entry)
    except PtoLoadError:
        return None
    if meta["ir_hash"] != ir_hash or meta["symbol"] != symbol or not (entry / _LIB).is_file():
        return None
    return meta


def _graph_to_meta(g: TaskGraph | None) -> dict | None:
    if g is None:
        return None
    return {
        "tasks": [{"id": t.id, "name": t.name} for t in g.tasks],
        "edges": [{"src": e.src, "dst": e.dst, "kind": e.kind, "hazard": e.hazard, "tensor": e.tensor}
                  for e in g.edges],
    }


def _graph_from_meta(graph: dict) -> TaskGraph:
    tasks = tuple(Task(t["id"], t["name"], ()) for t in graph["tasks"])
    edges = tuple(Edge(e["src"], e["dst"], e["kind"], e["hazard"], e["tensor"]) for e in graph["edges"])
    return TaskGraph(tasks, edges)


def _dispatch(compiled, args, stream, config=None):
    try:
        from ..runtime._entry import dispatch  # upward, and optional: see the ImportError below
    except ImportError as exc:
        raise PtoNotSupported(
            "no runtime: pypto_async.runtime is not available to dispatch this program "
            f"({exc}); load {compiled.lib_path} through the driver instead"
        ) from exc
    return dispatch(compiled, args, stream=stream, config=config)


_host: list[str] = []


def _host_id() -> str:
    """Name the CPU features ``-march=native`` depends on (machine + cpuinfo flags)."""
    if not _host:
        flags = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):
                        flags = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        _host.append(f"{_platform.machine()}:{hashlib.sha256(flags.encode()).hexdigest()[:16]}")
    return _host[0]


def _headers_digest(include: Path) -> str:
    """Hash the names and bytes of every header in `include` (what a kernel can include)."""
    h = hashlib.sha256()
    for path in sorted(include.glob("*.h")):
        data = path.read_bytes()
        h.update(f"{path.name} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def _compiler_version(cc: tuple[str, ...]) -> str:
    v = _compiler_versions.get(cc)
    if v is None:
        try:
            res = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as exc:
            raise PtoCompileError(f"C compiler {shlex.join(cc)!r} not found ({exc}); set CC") from exc
        v = (res.stdout.splitlines() or ["unknown"])[0].strip()
        _compiler_versions[cc] = v
        # GCC (not clang, which answers to gcc's name on some systems): the one whose .gch files are used.
        _gnu_compilers[cc] = "Free Software Foundation" in res.stdout and "clang" not in res.stdout.lower()
    return v


def _run_compiler(cc: tuple[str, ...], flags: tuple[str, ...], src: Path, lib: Path) -> None:
    """Build `src` into the shared object `lib`, with the precompiled headers where they apply.

    The result is the same either way (the precompiled headers are the
    kernel's first two includes, parsed once); a failure with them is retried
    without, so an unusable ``.gch`` costs time, never a build.
    """
    tail = [f"-I{_INCLUDE}", "-o", str(lib), str(src), "-lm"]
    pch = _pch_dir(cc, flags) if _starts_with_the_headers(src) else None
    if pch is not None:
        try:
            res = subprocess.run([*cc, *flags, f"-I{pch}", "-include", _PCH_HEADER, *tail],
                                 capture_output=True, text=True, timeout=600)
            if res.returncode == 0:
                return
        except OSError:
            pass
    cmd = [*cc, *flags, *tail]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except OSError as exc:
        raise PtoCompileError(f"C compiler {shlex.join(cc)!r} could not run ({exc}); set CC") from exc
    if res.returncode != 0:
        raise PtoCompileError(
            f"C compilation failed ({shlex.join(cmd)}), exit {res.returncode}:\n{res.stderr.strip()}"
        )
    if pch is not None:
        _pch_bad.add(pch)  # the kernel builds without it and not with it: this process no longer uses it


# -- precompiled headers ---------------------------------------------------------------
# Parsing pto_kernel.h and pto_kernel_rt.h (and the C library headers they include) is about a
# sixth of building a small kernel (10 of 60 ms of CPU).  GCC parses them once into a .gch per
# compiler, flags and header bytes (in the cache's ``pch/``), and a kernel whose source starts
# with exactly those two includes is built with ``-include`` of that header first: its own
# includes then find the include guards set, so it is the same translation unit and the same
# library, byte for byte (tests/ir/test_pch.py).

#: The header that is precompiled: the includes every generated kernel starts with.
_PCH_HEADER = "pto_kernel_pch.h"
_PCH_TEXT = "/* precompiled by pypto_async.ir: the headers every generated kernel starts with */\n" \
            + "\n".join(_INCLUDES) + "\n"
#: Flags after which ``-include`` of the precompiled header is not the kernel's first text.
_PCH_UNSAFE = ("-include", "-imacros", "-x", "-M", "-save-temps", "-E", "-S", "-c", "-fsyntax-only", "-flto")
_pch_bad: set[Path] = set()
_pch_known: dict[str, Path] = {}


def _starts_with_the_headers(src: Path) -> bool:
    """Whether `src` is a one-line comment, then exactly the includes that are precompiled."""
    try:
        with open(src) as f:
            head = [f.readline() for _ in range(1 + len(_INCLUDES))]
    except OSError:
        return False
    first = head[0].rstrip("\n")
    return (first.startswith("/*") and first.endswith("*/") and first.count("*/") == 1
            and [line.rstrip("\n") for line in head[1:]] == list(_INCLUDES))


def _pch_key(cc: tuple[str, ...], flags: tuple[str, ...]) -> str | None:
    """The precompiled header's name: compiler, its version, flags, headers (their bytes and folder), CPU."""
    if not _gnu_compilers.get(cc) or any(f.startswith(_PCH_UNSAFE) for f in flags):
        return None
    host = _host_id() if any(f.startswith(("-march=native", "-mcpu=native", "-mtune=native")) for f in flags) else ""
    src = json.dumps(["pch 1", list(cc), _compiler_version(cc), list(flags), host, str(_INCLUDE),
                      _headers_digest(_INCLUDE), _PCH_TEXT])
    return hashlib.sha256(src.encode()).hexdigest()[:32]


def _pch_dir(cc: tuple[str, ...], flags: tuple[str, ...]) -> Path | None:
    """Return the folder holding the precompiled header for `cc` and `flags`, building it once; None if none.

    Built in a private folder and published with one ``os.rename``, as a
    kernel is: processes building it at once all succeed and use whichever
    was published.  Any failure (not GCC, flags that move the includes, a
    compiler error, an unwritable cache) gives None, and kernels are built
    as before.
    """
    _compiler_version(cc)  # learns whether cc is GCC
    key = _pch_key(cc, flags)
    if key is None:
        return None
    gch = f"{_PCH_HEADER}.gch"
    known = _pch_known.get(key)  # one this process made or used, in any cache directory: the same bytes
    if known is not None and known not in _pch_bad and (known / gch).is_file():
        return known
    root = cache_dir() / "pch"
    final = root / key
    if final in _pch_bad:
        return None
    if (final / gch).is_file():
        _pch_known[key] = final
        return final
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
        (tmp / _PCH_HEADER).write_text(_PCH_TEXT)
        res = subprocess.run([*cc, *flags, f"-I{_INCLUDE}", "-x", "c-header", "-o", str(tmp / gch),
                              str(tmp / _PCH_HEADER)],
                             capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            _pch_bad.add(final)
            return None
        try:
            os.rename(tmp, final)
        except OSError:
            pass  # published by another process first (or damaged: then used below only if whole)
        if not (final / gch).is_file():
            return None
        _pch_known[key] = final
        return final
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _flags_from(kwargs) -> tuple[str, ...]:
    cflags = kwargs.pop("cflags", None)
    extra = kwargs.pop("extra_cflags", None)
    flags = list(DEFAULT_CFLAGS) if cflags is None else (shlex.split(cflags) if isinstance(cflags, str) else list(cflags))
    if extra:
        flags += shlex.split(extra) if isinstance(extra, str) else list(extra)
    for must in ("-shared", "-fPIC"):
        if must not in flags:
            flags.append(must)
    return tuple(flags)


def _meta(target: Target, platform: str, cc: str, flags, ir_hash: str, symbol: str) -> dict:
    program = target.program
    return {
        "schema_version": SCHEMA_VERSION,
        **target.meta(symbol),
        "name": program.name,
        "symbol": symbol,
        "platform": platform,
        "block_num": program.block_num,
        "has_return": program.ret is not None,
        "params": [
            {"name": p.name, "direction": p.direction, "shape": list(p.shape), "dtype": p.dtype.name}
            for p in program.params
        ],
        "compiler": cc,
        "flags": list(flags),
        "ir_hash": ir_hash,
        "codegen_version": CODEGEN_VERSION,
        "task_graph": _graph_to_meta(target.graph),
        "dump_tags": [n for n in program.dump_tags if any(p.name == n for p in program.params)],
        **({"specialised": dict(program.specialised)} if program.specialised else {}),
    }


def compile(program: Program, platform: str = "sim", output_dir=None, **kwargs) -> CompiledProgram:  # noqa: A001
    """Compile a program to an artifact directory and return its handle.

    Parameters
    ----------
    program : Program
        A traced (``kernel.trace``) or lowered (``kernel.lower``) program.
    platform : str
        ``"sim"`` (``"a2a3sim"`` and ``"a5sim"`` are aliases).
    output_dir : path-like, optional
        Also write the artifacts here; the handle then points here.
        Otherwise it points at the cache entry.
    cflags : str or sequence of str, optional
        Replace :data:`DEFAULT_CFLAGS` (``-shared -fPIC`` are always added).
    extra_cflags : str or sequence of str, optional
        Append to the flags.
    cc : str, optional
        The C compiler command (default ``$CC`` or ``cc``).
    validate_ir : bool, optional
        Accepted, no effect: the per-pass comparison is
        ``compiled.validate_ir(tensors, expected)``, which needs no option.
    dump_passes : bool or int, optional
        Write the program after each pass as ``passes_dump/NN_<pass>.txt``
        in the handle's directory (``00_input.txt`` is the program as handed
        in).
    profiling : bool, optional
        Write the compile's stage times (the passes; the build, code
        generation and C compiler, 0 for a cache hit) as
        ``report/pipeline_profile.json`` and ``.txt`` in the handle's
        directory.
    backend_type : str or pypto_async.backend.BackendType, optional
        Must name the platform's backend if given: ``"sim"``, or one of
        PyPTO's ``BackendType.Ascend910B``, ``Ascend950`` or ``PTO``, which
        name it here.
    distributed_config : None
        Distributed (L3) programs are not supported: anything but None
        raises :class:`PtoNotSupported`.
    strategy, skip_ptoas, verification_level, memory_planner, diagnostic_phase,
    disabled_diagnostics, analyze_auto_scopes_for_deps, enable_pypto_l0c_double_buffer,
    emit_source_loc, dump_ptoas_passes
        PyPTO's options that mean nothing on the simulator, accepted so
        PyPTO code compiles unchanged, with no effect: there is one pass
        pipeline, no ptoas step (kernels are compiled to C), no on-chip
        memory to plan or double-buffer, the checks always run and compile
        errors always carry the user's ``file:line``, task dependencies are
        always derived, and there are no diagnostics to gate.  The flags
        among them must be bools.

    Every compile also writes its performance hints, PyPTO's ``PH001`` (a
    load or store whose innermost dimension is below the chip's transfer
    granularity) and ``PH-MR-001`` (a ``pl.pipeline`` whose stages do not
    fit the on-chip buffers), as ``report/perf_hints.log`` in the handle's
    directory (:mod:`pypto_async.ir._perf_hints`); with none, there is no
    such file.

    Raises
    ------
    PtoNotSupported
        For an unknown platform.
    PtoCompileError
        If a check fails (message starts with ``file:line``) or the C
        compiler fails (message carries its output).
    """
    as_program = bool(getattr(program, "__pl_program__", False))
    if as_program:  # a @pl.program class: its IR as handed in
        program = program.trace()
    if not isinstance(program, Program):
        raise PtoArgumentError(f"ir.compile expects a Program (kernel.lower(...)) or a @pl.program class, "
                               f"got {type(program).__name__}")
    if platform not in PLATFORMS:
        raise PtoNotSupported(f"unknown platform {platform!r}; supported: {', '.join(PLATFORMS)}")
    kwargs = dict(kwargs)
    flags = _flags_from(kwargs)
    cc_text = kwargs.pop("cc", None) or os.environ.get("CC") or "cc"
    validate_ir = kwargs.pop("validate_ir", False)
    if validate_ir is not None and not isinstance(validate_ir, bool):
        raise PtoArgumentError("ir.compile: validate_ir must be a bool; call compiled.validate_ir(tensors, "
                               "expected) for the per-pass comparison")
    options = _pypto_options(kwargs, platform)
    if kwargs:
        raise PtoArgumentError(f"ir.compile: unknown options {sorted(kwargs)}")
    cc = tuple(shlex.split(cc_text))

    clock = time.perf_counter
    t0 = clock()
    lowered, dumps = _lower(program, options["dump_passes"])
    t1 = clock()
    target = plan(lowered, force=as_program)
    text = format_program(lowered)
    # The run-time extents change the C, not the printed program: they key the artifact too.
    dyn = "".join(f" dynamic {t}.{a}={sc}" for sc, t, a in getattr(lowered, "dynamic", ()))
    # So do the scalars specialised on: a launch is checked against them, even where the C is the same.
    dyn += "".join(f" specialised {n}={v!r}" for n, v in lowered.specialised)
    ir_hash = hashlib.sha256(f"codegen {CODEGEN_VERSION}{target.hash_tag}{dyn}\n{text}".encode()).hexdigest()
    symbol = f"{_c_name(lowered.name)[:_SYMBOL_STEM]}_{ir_hash[:12]}"  # the driver takes names < 48 bytes
    root = cache_dir() / "kernels"
    entry = root / _cache_key(ir_hash, symbol, cc, flags, platform)
    times = {"passes_s": t1 - t0, "build_s": 0.0, "cache_hit": True}
    meta = _entry_meta(entry, ir_hash, symbol)
    if meta is None:  # absent, or unreadable: rebuilt, and the new entry replaces it
        meta = _build(root, entry, target, text, platform, cc_text, flags, ir_hash, symbol, cc)
        times.update(build_s=clock() - t1, cache_hit=False)
    target = entry
    if output_dir is not None and Path(output_dir).resolve() != entry.resolve():
        target = Path(output_dir)
        target.mkdir(parents=True, exist_ok=True)
        for name in (_SOURCE, _IR_TEXT, _META, _LIB):
            tmp = target / f".{name}.{os.getpid()}.tmp"
            shutil.copyfile(entry / name, tmp)
            os.replace(tmp, target / name)
    write_perf_hints(target, perf_hints(lowered, platform))
    write_run_script(target, lowered)  # debug/run.py: the artifact run again from its directory alone
    if dumps:
        _write_pass_dumps(target, dumps)
    if options["profiling"]:
        _write_profile(target, lowered.name, times)
    handle = CompiledProgram(target, meta, program)
    if as_program and getattr(program, "dynamic", ()):  # extents read at run time: called with any of them
        from ..language._dynamic import dynamic_program  # upward: only a @pl.program (language) gets here

        return dynamic_program(handle)
    return handle


def _cache_key(ir_hash: str, symbol: str, cc: tuple[str, ...], flags: tuple[str, ...], platform: str) -> str:
    """The cache entry's name: the IR, the kernel's symbol, the compiler and its version, the flags, the CPU,
    the headers."""
    host = _host_id() if any(f.startswith(("-march=native", "-mcpu=native", "-mtune=native")) for f in flags) else ""
    # "key 2": entries made before received artifacts were kept apart are never looked up again.
    key_src = json.dumps(["key 2", ir_hash, symbol, list(cc), _compiler_version(cc), list(flags), platform, host,
                          _headers_digest(_INCLUDE)])
    return hashlib.sha256(key_src.encode()).hexdigest()[:32]


# PyPTO's ir.compile options that have no meaning on the simulator (see compile's doc).
_INERT_FLAGS = ("skip_ptoas", "analyze_auto_scopes_for_deps", "enable_pypto_l0c_double_buffer",
                "emit_source_loc", "dump_ptoas_passes")
_INERT_VALUES = ("strategy", "verification_level", "memory_planner", "diagnostic_phase",
                 "disabled_diagnostics")


def _pypto_options(kwargs: dict, platform: str) -> dict:
    """Take PyPTO's options out of `kwargs`; check them; return those that act here."""
    for name in _INERT_FLAGS:
        value = kwargs.pop(name, False)
        if value is not None and not isinstance(value, bool):
            raise PtoArgumentError(f"ir.compile: {name} must be a bool, not {value!r}")
    for name in _INERT_VALUES:
        value = kwargs.pop(name, None)
        if name == "memory_planner" and value is not None:
            from ..pypto_core.passes import MemoryPlanner  # only when a planner is given: PyPTO's option values

            if not isinstance(value, MemoryPlanner) and value not in [m.value for m in MemoryPlanner]:
                raise PtoArgumentError(f"ir.compile: memory_planner must be a pypto_core.passes.MemoryPlanner "
                                       f"(PYPTO, DSA_RP, PTOAS) or None, not {value!r}")
    backend = kwargs.pop("backend_type", None)
    # PyPTO's backends (Ascend910B, Ascend950; PTO in older releases) name the one backend here.
    from ..backend import SIM_BACKENDS

    if backend is not None and str(getattr(backend, "name", backend)) not in (PLATFORMS[platform], *SIM_BACKENDS):
        raise PtoArgumentError(f"ir.compile: backend_type {backend!r} is not platform {platform!r}'s "
                               f"backend ({PLATFORMS[platform]!r}); leave it None")
    dc = kwargs.pop("distributed_config", None)
    if dc is not None:
        # As PyPTO's ir.compile: a program without a HOST function compiles for one chip whatever the
        # config says (@pl.jit keys its cache on it).  (Named, not imported: that module imports this one.)
        if type(dc).__name__ != "DistributedConfig" and not isinstance(dc, dict):
            raise PtoArgumentError(f"ir.compile: distributed_config must be a DistributedConfig, got "
                                   f"{type(dc).__name__}")
    dump = kwargs.pop("dump_passes", False)

    if isinstance(dump, PassDumpLevel):  # PyPTO's verbosity levels: any but NONE writes the dump
        dump = dump is not PassDumpLevel.NONE
    profiling = kwargs.pop("profiling", False)
    for name, value in (("dump_passes", dump), ("profiling", profiling)):
        if not isinstance(value, (bool, int)) and value is not None:
            raise PtoArgumentError(f"ir.compile: {name} must be a bool, not {value!r}")
    return {"dump_passes": bool(dump), "profiling": bool(profiling)}


def pass_stages(program: Program) -> list[tuple[str, Program]]:
    """The program as compiled and after each pass: ``[("input", program), (pass name, program), ...]``.

    A traced program goes through every pass of :data:`PIPELINE`; a lowered
    one has one stage, the program as :func:`run_passes` checks it.  These
    are what ``dump_passes`` prints and ``CompiledProgram.validate_ir`` runs.
    """
    if program.stage == "lowered":
        return [("input", run_passes(program))]
    stages = [("input", program)]
    for p in PIPELINE:
        program = p(program)
        stages.append((getattr(p, "__name__", "pass").lstrip("_"), program))
    return stages


def _lower(program: Program, dump: bool) -> tuple[Program, list[tuple[str, str]]]:
    """Run the pass pipeline; with `dump`, also the program's text after each pass."""
    if not dump:
        return run_passes(program), []
    stages = pass_stages(program)
    return replace(stages[-1][1], stage="lowered"), [(label, format_program(p)) for label, p in stages]


def _write_pass_dumps(target: Path, dumps: list[tuple[str, str]]) -> None:
    out = target / "passes_dump"
    out.mkdir(parents=True, exist_ok=True)
    for i, (name, text) in enumerate(dumps):
        (out / f"{i:02d}_{name}.txt").write_text(text + "\n")


def _write_profile(target: Path, name: str, times: dict) -> None:
    out = target / "report"
    out.mkdir(parents=True, exist_ok=True)
    doc = {"program": name, **times}
    (out / "pipeline_profile.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"compile profile of {name}" + (" (cache hit)" if times["cache_hit"] else "")]
    lines += [f"  {stage:<8} {times[stage + '_s'] * 1e3:10.3f} ms" for stage in ("passes", "build")]
    (out / "pipeline_profile.txt").write_text("\n".join(lines) + "\n")


#: Characters of the program's name kept in its kernel symbol: with ``_`` and 12 of the IR hash, 47 bytes.
_SYMBOL_STEM = 34


def _c_name(name: str) -> str:
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return out if out and not out[0].isdigit() else f"k_{out}"


def _build(root: Path, entry: Path, target: Target, text, platform, cc_text, flags, ir_hash, symbol, cc) -> dict:
    meta = _meta(target, platform, cc_text, flags, ir_hash, symbol)
    source = target.source(symbol)
    return _publish(root, entry, source, text + "\n", meta, cc, flags)


def _publish(root: Path, entry: Path, source: str, ir_text: str, meta: dict, cc, flags) -> dict:
    """Build `source` in a private directory inside the cache and publish it as `entry`; return its metadata.

    Publishing is one ``os.rename``.  If `entry` exists and is usable (another
    process published it first) that one is kept; if it exists and is not
    (unreadable metadata, no library), it is moved aside and this build takes
    its place.
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"tmp-{entry.name}-", dir=root))
    except OSError as exc:
        raise PtoCompileError(f"cannot use the kernel cache {root} ({exc}); set PYPTO_ASYNC_CACHE_DIR") from exc
    try:
        (tmp / _SOURCE).write_text(source)
        (tmp / _IR_TEXT).write_text(ir_text)
        _run_compiler(cc, flags, tmp / _SOURCE, tmp / _LIB)
        (tmp / _META).write_text(json.dumps(meta, indent=2) + "\n")
        for attempt in range(3):
            try:
                os.rename(tmp, entry)
                return meta
            except OSError:
                # Someone else published this entry first: theirs is as good as ours.
                theirs = _entry_meta(entry, meta["ir_hash"], meta["symbol"])
                if theirs is not None:
                    return theirs
                if attempt == 2:
                    raise
                _discard(root, entry)  # a damaged entry: out of the way, then publish ours
        raise AssertionError("unreachable")
    except PtoError:
        raise
    except OSError as exc:
        raise PtoCompileError(f"could not write the kernel cache entry {entry}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _discard(root: Path, entry: Path) -> None:
    """Move a damaged cache entry aside with one rename (readers see it or nothing), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=f"tmp-stale-{entry.name}-", dir=root))
    try:
        os.rename(entry, trash / "entry")
    except FileNotFoundError:
        pass  # another process moved it already
    finally:
        shutil.rmtree(trash, ignore_errors=True)
