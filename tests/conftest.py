"""Fixtures shared by the tests (the runtime's in tests/runtime/, and the project's at the top).

``kernels``
    A :class:`helpers.kernels.KernelLib`: hand-written C kernels built once per
    session, wrapped as compiled programs.
``config``
    The small device every runtime test opens (``SMALL``), as a RunConfig.
``worker``
    A sync-mode ChipWorker on that device; after the test it must hold no
    device memory (every tensor freed, every free executed) before it closes.
``anyio_backend``
    asyncio, asyncio with uvloop, and trio: every ``@pytest.mark.anyio`` test
    runs under all three (under uvloop in the slow tier, but for the files in
    ``UVLOOP_FAST``).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import pytest

from helpers.kernels import KernelLib
from pypto_async._driver import ffi, lib
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._wait import drive


#: Whether the collector ran automatically before collection (``pytest_collection`` turns it off).
_gc_was_enabled = [True]


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    """No automatic collection while the test modules are imported (``pytest_collection_finish`` collects once).

    Importing two hundred test modules, each rewritten by pytest's assertion rewriting, allocates enough
    for the collector to run twenty or more full collections, each walking all that is imported so far
    (torch included): seconds of a run.  What collection leaves is collected once, then frozen.
    """
    _gc_was_enabled[0] = gc.isenabled()
    gc.disable()


def pytest_unconfigure(config):
    if _gc_was_enabled[0]:
        gc.enable()


def pytest_collection_finish(session):
    """Keep what collection imported (torch, numpy, every test module) out of the collector's walks.

    Those objects live for the whole session; frozen, a test's ``gc.collect()``
    (and every automatic full collection) walks only what tests made since,
    which takes milliseconds instead of a quarter of a second with torch
    imported.  Objects made by tests are collected as before.
    """
    # Hypothesis loads its plugins (trio's registers a random) on its first run; let it run once
    # first, or that random's frozen referrers would be invisible to its liveness check.
    from hypothesis import find, strategies

    find(strategies.none(), lambda _: True)
    gc.collect()
    gc.freeze()
    if _gc_was_enabled[0]:
        gc.enable()

#: How many generated kernels the C compiler built this session (cache misses), and the seconds of
#: wall time those builds took, for the summary line.
_kernel_builds = [0, 0.0]


def pytest_sessionstart(session):
    """Count the session's kernel builds: each is a C compiler run, most of a cold fast tier's time."""
    from pypto_async.ir import _compile

    build = _compile._run_compiler

    def counted(*args, **kwargs):
        _kernel_builds[0] += 1
        start = time.perf_counter()
        try:
            return build(*args, **kwargs)
        finally:
            _kernel_builds[1] += time.perf_counter() - start

    _compile._run_compiler = counted


#: A fast-tier test this long (setup, call and teardown) is named in the summary: the fast tier keeps within its
#: budget by moving tests of a tenth of a second or more to the slow tier (docs/developing.md); three times that
#: is past what a loaded machine's noise explains.
LONG_FAST_S = 0.3

#: Seconds per test of the fast tier (tests not marked slow), summed over its phases.
_fast_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if "slow" not in report.keywords:
        _fast_seconds[report.nodeid] = _fast_seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    count, seconds = _kernel_builds
    terminalreporter.write_line(f"kernel builds (C compiler runs for generated kernels): {count}, {seconds:.1f} s")
    long = sorted(((s, n) for n, s in _fast_seconds.items() if s >= LONG_FAST_S), reverse=True)
    if long:
        terminalreporter.write_line(f"fast-tier tests of {LONG_FAST_S} s or more ({len(long)}; a test of a tenth of "
                                    f"a second or more belongs in the slow tier, docs/developing.md):")
        for s, n in long[:10]:
            terminalreporter.write_line(f"  {s:.2f} s  {n}")


#: Folders here whose every test is in the slow tier (``pytestmark = pytest.mark.slow``): a run that
#: deselects the slow tier does not import them (the Ray cluster's modules import Ray: a second or more).
SLOW_ONLY = ("ray_cluster",)


def deselects_slow(markexpr: str) -> bool:
    """Whether ``-m markexpr`` deselects a test marked only ``slow`` (and ``ray``)."""
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    return not Expression.compile(markexpr).evaluate(lambda name, **_: name in ("slow", "ray"))


def pytest_ignore_collect(collection_path, config):
    if (collection_path.parent == Path(__file__).parent and collection_path.name in SLOW_ONLY
            and deselects_slow(config.getoption("markexpr"))):
        return True
    return None


SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pytest.fixture(scope="session")
def kernels(tmp_path_factory) -> KernelLib:
    return KernelLib(tmp_path_factory.mktemp("kernels"))


@pytest.fixture
def config() -> RunConfig:
    return RunConfig(**SMALL)


@pytest.fixture
def tiny_ring() -> RunConfig:
    """A 4-slot ring on one core: past three commands behind a latch, work waits in the FIFO."""
    return RunConfig(ring_task_window=4, cores=1, copy_engines=1, device_memory=16 << 20)


def mem_stats(worker):
    """The driver's memory counters of a worker (a ``pto_mem_stats`` cdata)."""
    out = ffi.new("pto_mem_stats *")
    assert lib.pto_mem_get_stats(worker._dev, out) == 0
    return out


def assert_no_device_memory(worker, timeout: float = 10.0) -> None:
    """Wait for every queued command, then assert no allocation or pending free is left."""
    assert lib.pto_device_synchronize(worker._dev, int(timeout * 1e6)) == 0
    drive(worker._queue, worker._queue.idle, timeout)
    stats = mem_stats(worker)
    assert (stats.allocations, stats.in_use, stats.pending_frees) == (0, 0, 0), (
        f"device memory left: allocations={stats.allocations} in_use={stats.in_use} pending_frees={stats.pending_frees}"
    )


@pytest.fixture
def open_worker():
    """Open sync-mode workers on the small device with some RunConfig fields; close them all after."""
    opened = []

    def make(**fields):
        w = ChipWorker(RunConfig(**{**SMALL, **fields}))
        opened.append(w)
        return w

    yield make
    for w in opened:
        w.close()


def here() -> int:
    """The caller's line number (where a racy call is made, for the sanitizer's message)."""
    return sys._getframe(1).f_lineno


@pytest.fixture
def worker(config):
    with ChipWorker(config) as w:
        yield w
        assert_no_device_memory(w)


#: The test files whose ``anyio`` tests run under uvloop in the fast tier too: launching, awaiting and
#: cancelling, and the event loop's fairness (tests/runtime/test_completion_inline.py picks its loops
#: itself).  Elsewhere uvloop (asyncio's API on another loop) adds a third run of the same code to
#: asyncio's and trio's, and runs in the slow tier.
UVLOOP_FAST = frozenset({
    "reliability/test_event_loops.py",
    "runtime/test_launch.py",
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the uvloop runs outside ``UVLOOP_FAST`` slow (before ``-m`` deselects)."""
    root = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("anyio_backend", (None, {}))[1].get("use_uvloop") is not True:
            continue
        if not item.path.is_relative_to(root) or item.path.relative_to(root).as_posix() not in UVLOOP_FAST:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request):
    return request.param
