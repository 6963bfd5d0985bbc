"""The driver module exports its ABI only: every pto_* of the header, no pti_*.

The build hides private symbols (``-fvisibility=hidden`` and
``native/pto_driver.map``, ``local: *;``), as liburing's ``liburing.map`` does.
"""

import ctypes
import pathlib
import re
import shutil
import subprocess

import pytest

from pypto_async import _ffi_build, _pto_driver

ROOT = pathlib.Path(__file__).resolve().parents[2]
SO = _pto_driver.__file__
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def _functions(text: str, prefix: str) -> set[str]:
    """Return the names ``prefix*`` that the C text declares as functions (comments left out)."""
    return set(re.findall(rf"\b({prefix}\w+)\s*\(", _COMMENT.sub("", text)))


def _exported() -> set[str] | None:
    """Return the module's defined dynamic symbols, or None without binutils."""
    if shutil.which("nm") is None:
        return None
    out = subprocess.run(["nm", "-D", "--defined-only", SO], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_no_private_function_resolves_in_the_driver_module():
    private = _functions((ROOT / "native" / "src" / "internal.h").read_text(), "pti_")
    assert len(private) > 50  # the parse found the private declarations
    so = ctypes.CDLL(SO)
    visible = sorted(name for name in private if hasattr(so, name))
    assert visible == []


def test_every_public_function_resolves_in_the_driver_module():
    public = _functions(_ffi_build.cdef_text(), "pto_")
    assert "pto_stream_launch" in public and "pto_device_open" in public
    so = ctypes.CDLL(SO)
    missing = sorted(name for name in public if not hasattr(so, name))
    assert missing == []


@pytest.mark.slow
def test_the_module_exports_the_abi_and_its_init_only():
    exported = _exported()
    if exported is None:
        pytest.skip("needs nm (binutils)")
    public = _functions(_ffi_build.cdef_text(), "pto_")
    assert exported == public | {"PyInit__pto_driver"}


def test_private_struct_and_enum_tags_keep_pto():
    # internal.h's rule: functions, macros and constants are pti_*, struct and enum tags pto_*.
    src = ROOT / "native" / "src"
    found = sorted({f"{p.name}: {m}" for p in src.glob("*.[ch]")
                    for m in re.findall(r"\b(?:struct|enum|union)\s+pti_\w+", _COMMENT.sub("", p.read_text()))})
    assert found == []
