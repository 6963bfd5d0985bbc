"""Orchestration loops and ifs over values the program reads when it runs (PyPTO's device orchestration).

A ``pl.read`` of an input tensor in a ``@pl.program``'s orchestration is read
by the orchestration on the device, when it reaches it; a ``pl.range`` or an
``if`` over it is a C loop (or branch) of the orchestration, and each task
captures the values it uses as it captures a loop index.  Such a program has
no compile-time table: the driver resolves each task's edges as it is
submitted.  One artifact serves every count.  Outputs are poisoned (NaN) so a
skipped or extra task shows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import delay_task

from helpers.located import next_line

R, C, N = 4, 32, 8  # rows per tile, columns, tiles


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _poison(shape):
    return np.full(shape, np.nan, np.float32)


def _tasks(trace, name):
    return sorted((r for r in trace.records if r.kind_name == "task" and r.name == name), key=lambda r: r.block)


@pl.program
class Counted:
    """cfg = [count, first]: tiles first .. first + count of x, each exp'd into y."""

    @pl.function(type=pl.FunctionType.InCore)
    def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[2], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        count = pl.read(cfg, [0])
        for i in pl.range(count):
            first = pl.read(cfg, [1])
            row = (first + i) * R
            self.exp_tile(pl.slice(x, [R, C], [row, 0]), pl.slice(y, [R, C], [row, 0]))
        return y


@pytest.fixture(scope="module")
def counted():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "too many to expand" warning: its graph is known only when it runs
        return ir.compile(Counted)


def test_a_loop_over_a_count_read_from_a_tensor_runs_that_many_tasks(counted):
    assert counted.kind == "program" and counted.task_graph is None
    x = _rand((N * R, C), 1)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(counted)
        for count, first in ((3, 2), (N, 0), (1, N - 1)):
            y = _poison((N * R, C))
            before = h.program_stats()["tasks"]
            h(np.array([count, first], np.int32), x, y)
            rows = slice(first * R, (first + count) * R)
            np.testing.assert_allclose(y[rows], np.exp(x[rows]), rtol=1e-6)
            assert h.program_stats()["tasks"] - before == count


def test_a_zero_trip_loop_submits_nothing(counted):
    x = _rand((N * R, C), 2)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(counted)
        y = _rand((N * R, C), 3)
        h(np.array([0, 0], np.int32), x, y)
        assert h.program_stats()["tasks"] == 0


def test_a_read_at_an_index_known_only_when_it_runs_is_checked_there(counted):
    """The task's window moves with the value read: past the tensor, the task fails naming the load."""
    x = _rand((N * R, C), 4)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(counted)
        with pytest.raises(PtoError, match="pl.load: runtime offset"):
            h(np.array([2, N - 1], np.int32), x, _poison((N * R, C)))
        y = _poison((N * R, C))
        h(np.array([2, 0], np.int32), x, y)  # the worker keeps working
        np.testing.assert_allclose(y[:2 * R], np.exp(x[:2 * R]), rtol=1e-6)


