# setuptools reads everything from pyproject.toml; this file only names the compiled
# part: the native driver, built by its cffi script (API mode).
# PTO_DRIVER_CFLAGS / PTO_DRIVER_LDFLAGS reach it (sanitizer builds).
from setuptools import setup

setup(
    cffi_modules=["pypto_async/_ffi_build.py:ffi"],
)
