"""The kernel-side C headers (pypto_async/include): warning-free, correct, and part of the cache key.

``pto_kernel.h`` is the ABI (block descriptor, status codes), ``pto_kernel_rt.h``
the helpers every generated kernel includes (BF16 rounding, Python's ``//`` and
``%``), ``pto_gemm.h`` the matrix multiplies.  Each header is compiled alone
with warnings as errors; the helpers are built into a small library (also
warning-free) and compared with Python and numpy on random data.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoOutOfMemory
from pypto_async.ir import _compile

from helpers.ir_fixtures import poison

INCLUDE = Path(__file__).resolve().parents[2] / "pypto_async" / "include"
HEADERS = ("pto_kernel.h", "pto_kernel_rt.h", "pto_gemm.h")
WARNINGS = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wconversion", "-Wstrict-prototypes")
CC = tuple(shlex.split(os.environ.get("CC") or "cc"))

_WRAPPERS = r"""
#include "pto_kernel_rt.h"
#include "pto_gemm.h"

int64_t t_floordiv(int64_t a, int64_t b);
int64_t t_mod(int64_t a, int64_t b);
uint16_t t_f2bf(float f);
float t_bf2f(uint16_t h);
void t_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                float *C, int64_t ldc, int accumulate);
void t_gemm_f64(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B, int64_t ldb,
                double *C, int64_t ldc, int accumulate);

