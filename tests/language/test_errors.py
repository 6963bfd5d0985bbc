"""Mistakes are caught at trace/compile time, with the kernel's file and line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError, PtoError, PtoNotSupported

HERE = __file__


def next_line() -> int:
    """The line number after the caller's line."""
    return sys._getframe(1).f_lineno + 1


def assert_at(excinfo, line: int, *fragments: str) -> None:
    err = excinfo.value
    assert err.file == HERE and err.line == line, (err.file, err.line, str(err))
    text = str(err)
    assert text.startswith(f"{HERE}:{line}: "), text
    for f in fragments:
        assert f in text, (f, text)


X = np.ones((64, 16), np.float32)


def test_shape_mismatch_in_binary_op():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t1 = pl.load(a, [0, 0], [16, 16])
        t2 = pl.load(a, [0, 0], [8, 16])
        where.append(next_line())
        pl.store(pl.add(t1, t2), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "shape mismatch in add", "[16, 16]", "[8, 16]")


def test_shape_mismatch_in_matmul():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        u = pl.load(a, [0, 0], [8, 16])
        where.append(next_line())
        pl.store(pl.matmul(t, u), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "shape mismatch in matmul", "inner dimensions 16 and 8")


def test_load_window_outside_tensor():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        t = pl.load(a, [56, 0], [16, 16])
        pl.store(t, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "load window outside tensor 'a'", "dimension 0 spans [56, 72)", "has 64")


def test_store_window_outside_tensor_through_loop_index():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(0, 64, 16):
            t = pl.load(a, [i, 0], [16, 16])
            where.append(next_line())
            pl.store(t, [i + 8, 0], out)  # the last iteration overruns

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "store window outside tensor 'out'", "[8, 72)")


def test_window_outside_through_block_index():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for b in pl.spmd(5):
            where.append(next_line())
            t = pl.load(a, [b * 16, 0], [16, 16])
            pl.store(t, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "load window outside tensor 'a'", "[0, 80)")


def test_store_to_in_parameter():
    where = []

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(t, [0, 0], b)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "store to In parameter 'b'", "pl.Out[pl.Tensor]")


def test_unsupported_dtype_for_op():
    where = []
    xi = np.ones((16, 16), np.int32)

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.exp(t), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(xi, xi)
    assert_at(ei, where[0], "unsupported dtype INT32 for exp")


def test_unsupported_dtype_for_cast_target():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.cast(t, np.complex64), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "pl.cast", "unsupported dtype")


def test_unsupported_argument_dtype_points_at_the_kernel():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0], [4]), [0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(np.ones(4, np.complex64), np.ones(4, np.complex64))
    assert_at(ei, k.fn.__code__.co_firstlineno, "parameter 'a'", "unsupported dtype")


def test_store_dtype_mismatch():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(t, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, np.ones((64, 16), np.float64))
    assert_at(ei, where[0], "dtype mismatch in store", "FP32", "FP64", "pl.cast")


def test_dtype_mismatch_in_binary_op():
    where = []

    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        ta = pl.load(a, [0, 0], [16, 16])
        tb = pl.load(b, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(ta * tb, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X.astype(np.float64), X)
    assert_at(ei, where[0], "dtype mismatch in mul")


class DeviceTensor:
    """Shaped like the runtime's DeviceTensor: a worker and a data pointer, no shape."""

    def __init__(self):
        self.worker = object()
        self.data_ptr = 0x1000


class ResidentBuffer:
    """Duck-typed: any object with worker and data_ptr and no array interface."""

    worker = None
    data_ptr = 0


@pytest.mark.parametrize("cls", [DeviceTensor, ResidentBuffer])
def test_device_tensor_passed_to_jit(cls):
    @pl.jit
    def k(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0], [4]) + pl.load(b, [0], [4]), [0], out)

    a = np.ones(4, np.float32)
    for call in (lambda: k(a, cls(), a), lambda: k.lower(a, cls(), a), lambda: k.compile(a, cls(), a)):
        with pytest.raises(PtoCompileError) as ei:
            call()
        assert_at(ei, k.fn.__code__.co_firstlineno, "missing inferred tensor metadata for parameter b",
                  "ir.compile", "worker")


