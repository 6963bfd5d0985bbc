"""What a kernel returns and writes, as PyPTO documents it: a returned tile becomes a new tensor of the
caller, ``pl.expand_clone`` writes its target, ``pl.read`` of a tensor the kernel writes, ``pl.write``
into a tensor (returned) or a tile (in place).

Each on random data against numpy, outputs poisoned (NaN) before the launch.
"""

import numpy as np
import pytest
import torch  # noqa: F401 - imported at collection, as the suite's other modules do (debug/run.py uses it)

import pypto_async.language as pl
from helpers.ir_fixtures import poison
from pypto_async import ir
from pypto_async.errors import PtoCompileError

R, C = 16, 32


def _f32(rng, shape):
    return rng.uniform(-3.0, 3.0, size=shape).astype(np.float32)


# ---- a returned tile: a new tensor of the caller ---------------------------------------------------------


@pl.program
class ReturnsTiles:
    @pl.function(type=pl.FunctionType.InCore)
    def plus_one(self, x: pl.Tensor[[R, C], pl.FP32]) -> pl.Tensor[[R, C], pl.FP32]:
        return pl.add(pl.load(x, [0, 0], [R, C]), 1.0)  # a computed value, not a parameter

    @pl.function(type=pl.FunctionType.InCore)
    def both(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = pl.load(x, [0, 0], [R, C])
        y = pl.store(pl.neg(t), [0, 0], y)
        return pl.exp(t), y  # a tile and a parameter

    @pl.function(type=pl.FunctionType.InCore)
    def twice(self, t: pl.Tensor[[R, C], pl.FP32], e: pl.Tensor[[R, C], pl.FP32],
              out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        s = pl.add(pl.mul(pl.load(t, [0, 0], [R, C]), 2.0), pl.load(e, [0, 0], [R, C]))
        return pl.store(s, [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
             out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = self.plus_one(x)
        e, y = self.both(x, y)
        out = self.twice(t, e, out)
        return y, out


@pytest.mark.slow
def test_a_returned_tile_is_a_new_tensor_the_call_returns(launcher, rng):
    c = ir.compile(ReturnsTiles)
    assert [t.name for t in c.task_graph.tasks] == ["plus_one", "both", "twice"]
    assert sorted((e.src, e.dst) for e in c.task_graph.edges) == [(0, 2), (1, 2)]  # through the new tensors
    x = _f32(rng, (R, C))
    y, out = poison((R, C)), poison((R, C))
    launcher.run(c, x, y, out)
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_allclose(out, (x + 1) * 2 + np.exp(x), rtol=1e-5)


def test_a_returned_tile_the_orchestration_returns_is_an_output_of_the_program(launcher, rng):
    @pl.program
    class Out:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32]) -> pl.Tensor[[R, C], pl.FP32]:
            return pl.mul(pl.load(x, [0, 0], [R, C]), 3.0)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32]):
            return self.k(x)

    c = ir.compile(Out)
    assert list(c.param_names) == ["x", "k_ret0"]
    x, got = _f32(rng, (R, C)), poison((R, C))
    launcher.run(c, x, got)
    np.testing.assert_allclose(got, x * 3.0, rtol=1e-6)


def test_a_kernel_returning_something_else_is_refused():
    @pl.program
    class Bad:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32]):
            return 3

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32]):
            self.k(x)

    with pytest.raises(PtoCompileError, match="k must return its tensor parameters, tiles .* got 3"):
        ir.compile(Bad)


# ---- pl.expand_clone writes a target the kernel writes -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dim", [None, 0, 1, 2])
def test_expand_clone_into_an_output_parameter(launcher, rng, dim):
    B, N, K = 4, 8, 16
    shape = [B, N, K]
    if dim is not None:
        shape[dim] = 1

    @pl.program
    class Clone:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[shape, pl.FP32],
              y: pl.Out[pl.Tensor[[B, N, K], pl.FP32]]) -> pl.Tensor[[B, N, K], pl.FP32]:
            out = pl.expand_clone(x, y)
            return out

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[shape, pl.FP32], y: pl.Out[pl.Tensor[[B, N, K], pl.FP32]]):
            y = self.k(x, y)
            return y

    x, y = _f32(rng, tuple(shape)), poison((B, N, K))
    launcher.run(ir.compile(Clone), x, y)
    np.testing.assert_array_equal(y, np.broadcast_to(x, (B, N, K)))


# ---- pl.read of a tensor the kernel writes -----------------------------------------------------------------


