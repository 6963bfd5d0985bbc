"""PyPTO's forms in multi-chip programs: scalars a dispatch fixes, padded staging tiles, world-size shapes.

Each program is PyPTO's form of a per-rank step, run on 2 ranks (4 in the
slow tier) against numpy on random data, outputs poisoned first.
"""

# no ``from __future__ import annotations``: the programs' annotations name the factories' locals (n)
import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async.ir.distributed_compiled_program import DistributedConfig
from pypto_async.runtime import RunConfig

C = 16
RANKS = [2, pytest.param(4, marks=pytest.mark.slow)]
rng = np.random.default_rng(2614)


def _cfg(n: int) -> RunConfig:
    return RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))


def _poisoned(shape):
    return np.full(shape, np.nan, np.float32)


def _scalar_program(n: int):
    """Each rank gets ``my_rank`` and ``chunk`` from the host: a load offset, and a remote load's box."""

    @pl.program
    class ScalarOffsets:
        @pl.function(type=pl.FunctionType.InCore)
        def step(self, x: pl.Tensor[[n, n * C], pl.FP32], y: pl.Out[pl.Tensor[[2, C], pl.FP32]],
                 win: pl.InOut[pld.DistributedTensor[[1, n * C], pl.FP32]],
                 sig: pl.InOut[pld.DistributedTensor[[n], pl.INT32]],
                 my_rank: pl.Scalar[pl.INT32], chunk: pl.Scalar[pl.INDEX]) -> pl.Tensor[[2, C], pl.FP32]:
            win = pl.store(pl.load(x, [my_rank, 0], [1, n * C]), [0, 0], win)  # a runtime offset: row my_rank
            for p in pl.range(n):  # PyPTO's hand-written barrier: decided per rank while tracing
                if p != my_rank:
                    pld.system.notify(target=sig, peer=p, offsets=[my_rank], value=1, op=pld.NotifyOp.AtomicAdd)
            for p in pl.range(n):
                if p != my_rank:
                    pld.system.wait(signal=sig, offsets=[p], expected=1, cmp=pld.WaitCmp.Ge)
            right = (my_rank + 1) % n  # fixed for this rank: its dispatch gave my_rank an int
            got = pld.tile.remote_load(win, peer=right, offsets=[0, my_rank * chunk], shape=[1, C])
            y = pl.store(got, [0, 0], y)
            mine = pl.load(win, [0, right * chunk], [1, C])  # a runtime offset over two scalars
            return pl.store(mine, [1, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def chip(self, x: pl.Tensor[[n, n * C], pl.FP32], y: pl.Out[pl.Tensor[[2, C], pl.FP32]],
                 win: pl.InOut[pld.DistributedTensor[[1, n * C], pl.FP32]],
                 sig: pl.InOut[pld.DistributedTensor[[n], pl.INT32]],
                 my_rank: pl.Scalar[pl.INT32], chunk: pl.Scalar[pl.INDEX]) -> pl.Tensor[[2, C], pl.FP32]:
            return self.step(x, y, win, sig, my_rank, chunk)

        @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
        def host(self, xs: pl.Tensor[[n, n, n * C], pl.FP32],
                 ys: pl.Out[pl.Tensor[[n, 2, C], pl.FP32]]) -> pl.Tensor[[n, 2, C], pl.FP32]:
            wb = pld.alloc_window_buffer(n * C * pl.FP32.get_byte())
            sb = pld.alloc_window_buffer(n * pl.INT32.get_byte())
            for r in pl.range(pld.world_size()):
                self.chip(xs[r], ys[r], pld.window(wb, [1, n * C], dtype=pl.FP32),
                          pld.window(sb, [n], dtype=pl.INT32), r, C, device=r)
            return ys

    return ScalarOffsets


@pytest.mark.slow
@pytest.mark.parametrize("n", RANKS)
def test_scalars_a_dispatch_gives_are_offsets_and_remote_boxes(n):
    from pypto_async import ir

    xs = rng.standard_normal((n, n, n * C)).astype(np.float32)
    ys = _poisoned((n, 2, C))
    ir.compile(_scalar_program(n), platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))(
        xs, ys)
    for r in range(n):
        right = (r + 1) % n
        np.testing.assert_array_equal(ys[r, 0], xs[right, right, r * C:(r + 1) * C])
        np.testing.assert_array_equal(ys[r, 1], xs[r, r, right * C:(right + 1) * C])


NR = pl.dynamic("world_size")


@pl.program
class GatherRows:
    """PyPTO's rank-count dim: ``NR`` sizes the windows (``alloc_window_buffer(NR * C * 4)``) and bounds the loops.

    Each rank stages its row, and one padded element ([8, 1] valid [1, 1], PyPTO's 32-byte staging of a single
    value) into a [1, 1] window; after an allgather every rank reads every row back.
    """

    @pl.function(type=pl.FunctionType.InCore)
    def step(self, x: pl.Tensor[[1, C], pl.FP32], one: pl.Tensor[[1, 1], pl.FP32],
             y: pl.Out[pl.Tensor[[NR, C], pl.FP32]], z: pl.Out[pl.Tensor[[1, 1], pl.FP32]],
             row: pl.InOut[pld.DistributedTensor[[1, C], pl.FP32]],
             cell: pl.InOut[pld.DistributedTensor[[1, 1], pl.FP32]],
             win: pl.InOut[pld.DistributedTensor[[NR, C], pl.FP32]],
             sig: pl.InOut[pld.DistributedTensor[[NR], pl.INT32]]) -> pl.Tensor[[NR, C], pl.FP32]:
        row = pl.store(pl.load(x, [0, 0], [1, C]), [0, 0], row)
        cell = pl.store(pl.load(one, [0, 0], [8, 1], valid_shape=[1, 1]), [0, 0], cell)
        win = pld.tensor.allgather(row, win, sig)
        for r in pl.range(NR):
            y = pl.store(pl.load(win, [r, 0], [1, C]), [r, 0], y)
        got = pl.load(cell, [0, 0], [8, 1], valid_shape=[1, 1])
        z = pl.store(pl.add(got, 1.0), [0, 0], z)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, x: pl.Tensor[[1, C], pl.FP32], one: pl.Tensor[[1, 1], pl.FP32],
             y: pl.Out[pl.Tensor[[NR, C], pl.FP32]], z: pl.Out[pl.Tensor[[1, 1], pl.FP32]],
             row: pl.InOut[pld.DistributedTensor[[1, C], pl.FP32]],
             cell: pl.InOut[pld.DistributedTensor[[1, 1], pl.FP32]],
             win: pl.InOut[pld.DistributedTensor[[NR, C], pl.FP32]],
             sig: pl.InOut[pld.DistributedTensor[[NR], pl.INT32]]) -> pl.Tensor[[NR, C], pl.FP32]:
        return self.step(x, one, y, z, row, cell, win, sig)

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, xs: pl.Tensor[[NR, 1, C], pl.FP32], ones: pl.Tensor[[NR, 1, 1], pl.FP32],
             ys: pl.Out[pl.Tensor[[NR, NR, C], pl.FP32]],
             zs: pl.Out[pl.Tensor[[NR, 1, 1], pl.FP32]]) -> pl.Tensor[[NR, NR, C], pl.FP32]:
        rb = pld.alloc_window_buffer(C * pl.FP32.get_byte())
        cb = pld.alloc_window_buffer(pl.FP32.get_byte())
        wb = pld.alloc_window_buffer(NR * C * pl.FP32.get_byte())  # a dim expression: the rank count's bytes
        sb = pld.alloc_window_buffer(NR * pl.INT32.get_byte())
        for r in pl.range(NR):
            self.chip(xs[r], ones[r], ys[r], zs[r], pld.window(rb, [1, C], dtype=pl.FP32),
                      pld.window(cb, [1, 1], dtype=pl.FP32), pld.window(wb, [NR, C], dtype=pl.FP32),
                      pld.window(sb, [NR], dtype=pl.INT32), device=r)
        return ys


