"""The IR: printing, structural equality, loops vs unrolling, the pass pipeline."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async._dtypes import FP32
from pypto_async.errors import PtoCompileError
from pypto_async.ir import Assign, For, Fused, Load, Program, Spmd, Store

from .test_kernels import add_kernel, scale_add_relu

A = np.zeros((128, 128), np.float32)


def _walk(body):
    for s in body:
        yield s
        yield from _walk(getattr(s, "body", ()) or getattr(s, "members", ()))


def test_printed_seed_kernel():
    text = str(add_kernel.trace(A, A, A))
    assert text == "\n".join(
        [
            "program add_kernel(a: in FP32[128, 128], b: in FP32[128, 128], out: out FP32[128, 128]) -> out "
            "blocks=1 stage=traced {",
            "  at CORE_GROUP {",
            "    %0: FP32[128, 128] = load a[0, 0]",
            "    %1: FP32[128, 128] = load b[0, 0]",
            "    %2: FP32[128, 128] = add %0, %1",
            "    store %2 -> out[0, 0]",
            "  }",
            "}",
        ]
    )
    lowered = str(add_kernel.lower(A, A, A))
    assert "fused [128, 128] keep() {" in lowered and "stage=lowered" in lowered


def test_structural_equality():
    p1, p2 = add_kernel.lower(A, A, A), add_kernel.lower(A, A, A)
    assert p1 == p2 and hash(p1) == hash(p2)
    assert p1 is not p2
    assert add_kernel.trace(A, A, A) != p1  # pre-pass vs lowered
    b = np.zeros((128, 128), np.float64)
    with pytest.raises(PtoCompileError):
        add_kernel.lower(A, b, A)  # FP32 + FP64 does not type-check
    smaller = np.zeros((256, 128), np.float32)
    assert add_kernel.lower(smaller, smaller, smaller) != p1  # other shapes, other program


def test_equality_ignores_source_locations():
    p = add_kernel.trace(A, A, A)
    scope = p.body[0]
    moved = dataclasses.replace(scope, body=tuple(dataclasses.replace(s, loc=ir.Loc("elsewhere.py", 1)) for s in scope.body))
    assert dataclasses.replace(p, body=(moved,)) == p


def test_pl_range_is_a_real_loop_and_python_range_unrolls():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(0, 64, 8):
            pl.store(pl.load(x, [i, 0], [8, 16]), [i, 0], y)
        for j in range(4):
            pl.store(pl.load(x, [j * 8, 0], [8, 16]), [j * 8, 0], y)

    x = np.zeros((64, 16), np.float32)
    p = k.trace(x, x)
    loops = [s for s in p.body if isinstance(s, For)]
    assert len(loops) == 1 and (loops[0].start, loops[0].stop, loops[0].step, loops[0].trip_count) == (0, 64, 8, 8)
    assert sum(isinstance(s, Assign) and isinstance(s.expr, Load) for s in loops[0].body) == 1
    assert sum(isinstance(s, Store) for s in p.body) == 4  # unrolled
    assert "for i0 in range(0, 64, 8) {" in str(p)
    assert "load x[i0, 0]" in str(p) and "load x[24, 0]" in str(p)


def test_spmd_sets_block_num_and_index():
    x = np.zeros(scale_add_relu_n(), np.float32)
    p = scale_add_relu.lower(x, x, 1.0, x)
    assert p.block_num == 4
    spmd = [s for s in p.body if isinstance(s, Spmd)]
    assert len(spmd) == 1 and spmd[0].count == 4
    assert "spmd b0 in blocks(4) {" in str(p)


def scale_add_relu_n():
    from .test_kernels import CH_N

    return CH_N


def test_pipeline_is_listed_and_idempotent():
    assert ir.PIPELINE[0] is ir.infer_and_check and ir.fuse_elementwise in ir.PIPELINE
    lowered = add_kernel.lower(A, A, A)
    assert ir.run_passes(lowered) == lowered
    assert ir.run_passes(add_kernel.trace(A, A, A)) == lowered


def test_compile_from_traced_or_lowered_gives_one_artifact():
    c1 = ir.compile(add_kernel.trace(A, A, A))
    c2 = ir.compile(add_kernel.lower(A, A, A))
    assert c1.ir_hash == c2.ir_hash and c1.output_dir == c2.output_dir
    assert c1.program == add_kernel.trace(A, A, A)  # what was handed to compile, as is


def test_checks_apply_to_hand_built_programs():
    from pypto_async.ir import IConst, Param, TileType, Var

    v = Var(0, TileType((16, 16), FP32))
    params = (Param("x", "in", (16, 16), FP32), Param("y", "in", (16, 16), FP32))
    body = (Assign(v, Load("x", (IConst(0), IConst(0)), (16, 16))), Store(v, "y", (IConst(0), IConst(0))))
    with pytest.raises(PtoCompileError, match="store to In parameter 'y'"):
        ir.compile(Program("handmade", params, body))
    undefined = (Store(v, "y", (IConst(0), IConst(0))),)
    params_out = (params[0], Param("y", "out", (16, 16), FP32))
    with pytest.raises(PtoCompileError, match="used before it is defined"):
        ir.run_passes(Program("handmade", params_out, undefined))


def test_fusion_keeps_values_used_elsewhere():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor], s: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [8, 16])
        e = pl.exp(t) * 2.0
        pl.store(e, [0, 0], y)
        pl.store(pl.row_sum(e), [0, 0], s)

    x = np.zeros((8, 16), np.float32)
    p = k.lower(x, x, np.zeros((8, 1), np.float32))
    fused = [s for s in _walk(p.body) if isinstance(s, Fused)]
    assert [f.shape for f in fused] == [(8, 16), (8, 1)]
    assert fused[0].materialize == (2,)  # e feeds the reduction
    assert sum(isinstance(m, Store) for m in fused[0].members) == 1


def test_inplace_store_after_load_of_same_window_fuses():
    @pl.jit
    def k(x: pl.InOut[pl.Tensor]):
        for i in pl.range(0, 64, 16):
            pl.store(pl.load(x, [i, 0], [16, 16]) + 1.0, [i, 0], x)

    x = np.zeros((64, 16), np.float32)
    fused = [s for s in _walk(k.lower(x).body) if isinstance(s, Fused)]
    assert len(fused) == 1


def test_shifted_inplace_store_does_not_fuse_with_its_load(launcher, rng):
    """Store to x[1:] what was loaded from x[:-1]: the whole load must happen first."""

    @pl.jit
    def k(x: pl.InOut[pl.Tensor]):
        pl.store(pl.load(x, [0], [63]) * 2.0, [1], x)

    x = rng.standard_normal(64).astype(np.float32)
    fused = [s for s in _walk(k.lower(x).body) if isinstance(s, Fused)]
    assert len(fused) == 2
    want = x.copy()
    want[1:] = x[:-1] * 2
    launcher.run(k.compile(x), x)
    np.testing.assert_array_equal(x, want)


def test_values_defined_in_a_loop_are_readable_after_it(launcher, rng):
    """The last iteration's tiles (a view and a computed tile) outlive the loop."""

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor]):
        for i in pl.range(0, 64, 16):
            tv = pl.load(a, [i, 0], [16, 32])  # read in place by the matmul: a view
            t2 = pl.load(a, [i, 0], [16, 32]) * 2.0
        pl.store(pl.matmul(tv, pl.load(b, [0, 0], [32, 8])), [0, 0], c)
        pl.store(t2, [0, 0], d)

    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    c, d = np.full((16, 8), np.nan, np.float32), np.full((16, 32), np.nan, np.float32)
    launcher.run(k.compile(a, b, c, d), a, b, c, d)
    np.testing.assert_allclose(c, a[48:] @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(d, a[48:] * 2)


def test_dead_tiles_are_dropped():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [8, 16])
        pl.exp(t) * 3.0  # never used
        pl.store(t + 1.0, [0, 0], y)

    x = np.zeros((8, 16), np.float32)
    assert len([s for s in _walk(k.trace(x, x).body) if isinstance(s, Assign)]) == 4
    lowered = k.lower(x, x)
    assert [type(s.expr).__name__ for s in _walk(lowered.body) if isinstance(s, Assign)] == ["Load", "Binary"]


