"""Build the native driver as the cffi extension ``pypto_async._pto_driver``.

The cdef is the text between ``PTO_CDEF_BEGIN`` and ``PTO_CDEF_END`` in the
public headers, so the declarations Python sees are the header itself; API mode
compiles against the real header, and a mismatch breaks the build, not a run.

Environment switches:

``PTO_DRIVER_CFLAGS``
    Extra compiler flags (for example ``-fsanitize=address -g``).
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex

from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native"
KERNEL_INCLUDE = ROOT / "pypto_async" / "include"
HEADERS = [KERNEL_INCLUDE / "pto_kernel.h", NATIVE / "include" / "pto_driver.h"]

_SECTION = re.compile(r"/\* PTO_CDEF_BEGIN \*/(.*?)/\* PTO_CDEF_END \*/", re.S)


def cdef_text() -> str:
    """Return the declarations between the cdef markers of every public header."""
    parts = []
    for header in HEADERS:
        found = _SECTION.findall(header.read_text())
        if not found:
            raise RuntimeError(f"{header}: no PTO_CDEF_BEGIN/END section")
        parts.extend(found)
    return "\n".join(parts)


def _sources() -> list[str]:
    return sorted(str(p) for p in (NATIVE / "src").glob("*.c"))


ffi = FFI()
ffi.cdef(cdef_text())
ffi.set_source(
    "pypto_async._pto_driver",
    '#include "pto_driver.h"\n',
    sources=_sources(),
    include_dirs=[str(NATIVE / "include"), str(KERNEL_INCLUDE), str(NATIVE / "src")],
    extra_compile_args=["-std=c11", "-O2", "-pthread", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                        "-Wno-unused-parameter", *shlex.split(os.environ.get("PTO_DRIVER_CFLAGS", ""))],
    extra_link_args=["-pthread", "-ldl", *shlex.split(os.environ.get("PTO_DRIVER_LDFLAGS", ""))],
)

if __name__ == "__main__":
    # Rebuild in place for development (pip install -e . does the same):
    # objects go to a temporary directory, the module next to this file.
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = pathlib.Path(ffi.compile(tmpdir=tmp, verbose=False))
        package = pathlib.Path(__file__).parent
        for stale in package.glob("_pto_driver*.so"):  # e.g. pip's abi3 build
            stale.unlink()
        shutil.copy2(built, package / built.name)
        print(f"built {built.name}")