int64_t t_floordiv(int64_t a, int64_t b) { return pto_floordiv(a, b); }
int64_t t_mod(int64_t a, int64_t b) { return pto_mod(a, b); }
uint16_t t_f2bf(float f) { return pto_f2bf(f); }
float t_bf2f(uint16_t h) { return pto_bf2f(h); }
void t_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                float *C, int64_t ldc, int accumulate)
{
    pto_gemm_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void t_gemm_f64(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B, int64_t ldb,
                double *C, int64_t ldc, int accumulate)
{
    pto_gemm_f64(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
"""


def _cc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CC, *args, f"-I{INCLUDE}"], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    """The helpers of pto_kernel_rt.h and pto_gemm.h, built with kernel flags and warnings as errors."""
    d = tmp_path_factory.mktemp("kernel-abi")
    (d / "wrappers.c").write_text(_WRAPPERS)
    lib = d / "wrappers.so"
    res = _cc(*ir.DEFAULT_CFLAGS, *WARNINGS, "-o", str(lib), str(d / "wrappers.c"), "-lm")
    assert res.returncode == 0, res.stderr
    so = ctypes.CDLL(str(lib))
    i64, f32p, f64p = ctypes.c_int64, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_double)
    for name, res_t, arg_t in [
        ("t_floordiv", i64, [i64, i64]),
        ("t_mod", i64, [i64, i64]),
        ("t_f2bf", ctypes.c_uint16, [ctypes.c_float]),
        ("t_bf2f", ctypes.c_float, [ctypes.c_uint16]),
        ("t_gemm_f32", None, [i64, i64, i64, f32p, i64, f32p, i64, f32p, i64, ctypes.c_int]),
        ("t_gemm_f64", None, [i64, i64, i64, f64p, i64, f64p, i64, f64p, i64, ctypes.c_int]),
    ]:
        fn = getattr(so, name)
        fn.restype, fn.argtypes = res_t, arg_t
    return so


@pytest.mark.parametrize("opt", ["-O0", "-O3"])
@pytest.mark.parametrize("header", HEADERS)
def test_each_header_compiles_alone_without_warnings(header, opt, tmp_path):
    src = tmp_path / "one.c"
    src.write_text(f'#include "{header}"\n#include "{header}"\n')  # twice: the include guard holds
    res = _cc(opt, *WARNINGS, "-c", "-o", str(tmp_path / "one.o"), str(src))
    assert res.returncode == 0, res.stderr


def test_status_codes_are_the_drivers():
    from pypto_async import _driver

    text = (INCLUDE / "pto_kernel.h").read_text()
    codes = {name: int(value) for name, value in re.findall(r"#define (PTO_E\w+)\s+(\d+)", text)}
    assert len(codes) == 12 and "PTO_EKERNEL" in codes and "PTO_ENOMEM" in codes
    for name, value in codes.items():
        assert getattr(_driver, name) == value and _driver.status_name(value) == name


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


@pytest.mark.slow
def test_floordiv_and_mod_are_pythons(helpers):
    rng = np.random.default_rng(7)
    lo, hi = -(2**63), 2**63 - 1
    pairs = [(int(a), int(b)) for a, b in rng.integers(-1000, 1000, size=(400, 2))]
    pairs += [(int(a), int(b)) for a, b in rng.integers(lo, hi, size=(200, 2), endpoint=True)]
    pairs += [(a, b) for a in (lo, hi, -7, 7, 0) for b in (lo, hi, -3, 3, -1, 1)]
    for a, b in pairs:
        if b == 0:
            continue
        assert helpers.t_floordiv(a, b) == _wrap64(a // b), (a, b)  # INT64_MIN // -1 wraps
        assert helpers.t_mod(a, b) == a % b, (a, b)
    # Division by zero returns 0 instead of trapping.
    assert helpers.t_floordiv(5, 0) == 0 and helpers.t_mod(5, 0) == 0
    assert helpers.t_floordiv(lo, -1) == lo and helpers.t_mod(lo, -1) == 0


def _bf16_nearest(x: np.float32) -> int:
    """The BF16 bits nearest to x, ties to the even pattern: from the two neighbours, in float64."""
    bits = int(np.float32(x).view(np.uint32))
    down = bits >> 16
    up = down + 1

    def value(h: int) -> float:
        return float(np.uint32(h << 16).view(np.float32))

    dd, du = abs(float(x) - value(down)), abs(value(up) - float(x))
    if dd != du:
        return down if dd < du else up
    return down if down % 2 == 0 else up


@pytest.mark.slow
def test_bf16_rounds_to_nearest_even(helpers):
    rng = np.random.default_rng(11)
    values = rng.standard_normal(2000).astype(np.float32) * np.float32(1e3)
    # Exact halfway points between neighbours, with an even and an odd lower neighbour.
    halfway = [np.uint32((h << 16) | 0x8000).view(np.float32) for h in (0x3F80, 0x3F81, 0xC2F6, 0xC2F7)]
    for x in [*values, *halfway, np.float32(0.0), np.float32(-0.0), np.float32(65504.0)]:
        h = helpers.t_f2bf(float(x))
        assert h == _bf16_nearest(x), (x, hex(h))
        assert helpers.t_bf2f(h) == float(np.uint32(h << 16).view(np.float32))
    assert helpers.t_f2bf(float("inf")) == 0x7F80 and helpers.t_f2bf(float("-inf")) == 0xFF80
    nan = helpers.t_f2bf(float("nan"))
    assert nan & 0x7F80 == 0x7F80 and nan & 0x7F  # still a NaN, quiet


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n, k", [(16, 64, 32), (13, 70, 300), (1, 31, 1), (9, 96, 513)])
def test_gemm_matches_numpy(helpers, dtype, m, n, k):
    """Full and edge panels (M, N not multiples of the block, K beyond one packed panel)."""
    rng = np.random.default_rng(m * 1000 + n + k)
    lda, ldb, ldc = k + 3, n + 5, n + 7  # leading dimensions wider than the matrices
    a = rng.standard_normal((m, lda)).astype(dtype)
    b = rng.standard_normal((k, ldb)).astype(dtype)
    c0 = rng.standard_normal((m, ldc)).astype(dtype)
    want = a[:, :k].astype(np.float64) @ b[:, :n].astype(np.float64)
    fn = helpers.t_gemm_f32 if dtype == np.float32 else helpers.t_gemm_f64
    ptr = ctypes.POINTER(ctypes.c_float if dtype == np.float32 else ctypes.c_double)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for accumulate in (0, 1):
        c = c0.copy() if accumulate else poison(c0.shape, dtype)
        c[:, n:] = 42  # the columns past N must stay untouched
        fn(m, n, k, a.ctypes.data_as(ptr), lda, b.ctypes.data_as(ptr), ldb, c.ctypes.data_as(ptr), ldc, accumulate)
        expect = want + (c0[:, :n] if accumulate else 0)
        err = np.abs(c[:, :n] - expect).max() / max(np.abs(expect).max(), 1.0)
        assert err < tol, (accumulate, err)
        assert (c[:, n:] == 42).all()


# --- generated code uses the headers ------------------------------------------------


@pl.jit
def _mm(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    pl.store(pl.matmul(pl.load(a, [0, 0], [16, 32]), pl.load(b, [0, 0], [32, 64])), [0, 0], c)


@pl.jit
def _floor(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    for i in pl.range(0, 8, 4):
        pl.store(pl.load(x, [i // 4 * 4 + i % 4, 0], [4, 16]), [i, 0], y)


@pytest.mark.slow
def test_generated_code_includes_the_headers_instead_of_defining_helpers():
    a, b, c = np.zeros((16, 32), np.float32), np.zeros((32, 64), np.float32), np.zeros((16, 64), np.float32)
    mm = _mm.compile(a, b, c).source_path.read_text()
    x = np.zeros((16, 16), np.float32)
    floor = _floor.compile(x, x).source_path.read_text()
    for src in (mm, floor):
        assert '#include "pto_kernel.h"' in src and '#include "pto_kernel_rt.h"' in src
        assert "static inline" not in src and "#define" not in src  # no helper text pasted in
    assert '#include "pto_gemm.h"' in mm and "pto_gemm_f32(" in mm
    assert '#include "pto_gemm.h"' not in floor and "pto_floordiv(" in floor and "pto_mod(" in floor


def _with_include(monkeypatch, tmp_path) -> Path:
    include = tmp_path / "include"
    shutil.copytree(INCLUDE, include)
    monkeypatch.setattr(_compile, "_INCLUDE", include)
    return include


@pytest.mark.slow
def test_editing_a_header_rebuilds_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    include = _with_include(monkeypatch, tmp_path)
    calls = []
    real = _compile._run_compiler
    monkeypatch.setattr(_compile, "_run_compiler", lambda *args: calls.append(args) or real(*args))
    x = np.zeros((16, 16), np.float32)
    prog = _floor.lower(x, x)
    first = ir.compile(prog)
    assert ir.compile(prog).output_dir == first.output_dir and len(calls) == 1  # a hit
    rt = include / "pto_kernel_rt.h"
    rt.write_text(rt.read_text() + "/* edited */\n")
    edited = ir.compile(prog)
    assert len(calls) == 2 and edited.output_dir != first.output_dir
    assert calls[-1][0:2] == (CC, tuple(ir.DEFAULT_CFLAGS))  # built with the same compiler and flags


def test_a_tile_buffer_that_cannot_be_allocated_fails_out_of_memory(launcher, tmp_path, rng):
    """The generated PTO_ENOMEM path: a heap tile whose allocation fails fails the launch, writes nothing."""
    shim = tmp_path / "no_alloc.h"
    shim.write_text("#include <stddef.h>\n"
                    "void *pto_test_no_alloc(size_t align, size_t n);\n"
                    "void *pto_test_no_alloc(size_t align, size_t n) { (void)align; (void)n; return NULL; }\n")

    @pl.jit
    def big(x: pl.Tensor, s: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [256, 256]) * 0.5  # 256 KiB, feeds a reduction: a heap buffer
        pl.store(pl.row_sum(t), [0, 0], s)

    x = rng.standard_normal((256, 256)).astype(np.float32)
    s = poison((256, 1))
    compiled = big.compile(x, s, extra_cflags=["-include", str(shim), "-Daligned_alloc=pto_test_no_alloc"])
    assert "blk->fail(blk, PTO_ENOMEM," in compiled.source_path.read_text()
    with pytest.raises(PtoOutOfMemory, match="out of memory for tile buffers"):
        launcher.run(compiled, x, s)
    assert np.isnan(s).all()