@pytest.mark.slow
@pytest.mark.parametrize("n", RANKS)
def test_the_rank_count_dim_sizes_windows_and_bounds_loops_and_a_padded_tile_fills_one_cell(n):
    from pypto_async import ir

    xs = rng.standard_normal((n, 1, C)).astype(np.float32)
    ones = rng.standard_normal((n, 1, 1)).astype(np.float32)
    ys, zs = _poisoned((n, n, C)), _poisoned((n, 1, 1))
    ir.compile(GatherRows, platform="sim", distributed_config=DistributedConfig(device_ids=list(range(n))))(
        xs, ones, ys, zs)
    np.testing.assert_array_equal(ys, np.broadcast_to(xs[:, 0, :], (n, n, C)))
    np.testing.assert_array_equal(zs, ones + 1)


def _bf16_program(n: int):
    """Each rank remote-stores its BF16 row into its right neighbour's window, then a barrier; all read back."""

    @pl.program
    class Bf16Push:
        @pl.function(type=pl.FunctionType.InCore)
        def step(self, x: pl.Tensor[[n, C], pl.BF16], y: pl.Out[pl.Tensor[[n, C], pl.BF16]],
                 win: pl.InOut[pld.DistributedTensor[[n, C], pl.BF16]],
                 sig: pl.InOut[pld.DistributedTensor[[n], pl.INT32]],
                 my_rank: pl.Scalar[pl.INT32]) -> pl.Tensor[[n, C], pl.BF16]:
            row = pl.load(x, [my_rank, 0], [1, C])
            pld.tile.remote_store(row, target=win, peer=(my_rank + 1) % n, offsets=[my_rank, 0])
            pld.tensor.barrier(sig)
            return pl.store(pl.load(win, [0, 0], [n, C]), [0, 0], y)

        @pl.function(type=pl.FunctionType.Orchestration)
        def chip(self, x: pl.Tensor[[n, C], pl.BF16], y: pl.Out[pl.Tensor[[n, C], pl.BF16]],
                 win: pl.InOut[pld.DistributedTensor[[n, C], pl.BF16]],
                 sig: pl.InOut[pld.DistributedTensor[[n], pl.INT32]],
                 my_rank: pl.Scalar[pl.INT32]) -> pl.Tensor[[n, C], pl.BF16]:
            return self.step(x, y, win, sig, my_rank)

        @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
        def host(self, xs: pl.Tensor[[n, n, C], pl.BF16],
                 ys: pl.Out[pl.Tensor[[n, n, C], pl.BF16]]) -> pl.Tensor[[n, n, C], pl.BF16]:
            wb = pld.alloc_window_buffer(n * C * pl.BF16.get_byte())
            sb = pld.alloc_window_buffer(n * pl.INT32.get_byte())
            for r in pl.range(pld.world_size()):
                self.chip(xs[r], ys[r], pld.window(wb, [n, C], dtype=pl.BF16), pld.window(sb, [n], dtype=pl.INT32),
                          r, device=r)
            return ys

    return Bf16Push


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as the uint16 bits of their bfloat16 (round to nearest even; no NaN here)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# torch's import is seconds on a loaded machine: its form is in the slow tier, the uint16 one in the fast
@pytest.mark.parametrize("form", ["uint16", pytest.param("torch", marks=pytest.mark.slow)])
@pytest.mark.parametrize("n", RANKS)
def test_bf16_parameters_take_torch_bfloat16_or_their_uint16_bits(n, form):
    from pypto_async import ir

    compiled = ir.compile(_bf16_program(n), platform="sim",
                          distributed_config=DistributedConfig(device_ids=list(range(n))))
    bits = _bf16_bits(rng.standard_normal((n, n, C)))
    want = np.zeros((n, n, C), np.uint16)  # rows nobody pushed to stay as the zeroed window: 0
    for r in range(n):
        left = (r - 1) % n
        want[r, left] = bits[left, left]  # rank r's window row `left`: its left neighbour's own row
    if form == "torch":
        import torch

        xs = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
        ys = torch.full((n, n, C), float("nan"), dtype=torch.bfloat16)
        compiled(xs, ys)  # torch bfloat16 in and out
        np.testing.assert_array_equal(ys.view(torch.int16).numpy().view(np.uint16), want)
    else:
        raw = np.full((n, n, C), 0x7FC1, np.uint16)  # a NaN's bits: poisoned
        compiled(bits, raw)  # numpy has no bfloat16: the values as their uint16 bits
        np.testing.assert_array_equal(raw, want)


