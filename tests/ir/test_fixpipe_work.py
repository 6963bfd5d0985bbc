"""FIXPIPE: a matmul's accumulator leaving L0C, counted per kernel and timed by the model (hand-computed).

On the chip a matmul accumulates in L0C; its result leaves through FIXPIPE,
to GM when it is stored (MTE3 carries UB's stores, not L0C's), to UB when a
vector op reads it.  The codegen counts those bytes in ``pto_work.fixpipe_bytes``
(ABI 3) and the model times them at the profile's ``fixpipe_bytes_per_cycle``.
"""

from __future__ import annotations

import numpy as np

import pypto_async.language as pl
from pypto_async._driver import PTO_ABI_VERSION, check, device_config, ffi, lib
from pypto_async.runtime._profile import SIM

from helpers.ir_fixtures import poison
from helpers.work import run_kernel

M, K, N = 16, 32, 64


@pl.jit
def mm_store(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.matmul(pl.load(a, [0, 0], [M, K]), pl.load(b, [0, 0], [K, N])), [0, 0], c)


@pl.jit
def mm_relu_store(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.matmul(pl.load(a, [0, 0], [M, K]), pl.load(b, [0, 0], [K, N]))
        pl.store(pl.maximum(t, 0.0), [0, 0], c)


def _inputs(rng):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    return a, b, poison((M, N))


def test_a_stored_accumulator_moves_its_bytes_on_fixpipe_not_mte3(rng):
    a, b, c = _inputs(rng)
    w = run_kernel(mm_store.compile(a, b, c), a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert w["fixpipe_bytes"] == M * N * 4  # L0C -> GM: 16 x 64 fp32
    assert (w["store_bytes"], w["store_rows"]) == (0, 0)
    assert w["load_bytes"] == (M * K + K * N) * 4 and w["cube_macs"] == [0, M * N * K, 0]


def test_an_accumulator_read_by_a_vector_op_leaves_l0c_once_then_stores_on_mte3(rng):
    a, b, c = _inputs(rng)
    w = run_kernel(mm_relu_store.compile(a, b, c), a, b, c)
    np.testing.assert_allclose(c, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)
    assert w["fixpipe_bytes"] == M * N * 4  # L0C -> UB, once
    assert (w["store_bytes"], w["store_rows"]) == (M * N * 4, 1)  # UB -> GM
    assert w["vec_bytes"][0] == M * N * 4


def test_the_model_times_fixpipe_bytes_at_the_profiles_rate():
    assert PTO_ABI_VERSION == 3
    out = ffi.new("pto_device **")
    check(lib.pto_device_open(b"sim", device_config(cores=1, copy_engines=1), out), "open")
    dev = out[0]
    try:
        # 1 GHz and round rates: a cycle is a ns.  Cube f32: 1024 MACs a cycle, FIXPIPE 128 B a cycle.
        p = SIM.replace(clock_ghz=1.0, min_kernel_us=0.0, cube_f32_macs_per_cycle=1024.0,
                        fixpipe_bytes_per_cycle=128.0)
        check(lib.pto_device_set_profile(dev, p._to_c()), "pto_device_set_profile")
        w = ffi.new("pto_work *")
        w.cube_macs[1] = M * N * K  # 32768 MACs: 32 cycles
        assert lib.pto_model_work_ns(dev, w) == 32
        w.fixpipe_bytes = M * N * 4  # 4096 B: 32 cycles more, in turn
        assert lib.pto_model_work_ns(dev, w) == 64
        w.overlap = 1  # overlapped: the longest pipe
        w.fixpipe_bytes = 3 * M * N * 4  # 96 cycles
        assert lib.pto_model_work_ns(dev, w) == 96
    finally:
        lib.pto_device_close(dev)
