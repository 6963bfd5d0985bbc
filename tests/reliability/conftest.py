"""Fixtures and helpers of the reliability tests (tests/reliability/).

``rel_kernels``
    The hand-written C kernels of :mod:`helpers.kernels`, built once per
    session into a temporary directory.
``rel_config``
    A small sim device: 2 cores, 2 copy engines, 64 MiB.

Helpers: :func:`mem_stats` reads the driver's memory counters,
:func:`proc_threads` lists this process's threads (all of them, driver threads
included: ``/proc/self/task``), :func:`threads_left` those started since that may be
the library's and are still alive, :func:`proc_fds` counts its open file descriptors,
:func:`rss_kib` reads ``VmRSS``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # helpers/ lives in tests/
    sys.path.insert(0, _TESTS)

from helpers.kernels import KernelLib  # noqa: E402
from pypto_async._driver import ffi, lib  # noqa: E402
from pypto_async.runtime import RunConfig  # noqa: E402

SMALL = {"platform": "sim", "cores": 2, "copy_engines": 2, "device_memory": 64 << 20}

#: Set PYPTO_ASYNC_LONG=1 for the long profiles (hypothesis examples, soak minutes).
LONG = os.environ.get("PYPTO_ASYNC_LONG", "") not in ("", "0")


def pytest_collection_modifyitems(items):
    # The long profiles run for minutes per test: lift the suite's 120 s per-test timeout.
    if LONG:
        for item in items:
            if "reliability" in item.nodeid:
                item.add_marker(pytest.mark.timeout(3600))


@pytest.fixture(scope="session")
def rel_kernels(tmp_path_factory) -> KernelLib:
    return KernelLib(tmp_path_factory.mktemp("rel_kernels"))


@pytest.fixture
def rel_config() -> RunConfig:
    return RunConfig(**SMALL)


def mem_stats(worker):
    """The driver's memory counters of an open worker (``pto_mem_stats`` cdata)."""
    out = ffi.new("pto_mem_stats *")
    assert lib.pto_mem_get_stats(worker._dev, out) == 0
    return out


def stream_stats(stream):
    """The driver's counters of a runtime Stream (``pto_stream_stats`` cdata)."""
    out = ffi.new("pto_stream_stats *")
    assert lib.pto_stream_get_stats(stream._ptr, out) == 0
    return out


def proc_threads() -> set[str]:
    """The ids of this process's live threads, native ones included.

    Compare sets, not counts: "no thread left behind" is ``after <= before``,
    which a library's idle worker ending meanwhile (trio keeps its thread cache
    for 10 s) does not upset.
    """
    return set(os.listdir("/proc/self/task"))


def thread_name(tid: str) -> str | None:
    """The name (``comm``) of this process's thread `tid`, None if it ended."""
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def ours(name: str) -> bool:
    """Whether a thread of this name may have been started by this library (driver or runtime).

    The driver names each of its threads ``pto-...``.  A thread nobody named
    carries the name of the thread that started it, which for a thread the
    runtime or the driver starts from a host thread is the process's own.
    Threads other libraries name are not ours: the gRPC threads a Ray session
    leaves in the process after ``ray.shutdown()`` (``event_engine``,
    ``timer_manager``, ...) keep starting more of themselves, at any moment.
    """
    return name.startswith("pto-") or name == thread_name(str(os.getpid()))


def threads_left(before: set[str], settle_s: float = 2.0) -> dict[str, str]:
    """The threads started since `before`, still alive and maybe ours (:func:`ours`): id -> name.

    A joined thread leaves ``/proc/self/task`` as it is reaped; one that is
    ending on its own (a library's idle worker) may take a moment, so this
    looks again for up to `settle_s` before it answers.  The names say whose
    thread it is when a test fails.
    """
    deadline = time.monotonic() + settle_s
    while True:
        names = {tid: name for tid in sorted(proc_threads() - before)
                 if (name := thread_name(tid)) is not None and ours(name)}
        if not names or time.monotonic() >= deadline:
            return names
        time.sleep(0.01)


def proc_fds() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


def rss_kib() -> int:
    """Resident set size of this process in KiB (``VmRSS``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")
