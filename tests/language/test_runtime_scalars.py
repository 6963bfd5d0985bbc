"""Runtime scalars: pl.read, if/else on the values it reads, pl.range bounded by them.

PyPTO's 06_dyn_valid_shape forms: a valid length chosen by an in-kernel
if/else from a config tensor, and the ragged-tail loop whose trip count and
last partial length are read at run time.  One compiled kernel serves every
config (the values are not known when it is traced).  Outputs are poisoned
(NaN) so a store past its valid box, or a skipped block, shows.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from helpers.located import assert_at, next_line
import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoError
from helpers.ir_fixtures import poison

Q, C = 16, 32



@pl.jit
def if_else(data: pl.Tensor, cfg: pl.Tensor, output: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        is_last = pl.read(cfg, [0])
        last_len = pl.read(cfg, [1])
        full_len = pl.read(cfg, [2])
        if is_last == 1:
            vlen = last_len
        else:
            vlen = full_len
        t = pl.load(data, [0, 0], [Q, C], valid_shape=[Q, vlen])
        pl.store(pl.tile.fillpad(t, pad_value=pl.PadValue.min), [0, 0], output)
    return output


@pytest.mark.parametrize("is_last", [0, 1])
def test_if_else_on_read_values_picks_the_valid_length_at_run_time(launcher, rng, is_last):
    data = torch.from_numpy(rng.standard_normal((Q, C)).astype(np.float32))
    last = int(rng.integers(1, C))
    cfg = torch.tensor([is_last, last, C], dtype=torch.int64)
    out = torch.from_numpy(poison((Q, C)))
    compiled = if_else.compile(data, cfg, out)
    launcher.run(compiled, data, cfg, out)
    want = data.clone()
    if is_last:
        want[:, last:] = -torch.inf
    assert torch.equal(out, want)
    assert compiled is if_else.compile(data, torch.tensor([1 - is_last, 3, C]), out)  # one kernel, any config


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


@pytest.mark.parametrize("n_blocks", [1, 2, 4])
def test_a_loop_bounded_by_a_read_trip_count_with_a_ragged_tail(launcher, rng, n_blocks):
    buf = torch.from_numpy(rng.standard_normal((4 * Q, C)).astype(np.float32))
    last = int(rng.integers(1, C))
    cfg = torch.tensor([n_blocks, last, C], dtype=torch.int32)
    out = torch.from_numpy(poison((4 * Q, C)))
    launcher.run(ragged_loop.compile(buf, cfg, out), buf, cfg, out)
    rows = n_blocks * Q
    want = buf[:rows].clone()
    want[rows - Q:, last:] = 0
    assert torch.equal(out[:rows], want)
    assert torch.isnan(out[rows:]).all()  # blocks past the trip count are never stored


def test_branches_that_store_and_an_elif_chain(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, mode: pl.Tensor, out: pl.Out[pl.Tensor], y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            m = pl.read(mode, [0, 1])
            if m == 0:
                out[:] = pl.add(x, 1.0)
                n = 8
            elif m == 1:
                out[:] = pl.mul(x, x)
                n = 16
            else:
                out[:] = pl.neg(x)
                n = 24
            t = pl.load(x, [0, 0], [Q, C], valid_shape=[Q, n])
            pl.store(pl.tile.fillpad(t, pad_value=pl.PadValue.zero), [0, 0], y)

    x = rng.standard_normal((Q, C)).astype(np.float32)
    for m, n in ((0, 8), (1, 16), (2, 24), (7, 24)):
        mode = np.array([[5, m]], np.int64)
        out, y = poison((Q, C)), poison((Q, C))
        launcher.run(k.compile(x, mode, out, y), x, mode, out, y)
        want = {0: x + 1, 1: x * x}.get(m, -x)
        np.testing.assert_allclose(out, want, rtol=1e-6)
        want_y = x.copy()
        want_y[:, n:] = 0
        np.testing.assert_array_equal(y, want_y)


def test_an_if_on_a_loop_index_is_a_runtime_branch(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(4):
                if i == 0:
                    out[i * Q:(i + 1) * Q, :] = pl.neg(x[i * Q:(i + 1) * Q, :])
                else:
                    out[i * Q:(i + 1) * Q, :] = pl.exp(x[i * Q:(i + 1) * Q, :])

    x = rng.standard_normal((4 * Q, C)).astype(np.float32)
    out = poison((4 * Q, C))
    launcher.run(k.compile(x, out), x, out)
    want = np.exp(x)
    want[:Q] = -x[:Q]
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_an_if_on_a_python_value_is_still_python(launcher, rng):
    for double in (True, False):
        @pl.jit
        def k(x: pl.Tensor, out: pl.Out[pl.Tensor]):
            with pl.at(level=pl.Level.CORE_GROUP):
                if double:
                    out[:] = pl.add(x, x)
                    return out
                out[:] = pl.neg(x)
            return out

        x = rng.standard_normal((Q, C)).astype(np.float32)
        out = poison((Q, C))
        launcher.run(k.compile(x, out), x, out)
        np.testing.assert_array_equal(out, x + x if double else -x)


def test_a_runtime_offset_is_checked_when_the_kernel_runs(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            row = pl.read(cfg, [0])
            out[:, :] = pl.load(x, [row, 0], [Q, C])

    x = rng.standard_normal((4 * Q, C)).astype(np.float32)
    out = poison((Q, C))
    compiled = k.compile(x, np.array([2 * Q], np.int64), out)
    launcher.run(compiled, x, np.array([2 * Q + 3], np.int64), out)
    np.testing.assert_array_equal(out, x[2 * Q + 3:3 * Q + 3])
    with pytest.raises(PtoError, match="pl.load: runtime offset of dimension 0 puts the window outside tensor 'x'"):
        launcher.run(compiled, x, np.array([3 * Q + 1], np.int64), out)


@pl.program
class ScalarOffsets:
    """PyPTO's per-rank stage-out: a kernel loads row ``my_rank`` and stores at column ``chunk * c``."""

    @pl.function(type=pl.FunctionType.InCore)
    def pick(self, x: pl.Tensor[[4, 4 * C], pl.FP32], y: pl.Out[pl.Tensor[[2, 4 * C], pl.FP32]],
             row: pl.Scalar[pl.INT32], chunk: pl.Scalar[pl.INDEX]) -> pl.Tensor[[2, 4 * C], pl.FP32]:
        for c in pl.range(2):
            t = pl.load(x, [row, c * chunk], [1, C])
            pl.store(pl.add(t, 1.0), [c, (1 - c) * chunk], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[4, 4 * C], pl.FP32], y: pl.Out[pl.Tensor[[2, 4 * C], pl.FP32]],
             row: pl.Scalar[pl.INT32], chunk: pl.Scalar[pl.INDEX]) -> pl.Tensor[[2, 4 * C], pl.FP32]:
        return self.pick(x, y, row, chunk)


