# setuptools reads everything from pyproject.toml; this file only names the two
# compiled parts: the native driver, built by its cffi script (API mode), and the
# common case of automatic ordering (a CPython extension, native/python/).
# PTO_DRIVER_CFLAGS / PTO_DRIVER_LDFLAGS reach both (sanitizer builds).
import os
import shlex

from setuptools import Extension, setup

setup(
    cffi_modules=["pypto_async/_ffi_build.py:ffi"],
    ext_modules=[
        Extension(
            "pypto_async._fastorder",
            sources=["native/python/fastorder.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                *shlex.split(os.environ.get("PTO_DRIVER_CFLAGS", ""))],
            extra_link_args=shlex.split(os.environ.get("PTO_DRIVER_LDFLAGS", "")),
        )
    ],
)
