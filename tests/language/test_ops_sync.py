"""pl.system.set_ffts / sync_set / sync_wait: explicit AIV -> AIC events around a GM hand-over."""

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoNotSupported
from helpers.ir_fixtures import poison

R, K, N = 16, 16, 32
HALF = R // 2
WS = 256


@pl.jit
def handover(a: pl.Tensor[[R, K], pl.FP32], b: pl.Tensor[[R, K], pl.FP32], w: pl.Tensor[[K, N], pl.FP32],
             transfer: pl.InOut[pl.Tensor[[R, K], pl.FP32]], ws: pl.Tensor[[WS], pl.INT64],
             out: pl.Out[pl.Tensor[[R, N], pl.FP32]]):
    for _ in pl.spmd(1):
        pl.system.set_ffts(ws)
        for lane in pl.split_aiv(2, mode=pl.SplitMode.NONE):
            if lane == 0:
                pl.store(pl.load(a, [0, 0], [HALF, K]) + pl.load(b, [0, 0], [HALF, K]), [0, 0], transfer)
            else:
                pl.store(pl.load(a, [HALF, 0], [HALF, K]) * pl.load(b, [HALF, 0], [HALF, K]), [HALF, 0], transfer)
            pl.system.sync_set(3, pipe=pl.PipeType.MTE3, ffts_mode=2, core_type="aiv")
        pl.system.sync_wait(3, pipe=pl.PipeType.MTE2, core_type="aic")
        t = pl.move(pl.load(transfer, [0, 0], [R, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        wm = pl.move(pl.load(w, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        pl.store(pl.matmul(t, wm), [0, 0], out)


@pytest.mark.slow
def test_the_cube_reads_what_both_lanes_stored_before_the_event(rng):
    a, b = rng.standard_normal((R, K), dtype=np.float32), rng.standard_normal((R, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    transfer, ws, out = poison((R, K)), np.zeros(WS, np.int64), poison((R, N))
    handover(a, b, w, transfer, ws, out)
    mid = np.concatenate([a[:HALF] + b[:HALF], a[HALF:] * b[HALF:]])
    np.testing.assert_allclose(transfer, mid, rtol=1e-6)
    np.testing.assert_allclose(out, mid @ w, rtol=1e-4, atol=1e-4)


def test_pipe_type_is_pyptos():
    assert [p.name for p in pl.PipeType] == ["MTE1", "MTE2", "MTE3", "M", "V", "S", "FIX", "ALL"]
    assert set(pl.system.__all__) >= {"set_ffts", "sync_set", "sync_wait"}


def _trace(body, ws_shape=(WS,), ws_dtype=pl.INT64):
    @pl.jit
    def k(x: pl.Tensor[[8, 8], pl.FP32], ws: pl.Tensor[list(ws_shape), ws_dtype], y: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
        with pl.incore():
            body(ws)
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], y)

    k.lower(np.zeros((8, 8), np.float32), np.zeros(ws_shape, ws_dtype.np_storage), poison((8, 8)))


def test_a_set_then_a_wait_traces():
    def body(ws):
        pl.system.set_ffts(ws)
        pl.system.sync_set(0, pipe=pl.PipeType.MTE3)
        pl.system.sync_wait(0, pipe=pl.PipeType.MTE2)

    _trace(body)


@pytest.mark.parametrize(("body", "message"), [
    (lambda ws: pl.system.sync_set(14, pipe=pl.PipeType.V), "event_id 14 is out of range: user events are 0-13"),
    (lambda ws: pl.system.sync_set(True, pipe=pl.PipeType.V), "event_id must be an int"),
    (lambda ws: pl.system.sync_set(1, pipe="MTE3"), "pipe must be a pl.PipeType"),
    (lambda ws: pl.system.sync_set(1, pipe=pl.PipeType.V, ffts_mode=3), "ffts_mode must be 0, 1 or 2"),
    (lambda ws: pl.system.sync_set(1, pipe=pl.PipeType.V, core_type="cube"), "core_type must be 'aic' or 'aiv'"),
    (lambda ws: pl.system.set_ffts(3), "workspace must be a tensor parameter"),
])
def test_bad_event_arguments_are_compile_errors(body, message):
    with pytest.raises(PtoCompileError, match="pl.system.sync_set|pl.system.set_ffts"):
        _trace(body)
    with pytest.raises(PtoCompileError, match=message):
        _trace(body)


@pytest.mark.parametrize(("shape", "dtype", "message"), [
    ((WS,), pl.INT32, "workspace must be INT64, got INT32"),
    ((16, 16), pl.INT64, r"workspace must be 1-D, got shape \[16, 16\]"),
    ((128,), pl.INT64, "workspace must have a static length of at least 256 INT64 elements, got 128"),
])
def test_a_bad_ffts_workspace_is_a_compile_error(shape, dtype, message):
    with pytest.raises(PtoCompileError, match=f"pl.system.set_ffts: {message}"):
        _trace(lambda ws: pl.system.set_ffts(ws), shape, dtype)


def test_a_wait_before_its_set_is_refused():
    def body(ws):
        pl.system.sync_wait(5, pipe=pl.PipeType.MTE2)
        pl.system.sync_set(5, pipe=pl.PipeType.MTE3)

    with pytest.raises(PtoNotSupported, match=r"sync_wait\(5\): no earlier pl.system.sync_set of this event"):
        _trace(body)


def test_the_events_are_refused_outside_a_kernel():
    with pytest.raises(PtoCompileError, match="pl.system.sync_set can only be called inside"):
        pl.system.sync_set(0, pipe=pl.PipeType.V)