@pytest.mark.parametrize("row, chunk", [(0, C), (3, 2 * C), (2, 3 * C // 2)])
def test_a_scalar_parameter_offsets_a_load_and_a_store(launcher, rng, row, chunk):
    from pypto_async import ir

    x = rng.standard_normal((4, 4 * C)).astype(np.float32)
    compiled = ir.compile(ScalarOffsets)
    y = poison((2, 4 * C))
    launcher.run(compiled, x, y, row, chunk)  # one compiled kernel: the offsets are its scalar arguments
    np.testing.assert_array_equal(y[0, chunk:chunk + C], x[row, :C] + 1)
    np.testing.assert_array_equal(y[1, :C], x[row, chunk:chunk + C] + 1)


def test_a_scalar_offset_past_the_tensor_fails_the_launch(launcher, rng):
    from pypto_async import ir

    x = rng.standard_normal((4, 4 * C)).astype(np.float32)
    y = poison((2, 4 * C))
    with pytest.raises(PtoError, match="task pick: pl.load: runtime offset of dimension 0 puts the window outside"):
        launcher.run(ir.compile(ScalarOffsets), x, y, 4, C)
    with pytest.raises(PtoError, match="runtime offset of dimension 1 puts the window outside"):
        launcher.run(ir.compile(ScalarOffsets), x, y, 0, 4 * C)


def test_the_printed_program_computes_the_same(launcher, rng):
    buf = torch.from_numpy(rng.standard_normal((4 * Q, C)).astype(np.float32))
    cfg = torch.tensor([3, 5, C], dtype=torch.int32)
    text = ragged_loop.lower(buf, cfg, buf).as_python(form="jit")
    assert "pl.read(cfg, [0])" in text and "in pl.range(0, s0, 1):" in text
    namespace: dict = {}
    exec(compile(text, "<as_python>", "exec"), namespace)  # noqa: S102 - the printed program
    a, b = torch.from_numpy(poison((4 * Q, C))), torch.from_numpy(poison((4 * Q, C)))
    launcher.run(ragged_loop.compile(buf, cfg, a), buf, cfg, a)
    launcher.run(namespace["ragged_loop"].compile(buf, cfg, b), buf, cfg, b)
    assert torch.equal(a[:3 * Q], b[:3 * Q]) and torch.isnan(b[3 * Q:]).all()


# ---- compile errors -------------------------------------------------------------------

X = np.ones((Q, C), np.float32)
CFG = np.array([1, 2, 3], np.int64)


def _error(k, *args):
    with pytest.raises(PtoCompileError) as ei:
        k.lower(*(args or (X, CFG, X.copy())))
    return ei


def test_a_read_outside_a_region_is_taken_by_the_tasks_that_use_it(launcher, rng):
    """Qwen3's RoPE stage: the orchestration reads a position and windows a table at it for a region."""

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        for b in pl.range(2):
            pos = pl.read(cfg, [b]) - 1
            row = x[pos:pos + 1, :]
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.add(pl.load(row, [0, 0], [1, C]), 1.0), [b, 0], out)
        return out

    x = torch.from_numpy(rng.standard_normal((Q, C)).astype(np.float32))
    out = torch.from_numpy(poison((2, C)))
    compiled = k.compile(x, torch.tensor([5, 9], dtype=torch.int64), out)
    for cfg in ([5, 9], [16, 1]):
        launcher.run(compiled, x, torch.tensor(cfg, dtype=torch.int64), out)
        assert torch.equal(out, x[[cfg[0] - 1, cfg[1] - 1]] + 1)


def test_a_read_outside_a_region_bounds_a_loop_of_regions_when_it_runs(launcher, rng):
    """The orchestration reads the trip count when it runs (PyPTO's device orchestration): one artifact, any count."""

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.exp(pl.load(x, [i, 0], [1, C])), [i, 0], out)
        return out

    x = torch.from_numpy(rng.standard_normal((Q, C)).astype(np.float32))
    compiled = k.compile(x, torch.tensor([1], dtype=torch.int64), torch.zeros(Q, C))
    assert compiled.kind == "program" and compiled.task_graph is None  # resolved on the device as it submits
    for n in (3, Q, 0):
        out = torch.from_numpy(poison((Q, C)))
        launcher.run(compiled, x, torch.tensor([n], dtype=torch.int64), out)
        torch.testing.assert_close(out[:n], torch.exp(x[:n]))


def test_read_of_a_float_tensor_and_of_an_output():
    where = []

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            pl.read(x, [0, 0])

    assert_at(_error(k, X.astype(np.float16), CFG, X.copy()), where[0], "'x' is FP16; only integer tensors")

    @pl.jit
    def k2(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        where.append(next_line())
        pl.read(out, [0, 0])  # in the orchestration, before any task wrote it

    assert_at(_error(k2, X, CFG, np.ones((Q, C), np.int32)), where[1], "'out' is out; the orchestration reads a "
              "runtime scalar from an input tensor")


def test_read_outside_the_tensor():
    where = []

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            pl.read(cfg, [3])

    assert_at(_error(k), where[0], "index [3..3] of dimension 0 is outside [0, 3) of 'cfg'")


@pytest.mark.parametrize("flag", [0, 1])
def test_a_tile_rebound_in_a_runtime_branch_takes_the_branch_value(launcher, rng, flag):
    """PyPTO's if yields the branch's tile (scf.if); 04_paged_attention's online update rebinds tiles so."""

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [Q, C])
            if pl.read(cfg, [0]) > 0:
                t = pl.neg(t)
            pl.store(pl.add(t, 1.0), [0, 0], out)
        return out

    x = torch.from_numpy(rng.standard_normal((Q, C)).astype(np.float32))
    out = torch.from_numpy(poison((Q, C)))
    k(x, torch.tensor([flag], dtype=torch.int64), out)
    assert torch.equal(out, (-x if flag else x) + 1)


def test_a_tile_of_two_shapes_in_a_runtime_branch():
    where = []

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [Q, C])
            where.append(next_line())
            if pl.read(cfg, [0]) > 0:
                t = pl.load(x, [0, 0], [Q, C // 2])
            pl.store(t, [0, 0], out)

    assert_at(_error(k), where[0], "both branches must give it the same shape")


def test_return_inside_a_runtime_branch():
    where = []

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where.append(next_line())
            if pl.read(cfg, [0]) > 0:
                return out

    assert_at(_error(k), where[0], "return inside an if on a runtime scalar is not supported")


def test_a_runtime_scalar_as_a_tile_slice_offset():
    where = []

    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [Q, C])
            where.append(next_line())
            pl.store(pl.slice(t, [8, C], [pl.read(cfg, [0]), 0]), [0, 0], out)

    assert_at(_error(k), where[0], "is a runtime scalar", "cannot be used here")


def test_a_runtime_range_outside_a_region_over_a_scalar_parameter(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, n: pl.Scalar[pl.INDEX], out: pl.Out[pl.Tensor]):
        for i in pl.range(1, n):
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.add(pl.load(x, [i, 0], [1, C]), 1.0), [i, 0], out)
        return out

    x = torch.from_numpy(rng.standard_normal((Q, C)).astype(np.float32))
    compiled = k.compile(x, pl.RUNTIME, torch.zeros(Q, C))  # n read at dispatch
    for n in (5, 1):
        out = torch.from_numpy(poison((Q, C)))
        launcher.run(compiled, x, n, out)
        torch.testing.assert_close(out[1:n], x[1:n] + 1)


