# setuptools reads everything from pyproject.toml; this file only points it at
# the cffi build script, which compiles the native driver (API mode).
from setuptools import setup

setup(cffi_modules=["pypto_async/_ffi_build.py:ffi"])
