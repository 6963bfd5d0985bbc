"""Random command programs against the runtime, checked against the reference model.

A hypothesis :class:`RuleBasedStateMachine` issues programs over three
streams: allocations (with and without an initial copy), frees on any
stream, H2D / D2H / D2H-into-torch / D2D copies, launches of small C kernels
on resident tensors and on host arrays, event records and waits, latches
held and released at random points, kernel faults and injected copy faults.
The same program runs on :class:`tests.reliability.model.Model`.  At every
sync point (a host wait on one launch, or a barrier on every stream) the
runtime's launch outcomes, event outcomes, device buffers (read straight
from the sim arena, without queueing anything) and host arrays must equal
the model's predictions, and the driver's memory counters must match the
live tensors.

Determinism: the worker runs in async mode on an asyncio loop that runs only
inside sync points, so completion records are drained only there; that only
matters for the initial-copy check (``Model.init_state``): a failure is
observed when an error is delivered (a launch's ``wait()`` or
``exception()``, an event's ``await``, a stream's ``await`` in a barrier,
which raises what the stream carries), whenever records are drained.  The
runtime orders racing accesses to DeviceTensors itself (automatic ordering,
rule 5 of the model, which inserts the same edges); the generator writes no
wait for them, and orders only racing host-array accesses with an event
first, and waits on a launch only when no held latch keeps it back.
The CI profile is derandomized
(the same programs every run); ``PYPTO_ASYNC_LONG=1`` selects a long,
randomized profile.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pypto_async import testing
from pypto_async._driver import ffi, lib
from pypto_async.errors import PtoDependencyError, PtoError
from pypto_async.runtime import ChipWorker, DeviceTensor

from .conftest import LONG, SMALL, mem_stats, stream_stats
from .model import COPY_FAULT, DEPENDENCY, OK, Model, MTensor

# A failed init copy of alloc_tensor(init=...) has no Launch to retrieve its error from
# (test_regressions.py, test_failed_init_copy_is_not_silently_lost); the model already treats
# such a tensor's contents as unknown.  teardown() marks those errors seen.
pytestmark = [
    pytest.mark.slow,  # hypothesis state machines: seconds each
    pytest.mark.filterwarnings(r"ignore:alloc_tensor\(init=\.\.\.\) copy failed:RuntimeWarning"),
]

N = 16
STREAMS = 3
KERNEL_NAMES = ("add", "scale", "inc", "copy", "fail")
KERNEL_DRAW = ("add", "add", "scale", "scale", "inc", "inc", "copy", "fail")

settings.register_profile(
    "reliability-ci", max_examples=200, stateful_step_count=40, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None, print_blob=True,
)
settings.register_profile(
    "reliability-long", max_examples=600, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)
PROFILE = settings.get_profile("reliability-long" if LONG else "reliability-ci")

_kernel_lib = None


def _values(seed: int) -> np.ndarray:
    """Random float32 values that are never zero (a zero would hide a missed write)."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.5, 4.0, N) * rng.choice([-1.0, 1.0], N)).astype(np.float32)


class Pair:
    """A runtime object and its model twin."""

    __slots__ = ("real", "model", "label")

    def __init__(self, real, model, label):
        self.real = real
        self.model = model
        self.label = label

    def __repr__(self):
        return self.label


