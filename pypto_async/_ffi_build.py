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

# What the module exports: pto_* and PyInit_ (the version script), every pti_* hidden.
VERSION_SCRIPT = NATIVE / "pto_driver.map"

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
    # Relative to the project root: setuptools refuses absolute source paths.
    return sorted(str(p.relative_to(ROOT)) for p in (NATIVE / "src").glob("*.c"))


ffi = FFI()
ffi.cdef(cdef_text())
ffi.set_source(
    "pypto_async._pto_driver",
    '#include "pto_driver.h"\n',
    sources=_sources(),
    include_dirs=[str(NATIVE / "include"), str(KERNEL_INCLUDE), str(NATIVE / "src")],
    extra_compile_args=["-std=c11", "-O2", "-pthread", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                        "-Wno-unused-parameter", "-fvisibility=hidden",
                        *shlex.split(os.environ.get("PTO_DRIVER_CFLAGS", ""))],
    extra_link_args=["-pthread", "-ldl", f"-Wl,--version-script={VERSION_SCRIPT}",
                     *shlex.split(os.environ.get("PTO_DRIVER_LDFLAGS", ""))],
)

if __name__ == "__main__":
    # Rebuild in place for development, the way pip install -e . builds it:
    # objects go to a temporary directory, the module next to this file.
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for stale in (ROOT / "pypto_async").glob("_pto_driver*.so"):
            stale.unlink()
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--build-temp", tmp],
                       cwd=ROOT, check=True)