MR = 3  # max_recv: the rows of one block


def _a2av_program(n: int, host_level: bool):
    """PyPTO's all_to_all_v: blocks of MR rows, counts published (clamped to MR) into recv_counts."""

    @pl.program
    class AllToAllV:
        @pl.function(type=pl.FunctionType.InCore)
        def step(self, inp: pl.Tensor[[n * MR, C], pl.FP32], counts: pl.Tensor[[n, 1], pl.INT32],
                 y: pl.Out[pl.Tensor[[n * MR, C], pl.FP32]], got: pl.Out[pl.Tensor[[n, 1], pl.INT32]],
                 stage: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                 scount: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                 data: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                 sig: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                 recv: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]]) -> pl.Tensor[[n * MR, C], pl.FP32]:
            if host_level:  # stage into windows; the host runs the exchange between this dispatch and the next
                stage = pl.store(pl.load(inp, [0, 0], [n * MR, C]), [0, 0], stage)
                scount = pl.store(pl.load(counts, [0, 0], [n, 1]), [0, 0], scount)
                return y
            data = pld.tensor.all_to_all_v(inp, data, sig, counts, recv)
            return self_read(data, recv, y, got)

        @pl.function(type=pl.FunctionType.InCore)
        def back(self, data: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                 recv: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                 y: pl.Out[pl.Tensor[[n * MR, C], pl.FP32]],
                 got: pl.Out[pl.Tensor[[n, 1], pl.INT32]]) -> pl.Tensor[[n * MR, C], pl.FP32]:
            return self_read(data, recv, y, got)

        @pl.function(type=pl.FunctionType.Orchestration)
        def chip(self, inp: pl.Tensor[[n * MR, C], pl.FP32], counts: pl.Tensor[[n, 1], pl.INT32],
                 y: pl.Out[pl.Tensor[[n * MR, C], pl.FP32]], got: pl.Out[pl.Tensor[[n, 1], pl.INT32]],
                 stage: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                 scount: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                 data: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                 sig: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                 recv: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]]) -> pl.Tensor[[n * MR, C], pl.FP32]:
            return self.step(inp, counts, y, got, stage, scount, data, sig, recv)

        @pl.function(type=pl.FunctionType.Orchestration)
        def read_chip(self, data: pl.InOut[pld.DistributedTensor[[n * MR, C], pl.FP32]],
                      recv: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
                      y: pl.Out[pl.Tensor[[n * MR, C], pl.FP32]],
                      got: pl.Out[pl.Tensor[[n, 1], pl.INT32]]) -> pl.Tensor[[n * MR, C], pl.FP32]:
            return self.back(data, recv, y, got)

        @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
        def host(self, xs: pl.Tensor[[n, n * MR, C], pl.FP32], cs: pl.Tensor[[n, n, 1], pl.INT32],
                 ys: pl.Out[pl.Tensor[[n, n * MR, C], pl.FP32]],
                 gots: pl.Out[pl.Tensor[[n, n, 1], pl.INT32]]) -> pl.Tensor[[n, n * MR, C], pl.FP32]:
            bufs = [pld.alloc_window_buffer(n * MR * C * 4), pld.alloc_window_buffer(n * 4),
                    pld.alloc_window_buffer(n * MR * C * 4), pld.alloc_window_buffer(n * 4),
                    pld.alloc_window_buffer(n * 4)]
            shapes = [[n * MR, C], [n, 1], [n * MR, C], [n, 1], [n, 1]]
            dts = [pl.FP32, pl.INT32, pl.FP32, pl.INT32, pl.INT32]
            for r in pl.range(n):
                views = [pld.window(b, s, dtype=d) for b, s, d in zip(bufs, shapes, dts)]
                self.chip(xs[r], cs[r], ys[r], gots[r], *views, device=r)
            if host_level:
                stage, scount, data, sig, recv = [pld.window(b, s, dtype=d) for b, s, d in zip(bufs, shapes, dts)]
                data = pld.tensor.all_to_all_v(stage, data, sig, scount, recv)
                for r in pl.range(n):
                    self.read_chip(data, recv, ys[r], gots[r], device=r)
            return ys

    return AllToAllV


