"""native/src/kernel.c: builtins against numpy, loading .so kernels, launch checks."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from helpers import held, new_token
from pypto_async._driver import PTO_EFAULT, PTO_EKERNEL, check, ffi, lib
from pypto_async.errors import PtoArgumentError, PtoLoadError

from helpers.raw_driver import alloc, builtin, d2h, f32_bits, h2d, launch, sync

KERNEL_INCLUDE = pathlib.Path(__file__).resolve().parents[2] / "pypto_async" / "include"

KERNEL_SRC = r"""
#include <string.h>
#include "pto_kernel.h"
/* out[i] = i * 10 + block index that wrote it; fail if args[2] != 0. */
void stamp(const pto_block *blk, void *const *args) {
    uint64_t out, n, fail;
    memcpy(&out, &args[0], 8); memcpy(&n, &args[1], 8); memcpy(&fail, &args[2], 8);
    if (fail && blk->block_idx == 1) { blk->fail(blk, PTO_EKERNEL, "stamp: asked to fail"); return; }
    uint64_t chunk = (n + blk->block_num - 1) / blk->block_num;
    uint64_t lo = chunk * blk->block_idx, hi = lo + chunk > n ? n : lo + chunk;
    int32_t *o = (int32_t *)(uintptr_t)out;
    for (uint64_t i = lo; i < hi; i++) o[i] = (int32_t)(i * 10 + blk->block_idx);
}
"""


def _poisoned(n):
    return np.full(n, np.nan, dtype=np.float32)


@pytest.fixture
def bufs(dev, stream):
    ptrs = []

    def _alloc(nbytes):
        ptrs.append(alloc(dev, nbytes, stream))
        return ptrs[-1]

    yield _alloc
    for p in ptrs:
        check(lib.pto_stream_free(stream, p, 0))
    sync(stream)


def test_builtin_names_and_unknown(dev):
    for name in ("noop", "fill_f32", "add_f32", "axpy_f32", "spin", "fail"):
        assert ffi.string(lib.pto_kernel_name(builtin(dev, name))) == name.encode()
    with pytest.raises(PtoArgumentError):
        builtin(dev, "no_such_kernel")


@pytest.mark.parametrize("blocks", [1, 3, 7])
def test_add_f32_matches_numpy(dev, cq, stream, bufs, rng, blocks):
    n = 10_001
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = _poisoned(n)
    pa, pb, po = bufs(n * 4), bufs(n * 4), bufs(n * 4)
    h2d(stream, pa, a)
    h2d(stream, pb, b)
    h2d(stream, po, out)  # poison the device output too (out stays alive until sync)
    t = new_token()
    launch(stream, builtin(dev, "add_f32"), blocks, [pa, pb, po, n], t)
    d2h(stream, out, po)
    sync(stream)
    assert cq.wait(t)[t].status == 0
    np.testing.assert_array_equal(out, a + b)


def test_axpy_and_fill_match_numpy(dev, stream, bufs, rng):
    n = 4097
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    alpha = np.float32(-1.75)
    px, py, pf = bufs(n * 4), bufs(n * 4), bufs(n * 4)
    h2d(stream, px, x)
    h2d(stream, py, y)
    launch(stream, builtin(dev, "axpy_f32"), 5, [f32_bits(alpha), px, py, n])
    check(lib.pto_stream_memset(stream, pf, 0xFF, n * 4, 0))
    launch(stream, builtin(dev, "fill_f32"), 3, [pf, f32_bits(3.25), n])
    got_y, got_f = _poisoned(n), _poisoned(n)
    d2h(stream, got_y, py)
    d2h(stream, got_f, pf)
    sync(stream)
    np.testing.assert_allclose(got_y, alpha * x + y, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got_f, np.full(n, 3.25, dtype=np.float32))


def test_more_blocks_than_elements(dev, stream, bufs):
    n = 3
    pf = bufs(64)
    launch(stream, builtin(dev, "fill_f32"), 8, [pf, f32_bits(-2.0), n])
    out = _poisoned(n)
    d2h(stream, out, pf)
    sync(stream)
    np.testing.assert_array_equal(out, [-2.0] * 3)


def test_spin_and_noop_complete(dev, cq, stream):
    t1, t2 = new_token(), new_token()
    launch(stream, builtin(dev, "spin"), 4, [200], t1)
    launch(stream, builtin(dev, "noop"), 1, [], t2)
    recs = cq.wait(t1, t2)
    assert (recs[t1].status, recs[t2].status) == (0, 0)
    assert recs[t1].end_ns - recs[t1].start_ns >= 200_000


@pytest.mark.parametrize("code, status", [(0, -PTO_EKERNEL), (PTO_EFAULT, -PTO_EFAULT)])
def test_fail_builtin_reports_code_and_message(dev, cq, stream, code, status):
    t = new_token()
    launch(stream, builtin(dev, "fail"), 3, [code], t)
    rec = cq.wait(t)[t]
    assert rec.status == status and rec.message


def test_launch_argument_checks(dev, stream):
    k = builtin(dev, "noop")
    with pytest.raises(PtoArgumentError):
        check(lib.pto_stream_launch(stream, k, 0, ffi.NULL, 0, 0))  # zero blocks


def test_load_errors(dev, tmp_path):
    out = ffi.new("pto_kernel **")
    with pytest.raises(PtoLoadError, match="missing.so"):
        check(lib.pto_kernel_load(dev, str(tmp_path / "missing.so").encode(), b"k", out))
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(PtoLoadError):
        check(lib.pto_kernel_load(dev, str(junk).encode(), b"k", out))


@pytest.fixture(scope="module")
def stamp_so(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"  # the driver's own build needs one too
    d = tmp_path_factory.mktemp("kernel")
    (d / "stamp.c").write_text(KERNEL_SRC)
    so = d / "stamp.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{KERNEL_INCLUDE}", "-o", str(so), str(d / "stamp.c")],
                   check=True)
    return so


def test_load_and_launch_a_shared_object(dev, cq, stream, bufs, stamp_so):
    out = ffi.new("pto_kernel **")
    with pytest.raises(PtoLoadError, match="nope"):
        check(lib.pto_kernel_load(dev, str(stamp_so).encode(), b"nope", out))
    check(lib.pto_kernel_load(dev, str(stamp_so).encode(), b"stamp", out))
    k = out[0]
    assert ffi.string(lib.pto_kernel_name(k)) == b"stamp"
    n, blocks = 1000, 4
    p = bufs(n * 4)
    check(lib.pto_stream_memset(stream, p, 0xFF, n * 4, 0))
    t1, t2 = new_token(), new_token()
    launch(stream, k, blocks, [p, n, 0], t1)
    got = np.zeros(n, dtype=np.int32)
    d2h(stream, got, p)
    sync(stream)
    assert cq.wait(t1)[t1].status == 0
    idx = np.arange(n)
    np.testing.assert_array_equal(got, idx * 10 + idx // 250)
    launch(stream, k, blocks, [p, n, 1], t2)
    rec = cq.wait(t2)[t2]
    assert rec.status == -PTO_EKERNEL and "asked to fail" in rec.message
    lib.pto_kernel_unload(k)


def test_unload_waits_for_queued_launches(dev, cq, stream, bufs, stamp_so):
    out = ffi.new("pto_kernel **")
    check(lib.pto_kernel_load(dev, str(stamp_so).encode(), b"stamp", out))
    p = bufs(400)
    t = new_token()
    with held(dev, stream):
        launch(stream, out[0], 2, [p, 100, 0], t)
        lib.pto_kernel_unload(out[0])  # a queued launch still references it
    assert cq.wait(t)[t].status == 0
    got = np.zeros(100, dtype=np.int32)
    d2h(stream, got, p)
    sync(stream)
    np.testing.assert_array_equal(got, np.arange(100) * 10 + np.arange(100) // 50)
