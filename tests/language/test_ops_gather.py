"""PyPTO's gather / scatter family against torch on random data, run on the sim device.

``gather`` (index and mask forms), ``pl.tile.gather`` (flat), ``gather_row``,
``paged_gather``, ``gatherb``, ``mgather`` (row / element, each
``gather_oob=`` policy), ``scatter`` (index and mask forms),
``pl.tile.scatter`` (flat), ``scatter_update`` (2-D and 4-D) and
``mscatter``.  Outputs are poisoned before each launch.  Out-of-range
indices: a gather never reads outside its source (clamp / wrap / zero), a
scatter fails the launch.  The task graph sees a scatter's write and an
mgather's read of its tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from helpers.located import assert_at, next_line
from helpers.ir_fixtures import poison
from helpers.tiers import tiered
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoError


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# ---- gather ----------------------------------------------------------------------------------------


@tiered("dtype", [np.float32, np.float16, np.int32], ids=["fp32", "fp16", "int32"])
def test_gather_index_forms_and_tile_gather(launcher, rng, dtype):
    """pl.gather (rank 2, dim -1; rank 3, dim 1) and pl.tile.gather (flat) in one kernel."""

    @pl.jit
    def k(x: pl.Tensor, i2: pl.Tensor, x3: pl.Tensor, i3: pl.Tensor, flat: pl.Tensor,
          y2: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor], yf: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(y2, pl.gather(x, dim=-1, index=i2), [0, 0])
            pl.assemble(y3, pl.tensor.gather(x3, dim=1, index=i3), [0, 0, 0])
            xt = pl.load(x, [0, 0], [8, 16])
            pl.store(pl.tile.gather(xt, pl.load(flat, [0, 0], [4, 8]), pl.load(flat, [0, 0], [4, 8])), [0, 0], yf)

    if dtype == np.int32:
        x = rng.integers(-1000, 1000, (8, 16)).astype(dtype)
        x3 = rng.integers(-1000, 1000, (2, 8, 8)).astype(dtype)
    else:
        x = rng.standard_normal((8, 16)).astype(dtype)
        x3 = rng.standard_normal((2, 8, 8)).astype(dtype)
    i2 = rng.integers(0, 16, (6, 12)).astype(np.int32)
    i3 = rng.integers(0, 8, (2, 3, 8)).astype(np.int32)
    flat = rng.integers(0, 128, (4, 8)).astype(np.int32)
    y2, y3, yf = poison((6, 12), dtype), poison((2, 3, 8), dtype), poison((4, 8), dtype)
    launcher.run(k.compile(x, i2, x3, i3, flat, y2, y3, yf), x, i2, x3, i3, flat, y2, y3, yf)
    np.testing.assert_array_equal(y2, torch.gather(_t(x)[:6], -1, _t(i2).long()).numpy())
    np.testing.assert_array_equal(y3, torch.gather(_t(x3), 1, _t(i3).long()).numpy())
    np.testing.assert_array_equal(yf, x.reshape(-1)[flat])


@pytest.mark.slow
def test_gather_mask_patterns(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, a: pl.Out[pl.Tensor], b: pl.Out[pl.Tensor], c: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(a, pl.gather(x, mask_pattern=pl.tile.MaskPattern.P0101), [0, 0])
            pl.assemble(b, pl.gather(x, mask_pattern=2), [0, 0])
            pl.assemble(c, pl.tile.gather_mask(pl.load(x, [0, 0], [8, 16]), pl.tile.MaskPattern.P0100), [0, 0])
            pl.assemble(d, pl.gather(x, mask_pattern=pl.tile.MaskPattern.P1111), [0, 0])

    x = rng.standard_normal((8, 16)).astype(np.float32)
    a, b, c, d = poison((8, 8)), poison((8, 8)), poison((8, 4)), poison((8, 16))
    launcher.run(k.compile(x, a, b, c, d), x, a, b, c, d)
    np.testing.assert_array_equal(a, x[:, 0::2])
    np.testing.assert_array_equal(b, x[:, 1::2])
    np.testing.assert_array_equal(c, x[:, 2::4])
    np.testing.assert_array_equal(d, x)


@tiered("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_mgather_row_and_elem_policies(launcher, rng, dtype):
    """Row and element mgather under each gather_oob policy; indices past the tensor (and -1) included."""

    @pl.jit
    def k(mem: pl.Tensor, flat: pl.Tensor, ri: pl.Tensor, ei: pl.Tensor, yu: pl.Out[pl.Tensor],
          yc: pl.Out[pl.Tensor], yw: pl.Out[pl.Tensor], yz: pl.Out[pl.Tensor], ye: pl.Out[pl.Tensor]):
        r = pl.load(ri, [0, 0], [1, 8])
        pl.store(pl.mgather(mem, r), [0, 0], yu)
        pl.store(pl.tile.mgather(mem, r, gather_oob="clamp"), [0, 0], yc)
        pl.store(pl.mgather(mem, pl.load(ri, [0, 0], [1, 8]), "row", gather_oob=2), [0, 0], yw)
        pl.store(pl.mgather(mem, r, coalesce=0, gather_oob="zero"), [0, 0], yz)
        pl.store(pl.mgather(flat, pl.load(ei, [0, 0], [4, 8]), coalesce="elem", gather_oob="wrap"), [0, 0], ye)

    mem = rng.standard_normal((16, 24)).astype(dtype)
    flat = rng.standard_normal((40,)).astype(dtype)
    ri = np.array([[3, -1, 16, 0, 15, 40, 7, 7]], np.int32)
    ei = rng.integers(-5, 100, (4, 8)).astype(np.int32)
    outs = [poison((8, 24), dtype) for _ in range(4)] + [poison((4, 8), dtype)]
    launcher.run(k.compile(mem, flat, ri, ei, *outs), mem, flat, ri, ei, *outs)
    u = ri.reshape(-1).astype(np.int64) & 0xFFFFFFFF
    np.testing.assert_array_equal(outs[0], mem[np.minimum(u, 15)])
    np.testing.assert_array_equal(outs[1], mem[np.minimum(u, 15)])
    np.testing.assert_array_equal(outs[2], mem[u % 16])
    zero = np.where((u < 16)[:, None], mem[np.minimum(u, 15)], 0)
    np.testing.assert_array_equal(outs[3], zero.astype(dtype))
    np.testing.assert_array_equal(outs[4], flat[(ei.astype(np.int64) & 0xFFFFFFFF) % 40])


@pytest.mark.slow
def test_gatherb_and_paged_gather_and_gather_row(launcher, rng):
    @pl.jit
    def k(src: pl.Tensor, off: pl.Tensor, pool: pl.Tensor, ids: pl.Tensor, table: pl.Tensor,
          yb: pl.Out[pl.Tensor], yp: pl.Out[pl.Tensor], yr: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            g = pl.gatherb(pl.load(src, [0, 0], [1, 64]), pl.load(off, [0, 0], [2, 4]))
            pl.assemble(yb, g, [0, 0])
            p = pl.paged_gather(pool, ids, table, block_size=4, size=8, max_indices=8, space=pl.Mem.Vec, col_off=2)
            pl.assemble(yp, p, [0, 0])
            acc = pl.create_l1([4, 12], pl.FP32)
            acc = pl.gather_row(acc, pool, [1, 0], [5, 0], [2, 12])
            acc = pl.gather_row(acc, pool, [0, 0], [9, 0], [4, 12], valid_shape=[1, 12])
            pl.assemble(yr, pl.move(acc, target_memory=pl.Mem.Vec), [0, 0])

    src = rng.standard_normal((1, 64)).astype(np.float32)
    off = (rng.permutation(8)[:8].reshape(2, 4) * 32).astype(np.uint32)
    pool = rng.standard_normal((16, 12)).astype(np.float32)
    ids = rng.integers(0, 12, (1, 6)).astype(np.int32)
    table = np.array([3, 0, 2, 1], np.int32)
    yb, yp, yr = poison((2, 32)), poison((8, 8)), poison((4, 12))
    launcher.run(k.compile(src, off, pool, ids, table, yb, yp, yr), src, off, pool, ids, table, yb, yp, yr)
    blocks = src.reshape(8, 8)
    np.testing.assert_array_equal(yb, blocks[off // 32].reshape(2, 32))
    i = ids.reshape(-1)
    phys = table[i // 4] * 4 + i % 4
    want = np.zeros((8, 8), np.float32)
    want[:6] = pool[phys, 2:10]
    np.testing.assert_array_equal(yp, want)
    want = np.zeros((4, 12), np.float32)
    want[1:3] = pool[5:7]
    want[0] = pool[9]
    np.testing.assert_array_equal(yr, want)


# ---- scatter ---------------------------------------------------------------------------------------


@tiered("dtype", [np.float32, np.int32, np.float16], ids=["fp32", "int32", "fp16"])
def test_scatter_forms(launcher, rng, dtype):
    """pl.scatter (index form, rank 2 and 3; mask form), pl.tile.scatter (flat) and scatter_update (2-D, 4-D)."""

    @pl.jit
    def k(base: pl.Tensor, idx: pl.Tensor, val: pl.Tensor, b3: pl.Tensor, i3: pl.Tensor, v3: pl.Tensor,
          half: pl.Tensor, fi: pl.Tensor, rows: pl.Tensor, ri: pl.Tensor, b4: pl.Tensor, s4: pl.Tensor,
          y: pl.Out[pl.Tensor], y3: pl.Out[pl.Tensor], ym: pl.Out[pl.Tensor], yf: pl.Out[pl.Tensor],
          yu: pl.Out[pl.Tensor], y4: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.assemble(y, pl.scatter(base, dim=-1, index=idx, src=val), [0, 0])
            pl.assemble(y3, pl.tensor.scatter(b3, -1, i3, v3), [0, 0, 0])
            pl.assemble(ym, pl.scatter(half, mask_pattern=pl.tile.MaskPattern.P1010, dst=base), [0, 0])
            bt = pl.load(base, [0, 0], [4, 16])
            pl.store(pl.tile.scatter(bt, pl.load(val, [0, 0], [4, 8]), pl.load(fi, [0, 0], [4, 8])), [0, 0], yf)
            pl.assemble(yu, pl.scatter_update(base, -2, ri, rows), [0, 0])
            pl.assemble(y4, pl.tile.scatter_update(pl.load(b4, [0, 0, 0, 0], [2, 2, 1, 16]), index=ri, src=s4),
                        [0, 0, 0, 0])

    def rand(shape):
        if dtype == np.int32:
            return rng.integers(-1000, 1000, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)

    base, val = rand((4, 16)), rand((4, 8))
    idx = np.stack([rng.permutation(16)[:8] for _ in range(4)]).astype(np.int32)
    idx[0, 1] = idx[0, 0]  # a repeated position: the later write wins
    b3, v3 = rand((2, 3, 8)), rand((2, 3, 4))
    i3 = rng.integers(0, 8, (2, 3, 4)).astype(np.int32)
    half = rand((4, 8))
    fi = rng.permutation(64)[:32].reshape(4, 8).astype(np.int32)
    rows, ri = rand((2, 16)), np.array([[3, 1]], np.int32)
    b4, s4 = rand((2, 2, 1, 16)), rand((1, 2, 1, 16))
    outs = [poison(s, dtype) for s in ((4, 16), (2, 3, 8), (4, 16), (4, 16), (4, 16), (2, 2, 1, 16))]
    args = (base, idx, val, b3, i3, v3, half, fi, rows, ri, b4, s4, *outs)
    launcher.run(k.compile(*args), *args)
    want = base.copy()
    for r in range(4):
        for c in range(8):
            want[r, idx[r, c]] = val[r, c]
    np.testing.assert_array_equal(outs[0], want)
    want3 = b3.copy()
    for a in range(2):
        for b in range(3):
            for c in range(4):
                want3[a, b, i3[a, b, c]] = v3[a, b, c]
    np.testing.assert_array_equal(outs[1], want3)
    wm = base.copy()
    wm[:, 1::2] = half
    np.testing.assert_array_equal(outs[2], wm)
    wf = base.copy().reshape(-1)
    wf[fi.reshape(-1)] = val.reshape(-1)
    np.testing.assert_array_equal(outs[3], wf.reshape(4, 16))
    wu = base.copy()
    wu[[3, 1]] = rows
    np.testing.assert_array_equal(outs[4], wu)
    w4 = b4.copy().reshape(4, 16)
    w4[[3, 1]] = s4.reshape(2, 16)
    np.testing.assert_array_equal(outs[5], w4.reshape(2, 2, 1, 16))


def test_mscatter_writes_indexed_elements_only(launcher, rng):
    @pl.jit
    def k(src: pl.Tensor, idx: pl.Tensor, out: pl.InOut[pl.Tensor]):
        pl.mscatter(pl.load(src, [0, 0], [4, 8]), pl.load(idx, [0, 0], [4, 8]), out)

    src = rng.standard_normal((4, 8)).astype(np.float32)
    idx = rng.permutation(96)[:32].reshape(4, 8).astype(np.int32)
    out = rng.standard_normal((96,)).astype(np.float32)
    want = out.copy()
    want[idx.reshape(-1)] = src.reshape(-1)
    launcher.run(k.compile(src, idx, out), src, idx, out)
    np.testing.assert_array_equal(out, want)


def test_scatter_index_out_of_range_fails_the_launch(launcher):
    @pl.jit
    def k(base: pl.Tensor, idx: pl.Tensor, val: pl.Tensor, y: pl.Out[pl.Tensor]):
        pl.store(pl.tile.scatter(pl.load(base, [0, 0], [2, 8]), pl.load(val, [0, 0], [2, 4]),
                                 pl.load(idx, [0, 0], [2, 4])), [0, 0], y)

    base, val = np.ones((2, 8), np.float32), np.ones((2, 4), np.float32)
    idx = np.array([[0, 1, 2, 3], [4, 5, 16, 6]], np.int32)
    y = poison((2, 8))
    with pytest.raises(PtoError, match="pl.tile.scatter: an index is outside the destination"):
        launcher.run(k.compile(base, idx, val, y), base, idx, val, y)


# ---- the task graph sees the accesses ------------------------------------------------------------------


@pytest.mark.slow
def test_scatter_consumer_waits_and_mgather_reads_its_tensor():
    """Two tasks: a scatter_update writes `mid`, an mgather of `mid` reads it; the second waits for the first."""

    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def upd(self, base: pl.Tensor[[8, 16], pl.FP32], ri: pl.Tensor[[1, 2], pl.INT32],
                rows: pl.Tensor[[2, 16], pl.FP32], mid: pl.Out[pl.Tensor[[8, 16], pl.FP32]]):
            t = pl.scatter_update(pl.load(base, [0, 0], [8, 16]), -2, pl.load(ri, [0, 0], [1, 2]),
                                  pl.load(rows, [0, 0], [2, 16]))
            return pl.store(t, [0, 0], mid)

        @pl.function(type=pl.FunctionType.InCore)
        def pick(self, mid: pl.Tensor[[8, 16], pl.FP32], gi: pl.Tensor[[1, 4], pl.INT32],
                 out: pl.Out[pl.Tensor[[4, 16], pl.FP32]]):
            return pl.store(pl.mgather(mid, pl.load(gi, [0, 0], [1, 4])), [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, base: pl.Tensor[[8, 16], pl.FP32], ri: pl.Tensor[[1, 2], pl.INT32],
                 rows: pl.Tensor[[2, 16], pl.FP32], gi: pl.Tensor[[1, 4], pl.INT32],
                 out: pl.Out[pl.Tensor[[4, 16], pl.FP32]]):
            mid = pl.create_tensor([8, 16], dtype=pl.FP32)
            mid = self.upd(base, ri, rows, mid)
            return self.pick(mid, gi, out)

    c = ir.compile(P, platform="sim")
    from pypto_async.ir._deps import task_graph

    g = task_graph(c.program)
    assert [(e.src, e.dst) for e in g.edges] == [(0, 1)], g.edges
    rng = np.random.default_rng(3)
    base = rng.standard_normal((8, 16)).astype(np.float32)
    rows = rng.standard_normal((2, 16)).astype(np.float32)
    ri, gi = np.array([[6, 2]], np.int32), np.array([[6, 0, 2, 5]], np.int32)
    out = poison((4, 16))
    c(base, ri, rows, gi, out)
    mid = base.copy()
    mid[[6, 2]] = rows
    np.testing.assert_array_equal(out, mid[[6, 0, 2, 5]])


def test_device_model_counts_gather_and_scatter_work():
    @pl.jit
    def k(x: pl.Tensor, i: pl.Tensor, v: pl.Tensor, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
        xt, it = pl.load(x, [0, 0], [4, 16]), pl.load(i, [0, 0], [4, 8])
        pl.store(pl.tile.gather(xt, it), [0, 0], y)
        pl.store(pl.tile.scatter(xt, pl.load(v, [0, 0], [4, 8]), it), [0, 0], z)

    x, v = np.ones((4, 16), np.float32), np.ones((4, 8), np.float32)
    i = np.zeros((4, 8), np.int32)
    from pypto_async.ir._codegen import generate_c

    text = generate_c(k.compile(x, i, v, poison((4, 8)), poison((4, 16))).program, "k")
    # the gather's 32 elements x 4 bytes, the scatter's copy (64) and writes (32) x 4 bytes
    assert "w_vec_bytes0 += 128;" in text and "w_vec_bytes0 += 384;" in text, text


# ---- bad input -----------------------------------------------------------------------------------------


def _trace(body, *arrays):
    @pl.jit
    def k(x: pl.Tensor, i: pl.Tensor, y: pl.Out[pl.Tensor]):
        body(x, i, y)

    return k.compile(*arrays)


@pytest.mark.parametrize("case,fragment", [
    ("float_index", "pl.gather: the index tile must be an integer tile"),
    ("bad_dim", "pl.gather: dim must be an int in [-2, 2)"),
    ("both_forms", "pl.gather: the index form (dim, index) and the mask form"),
    ("bad_mask", "pl.gather: mask_pattern must be 1-7"),
    ("bad_oob", "pl.mgather: gather_oob must be"),
    ("bad_coalesce", "pl.mgather: coalesce must be"),
    ("scatter_dim", "pl.scatter: only dim=-1"),
    ("gatherb_offset", "pl.gatherb: offset must be a UINT32 tile"),
    ("update_dim", "pl.scatter_update: dim must be -2"),
])
def test_bad_input_is_a_compile_error(case, fragment):
    x = np.ones((4, 16), np.float32)
    i = np.zeros((4, 8), np.int32)
    y = np.zeros((4, 8), np.float32)
    line = next_line()
    bodies = {
        "float_index": lambda x_, i_, y_: pl.gather(x_, dim=-1, index=x_),
        "bad_dim": lambda x_, i_, y_: pl.gather(x_, dim=2, index=i_),
        "both_forms": lambda x_, i_, y_: pl.gather(x_, dim=-1, index=i_, mask_pattern=1),
        "bad_mask": lambda x_, i_, y_: pl.gather(x_, mask_pattern=9),
        "bad_oob": lambda x_, i_, y_: pl.mgather(x_, pl.load(i_, [0, 0], [1, 8]), gather_oob="nearest"),
        "bad_coalesce": lambda x_, i_, y_: pl.mgather(x_, pl.load(i_, [0, 0], [1, 8]), coalesce="col"),
        "scatter_dim": lambda x_, i_, y_: pl.scatter(x_, dim=0, index=i_, src=i_),
        "gatherb_offset": lambda x_, i_, y_: pl.gatherb(pl.load(x_, [0, 0], [4, 16]), pl.load(i_, [0, 0], [4, 8])),
        "update_dim": lambda x_, i_, y_: pl.scatter_update(x_, -1, i_, x_),
    }
    with pytest.raises(PtoCompileError) as excinfo:
        _trace(bodies[case], x, i, y)
    assert_at(excinfo, line + 1 + list(bodies).index(case), fragment)


def test_gathers_and_scatters_print_back_and_serialize():
    """``as_python`` of every gather and scatter mode traces back to a program that prints the same; the IR serializes."""

    @pl.jit
    def kern(x: pl.Tensor, i: pl.Tensor, r: pl.Tensor, o: pl.Tensor, mem: pl.Tensor, y: pl.Out[pl.Tensor],
             z: pl.Out[pl.Tensor], w: pl.Out[pl.Tensor], b: pl.Out[pl.Tensor]):
        xt, it = pl.load(x, [0, 0], [4, 16]), pl.load(i, [0, 0], [4, 8])
        pl.store(pl.tile.gather(xt, it), [0, 0], y)
        pl.store(pl.gather(xt, dim=1, index=it), [0, 0], y)
        pl.store(pl.mgather(mem, pl.load(r, [0, 0], [1, 4]), gather_oob="wrap"), [0, 0], w)
        pl.store(pl.gatherb(xt, pl.load(o, [0, 0], [4, 2])), [0, 0], b)
        pl.store(pl.cast(pl.gatherb(xt, pl.load(o, [0, 0], [4, 2]), output_dtype=pl.INT32), pl.FP32), [0, 0], b)
        v = pl.load(x, [0, 0], [4, 8])
        pl.store(pl.scatter(xt, dim=-1, index=it, src=v), [0, 0], z)
        pl.store(pl.scatter_update(xt, -2, pl.load(r, [0, 0], [1, 4]), pl.load(x, [0, 0], [4, 16])), [0, 0], z)

    args = (np.zeros((4, 16), np.float32), np.zeros((4, 8), np.int32), np.zeros((1, 4), np.int32),
            np.zeros((4, 2), np.uint32), np.zeros((6, 16), np.float32), np.zeros((4, 8), np.float32),
            np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float32))
    p = kern.lower(*args)
    src = p.as_python(form="jit")
    for text in ('mode="axis", dim=1', 'mode="rows", gather_oob="wrap"', "output_dtype=pl.INT32)", 'mode="axis")',
                 'mode="rows")'):
        assert text in src, src
    namespace: dict = {}
    exec(compile(src, "<as_python>", "exec"), namespace)
    again = namespace["kern"].lower(*args).as_python(form="jit")  # fusion may order independent statements anew
    namespace = {}
    exec(compile(again, "<as_python>", "exec"), namespace)
    assert namespace["kern"].lower(*args).as_python(form="jit") == again  # and the text no longer changes
    assert ir.deserialize(ir.serialize(p)) == p


def test_gather_row_with_a_runtime_valid_shape(launcher):
    """Two runs split at a runtime row: only the valid box moves; a box past the destination fails the launch."""

    @pl.jit
    def k(src: pl.Tensor, n: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            r1 = pl.cast(pl.read(n, [0]), pl.INDEX)
            kv = pl.create_l1([16, 8], pl.FP16)
            kv = pl.gather_row(kv, src, [0, 0], [0, 0], [16, 8], valid_shape=[r1, 8])
            kv = pl.gather_row(kv, src, [r1, 0], [16, 0], [16, 8], valid_shape=[16 - r1, 8])
            pl.assemble(out, pl.move(kv, target_memory=pl.Mem.Vec), [0, 0])

    src = np.random.default_rng(5).standard_normal((32, 8)).astype(np.float16)
    out = poison((16, 8), np.float16)
    c = k.compile(src, np.array([0], np.int32), out)
    for r in (0, 5, 16):
        out = poison((16, 8), np.float16)
        launcher.run(c, src, np.array([r], np.int32), out)
        np.testing.assert_array_equal(out, np.concatenate([src[:r], src[16:32 - r]]))
    with pytest.raises(PtoError, match="outside"):
        launcher.run(c, src, np.array([17], np.int32), out)


@pytest.mark.slow
def test_mscatter_writes_only_its_elements_across_spmd_blocks_and_orders_its_readers(launcher):
    """Blocks of one kernel mscatter disjoint elements of one tensor (no block rewrites another's); a later
    task reading the tensor waits for the mscatter (a write of the whole tensor to the task graph)."""

    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def put(self, src: pl.Tensor[[4, 8], pl.FP32], idx: pl.Tensor[[4, 8], pl.INT32],
                mid: pl.InOut[pl.Tensor[[64], pl.FP32]]):
            return pl.mscatter(pl.load(src, [0, 0], [4, 8]), pl.load(idx, [0, 0], [4, 8]), mid)

        @pl.function(type=pl.FunctionType.InCore)
        def twice(self, mid: pl.Tensor[[64], pl.FP32], out: pl.Out[pl.Tensor[[64], pl.FP32]]):
            return pl.store(pl.mul(pl.load(mid, [0], [64]), 2.0), [0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, src: pl.Tensor[[4, 8], pl.FP32], idx: pl.Tensor[[4, 8], pl.INT32],
                 mid: pl.InOut[pl.Tensor[[64], pl.FP32]], out: pl.Out[pl.Tensor[[64], pl.FP32]]):
            mid = self.put(src, idx, mid)
            return self.twice(mid, out)

    from pypto_async.ir._deps import task_graph

    c = ir.compile(P, platform="sim")
    assert [(e.src, e.dst) for e in task_graph(c.program).edges] == [(0, 1)]
    rng = np.random.default_rng(11)
    src = rng.standard_normal((4, 8)).astype(np.float32)
    idx = rng.permutation(64)[:32].reshape(4, 8).astype(np.int32)
    mid = rng.standard_normal(64).astype(np.float32)
    want = mid.copy()
    want[idx.reshape(-1)] = src.reshape(-1)
    out = poison(64)
    c(src, idx, mid, out)
    np.testing.assert_array_equal(mid, want)
    np.testing.assert_array_equal(out, want * 2)

    @pl.jit
    def blocks(src: pl.Tensor, idx: pl.Tensor, mid: pl.InOut[pl.Tensor]):
        for b in pl.spmd(4):
            pl.mscatter(pl.load(src, [b, 0], [1, 8]), pl.load(idx, [b, 0], [1, 8]), mid)

    mid = rng.standard_normal(64).astype(np.float32)
    want = mid.copy()
    want[idx.reshape(-1)] = src.reshape(-1)
    launcher.run(blocks.compile(src, idx, mid), src, idx, mid)
    np.testing.assert_array_equal(mid, want)


def test_gatherb_reads_the_blocks_bytes_as_another_dtype(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, off: pl.Tensor, ya: pl.Out[pl.Tensor], yb: pl.Out[pl.Tensor],
          yc: pl.Out[pl.Tensor]):
        o = pl.load(off, [0, 0], [2, 2])
        pl.store(pl.gatherb(pl.load(a, [0, 0], [1, 64]), o, output_dtype=pl.INT32), [0, 0], ya)
        pl.store(pl.gatherb(pl.load(b, [0, 0], [1, 32]), o, output_dtype=pl.FP16), [0, 0], yb)
        pl.store(pl.gatherb(pl.load(b, [0, 0], [1, 32]), o, output_dtype=pl.INT8), [0, 0], yc)

    a = rng.integers(-30000, 30000, (1, 64)).astype(np.int16)
    b = rng.standard_normal((1, 32)).astype(np.float32)
    off = (rng.permutation(4).reshape(2, 2) * 32).astype(np.uint32)
    ya, yb, yc = poison((2, 16), np.int32), poison((2, 32), np.float16), poison((2, 64), np.int8)
    launcher.run(k.compile(a, b, off, ya, yb, yc), a, b, off, ya, yb, yc)
    for src, y, dt in ((a, ya, np.int32), (b, yb, np.float16), (b, yc, np.int8)):
        blocks = src.view(np.uint8).reshape(-1, 32)
        want = blocks[off // 32].reshape(2, -1).view(dt)
        np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))