def self_read(data, recv, y, got):
    """Copy the received counts out, and each sender's block up to its count (rows past it stay poisoned)."""
    n = recv.shape[0]
    for src in pl.range(n):
        k = pl.read(recv, [src, 0])
        pl.write(got, [src, 0], k)
        for i in pl.range(pl.cast(k, pl.INDEX)):
            y = pl.store(pl.load(data, [src * MR + i, 0], [1, C]), [src * MR + i, 0], y)
    return y


@pytest.mark.slow
@pytest.mark.parametrize("host_level", [False, True], ids=["per-device", "host"])
@pytest.mark.parametrize("n", RANKS)
def test_all_to_all_v_moves_each_block_and_publishes_clamped_counts(n, host_level):
    from pypto_async import ir

    xs = rng.standard_normal((n, n * MR, C)).astype(np.float32)
    cs = rng.integers(0, MR + 2, (n, n, 1)).astype(np.int32)  # some above MR: published as MR
    cs[0, n - 1, 0] = MR + 1
    ys, gots = _poisoned((n, n * MR, C)), np.full((n, n, 1), -7, np.int32)
    ir.compile(_a2av_program(n, host_level), platform="sim",
               distributed_config=DistributedConfig(device_ids=list(range(n))))(xs, cs, ys, gots)
    for r in range(n):
        for src in range(n):
            k = min(int(cs[src, r, 0]), MR)
            assert gots[r, src, 0] == k
            np.testing.assert_array_equal(ys[r, src * MR:src * MR + k], xs[src, r * MR:r * MR + k])
            assert np.isnan(ys[r, src * MR + k:(src + 1) * MR]).all()  # past the count: not read back


