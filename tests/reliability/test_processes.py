"""Threads and processes: workers side by side, a forked child, multiprocessing with spawn."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

import numpy as np

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