@pl.program
class RaggedProgram:
    @pl.function(type=pl.FunctionType.InCore)
    def k(self, x: pl.Tensor[[4 * Q, C], pl.FP32], cfg: pl.Tensor[[2], pl.INT32],
          y: pl.Out[pl.Tensor[[4 * Q, C], pl.FP32]]) -> pl.Tensor[[4 * Q, C], pl.FP32]:
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            if i == 0:
                v = pl.read(cfg, [1])
            else:
                v = C
            t = pl.load(x, [i * Q, 0], [Q, C], valid_shape=[Q, v])
            pl.store(pl.fillpad(t, pl.PadValue.zero), [i * Q, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[4 * Q, C], pl.FP32], cfg: pl.Tensor[[2], pl.INT32],
             y: pl.Out[pl.Tensor[[4 * Q, C], pl.FP32]]) -> pl.Tensor[[4 * Q, C], pl.FP32]:
        return self.k(x, cfg, y)


@pytest.mark.slow
def test_an_incore_function_of_a_program_and_its_class_form(launcher, rng):
    from pypto_async import ir

    x = rng.standard_normal((4 * Q, C)).astype(np.float32)
    cfg = np.array([3, 5], np.int32)
    namespace: dict = {}
    exec(compile(RaggedProgram.as_python(form="class"), "<as_python>", "exec"), namespace)  # noqa: S102
    for program in (RaggedProgram, namespace["RaggedProgram"]):
        y = poison((4 * Q, C))
        launcher.run(ir.compile(program), x, cfg, y)
        want = x[:3 * Q].copy()
        want[:Q, 5:] = 0
        np.testing.assert_array_equal(y[:3 * Q], want)


