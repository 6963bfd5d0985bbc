"""What a built package holds: the files pyproject.toml's package data names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_package_ships_its_type_marker_and_kernel_header(tmp_path):
    # build_py copies exactly what a wheel would get from pyproject.toml (modules and
    # package data), without compiling the driver.
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    package = tmp_path / "pypto_async"
    assert (package / "py.typed").is_file()  # PEP 561: type checkers read the inline annotations
    assert (package / "include" / "pto_kernel.h").is_file()
    for header in ("pto_kernel_rt.h", "pto_gemm.h"):  # what generated kernels include besides the ABI
        assert (package / "include" / header).is_file(), header
