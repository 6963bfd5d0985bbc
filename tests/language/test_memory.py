"""Memory spaces (pl.MemorySpace / pl.Mem), pl.move, pl.create_tile, pl.copy.

The sim has one memory, so a space never changes a number; these tests check
that PyPTO's placement programs compute what torch does, that the IR records
where each tile lives, and (in test_errors.py) that a placement the device
could not execute is refused at the user's line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError
from helpers.ir_fixtures import poison


def rel_err(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pl.jit
def matmul_acc_64(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    """PyPTO's cube path: GM -> Mat -> Left/Right -> matmul -> Acc, K split in two."""
    with pl.at(level=pl.Level.CORE_GROUP):
        a0 = pl.move(pl.load(a, [0, 0], [64, 32], target_memory=pl.MemorySpace.Mat), target_memory=pl.MemorySpace.Left)
        b0 = pl.move(pl.load(b, [0, 0], [32, 64], target_memory=pl.MemorySpace.Mat), target_memory=pl.Mem.Right)
        acc = pl.matmul(a0, b0)
        a1 = pl.move(pl.load(a, [0, 32], [64, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        b1 = pl.move(pl.load(b, [32, 0], [32, 64], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        acc = pl.matmul_acc(acc, a1, b1)
        pl.store(acc, [0, 0], c)
    return c


def test_mem_is_memory_space():
    assert pl.Mem is pl.MemorySpace
    assert [m.name for m in pl.MemorySpace] == ["DDR", "Vec", "Mat", "Left", "Right", "Acc", "Bias", "LeftScale", "RightScale"]


@pytest.mark.slow
def test_matmul_through_mat_left_right_acc(launcher):
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    c = torch.full((64, 64), float("nan"))
    launcher.run(matmul_acc_64.compile(a, b, c), a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_the_ir_records_each_tiles_space():
    a = np.zeros((64, 64), np.float32)
    text = str(matmul_acc_64.trace(a, a, a))
    assert "%0: FP32[64, 32]@Mat = load a[0, 0]" in text
    assert "%1: FP32[64, 32]@Left = move %0 to Left" in text
    assert "%3: FP32[32, 64]@Right = move %2 to Right" in text
    assert "%4: FP32[64, 64]@Acc = matmul %1, %3" in text
    assert "%4 += matmul %6, %8" in text


@pytest.mark.slow
def test_default_spaces_are_vec_and_matmul_reads_them(launcher, rng):
    """Tiles loaded without target_memory are in Vec; matmul moves them implicitly, as PyPTO infers."""

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, c: pl.Out[pl.Tensor]):
        prod = pl.matmul(pl.load(a, [0, 0], [32, 48]), pl.load(b, [0, 0], [48, 40]))  # in Acc
        pl.store(pl.add(prod, pl.load(bias, [0, 0], [1, 40])), [0, 0], c)  # Acc read by a vector op

    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 40)).astype(np.float32)
    bias = rng.standard_normal((1, 40)).astype(np.float32)
    c = poison((32, 40))
    prog = k.trace(a, b, bias, c)
    assert "FP32[32, 48] = load a[0, 0]" in str(prog) and "@Acc = matmul" in str(prog)
    launcher.run(k.compile(a, b, bias, c), a, b, bias, c)
    assert rel_err(c, a.astype(np.float64) @ b + bias) < 1e-5


@pytest.mark.slow
def test_matmul_bf16_operands_moved_from_mat(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        ta = pl.move(pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        tb = pl.move(pl.load(b, [0, 0], [32, 24], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        pl.store(pl.matmul(ta, tb, out_dtype=pl.FP32), [0, 0], c)

    ta = torch.from_numpy(rng.standard_normal((16, 32))).to(torch.bfloat16)
    tb = torch.from_numpy(rng.standard_normal((32, 24))).to(torch.bfloat16)
    c = torch.full((16, 24), float("nan"))
    launcher.run(k.compile(ta, tb, c), ta, tb, c)
    assert rel_err(c.numpy(), ta.double().numpy() @ tb.double().numpy()) < 1e-5


def test_moves_between_vec_and_mat_keep_values(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        t = pl.load(x, [0, 0], [16, 32], target_memory=pl.MemorySpace.Mat)
        v = pl.move(t, target_memory=pl.MemorySpace.Vec)
        pl.store(pl.mul(v, 3.0), [0, 0], y)

    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = poison((16, 32))
    launcher.run(k.compile(x, y), x, y)
    np.testing.assert_array_equal(y, x * np.float32(3.0))


@pytest.mark.slow
def test_create_tile_as_an_accumulator(launcher, rng):
    """pl.create_tile(..., target_memory=Acc) starts a K loop; the sim fills it with zeros."""

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        acc = pl.create_tile([32, 24], dtype=pl.FP32, target_memory=pl.MemorySpace.Acc)
        for kk in pl.range(0, 96, 32):
            ta = pl.move(pl.load(a, [0, kk], [32, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            tb = pl.move(pl.load(b, [kk, 0], [32, 24], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
            pl.matmul_acc(acc, ta, tb)
        pl.store(acc, [0, 0], c)

    a = rng.standard_normal((32, 96)).astype(np.float32)
    b = rng.standard_normal((96, 24)).astype(np.float32)
    c = poison((32, 24))
    assert "FP32[32, 24]@Acc = full 0:FP32" in str(k.trace(a, b, c))
    launcher.run(k.compile(a, b, c), a, b, c)
    assert rel_err(c, a.astype(np.float64) @ b) < 1e-5


def test_copy_between_tensors(launcher, rng):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.copy(b, a, source_memory=pl.Mem.DDR, target_memory=pl.Mem.DDR)
        return b

    a = rng.standard_normal((24, 40)).astype(np.float32)
    b = poison((24, 40))
    launcher.run(k.compile(a, b), a, b)
    np.testing.assert_array_equal(b, a)


@pytest.mark.slow
def test_create_tensor_init_value_fills_the_intermediate_before_its_readers():
    """PyPTO's pl.create_tensor(init_value=): the buffer is filled before any task touches it (else undefined)."""
    import pytest

    from pypto_async.errors import PtoCompileError

    @pl.jit
    def accumulate(x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        acc = pl.create_tensor([32, 32], dtype=pl.FP32, init_value=0)
        for k in pl.range(3):
            with pl.at(level=pl.Level.CORE_GROUP):
                acc = pl.store(pl.load(x, [0, 0], [32, 32]), [0, 0], acc, atomic=pl.AtomicType.Add)
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(acc, [0, 0], [32, 32]), [0, 0], out)
        return out

    x, out = torch.randn(32, 32), torch.full((32, 32), float("nan"))
    accumulate(x, out)
    torch.testing.assert_close(out, 3 * x, rtol=1e-5, atol=1e-5)
    graph = accumulate.compile(x, out).task_graph
    assert graph.tasks[0].name == "tensor0_init"

    @pl.jit
    def ones(out: pl.Out[pl.Tensor[[8, 8], pl.INT32]]):
        t = pl.create_tensor([8, 8], dtype=pl.INT32, init_value=7)
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(t, [0, 0], [8, 8]), [0, 0], out)
        return out

    got = torch.full((8, 8), -1, dtype=torch.int32)
    ones(got)
    assert (got == 7).all()

    @pl.jit
    def half(out: pl.Out[pl.Tensor[[8, 8], pl.FP16]]):
        t = pl.create_tensor([8, 8], dtype=pl.FP16, init_value=1.5)
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(t, [0, 0], [8, 8]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="non-zero init_value of a FP16"):
        half.compile()


def _tile_read_kernel(form):
    @pl.jit
    def k(index: pl.Tensor[[2, 8], pl.INT32], src: pl.Tensor[[1, 32], pl.FP32],
          dst: pl.InOut[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            it = pl.load(index, [1, 0], [1, 8])
            if form == "computed":
                it = pl.add(it, it)
            if form == "float":
                it = pl.load(src, [0, 0], [1, 32])
            row = pl.tile.read(it, [0, 3] if form != "outside" else [0, 8])
            pl.store(pl.load(src, [0, 0], [1, 32]), [pl.cast(row, pl.INDEX), 0], dst)
        return dst

    return k


def test_tile_read_of_a_loaded_index_tile_places_a_store():
    """PyPTO's pl.tile.read: an element of a tile loaded from an integer input, a runtime store offset."""
    index = torch.zeros(2, 8, dtype=torch.int32)
    index[1, 3] = 21
    src = torch.randn(1, 32)
    dst = torch.from_numpy(poison((32, 32)))
    before = dst.clone()
    _tile_read_kernel("plain")(index, src, dst)
    assert torch.equal(dst[21], src[0])
    rest = torch.ones(32, dtype=torch.bool)
    rest[21] = False
    assert torch.equal(dst[rest].isnan(), before[rest].isnan())


@pytest.mark.parametrize("form,match", [("computed", "loaded"), ("float", "only integer tiles"),
                                        ("outside", "outside")])
def test_tile_read_refuses_what_it_cannot_read(form, match):
    index = torch.zeros(2, 8, dtype=torch.int32)
    with pytest.raises(PtoCompileError, match=match):
        _tile_read_kernel(form)(index, torch.zeros(1, 32), torch.zeros(32, 32))