def test_a_scalar_parameter_bounds_a_loop_and_nested_runtime_ifs_merge(launcher, rng):
    @pl.jit
    def k(x: pl.Tensor, cfg: pl.Tensor, n: pl.Scalar[pl.INDEX], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            a = pl.read(cfg, [0])
            b = pl.read(cfg, [1])
            for i in pl.range(n):
                if a > i:
                    if b > i:
                        w = 4
                    else:
                        w = 8
                else:
                    w = 12
                t = pl.load(x, [i * Q, 0], [Q, C], valid_shape=[Q, w])
                pl.store(pl.fillpad(t, pl.PadValue.max), [i * Q, 0], out)

    x = rng.standard_normal((4 * Q, C)).astype(np.float32)
    cfg = np.array([3, 1], np.int64)
    out = poison((4 * Q, C))
    launcher.run(k.compile(x, cfg, 4, out), x, cfg, 4, out)
    want = x.copy()
    for i, w in enumerate((4, 8, 8, 12)):
        want[i * Q:(i + 1) * Q, w:] = np.inf
    np.testing.assert_array_equal(out, want)


def test_subscripts_inside_a_runtime_loop_and_a_read_of_an_intermediate(launcher, rng):
    @pl.program
    class Twice:
        @pl.function(type=pl.FunctionType.InCore)
        def count(self, cfg: pl.Tensor[[1, 2], pl.INT32],
                  n: pl.Out[pl.Tensor[[1, 2], pl.INT32]]) -> pl.Tensor[[1, 2], pl.INT32]:
            n[:] = pl.add(cfg, 1)  # the trip count is computed by an earlier task
            return n

        @pl.function(type=pl.FunctionType.InCore)
        def body(self, x: pl.Tensor[[4 * Q, C], pl.FP32], n: pl.Tensor[[1, 2], pl.INT32],
                 y: pl.Out[pl.Tensor[[4 * Q, C], pl.FP32]]) -> pl.Tensor[[4 * Q, C], pl.FP32]:
            for i in pl.range(pl.read(n, [0, 1])):
                y[i * Q:(i + 1) * Q, :] = pl.mul(x[i * Q:(i + 1) * Q, :], 3.0)
            return y

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[4 * Q, C], pl.FP32], cfg: pl.Tensor[[1, 2], pl.INT32],
                 y: pl.Out[pl.Tensor[[4 * Q, C], pl.FP32]]) -> pl.Tensor[[4 * Q, C], pl.FP32]:
            n = pl.create_tensor([1, 2], dtype=pl.INT32)
            n = self.count(cfg, n)
            return self.body(x, n, y)

    from pypto_async import ir

    c = ir.compile(Twice)
    assert [(e.src, e.dst) for e in c.task_graph.edges] == [(0, 1)]
    x = rng.standard_normal((4 * Q, C)).astype(np.float32)
    y = poison((4 * Q, C))
    launcher.run(c, x, np.array([[0, 2]], np.int32), y)
    np.testing.assert_allclose(y[:3 * Q], x[:3 * Q] * 3, rtol=1e-6)


