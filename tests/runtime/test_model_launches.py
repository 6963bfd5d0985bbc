"""The device model's cores: blocks of concurrent launches, and programs' tasks, placed in modeled order.

Launches of streams that do not order each other compete for the profile's
cores.  The host's core threads run their blocks in whatever order they
happen to; the model keeps each launch's blocks until no other stream can
still bring work ready before it (native/src/model.c, pti_model_park, as for
copies), then places them in block order, each on the core of its kind where
it is dispatched first (ties: the lowest).  Launches take the cores in
modeled order: ready time, then stream id.  The timeline is then the same
whatever host threads ran the blocks, and in what order.  A program's run is
kept the same way when it completes on the host, and its tasks list-scheduled
in its turn, so programs (and launches) of streams that do not order each
other take the cores, and the one orchestrator, in that order too.  Every
output is checked against numpy (the outputs start poisoned).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._profile import SIM
from pypto_async.testing import hold

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers.kernels import KernelLib  # noqa: E402

N = 256
#: Per stream, the block counts of its launches, in order.
BLOCKS = [[3, 2], [2, 3], [4]]


async def _launches(cfg: RunConfig, lib: KernelLib, blocks: list[list[int]]):
    """Each stream's launches of `add`, all held until every one is queued; return the timeline.

    The timeline: per block (stream index, launch index, block, dispatch, start,
    end, modeled core), times relative to the first dispatch, and the streams' ids.
    """
    async with ChipWorker(cfg) as w:
        streams = [w.stream() for _ in blocks]
        ks = {b: w.register(lib.get("add", N, blocks=b)) for row in blocks for b in row}
        rng = np.random.default_rng(5)
        xs = [[rng.standard_normal(N).astype(np.float32) for _ in row] for row in blocks]
        ins = [[w.alloc_tensor(N, np.float32, init=x) for x in row] for row in xs]
        outs = [[w.alloc_tensor(N, np.float32, init=np.full(N, np.nan, np.float32)) for _ in row] for row in blocks]
        await w.default_stream
        async with w.trace() as tr:
            with hold(streams[0]) as latch:
                gate = streams[0].record()  # when the hold ends: every stream's first launch is ready then
                for s in streams[1:]:
                    s.wait(gate)
                done = [ks[b](ins[k][j], ins[k][j], outs[k][j], stream=streams[k])
                        for k, row in enumerate(blocks) for j, b in enumerate(row)]
                latch.release()
            for d in done:
                await d
        for k, row in enumerate(xs):
            for j, x in enumerate(row):
                np.testing.assert_array_equal(await outs[k][j].to_host(), x + x)
        ids = [s.id for s in streams]
    index = {sid: k for k, sid in enumerate(ids)}
    recs = [r for r in tr.trace.records if r.kind_name == "block" and r.stream_id in index]
    assert len(recs) == sum(map(sum, blocks))
    seqs = {k: sorted({r.seq for r in recs if index[r.stream_id] == k}) for k in range(len(blocks))}
    t0 = min(r.dispatch_ns for r in recs)
    out = sorted((index[r.stream_id], seqs[index[r.stream_id]].index(r.seq), r.block,
                  r.dispatch_ns - t0, r.start_ns - t0, r.end_ns - t0, r.engine) for r in recs)
    return out, ids


def launches(cfg: RunConfig, lib: KernelLib, blocks=BLOCKS):
    return asyncio.run(_launches(cfg, lib, blocks))


def expected(blocks, ids, p=SIM):
    """The timeline by hand: each stream's launches in turn; launches take the cores in (ready, stream id) order.

    A block of `add` counts no work: it takes min_kernel_us, pickup_us after its
    dispatch, on the AIV (no cube work) where it is dispatched first, ties to the
    lowest.  A launch ends with its last block; its stream's next launch is
    ready then.
    """
    pickup, dur = round(p.pickup_us * 1000), round(p.min_kernel_us * 1000)
    aiv = range(p.aic_cores, p.aic_cores + p.aiv_cores)
    free = {c: 0 for c in aiv}
    nxt = [0] * len(blocks)
    ready = [0] * len(blocks)
    out = []
    while any(nxt[k] < len(blocks[k]) for k in range(len(blocks))):
        k = min((k for k in range(len(blocks)) if nxt[k] < len(blocks[k])), key=lambda k: (ready[k], ids[k]))
        end = 0
        for b in range(blocks[k][nxt[k]]):
            c = min(aiv, key=lambda c: (max(ready[k], free[c]), c))
            at = max(ready[k], free[c])
            free[c] = at + pickup + dur
            end = max(end, free[c])
            out.append((k, nxt[k], b, at, at + pickup, at + pickup + dur, c))
        ready[k] = end
        nxt[k] += 1
    return sorted(out)


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> KernelLib:
    return KernelLib(tmp_path_factory.mktemp("launch_kernels"))


@pytest.mark.parametrize("n", [2, 3])
def test_blocks_of_concurrent_launches_take_the_cores_in_modeled_order(lib, n):
    blocks = BLOCKS[:n]
    want = None
    for cores in (1, 2, 4):
        got, ids = launches(RunConfig(cores=cores, copy_engines=2), lib, blocks)
        assert got == expected(blocks, ids), f"cores={cores}"
        if want is None:
            want = got
        assert got == want


def test_three_streams_compete_for_three_aivs_in_modeled_order(lib):
    p = SIM.replace(aiv_cores=3)
    got, ids = launches(RunConfig(cores=4, device_profile=p), lib)
    assert got == expected(BLOCKS, ids, p)
    # The lowest stream's first launch takes every AIV at the gate; nothing idles while a block waits.
    first = [g for g in got if g[3] == 0]
    assert len(first) == 3 and {g[0] for g in first} == {ids.index(min(ids))}


@pytest.mark.slow
def test_the_launches_timeline_is_the_same_in_20_runs(lib):
    want = None
    for i in range(20):
        got, ids = launches(RunConfig(cores=(1, 2, 4)[i % 3]), lib)
        if want is None:
            want = got
            assert got == expected(BLOCKS, ids)
        assert got == want, f"run {i}"


_PINNED = """
import json, os, sys
os.sched_setaffinity(0, {{{cpu}}})  # before the worker opens: its threads inherit the mask
sys.path.insert(0, {root!r})
from runtime import test_model_launches as t
from helpers.kernels import KernelLib
from pypto_async.runtime import RunConfig
got, ids = t.launches(RunConfig(cores={cores}), KernelLib({lib!r}))
assert os.sched_getaffinity(0) == {{{cpu}}}
print(json.dumps([got, ids]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")
def test_the_launches_timeline_is_the_same_with_the_host_threads_pinned(lib):
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)
    want = None
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in dict.fromkeys([cpus[0], cpus[-1]]):
        for cores in (1, 4):
            code = _PINNED.format(cpu=cpu, root=root, cores=cores, lib=str(lib.directory))
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            assert res.returncode == 0, res.stderr[-3000:]
            got, ids = json.loads(res.stdout.strip().splitlines()[-1])
            got = [tuple(g) for g in got]
            assert got == expected(BLOCKS, ids), f"cpu={cpu} cores={cores}"
            if want is None:
                want = got
            assert got == want


# -- programs competing for the cores --------------------------------------------------------------

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402

F, T = pl.FP32, 8
#: What each stream runs: a program of that many independent tasks, or ("launch", blocks).
MIX = [3, 3, ("launch", 3)]


def _fork(n: int):
    @pl.program
    class ForkN:
        @pl.function(type=pl.FunctionType.InCore)
        def relu(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
            pl.store(pl.relu(pl.load(x, [0, 0], [T, 32])), [0, 0], y)
            return y

        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[n * T, 32], F], y: pl.Out[pl.Tensor[[n * T, 32], F]]):
            for i in pl.range(n):
                self.relu(x[i * T:(i + 1) * T, :], y[i * T:(i + 1) * T])
            return y

    return ir.compile(ForkN)


