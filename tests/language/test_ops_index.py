"""PyPTO's index, sort and generator ops against numpy/torch references, run on the sim device.

``row_argmax``/``row_argmin``/``col_argmax``/``col_argmin`` (INT32 indices
over the valid region, the first on a tie), ``sort32`` and ``mrgsort``
(descending ``(value, index)`` pairs, the index bits at odd columns),
``tri``, ``arange`` (PyPTO's ``ci``), ``random`` (Philox4x32, checked bit for
bit against a Python model of the cipher) and ``create_l1``, at each layer
PyPTO has them (``pl.``, ``pl.tile.``, ``pl.tensor.``).  Outputs are
poisoned before each launch; compile errors are checked for their message
and the user's line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.ir_fixtures import poison
from helpers.located import assert_at, next_line
from helpers.tiers import tiered
from helpers.work import run_kernel
import pypto_async.language as pl
from pypto_async.errors import PtoCompileError

R, C = 16, 48

# ---- argmax / argmin -----------------------------------------------------------------------------


def _distinct(rng, shape, dtype=np.float32):
    """A random permutation of integers (distinct, exact in FP16) scaled into [-4, 4)."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n // 2) / (n / 8)).reshape(shape).astype(dtype)


@pl.jit
def _arg_tiles(a: pl.Tensor, rmax: pl.Out[pl.Tensor], rmin: pl.Out[pl.Tensor], cmax: pl.Out[pl.Tensor],
               cmin: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [R, C], valid_shape=[12, 40])
        tmp = pl.tile.create([R, C], dtype=t.dtype)
        pl.store(pl.tile.row_argmax(t, tmp), [0, 0], rmax)
        pl.store(pl.row_argmin(t, tmp), [0, 0], rmin)
        pl.store(pl.col_argmax(t, tmp), [0, 0], cmax)
        pl.store(pl.tile.col_argmin(t, tmp), [0, 0], cmin)


@tiered("dt", [np.float32, np.float16], fast=2)
def test_argmax_argmin_of_tiles_reduce_the_valid_region(launcher, rng, dt):
    a = _distinct(rng, (R, C), dt)
    outs = [poison((R, 1), np.int32), poison((R, 1), np.int32), poison((1, C), np.int32), poison((1, C), np.int32)]
    launcher.run(_arg_tiles.compile(a, *outs), a, *outs)
    v = torch.from_numpy(a.astype(np.float32))[:12, :40]
    rmax, rmin, cmax, cmin = outs
    np.testing.assert_array_equal(rmax[:12, 0], torch.argmax(v, dim=1).numpy())
    np.testing.assert_array_equal(rmin[:12, 0], torch.argmin(v, dim=1).numpy())
    np.testing.assert_array_equal(cmax[0, :40], torch.argmax(v, dim=0).numpy())
    np.testing.assert_array_equal(cmin[0, :40], torch.argmin(v, dim=0).numpy())
    # Outside the valid region nothing is stored: the poison stays.
    assert (rmax[12:].view(np.uint32) == 0xABABABAB).all() and (cmin[0, 40:].view(np.uint32) == 0xABABABAB).all()