def test_static_annotation_mismatch():
    @pl.jit
    def k(a: pl.Tensor[[64, 16], pl.FP32], out: pl.Out[pl.Tensor[[64, 16], pl.FP32]]):
        pl.store(pl.load(a, [0, 0], [64, 16]), [0, 0], out)

    k.lower(X, X)  # matches
    with pytest.raises(PtoCompileError, match="declared \\[64, 16\\] but got shape \\[32, 16\\]"):
        k.lower(X[:32], X)
    with pytest.raises(PtoCompileError, match="declared FP32 but got FP64"):
        k.lower(X.astype(np.float64), X)


def test_op_outside_a_kernel():
    with pytest.raises(PtoCompileError) as ei:
        line = next_line()
        pl.add(1, 2)
    assert_at(ei, line, "pl.add can only be called inside a @pl.jit kernel")


def test_loop_index_is_symbolic():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(4):
            where.append(next_line())
            range(i)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "loop index is symbolic")


def test_wrong_argument_count():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pass

    with pytest.raises(PtoArgumentError, match=r"k: missing argument 'out' \(its parameters: a, out\)"):
        k.lower(X)
    with pytest.raises(PtoArgumentError, match="takes 2 arguments"):
        k.lower(X, X, X)


def test_unknown_platform_and_options():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0, 0], [64, 16]), [0, 0], out)

    prog = k.lower(X, X)
    with pytest.raises(PtoNotSupported, match="unknown platform 'cuda9'"):
        ir.compile(prog, platform="cuda9")
    with pytest.raises(PtoArgumentError, match="unknown options"):
        ir.compile(prog, bogus=1)
    with pytest.raises(PtoArgumentError, match="expects a Program"):
        ir.compile(k)


def test_c_compiler_failure_reports_its_output():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0, 0], [64, 16]), [0, 0], out)

    with pytest.raises(PtoCompileError, match="C compilation failed") as ei:
        ir.compile(k.lower(X, X), extra_cflags="-fno-such-flag-anywhere")
    assert "no-such-flag-anywhere" in str(ei.value)
    assert isinstance(ei.value, PtoError)


