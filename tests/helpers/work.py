"""Call a compiled kernel or task site directly, with our own ``pto_block``, and read back its ``pto_work``.

The driver turns ``blk->work`` into modeled time and keeps the counts to
itself; a test of the counts calls the kernel the way the driver does (one
block at a time, ``args`` the tensors' addresses and the scalars' raw bits)
from this thread, with a ``pto_block`` it made, and reads the ``pto_work``
the kernel added to.  The types come from the kernel headers themselves
(``pto_kernel.h``, ``pto_program.h``), so the layout is the compiler's.
"""

from __future__ import annotations

import ctypes
import re
import struct
from pathlib import Path

import cffi
import numpy as np

__all__ = ["WORK_FIELDS", "run_kernel", "run_site", "site_names"]

_INCLUDE = Path(__file__).resolve().parents[2] / "pypto_async" / "include"


def _cdef_text() -> str:
    kernel = (_INCLUDE / "pto_kernel.h").read_text()
    kernel = kernel.split("/* PTO_CDEF_BEGIN */", 1)[1].split("/* PTO_CDEF_END */", 1)[0]
    program = (_INCLUDE / "pto_program.h").read_text()
    defines = "".join(m.group(0) + "\n" for m in re.finditer(r"^#define\s+PTO_\w+\s+\d+", program, flags=re.M))
    program = defines + "typedef struct pto_orch" + program.split("typedef struct pto_orch", 1)[1]
    program = program.rsplit("#endif", 1)[0]
    text = kernel + program
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"^(#define\s+\w+\s+\d+)[uUlL]+\s*$", r"\1", text, flags=re.M)  # cffi takes plain numbers


ffi = cffi.FFI()
ffi.cdef(_cdef_text())

WORK_FIELDS = ("load_bytes", "load_rows", "store_bytes", "store_rows", "move_bytes", "fixpipe_bytes")


def _as_dict(w) -> dict:
    out = {f: int(getattr(w, f)) for f in WORK_FIELDS}
    out["vec_bytes"] = [int(w.vec_bytes[i]) for i in range(3)]
    out["cube_macs"] = [int(w.cube_macs[i]) for i in range(3)]
    out["overlap"] = int(w.overlap)
    return out


class _Call:
    def __init__(self, args):
        self.keep = []
        self.slots = ffi.new("void *[]", max(1, len(args)))
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous
                self.keep.append(a)
                self.slots[i] = ffi.cast("void *", a.ctypes.data)
            elif isinstance(a, float):
                self.slots[i] = ffi.cast("void *", struct.unpack("<Q", struct.pack("<d", a))[0])
            else:
                self.slots[i] = ffi.cast("void *", int(a) & (2**64 - 1))
        self.failed: list = []

        @ffi.callback("void(const pto_block *, int, const char *)")
        def fail(blk, code, msg):  # called on this thread, from the kernel we call
            self.failed.append((code, ffi.string(msg).decode()))

        self.fail = fail

    def block(self, work, idx: int, num: int):
        blk = ffi.new("pto_block *")
        blk.block_idx, blk.block_num, blk.core_idx = idx, num, 0
        blk.fail = self.fail
        blk.work = work
        return blk


def _address(lib_path: Path, symbol: str) -> int:
    lib = ctypes.CDLL(str(lib_path))
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def run_kernel(compiled, *args, blocks=None) -> dict:
    """Run every block (or the block indices in `blocks`) of `compiled` on `args`; return the summed work.

    `args` are numpy arrays (C-contiguous, the kernel's dtypes) and Python
    ints/floats for scalars, in the kernel's parameter order.  Raises
    AssertionError if a block failed.
    """
    fn = ffi.cast("void (*)(const pto_block *, void *const *)", _address(compiled.lib_path, compiled.symbol))
    call = _Call(args)
    work = ffi.new("pto_work *")
    n = compiled.block_num
    for b in range(n) if blocks is None else blocks:
        fn(call.block(work, b, n), call.slots)
    assert not call.failed, call.failed
    return _as_dict(work)


def _desc(compiled):
    f = ffi.cast("const pto_program_desc *(*)(void)", _address(compiled.lib_path, compiled.program_symbol))
    return f()


def site_names(compiled) -> list[str]:
    """The task sites of a compiled program, by name, in site order."""
    d = _desc(compiled)
    return [ffi.string(d.sites[k].name).decode() for k in range(d.nsites)]


def run_site(compiled, site: int, args, scratch=(), idx=()) -> dict:
    """Run task site `site` of a compiled program once, with loop indices `idx`; return its work.

    `scratch` are arrays for the program's intermediates, after `args`.
    """
    d = _desc(compiled)
    assert 0 <= site < d.nsites
    call = _Call([*args, *scratch])
    ix = ffi.new("int64_t[]", [*idx, 0] if idx else [0])
    work = ffi.new("pto_work *")
    d.sites[site].fn(call.block(work, 0, 1), call.slots, ix)
    assert not call.failed, call.failed
    return _as_dict(work)
