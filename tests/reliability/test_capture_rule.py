"""A graph capture's inferred edges against the reference model, on random access sequences.

The capture asks the driver (a table of points, ``pto_hazards_decide``) for
the edges of each launch and copy it records.  Here hypothesis draws a
sequence of launches and copies on the streams of a capture (kernels that
read, write, or read and write DeviceTensors; device-to-device copies) and
of explicit waits (for another stream, or for an earlier node), and
:class:`tests.reliability.hazard_model.HazardModel` in points mode replays
the same sequence: after every call the waits the capture recorded (the
nodes they wait for, in order) must be the model's edges, and at the end
the inferred and skipped counts must agree.  The recording must also make a
graph that replays and computes what running the same calls eagerly, one
after another, computes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._capture import WAIT

from .conftest import LONG, SMALL
from .hazard_model import READ, WRITE, HazardModel

pytestmark = pytest.mark.slow  # many captures: seconds

N = 16
STREAMS = 3
TENSORS = 3

settings.register_profile("capture-rule-ci", max_examples=150, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("capture-rule-long", max_examples=1500, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_slot = st.integers(0, STREAMS - 1)
_three = st.lists(st.integers(0, TENSORS - 1), min_size=3, max_size=3, unique=True)
_two = st.lists(st.integers(0, TENSORS - 1), min_size=2, max_size=2, unique=True)
OPS = st.one_of(
    st.tuples(st.just("add"), _slot, _three),  # out = a + b: reads two, writes one
    st.tuples(st.just("inc"), _slot, st.lists(st.integers(0, TENSORS - 1), min_size=1, max_size=1)),  # x += 1
    st.tuples(st.just("copy"), _slot, _two),  # w.copy(dst, src): writes dst, reads src
    st.tuples(st.just("wait"), _slot, st.lists(_slot, min_size=1, max_size=1)),  # stream.wait(other stream)
    st.tuples(st.just("wait_node"), _slot, st.lists(st.integers(0, 1 << 16), min_size=1, max_size=1)),
)


@pytest.fixture(scope="module")
def setup(rel_kernels):
    w = ChipWorker(RunConfig(**SMALL, sanitize="off"))
    ks = {name: w.register(rel_kernels.get(name, N)) for name in ("add", "inc")}
    yield w, ks
    w.close()


def _accesses(op: str, ts: list) -> list[tuple[int, int]]:
    if op == "add":
        return [(ts[0], READ), (ts[1], READ), (ts[2], WRITE)]
    if op == "inc":
        return [(ts[0], READ | WRITE)]
    return [(ts[0], WRITE), (ts[1], READ)]  # copy(dst, src)


def _run(w, ks, op: str, s, t: list, ts: list):
    if op == "add":
        return ks["add"](t[ts[0]], t[ts[1]], t[ts[2]], stream=s)
    if op == "inc":
        return ks["inc"](t[ts[0]], stream=s)
    return w.copy(t[ts[0]], t[ts[1]], stream=s)


@settings(settings.get_profile("capture-rule-long" if LONG else "capture-rule-ci"))
@given(ops=st.lists(OPS, min_size=6, max_size=40))
# An edge takes the clock of the access it waits for, not its stream's clock now: stream 1 waits for
# stream 2 only after its access to tensor 0, so stream 0, ordered after that access alone, still needs
# an edge for stream 2's read of tensor 1 when it writes it.
@example(ops=[("copy", 2, [2, 1]), ("inc", 1, [0]), ("wait", 1, [2]), ("inc", 0, [0]), ("inc", 0, [1])])
def test_a_captures_edges_are_the_reference_models(setup, ops):
    w, ks = setup
    streams = [w.stream() for _ in range(STREAMS)]
    sids = [s.id for s in streams]
    rng = np.random.default_rng(len(ops))
    init = [rng.standard_normal(N).astype(np.float32) for _ in range(TENSORS)]
    t = [w.alloc_tensor(N, np.float32, init=x, stream=streams[0]) for x in init]
    w.sync(timeout=30)
    model = HazardModel(points=True)
    for sid in sids:
        model.stream(sid)
    pos = 0  # the capture's positions: one per launch or copy
    nodes: list[tuple] = []  # (node, its model mark)
    by_pos: dict[int, object] = {}
    before = w.stats()
    with w.capture(name="random", stream=streams[0]) as cap:
        start = streams[0].record()
        start_mark = model.mark(sids[0], pos + 1)
        for s, sid in zip(streams[1:], sids[1:]):
            s.wait(start)
            model.waited(sid, start_mark)
        for op, slot, arg in ops:
            s, sid = streams[slot], sids[slot]
            if op == "wait":
                other = arg[0]
                if other != slot:
                    s.wait(streams[other])  # a record on the other stream, and a wait for it
                    model.waited(sid, model.mark(sids[other], pos + 1))
                continue
            if op == "wait_node":
                if nodes:
                    node, mark = nodes[arg[0] % len(nodes)]
                    s.wait(node)
                    if node.stream is not s:
                        model.waited(sid, mark)
                continue
            ncmds = len(cap._cmds)
            node = _run(w, ks, op, s, t, arg)
            pos += 1
            edges = model.decide(sid, _accesses(op, arg), pos)
            waited = [cmd.data[1] for cmd in cap._cmds[ncmds:] if cmd.kind == WAIT]
            assert waited == [by_pos[e[1]].index for e in edges], (op, slot, arg)
            by_pos[pos] = node
            nodes.append((node, model.mark(sid, pos + 1)))
        for s in streams[1:]:
            streams[0].wait(s)
    g = cap.graph
    after = w.stats()
    assert g.inferred_waits == model.inferred == after.inferred_waits - before.inferred_waits
    assert after.skipped_waits - before.skipped_waits == model.skipped
    # The graph computes what the calls compute one after another (its edges and waits order them).
    expect = [x.copy() for x in init]
    for op, _, ts in ops:
        if op == "add":
            expect[ts[2]] = expect[ts[0]] + expect[ts[1]]
        elif op == "inc":
            expect[ts[0]] = expect[ts[0]] + 1
        elif op == "copy":
            expect[ts[0]] = expect[ts[1]].copy()
    g.replay()
    for x, want in zip(t, expect):
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-5)
    g.close()
    for x in t:
        x.free()
