"""PyPTO names its programs use: pl.dynamic, pl.MemRef, pl.cluster, pl.system, pl.tile.transpose_view,
and ir.pass_manager's OptimizationStrategy / PassManager."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError, PtoNotSupported
from pypto_async.ir.pass_manager import OptimizationStrategy, PassManager

M = pl.dynamic("M")


@pl.jit
def rows_exp(a: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(a.shape[0] // 16):
            tile: pl.Tile[[16, 64], pl.FP32, pl.MemRef("ub", slots=2)[i % 2], pl.Mem.Vec] = pl.load(
                a, [i * 16, 0], [16, 64])
            pl.store(pl.exp(tile), [i * 16, 0], out)
    return out


def _rand(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("rows", [32, 64])
def test_a_dynamic_dimension_takes_any_extent_of_a_jit_argument(rows):
    a, out = _rand(rows, 64), np.full((rows, 64), np.nan, np.float32)
    rows_exp(a, out)
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)


def test_the_static_dimensions_beside_a_dynamic_one_are_still_checked():
    with pytest.raises(PtoCompileError, match=r"declared \[M, 64\] but got shape \[32, 32\]"):
        rows_exp.trace(_rand(32, 32), np.zeros((32, 32), np.float32))
    with pytest.raises(PtoCompileError, match="pl.dynamic takes a dimension's name"):
        pl.dynamic("not a name")


def test_a_program_takes_a_dynamic_inner_dimension_only_once_bound():
    @pl.program
    class Dyn:
        @pl.function(type=pl.FunctionType.Opaque)
        def main(self, a: pl.Tensor[[64, M], pl.FP32], out: pl.Out[pl.Tensor[[64, M], pl.FP32]]):
            return out

    with pytest.raises(PtoNotSupported, match=r"parameter 'a' is \[64, M\].*bind M"):
        Dyn.trace()  # a leading one is read at run time (test_program_dynamic_extent.py)
    assert [p.shape for p in Dyn.bind(_rand(64, 32)).trace().params] == [(64, 32), (64, 32)]


def test_memref_declarations_are_checked():
    ref = pl.MemRef("ub", slots=2)
    assert repr(ref[1]) == "pl.MemRef('ub', slots=2)[1]" and ref.slots == 2
    with pytest.raises(PtoCompileError, match="slot 2 is out of range"):
        ref[2]
    with pytest.raises(PtoCompileError, match="slots=...\\) takes a positive int"):
        pl.MemRef("ub", slots=0)


SCRATCH = pl.MemRef(slots=2)  # PyPTO's unnamed form: the allocation takes the variable's name


@pl.jit
def rows_exp_unnamed(a: pl.Tensor[[M, 64], pl.FP32], out: pl.Out[pl.Tensor[[M, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(a.shape[0] // 16):
            tile: pl.Tile[[16, 64], pl.FP32, SCRATCH[i % 2], pl.Mem.Vec] = pl.load(a, [i * 16, 0], [16, 64])
            pl.store(pl.exp(tile), [i * 16, 0], out)
    return out


def test_an_unnamed_memref_is_a_placement_too():
    a, out = _rand(48, 64), np.full((48, 64), np.nan, np.float32)
    rows_exp_unnamed(a, out)
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)
    assert repr(SCRATCH[1]) == "pl.MemRef(slots=2)[1]" and pl.MemRef().slots == 1
    with pytest.raises(PtoCompileError, match=r"pl.MemRef\(slots=2\): slot 2 is out of range"):
        SCRATCH[2]
    with pytest.raises(PtoCompileError, match="name must be a non-empty str"):
        pl.MemRef("")
    with pytest.raises(PtoCompileError, match="takes a positive int"):
        pl.MemRef(slots=True)


def test_cluster_and_system_are_refused_by_name():
    from pypto_async.language._ops_crosscore import __all__ as crosscore_names
    from pypto_async.language._ops_barrier import __all__ as barrier_names
    from pypto_async.language._ops_sync import __all__ as sync_names

    with pytest.raises(PtoNotSupported, match=r"pl.cluster\(\): the sim has no Cube/Vector clusters"):
        with pl.cluster():
            pass
    for name in pl.system.__all__:
        if name == "task_dummy":  # served: a join of task ids (tests/language/test_guide_tasks.py)
            continue
        if name in crosscore_names:  # served: cross-core pipes (tests/language/test_ops_crosscore.py)
            continue
        if name in sync_names:  # served: explicit cross-core events (tests/language/test_ops_sync.py)
            continue
        if name in barrier_names:  # served: intra-core flags and barriers (tests/language/test_ops_barrier.py)
            continue
        with pytest.raises(PtoNotSupported, match=rf"pl.system.{name}: "):
            getattr(pl.system, name)(deps=[])


@pl.jit
def nt_matmul(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.move(pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        bm = pl.load(b, [0, 0], [24, 32], target_memory=pl.Mem.Mat)
        tb = pl.move(pl.tile.transpose_view(bm), target_memory=pl.Mem.Right)
        pl.store(pl.matmul(ta, tb), [0, 0], c)
    return c


def test_transpose_view_feeds_a_matmul_the_transposed_operand():
    a, b, c = _rand(16, 32), _rand(24, 32), np.full((16, 24), np.nan, np.float32)
    nt_matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-4, atol=1e-5)


def test_the_default_strategy_runs_the_pipeline():
    a, out = _rand(32, 64), np.zeros((32, 64), np.float32)
    pm = PassManager.get_strategy(OptimizationStrategy.Default)
    assert pm.passes == tuple(ir.PIPELINE)
    lowered = pm.run_passes(rows_exp.trace(a, out))
    assert lowered == rows_exp.lower(a, out) and lowered.stage == "lowered"
    with pytest.raises(PtoArgumentError, match="OptimizationStrategy"):
        PassManager.get_strategy("Default")
    with pytest.raises(PtoArgumentError, match="run_passes takes"):
        pm.run_passes(rows_exp)


def test_tile_scalar_ops_dim_and_type_annotations_as_the_guide_spells_them():
    """ops/00-dispatch's tile spellings (pl.tile.adds ...), pl.dim, and language/00-types's pl.Tuple / pl.Array."""
    import torch

    @pl.jit
    def k(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 16], pl.FP32]]
          ) -> pl.Tuple[pl.Tensor[[32, 16], pl.FP32]]:
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.tile.load(x, [0, 0], [pl.dim(x, 0), pl.dim(x, -1)])
            t = pl.tile.maxs(pl.tile.muls(pl.tile.adds(t, 1.0), 2.0), 0.5)
            t = pl.tile.divs(pl.tile.subs(pl.tile.mins(t, 3.0), 0.25), 4.0)
            out = pl.tile.store(t, [0, 0], out)
        return out

    x, out = torch.randn(32, 16), torch.full((32, 16), float("nan"))
    k(x, out)
    want = (torch.clamp(torch.clamp((x + 1.0) * 2.0, min=0.5), max=3.0) - 0.25) / 4.0
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    assert repr(pl.Array[16, pl.INT32]) == "pl.Array[16, pl.INT32]"
    assert pl.ND is pl.TensorLayout.ND and pl.DN is pl.TensorLayout.DN and pl.NZ is pl.TensorLayout.NZ


def test_the_runtime_names_pypto_imports_from_its_runner_and_tensor_spec_modules():
    from pypto_async import runtime
    from pypto_async.runtime.runner import RunConfig, RunResult, run
    from pypto_async.runtime.tensor_spec import TensorSpec

    assert (RunConfig, RunResult, run, TensorSpec) == (runtime.RunConfig, runtime.RunResult, runtime.run,
                                                      runtime.TensorSpec)
    assert RunConfig(rtol=1e-3).rtol == 1e-3


@pl.jit
def static_exp(a: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(a, [0, 0], [16, 64])), [0, 0], out)
    return out


def test_lower_takes_a_run_config_and_no_samples_for_a_static_signature():
    from pypto_async.runtime import RunConfig

    lowered = static_exp.lower(config=RunConfig(platform="sim"))  # PyPTO's kernel.lower(config=cfg)
    assert [p.shape for p in lowered.params] == [(16, 64), (16, 64)]
    assert str(lowered) == str(static_exp.lower(_rand(16, 64), np.zeros((16, 64), np.float32)))
    with pytest.raises(PtoArgumentError):
        static_exp.lower(config=42)


def test_a_jit_kernel_cache_is_cleared_by_pypto_name():
    a, out = _rand(16, 64), np.full((16, 64), np.nan, np.float32)
    static_exp(a, out)
    assert len(static_exp._cache) == 1 and static_exp._cache is static_exp._compiled
    static_exp._cache.clear()  # PyPTO's st files clear it between cases
    out[:] = np.nan
    static_exp(a, out)  # compiled again (a kernel-cache hit), and runs
    assert len(static_exp._cache) == 1
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)


def test_compiled_program_is_importable_from_pypto_module_name():
    from pypto_async.ir.compiled_program import CompiledProgram

    assert CompiledProgram is ir.CompiledProgram


def test_memory_planner_values_are_taken_by_compile_and_checked():
    from pypto_async.pypto_core.passes import MemoryPlanner

    for planner in MemoryPlanner:  # no on-chip memory to plan here: the same program for each
        assert ir.compile(static_exp.lower(), memory_planner=planner).symbol == ir.compile(static_exp.lower()).symbol
    with pytest.raises(PtoArgumentError, match="memory_planner must be"):
        ir.compile(static_exp.lower(), memory_planner="greedy")


@pl.jit
def tile_broadcasts(a: pl.Tensor[[16, 64], pl.FP32], r: pl.Tensor[[16, 1], pl.FP32], c: pl.Tensor[[1, 64], pl.FP32],
                    o1: pl.Out[pl.Tensor[[16, 64], pl.FP32]], o2: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(a, [0, 0], [16, 64])
        rv = pl.load(r, [0, 0], [16, 1])
        cv = pl.load(c, [0, 0], [1, 64])
        tmp = pl.tile.create([16, 64], dtype=pl.FP32)
        s = pl.tile.row_expand_add(t, rv, tmp)  # PyPTO's scratch tile: taken, unused
        pl.store(pl.tile.row_expand_mul(s, rv), [0, 0], o1)
        pl.store(pl.tile.col_expand_sub(pl.tile.row_expand_add(t, rv), cv), [0, 0], o2)
    return o1, o2


def test_the_tile_level_broadcasts_are_the_top_level_ones():
    a, r, c = _rand(16, 64), _rand(16, 1), _rand(1, 64)
    o1, o2 = np.full((16, 64), np.nan, np.float32), np.full((16, 64), np.nan, np.float32)
    tile_broadcasts(a, r, c, o1, o2)
    np.testing.assert_allclose(o1, (a + r) * r, rtol=1e-5)
    np.testing.assert_allclose(o2, a + r - c, rtol=1e-5)
    assert pl.tile.col_expand is pl.col_expand and pl.tile.row_expand_sub is pl.row_expand_sub


@pl.jit
def precise(a: pl.Tensor[[16, 64], pl.FP32], b: pl.Tensor[[16, 64], pl.FP32],
            o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t, u = pl.load(a, [0, 0], [16, 64]), pl.load(b, [0, 0], [16, 64])
        pl.store(pl.log(pl.tile.div(t, u, high_precision=True), high_precision=True), [0, 0], o)
    return o


def test_high_precision_division_and_log_are_taken():
    a, b = np.abs(_rand(16, 64)) + 0.5, np.abs(_rand(16, 64)) + 0.5
    o = np.full((16, 64), np.nan, np.float32)
    precise(a, b, o)  # PyPTO's ptoas precision mode: one mode here, the same numbers
    np.testing.assert_allclose(o, np.log(a / b), rtol=1e-5, atol=1e-6)

    @pl.jit
    def bad(a: pl.Tensor[[16, 64], pl.FP32], o: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.log(pl.load(a, [0, 0], [16, 64]), high_precision="yes"), [0, 0], o)
        return o

    with pytest.raises(PtoCompileError, match="pl.log: high_precision must be a bool"):
        bad.trace(a, o)
