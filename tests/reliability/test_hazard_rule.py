"""The driver's ordering decisions against the reference model, on random access sequences.

A hypothesis :class:`RuleBasedStateMachine` drives one driver table
(``pto_hazards_*``, on the streams of a worker whose own ordering is off)
and :class:`tests.reliability.hazard_model.HazardModel` with the same calls:
accesses ordered and noted by the general calls (``pto_hazards_order``, the
edges queued with ``pto_hazards_queue_edge`` or through marks, then
``pto_hazards_note``), launches ordered by the driver alone
(``pto_hazards_launch``, which must decline exactly when an edge needs a
point it cannot queue: a closed source or an exact point; and the same in
``pto_stream_launch``'s shape, ``pto_stream_launch_ordered``, with the
table attached to the device and the accesses declared by the kernel, as
the runtime launches), explicit waits
on marks, writes with exact points, closes (reads folding into the fold
point) and forgotten allocations.  Every decision must match: the edges in
order with their positions and exact points, and the inferred and skipped
counts; and the clocks agree on whether each stream is ordered after each
other's accesses.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pypto_async._driver import check, ffi, lib
from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import LONG, SMALL
from .hazard_model import MANUAL, READ, WRITE, HazardModel

pytestmark = pytest.mark.slow  # a state machine: seconds

STREAMS = 5
TENSORS = 4
ADDR = 0x100000  # the rule needs only addresses: tensor j is at ADDR * (j + 1)
FLAGS = st.sampled_from([READ, READ, WRITE, READ | WRITE, READ | MANUAL, WRITE | MANUAL])

settings.register_profile("hazard-rule-ci", max_examples=150, stateful_step_count=50, derandomize=True,
                          deadline=None)
settings.register_profile("hazard-rule-long", max_examples=1000, stateful_step_count=100, deadline=None)


class DriverVsModel(RuleBasedStateMachine):
    """The same calls on the driver's table and on the model."""

    @initialize()
    def open(self):
        self.w = ChipWorker(RunConfig(**SMALL, auto_deps=False, sanitize="off"))
        out = ffi.new("pto_hazards **")
        check(lib.pto_hazards_create(self.w._dev, out), "pto_hazards_create")
        self.hz = out[0]
        k = ffi.new("pto_kernel **")
        check(lib.pto_kernel_builtin(self.w._dev, b"noop", k), "pto_kernel_builtin")
        self.noop = k[0]
        check(lib.pto_hazards_attach(self.hz), "pto_hazards_attach")  # for pto_stream_launch_ordered
        self.kernels: dict[tuple, object] = {}  # accesses -> a noop that declared them
        self.model = HazardModel()
        self.streams = [self.w.stream() for _ in range(STREAMS + 1)]  # the last: the fold point
        for s in self.streams:
            check(lib.pto_hazards_stream(self.hz, s._ptr), "pto_hazards_stream")
            self.model.stream(s.id)
        fold = self.streams[-1].id
        lib.pto_hazards_set_fold(self.hz, fold)
        self.model.fold = fold
        self.closed: dict[int, tuple] = {}  # closed stream id -> (driver mark, model mark) of its final point
        self.exact: dict[int, tuple] = {}  # exact point -> (driver mark, model mark)
        self.tok = 1 << 40
        self.edges = ffi.new("pto_hz_edge[]", 64)
        self.counts = ffi.new("uint64_t[2]")

    def teardown(self):
        if getattr(self, "w", None) is None:
            return
        self.w.sync(timeout=30)
        lib.pto_hazards_destroy(self.hz)
        for k in (self.noop, *self.kernels.values()):
            lib.pto_kernel_unload(k)
        self.w.close()

    def _next(self) -> int:
        self.tok += 1
        return self.tok

    def _mark(self, sid: int, pos: int) -> tuple:
        return ffi.gc(lib.pto_hazards_mark(self.hz, sid, pos), lib.pto_hz_mark_release), self.model.mark(sid, pos)

    def _open_stream(self, i: int):
        s = self.streams[i % STREAMS]
        return None if s.id in self.closed else s

    def _accesses(self, picks) -> tuple:
        acc = ffi.new("pto_hz_access[]", len(picks))
        model = []
        for k, (j, flags) in enumerate(picks):
            acc[k].addr = ADDR * (j + 1)
            acc[k].flags = flags
            model.append((ADDR * (j + 1), flags))
        return acc, model

    def _check_edges(self, n: int, want: list) -> None:
        got = [(int(e.src), int(e.pos), int(e.exact), int(e.index)) for e in self.edges[0:n]]
        assert got == want, (got, want)

    @rule(i=st.integers(0, STREAMS - 1), picks=st.lists(st.tuples(st.integers(0, TENSORS - 1), FLAGS),
                                                        min_size=1, max_size=3))
    def access(self, i, picks):
        """An access ordered and noted by the general calls (a copy, a replay, a first use)."""
        s = self._open_stream(i)
        if s is None:
            return
        acc, model = self._accesses(picks)
        n = check(lib.pto_hazards_order(self.hz, s.id, acc, len(picks), self.edges, 64), "pto_hazards_order")
        want = self.model.order(s.id, model)
        self._check_edges(n, want)
        for src, pos, exact, _ in want:
            if exact:
                dmark, mmark = self.exact[exact]
                lib.pto_hazards_waited(self.hz, s.id, dmark)
                self.model.waited(s.id, mmark)
            elif src in self.closed:
                dmark, mmark = self.closed[src]
                lib.pto_hazards_waited(self.hz, s.id, dmark)
                self.model.waited(s.id, mmark)
            else:
                tok = self._next()
                check(lib.pto_hazards_queue_edge(self.hz, s.id, src, tok), "pto_hazards_queue_edge")
                self.model.edge(s.id, src, tok)
        pos = self._next()
        check(lib.pto_hazards_note(self.hz, s.id, acc, len(picks), pos), "pto_hazards_note")
        self.model.note(s.id, model, pos)

    @rule(i=st.integers(0, STREAMS - 1), picks=st.lists(st.tuples(st.integers(0, TENSORS - 1),
                                                                  st.sampled_from([READ, WRITE, READ | WRITE])),
                                                        min_size=1, max_size=3))
    def launch(self, i, picks):
        """A launch the driver orders alone, or declines with nothing changed."""
        self._launch(i, picks, False)

    @rule(i=st.integers(0, STREAMS - 1), picks=st.lists(st.tuples(st.integers(0, TENSORS - 1),
                                                                  st.sampled_from([READ, WRITE, READ | WRITE])),
                                                        min_size=1, max_size=3))
    def launch_ordered(self, i, picks):
        """The same in pto_stream_launch's shape: the attached table, the kernel's declared accesses."""
        self._launch(i, picks, True)

    def _kernel(self, access: tuple):
        k = self.kernels.get(access)
        if k is None:
            out = ffi.new("pto_kernel **")
            check(lib.pto_kernel_builtin(self.w._dev, b"noop", out), "pto_kernel_builtin")
            k = self.kernels[access] = out[0]
            check(lib.pto_kernel_set_arg_access(k, ffi.new("uint8_t[]", access), len(access)),
                  "pto_kernel_set_arg_access")
        return k

    def _launch(self, i, picks, shaped: bool):
        s = self._open_stream(i)
        if s is None:
            return
        args = ffi.new("uint64_t[]", [ADDR * (j + 1) for j, _ in picks])
        _, model = self._accesses(picks)
        edge_tok, tok = self._next(), self._next()
        skipped = self.model.skipped
        want = self.model.order(s.id, model)
        if shaped:  # the wait-many's token is tok - 1
            rc = lib.pto_stream_launch_ordered(s._ptr, self._kernel(tuple(f for _, f in picks)), 1, args,
                                               len(picks), tok)
        else:
            access = ffi.new("uint8_t[]", [f for _, f in picks])
            rc = lib.pto_hazards_launch(self.hz, s._ptr, self.noop, 1, args, len(picks), access, edge_tok, tok)
        assert rc >= 0, ffi.string(lib.pto_last_error())
        declines = any(exact or src in self.closed for src, _, exact, _ in want)
        assert (rc == lib.PTO_HZ_DECLINED) == declines, (rc, want)
        if declines:
            self.model.skipped = skipped  # nothing counted
            return
        if want:
            self.model.edges(s.id, [src for src, _, _, _ in want], edge_tok)
        self.model.note(s.id, model, tok)

    @rule(i=st.integers(0, STREAMS - 1), j=st.integers(0, STREAMS))
    def wait(self, i, j):
        """Stream i waits for a point recorded on stream j now (an explicit wait)."""
        s, src = self._open_stream(i), self.streams[j] if j == STREAMS else self._open_stream(j)
        if s is None or src is None or s is src:
            return
        dmark, mmark = self._mark(src.id, self._next())
        lib.pto_hazards_waited(self.hz, s.id, dmark)
        self.model.waited(s.id, mmark)

    @rule(i=st.integers(0, STREAMS - 1), j=st.integers(0, TENSORS - 1))
    def written(self, i, j):
        """An initial copy with its exact point right after it (alloc_tensor(init=...))."""
        s = self._open_stream(i)
        if s is None:
            return
        pos, exact = self._next(), self._next()
        self.exact[exact] = self._mark(s.id, exact)
        check(lib.pto_hazards_written(self.hz, s.id, ADDR * (j + 1), pos, exact), "pto_hazards_written")
        self.model.written(s.id, ADDR * (j + 1), pos, exact)

    @precondition(lambda self: len(self.closed) < STREAMS - 1)
    @rule(i=st.integers(0, STREAMS - 1))
    def close(self, i):
        """Stream i closes: its final point, and the fold point's wait for it."""
        s = self._open_stream(i)
        if s is None:
            return
        self.closed[s.id] = self._mark(s.id, self._next())
        folded = self._next()
        lib.pto_hazards_stream_closed(self.hz, s.id, folded)
        self.model.closed(s.id, folded)

    @rule(j=st.integers(0, TENSORS - 1))
    def forget(self, j):
        lib.pto_hazards_forget(self.hz, ADDR * (j + 1))
        self.model.forget(ADDR * (j + 1))

    @invariant()
    def agree(self):
        if getattr(self, "w", None) is None:
            return
        lib.pto_hazards_counts(self.hz, self.counts)
        assert (int(self.counts[0]), int(self.counts[1])) == (self.model.inferred, self.model.skipped)
        for a in self.streams:
            for b in self.streams:
                if a is not b:
                    for pos in (self.tok - 3, self.tok - 1):
                        assert bool(lib.pto_hazards_ordered(self.hz, a.id, b.id, pos)) == \
                            self.model.ordered(a.id, b.id, pos), (a.id, b.id, pos)


DriverVsModel.TestCase.settings = settings.get_profile("hazard-rule-long" if LONG else "hazard-rule-ci")
TestDriverVsModel = DriverVsModel.TestCase
