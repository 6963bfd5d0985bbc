"""Tests of the reference model itself: it must predict what the design promises."""

from __future__ import annotations

import numpy as np

from .model import COPY_FAULT, DEPENDENCY, KERNEL_FAULT, OK, Model


def _v(x):
    return np.full(4, x, np.float32)


def test_stream_order_and_kernels():
    m = Model(1)
    a, b = m.alloc(4, 0, _v(1.5)), m.alloc(4, 0, _v(-2.0))
    out = m.alloc(4, 0, None)
    assert out.data is None  # fresh device memory is unknown
    assert m.launch("add", [a, b, out], 0).outcome == OK
    np.testing.assert_array_equal(out.data, _v(-0.5))
    m.launch("inc", [out], 0)
    m.launch("scale", [out, 3.0, a], 0)
    np.testing.assert_array_equal(a.data, _v(1.5))


def test_host_arrays_go_in_and_out():
    m = Model(1)
    x, y = m.host(_v(2.0)), m.host(_v(7.0))
    assert m.launch("copy", [x, y], 0).outcome == OK
    np.testing.assert_array_equal(y.data, _v(2.0))


def test_kernel_fault_fails_dependents_until_observed():
    m = Model(2)
    t = m.alloc(4, 0, _v(1.0))
    f = m.launch("fail", [t], 0)
    assert f.outcome == KERNEL_FAULT
    dep = m.launch("inc", [t], 0)
    assert dep.outcome == DEPENDENCY and dep.cause.kind == KERNEL_FAULT
    np.testing.assert_array_equal(t.data, _v(1.0))  # a failed launch writes nothing
    ev = m.record(0)
    assert ev.fail is not None
    m.wait(1, ev)
    u = m.alloc(4, 1, _v(5.0))
    dep1 = m.launch("inc", [u], 1)
    assert dep1.outcome == DEPENDENCY  # the waiting stream fails too
    m.observe_through(dep.clock)  # drained: observes nothing
    assert m.launch("inc", [t], 0).outcome == DEPENDENCY
    m.observe_raised(dep)  # its error delivered: stream 0's failure observed
    assert m.launch("inc", [t], 0).outcome == OK  # the stream recovered after observation
    np.testing.assert_array_equal(t.data, _v(2.0))
    assert m.unobserved() == [m.streams[1]]  # stream 1's own (propagated) failure stands
    m.observe_raised(dep1)
    assert m.unobserved() == []
    assert m.launch("inc", [u], 1).outcome == OK


def test_observing_a_propagated_failure_observes_where_it_came_from():
    m = Model(3)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("fail", [t], 0)
    m.wait(1, m.record(0))  # stream 1 fails with stream 0's failure
    m.wait(2, m.record(1))  # stream 2 with stream 1's
    dep = m.launch("inc", [m.alloc(4, 2, _v(1.0))], 2)
    assert dep.outcome == DEPENDENCY and all(s.fail is not None for s in m.streams)
    m.observe_raised(dep)  # along the chain of waits: 2, then 1, then 0
    assert m.unobserved() == []


def test_syncing_the_streams_raises_and_observes_what_each_carries():
    m = Model(3)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("fail", [t], 0)
    m.wait(1, m.record(0))  # stream 1 fails with stream 0's failure
    before = m.launch("inc", [t], 0)
    assert before.outcome == DEPENDENCY
    carried = m.barrier()
    assert carried == [before.cause, before.cause, None]  # stream 2 carries nothing
    assert m.unobserved() == []
    assert m.launch("inc", [t], 0).outcome == OK  # queued after the sync: runs
    np.testing.assert_array_equal(t.data, _v(2.0))
    assert m.barrier() == [None, None, None]  # delivered once


def test_syncing_a_stream_observes_the_failure_it_came_from():
    m = Model(2)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("fail", [t], 0)
    m.wait(1, m.record(0))
    carried = m.barrier(order=[1, 0])  # stream 1 first: its failure came from stream 0's
    assert carried[0] is not None and carried[1] is None  # stream 0 was observed through stream 1
    assert m.unobserved() == []


def test_observing_an_event_observes_its_stream():
    m = Model(2)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("fail", [t], 0)
    ev = m.record(0)
    m.observe_event(ev)
    assert m.unobserved() == []
    assert m.launch("inc", [t], 0).outcome == OK


def test_injected_fault_hits_the_next_command_even_on_a_failed_stream():
    m = Model(1)
    t = m.alloc(4, 0, _v(1.0))
    m.inject(0, COPY_FAULT)
    h = m.host(_v(3.0))
    assert m.copy(t, h, 0).outcome == COPY_FAULT
    m.inject(0, COPY_FAULT)  # consumed by a command that fails as a dependent anyway
    dep = m.copy(t, h, 0)
    assert dep.outcome == DEPENDENCY
    m.observe_raised(dep)
    assert m.copy(t, h, 0).outcome == OK
    np.testing.assert_array_equal(t.data, _v(3.0))