def test_a_read_of_an_inout_tensor_sees_the_regions_earlier_store(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor[[1, 8], pl.INT32], data: pl.Tensor[[R, C], pl.FP32], n: pl.InOut[pl.Tensor[[1, 8], pl.INT32]],
          out: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(x, [0, 0], [1, 8]), 1), [0, 0], n)
            r = pl.read(n, [0, 2])  # x[0, 2] + 1, as stored just before
            pl.store(pl.mul(pl.load(data, [r, 0], [1, C]), 2.0), [0, 0], out)

    x = rng.integers(0, R - 2, size=(1, 8)).astype(np.int32)
    data = _f32(rng, (R, C))
    n, out = np.full((1, 8), -1, np.int32), poison((1, C))
    launcher.run(k.compile(x, data, n, out), x, data, n, out)
    np.testing.assert_array_equal(n, x + 1)
    np.testing.assert_array_equal(out, data[x[0, 2] + 1:x[0, 2] + 2] * 2)


@pl.program
class ReadsWhatAnEarlierTaskWrote:
    @pl.function(type=pl.FunctionType.Opaque)
    def main(self, x: pl.Tensor[[1, 8], pl.INT32], data: pl.Tensor[[R, C], pl.FP32],
             out: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
        n = pl.create_tensor([1, 8], dtype=pl.INT32)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [1, 8]), 2), [0, 0], n)
        with pl.at(level=pl.Level.CORE_GROUP):
            r = pl.read(n, [0, 5])  # an intermediate the first region wrote: this task waits for it
            pl.store(pl.load(data, [r, 0], [1, C]), [0, 0], out)
        return out


def test_a_region_reading_an_intermediate_waits_for_its_writer(launcher, rng):
    c = ir.compile(ReadsWhatAnEarlierTaskWrote)
    assert [(e.src, e.dst, e.hazard) for e in c.task_graph.edges] == [(0, 1, "RAW")]
    assert [p.direction for p in c.program.params] == ["in", "in", "out"]  # x: a pl.Tensor nothing stores to
    x = rng.integers(0, R // 2, size=(1, 8)).astype(np.int32)
    data, out = _f32(rng, (R, C)), poison((1, C))
    launcher.run(c, x, data, out)
    np.testing.assert_array_equal(out, data[2 * x[0, 5]:2 * x[0, 5] + 1])


# ---- pl.write: into a tensor (returned), into a tile (in place) --------------------------------------------


def _write_program(dtype, fill):
    n = R * 2

    @pl.program
    class Writes:
        @pl.function(type=pl.FunctionType.InCore)
        def init(self, table: pl.InOut[pl.Tensor[[R, C], dtype]]) -> pl.Tensor[[R, C], dtype]:
            return pl.store(pl.full([R, C], dtype=dtype, value=fill), [0, 0], table)

        @pl.function(type=pl.FunctionType.InCore)
        def to_tensor(self, vals: pl.Tensor[[n], dtype],
                      table: pl.InOut[pl.Tensor[[R, C], dtype]]) -> pl.Tensor[[R, C], dtype]:
            for k in pl.unroll(2):
                for r in pl.unroll(R):
                    table = pl.write(table, [r, k], pl.read(vals, [k * R + r]))  # returns the tensor
            return table

        @pl.function(type=pl.FunctionType.InCore)
        def to_tile(self, vals: pl.Tensor[[n], dtype], table: pl.Tensor[[R, C], dtype],
                    dst: pl.Out[pl.Tensor[[R, C], dtype]]) -> pl.Tensor[[R, C], dtype]:
            tile = pl.load(table, [0, 0], [R, C])
            for r in pl.range(R):
                pl.write(tile, [r, C - 1], pl.read(vals, [R + r]))  # in place: the store below sees it
            pl.write(tile, [0, 2], 5)
            return pl.store(tile, [0, 0], dst)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, vals: pl.Tensor[[n], dtype], dst: pl.Out[pl.Tensor[[R, C], dtype]]):
            table = pl.create_tensor([R, C], dtype=dtype)
            table = self.init(table)
            table = self.to_tensor(vals, table)
            dst = self.to_tile(vals, table, dst)
            return dst

    return Writes


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["FP32", "INT32"])
def test_pl_write_into_a_tensor_and_into_a_tile(launcher, rng, dtype):
    fill = -1.0 if dtype == "FP32" else -7
    prog = _write_program(getattr(pl, dtype), fill)
    if dtype == "FP32":
        vals = _f32(rng, (2 * R,))
    else:
        vals = rng.integers(-1000, 1000, size=2 * R).astype(np.int32)
    dst = poison((R, C)) if dtype == "FP32" else np.full((R, C), 12345, np.int32)
    launcher.run(ir.compile(prog), vals, dst)
    want = np.full((R, C), fill, vals.dtype)
    want[:, 0], want[:, 1] = vals[:R], vals[R:]
    want[:, C - 1] = vals[R:]
    want[0, 2] = 5
    np.testing.assert_array_equal(dst, want)


