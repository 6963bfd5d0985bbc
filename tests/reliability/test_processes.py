"""Threads and processes: workers side by side, a forked child, multiprocessing with spawn."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

import numpy as np
import pytest

from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import SMALL

N = 256


def test_workers_in_threads_run_at_once(rel_kernels):
    """Four workers, each in its own thread; a barrier proves they are all open and busy at once."""
    add = rel_kernels.get("add", N)
    n = 4
    barrier = threading.Barrier(n, timeout=30)
    errors, results = [], {}

    def work(i):
        try:
            with ChipWorker(RunConfig(**SMALL)) as w:
                h = w.register(add)
                rng = np.random.default_rng(i)
                barrier.wait()  # every worker is open now
                for j in range(50):
                    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
                    out = np.full(N, np.nan, np.float32)
                    h(a, b, out)
                    np.testing.assert_array_equal(out, a + b)
                barrier.wait()  # and all computed while the others were open
                results[i] = True
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == n


_FORK = r"""
import os, sys
sys.path[:0] = [{tests!r}, {root!r}]
import numpy as np
import pytest
from helpers.kernels import KernelLib
from pypto_async.errors import PtoInvalidStateError
from pypto_async.runtime import ChipWorker, RunConfig
k = KernelLib({kdir!r}).get("inc", 16)
w = ChipWorker(RunConfig(platform="sim", cores=1, copy_engines=1, device_memory=16 << 20))
h = w.register(k)
h(np.zeros(16, np.float32))
pid = os.fork()
if pid == 0:
    code = 3
    try:
        h(np.zeros(16, np.float32))
    except PtoInvalidStateError as exc:
        code = 0 if "fork" in str(exc) else 4
        w.close()  # must not touch the parent's device
    # a fresh worker in the child works
    with ChipWorker(RunConfig(platform="sim", cores=1, copy_engines=1, device_memory=16 << 20)) as w2:
        x = np.zeros(16, np.float32)
        w2.register(k)(x)
        if not (x == 1).all():
            code = 5
    os._exit(code)
_, status = os.waitpid(pid, 0)
x = np.zeros(16, np.float32)
h(x)  # the parent's worker is untouched
assert (x == 1).all()
w.close()
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.slow
def test_worker_used_in_a_forked_child_raises(rel_kernels, tmp_path):
    import subprocess

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rel_kernels.get("inc", 16)
    script = tmp_path / "fork.py"
    script.write_text(_FORK.format(tests=tests, root=os.path.dirname(tests), kdir=str(rel_kernels.directory)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


def _spawned(add, seed: int, q) -> None:
    # `add` is the parent's compiled-program handle (spawn gives the child the parent's sys.path).
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    out = np.full(N, np.nan, np.float32)
    with ChipWorker(RunConfig(**SMALL)) as w:
        w.register(add)(a, b, out)
    q.put((seed, bool((out == a + b).all())))


@pytest.mark.slow
def test_multiprocessing_spawn_children_compute(rel_kernels):
    add = rel_kernels.get("add", N)  # built here once; the children only load it
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_spawned, args=(add, i, q)) for i in range(2)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert got == [(0, True), (1, True)]


# Copies of large host arrays (held only by their launches: fire and forget) are in flight
# when the worker's close is cut short; the device must stop reading the arrays before they
# are let go.  Before the fix, teardown dropped the launches first and the process died
# (SIGSEGV) in most runs of every scenario.
_CUT_SHORT_CLOSE = r"""
import asyncio, sys, warnings
sys.path[:0] = [{root!r}]
import numpy as np
import pytest
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import hold

warnings.simplefilter("ignore")  # the "dropped N command(s)" of a cut-short close
CFG = RunConfig(platform="sim", cores=1, copy_engines=1, device_memory=256 << 20)
SIZE = 8 << 20  # float32 elements: 32 MiB per copy


HELD = []


def queue_copies(w, hold_last=False):
    for i, t in enumerate([w.alloc_tensor((SIZE,), "float32") for _ in range(4)]):
        if hold_last and i == 3:
            # The last copy waits behind a latch nobody releases (kept from the collector), so the
            # close's drain must suspend however fast the first three copies go.
            HELD.append(hold(w.default_stream, timeout=30))
            HELD[-1].__enter__()
        w.copy(t, np.ones(SIZE, np.float32))  # not awaited: only the launch holds the array


async def asyncio_wait_for():
    w = await ChipWorker(CFG).open()
    queue_copies(w)
    try:
        await asyncio.wait_for(w.aclose(), 0.02)
    except asyncio.TimeoutError:
        pass
    assert w.is_closed


async def asyncio_cancel():
    w = await ChipWorker(CFG).open()
    queue_copies(w, hold_last=True)
    task = asyncio.ensure_future(w.aclose())
    await asyncio.sleep(0)  # it suspends in its drain
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancelled aclose() returned")
    assert w.is_closed


async def trio_cancel_scope():
    import trio
    with trio.CancelScope() as scope:
        async with ChipWorker(CFG) as w:
            queue_copies(w)
            scope.cancel()  # level-triggered: aclose() is cancelled at its first await
    assert scope.cancelled_caught and w.is_closed


async def opened_with_copies(w):
    await w.open()
    queue_copies(w)


def interrupted_close():
    w = ChipWorker(CFG)
    asyncio.run(opened_with_copies(w))  # the loop is gone; close() drains on this thread
    q = w._queue
    serve = q.on_service  # what every completion service runs after its drain

    def ctrl_c_in_the_drain():
        serve()
        raise KeyboardInterrupt
    q.on_service = ctrl_c_in_the_drain
    try:
        w.close()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("close() was not interrupted")
    assert w.is_closed


def infinite_timeout():  # it raised OverflowError out of the drain
    w = ChipWorker(CFG)
    asyncio.run(opened_with_copies(w))
    w.close(timeout=float("inf"))


scenario = sys.argv[1]
if scenario == "trio_cancel_scope":
    import trio
    trio.run(trio_cancel_scope)
elif scenario.startswith("asyncio"):
    asyncio.run(globals()[scenario]())
else:
    globals()[scenario]()
print("clean exit")
"""


@pytest.mark.parametrize("scenario", ["asyncio_wait_for", "asyncio_cancel", "trio_cancel_scope",
                                      "interrupted_close", "infinite_timeout"])
@pytest.mark.slow
def test_a_cut_short_close_keeps_host_arrays_alive_until_the_device_let_go(scenario, tmp_path):
    import subprocess

    script = tmp_path / "close.py"
    script.write_text(_CUT_SHORT_CLOSE.format(root=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))))
    for run in range(3):  # the crash it guards against came in most runs, not all
        proc = subprocess.run([sys.executable, str(script), scenario], capture_output=True, text=True,
                              timeout=60)
        assert (proc.returncode, proc.stdout.strip()) == (0, "clean exit"), (run, proc.returncode,
                                                                             proc.stderr[-2000:])