@pytest.mark.slow
def test_argmax_of_tensors_and_ties_take_the_first_index(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, rmax: pl.Out[pl.Tensor], cmax: pl.Out[pl.Tensor], rmin: pl.Out[pl.Tensor],
          cmin: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(rmax, pl.row_argmax(a), [0, 0])
            pl.assemble(cmax, pl.tensor.col_argmax(a), [0, 0])
            pl.assemble(rmin, pl.tensor.row_argmin(a), [0, 0])
            pl.assemble(cmin, pl.tensor.col_argmin(a), [0, 0])

    a = rng.integers(-3, 4, size=(R, C)).astype(np.float32)  # few distinct values: many ties
    outs = [poison((R, 1), np.int32), poison((1, C), np.int32), poison((R, 1), np.int32), poison((1, C), np.int32)]
    launcher.run(k.compile(a, *outs), a, *outs)
    np.testing.assert_array_equal(outs[0][:, 0], np.argmax(a, axis=1))  # numpy: the first occurrence
    np.testing.assert_array_equal(outs[1][0], np.argmax(a, axis=0))
    np.testing.assert_array_equal(outs[2][:, 0], np.argmin(a, axis=1))
    np.testing.assert_array_equal(outs[3][0], np.argmin(a, axis=0))


def test_argmax_counts_vector_work(rng):
    a = _distinct(rng, (R, C))
    outs = [poison((R, 1), np.int32), poison((R, 1), np.int32), poison((1, C), np.int32), poison((1, C), np.int32)]
    w = run_kernel(_arg_tiles.compile(a, *outs), a, *outs)
    assert w["vec_bytes"][2] == 4 * R * C * 4  # four reductions of the FP32 tile


# ---- sort32 / mrgsort ----------------------------------------------------------------------------


def _pairs(out: np.ndarray):
    """Values and indices of a (value, index) pair tile (FP32: the index's 32 bits)."""
    return out[:, 0::2], out.view(np.uint32)[:, 1::2]


def _sorted_groups(a: np.ndarray, group: int):
    rows, cols = a.shape
    order = np.argsort(-a.reshape(rows, cols // group, group), axis=-1, kind="stable")
    order = (order + np.arange(0, cols, group)[None, :, None]).reshape(rows, cols)
    return np.take_along_axis(a, order, 1), order


@pl.jit
def _sort_pipeline(a: pl.Tensor, ix: pl.Tensor, s32: pl.Out[pl.Tensor], m64: pl.Out[pl.Tensor],
                   full: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        x = pl.load(a, [0, 0], [2, 512])
        i = pl.load(ix, [0, 0], [2, 512])
        s = pl.tile.sort32(x, i)
        pl.store(s, [0, 0], s32)
        m = pl.tile.mrgsort(s, block_len=64)
        pl.store(m, [0, 0], m64)
        pl.store(pl.mrgsort(m, block_len=256), [0, 0], full)


def test_sort32_and_mrgsort_runs_sort_descending_with_their_indices(launcher, rng):
    a = _distinct(rng, (2, 512))
    ix = np.tile(np.arange(512, dtype=np.uint32), (2, 1))
    outs = [poison((2, 1024)) for _ in range(3)]
    launcher.run(_sort_pipeline.compile(a, ix, *outs), a, ix, *outs)
    for out, group in zip(outs, (32, 128, 512)):
        vals, idx = _pairs(out)
        want, order = _sorted_groups(a, group)
        np.testing.assert_array_equal(vals, want)
        np.testing.assert_array_equal(idx, order)


def test_sort32_of_fp16_keeps_the_low_index_bits_and_equal_values_stay_in_order(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, ix: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(out, pl.sort32(a, ix), [0, 0])

    a = rng.integers(-2, 3, size=(4, 64)).astype(np.float16)  # ties everywhere
    ix = np.tile(np.arange(64, dtype=np.uint32), (4, 1))
    out = poison((4, 128), np.float16)
    launcher.run(k.compile(a, ix, out), a, ix, out)
    want, order = _sorted_groups(a.astype(np.float32), 32)
    np.testing.assert_array_equal(out[:, 0::2].astype(np.float32), want)
    np.testing.assert_array_equal(out.view(np.uint16)[:, 1::2], order)


def test_mrgsort_merges_two_to_four_sorted_tiles(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, ix: pl.Tensor, two: pl.Out[pl.Tensor], four: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            runs = [pl.sort32(pl.load(a, [0, 32 * q], [1, 32]), pl.load(ix, [0, 32 * q], [1, 32]))
                    for q in range(4)]
            tmp = pl.tile.create([1, 128], dtype=pl.FP32)
            pl.store(pl.tile.mrgsort(runs[0], runs[1], tmp=tmp), [0, 0], two)
            pl.store(pl.mrgsort(runs[0], runs[1], runs[2], runs[3], pl.tile.create([1, 256], dtype=pl.FP32),
                                exhausted=True), [0, 0], four)

    a = _distinct(rng, (1, 128))
    ix = np.arange(128, dtype=np.uint32)[None, :]
    two, four = poison((1, 128)), poison((1, 256))
    launcher.run(k.compile(a, ix, two, four), a, ix, two, four)
    for out, n in ((two, 64), (four, 128)):
        vals, idx = _pairs(out)
        order = np.argsort(-a[0, :n], kind="stable")
        np.testing.assert_array_equal(vals[0], a[0, order])
        np.testing.assert_array_equal(idx[0], order)


def test_tensor_level_mrgsort_merges_and_takes_a_runtime_block_len(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, ix: pl.Tensor, n: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            left = pl.tensor.mrgsort(pl.tensor.sort32(pl.tensor.slice(a, [1, 128], [0, 0]),
                                                      pl.tensor.slice(ix, [1, 128], [0, 0])), block_len=n)
            right = pl.tensor.mrgsort(pl.tensor.sort32(pl.tensor.slice(a, [1, 128], [0, 128]),
                                                       pl.tensor.slice(ix, [1, 128], [0, 128])), block_len=64)
            pl.assemble(out, pl.tensor.mrgsort(left, right), [0, 0])

    a = _distinct(rng, (1, 256))
    ix = np.arange(256, dtype=np.uint32)[None, :]
    out = poison((1, 512))
    launcher.run(k.compile(a, ix, 64, out), a, ix, 64, out)
    vals, idx = _pairs(out)
    order = np.argsort(-a[0], kind="stable")
    np.testing.assert_array_equal(vals[0], a[0, order])
    np.testing.assert_array_equal(idx[0], order)
    bad = poison((1, 512))
    with pytest.raises(Exception, match="block_len must be a positive multiple of 64"):
        launcher.run(k.compile(a, ix, 96, bad), a, ix, 96, bad)


@pytest.mark.slow
def test_mrgsort_in_a_loop_takes_a_block_len_of_the_loop_index(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, ix: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            s = pl.sort32(pl.load(a, [0, 0], [1, 2048]), pl.load(ix, [0, 0], [1, 2048]))
            for i, (acc,) in pl.range(3, init_values=(s,)):
                merged = pl.mrgsort(acc, block_len=1 << (6 + i * 2))  # 64, 256, 1024 (PyPTO's schedule)
                acc = pl.yield_(merged)
            pl.store(acc, [0, 0], out)

    a = _distinct(rng, (1, 2048))
    ix = np.arange(2048, dtype=np.uint32)[None, :]
    out = poison((1, 4096))
    launcher.run(k.compile(a, ix, out), a, ix, out)
    vals, idx = _pairs(out)
    order = np.argsort(-a[0], kind="stable")
    np.testing.assert_array_equal(vals[0], a[0, order])
    np.testing.assert_array_equal(idx[0], order)


# ---- tri, arange -----------------------------------------------------------------------------------

TRI_CASES = [(False, 0), (True, 0), (False, 2), (True, -1), (False, -R), (True, 40)]


@tiered("upper,diagonal", TRI_CASES, fast=2)
def test_tri_writes_the_triangle_of_its_valid_region(launcher, upper, diagonal):
    @pl.jit
    def k(full: pl.Out[pl.Tensor], part: pl.Out[pl.Tensor], ints: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.tri(diagonal, [R, C], dtype=pl.FP32, upper=upper), [0, 0], full)
            pl.store(pl.tile.tri(diagonal, [R, C], valid_shape=[9, 21], dtype=pl.FP16, upper=upper), [0, 0], part)
            pl.store(pl.tri(diagonal, [R, C], upper=upper), [0, 0], ints)

    full, part, ints = poison((R, C)), poison((R, C), np.float16), poison((R, C), np.int32)
    launcher.run(k.compile(full, part, ints), full, part, ints)
    ones = torch.ones(R, C)
    want = (torch.triu(ones, diagonal) if upper else torch.tril(ones, diagonal)).numpy()
    np.testing.assert_array_equal(full, want)
    np.testing.assert_array_equal(ints, want.astype(np.int32))
    np.testing.assert_array_equal(part[:9, :21], want[:9, :21].astype(np.float16))
    assert np.isnan(part[9:]).all() and np.isnan(part[:, 21:]).all()  # outside the valid region: not written


def test_tri_takes_a_scalar_diagonal_and_arange_a_scalar_start(launcher):
    @pl.jit
    def k(d: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor], seq: pl.Out[pl.Tensor], down: pl.Out[pl.Tensor],
          short: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.tri(d, [R, C], dtype=pl.FP32), [0, 0], out)
            pl.store(pl.arange(d, [2, C]), [0, 0], seq)
            pl.store(pl.tile.ci(100, [1, C], descending=True), [0, 0], down)
            pl.store(pl.tensor.ci(-5, [1, C], dtype=pl.INT16), [0, 0], short)

    out, seq, down, short = poison((R, C)), poison((2, C), np.int32), poison((1, C), np.int32), poison((1, C), np.int16)
    launcher.run(k.compile(3, out, seq, down, short), 3, out, seq, down, short)
    np.testing.assert_array_equal(out, torch.tril(torch.ones(R, C), 3).numpy())
    np.testing.assert_array_equal(seq, np.tile(np.arange(3, 3 + C, dtype=np.int32), (2, 1)))
    np.testing.assert_array_equal(down[0], 100 - np.arange(C))
    np.testing.assert_array_equal(short[0], np.arange(-5, C - 5, dtype=np.int16))


# ---- random ----------------------------------------------------------------------------------------


def _philox(key, counter, rounds):
    """Philox4x32-R of a 128-bit counter (four words) under a 64-bit key (two words): four words."""
    m = 0xFFFFFFFF
    x = list(counter)
    k0, k1 = key
    for _ in range(rounds):
        p0, p1 = 0xD2511F53 * x[0], 0xCD9E8D57 * x[2]
        x = [((p1 >> 32) ^ x[1] ^ k0) & m, p1 & m, ((p0 >> 32) ^ x[3] ^ k1) & m, p0 & m]
        k0, k1 = (k0 + 0x9E3779B9) & m, (k1 + 0xBB67AE85) & m
    return x


def _random_ref(key, counter, rounds, n):
    base = sum(c << (32 * i) for i, c in enumerate(counter))
    out = []
    for q in range((n + 3) // 4):
        c = (base + q) % (1 << 128)
        out += _philox(key, [(c >> (32 * i)) & 0xFFFFFFFF for i in range(4)], rounds)
    return np.array(out[:n], dtype=np.uint64).astype(np.uint32)


def test_philox_model_matches_the_published_answer():
    assert _philox((0, 0), (0, 0, 0, 0), 10) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@pl.jit
def _random_kernel(k0: pl.Scalar[pl.INT32], a: pl.Out[pl.Tensor], b: pl.Out[pl.Tensor], c: pl.Out[pl.Tensor],
                   d: pl.Out[pl.Tensor], e: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.random(k0, 0x5678, 1, 2, 3, 4, [R, C]), [0, 0], a)
        pl.store(pl.tile.random(k0, 0x5678, 1, 2, 3, 4, [R, C]), [0, 0], b)
        pl.store(pl.tensor.random(k0, 0x5678, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, [R, C],
                                  dtype=pl.INT32, rounds=7), [0, 0], c)
        pl.store(pl.tile.random(k0, 0x5678, 9, 2, 3, 4, [R, C], valid_shape=[10, 20]), [0, 0], d)
        pl.store(pl.sub(pl.random(7, 8, 9, 0, 0, 0, [R, C]), pl.random(7, 8, 9, 0, 0, 0, [R, C])), [0, 0], e)


@pytest.mark.slow
def test_random_is_philox_of_key_and_counter_and_the_same_seed_repeats(launcher):
    outs = [poison((R, C), np.uint32), poison((R, C), np.uint32), poison((R, C), np.int32),
            poison((R, C), np.uint32), poison((R, C), np.uint32)]
    launcher.run(_random_kernel.compile(0x1234, *outs), 0x1234, *outs)
    a, b, c, d, e = outs
    n = R * C
    np.testing.assert_array_equal(a.ravel(), _random_ref((0x1234, 0x5678), (1, 2, 3, 4), 10, n))
    np.testing.assert_array_equal(a, b)  # the same key and counter: the same tile
    np.testing.assert_array_equal(c.view(np.uint32).ravel(), _random_ref((0x1234, 0x5678), (2**32 - 1,) * 4, 7, n))
    assert not (e.any())  # random(seed) - random(seed) == 0, as PyPTO's own test checks
    want_d = _random_ref((0x1234, 0x5678), (9, 2, 3, 4), 10, n).reshape(R, C)
    np.testing.assert_array_equal(d[:10, :20], want_d[:10, :20])
    assert (d[10:] == 0xABABABAB).all()  # the valid region only is stored
    # Uniform over the 32-bit range: both halves and both signs are well represented.
    assert 0.4 < (a >= 2**31).mean() < 0.6 and 0.4 < (c < 0).mean() < 0.6
    assert a.min() < 2**28 and a.max() > 2**32 - 2**28 and len(np.unique(a)) == n
    # Another key gives other values.
    other = poison((R, C), np.uint32)
    rest = [poison((R, C), np.uint32), poison((R, C), np.int32), poison((R, C), np.uint32), poison((R, C), np.uint32)]
    launcher.run(_random_kernel.compile(0x1235, other, *rest), 0x1235, other, *rest)
    assert (other != a).mean() > 0.99


def test_random_counts_vector_work():
    outs = [poison((R, C), np.uint32), poison((R, C), np.uint32), poison((R, C), np.int32),
            poison((R, C), np.uint32), poison((R, C), np.uint32)]
    w = run_kernel(_random_kernel.compile(1, *outs), 1, *outs)
    assert w["vec_bytes"][1] >= 6 * R * C * 4  # six random tiles, each a cipher per element


# ---- create_l1 -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_create_l1_is_a_zero_tile_in_mat_that_a_matmul_reads(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            kv = pl.create_l1([32, 16], pl.FP32)
            assert kv.var.type.memory == "Mat" and kv.shape == (32, 16) and kv.dtype == pl.FP32
            kv = pl.tile.assemble(kv, pl.load(b, [0, 0], [8, 16], target_memory=pl.Mem.Mat), [4, 0])
            pl.store(pl.matmul(pl.load(a, [0, 0], [16, 32]), pl.tensor.create_l1([32, 16], pl.FP32)) +
                     pl.matmul(pl.load(a, [0, 0], [16, 32]), kv), [0, 0], y)

    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((8, 16)).astype(np.float32)
    y = poison((16, 16))
    launcher.run(k.compile(a, b, y), a, b, y)
    np.testing.assert_allclose(y, a[:, 4:12].astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


# ---- compile errors, at the user's line ------------------------------------------------------------

XF = np.ones((16, 64), np.float32)
XI = np.ones((16, 64), np.int32)


_TENSOR = []


def _tensor_arg():
    return _TENSOR[-1]


def _error_case(body, *arrays):
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        _TENSOR.append(a)
        with pl.at(level=pl.Level.CORE_GROUP):
            body(pl.load(a, [0, 0], [16, 64]), out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(*arrays)
    return ei


def _line_case(call, arrays):
    """The error of ``call(tile)`` in a kernel, and the line it must name: the call's own (the lambda's)."""

    def body(t, out):
        pl.store(call(t), [0, 0], out)

    return _error_case(body, *arrays), call.__code__.co_firstlineno


ERRORS = {
    "argmax_int": (lambda t: pl.row_argmax(t), ("pl.row_argmax", "FP16 or FP32", "INT32"), (XI, XI)),
    "argmax_tmp": (lambda t: pl.col_argmax(t, pl.tile.create([16, 64], dtype=pl.INT32)),
                   ("pl.col_argmax", "tmp_tile"), (XF, XF)),
    "argmax_tensor_tmp": (lambda t: pl.row_argmax(_tensor_arg(), t), ("pl.row_argmax", "tensor input takes none"),
                          (XF, XF)),
    "sort32_cols": (lambda t: pl.sort32(pl.slice(t, [16, 48], [0, 0]), pl.tile.create([16, 48], dtype=pl.UINT32)),
                    ("pl.sort32", "multiple of 32"), (XF, XF)),
    "sort32_idx": (lambda t: pl.sort32(t, t), ("pl.sort32", "idx must be a UINT32"), (XF, XF)),
    "mrgsort_len": (lambda t: pl.mrgsort(t, block_len=100), ("pl.mrgsort", "block_len", "multiple of 64", "100"),
                    (XF, XF)),
    "mrgsort_forms": (lambda t: pl.mrgsort(t, t, block_len=64), ("pl.mrgsort", "two forms"), (XF, XF)),
    "mrgsort_one": (lambda t: pl.mrgsort(t), ("pl.mrgsort", "block_len"), (XF, XF)),
    "mrgsort_tmp": (lambda t: pl.tile.mrgsort(t, t, tmp=t), ("pl.tile.mrgsort", "tmp", "[16, 128]"), (XF, XF)),
    "tri_rank": (lambda t: pl.tri(0, [2, 16, 64]), ("pl.tri", "2-D"), (XF, XF)),
    "tri_upper": (lambda t: pl.tri(0, [16, 64], upper=1), ("pl.tri", "upper must be a bool"), (XF, XF)),
    "tri_diag": (lambda t: pl.tri(0.5, [16, 64]), ("pl.tri", "diagonal must be an integer"), (XF, XF)),
    "tri_valid": (lambda t: pl.tri(0, [16, 64], valid_shape=[17, 64]), ("pl.tri",), (XF, XF)),
    "arange_dtype": (lambda t: pl.arange(0, [1, 64], dtype=pl.FP32), ("pl.arange", "INT16, INT32, UINT16 or UINT32"),
                     (XF, XF)),
    "random_rounds": (lambda t: pl.random(1, 2, 3, 4, 5, 6, [16, 64], rounds=8), ("pl.random", "rounds must be 7 or 10"),
                      (XF, XF)),
    "random_dtype": (lambda t: pl.random(1, 2, 3, 4, 5, 6, [16, 64], dtype=pl.FP32),
                     ("pl.random", "INT32 or UINT32", "FP32"), (XF, XF)),
    "random_key": (lambda t: pl.random(t, 2, 3, 4, 5, 6, [16, 64]), ("pl.random", "key0 must be an integer"),
                   (XF, XF)),
    "create_l1_shape": (lambda t: pl.create_l1([16, 0], pl.FP32), ("pl.create_l1", "positive ints"), (XF, XF)),
}


@tiered("name", sorted(ERRORS), fast=len(ERRORS))
def test_bad_arguments_are_compile_errors_at_the_line(name):
    call, fragments, arrays = ERRORS[name]
    ei, line = _line_case(call, arrays)
    assert_at(ei, line, *fragments)


def test_an_error_names_the_line_of_the_op():
    where = []

    def body(t, out):
        where.append(next_line())
        pl.store(pl.row_argmin(pl.cast(t, pl.INT32)), [0, 0], out)

    assert_at(_error_case(body, XF, XF), where[0], "pl.row_argmin", "FP16 or FP32")


# ---- the torch reference and the printed program ----------------------------------------------------


@pl.jit
def every_index_op(a: pl.Tensor, ix: pl.Tensor, n: pl.Scalar[pl.INT32], pairs: pl.Out[pl.Tensor],
                   args: pl.Out[pl.Tensor], masks: pl.Out[pl.Tensor], seq: pl.Out[pl.Tensor], rnd: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        x = pl.load(a, [0, 0], [4, 128], valid_shape=[4, 120])
        s = pl.sort32(pl.load(a, [0, 0], [4, 128]), pl.load(ix, [0, 0], [4, 128]))
        m = pl.mrgsort(s, block_len=n)
        half = pl.slice(m, [4, 128], [0, 0])
        pl.store(pl.mrgsort(half, pl.slice(m, [4, 128], [0, 128])), [0, 0], pairs)
        pl.store(pl.row_argmax(x), [0, 0], args)
        pl.store(pl.row_argmin(x), [0, 1], args)
        pl.store(pl.col_argmax(x), [4, 0], args)
        pl.store(pl.col_argmin(x), [5, 0], args)
        pl.store(pl.tri(n, [4, 128], valid_shape=[3, 100], dtype=pl.FP32, upper=True), [0, 0], masks)
        pl.store(pl.arange(n, [1, 128], descending=True), [0, 0], seq)
        pl.store(pl.tile.random(n, 2, 3, 4, 5, 6, [4, 128], valid_shape=[4, 100], dtype=pl.INT32, rounds=7), [0, 0],
                 rnd)


def _every_args(rng, n=64):
    a = _distinct(rng, (4, 128))
    ix = np.tile(np.arange(128, dtype=np.uint32), (4, 1))
    return [a, ix, n, poison((4, 256)), np.zeros((6, 128), np.int32), poison((4, 128)), poison((1, 128), np.int32),
            poison((4, 128), np.int32)]


@pytest.mark.slow  # over a second: torch's import and a cipher in numpy
def test_the_torch_reference_computes_what_the_kernel_does(launcher, rng):
    from pypto_async.debug import torch_codegen

    args = _every_args(rng)
    sim = [np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in args]
    ref = [np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in args]
    launcher.run(every_index_op.compile(*args), *sim)
    program = every_index_op.lower(*args)
    ns: dict = {}
    exec(torch_codegen(program, check_shapes=True), ns)  # noqa: S102 - the generated reference
    ns[program.name](*[torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in ref])
    for i in range(3, len(args)):
        np.testing.assert_array_equal(ref[i].view(np.uint32), sim[i].view(np.uint32))


def test_the_printed_program_traces_back_to_the_same_program(rng):
    args = _every_args(rng)
    program = every_index_op.lower(*args)
    ns: dict = {}
    exec(program.as_python(form="jit"), ns)  # noqa: S102
    again = ns["every_index_op"].lower(*args)
    assert again.as_python(form="jit") == program.as_python(form="jit")


def test_loop_indices_shift_as_python_ints_do(launcher):
    @pl.jit
    def k(out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(4):
                pl.store(pl.arange((1 << i) + (i << 4) + (i >> 1), [1, 8]), [i, 0], out)

    out = poison((4, 8), np.int32)
    launcher.run(k.compile(out), out)
    want = [[(1 << i) + j + (i << 4) + (i >> 1) for j in range(8)] for i in range(4)]
    np.testing.assert_array_equal(out, want)


def test_the_program_serializes_and_reads_back_equal(rng):
    from pypto_async.ir._serialize import deserialize, serialize

    program = every_index_op.lower(*_every_args(rng))
    assert deserialize(serialize(program)) == program