_CALLS: list = []


@pl.program
class Verified:
    """A chip step, then a concrete SubWorker (``verify``) that prepare(callbacks=) may replace."""

    @pl.function(type=pl.FunctionType.InCore)
    def add(self, a: pl.Tensor[[4, C], pl.FP32], b: pl.Tensor[[4, C], pl.FP32],
            f: pl.Out[pl.Tensor[[4, C], pl.FP32]]) -> pl.Tensor[[4, C], pl.FP32]:
        return pl.store(pl.add(pl.load(a, [0, 0], [4, C]), pl.load(b, [0, 0], [4, C])), [0, 0], f)

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, a: pl.Tensor[[4, C], pl.FP32], b: pl.Tensor[[4, C], pl.FP32],
             f: pl.Out[pl.Tensor[[4, C], pl.FP32]]) -> pl.Tensor[[4, C], pl.FP32]:
        return self.add(a, b, f)

    @pl.function(level=pl.Level.HOST, role=pl.Role.SubWorker)
    def verify(f: pl.Tensor[[4, C], pl.FP32]):
        _CALLS.append("generated")

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, a: pl.Tensor[[4, C], pl.FP32], b: pl.Tensor[[4, C], pl.FP32], f: pl.Out[pl.Tensor[[4, C], pl.FP32]]):
        out = self.chip(a, b, f, device=0)
        self.verify(out)


@pytest.mark.parametrize("keyword", ["callbacks", "sub_worker_overrides"])
def test_a_prepared_callback_replaces_a_concrete_sub_workers_body(keyword):
    from pypto_async import ir
    from pypto_async.errors import PtoArgumentError

    compiled = ir.compile(Verified, platform="sim",
                          distributed_config=DistributedConfig(device_ids=[0], num_sub_workers=1))
    a, b = rng.standard_normal((4, C)).astype(np.float32), rng.standard_normal((4, C)).astype(np.float32)
    f = _poisoned((4, C))
    _CALLS.clear()
    seen = []
    with compiled.prepare(**{keyword: {"verify": lambda args: seen.append(np.array(args[0].array))}}) as rt:
        rt(a, b, f)
    assert _CALLS == []  # the generated body did not run: the closure did, on the chip's result
    np.testing.assert_array_equal(seen[0], a + b)
    np.testing.assert_array_equal(f, a + b)
    with compiled.prepare() as rt:  # unbound: the generated body
        rt(a, b, f)
    assert _CALLS == ["generated"]
    with pytest.raises(PtoArgumentError, match=r"\['nope'\] are not sub-workers"):
        compiled.prepare(**{keyword: {"nope": print}})
    with pytest.raises(PtoArgumentError, match="not both"):
        compiled.prepare(callbacks={}, sub_worker_overrides={})
    with pytest.raises(PtoArgumentError, match="startup_timeout_s"):
        compiled.prepare(startup_timeout_s=0)