class RuntimeVsModel(RuleBasedStateMachine):
    """Issue a random program to a real worker and to the model; compare at sync points."""

    #: Rings large enough that nothing waits in a stream FIFO.
    RING = {"ring_task_window": 1024, "ring_dep_pool": 1024}
    #: The sanitizer's mode for the worker (None: the suite's, raising).  Off, automatic ordering
    #: orders launches in the driver with the launch (``pto_stream_launch_ordered``), as users run it by default.
    SANITIZE = None
    #: Whether the program injects copy faults and launches the failing kernel.
    FAULTS = True
    #: Whether a dependency error must carry its first failure as ``__cause__``.
    CHECK_CAUSE = True
    #: Whether to inject a fault into work queued behind an unobserved failure.
    INJECT_ON_FAILED = True

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.worker = ChipWorker(dict(SMALL, **self.RING, sanitize=self.SANITIZE))
        self.loop.run_until_complete(self.worker.open())
        self.streams = [self.worker.default_stream] + [self.worker.stream() for _ in range(STREAMS - 1)]
        self.handles = {name: self.worker.register(_kernel_lib.get(name, N)) for name in KERNEL_NAMES}
        # The runtime joins first uses on the event recorded right after allocation, if it has one;
        # it orders DeviceTensors across streams itself (auto_deps, the default), as the model does.
        # The driver records every access exactly, with or without the sanitizer (no homes).
        hz = self.worker._hazards
        self.model = Model(STREAMS, join_on_ready="_ready" in DeviceTensor.__slots__,
                           auto_deps=hz is not None and hz.auto, homes=False)
        self.tensors: list[Pair] = []
        self.hosts: list[Pair] = []
        self.launches: list[Pair] = []
        self.events: list[Pair] = []
        self.latches: list = []  # (testing.hold context, Latch, model id)
        self.next_latch = 0
        self.steps = []

    # -- helpers ------------------------------------------------------------------------

    def _run(self, coro, what):
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, 20.0))
        except asyncio.TimeoutError:
            raise AssertionError(f"{what} hung (20 s): the runtime lost a completion") from None

    def _order(self, stream: int, reads=(), writes=()):
        """Make the access race-free: wait here for each stream whose earlier access races.

        With automatic ordering the runtime orders DeviceTensors itself (no explicit wait is
        written for them); host arrays are always the program's to order.
        """
        if self.model.auto_deps:
            reads = [r for r in reads if not isinstance(r.model, MTensor)]
            writes = [w for w in writes if not isinstance(w.model, MTensor)]
        for u in sorted(self.model.conflicts(stream, [r.model for r in reads], [w.model for w in writes])):
            ev = self.streams[u].record()
            self.streams[stream].wait(ev)
            mev = self.model.record(u)
            self.model.wait(stream, mev)
            self.events.append(Pair(ev, mev, f"join-event s{u}->s{stream}"))

    def _live(self, idx: int):
        live = [p for p in self.tensors if not p.model.freed]
        return live[idx % len(live)] if live else None

    def _init_ok(self, *pairs) -> bool:
        """Whether the runtime certainly accepts these tensors (their initial copy did not
        fail where the host saw it).  Calls it would refuse are left to test_regressions.py."""
        return all(self.model.init_state(p.model) == "ok" for p in pairs if isinstance(p.model, MTensor))

    def _has_live(self) -> bool:
        return any(not p.model.freed for p in self.tensors)

    # -- rules: memory -------------------------------------------------------------------

    @initialize(seed=st.integers(0, 2**16))
    def first_tensor(self, seed):
        self.alloc(0, True, seed)

    @rule(stream=st.integers(0, STREAMS - 1), init=st.booleans(), seed=st.integers(0, 2**16))
    def alloc(self, stream, init, seed):
        data = _values(seed) if init else None
        real = self.worker.alloc_tensor((N,), np.float32, init=data, stream=self.streams[stream])
        mt = self.model.alloc(N, stream, data)
        self.tensors.append(Pair(real, mt, f"t{len(self.tensors)}"))

    @precondition(lambda self: self._has_live())
    @rule(idx=st.integers(0, 63), stream=st.integers(0, STREAMS - 1))
    def free(self, idx, stream):
        p = self._live(idx)
        self.worker.free_tensor(p.real, stream=self.streams[stream])
        self.model.free(p.model, stream)

    @rule(seed=st.integers(0, 2**16), as_torch=st.booleans())
    def host(self, seed, as_torch):
        data = _values(seed)
        real = torch.from_numpy(data.copy()) if as_torch else data.copy()
        self.hosts.append(Pair(real, self.model.host(data), f"h{len(self.hosts)}{'t' if as_torch else ''}"))

    # -- rules: copies -----------------------------------------------------------------------

    @precondition(lambda self: self._has_live() and self.hosts)
    @rule(t=st.integers(0, 63), h=st.integers(0, 63), stream=st.integers(0, STREAMS - 1),
          to_device=st.booleans(), inject=st.sampled_from([False, False, False, True]))
    def copy_host(self, t, h, stream, to_device, inject):
        tp = self._live(t)
        hp = self.hosts[h % len(self.hosts)]
        dst, src = (tp, hp) if to_device else (hp, tp)
        if not self._init_ok(src):
            return
        self._order(stream, reads=[src], writes=[dst])
        # fail_next takes effect in order, FIFO or not; on a failed stream see INJECT_ON_FAILED.
        inject = inject and self.FAULTS and (self.INJECT_ON_FAILED or self.model.streams[stream].fail is None)
        if inject:
            testing.fail_next(self.streams[stream])
            self.model.inject(stream, COPY_FAULT)
        real = self.worker.copy(dst.real, src.real, stream=self.streams[stream])
        ml = self.model.copy(dst.model, src.model, stream)
        self.launches.append(Pair(real, ml, f"copy {src}->{dst} on s{stream}{' (injected)' if inject else ''}"))

    @precondition(lambda self: self._has_live())
    @rule(a=st.integers(0, 63), b=st.integers(0, 63), stream=st.integers(0, STREAMS - 1))
    def copy_d2d(self, a, b, stream):
        dst, src = self._live(a), self._live(b)
        if dst is src or not self._init_ok(src):
            return
        self._order(stream, reads=[src], writes=[dst])
        real = self.worker.copy(dst.real, src.real, stream=self.streams[stream])
        ml = self.model.copy(dst.model, src.model, stream)
        self.launches.append(Pair(real, ml, f"copy {src}->{dst} on s{stream}"))

    # -- rules: launches ----------------------------------------------------------------------

    @precondition(lambda self: self._has_live() or self.hosts)
    @rule(kernel=st.sampled_from(KERNEL_DRAW), picks=st.lists(st.integers(0, 127), min_size=3, max_size=3),
          alpha=st.sampled_from([0.5, -2.0, 3.0]), stream=st.integers(0, STREAMS - 1), inject=st.sampled_from([False, False, False, True]))
    def launch(self, kernel, picks, alpha, stream, inject):
        from .model import KERNELS

        if kernel == "fail" and not self.FAULTS:
            kernel = "inc"
        dirs, _ = KERNELS[kernel]
        live = [p for p in self.tensors if not p.model.freed]
        pool = live + self.hosts
        args, reads, writes = [], [], []
        for d, pick in zip(dirs, picks):
            if d == "scalar":
                args.append(alpha)
                continue
            p = pool[pick % len(pool)]
            args.append(p)
            (writes if d in ("out", "inout") else reads).append(p)
        # A buffer written twice, or read and written by one launch, is not a program we mean.
        bufs = [a for a in args if isinstance(a, Pair)]
        if len({id(b) for b in bufs}) != len(bufs) and writes or not self._init_ok(*bufs):
            return
        self._order(stream, reads=reads, writes=writes)
        # fail_next takes effect in order, FIFO or not; on a failed stream see INJECT_ON_FAILED.
        inject = inject and self.FAULTS and (self.INJECT_ON_FAILED or self.model.streams[stream].fail is None)
        if inject:
            testing.fail_next(self.streams[stream])
            self.model.inject(stream, COPY_FAULT)
        real_args = [a.real if isinstance(a, Pair) else a for a in args]
        model_args = [a.model if isinstance(a, Pair) else a for a in args]
        real = self.handles[kernel](*real_args, stream=self.streams[stream])
        ml = self.model.launch(kernel, model_args, stream)
        self.launches.append(Pair(real, ml, f"{kernel}{tuple(args)} on s{stream}{' (injected)' if inject else ''}"))

    # -- rules: events and latches ---------------------------------------------------------------

    @rule(src=st.integers(0, STREAMS - 1), dst=st.integers(0, STREAMS - 1))
    def record_wait(self, src, dst):
        ev = self.streams[src].record()
        mev = self.model.record(src)
        if src != dst:
            self.streams[dst].wait(ev)
            self.model.wait(dst, mev)
        self.events.append(Pair(ev, mev, f"event s{src}->s{dst}"))

    @precondition(lambda self: len(self.latches) < 3)
    @rule(stream=st.integers(0, STREAMS - 1))
    def hold(self, stream):
        """Hold a stream with testing.hold (queued in order with the runtime's own work)."""
        cm = testing.hold(self.streams[stream], timeout=30)
        latch = cm.__enter__()
        self.next_latch += 1
        self.model.latch(stream, self.next_latch)
        self.latches.append((cm, latch, self.next_latch))

    @precondition(lambda self: self.latches)
    @rule(idx=st.integers(0, 7))
    def release(self, idx):
        cm, latch, mid = self.latches.pop(idx % len(self.latches))
        latch.release()
        cm.__exit__(None, None, None)
        self.model.release(mid)

    # -- rules: sync points --------------------------------------------------------------------------

    @precondition(lambda self: self.launches)
    @rule(idx=st.integers(0, 255))
    def sync_one(self, idx):
        """Wait on one launch (not held behind a latch): raising its error observes its failure."""
        p = self.launches[idx % len(self.launches)]
        ml = p.model
        if self.model.blocked(ml.hold_clock):
            return

        async def wait():
            try:
                await p.real.wait()
            except PtoError:
                pass

        self._run(wait(), f"waiting for {p}")
        self.model.observe_through(ml.clock)
        self._check_launch(p)

    @rule()
    def barrier(self):
        self._barrier()
        self._check_all()

    def _barrier(self):
        while self.latches:
            cm, latch, mid = self.latches.pop()
            latch.release()
            cm.__exit__(None, None, None)

        async def all_streams():
            got = []
            for s in self.streams:
                try:
                    await s  # raises the failure the stream carries, as an event would
                except PtoError as exc:
                    got.append(exc)
                else:
                    got.append(None)
            return got

        got = self._run(all_streams(), "a barrier on every stream")
        carried = self.model.barrier()
        for i, (exc, failure) in enumerate(zip(got, carried)):
            if failure is None:
                assert exc is None, f"await s{i} raised {exc!r}; the model says it carries no failure"
                continue
            assert isinstance(exc, PtoDependencyError), f"await s{i}: {exc!r}, model: carries {failure}"
            if self.CHECK_CAUSE:
                cause = exc.__cause__
                assert cause is not None, f"await s{i}: a dependency error without its first failure: {exc}"
                assert type(cause).__name__ == failure.kind, (
                    f"await s{i}: first failure {type(cause).__name__} ({cause}), model {failure.kind}")

    # -- checks ----------------------------------------------------------------------------------------

    def _check_launch(self, p: Pair):
        real, ml = p.real, p.model
        assert real.done(), f"{p}: not done at a sync point"
        exc = real.exception()  # delivers the error: observes the failure it is or depends on
        self.model.observe_raised(ml)
        got = OK if exc is None else type(exc).__name__
        assert got == ml.outcome, f"{p}: runtime {got} ({exc}), model {ml.outcome}"
        if ml.outcome == DEPENDENCY and ml.cause is not None and self.CHECK_CAUSE:
            cause = exc.__cause__
            assert cause is not None, f"{p}: a dependency error without its first failure: {exc}"
            assert type(cause).__name__ == ml.cause.kind, (
                f"{p}: first failure {type(cause).__name__} ({cause}), model {ml.cause.kind}")

    def _device_values(self, t) -> np.ndarray:
        ptr = lib.pto_mem_host_ptr(self.worker._dev, t.data_ptr)
        assert ptr != ffi.NULL
        return np.frombuffer(ffi.buffer(ptr, t.nbytes), dtype=np.float32).copy()

    def _check_all(self):
        for p in self.launches:
            self._check_launch(p)
        for p in self.events:
            ev, mev = p.real, p.model

            async def outcome():
                try:
                    await ev
                except PtoError as exc:
                    return exc
                return None

            exc = self._run(outcome(), f"awaiting {p}")
            self.model.observe_event(mev)
            if mev.fail is None:
                assert exc is None, f"{p}: failed ({exc!r}) but the model says it succeeded"
            else:
                assert isinstance(exc, PtoDependencyError), f"{p}: {exc!r}, model: failed with a dependency"
        for p in self.tensors:
            if not p.model.freed and p.model.data is not None:
                np.testing.assert_array_equal(self._device_values(p.real), p.model.data, err_msg=str(p))
        for p in self.hosts:
            if p.model.data is None:
                continue
            got = p.real.numpy() if isinstance(p.real, torch.Tensor) else p.real
            np.testing.assert_array_equal(got, p.model.data, err_msg=str(p))
        live = [p for p in self.tensors if not p.model.freed]
        m = mem_stats(self.worker)
        assert m.allocations == len(live), f"{m.allocations} device allocations, {len(live)} live tensors"
        assert m.pending_frees == 0 and m.reserved == m.in_use
        stats = self.worker.stats()
        assert stats.in_flight == 0
        assert stats.inferred_waits == self.model.inferred, (
            f"the runtime inferred {stats.inferred_waits} waits, the model {self.model.inferred}")
        # A record is pushed just before its stream's head moves: let the driver catch up.
        assert lib.pto_device_synchronize(self.worker._dev, 5_000_000) == 0
        for s in self.streams:
            assert stream_stats(s).in_flight == 0
        # Start the next round with fresh bookkeeping (resolved launches stay checked).
        self.launches.clear()
        self.events.clear()

    @invariant()
    def held_work_is_not_done(self):
        """Nothing that waits behind a held latch has completed (streams are in order)."""
        for p in self.launches:
            if self.model.blocked(p.model.clock):
                assert not p.real.done(), f"{p} completed while a latch it waits behind is held"

    def teardown(self):
        try:
            if not self.worker.is_closed:
                self._barrier()
                self._check_all()
        finally:
            for cm, _, _ in self.latches:
                cm.__exit__(None, None, None)
            self.worker.close()
            self.loop.close()
            # A failed launch or initial copy the checks skipped would warn when collected, in
            # whichever test runs then: the model accounted for it, so mark it seen.
            inits = [p.real._init for p in self.tensors if p.real._init is not None]
            for launch in [p.real for p in self.launches] + inits:
                if launch.done():
                    launch.exception()