#: Every task and block takes the floor (their counted work is far below it).
SLOW = SIM.replace(min_kernel_us=5.0)


async def _mixed(cfg: RunConfig, lib: KernelLib, mix):
    """Each stream's program (or launch), all held until every one is queued; return the timeline.

    Per task or block: (stream index, index, dispatch, start, end, core), times
    relative to the hold's end (the first program's start), and the streams' ids.
    """
    compiled = {n: _fork(n) for n in mix if isinstance(n, int)}
    async with ChipWorker(cfg) as w:
        streams = [w.stream() for _ in mix]
        rng = np.random.default_rng(7)
        jobs = []
        for m in mix:
            rows = m * T if isinstance(m, int) else N
            x = rng.standard_normal((rows, 32) if isinstance(m, int) else N).astype(np.float32)
            xin = w.alloc_tensor(x.shape, np.float32, init=x)
            out = w.alloc_tensor(x.shape, np.float32, init=np.full(x.shape, np.nan, np.float32))
            k = w.register(compiled[m] if isinstance(m, int) else lib.get("add", N, blocks=m[1]))
            jobs.append((k, x, xin, out, isinstance(m, int)))
        await w.default_stream
        async with w.trace() as tr:
            with hold(streams[0]) as latch:
                gate = streams[0].record()
                for s in streams[1:]:
                    s.wait(gate)
                done = [k(xin, out, stream=s) if prog else k(xin, xin, out, stream=s)
                        for (k, _, xin, out, prog), s in zip(jobs, streams)]
                latch.release()
            for d in done:
                await d
        for k, x, xin, out, prog in jobs:
            np.testing.assert_array_equal(await out.to_host(), np.maximum(x, 0) if prog else x + x)
        ids = [s.id for s in streams]
    index = {sid: k for k, sid in enumerate(ids)}
    recs = [r for r in tr.trace.records if r.kind_name in ("task", "block") and r.stream_id in index]
    progs = [r for r in tr.trace.records if r.kind_name == "program" and r.stream_id in index]
    t0 = min(r.start_ns for r in progs)
    return sorted((index[r.stream_id], r.block, r.dispatch_ns - t0, r.start_ns - t0, r.end_ns - t0, r.engine)
                  for r in recs), ids


