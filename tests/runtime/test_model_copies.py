"""The device model's copy engines: copies of independent streams placed in modeled order.

Copies of streams that do not order each other compete for the profile's copy
engines.  The host's copy threads run them in whatever order they happen to;
the model places each (native/src/model.c, pti_model_park) only once no other
stream can still bring a copy ready before it, so the engines take them in
modeled order: ready time, then stream id.  The timeline is then the same
whatever host threads ran the copies, and in what order.  Every copy is also
checked against its source (the device buffers start poisoned).
"""

from __future__ import annotations

import asyncio
import json
import os

import numpy as np
import pytest

from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._profile import SIM
from pypto_async.testing import hold

#: Per stream, the sizes (float32 elements) of its copies, in order.
SIZES = [[1 << 14, 1 << 16, 1 << 15, 1 << 14], [1 << 15, 1 << 14, 1 << 16], [1 << 16, 1 << 14, 1 << 15, 1 << 15]]


async def _copies(cfg: RunConfig, sizes: list[list[int]]):
    """Run each stream's host-to-device copies, all held until every one is queued; return the timeline.

    The timeline: per copy (stream index, copy index, start, end, engine), start
    and end relative to the hold's end, and the streams' ids.
    """
    async with ChipWorker(cfg) as w:
        streams = [w.stream() for _ in sizes]
        rng = np.random.default_rng(3)
        hosts = [[rng.standard_normal(n).astype(np.float32) for n in row] for row in sizes]
        devs = [[w.alloc_tensor(n, np.float32, init=np.full(n, np.nan, np.float32)) for n in row] for row in sizes]
        await w.default_stream
        async with w.trace() as tr:
            with hold(streams[0]) as latch:
                gate = streams[0].record()  # when the hold ends: every stream's copies are ready then
                for s in streams[1:]:
                    s.wait(gate)
                copies = [w.copy(devs[k][j], hosts[k][j], stream=streams[k])
                          for k in range(len(sizes)) for j in range(len(sizes[k]))]
                latch.release()
            for c in copies:
                await c
        for k, row in enumerate(hosts):
            for j, a in enumerate(row):
                np.testing.assert_array_equal(await devs[k][j].to_host(), a)
        ids = [s.id for s in streams]
    recs = [r for r in tr.trace.records if r.kind_name == "h2d"]
    assert len(recs) == sum(map(len, sizes))
    t0 = min(r.start_ns for r in recs)
    index = {sid: k for k, sid in enumerate(ids)}
    seen = {k: 0 for k in range(len(sizes))}
    out = []
    for r in sorted(recs, key=lambda r: (index[r.stream_id], r.start_ns)):
        k = index[r.stream_id]
        out.append((k, seen[k], r.start_ns - t0, r.end_ns - t0, r.engine))
        seen[k] += 1
    return out, ids


def copies(cfg: RunConfig, sizes=SIZES):
    return asyncio.run(_copies(cfg, sizes))


def expected(sizes, ids, p=SIM):
    """The timeline by hand: each stream's copies in turn; the engines take them in (ready, stream id) order.

    A copy takes the host link's latency plus its bytes over the link; it goes
    to the engine free first, ties to its stream's own (its id modulo the
    engines), then the ones after it.
    """
    lat = round(p.host_link_latency_us * 1000)
    free = [0] * p.copy_engines
    nxt = [0] * len(sizes)  # next copy of each stream
    ready = [0] * len(sizes)
    out = []
    while any(nxt[k] < len(sizes[k]) for k in range(len(sizes))):
        k = min((k for k in range(len(sizes)) if nxt[k] < len(sizes[k])), key=lambda k: (ready[k], ids[k]))
        dur = lat + int(4 * sizes[k][nxt[k]] / p.host_link_gbps + 0.5)
        own = ids[k] % p.copy_engines
        order = [(own + i) % p.copy_engines for i in range(p.copy_engines)]
        e = min(order, key=lambda e: (max(ready[k], free[e]), order.index(e)))
        start = max(ready[k], free[e])
        free[e] = ready[k] = start + dur
        out.append((k, nxt[k], start, start + dur, p.cores + e))
        nxt[k] += 1
    return sorted(out)


@pytest.mark.parametrize("n", [2, 3])
def test_copies_of_independent_streams_take_the_engines_in_modeled_order(n):
    sizes = SIZES[:n]
    want = None
    for cores, engines in ((1, 1), (2, 2), (4, 1), (1, 2), (2, 1)):
        got, ids = copies(RunConfig(cores=cores, copy_engines=engines), sizes)
        assert got == expected(sizes, ids), f"cores={cores} copy_engines={engines}"
        if want is None:
            want = got
        assert got == want


def test_two_streams_each_keep_to_their_own_engine():
    got, ids = copies(RunConfig(cores=2, copy_engines=2), SIZES[:2])
    engines = {k: {e for (kk, _, _, _, e) in got if kk == k} for k in range(2)}
    assert engines == {k: {SIM.cores + ids[k] % SIM.copy_engines} for k in range(2)}
    for prev, cur in zip(got, got[1:]):
        if prev[0] == cur[0]:
            assert cur[2] == prev[3]  # back to back: never waits for the other stream


def test_one_engine_serves_the_streams_in_modeled_order():
    p = SIM.replace(copy_engines=1)
    got, ids = copies(RunConfig(cores=2, copy_engines=2, device_profile=p), SIZES)
    assert got == expected(SIZES, ids, p)
    spans = sorted((s, e) for (_, _, s, e, _) in got)
    assert spans[0][0] == 0 and all(b[0] == a[1] for a, b in zip(spans, spans[1:]))  # never idle


_PINNED = """
import json, os, sys
os.sched_setaffinity(0, {{{cpu}}})  # before the worker opens: its threads inherit the mask
sys.path.insert(0, {root!r})
from runtime import test_model_copies as t
from pypto_async.runtime import RunConfig
got, ids = t.copies(RunConfig(cores={cores}, copy_engines={engines}))
assert os.sched_getaffinity(0) == {{{cpu}}}
print(json.dumps([got, ids]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")
def test_the_copies_timeline_is_the_same_with_the_host_threads_pinned():
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    want = None
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in dict.fromkeys([cpus[0], cpus[-1]]):
        for cores, engines in ((1, 1), (4, 2)):
            code = _PINNED.format(cpu=cpu, root=root, cores=cores, engines=engines)
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            assert res.returncode == 0, res.stderr[-3000:]
            got, ids = json.loads(res.stdout.strip().splitlines()[-1])
            got = [tuple(g) for g in got]
            assert got == expected(SIZES, ids), f"cpu={cpu} cores={cores}"
            if want is None:
                want = got
            assert got == want