@pytest.fixture(scope="module", autouse=True)
def _kernels(tmp_path_factory):
    global _kernel_lib
    from helpers.kernels import KernelLib

    _kernel_lib = KernelLib(tmp_path_factory.mktemp("stateful_kernels"))
    for name in KERNEL_NAMES:
        _kernel_lib.get(name, N)
    yield


class RuntimeVsModelBackPressure(RuntimeVsModel):
    """The same programs with 8-slot rings: commands wait in stream FIFOs and enter later.

    With faults: whatever waits in a FIFO when its stream's failure is drained must behave
    as it would have in the ring (test_regressions.py pins down records, latches and waits).
    """

    RING = {"ring_task_window": 8, "ring_dep_pool": 4}
    FAULTS = True


class RuntimeVsModelCompiledPath(RuntimeVsModel):
    """The same programs with the sanitizer off: launches ordered by the driver alone, and what it declines."""

    SANITIZE = "off"


class RuntimeVsModelCompiledPathBackPressure(RuntimeVsModelBackPressure):
    """The driver's path with 8-slot rings: edges and launches wait in the driver's overflow and in FIFOs."""

    SANITIZE = "off"


RuntimeVsModel.TestCase.settings = PROFILE
RuntimeVsModelBackPressure.TestCase.settings = PROFILE
RuntimeVsModelCompiledPath.TestCase.settings = PROFILE
RuntimeVsModelCompiledPathBackPressure.TestCase.settings = PROFILE
test_runtime_matches_model = RuntimeVsModel.TestCase
test_runtime_matches_model_with_backpressure = RuntimeVsModelBackPressure.TestCase
test_runtime_matches_model_on_the_compiled_path = RuntimeVsModelCompiledPath.TestCase
test_runtime_matches_model_on_the_compiled_path_with_backpressure = RuntimeVsModelCompiledPathBackPressure.TestCase