@pl.program
class Accumulate:
    """Each run adds its input into a window and reads the window back: what a kept window holds shows."""

    @pl.function(type=pl.FunctionType.InCore)
    def step(self, x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
             win: pl.InOut[pld.DistributedTensor[[1, C], pl.FP32]]) -> pl.Tensor[[1, C], pl.FP32]:
        acc = pl.add(pl.load(win, [0, 0], [1, C]), pl.load(x, [0, 0], [1, C]))
        win = pl.store(acc, [0, 0], win)
        return pl.store(acc, [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[1, C], pl.FP32]],
             win: pl.InOut[pld.DistributedTensor[[1, C], pl.FP32]]) -> pl.Tensor[[1, C], pl.FP32]:
        return self.step(x, y, win)

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, xs: pl.Tensor[[2, 1, C], pl.FP32], ys: pl.Out[pl.Tensor[[2, 1, C], pl.FP32]]):
        wb = pld.alloc_window_buffer(C * 4)
        for r in pl.range(pld.world_size()):
            self.chip(xs[r], ys[r], pld.window(wb, [1, C], dtype=pl.FP32), device=r)


@pytest.mark.parametrize("persistent, reset", [(False, None), (True, None), (True, True), (True, False)])
def test_persistent_windows_outlive_a_run_and_are_zeroed_unless_told_not_to(persistent, reset):
    from pypto_async import ir

    compiled = ir.compile(Accumulate, platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1]))
    runs = [rng.standard_normal((2, 1, C)).astype(np.float32) for _ in range(3)]
    with compiled.prepare(persistent=persistent, reset_persistent_windows=reset) as rt:
        total = np.zeros((2, 1, C), np.float32)
        for xs in runs:
            ys = _poisoned((2, 1, C))
            rt(xs, ys)
            total = total + xs if persistent and reset is False else xs  # kept unzeroed: the runs add up
            np.testing.assert_allclose(ys, total, rtol=1e-6)


def test_a_dispatch_may_repeat_the_prepared_config_and_another_is_refused():
    from pypto_async import ir
    from pypto_async.errors import PtoNotSupported

    compiled = ir.compile(Accumulate, platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1]))
    rc = RunConfig(platform="sim", ring_task_window=64, ring_heap=8 * 1024 * 1024)
    xs = rng.standard_normal((2, 1, C)).astype(np.float32)
    with compiled.prepare(rc) as rt:
        ys = _poisoned((2, 1, C))
        rt(xs, ys, config=rc)  # PyPTO passes the prepared RunConfig to every dispatch too
        np.testing.assert_allclose(ys, xs, rtol=1e-6)
        with pytest.raises(PtoNotSupported, match="prepared with"):
            rt(xs, ys, config=RunConfig(platform="sim", ring_task_window=128))


def test_dfx_switches_write_each_dispatchs_outputs_under_its_rank(tmp_path):
    import json

    from pypto_async import ir

    compiled = ir.compile(Accumulate, platform="sim", output_dir=str(tmp_path),
                          distributed_config=DistributedConfig(device_ids=[0, 1]))
    xs = rng.standard_normal((2, 1, C)).astype(np.float32)
    ys = _poisoned((2, 1, C))
    compiled(xs, ys, config=RunConfig(platform="sim", enable_dep_gen=True, enable_scope_stats=True))
    np.testing.assert_allclose(ys, xs, rtol=1e-6)  # computes the same with the switches on
    for r in range(2):
        d = tmp_path / "dfx_outputs" / f"rank{r}" / "d0"
        deps = json.loads((d / "deps.json").read_text())
        assert deps["program"] == "chip" and [t["name"] for t in deps["tasks"]] == ["step"]
        lines = [json.loads(ln) for ln in (d / "scope_stats" / "scope_stats.jsonl").read_text().splitlines()]
        assert lines and all(ln["program"] == "chip" for ln in lines)
    assert not (tmp_path / "dfx_outputs" / "rank0" / "d1").exists()  # one dispatch per rank