@pl.program
class Lengths:
    """Per request b (a count read from cfg): lens[b] tiles of x, each folded into y's row block b in order."""

    @pl.function(type=pl.FunctionType.InCore)
    def fold(self, x: pl.Tensor[[R, C], pl.FP32], acc: pl.InOut[pl.Tensor[[R, C], pl.FP32]]):
        # Not commutative: the tiles must be folded in submission order.
        return pl.store(pl.add(pl.mul(pl.load(acc, [0, 0], [R, C]), 0.5), pl.load(x, [0, 0], [R, C])), [0, 0], acc)

    @pl.function(type=pl.FunctionType.InCore)
    def copy(self, acc: pl.Tensor[[R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.load(acc, [0, 0], [R, C]), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], lens: pl.Tensor[[4], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
             acc: pl.InOut[pl.Tensor[[4 * R, C], pl.FP32]], out: pl.Out[pl.Tensor[[4 * R, C], pl.FP32]]):
        for b in pl.range(pl.read(cfg, [0])):
            n = pl.read(lens, [b])  # its index is a runtime loop's: checked when the orchestration reads it
            for j in pl.range(n):
                self.fold(pl.slice(x, [R, C], [j * R, 0]), pl.slice(acc, [R, C], [b * R, 0]))
            self.copy(pl.slice(acc, [R, C], [b * R, 0]), pl.slice(out, [R, C], [b * R, 0]))
        return out


@pytest.mark.slow  # a second on two CPUs (its program compiles)
def test_iterations_that_write_the_same_window_stay_ordered_when_edges_are_resolved_on_the_device():
    c = ir.compile(Lengths)
    assert c.task_graph is None
    x = _rand((N * R, C), 5)
    lens = np.array([5, 0, 3, N], np.int32)
    acc0 = _rand((4 * R, C), 6)
    want_acc = acc0.copy()
    for b, n in enumerate(lens[:3]):
        for j in range(n):
            want_acc[b * R:(b + 1) * R] = want_acc[b * R:(b + 1) * R] * 0.5 + x[j * R:(j + 1) * R]
    with ChipWorker(RunConfig(cores=2, timing="host")) as w:
        h = w.register(c)
        delay_task(h, "fold", 0.003)  # slow folds: a copy that ran early, or two folds at once, would show
        acc, out = acc0.copy(), _poison((4 * R, C))
        with w.trace() as tr:
            h(np.array([3], np.int32), lens, x, acc, out)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-5)
    np.testing.assert_allclose(out[:3 * R], want_acc[:3 * R], rtol=1e-5)
    folds, copies = _tasks(tr.trace, "fold"), _tasks(tr.trace, "copy")
    assert len(folds) == 8 and len(copies) == 3
    by_id = {r.block: r for r in folds + copies}
    # Submission order: request 0's folds 0..4 and copy 5, request 1's copy 6, request 2's folds 7..9 and copy 10.
    for a, b in [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (7, 8), (8, 9), (9, 10)]:
        assert by_id[b].start_ns >= by_id[a].end_ns  # each on the one accumulator window: RAW and WAW


@pytest.mark.slow
def test_a_read_index_past_its_tensor_fails_the_launch_naming_the_read():
    c = ir.compile(Lengths)
    x = _rand((N * R, C), 7)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        with pytest.raises(PtoError, match=r"pl.read\(lens, \.\.\.\): index of dimension 0 is outside \[0, 4\) "
                                           r"at test_orch_runtime_bounds.py:\d+"):
            h(np.array([5], np.int32), np.ones(4, np.int32), x, _rand((4 * R, C), 8), _poison((4 * R, C)))


@pl.program
class Flags:
    """flags[i] > 0: tile i is exp'd, else negated; the first tile is then scaled by 2 (an if over the index)."""

    @pl.function(type=pl.FunctionType.InCore)
    def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.InCore)
    def neg_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.neg(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, y: pl.InOut[pl.Tensor[[R, C], pl.FP32]], first: pl.Scalar[pl.INDEX]):
        t = pl.load(y, [0, 0], [R, C])
        if first == 1:
            y = pl.store(pl.mul(t, 2.0), [0, 0], y)
        else:
            y = pl.store(pl.mul(t, 1.0), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, flags: pl.Tensor[[N], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        for i in pl.range(N):
            xi, yi = pl.slice(x, [R, C], [i * R, 0]), pl.slice(y, [R, C], [i * R, 0])
            if pl.read(flags, [i]) > 0:
                self.exp_tile(xi, yi)
            else:
                self.neg_tile(xi, yi)
            if i == 0:
                first = pl.yield_(1)
            else:
                first = pl.yield_(0)
            self.scale(yi, first)
        return y


@pytest.mark.slow  # a second on two CPUs (its program compiles)
def test_a_runtime_if_in_the_orchestration_submits_the_branch_it_takes():
    c = ir.compile(Flags)
    assert c.task_graph is None
    x = _rand((N * R, C), 9)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        for seed in (10, 11):
            flags = np.random.default_rng(seed).integers(0, 2, N).astype(np.int32)
            y = _poison((N * R, C))
            before = h.program_stats()["tasks"]
            h(flags, x, y)
            want = np.where(np.repeat(flags > 0, R)[:, None], np.exp(x), -x)
            want[:R] *= 2
            np.testing.assert_allclose(y, want, rtol=1e-6)
            assert h.program_stats()["tasks"] - before == 2 * N


def test_an_if_over_loop_indices_only_keeps_the_compile_time_table():
    @pl.program
    class FirstOnly:
        @pl.function(type=pl.FunctionType.InCore)
        def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[N * R, C], pl.FP32], y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
            for i in pl.range(N):
                if i % 2 == 0:
                    self.exp_tile(pl.slice(x, [R, C], [i * R, 0]), pl.slice(y, [R, C], [i * R, 0]))
            return y

    c = ir.compile(FirstOnly)
    assert c.task_graph is not None and len(c.task_graph.tasks) == N // 2
    x, y = _rand((N * R, C), 12), _poison((N * R, C))
    c(x, y)
    for i in range(0, N, 2):
        np.testing.assert_allclose(y[i * R:(i + 1) * R], np.exp(x[i * R:(i + 1) * R]), rtol=1e-6)


@pl.program
class Longest:
    """05's max_bn: the longest of the requests' lengths, carried across a loop of the orchestration, bounds the next."""

    @pl.function(type=pl.FunctionType.InCore)
    def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, lens: pl.Tensor[[4], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        longest = 0
        total = 0
        for b in pl.range(4):
            longest = pl.max(longest, pl.read(lens, [b]))
            total += pl.read(lens, [b])  # a second carried scalar, updated in the same iteration
        for i in pl.range(longest):
            self.exp_tile(pl.slice(x, [R, C], [i * R, 0]), pl.slice(y, [R, C], [i * R, 0]))
        for i in pl.range(longest, pl.min(total, N)):
            self.exp_tile(pl.slice(x, [R, C], [i * R, 0]), pl.slice(y, [R, C], [i * R, 0]))
        return y


@pytest.mark.slow
def test_a_scalar_carried_across_an_orchestration_loop_takes_each_iterations_value():
    c = ir.compile(Longest)
    assert c.task_graph is None
    x = _rand((N * R, C), 14)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        for lens in ([1, 3, 2, 0], [0, 0, 0, 0], [2, 1, 0, 1]):
            y = _poison((N * R, C))
            before = h.program_stats()["tasks"]
            h(np.array(lens, np.int32), x, y)
            n = max(max(lens), min(sum(lens), N))
            np.testing.assert_allclose(y[:n * R], np.exp(x[:n * R]), rtol=1e-6)
            assert h.program_stats()["tasks"] - before == n


def test_a_worker_opened_for_one_call_holds_the_calls_arrays():
    """PyPTO's 06 passes 1 GiB of KV cache to run(): the call's own worker is sized to it (left unset: 1 GiB)."""
    from pypto_async.runtime._entry import _sized

    class Big:
        nbytes = 3 << 29  # 1.5 GiB

    cfg = RunConfig()
    assert _sized(cfg, [np.zeros(4, np.float32), 3]) is cfg
    assert _sized(cfg, [Big(), 3]).device_memory == 3 << 30  # 1.25 x the arrays, 256 MiB beside, whole GiB
    assert _sized(RunConfig(device_memory=1 << 30), [Big()]).device_memory == 1 << 30  # asked for: kept


def test_a_read_in_a_task_at_an_index_known_only_when_it_runs_is_checked_there():
    """07's kernels read a block index at a runtime loop's index: past the tensor, the task fails naming the read."""

    @pl.program
    class Gather:
        @pl.function(type=pl.FunctionType.InCore)
        def gather(self, table: pl.Tensor[[4], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
                   y: pl.Out[pl.Tensor[[4 * R, C], pl.FP32]], n: pl.Scalar[pl.INDEX]):
            for i in pl.range(n):
                src = pl.read(table, [i])
                y = pl.store(pl.load(x, [src * R, 0], [R, C]), [i * R, 0], y)
            return y

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, table: pl.Tensor[[4], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
                 y: pl.Out[pl.Tensor[[4 * R, C], pl.FP32]], n: pl.Scalar[pl.INDEX]):
            self.gather(table, x, y, n)
            return y

    c = ir.compile(Gather)
    x, table = _rand((N * R, C), 13), np.array([6, 1, 3, 0], np.int32)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        y = _poison((4 * R, C))
        h(table, x, y, 3)
        np.testing.assert_array_equal(y[:3 * R], x.reshape(N, R, C)[table[:3]].reshape(3 * R, C))
        with pytest.raises(PtoError, match="pl.read: runtime offset of dimension 0"):
            h(table, x, _poison((4 * R, C)), 5)


@pl.program
class Sized:
    """04's form: an intermediate and a window sized by cols, read from cfg; exp_tile's [R, C] fixes cols = C."""

    @pl.function(type=pl.FunctionType.InCore)
    def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.InCore)
    def neg_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        return pl.store(pl.neg(pl.load(x, [0, 0], [R, C])), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[2], pl.INT64], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        count = pl.read(cfg, [0])
        cols = pl.read(cfg, [1])
        for i in pl.range(count):
            tmp = pl.create_tensor([R, cols], dtype=pl.FP32)
            xi = pl.slice(x, [R, cols], [i * R, 0])
            SIZED_LINE.append(next_line())
            tmp = self.exp_tile(xi, tmp)
            self.neg_tile(tmp, pl.slice(y, [R, cols], [i * R, 0]))
        return y


SIZED_LINE: list[int] = []


@pytest.mark.slow
def test_an_extent_read_at_run_time_takes_the_shape_of_the_kernel_parameter_it_is_passed_to():
    """The intermediate and the windows take exp_tile's and neg_tile's static [R, C]: one artifact, checked sizes."""
    c = ir.compile(Sized)
    assert c.task_graph is None and [tuple(q.shape) for q in c.program.scratch] == [(R, C)]
    x = _rand((N * R, C), 15)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        for count in (3, N):
            y = _poison((N * R, C))
            h(np.array([count, C], np.int64), x, y)
            np.testing.assert_allclose(y[:count * R], -np.exp(x[:count * R]), rtol=1e-6)


@pytest.mark.slow
def test_an_extent_read_at_run_time_that_disagrees_with_the_kernel_fails_the_launch_clearly():
    c = ir.compile(Sized)
    x = _rand((N * R, C), 16)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        with pytest.raises(PtoError, match=rf"'x' of exp_tile: extent 1 read at run time is not {C} "
                                           rf"at test_orch_runtime_bounds.py:{SIZED_LINE[0]}"):
            h(np.array([2, C // 2], np.int64), x, _poison((N * R, C)))
        y = _poison((N * R, C))
        h(np.array([2, C], np.int64), x, y)  # the worker keeps working
        np.testing.assert_allclose(y[:2 * R], -np.exp(x[:2 * R]), rtol=1e-6)


def test_an_extent_read_at_run_time_must_meet_a_static_kernel_parameter_first():
    """A pending tensor is for kernel calls: its shape is asked for before one fixed it, at the user's line."""
    from helpers.located import assert_at, next_line
    from pypto_async.errors import PtoCompileError

    where = []

    @pl.program
    class Early:
        @pl.function(type=pl.FunctionType.InCore)
        def exp_tile(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            return pl.store(pl.exp(pl.load(x, [0, 0], [R, C])), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, cfg: pl.Tensor[[1], pl.INT64], x: pl.Tensor[[R, C], pl.FP32],
                 y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            cols = pl.read(cfg, [0])
            tmp = pl.create_tensor([R, cols], dtype=pl.FP32)
            where.append(next_line())
            self.exp_tile(x, pl.slice(tmp, [R, C], [0, 0]))
            return y

    with pytest.raises(PtoCompileError) as ei:
        ir.compile(Early)
    assert_at(ei, where[0], "its shape is read when the program runs; pass it to a kernel first")


@pl.program
class Scaled:
    """PyPTO's 09 scale: an FP32 element read by the orchestration, handed to each task's float scalar."""

    @pl.function(type=pl.FunctionType.InCore)
    def axpb(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
             a: pl.Scalar[pl.FP32], b: pl.Scalar[pl.FP32]):
        return pl.store(pl.add(pl.mul(pl.load(x, [0, 0], [R, C]), a), b), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], scale: pl.Tensor[[2], pl.FP32], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        a: pl.Scalar[pl.FP32] = pl.read(scale, [0])
        for i in pl.range(pl.read(cfg, [0])):
            b = pl.read(scale, [1])  # read again in each iteration
            self.axpb(pl.slice(x, [R, C], [i * R, 0]), pl.slice(y, [R, C], [i * R, 0]), a, b)
        return y


def test_a_float_the_orchestration_reads_is_captured_by_each_task_that_uses_it():
    c = ir.compile(Scaled)
    assert c.task_graph is None
    x = _rand((N * R, C), 17)
    rng = np.random.default_rng(18)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        for count in (N, 3):
            scale = rng.standard_normal(2).astype(np.float32)
            y = _poison((N * R, C))
            h(np.array([count], np.int32), scale, x, y)
            np.testing.assert_allclose(y[:count * R], x[:count * R] * scale[0] + scale[1], rtol=1e-6)


def test_a_float_the_orchestration_reads_is_a_value_for_a_kernel_only():
    from pypto_async.errors import PtoCompileError

    @pl.program
    class Misused:
        @pl.function(type=pl.FunctionType.InCore)
        def scaled(self, x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]],
                   n: pl.Scalar[pl.INDEX]):
            return pl.store(pl.mul(pl.load(x, [0, 0], [R, C]), 2.0), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, scale: pl.Tensor[[1], pl.FP32], x: pl.Tensor[[R, C], pl.FP32],
                 y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
            self.scaled(x, y, pl.read(scale, [0]))
            return y

    with pytest.raises(PtoCompileError, match="parameter 'n' is a INT64 scalar, got <FP32 scalar read from 'scale'"):
        ir.compile(Misused)


@pl.program
class Clustered:
    """09's dispatch forms: pl.spmd(core_num=, sync_start=) alone and inside pl.cluster(), blocks striding a batch."""

    @pl.function(type=pl.FunctionType.InCore)
    def exp_rows(self, x: pl.Tensor[[N * R, C], pl.FP32], y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]],
                 n: pl.Scalar[pl.INDEX]):
        for b in pl.range(pl.tile.get_block_idx(), n, pl.tile.get_block_num()):
            y = pl.store(pl.exp(pl.load(x, [b * R, 0], [R, C])), [b * R, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def update(self, y: pl.InOut[pl.Tensor[[N * R, C], pl.FP32]], n: pl.Scalar[pl.INDEX],
               first: pl.Scalar[pl.INDEX]):
        # 09's SpmdOnlineUpdate: each branch of an if on a runtime scalar has a loop binding b.
        if first != 0:
            for b in pl.range(pl.tile.get_block_idx(), n, pl.tile.get_block_num()):
                y = pl.store(pl.mul(pl.load(y, [b * R, 0], [R, C]), 2.0), [b * R, 0], y)
        else:
            for b in pl.range(pl.tile.get_block_idx(), n, pl.tile.get_block_num()):
                y = pl.store(pl.neg(pl.load(y, [b * R, 0], [R, C])), [b * R, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[2], pl.INT32], x: pl.Tensor[[N * R, C], pl.FP32],
             y: pl.Out[pl.Tensor[[N * R, C], pl.FP32]]):
        n = pl.read(cfg, [0])
        with pl.spmd(core_num=3, sync_start=True):
            y = self.exp_rows(x, y, n)
        with pl.cluster():
            with pl.spmd(core_num=3):
                y = self.update(y, n, pl.read(cfg, [1]))
        return y


@pytest.mark.slow
def test_spmd_dispatches_by_core_num_inside_and_outside_a_cluster_run_every_block():
    c = ir.compile(Clustered)
    x = _rand((N * R, C), 19)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        for n, first in ((N, 1), (5, 0)):
            y = _poison((N * R, C))
            before = h.program_stats()["tasks"]
            h(np.array([n, first], np.int32), x, y)
            want = np.exp(x[:n * R]) * (2.0 if first else -1.0)
            np.testing.assert_allclose(y[:n * R], want, rtol=1e-6)
            assert h.program_stats()["tasks"] - before == 2  # one task of 3 blocks per dispatch


def test_a_cluster_takes_no_per_task_metadata_and_groups_only_an_orchestration():
    from pypto_async.errors import PtoCompileError, PtoNotSupported

    def build(form):
        @pl.program
        class P:
            @pl.function(type=pl.FunctionType.InCore)
            def k(self, y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
                pl.tile.get_block_idx()
                return pl.store(pl.full([R, C], 1.0, pl.FP32), [0, 0], y)

            @pl.function(type=pl.FunctionType.Orchestration)
            def orch(self, y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
                with pl.cluster():
                    if form == "tid":
                        with pl.spmd(2) as tid:  # noqa: F841
                            y = self.k(y)
                    else:
                        with pl.spmd(2, allow_early_resolve=True):
                            y = self.k(y)
                return y

        return P

    with pytest.raises(PtoCompileError, match=r"cannot capture a TaskId when nested inside `pl.cluster\(\)`"):
        ir.compile(build("tid"))
    with pytest.raises(PtoCompileError, match=r"allow_early_resolve=True\)` cannot be nested inside `pl.cluster"):
        ir.compile(build("early"))

    @pl.jit
    def in_a_kernel(y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        with pl.cluster():
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.full([R, C], 1.0, pl.FP32), [0, 0], y)

    with pytest.raises(PtoNotSupported, match="groups the kernel calls of a @pl.program's orchestration only"):
        in_a_kernel(_poison((R, C)))