def test_types_print_their_space_and_valid_region():
    from pypto_async.ir import IConst, IScalar, TileType

    assert str(TileType((16, 32), FP32)) == "FP32[16, 32]"
    assert str(TileType((16, 32), FP32, "Left")) == "FP32[16, 32]@Left"
    assert str(TileType((16, 32), FP32, "Vec", (IConst(16), IScalar("n")))) == "FP32[16, 32] valid[16, $n]"
    assert TileType((16, 32), FP32, "Acc") != TileType((16, 32), FP32)


def test_an_update_keeps_its_tiles_type():
    from pypto_async.ir import IConst, IVar, Param, TileType, Update, Var

    t16, t8 = TileType((16, 16), FP32), TileType((8, 16), FP32)
    x = Param("x", "in", (16, 16), FP32)
    c, v = Var(0, t16), Var(1, t8)
    body = (
        Assign(c, Load("x", (IConst(0), IConst(0)), (16, 16))),
        For(IVar("i"), 0, 4, 1, (Assign(v, Load("x", (IConst(0), IConst(0)), (8, 16))), Update(c, v))),
    )
    with pytest.raises(PtoCompileError, match="loop-carried tile %0 is FP32\\[16, 16\\], but its next value is"):
        ir.run_passes(Program("handmade", (x,), body))


def test_valid_regions_and_spaces_are_checked_on_hand_built_programs():
    from pypto_async.ir import IConst, Move, Param, TileType, Var

    x = Param("x", "in", (16, 16), FP32)
    y = Param("y", "out", (16, 16), FP32)
    v0 = Var(0, TileType((16, 16), FP32, "Mat"))
    v1 = Var(1, TileType((16, 16), FP32, "Acc"))
    body = (Assign(v0, Load("x", (IConst(0), IConst(0)), (16, 16), "Mat")), Assign(v1, Move(v0, "Acc")),
            Store(v1, "y", (IConst(0), IConst(0))))
    with pytest.raises(PtoCompileError, match="pl.move cannot target Acc"):
        ir.run_passes(Program("handmade", (x, y), body))
