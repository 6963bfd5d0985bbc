"""A multi-chip (L3) program with its ranks on Ray actors: pypto_async.ray.run_program.

Rank 0 runs on the head node's actor, rank 1 on the second node's; every
cross-rank operation moves its data between them as Ray objects.  The
results are compared against numpy on random data (outputs poisoned) and
against the same program run in this process on a DistributedWorker.
"""

# no ``from __future__ import annotations``: the programs' annotations name module constants only,
# but the kernels are traced from their signatures
import numpy as np
import pytest

import pypto_async.language as pl
import pypto_async.language.distributed as pld
from pypto_async.errors import PtoArgumentError, PtoInvalidStateError
from pypto_async.ir.distributed_compiled_program import DistributedConfig
from pypto_async.ray import run_program
from pypto_async.runtime import RunConfig

pytestmark = pytest.mark.slow  # a two-node Ray cluster: seconds to start

N, C = 2, 16
rng = np.random.default_rng(2026)
CFG = RunConfig(platform="sim", distributed_config=DistributedConfig(device_ids=[0, 1]))


@pl.jit.incore
def _everything(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[3 + N, C], pl.FP32]],
                data: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
                acc: pld.DistributedTensor[[1, C], pl.FP32], rows: pld.DistributedTensor[[N, C], pl.FP32],
                sig: pld.DistributedTensor[[1, 1], pl.INT32], bar: pld.DistributedTensor[[N], pl.INT32]):
    ctx = pld.get_comm_ctx(data)
    me, n = pld.rank(ctx), pld.nranks(ctx)
    t = pl.load(x, [0, 0], [1, C])
    data = pl.store(pl.mul(t, 2.0), [0, 0], data)
    acc = pl.store(t, [0, 0], acc)
    bar = pld.tensor.barrier(bar)
    got = pld.tile.remote_load(data, peer=(me + 1) % n, offsets=[0, 0], shape=[1, C])
    y = pl.store(got, [0, 0], y)
    pld.tensor.put(inbox, peer=(me + 1) % n, src=data)
    pld.system.notify(sig, peer=(me + 1) % n, offsets=[0, 0], value=1, op=pld.NotifyOp.AtomicAdd)
    pld.system.wait(sig, offsets=[0, 0], expected=1, cmp=pld.WaitCmp.Ge)
    y = pl.store(pl.load(inbox, [0, 0], [1, C]), [1, 0], y)
    acc = pld.tensor.allreduce(acc, bar, op=pld.ReduceOp.Sum)
    y = pl.store(pl.load(acc, [0, 0], [1, C]), [2, 0], y)
    rows = pld.tensor.allgather(x, rows, bar)
    y = pl.store(pl.load(rows, [0, 0], [N, C]), [3, 0], y)
    return y


@pl.jit
def _everything_chip(x: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[3 + N, C], pl.FP32]],
                     data: pld.DistributedTensor[[1, C], pl.FP32], inbox: pld.DistributedTensor[[1, C], pl.FP32],
                     acc: pld.DistributedTensor[[1, C], pl.FP32], rows: pld.DistributedTensor[[N, C], pl.FP32],
                     sig: pld.DistributedTensor[[1, 1], pl.INT32], bar: pld.DistributedTensor[[N], pl.INT32]):
    return _everything(x, y, data, inbox, acc, rows, sig, bar)


