"""A StackedDeviceTensor as an argument of a multi-chip (L3) program (PyPTO's docs/en/user/distributed/03-execution.md).

``rt.alloc_stacked_tensor(w)`` uploads shard ``i`` of ``w`` to worker
``worker_ids[i]``; a host function's dispatch that takes ``w[i]`` on the
rank holding shard ``i`` uses that shard where it lives (no copy), as a
DeviceTensor argument is used; an output shard is written in place.
Numbers against numpy on random data, outputs poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async.errors import PtoArgumentError
from pypto_async.ir.distributed_compiled_program import DistributedConfig
from pypto_async.runtime import RunConfig, StackedDeviceTensor

R, C = 8, 16
rng = np.random.default_rng(314)


def _cfg(n: int) -> RunConfig:
    return RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))


@pl.jit.incore
def _fma(a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[R, C], pl.FP32], f: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    ta = pl.load(a, [0, 0], [R, C])
    return pl.store(pl.add(pl.mul(ta, pl.load(b, [0, 0], [R, C])), ta), [0, 0], f)


@pl.jit
def _fma_chip(a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[R, C], pl.FP32], f: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    return _fma(a, b, f)


@pl.jit.host
def each_rank(a: pl.Tensor, b: pl.Tensor, f: pl.Out[pl.Tensor]):
    for r in pl.range(pld.world_size()):
        _fma_chip(a[r], b[r], f[r], device=r)


@pl.jit.host
def swapped(a: pl.Tensor, b: pl.Tensor, f: pl.Out[pl.Tensor]):
    _fma_chip(a[0], b[0], f[0], device=1)
    _fma_chip(a[1], b[1], f[1], device=0)


def _inputs(n):
    return (rng.standard_normal((n, R, C)).astype(np.float32), rng.standard_normal((n, R, C)).astype(np.float32))


@pytest.mark.parametrize("n", [2, 3])
def test_a_stacked_weight_is_read_where_each_shard_lives_across_runs(n):
    a, w = _inputs(n)
    f = np.full((n, R, C), np.nan, np.float32)
    compiled = each_rank.compile(a, w, f, config=_cfg(n))
    with compiled.prepare() as rt:
        weight = rt.alloc_stacked_tensor(w)
        assert isinstance(weight, StackedDeviceTensor)
        w_kept = w.copy()
        w[...] = np.nan  # the host copy is gone: a run re-reading it would give NaN
        for _ in range(2):
            a = rng.standard_normal((n, R, C)).astype(np.float32)
            f[...] = np.nan
            rt(a, weight, f)
            np.testing.assert_allclose(f, a * w_kept + a, rtol=1e-6)
        back = np.full((n, R, C), np.nan, np.float32)
        rt.copy_stacked_from(weight, back)
        np.testing.assert_array_equal(back, w_kept)  # the program only read it
        rt.free_stacked_tensor(weight)
        with pytest.raises(PtoArgumentError, match="freed"):
            rt(a, weight, f)


def test_a_permuted_placement_follows_worker_ids_and_an_output_shard_is_written_in_place():
    a, w = _inputs(2)
    f = np.full((2, R, C), np.nan, np.float32)
    compiled = swapped.compile(a, w, f, config=_cfg(2))
    with compiled.prepare() as rt:
        weight = rt.alloc_stacked_tensor(w, worker_ids=[1, 0])
        rt(a, weight, f)
        np.testing.assert_allclose(f, a * w + a, rtol=1e-6)
        out = rt.alloc_stacked_tensor(np.full((2, R, C), np.nan, np.float32), worker_ids=[1, 0])
        a2 = rng.standard_normal((2, R, C)).astype(np.float32)
        rt(a2, weight, out)  # the output stays on the devices
        back = np.full((2, R, C), np.nan, np.float32)
        rt.copy_stacked_from(out, back)
        np.testing.assert_allclose(back, a2 * w + a2, rtol=1e-6)
        rt.free_stacked_tensor(out)
        rt.free_stacked_tensor(weight)


def test_a_shard_on_another_rank_or_worker_is_refused_before_anything_runs():
    a, w = _inputs(2)
    f = np.full((2, R, C), np.nan, np.float32)
    compiled = each_rank.compile(a, w, f, config=_cfg(2))
    with compiled.prepare() as rt, compiled.prepare() as other:
        wrong = rt.alloc_stacked_tensor(w, worker_ids=[1, 0])  # shard 0 on rank 1: each_rank wants it on rank 0
        with pytest.raises(PtoArgumentError, match="worker_ids"):
            rt(a, wrong, f)
        elsewhere = other.alloc_stacked_tensor(w)
        with pytest.raises(PtoArgumentError, match="this DistributedWorker"):
            rt(a, elsewhere, f)
        small = rt.alloc_stacked_tensor(w[:, :, :8].copy())
        with pytest.raises(PtoArgumentError, match="compiled for"):
            rt(a, small, f)
        assert np.isnan(f).all()  # nothing ran
        rt(a, rt.alloc_stacked_tensor(w), f)  # the worker runs on
        np.testing.assert_allclose(f, a * w + a, rtol=1e-6)


# -- submit() of a multi-chip program (PyPTO's bounded dispatch) -------------------------------------


@pl.jit.host
def one_chip(a: pl.Tensor, b: pl.Tensor, f: pl.Out[pl.Tensor]):
    return _fma_chip(a, b, f)


def test_submit_of_a_multi_chip_program_with_a_resident_weight_returns_a_handle_per_run():
    w = rng.standard_normal((R, C)).astype(np.float32)
    ins = [rng.standard_normal((R, C)).astype(np.float32) for _ in range(3)]
    outs = [np.full((R, C), np.nan, np.float32) for _ in ins]
    compiled = one_chip.compile(ins[0], w, outs[0], config=_cfg(1))
    with compiled.prepare() as rt:
        weight = rt.alloc_tensor((R, C), np.float32, init=w)
        handles = [rt.submit(compiled, a, weight, o) for a, o in zip(ins, outs)]
        for h, a, o in zip(handles, ins, outs):
            h.result()
            np.testing.assert_allclose(o, a * w + a, rtol=1e-6)
        with pytest.raises(PtoArgumentError, match="compiled for"):
            rt.submit(compiled, ins[0][:, :8].copy(), weight, outs[0])  # raised by submit, nothing queued
        rt.free_tensor(weight)