def mixed(cfg, lib, mix=MIX):
    return asyncio.run(_mixed(cfg, lib, mix))


def expected_mixed(mix, ids, p=SLOW):
    """By hand: all ready at the hold's end, taken in stream-id order (equal ready times).

    A program: the one orchestrator submits its task i at start + (i + 1) *
    orch_us_per_task (start: when it finished the program before); each task
    goes to the AIV free first (ties: the lowest), pickup_us after the later
    of its submission and that core's free time.  A launch: each block on the
    AIV where it is dispatched first.
    """
    us = lambda v: round(v * 1000)  # noqa: E731
    pickup, dur, orch = us(p.pickup_us), us(p.min_kernel_us), us(p.orch_us_per_task)
    aiv = range(p.aic_cores, p.aic_cores + p.aiv_cores)
    free = {c: 0 for c in aiv}
    orch_free = 0
    out = []
    for k in sorted(range(len(mix)), key=lambda k: ids[k]):
        m = mix[k]
        if isinstance(m, int):
            start = orch_free
            orch_free = start + m * orch
            key = {c: max(free[c], start) for c in aiv}
            for i in range(m):
                c = min(aiv, key=lambda c: (key[c], c))
                at = max(start + (i + 1) * orch, key[c])
                key[c] = at + pickup + dur
                out.append((k, i, at, at + pickup, at + pickup + dur, c))
            free = key
        else:
            for b in range(m[1]):
                c = min(aiv, key=lambda c: (free[c], c))
                at = free[c]
                free[c] = at + pickup + dur
                out.append((k, b, at, at + pickup, at + pickup + dur, c))
    return sorted(out)


@pytest.mark.slow
def test_programs_and_a_launch_take_the_cores_in_modeled_order(lib):
    want = None
    for cores in (1, 2, 4):
        got, ids = mixed(RunConfig(cores=cores, device_profile=SLOW), lib)
        assert got == expected_mixed(MIX, ids), f"cores={cores}"
        if want is None:
            want = got
        assert got == want


@pytest.mark.slow
def test_the_programs_timeline_is_the_same_in_20_runs(lib):
    want = None
    for i in range(20):
        got, ids = mixed(RunConfig(cores=(1, 2, 4)[i % 3], device_profile=SLOW), lib, [2, 4, ("launch", 2), 3])
        if want is None:
            want = got
            assert got == expected_mixed([2, 4, ("launch", 2), 3], ids)
        assert got == want, f"run {i}"