def test_a_read_of_an_fp32_element_in_a_region_scales_a_tile(launcher, rng):
    """PyPTO's per-token weights: w = pl.read(post, [t, h]) then pl.mul(row, w), inside the kernel."""

    @pl.jit
    def k(x: pl.Tensor[[4, 64], pl.FP32], w: pl.Tensor[[4, 2], pl.FP32], out: pl.Out[pl.Tensor[[4, 128], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for t in pl.range(4):
                row = pl.load(x, [t, 0], [1, 64])
                for h in pl.range(2):
                    wt = pl.read(w, [t, h])
                    out = pl.store(pl.add(pl.mul(row, wt), wt), [t, h * 64], out)
        return out

    x = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((4, 2)).astype(np.float32))
    out = torch.from_numpy(poison((4, 128)))
    k(x, w, out)
    want = torch.cat([x * w[:, h:h + 1] + w[:, h:h + 1] for h in range(2)], dim=1)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)

    @pl.jit
    def as_index(x: pl.Tensor[[4, 64], pl.FP32], w: pl.Tensor[[4, 2], pl.FP32],
                 out: pl.Out[pl.Tensor[[4, 128], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.load(x, [pl.read(w, [0, 0]), 0], [1, 64]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="is a float: it is not an index"):
        as_index.compile(x, w, out)
