"""PyPTO's explicit AIV-split region (language/04-scopes, "Clusters and AIV lanes"): ``pl.split_aiv``,
``pl.aiv_shard``, ``pl.aic_gather``, ``pl.tile.get_subblock_idx``.

Kernels in the guide's style, checked against torch on random data with outputs poisoned first.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
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


@pytest.mark.slow
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



def test_a_whole_body_runs_once():
    """A data-parallel body that never reads its lane is the whole-tile computation: an atomic add lands once."""

    @pl.jit
    def once(x: pl.Tensor[[32, 64], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for _ in pl.split_aiv(2, mode=pl.SplitMode.LEFT_RIGHT):
                acc = pl.store(pl.load(x, [0, 0], [32, 64]), [0, 0], acc, atomic=pl.AtomicType.Add)
        return acc

    x, acc = torch.randn(32, 64), torch.randn(32, 64)
    want = acc + x
    once(x, acc)
    torch.testing.assert_close(acc, want, rtol=1e-5, atol=1e-5)


def test_lane_indexed_body_runs_per_lane():
    """Reading aiv_id makes the body per-lane: lane 0 and lane 1 each run it with their own index."""

    @pl.jit
    def lanes(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.LEFT_RIGHT):
                col = aiv_id * 32
                t = pl.load(x, [0, col], [64, 32])
                if aiv_id == 0:
                    t = pl.exp(t)
                else:
                    t = pl.mul(t, 3.0)
                out = pl.store(t, [0, col], out)
        return out

    x, out = torch.randn(64, 64), _nan(64, 64)
    lanes(x, out)
    torch.testing.assert_close(out[:, :32], torch.exp(x[:, :32]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[:, 32:], x[:, 32:] * 3.0, rtol=1e-6, atol=1e-6)


M, K, N = 32, 64, 48


@pl.jit
def shard_gather(a: pl.Tensor[[M, K], pl.FP32], b: pl.Tensor[[K, N], pl.FP32], v: pl.Tensor[[N, N], pl.FP32],
                 lanes: pl.Out[pl.Tensor[[M, N], pl.FP32]], out: pl.Out[pl.Tensor[[M, N], pl.FP32]],
                 cols: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        qk = pl.matmul(pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
                       pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat))     # Acc [M, N]
        for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):
            h = pl.aiv_shard(qk)                                                 # this lane's [M/2, N]
            s = pl.add(pl.mul(h, 2.0), aiv_id * 1.0)                             # lane 1 adds 1
            lanes = pl.store(s, [aiv_id * (M // 2), 0], lanes)
            full = pl.aic_gather(s)                                              # both halves, joined
        pv = pl.matmul(full, pl.load(v, [0, 0], [N, N], target_memory=pl.Mem.Mat))
        out = pl.store(pv, [0, 0], out)
        for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.LEFT_RIGHT):
            c = pl.aiv_shard(qk)                                                 # this lane's [M, N/2]
            cols = pl.store(pl.neg(c), [0, aiv_id * (N // 2)], cols)
    return lanes, out, cols


@pytest.mark.slow
def test_shard_halves_the_cube_value_and_gather_joins_the_lanes():
    a, b, v = torch.randn(M, K), torch.randn(K, N), torch.randn(N, N)
    lanes, out, cols = _nan(M, N), _nan(M, N), _nan(M, N)
    shard_gather(a, b, v, lanes, out, cols)
    qk = a @ b
    want = qk * 2.0
    want[M // 2:] += 1.0
    torch.testing.assert_close(lanes, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out, want @ v, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(cols, -qk, rtol=1e-4, atol=1e-4)


RG_ROWS, RG_VALID, RG_K, RG_N = 16, 5, 32, 64
POOL_ROWS, D, G_ROWS, G_HALF, Q_ROWS = 256, 32, 16, 8, 8


def test_ragged_and_odd_extents_split_as_the_guide_halves_them():
    """An odd extent splits ceil / floor (17 rows: 9 and 8); a partial accumulator is valid only where it is."""
    rows, valid_m, k, n = RG_ROWS, RG_VALID, RG_K, RG_N

    @pl.jit
    def ragged(a: pl.Tensor[[RG_VALID, RG_K], pl.FP32], w: pl.Tensor[[RG_N, RG_K], pl.FP32],
               x: pl.Tensor[[17, RG_N], pl.FP32], out: pl.InOut[pl.Tensor[[RG_ROWS, RG_N], pl.FP32]],
               odd: pl.Out[pl.Tensor[[17, RG_N], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a_tile = pl.slice(a, [rows, k], [0, 0], valid_shape=[valid_m, k])   # overhangs a: 5 rows read
            acc = pl.matmul(a_tile, w[0:n, 0:k], b_trans=True, out_dtype=pl.FP32)
            for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):
                shard = pl.aiv_shard(acc)                                         # lane 0: 5 rows, lane 1: none
                out[aiv_id * 8: aiv_id * 8 + 8, 0:n] = pl.exp(shard)
            xt = pl.load(x, [0, 0], [17, n], target_memory=pl.Mem.Mat)
            for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):
                h = pl.aiv_shard(xt)                                              # a 9-row box: 9 valid, then 8
                odd[aiv_id * 9: aiv_id * 9 + 9, 0:RG_N] = pl.add(h, 1.0)
        return out, odd

    a, w, x = torch.randn(valid_m, k), torch.randn(n, k), torch.randn(17, n)
    out, odd = _nan(rows, n), _nan(17, n)
    ragged(a, w, x, out, odd)
    torch.testing.assert_close(out[:valid_m], torch.exp(a @ w.T), rtol=1e-4, atol=1e-4)
    assert torch.isnan(out[valid_m:]).all()                                       # nothing stored past the data
    torch.testing.assert_close(odd, x + 1.0, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_per_lane_gather_row_assembles_the_cube_operand():
    """PyPTO's sparse-KV shape: each lane gathers its half of a scattered row set; the cube reads them joined."""
    pool_rows, d, rows, half, q_rows = POOL_ROWS, D, G_ROWS, G_HALF, Q_ROWS

    @pl.jit
    def sparse_kv(pool: pl.Tensor[[POOL_ROWS, D], pl.FP32], idx: pl.Tensor[[G_ROWS], pl.INT32],
                  q: pl.Tensor[[Q_ROWS, D], pl.FP32], out: pl.Out[pl.Tensor[[Q_ROWS, G_ROWS], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=[pl.cross_core_slot(slot_num=2)]):
            for aiv in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):
                ub = pl.full([half, d], dtype=pl.FP32, value=0.0)
                for j in pl.range(half):
                    src = pl.cast(pl.read(idx, [aiv * half + j]), pl.INDEX)
                    ub = pl.gather_row(ub, pool, [j, 0], [src, 0], [1, d])
                kv = pl.aic_gather(ub)
            out[0:q_rows, 0:rows] = pl.matmul(q, kv, b_trans=True, out_dtype=pl.FP32)
        return out

    pool, q = torch.randn(pool_rows, d), torch.randn(q_rows, d)
    idx = torch.randperm(pool_rows)[:rows].to(torch.int32)
    out = _nan(q_rows, rows)
    sparse_kv(pool, idx, q, out)
    torch.testing.assert_close(out, q @ pool[idx.long()].T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("body, message", [
    ("for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):\n"
     "                g = pl.aic_gather(pl.slice(x, [16, 32], [aiv_id * 16, 0], valid_shape=[5, 32]))",
     "re-joins the two lanes positionally"),
    ("for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.UP_DOWN):\n"
     "                g = pl.aic_gather(pl.load(x, [aiv_id * 16, 0], [16, 32]))\n"
     "                out = pl.store(g, [0, 0], out)",
     "pl.aic_gather result"),
    ("t = pl.slice(x, [40, 32], [0, 0], valid_shape=[33, 32])", "outside"),
])
def test_data_parallel_misuse_is_a_compile_error(body, message):
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


def test_per_lane_regions_in_the_torch_debug_codegen():
    """The torch module PyPTO's debug codegen writes for a per-lane region computes what the kernel does."""
    from pypto_async.debug import torch_codegen

    a, b, v = torch.randn(M, K), torch.randn(K, N), torch.randn(N, N)
    lanes, out, cols = _nan(M, N), _nan(M, N), _nan(M, N)
    ns: dict = {}
    exec(torch_codegen(shard_gather.lower(a, b, v, lanes, out, cols), check_shapes=True), ns)  # noqa: S102
    ns["shard_gather"](a, b, v, lanes, out, cols)
    qk = a @ b
    want = qk * 2.0
    want[M // 2:] += 1.0
    torch.testing.assert_close(out, want @ v, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(cols, -qk, rtol=1e-4, atol=1e-4)


NP_T, NP_N = 128, 64


@pytest.mark.slow
def test_none_region_in_spmd_and_pipeline_runs_both_lanes():
    """PyPTO's NONE region nested in pl.spmd and a pl.pipeline loop: each lane accumulates and stores its half."""

    @pl.jit
    def none_pipe(a: pl.Tensor[[NP_T, NP_N], pl.FP32], c: pl.Out[pl.Tensor[[NP_T, NP_N], pl.FP32]]):
        for _blk in pl.spmd(2):
            for aiv_id in pl.split_aiv(2, mode=pl.SplitMode.NONE):
                base = aiv_id * 64
                acc = pl.load(a, [base, 0], [64, NP_N])
                for _ in pl.pipeline(1, 4, stage=2):
                    acc = pl.add(acc, pl.load(a, [base, 0], [64, NP_N]))
                c = pl.store(acc, [base, 0], c)
        return c

    a, c = torch.randn(NP_T, NP_N), _nan(NP_T, NP_N)
    none_pipe(a, c)
    torch.testing.assert_close(c, a * 4, rtol=1e-5, atol=1e-5)