def test_spmd_counts_must_agree_and_not_nest():
    where = []

    @pl.jit
    def two_counts(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for b in pl.spmd(2):
            pl.store(pl.load(a, [b * 16, 0], [16, 16]), [b * 16, 0], out)
        where.append(next_line())
        for b in pl.spmd(4):
            pl.store(pl.load(a, [b * 16, 0], [16, 16]), [b * 16, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        two_counts.lower(X, X)
    assert_at(ei, where[0], "pl.spmd(4) disagrees with an earlier pl.spmd(2)")

    @pl.jit
    def nested(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for b in pl.spmd(2):
            where.append(next_line())
            for c in pl.spmd(2):
                pass

    with pytest.raises(PtoCompileError) as ei:
        nested.lower(X, X)
    assert_at(ei, where[1], "pl.spmd cannot be nested")


def test_break_out_of_a_traced_loop():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(4):
            break

    with pytest.raises(PtoCompileError, match="did not finish \\(break is not supported\\)") as ei:
        k.lower(X, X)
    assert ei.value.line == k.fn.__code__.co_firstlineno


def test_range_bounds_must_be_ints():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(4):
            where.append(next_line())
            for j in pl.range(0, 2.5):  # an index or a runtime scalar is a bound too (a loop over it)
                pass

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X)
    assert_at(ei, where[0], "pl.range stop must be a Python int")


def test_a_bool_is_not_a_tile_dimension():
    where = []

    @pl.jit
    def full(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.full((True, 16), 1.0), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        full.lower(X, X)
    assert_at(ei, where[0], "tile shape must be positive ints, got [True, 16]")

    @pl.jit
    def load(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.load(a, [0, 0], [True, 16]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        load.lower(X, X)
    assert_at(ei, where[1], "pl.load: shapes must be ints")
    with pytest.raises(PtoCompileError, match="shape must be a list of positive ints"):
        pl.Tensor[[True, 16], pl.FP32]
    with pytest.raises(PtoCompileError, match="pl.spmd block count must be a Python int"):
        pl.spmd(True)


def test_rebinding_a_name_to_a_fresh_tile_in_a_loop_is_fine():
    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        pl.store(t, [0, 0], out)
        for i in pl.range(0, 64, 16):
            t = pl.load(a, [i, 0], [16, 16]) * 2.0  # does not read the old t
            pl.store(t, [i, 0], out)

    k.lower(X, X)


# ---- memory spaces -----------------------------------------------------------------

M64 = np.ones((64, 64), np.float32)


@pytest.mark.parametrize("space", ["Left", "Right", "Acc", "Bias", "DDR"])
def test_load_reaches_vec_or_mat_only(space):
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        t = pl.load(a, [0, 0], [16, 16], target_memory=getattr(pl.MemorySpace, space))
        pl.store(t, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], f"pl.load cannot target {space}", "allowed: Vec, Mat")


@pytest.mark.parametrize("space", ["Acc", "DDR"])
def test_move_cannot_target_acc_or_ddr(space):
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.move(t, target_memory=getattr(pl.Mem, space)), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], f"pl.move cannot target {space}")


def test_nothing_moves_a_tile_out_of_left():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        left = pl.move(pl.load(a, [0, 0], [16, 16], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        where.append(next_line())
        pl.store(pl.move(left, target_memory=pl.Mem.Vec), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.move: tile %1 is in Left", "only the cube reads")


@pytest.mark.parametrize("space", ["Left", "Right", "Bias"])
def test_vector_ops_and_stores_do_not_read_cube_buffers(space):
    where = []

    @pl.jit
    def vector(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.move(pl.load(a, [0, 0], [16, 16]), target_memory=getattr(pl.Mem, space))
        where.append(next_line())
        pl.store(pl.add(t, 1.0), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        vector.lower(M64, M64)
    assert_at(ei, where[0], f"pl.add reads tile %1 in {space}", "feed the cube (pl.matmul) only")

    @pl.jit
    def store(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.move(pl.load(a, [0, 0], [16, 16]), target_memory=getattr(pl.Mem, space))
        where.append(next_line())
        pl.store(t, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        store.lower(M64, M64)
    assert_at(ei, where[1], f"pl.store reads tile %1 in {space}")


def test_matmul_operands_in_the_wrong_slots():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        l = pl.move(pl.load(a, [0, 0], [16, 16], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        r = pl.move(pl.load(a, [0, 0], [16, 16], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        where.append(next_line())
        pl.store(pl.matmul(r, l), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.matmul: the left operand %3 is in Right", "swap the operands")


def test_create_tile_is_not_a_tensor():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.create_tile([16, 16], dtype=pl.FP32, target_memory=pl.Mem.DDR), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.create_tile cannot target DDR", "DDR holds tensors")


def test_memory_space_arguments_are_checked():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.load(a, [0, 0], [16, 16], target_memory="L1"), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.load: target_memory must be a pl.MemorySpace, got 'L1'")


def test_copy_is_between_ddr_tensors_of_one_type():
    where = []

    @pl.jit
    def vec(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.copy(out, a, source_memory=pl.Mem.DDR, target_memory=pl.Mem.Vec)

    with pytest.raises(PtoCompileError) as ei:
        vec.lower(M64, M64)
    assert_at(ei, where[0], "pl.copy: target_memory must be pl.MemorySpace.DDR")

    @pl.jit
    def shapes(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.copy(out, a)

    with pytest.raises(PtoCompileError) as ei:
        shapes.lower(M64, M64[:32])
    assert_at(ei, where[1], "pl.copy: 'a' is FP32[64, 64], 'out' is FP32[32, 64]")


# ---- reductions, broadcasts, layout ops ------------------------------------------


def test_expand_ops_check_the_vector_shape():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.row_expand_sub(t, pl.load(a, [0, 0], [1, 16])), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.row_expand_sub: expected a [rows, 1] row vector [16, 1]", "got [1, 16]")


def test_reduction_scratch_tile_must_match():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        tmp = pl.create_tile([16, 16], dtype=pl.FP16)
        where.append(next_line())
        pl.store(pl.row_max(t, tmp), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.row_max: tmp_tile must have the input's dtype and rank")


def test_reshape_keeps_the_element_count():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.reshape(t, [8, 16]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.reshape: [16, 16] has 256 elements, [8, 16] has 128")


def test_concat_needs_equal_rows_and_dtypes():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.concat(pl.load(a, [0, 0], [16, 8]), pl.load(a, [0, 0], [8, 8])), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.concat joins 2-D tiles with equal row counts")


def test_slice_and_assemble_windows_stay_inside_the_tile():
    where = []

    @pl.jit
    def sl(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        for i in pl.range(0, 16, 4):
            where.append(next_line())
            pl.store(pl.slice(t, [4, 8], [i, 10]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        sl.lower(M64, M64)
    assert_at(ei, where[0], "pl.slice window outside tile '%0'", "dimension 1 spans [10, 18)")

    @pl.jit
    def asm(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.tile.assemble(t, pl.load(a, [0, 0], [8, 8]), [12, 0]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        asm.lower(M64, M64)
    assert_at(ei, where[1], "pl.tile.assemble window outside tile '%0'", "dimension 0 spans [12, 20)")


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_atomic_add_dtypes_are_the_devices(dtype):
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.InOut[pl.Tensor]):
        where.append(next_line())
        pl.assemble(out, pl.load(a, [0, 0], [16, 16]), [0, 0], atomic=pl.AtomicType.Add)

    x = np.ones((16, 16), dtype)
    with pytest.raises(PtoCompileError) as ei:
        k.lower(x, x)
    assert_at(ei, where[0], "atomic add of", "FP32, FP16, BF16, INT32, INT16 and INT8 only")


def test_cast_modes_are_pyptos():
    where = []

    @pl.jit
    def bad(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.cast(pl.load(a, [0, 0], [16, 16]), pl.INT32, mode="nearest"), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        bad.lower(M64, M64.astype(np.int32))
    assert_at(ei, where[0], "pl.cast: mode must be one of none, rint, round, floor, ceil, trunc, odd")

    @pl.jit
    def odd(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.cast(pl.load(a, [0, 0], [16, 16]), pl.INT32, mode="odd"), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        odd.lower(M64, M64.astype(np.int32))
    assert_at(ei, where[1], "mode 'odd' (round to odd) narrows floats only")


def test_matmul_out_dtype_must_be_the_accumulators():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.matmul(t, t, out_dtype=pl.FP16), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.matmul: out_dtype=FP16, but the accumulator of these operands is FP32")


# ---- valid regions -------------------------------------------------------------------


def test_valid_extent_outside_the_tile():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.load(a, [0, 0], [16, 16], valid_shape=[8, 17]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.load: valid extent 17 of dimension 1 is outside [0, 16]")


def test_a_valid_box_outside_the_tensor():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.load(a, [56, 0], [16, 16], valid_shape=[9, 16]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "load window outside tensor 'a'", "dimension 0 spans [56, 65)")


def test_operands_must_agree_on_the_valid_region():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16], valid_shape=[16, 8])
        u = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(t + u, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64)
    assert_at(ei, where[0], "pl.add: operands disagree on the valid region along dimension 1", "fillpad")


@pytest.mark.parametrize("op", ["matmul", "reshape"])
def test_partially_valid_tiles_are_padded_first(op):
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16], valid_shape=[16, 8])
        where.append(next_line())
        r = pl.matmul(t, pl.load(a, [0, 0], [16, 16])) if op == "matmul" else pl.reshape(t, [256])
        pl.store(r, [0, 0] if op == "matmul" else [0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, M64 if op == "matmul" else np.ones(256, np.float32))
    assert_at(ei, where[0], f"pl.{op}: tile %0 is only partially valid", "pl.fillpad it first")


def test_a_float_scalar_is_not_an_extent():
    where = []

    @pl.jit
    def k(a: pl.Tensor, n: pl.FP32, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.store(pl.load(a, [0, 0], [16, 16], valid_shape=[16, n]), [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, pl.RUNTIME, M64)
    assert_at(ei, where[0], "valid extent 'n' is a FP32 scalar, not an integer")


def test_a_scalar_offset_into_a_tile_is_refused():
    where = []

    @pl.jit
    def k(a: pl.Tensor, n: pl.INDEX, out: pl.Out[pl.Tensor]):
        t = pl.load(a, [0, 0], [16, 16])
        where.append(next_line())
        pl.store(pl.slice(t, [8, 16], [n, 0]), [0, 0], out)  # a tile's window is fixed when it is compiled

    with pytest.raises(PtoCompileError) as ei:
        k.lower(M64, pl.RUNTIME, M64)
    assert_at(ei, where[0], "scalar parameter 'n' cannot be an offset")


# ---- loop-carried tiles ------------------------------------------------------------------


def test_a_carried_tile_keeps_its_type():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        acc = pl.zeros([16, 16])
        for i in pl.range(0, 64, 16):
            where.append(next_line())
            acc = pl.cast(acc + pl.load(a, [i, 0], [16, 16]), pl.FP16)
        pl.store(acc, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X[:16].astype(np.float16))
    assert_at(ei, where[0], "tile 'acc' is carried by the pl.range loop but changes type in it",
              "FP32[16, 16] before, FP16[16, 16]")


def test_an_alias_of_a_carried_tile_is_ambiguous():
    where = []

    @pl.jit
    def k(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        acc = pl.zeros([16, 16])
        first = acc
        where.append(next_line())
        for i in pl.range(0, 64, 16):
            acc = acc + first
        pl.store(acc, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        k.lower(X, X[:16])
    assert_at(ei, where[0], "tiles 'acc' and 'first' are one tile when the pl.range loop starts")


def test_yield_rules():
    where = []

    @pl.jit
    def no_yield(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        for i, (acc,) in pl.range(4, init_values=(pl.zeros([16, 16]),)):
            acc = acc + 1.0
        pl.store(acc, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        no_yield.lower(X, X[:16])
    assert_at(ei, where[0], "body must end with pl.yield_")

    @pl.jit
    def not_last(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        for i, (acc,) in pl.range(4, init_values=(pl.zeros([16, 16]),)):
            res = pl.yield_(acc + 1.0)
            pl.store(res, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        not_last.lower(X, X[:16])
    assert_at(ei, where[1], "pl.yield_ must be the last statement of the loop body")

    @pl.jit
    def outside(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.yield_(pl.zeros([16, 16]))

    with pytest.raises(PtoCompileError) as ei:
        outside.lower(X, X[:16])
    assert_at(ei, where[2], "pl.yield_ belongs directly in the body of a pl.range(..., init_values=...) loop")

    @pl.jit
    def count(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i, (acc,) in pl.range(4, init_values=(pl.zeros([16, 16]),)):
            where.append(next_line())
            res = pl.yield_(acc, acc)
        pl.store(res, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        count.lower(X, X[:16])
    assert_at(ei, where[3], "pl.yield_ got 2 values for 1 init_values")

    @pl.jit
    def shape(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i, (acc,) in pl.range(4, init_values=(pl.zeros([16, 16]),)):
            where.append(next_line())
            res = pl.yield_(pl.zeros([8, 16]))
        pl.store(res, [0, 0], out)

    with pytest.raises(PtoCompileError) as ei:
        shape.lower(X, X[:16])
    assert_at(ei, where[4], "pl.yield_ value 0 is FP32[8, 16], but init_values[0] is FP32[16, 16]")
