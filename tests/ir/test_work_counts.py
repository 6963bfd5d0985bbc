"""The work each kernel counts into ``blk->work`` for the device model, against hand-computed counts.

A kernel adds, as it runs, the bytes and rows (contiguous GM runs) it loads
and stores, its vector bytes by op class, its cube MACs by input dtype, and
sets ``overlap`` when its loop is a ``pl.pipeline`` of stage >= 2.  The
kernels here are called block by block with our own ``pto_block``
(``helpers.work``) and their ``pto_work`` read back; their outputs are
checked too, so a count that changed what a kernel computes shows.  Runtime
trip counts and runtime ``if`` branches count what ran.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl

from helpers.ir_fixtures import poison
from helpers.work import run_kernel, run_site, site_names
from helpers.tiers import tiered

SIMPLE, SPECIAL, REDUCE = 0, 1, 2
F16, F32, I8 = 0, 1, 2


def _zero(**over) -> dict:
    w = {"load_bytes": 0, "load_rows": 0, "store_bytes": 0, "store_rows": 0, "move_bytes": 0,
         "fixpipe_bytes": 0, "vec_bytes": [0, 0, 0], "cube_macs": [0, 0, 0], "overlap": 0}
    w.update(over)
    return w


# ---- loads and stores: bytes and rows --------------------------------------------------------


@pl.jit
def narrow_rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(4):
            t = pl.load(x, [i * 16, 32], [16, 32])  # 32 of 128 columns: 16 rows of 128 B
            pl.store(pl.add(t, 1.0), [i * 16, 0], y)  # all 32 columns of y: one run of 2 KiB


def test_load_and_store_count_bytes_and_contiguous_rows(rng):
    x = rng.standard_normal((64, 128)).astype(np.float32)
    y = poison((64, 32))
    w = run_kernel(narrow_rows.compile(x, y), x, y)
    np.testing.assert_array_equal(y, x[:, 32:64] + np.float32(1))
    assert w == _zero(load_bytes=4 * 16 * 32 * 4, load_rows=4 * 16, store_bytes=4 * 16 * 32 * 4, store_rows=4,
                      vec_bytes=[4 * 16 * 32 * 4, 0, 0])


def test_a_wider_row_moves_the_same_bytes_in_fewer_rows(rng):
    @pl.jit
    def wide(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [4, 128])  # 512 B rows, 4 of them: x is [64, 256]
            pl.store(t, [0, 0], y)  # y is [4, 128]: the whole tensor, one run

    x = rng.standard_normal((64, 256)).astype(np.float32)
    y = poison((4, 128))
    w = run_kernel(wide.compile(x, y), x, y)
    np.testing.assert_array_equal(y, x[:4, :128])
    assert (w["load_bytes"], w["load_rows"], w["store_bytes"], w["store_rows"]) == (2048, 4, 2048, 1)


# ---- vector ops by class, and the cube ---------------------------------------------------------


@pl.jit
def softmax_half(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(x, [0, 0], [16, 32])
        e = pl.exp(t)
        s = pl.row_sum(e)
        pl.store(pl.cast(pl.div(e, s), pl.FP16), [0, 0], y)


def test_vector_bytes_by_op_class(rng):
    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = poison((16, 32), np.float16)
    w = run_kernel(softmax_half.compile(x, y), x, y)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(y.astype(np.float64), e / e.sum(axis=1, keepdims=True), rtol=2e-3)
    tile = 16 * 32 * 4
    # exp and div are special; row_sum a reduction; the cast to FP16 simple, at the wider (FP32) width.
    assert w == _zero(load_bytes=tile, load_rows=1, store_bytes=16 * 32 * 2, store_rows=1,
                      vec_bytes=[tile, 2 * tile, tile])


MM_M, MM_K, MM_N, MM_TM, MM_TK = 128, 192, 48, 32, 64


@pl.jit
def tiled_matmul(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for blk in pl.spmd(MM_M // MM_TM):
        with pl.at(level=pl.Level.CORE_GROUP):
            acc = pl.zeros([MM_TM, MM_N], pl.FP32)
            for k in pl.range(0, MM_K, MM_TK):
                ta = pl.load(a, [blk * MM_TM, k], [MM_TM, MM_TK])
                tb = pl.load(b, [k, 0], [MM_TK, MM_N])
                pl.matmul(ta, tb, acc=acc)
            pl.store(acc, [blk * MM_TM, 0], c)
    return c


def test_matmul_counts_m_n_k_macs_per_block_and_blocks_add_up(rng):
    a = rng.standard_normal((MM_M, MM_K)).astype(np.float32)
    b = rng.standard_normal((MM_K, MM_N)).astype(np.float32)
    c = poison((MM_M, MM_N))
    compiled = tiled_matmul.compile(a, b, c)
    steps = MM_K // MM_TK
    one = run_kernel(compiled, a, b, c, blocks=[1])
    want = _zero(load_bytes=steps * (MM_TM * MM_TK + MM_TK * MM_N) * 4,
                 load_rows=steps * (MM_TM + 1),  # a's window is MM_TK of MM_K columns; b's spans b's rows whole
                 fixpipe_bytes=MM_TM * MM_N * 4,  # the accumulator's store: L0C -> GM on FIXPIPE, not MTE3
                 vec_bytes=[MM_TM * MM_N * 4, 0, 0],  # pl.zeros: a fill
                 cube_macs=[0, steps * MM_TM * MM_N * MM_TK, 0])
    assert one == want
    c[:] = np.nan
    every = run_kernel(compiled, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    blocks = MM_M // MM_TM
    assert every == {k: ([x * blocks for x in v] if isinstance(v, list) else v * blocks) for k, v in want.items()}


@tiered("dtype, slot", [(pl.BF16, F16), (pl.FP16, F16)], fast=[(pl.BF16, F16)])
def test_half_precision_matmul_counts_in_the_f16_slot(dtype, slot):
    @pl.jit
    def mm(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.matmul(pl.load(a, [0, 0], [16, 32]), pl.load(b, [0, 0], [32, 64])), [0, 0], c)

    tdt = torch.bfloat16 if dtype == pl.BF16 else torch.float16
    a, b = torch.randn(16, 32).to(tdt), torch.randn(32, 64).to(tdt)
    c = torch.full((16, 64), float("nan"))
    compiled = mm.compile(a, b, c)
    w = run_kernel(compiled, a.view(torch.int16).numpy(), b.view(torch.int16).numpy(), c.numpy())
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    macs = [0, 0, 0]
    macs[slot] = 16 * 64 * 32
    assert w["cube_macs"] == macs


def test_a_move_between_memory_spaces_counts_move_bytes(rng):
    @pl.jit
    def mv(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            mat = pl.load(a, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
            pl.store(pl.move(mat, target_memory=pl.Mem.Vec), [0, 0], out)

    a = rng.standard_normal((16, 16)).astype(np.float32)
    out = poison((16, 16))
    w = run_kernel(mv.compile(a, out), a, out)
    np.testing.assert_array_equal(out, a)
    assert w["move_bytes"] == 16 * 16 * 4
    assert w["vec_bytes"] == [0, 0, 0]


# ---- runtime trip counts and runtime branches -----------------------------------------------------

Q, C = 16, 32


@pl.jit
def ragged_loop(buf: pl.Tensor, cfg: pl.Tensor, output: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        n_blocks = pl.cast(pl.read(cfg, [0]), pl.INDEX)
        last_len = pl.cast(pl.read(cfg, [1]), pl.INDEX)
        block = pl.cast(pl.read(cfg, [2]), pl.INDEX)
        for i in pl.range(n_blocks):
            if i == n_blocks - 1:
                vlen = last_len
            else:
                vlen = block
            t = pl.load(buf, [i * Q, 0], [Q, C], valid_shape=[Q, vlen])
            pl.store(pl.tile.fillpad(t, pad_value=pl.PadValue.zero), [i * Q, 0], output)
    return output


@pytest.mark.parametrize("n_blocks", [1, 3])
def test_a_runtime_trip_count_and_valid_extent_count_what_ran(rng, n_blocks):
    buf = rng.standard_normal((4 * Q, C)).astype(np.float32)
    last = int(rng.integers(1, C))
    cfg = np.array([n_blocks, last, C], np.int32)
    out = poison((4 * Q, C))
    w = run_kernel(ragged_loop.compile(buf, cfg, out), buf, cfg, out)
    want = buf[:n_blocks * Q].copy()
    want[(n_blocks - 1) * Q:, last:] = 0
    np.testing.assert_array_equal(out[:n_blocks * Q], want)
    loaded = (n_blocks - 1) * Q * C + Q * last
    # A runtime extent is never taken as a whole row of the tensor: each load comes in Q rows.
    assert w == _zero(load_bytes=loaded * 4, load_rows=n_blocks * Q,
                      store_bytes=n_blocks * Q * C * 4, store_rows=n_blocks,
                      vec_bytes=[n_blocks * Q * C * 4, 0, 0])  # fillpad


@pl.jit
def branchy(x: pl.Tensor, mode: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        m = pl.read(mode, [0])
        t = pl.load(x, [0, 0], [Q, C])
        if m == 0:
            out[:] = pl.exp(t)
        else:
            out[:] = pl.add(t, t)


@pytest.mark.parametrize("m", [0, 1])
def test_a_runtime_if_counts_the_branch_that_ran(rng, m):
    x = rng.standard_normal((Q, C)).astype(np.float32)
    mode = np.array([m], np.int64)
    out = poison((Q, C))
    w = run_kernel(branchy.compile(x, mode, out), x, mode, out)
    np.testing.assert_allclose(out, np.exp(x) if m == 0 else x + x, rtol=1e-6)
    tile = Q * C * 4
    assert w["vec_bytes"] == ([0, tile, 0] if m == 0 else [tile, 0, 0])
    assert (w["store_bytes"], w["store_rows"]) == (tile, 1)


# ---- overlap: pl.pipeline ------------------------------------------------------------------------


@pytest.mark.parametrize("form, overlap", [("range", 0), ("pipeline1", 0), ("pipeline2", 1)])
def test_overlap_is_set_for_a_pipelined_loop_only(rng, form, overlap):
    loop = {"range": lambda n: pl.range(n), "pipeline1": lambda n: pl.pipeline(n, stage=1),
            "pipeline2": lambda n: pl.pipeline(n, stage=2)}[form]

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in loop(4):
                pl.store(pl.exp(pl.load(x, [i * 8, 0], [8, 128])), [i * 8, 0], y)

    x = rng.standard_normal((32, 128)).astype(np.float32)
    y = poison((32, 128))
    w = run_kernel(k.compile(x, y), x, y)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    assert w["overlap"] == overlap
    assert (w["load_bytes"], w["load_rows"]) == (32 * 128 * 4, 4)


# ---- program tasks: each site counts its own work --------------------------------------------------


def test_each_task_of_a_program_counts_its_own_work(rng):
    @pl.jit
    def two(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        mid = pl.create_tensor([32, 64], dtype=pl.FP32)
        for i in pl.range(2):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="scale"):
                pl.store(pl.mul(pl.load(x, [i * 16, 0], [16, 64]), 2.0), [i * 16, 0], mid)
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="total"):
            pl.store(pl.row_sum(pl.load(mid, [0, 0], [32, 64])), [0, 0], y)
        return y

    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = poison((32, 1))
    compiled = two.compile(x, y)
    assert compiled.program_symbol is not None
    assert site_names(compiled) == ["scale", "total"]
    mid = poison((32, 64))
    s0 = run_site(compiled, 0, [x, y], [mid], idx=[1])
    assert s0 == _zero(load_bytes=16 * 64 * 4, load_rows=1, store_bytes=16 * 64 * 4, store_rows=1,
                       vec_bytes=[16 * 64 * 4, 0, 0])
    run_site(compiled, 0, [x, y], [mid], idx=[0])
    s1 = run_site(compiled, 1, [x, y], [mid])
    np.testing.assert_allclose(y[:, 0], (2 * x.astype(np.float64)).sum(axis=1), rtol=1e-5)
    assert s1 == _zero(load_bytes=32 * 64 * 4, load_rows=1, store_bytes=32 * 4, store_rows=1,
                       vec_bytes=[0, 0, 32 * 64 * 4])
    # The program's one-kernel entry runs every task: the sum of the three instances.
    whole = run_kernel(compiled, x, y)
    assert whole["load_bytes"] == 2 * s0["load_bytes"] + s1["load_bytes"]
    assert whole["vec_bytes"] == [2 * 16 * 64 * 4, 0, 32 * 64 * 4]


@pytest.mark.slow
def test_the_counting_code_compiles_without_warnings(tmp_path):
    """The counts of runtime extents (products, the zero-box guard) are warning-free C, as the headers are."""
    import shlex
    import subprocess
    from pathlib import Path

    buf = np.zeros((4 * Q, C), np.float32)
    compiled = ragged_loop.compile(buf, np.array([1, 1, C], np.int32), buf.copy())
    include = Path(__file__).resolve().parents[2] / "pypto_async" / "include"
    cc = shlex.split(__import__("os").environ.get("CC") or "cc")
    res = subprocess.run([*cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wconversion",
                          f"-I{include}", "-c", "-o", str(tmp_path / "k.o"), str(compiled.source_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
