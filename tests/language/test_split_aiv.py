"""PyPTO's explicit AIV-split region (language/04-scopes, "Clusters and AIV lanes"): ``pl.split_aiv``,
``pl.aiv_shard``, ``pl.aic_gather``, ``pl.tile.get_subblock_idx``.

Kernels in the guide's style, checked against torch on random data with outputs poisoned first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoNotSupported
from pypto_async.ir import Scope


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.jit
def two_phases(q: pl.Tensor[[64, 64], pl.FP32], k: pl.Tensor[[64, 64], pl.FP32],
               x: pl.Tensor[[64, 64], pl.FP32], bias: pl.Tensor[[64, 64], pl.FP32],
               half: pl.Out[pl.Tensor[[64, 64], pl.FP32]], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.NONE):      # phase 1: per-lane work via aiv_id
            r = aiv_id * 32
            half = pl.store(pl.exp(pl.load(x, [r, 0], [32, 64])), [r, 0], half)
        mm = pl.matmul(pl.load(q, [0, 0], [64, 64], target_memory=pl.Mem.Mat),
                       pl.load(k, [0, 0], [64, 64], target_memory=pl.Mem.Mat))   # cube, outside the regions
        b = pl.load(bias, [0, 0], [64, 64])
        for _ in pl.split_aiv(2, mode=pl.SplitMode.NONE):           # phase 2: full-width vector work
            o = pl.add(pl.aiv_shard(mm), b)
            out = pl.store(o, [0, 0], out)
    return half, out


def test_split_aiv_none_runs_the_body_on_both_lanes():
    q, k, x, bias = (torch.randn(64, 64) for _ in range(4))
    half, out = _nan(64, 64), _nan(64, 64)
    two_phases(q, k, x, bias, half, out)
    torch.testing.assert_close(half, torch.exp(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, q @ k + bias, rtol=1e-4, atol=1e-4)
    program = two_phases.lower(q, k, x, bias, half, out)
    scope = next(s for s in program.body if isinstance(s, Scope))
    assert ("split_aiv", "NONE") in scope.hints


def test_both_lanes_run_a_side_effect():
    """mode=NONE is two lanes running the same code: an accumulation both perform happens twice."""

    @pl.jit
    def twice(x: pl.Tensor[[32, 32], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for lane in pl.split_aiv(2, mode=pl.SplitMode.NONE):
                acc = pl.store(pl.load(x, [0, 0], [32, 32]), [0, 0], acc, atomic=pl.AtomicType.Add)
        return acc

    x, acc = torch.randn(32, 32), torch.randn(32, 32)
    want = acc + 2 * x
    twice(x, acc)
    torch.testing.assert_close(acc, want, rtol=1e-5, atol=1e-5)


def test_subblock_idx_is_the_lane_and_gather_hands_back_to_the_cube():
    @pl.jit
    def lanes(x: pl.Tensor[[64, 32], pl.FP32], w: pl.Tensor[[32, 32], pl.FP32],
              out: pl.Out[pl.Tensor[[64, 32], pl.FP32]], mm: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        for _ in pl.split_aiv(2, mode=pl.SplitMode.NONE):           # top level: wrapped in a region
            lane = pl.tile.get_subblock_idx()
            out = pl.store(pl.mul(pl.load(x, [lane * 32, 0], [32, 32]), 3.0), [lane * 32, 0], out)
        with pl.at(level=pl.Level.CORE_GROUP):
            for _ in pl.split_aiv(2, mode=pl.SplitMode.NONE):
                v = pl.relu(pl.load(w, [0, 0], [32, 32]))
                kv = pl.aic_gather(v)                              # V->C, lane-uniform
            mm = pl.store(pl.matmul(kv, pl.load(w, [0, 0], [32, 32], target_memory=pl.Mem.Mat)), [0, 0], mm)
        return out, mm

    x, w = torch.randn(64, 32), torch.randn(32, 32)
    out, mm = _nan(64, 32), _nan(32, 32)
    lanes(x, w, out, mm)
    torch.testing.assert_close(out, x * 3.0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(mm, torch.relu(w) @ w, rtol=1e-4, atol=1e-4)


def test_data_parallel_split_computes_the_region_whole():
    @pl.jit
    def halves(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for _ in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):
                out = pl.store(pl.sqrt(pl.abs(pl.load(x, [0, 0], [64, 64]))), [0, 0], out)
        return out

    x, out = torch.randn(64, 64), _nan(64, 64)
    halves(x, out)
    torch.testing.assert_close(out, torch.sqrt(torch.abs(x)), rtol=1e-6, atol=1e-6)

    @pl.jit
    def lane_used(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.LEFT_RIGHT):
                out = pl.store(pl.load(x, [0, aiv_id * 32], [64, 32]), [0, 0], out)
        return out

    with pytest.raises(PtoNotSupported, match="data-parallel region whole"):
        lane_used.compile()


@pytest.mark.parametrize("body, message", [
    ("for a in pl.split_aiv(2, mode=pl.SplitMode.NONE):\n"
     "                out = pl.store(pl.matmul(pl.load(x, [0, 0], [32, 32], target_memory=pl.Mem.Mat),"
     " pl.load(x, [0, 0], [32, 32], target_memory=pl.Mem.Mat)), [0, 0], out)",
     "cube op 'pl.matmul' inside a pl.split_aiv region"),
    ("t = pl.aiv_shard(pl.load(x, [0, 0], [32, 32]))", "boundary of a pl.split_aiv region"),
    ("for a in pl.split_aiv(4, mode=pl.SplitMode.NONE):\n                pass", "fixed at 2"),
    ("for a in pl.split_aiv(2):\n                pass", "mode= is required"),
    ("for a in pl.split_aiv(2, mode=pl.SplitMode.NONE):\n"
     "                for b in pl.split_aiv(2, mode=pl.SplitMode.NONE):\n                    pass", "nested"),
])
def test_split_aiv_misuse_is_a_compile_error(body, message):
    ns: dict = {"pl": pl}
    exec(compile(f"""
@pl.jit
def k(x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        if True:
            {body}
        out = pl.store(pl.load(x, [0, 0], [32, 32]), [0, 0], out)
    return out
""", "<split_aiv>", "exec"), ns)
    with pytest.raises(PtoCompileError, match=message):
        ns["k"].compile()