@pl.jit.incore
def _read_back(w: pld.DistributedTensor[[1, C], pl.FP32], z: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
    return pl.store(pl.load(w, [0, 0], [1, C]), [0, 0], z)


@pl.jit
def _read_back_chip(w: pld.DistributedTensor[[1, C], pl.FP32], z: pl.Out[pl.Tensor[[1, C], pl.FP32]]):
    return _read_back(w, z)


@pl.jit.host
def everything(x: pl.Tensor[[N, 1, C], pl.FP32], y: pl.Out[pl.Tensor[[N, 3 + N, C], pl.FP32]],
               z: pl.Out[pl.Tensor[[N, 1, C], pl.FP32]]):
    bufs = [pld.alloc_window_buffer([1, C], dtype=pl.FP32) for _ in range(3)]
    rows = pld.alloc_window_buffer([N, C], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
    bar = pld.alloc_window_buffer([N], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _everything_chip(x[r], y[r], *(pld.window(b, [1, C]) for b in bufs), pld.window(rows, [N, C]),
                         pld.window(sig, [1, 1]), pld.window(bar, [N]), device=r)
    data = pld.window(bufs[0], [1, C])
    data = pld.tensor.allreduce(data, op=pld.ReduceOp.Max)  # a host orchestrator's collective, between dispatches
    for r in pl.range(pld.world_size()):
        _read_back_chip(data, z[r], device=r)


def _want(x):
    y = np.empty((N, 3 + N, C), np.float32)
    for r in range(N):
        y[r, 0] = 2 * x[(r + 1) % N, 0]  # remote_load of the next rank's window
        y[r, 1] = 2 * x[(r - 1) % N, 0]  # put by the previous rank
        y[r, 2] = x[:, 0].sum(axis=0)
        y[r, 3:] = x[:, 0]
    z = np.broadcast_to((2 * x).max(axis=0), (N, 1, C))
    return y, z


@pytest.mark.asyncio
async def test_a_program_runs_with_its_ranks_on_actors_of_two_nodes(ray_session, actors):
    a, b = actors
    nodes = {await a.where.remote(), await b.where.remote()}
    assert len({n for n, _ in nodes}) == 2  # one rank per machine (node) of the cluster
    x = rng.standard_normal((N, 1, C)).astype(np.float32)
    y, z = np.full((N, 3 + N, C), np.nan, np.float32), np.full((N, 1, C), np.nan, np.float32)
    compiled = everything.compile(x, y, z, config=CFG)
    await run_program(compiled, [a, b], x, y, z)
    want_y, want_z = _want(x)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)
    y2, z2 = np.full_like(y, np.nan), np.full_like(z, np.nan)
    await compiled.run_async(x, y2, z2)  # the same program in this process, on a DistributedWorker
    np.testing.assert_allclose(y, y2, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(z, z2)
    # the actors hold nothing of the run afterwards, and work on
    x3 = rng.standard_normal((N, 1, C)).astype(np.float32)
    await run_program(compiled, [b, a], x3, y, z)  # rank 0 on the second node now
    np.testing.assert_allclose(y, _want(x3)[0], rtol=1e-5, atol=1e-6)


@pl.jit.incore
def _stuck(y: pl.Out[pl.Tensor[[1, C], pl.FP32]], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    pld.system.wait(sig, offsets=[0, 0], expected=1, cmp=pld.WaitCmp.Ge)  # nobody notifies
    return pl.store(pl.full([1, C], 1.0, pl.FP32), [0, 0], y)


@pl.jit
def _stuck_chip(y: pl.Out[pl.Tensor[[1, C], pl.FP32]], sig: pld.DistributedTensor[[1, 1], pl.INT32]):
    return _stuck(y, sig)


@pl.jit.host
def stuck(y: pl.Out[pl.Tensor[[N, 1, C], pl.FP32]]):
    sig = pld.alloc_window_buffer([1, 1], dtype=pl.INT32)
    for r in pl.range(pld.world_size()):
        _stuck_chip(y[r], pld.window(sig, [1, 1]), device=r)


@pytest.mark.asyncio
async def test_a_deadlock_on_actors_is_an_error_and_writes_no_output(ray_session, actors):
    y = np.full((N, 1, C), np.nan, np.float32)
    compiled = stuck.compile(y, config=CFG)
    with pytest.raises(PtoInvalidStateError, match="deadlocked: rank 0 at wait"):
        await run_program(compiled, list(actors), y)
    assert np.isnan(y).all()
    with pytest.raises(PtoArgumentError, match="one ChipActor handle per rank"):
        await run_program(compiled, [actors[0]], y)


M = 16


@pl.program
class _WithCallback:
    @pl.function(type=pl.FunctionType.InCore)
    def scale(self, a: pl.Tensor[[M, M], pl.FP32], f: pl.Out[pl.Tensor[[M, M], pl.FP32]]) -> pl.Tensor[[M, M], pl.FP32]:
        return pl.store(pl.mul(pl.load(a, [0, 0], [M, M]), 3.0), [0, 0], f)

    @pl.function(type=pl.FunctionType.Orchestration)
    def chip(self, a: pl.Tensor[[M, M], pl.FP32], f: pl.Out[pl.Tensor[[M, M], pl.FP32]]) -> pl.Tensor[[M, M], pl.FP32]:
        return self.scale(a, f)

    @pl.function(level=pl.Level.HOST, role=pl.Role.SubWorker)
    def check(f: pl.Tensor[[M, M], pl.FP32]):
        """Bound at run_program(callbacks=)."""
        ...

    @pl.function(level=pl.Level.HOST, role=pl.Role.Orchestrator)
    def host(self, a: pl.Tensor[[M, M], pl.FP32], f: pl.Out[pl.Tensor[[M, M], pl.FP32]]):
        out = self.chip(a, f, device=1)
        self.check(out)


@pytest.mark.asyncio
async def test_a_callback_on_actors_sees_the_chip_result_in_the_callers_arrays(ray_session, actors):
    from pypto_async import ir

    compiled = ir.compile(_WithCallback, platform="sim",
                          distributed_config=DistributedConfig(device_ids=[0, 1], num_sub_workers=1))
    a = rng.standard_normal((M, M)).astype(np.float32)
    f = np.full((M, M), np.nan, np.float32)
    seen = []
    with pytest.raises(PtoArgumentError, match="must be bound"):
        await run_program(compiled, list(actors), a, f)
    await run_program(compiled, list(actors), a, f, callbacks={"check": lambda args: seen.append(np.array(args[0].array))})
    np.testing.assert_allclose(seen[0], 3 * a, rtol=1e-6)  # rank 1's output, on this host before the callback
    np.testing.assert_allclose(f, 3 * a, rtol=1e-6)