def test_pl_write_of_a_read_value_writes_it_as_read(launcher, rng):
    """The value a pl.read gave, not the element after a later store to that tensor."""

    @pl.jit
    def k(x: pl.Tensor[[1, 8], pl.INT32], n: pl.InOut[pl.Tensor[[1, 8], pl.INT32]],
          out: pl.Out[pl.Tensor[[1, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            v = pl.read(n, [0, 3])
            pl.store(pl.load(x, [0, 0], [1, 8]), [0, 0], n)  # n overwritten after the read
            pl.store(pl.full([1, 8], dtype=pl.FP32, value=0.0), [0, 0], out)
            for i in pl.range(8):
                pl.write(out, [0, i], v + i)  # converted to FP32

    x = rng.integers(-50, 50, size=(1, 8)).astype(np.int32)
    n0 = rng.integers(-50, 50, size=(1, 8)).astype(np.int32)
    n, out = n0.copy(), poison((1, 8))
    launcher.run(k.compile(x, n, out), x, n, out)
    np.testing.assert_array_equal(n, x)
    np.testing.assert_array_equal(out[0], (n0[0, 3] + np.arange(8)).astype(np.float32))


def test_pl_write_refuses_other_destinations():
    @pl.jit
    def k(x: pl.Tensor[[1, 8], pl.INT32], out: pl.Out[pl.Tensor[[1, 8], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.write(pl.load(x, [0, 0], [1, 8]), [0], 1)

    with pytest.raises(PtoCompileError, match=r"pl.write: 1 indices for the 2-d tile \[1, 8\]"):
        k.lower(np.zeros((1, 8), np.int32), np.zeros((1, 8), np.int32))

    @pl.jit
    def k2(x: pl.Tensor[[1, 8], pl.INT32], out: pl.Out[pl.Tensor[[1, 8], pl.INT32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.write(3, [0, 0], 1)

    with pytest.raises(PtoCompileError, match="pl.write: expected a tensor parameter of the kernel or a tile, got 3"):
        k2.lower(np.zeros((1, 8), np.int32), np.zeros((1, 8), np.int32))


# ---- a tile assembled at a runtime offset ------------------------------------------------------------------


def test_tile_assemble_at_a_runtime_offset_is_checked_when_it_runs(launcher, rng):
    from pypto_async.errors import PtoError

    @pl.program
    class Insert:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, x: pl.Tensor[[R, C], pl.FP32], index: pl.Tensor[[1, 8], pl.INT32],
              src: pl.Tensor[[2, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            row = pl.cast(pl.tile.read(pl.load(index, [0, 0], [1, 8]), [0, 1]), pl.INDEX)  # known as it runs
            t = pl.tile.assemble(pl.load(x, [0, 0], [R, C]), pl.load(src, [0, 0], [2, C]), [row, 0])
            return pl.store(t, [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[R, C], pl.FP32], index: pl.Tensor[[1, 8], pl.INT32],
                 src: pl.Tensor[[2, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            y = self.k(x, index, src, y)
            return y

    c = ir.compile(Insert)
    x, src = _f32(rng, (R, C)), _f32(rng, (2, C))
    for row in (0, 5, R - 2):
        index = rng.integers(0, R, size=(1, 8)).astype(np.int32)
        index[0, 1] = row
        y = poison((R, C))
        launcher.run(c, x, index, src, y)
        want = x.copy()
        want[row:row + 2] = src
        np.testing.assert_array_equal(y, want)
    index[0, 1] = R - 1  # a 2-row window from the last row: outside the tile
    with pytest.raises(PtoError, match=r"pl.tile.assemble: offset of dim 0 leaves the tile \(16\)"):
        launcher.run(c, x, index, src, poison((R, C)))


# ---- pl.reshape / pl.transpose of a tensor in the orchestration --------------------------------------------


@pl.program
class Views:
    @pl.function(type=pl.FunctionType.InCore)
    def add(self, a: pl.Tensor[[C, R], pl.FP32], b: pl.Tensor[[C, R], pl.FP32],
            c: pl.Out[pl.Tensor[[C, R], pl.FP32]]) -> pl.Tensor[[C, R], pl.FP32]:
        return pl.store(pl.add(pl.load(a, [0, 0], [C, R]), pl.load(b, [0, 0], [C, R])), [0, 0], c)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, flat: pl.Tensor[[R * C], pl.FP32], m: pl.Tensor[[R, C], pl.FP32],
             c: pl.Out[pl.Tensor[[C, R], pl.FP32]]):
        a = pl.reshape(flat, [C, R])  # the same elements, row-major
        b = pl.transpose(m, axis1=0, axis2=1)
        c = self.add(a, b, c)
        return c


@pytest.mark.slow
def test_a_tensor_reshaped_or_transposed_in_the_orchestration_feeds_a_kernel(launcher, rng):
    c = ir.compile(Views)
    assert [t.name for t in c.task_graph.tasks] == ["reshape_flat", "transpose_m", "add"]
    assert sorted((e.src, e.dst) for e in c.task_graph.edges) == [(0, 2), (1, 2)]
    flat, m, out = _f32(rng, (R * C,)), _f32(rng, (R, C)), poison((C, R))
    launcher.run(c, flat, m, out)
    np.testing.assert_array_equal(out, flat.reshape(C, R) + m.T)


def test_writing_through_an_orchestration_view_is_refused():
    from pypto_async.errors import PtoNotSupported

    @pl.program
    class WritesView:
        @pl.function(type=pl.FunctionType.InCore)
        def fill(self, c: pl.Out[pl.Tensor[[C, R], pl.FP32]]) -> pl.Tensor[[C, R], pl.FP32]:
            return pl.store(pl.full([C, R], dtype=pl.FP32, value=1.0), [0, 0], c)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, m: pl.InOut[pl.Tensor[[R, C], pl.FP32]]):
            self.fill(pl.transpose(m, 0, 1))
            return m

    with pytest.raises(PtoNotSupported, match="parameter 'c' is out, but 'm_transpose0' is a pl.transpose of 'm'"):
        ir.compile(WritesView)


# ---- pl.slice of a tensor with a valid box, in a region ----------------------------------------------------


def test_a_tensor_slice_with_a_valid_box_reads_only_that_box(launcher, rng):
    """PyPTO's copy_dyn_batch: a 16-row window per step over 32 rows, valid where the 20-row tensor has rows."""
    rows, cap, tile = 20, 32, 16

    @pl.jit
    def k(a: pl.Tensor[[rows, C], pl.FP32], out: pl.InOut[pl.Tensor[[cap, C], pl.FP32]]):
        n = pl.tensor.dim(a, 0)
        for b0 in pl.parallel(0, cap, tile):
            cur = pl.max(pl.min(tile, n - b0), 0)
            with pl.at(level=pl.Level.CORE_GROUP):
                chunk = pl.slice(a, [tile, C], [b0, 0], valid_shape=[cur, C])  # rows 20..31 lie past a
                out = pl.assemble(out, chunk, [b0, 0])
        return out

    a, out = _f32(rng, (rows, C)), poison((cap, C))
    launcher.run(k.compile(a, out), a, out)
    np.testing.assert_array_equal(out[:rows], a)
    assert np.isnan(out[rows:]).all()  # no valid rows there: nothing stored


# ---- debug/run.py beside the artifact ----------------------------------------------------------------------


def test_every_compile_leaves_a_run_script_that_runs_the_artifact_again(rng):
    import runpy

    @pl.jit
    def k(a: pl.Tensor[[R, C], pl.FP32], n: pl.Tensor[[4], pl.INT32], c: pl.Out[pl.Tensor[[R, C], pl.FP32]],
          s: pl.Scalar[pl.FP32]):
        with pl.at(level=pl.Level.CORE_GROUP):
            c[:] = pl.mul(pl.add(pl.load(a, [0, 0], [R, C]), 1.0), s)
        return c

    compiled = k.compile(_f32(rng, (R, C)), np.zeros(4, np.int32), poison((R, C)), pl.RUNTIME)  # s at dispatch
    script = compiled.output_dir / "debug" / "run.py"
    text = script.read_text()
    assert "torch.randn((16, 32), dtype=torch.float32" in text and "torch.zeros((4,), dtype=torch.int32)" in text
    assert "torch.zeros((16, 32), dtype=torch.float32)" in text and "'s': 1.0" in text
    values = runpy.run_path(str(script), run_name="run_script")["main"](["--seed", "5"])
    np.testing.assert_allclose(values["c"].numpy(), values["a"].numpy() + 1.0, rtol=1e-6)