def test_conflicts_need_an_event_between_streams():
    m = Model(2)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("inc", [t], 0)
    # First use on stream 1 joins the allocation stream: no conflict with the alloc,
    # but the later inc on stream 0 is not ordered before a write on stream 1.
    assert m.conflicts(1, writes=[t]) == {0}
    ev = m.record(0)
    m.wait(1, ev)
    assert m.conflicts(1, writes=[t]) == set()


def test_latches_block_what_depends_on_them():
    m = Model(2)
    m.latch(0, 1)
    t = m.alloc(4, 0, _v(1.0))
    lc = m.launch("inc", [t], 0)
    assert m.blocked(lc.clock)
    other = m.launch("inc", [m.alloc(4, 1, _v(1.0))], 1)
    assert not m.blocked(other.clock)
    m.release(1)
    assert not m.blocked(lc.clock)


def test_free_joins_other_users_without_their_failure():
    m = Model(2)
    t = m.alloc(4, 0, _v(1.0))
    m.launch("inc", [t], 1)  # first use on stream 1 (joins stream 0)
    failed = m.launch("fail", [t], 1)
    m.free(t, 0)  # joins stream 1 through an ordering point: stream 0 stays healthy
    assert t.freed
    later = m.launch("inc", [m.alloc(4, 0, _v(1.0))], 0)
    assert later.outcome == OK
    assert later.clock[1] > failed.pos  # ordered behind stream 1's use all the same


def test_an_injection_passes_ordering_points_by():
    m = Model(2, join_on_ready=True)
    m.inject(0)
    t = m.alloc(4, 0, None)  # its ready point is ordering-only: not hit
    u = m.alloc(4, 0, _v(1.0))  # the initial copy is the next command: hit
    assert t.ready.fail is None and u.init.outcome == COPY_FAULT


def test_a_failed_initial_copy_is_refused_once_the_host_saw_it():
    m = Model(2)
    failed = m.launch("fail", [m.alloc(4, 0, _v(1.0))], 0)  # stream 0 fails, unobserved
    t = m.alloc(4, 0, _v(2.0))  # its initial copy fails as a dependent
    assert t.data is None and t.init.outcome == DEPENDENCY
    assert m.init_state(t) == "ok"  # no sync point since: the host cannot know yet
    m.launch("inc", [m.alloc(4, 1, _v(1.0))], 1)
    other = m.launch("inc", [m.alloc(4, 1, _v(1.0))], 1)
    m.observe_through(other.clock)  # a sync point that does not cover t's copy
    assert m.init_state(t) == "unknown"
    assert m.barrier()[0] is t.init.cause  # stream 0's sync raised its failure: observed
    assert m.init_state(t) == "raise"
    m.observe_raised(failed)  # delivered already: nothing changes, stream 0 runs new work
    m.copy(t, m.host(_v(3.0)), 0)  # a full overwrite makes it good again
    m.barrier()
    assert m.init_state(t) == "ok"
    np.testing.assert_array_equal(t.data, _v(3.0))


def test_a_wait_on_a_failed_stream_still_waits():
    m = Model(2)
    m.latch(0, 1)
    ev = m.record(0)
    m.launch("fail", [m.alloc(4, 1, _v(1.0))], 1)  # stream 1 fails, unobserved
    m.wait(1, ev)  # fails as a dependent, but only once stream 0 got past the latch
    later = m.launch("inc", [m.alloc(4, 1, _v(1.0))], 1)
    assert later.outcome == DEPENDENCY
    assert m.blocked(later.clock) and m.blocked(later.hold_clock)


def test_auto_ordering_waits_once_for_a_write_on_another_stream():
    m = Model(2, join_on_ready=True, auto_deps=True)
    a = m.alloc(4, 0, _v(1.0))
    out = m.alloc(4, 1, None)
    m.launch("inc", [a], 0)  # a write on stream 0
    m.launch("copy", [a, out], 1)  # a read on stream 1: an edge from stream 0
    assert m.inferred == 1
    np.testing.assert_array_equal(out.data, _v(2.0))
    m.launch("copy", [a, out], 1)  # the edge queued before implies this one
    out0 = m.alloc(4, 0, None)
    m.launch("copy", [a, out0], 0)  # a read after a read (and the write on its own stream): none
    assert m.inferred == 1
    m.launch("inc", [a], 1)  # a write after the read on stream 0: an edge from stream 0 again
    assert m.inferred == 2
    np.testing.assert_array_equal(a.data, _v(3.0))
