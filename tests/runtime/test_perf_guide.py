"""PyPTO's performance guide, page by page, on the modeled a2a3 (``platform="a2a3sim"``).

Each test takes a before/after pair from PyPTO's ``docs/en/user/performance/*``,
written as the guide writes it (``@pl.jit`` with ``pl.at`` blocks), runs both
on the modeled Ascend 910B and asserts that the modeled device time moves in
the guide's direction, with the results equal to numpy's on random data
(outputs poisoned with NaN before each run).

The figures are modeled, never the host's: each run holds submission
(``testing.hold``) until the program is queued, and times are measured from
the device's release of that hold to the last modeled end, so what the host
did meanwhile never shows.  ``docs/device_model.md`` ("The performance guide,
here") lists the figures these tests see.
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.ir._deps import program_tasks
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._profile import A2A3
from pypto_async.testing import hold

CFG = RunConfig(platform="a2a3sim")
P = A2A3
PICKUP_NS = round(P.pickup_us * 1000)
F32 = np.float32


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def poison(shape):
    return np.full(shape, np.nan, F32)


class Run:
    """One held run of a kernel: its outputs and its modeled device records."""

    def __init__(self, kernel, *arrays, config=CFG):
        # A @pl.jit kernel compiles for its arguments; a @pl.program for the config's platform.
        c = kernel.compile(*arrays, config=config) if isinstance(kernel, pl.JitFunction) else \
            ir.compile(kernel, platform=config.platform)
        with ChipWorker(config) as w:
            h = w.register(c)
            tensors = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in arrays]
            s = w.default_stream
            w.sync()
            with w.trace() as tr:
                with hold(s) as latch:
                    h.submit(*tensors)
                    latch.release()
                w.sync()
            self.outs = [t.numpy() for t in tensors]
        recs = tr.trace.records
        (held,) = [r for r in recs if r.kind_name == "latch"]
        self.t0 = held.end_ns  # the device took the submission here
        #: The work on cores: a program's tasks, or a launch's blocks.
        self.work = sorted((r for r in recs if r.kind_name in ("task", "block")),
                           key=lambda r: (r.dispatch_ns, r.block))
        assert self.work and all(r.start_ns >= self.t0 for r in self.work)

    @property
    def wall_ns(self) -> int:
        """Modeled ns from the device's release of the submission to the last core's end."""
        return max(r.end_ns for r in self.work) - self.t0

    @property
    def dispatches(self) -> int:
        """Distinct dispatches: a task each, or one for all the blocks of one launch."""
        return len({(r.kind_name, r.name, r.dispatch_ns) if r.kind_name == "block" else (r.kind_name, r.block)
                    for r in self.work})

    @property
    def pickup_ns(self) -> int:
        """Modeled ns the cores spent between a dispatch and its start, summed over the cores."""
        return sum(r.start_ns - r.dispatch_ns for r in self.work)

    @property
    def occupied_ns(self) -> int:
        """Modeled ns the cores were held (pickup and run), summed over the cores."""
        return sum(r.end_ns - r.dispatch_ns for r in self.work)


# -- 01 task granularity, b: a loop inside the InCore function ------------------------------------

ROWS, COLS = 256, 128
SMALL = 64


@pl.jit
def many_small_tasks(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.unroll(ROWS // SMALL):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [i * SMALL, 0], [SMALL, COLS])
            tb = pl.load(b, [i * SMALL, 0], [SMALL, COLS])
            pl.store(pl.add(ta, tb), [i * SMALL, 0], c)
    return c


@pl.jit
def loop_inside(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(ROWS // SMALL):
            ta = pl.load(a, [i * SMALL, 0], [SMALL, COLS])
            tb = pl.load(b, [i * SMALL, 0], [SMALL, COLS])
            pl.store(pl.add(ta, tb), [i * SMALL, 0], c)
    return c


@pytest.mark.slow
def test_a_loop_inside_the_incore_function_pays_one_dispatch_instead_of_n():
    a, b = rand((ROWS, COLS), 1), rand((ROWS, COLS), 2)
    before = Run(many_small_tasks, a, b, poison((ROWS, COLS)))
    after = Run(loop_inside, a, b, poison((ROWS, COLS)))
    for r in (before, after):
        np.testing.assert_allclose(r.outs[2], a + b, rtol=1e-6)
    n = ROWS // SMALL
    # "The N nodes collapse into one": N pickups of ~0.8 µs become one.
    assert (before.dispatches, after.dispatches) == (n, 1)
    assert (before.pickup_ns, after.pickup_ns) == (n * PICKUP_NS, PICKUP_NS)
    # The cores spend less time being told what to compute for the same work.
    assert after.occupied_ns < before.occupied_ns
    # The guide's cost, too: on an idle 48-core chip the four chunks ran side by side before, and
    # one core runs them in turn after ("the wrong trade when cores are idle").
    assert len({r.engine for r in before.work}) == n
    assert before.wall_ns < after.wall_ns


# The same trade on a busy chip ("cores busy, gaps between every bar"): 4 chunks for each of the
# 48 AIVs, as 192 tasks, or as 48 tasks with the loop inside.
PER, AIVS = 4, P.aiv_cores
FULL = PER * AIVS * SMALL


@pl.jit
def many_small_tasks_full_chip(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.range(FULL // SMALL):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [i * SMALL, 0], [SMALL, COLS])
            tb = pl.load(b, [i * SMALL, 0], [SMALL, COLS])
            pl.store(pl.add(ta, tb), [i * SMALL, 0], c)
    return c


@pl.jit
def loop_inside_full_chip(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for j in pl.parallel(AIVS):
        with pl.at(level=pl.Level.CORE_GROUP):  # each task's rows: the hull of its loop's windows
            for i in pl.range(PER):
                ta = pl.load(a, [(j * PER + i) * SMALL, 0], [SMALL, COLS])
                tb = pl.load(b, [(j * PER + i) * SMALL, 0], [SMALL, COLS])
                pl.store(pl.add(ta, tb), [(j * PER + i) * SMALL, 0], c)
    return c


@pytest.mark.slow
def test_on_a_busy_chip_a_loop_inside_shortens_the_wall():
    a, b = rand((FULL, COLS), 3), rand((FULL, COLS), 4)
    before = Run(many_small_tasks_full_chip, a, b, poison((FULL, COLS)))
    after = Run(loop_inside_full_chip, a, b, poison((FULL, COLS)))
    for r in (before, after):
        np.testing.assert_allclose(r.outs[2], a + b, rtol=1e-6)
    assert (before.dispatches, after.dispatches) == (PER * AIVS, AIVS)
    assert len({r.engine for r in after.work}) == AIVS  # every AIV busy either way
    assert after.pickup_ns * PER == before.pickup_ns
    assert after.wall_ns < 0.5 * before.wall_ns
    # With next to no orchestrator cost per task, the pickups alone still decide it.
    quiet = CFG.replace(device_profile=P.replace(orch_us_per_task=0.001))
    before0 = Run(many_small_tasks_full_chip, a, b, poison((FULL, COLS)), config=quiet)
    after0 = Run(loop_inside_full_chip, a, b, poison((FULL, COLS)), config=quiet)
    assert after0.wall_ns < before0.wall_ns
    assert before0.wall_ns - after0.wall_ns >= (PER - 1) * PICKUP_NS


# -- 01 task granularity, c: merging two InCore functions -------------------------------------------

LARGE = 128


@pl.jit
def two_tasks_via_gm(a: pl.Tensor, b: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        s = pl.add(pl.load(a, [0, 0], [LARGE, COLS]), pl.load(b, [0, 0], [LARGE, COLS]))
        pl.store(s, [0, 0], scratch)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(scratch, [0, 0], [LARGE, COLS])), [0, 0], out)
    return scratch, out


@pl.jit
def merged_chain(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        s = pl.add(pl.load(a, [0, 0], [LARGE, COLS]), pl.load(b, [0, 0], [LARGE, COLS]))
        pl.store(pl.exp(s), [0, 0], out)
    return out


@pytest.mark.slow
def test_merging_a_producer_and_its_consumer_drops_a_dispatch_and_the_gm_round_trip():
    a, b = rand((LARGE, COLS), 5), rand((LARGE, COLS), 6)
    want = np.exp(a + b)
    before = Run(two_tasks_via_gm, a, b, poison((LARGE, COLS)), poison((LARGE, COLS)))
    after = Run(merged_chain, a, b, poison((LARGE, COLS)))
    np.testing.assert_allclose(before.outs[2], a + b, rtol=1e-6)
    np.testing.assert_allclose(before.outs[3], want, rtol=1e-5)
    np.testing.assert_allclose(after.outs[2], want, rtol=1e-5)
    assert (before.dispatches, after.dispatches) == (2, 1)
    first, second = before.work
    assert second.dispatch_ns >= first.end_ns  # the consumer waited for the producer's store
    # One pickup and the intermediate's store and reload fewer: the merged task is shorter than
    # the two together, by more than the pickup alone.
    assert after.wall_ns < before.wall_ns - PICKUP_NS
    assert after.work[0].end_ns - after.work[0].start_ns < sum(r.end_ns - r.start_ns for r in before.work)


# -- 02 runtime overhead: SPMD ---------------------------------------------------------------------

BLOCKS, TILE_ROWS = 4, 64


@pl.jit
def per_block_tasks(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.unroll(BLOCKS):
        with pl.at(level=pl.Level.CORE_GROUP):
            ta = pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
            tb = pl.load(b, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
            pl.store(pl.add(ta, tb), [i * TILE_ROWS, 0], c)
    return c


@pl.jit
def spmd_blocks(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.spmd(BLOCKS):
        ta = pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
        tb = pl.load(b, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
        pl.store(pl.add(ta, tb), [i * TILE_ROWS, 0], c)
    return c


@pytest.mark.slow
def test_one_spmd_dispatch_replaces_a_dispatch_per_block():
    rows = BLOCKS * TILE_ROWS
    a, b = rand((rows, COLS), 7), rand((rows, COLS), 8)
    before = Run(per_block_tasks, a, b, poison((rows, COLS)))
    after = Run(spmd_blocks, a, b, poison((rows, COLS)))
    for r in (before, after):
        np.testing.assert_allclose(r.outs[2], a + b, rtol=1e-6)
    assert (before.dispatches, after.dispatches) == (BLOCKS, 1)
    # "One task occupying many core lanes at once": every block dispatched together, on its own core.
    assert len({r.dispatch_ns for r in after.work}) == 1 and len({r.engine for r in after.work}) == BLOCKS
    assert len({r.dispatch_ns for r in before.work}) == BLOCKS  # a staircase, one submission each
    assert after.wall_ns < before.wall_ns


# -- 02 runtime overhead: allow_early_resolve --------------------------------------------------------


@pl.jit
def early_resolve(a: pl.Tensor, b: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
        s = pl.add(pl.load(a, [0, 0], [TILE_ROWS, COLS]), pl.load(b, [0, 0], [TILE_ROWS, COLS]))
        pl.store(s, [0, 0], scratch)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(scratch, [0, 0], [TILE_ROWS, COLS])), [0, 0], out)
    return scratch, out


@pl.jit
def late_resolve(a: pl.Tensor, b: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        s = pl.add(pl.load(a, [0, 0], [TILE_ROWS, COLS]), pl.load(b, [0, 0], [TILE_ROWS, COLS]))
        pl.store(s, [0, 0], scratch)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.exp(pl.load(scratch, [0, 0], [TILE_ROWS, COLS])), [0, 0], out)
    return scratch, out


@pytest.mark.slow
def test_early_resolve_stages_the_consumer_so_it_starts_as_its_producer_ends():
    a, b = rand((TILE_ROWS, COLS), 9), rand((TILE_ROWS, COLS), 10)
    flagged = Run(early_resolve, a, b, poison((TILE_ROWS, COLS)), poison((TILE_ROWS, COLS)))
    plain = Run(late_resolve, a, b, poison((TILE_ROWS, COLS)), poison((TILE_ROWS, COLS)))
    for r in (flagged, plain):  # "a pure scheduling hint: no effect on results"
        np.testing.assert_allclose(r.outs[2], a + b, rtol=1e-6)
        np.testing.assert_allclose(r.outs[3], np.exp(a + b), rtol=1e-5)
    producer, consumer = plain.work
    assert consumer.dispatch_ns == producer.end_ns and consumer.start_ns == producer.end_ns + PICKUP_NS
    producer, consumer = flagged.work
    # Staged on a second core while its producer ran, released the instant it ended: no pickup.
    assert consumer.dispatch_ns == producer.start_ns and consumer.start_ns == producer.end_ns
    assert consumer.engine != producer.engine
    assert flagged.wall_ns == plain.wall_ns - PICKUP_NS
    # "Total task count and graph shape do not change."
    assert flagged.dispatches == plain.dispatches == 2


K_CHAIN = 6


@pl.jit
def chain_flagged(acc: pl.InOut[pl.Tensor]):
    for i in pl.range(K_CHAIN):
        with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
            pl.store(pl.add(pl.load(acc, [0, 0], [TILE_ROWS, COLS]), 1.0), [0, 0], acc)
    return acc


@pl.jit
def chain_plain(acc: pl.InOut[pl.Tensor]):
    for i in pl.range(K_CHAIN):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(acc, [0, 0], [TILE_ROWS, COLS]), 1.0), [0, 0], acc)
    return acc


@pytest.mark.slow  # a chain of many modeled tasks: a second or more; the two early-resolve tests above are fast
def test_early_resolve_along_a_chain_of_short_tasks_takes_its_pickups_off_the_critical_path():
    acc = rand((TILE_ROWS, COLS), 18)
    flagged, plain = Run(chain_flagged, acc), Run(chain_plain, acc)
    for r in (flagged, plain):
        np.testing.assert_allclose(r.outs[0], acc + K_CHAIN, rtol=1e-6)
        assert r.dispatches == K_CHAIN
    dur = plain.work[0].end_ns - plain.work[0].start_ns
    orch = round(P.orch_us_per_task * 1000)
    assert plain.wall_ns == orch + K_CHAIN * (PICKUP_NS + dur)
    assert flagged.wall_ns == orch + PICKUP_NS + K_CHAIN * dur  # one pickup, the first
    for prev, cur in zip(flagged.work, flagged.work[1:]):
        assert cur.start_ns == prev.end_ns


@pl.jit
def one_of_two_producers_flagged(a: pl.Tensor, b: pl.Tensor, s1: pl.Out[pl.Tensor], s2: pl.Out[pl.Tensor],
                                 out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
        pl.store(pl.mul(pl.load(a, [0, 0], [TILE_ROWS, COLS]), 2.0), [0, 0], s1)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.mul(pl.load(b, [0, 0], [TILE_ROWS, COLS]), 2.0), [0, 0], s2)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.load(s1, [0, 0], [TILE_ROWS, COLS]), pl.load(s2, [0, 0], [TILE_ROWS, COLS])), [0, 0],
                 out)
    return s1, s2, out


@pl.jit
def both_producers_flagged(a: pl.Tensor, b: pl.Tensor, s1: pl.Out[pl.Tensor], s2: pl.Out[pl.Tensor],
                           out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
        pl.store(pl.mul(pl.load(a, [0, 0], [TILE_ROWS, COLS]), 2.0), [0, 0], s1)
    with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
        pl.store(pl.mul(pl.load(b, [0, 0], [TILE_ROWS, COLS]), 2.0), [0, 0], s2)
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.load(s1, [0, 0], [TILE_ROWS, COLS]), pl.load(s2, [0, 0], [TILE_ROWS, COLS])), [0, 0],
                 out)
    return s1, s2, out


@pytest.mark.slow
def test_early_resolve_stages_a_consumer_only_once_all_its_producers_are_flagged():
    # "Flagging one producer of a three-producer consumer buys nothing."
    a, b = rand((TILE_ROWS, COLS), 19), rand((TILE_ROWS, COLS), 20)
    shape = (TILE_ROWS, COLS)
    one = Run(one_of_two_producers_flagged, a, b, poison(shape), poison(shape), poison(shape))
    both = Run(both_producers_flagged, a, b, poison(shape), poison(shape), poison(shape))
    for r in (one, both):
        np.testing.assert_allclose(r.outs[4], 2 * a + 2 * b, rtol=1e-6)
    p1, p2, consumer = one.work
    assert consumer.dispatch_ns == max(p1.end_ns, p2.end_ns) and consumer.start_ns - consumer.dispatch_ns == PICKUP_NS
    p1, p2, consumer = both.work
    assert consumer.dispatch_ns == max(p1.start_ns, p2.start_ns)
    assert consumer.start_ns == max(p1.end_ns, p2.end_ns)
    assert both.wall_ns == one.wall_ns - PICKUP_NS


# -- 03 dependencies: serialization you did not ask for -----------------------------------------------

DN, DK, DR = 4, 2, 32  # 4 tasks, each writing 2 bands of 32 rows, interleaved: band h of task i at h * DN + i


@pl.jit
def serialized(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.range(DN):
        with pl.at(level=pl.Level.CORE_GROUP):  # writes `out` every iteration
            t = pl.load(a, [i * TILE_ROWS, 0], [TILE_ROWS, COLS])
            pl.store(pl.mul(t, 2.0), [i * TILE_ROWS, 0], out)
    return out


@pl.jit
def interleaved(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.parallel(DN):
        with pl.at(level=pl.Level.CORE_GROUP):
            for h in pl.range(DK):
                t = pl.load(a, [(h * DN + i) * DR, 0], [DR, COLS])
                pl.store(pl.mul(t, 2.0), [(h * DN + i) * DR, 0], out)
    return out


@pl.jit
def interleaved_narrow_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.parallel(DN):
        with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out]):
            for h in pl.range(DK):
                t = pl.load(a, [(h * DN + i) * DR, 0], [DR, COLS])
                pl.store(pl.mul(t, 2.0), [(h * DN + i) * DR, 0], out)
    return out


@pl.jit
def interleaved_region_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.manual_scope():
        for i in pl.parallel(DN):
            with pl.at(level=pl.Level.CORE_GROUP):
                for h in pl.range(DK):
                    t = pl.load(a, [(h * DN + i) * DR, 0], [DR, COLS])
                    pl.store(pl.mul(t, 2.0), [(h * DN + i) * DR, 0], out)
    return out


def _side_by_side(r) -> bool:
    """Whether every task of `r` ran on its own core, all of them overlapping in time."""
    return len({x.engine for x in r.work}) == len(r.work) and max(x.start_ns for x in r.work) < min(
        x.end_ns for x in r.work)


@pytest.mark.slow
def test_a_claim_the_compiler_cannot_prove_lifts_a_false_chain():
    a = rand((DN * DK * DR, COLS), 14)
    before = Run(interleaved, a, poison(a.shape))
    # Each task writes bands the compiler cannot place (they move with the loop inside it): the
    # tasks chain on `out`, each dispatched as the one before it ends.
    for prev, cur in zip(before.work, before.work[1:]):
        assert cur.dispatch_ns == prev.end_ns
    after = Run(interleaved_narrow_claim, a, poison(a.shape))  # the narrowest claim: one tensor, one task
    assert _side_by_side(after)
    assert after.wall_ns < before.wall_ns
    for r in (before, after):
        np.testing.assert_array_equal(r.outs[1], 2 * a)


@pytest.mark.slow
def test_a_manual_scope_lifts_the_same_chain():
    a = rand((DN * DK * DR, COLS), 16)
    before = Run(interleaved, a, poison(a.shape))
    after = Run(interleaved_region_claim, a, poison(a.shape))  # every task in the region
    assert _side_by_side(after) and not _side_by_side(before)
    assert after.wall_ns < before.wall_ns
    for r in (before, after):
        np.testing.assert_array_equal(r.outs[1], 2 * a)


def test_the_guides_serialized_loop_already_runs_side_by_side_here():
    # PyPTO's runtime chains these four tasks on `out` (it cannot prove their rows disjoint); here
    # the compiler evaluates each task's window, so they fork without a claim (docs/device_model.md).
    a = rand((DN * TILE_ROWS, COLS), 15)
    r = Run(serialized, a, poison(a.shape))
    np.testing.assert_array_equal(r.outs[1], 2 * a)
    assert r.dispatches == DN and _side_by_side(r)


@pl.jit
def sliced_per_task(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.parallel(DN):
        part = out[i * DK * DR:(i + 1) * DK * DR, :]  # a distinct region per iteration
        with pl.at(level=pl.Level.CORE_GROUP):
            for h in pl.range(DK):
                t = pl.load(a, [(i * DK + h) * DR, 0], [DR, COLS])
                pl.store(pl.mul(t, 2.0), [h * DR, 0], part)
    return out


def test_a_slice_per_task_is_disjoint_by_construction_with_a_loop_inside():
    # 03's fourth option, "the only one that needs no assertion": each task writes its own slice,
    # with a loop inside it. The compiler bounds a window that moves with a loop inside the task by
    # the loop's range, so the tasks need no claim to run side by side.
    a = rand((DN * DK * DR, COLS), 17)
    r = Run(sliced_per_task, a, poison(a.shape))
    np.testing.assert_array_equal(r.outs[1], 2 * a)
    assert r.dispatches == DN and _side_by_side(r)
    tasks = program_tasks(sliced_per_task.lower(a, a))
    rows = [(i * DK * DR, (i + 1) * DK * DR) for i in range(DN)]
    assert [[x.box[0] for x in t.accesses if x.tensor == "out"] for t in tasks] == [[r] for r in rows]


# -- 04 InCore: double buffering with pl.pipeline -----------------------------------------------------

NT, TR, TC = 8, 64, 128


@pl.jit
def single_buffer(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(NT):
            tile = pl.load(a, [i * TR, 0], [TR, TC])
            pl.store(pl.exp(tile), [i * TR, 0], out)
    return out


@pl.jit
def pipelined(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.pipeline(NT, stage=2):
            tile = pl.load(a, [i * TR, 0], [TR, TC])
            pl.store(pl.exp(tile), [i * TR, 0], out)
    return out


@pytest.mark.slow
def test_a_pipelined_loop_overlaps_its_loads_with_its_compute():
    a = rand((NT * TR, TC), 11)
    before = Run(single_buffer, a, poison(a.shape))
    after = Run(pipelined, a, poison(a.shape))
    for r in (before, after):
        np.testing.assert_allclose(r.outs[1], np.exp(a), rtol=1e-5)
    run = [r.work[0].end_ns - r.work[0].start_ns for r in (before, after)]
    # Single buffer: load, exp and store in turn; pipelined: the longest pipe. Each pipe of this
    # kernel moves or computes the same 256 KiB, MTE2 and MTE3 at 64 B and exp at 64 B a cycle.
    pipe_ns = NT * TR * TC * 4 / 64 / P.clock_ghz
    assert run[0] == pytest.approx(3 * pipe_ns, abs=2)
    assert run[1] == pytest.approx(pipe_ns, abs=2)
    assert after.wall_ns < before.wall_ns


# -- 04 InCore: hardware granularity (PH001) -----------------------------------------------------------

WIDE = 256  # a [.., 256] FP32 tensor: 1 KiB rows in GM
LOADS = 8


@pl.jit
def rows_of_128_bytes(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(LOADS):
            t = pl.load(a, [i * 128, 0], [128, 32])  # 128 rows of 32 FP32: 128 B each
            pl.store(t, [i * 128, 0], out)
    return out


@pl.jit
def rows_of_512_bytes(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(LOADS):
            t = pl.load(a, [i * 32, 0], [32, 128])  # 32 rows of 128 FP32: 512 B each
            pl.store(t, [i * 32, 0], out)
    return out


@pytest.mark.slow
def test_a_load_of_128_byte_rows_costs_more_than_the_same_bytes_in_512_byte_rows():
    a = rand((LOADS * 128, WIDE), 12)
    before = Run(rows_of_128_bytes, a, poison((LOADS * 128, 32)))
    after = Run(rows_of_512_bytes, a, poison((LOADS * 32, 128)))
    np.testing.assert_array_equal(before.outs[1], a[:, :32])
    np.testing.assert_array_equal(after.outs[1], a[:LOADS * 32, :128])
    assert before.outs[1].nbytes == after.outs[1].nbytes  # the same 128 KiB moved
    run = [r.work[0].end_ns - r.work[0].start_ns for r in (before, after)]
    # The 128 B rows each cost a whole 512 B granule: four times the MTE2 cycles of the 512 B rows;
    # the stores are whole-width rows of `out` (one contiguous run) in both.
    nbytes = LOADS * 128 * 32 * 4
    mte = nbytes / P.mte2_bytes_per_cycle / P.clock_ghz
    assert run[0] == pytest.approx(4 * mte + mte, abs=2)
    assert run[1] == pytest.approx(mte + mte, abs=2)
    assert after.wall_ns < before.wall_ns


# -- the performance item: a fork of 48 equal tasks on a2a3 ------------------------------------

FT, FN, FK = 64, P.aiv_cores, 300


@pl.program
class Fork48:
    """48 independent tasks of ~107 µs of counted work each (load, 300 rounds of exp(-t), store)."""

    @pl.function(type=pl.FunctionType.InCore)
    def decay(self, x: pl.Tensor[[FT, COLS], pl.FP32], y: pl.Out[pl.Tensor[[FT, COLS], pl.FP32]]):
        t = pl.load(x, [0, 0], [FT, COLS])
        for k in pl.range(FK):
            t = pl.exp(pl.mul(t, -1.0))
        pl.store(t, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[FN * FT, COLS], pl.FP32], y: pl.Out[pl.Tensor[[FN * FT, COLS], pl.FP32]]):
        for i in pl.range(FN):
            self.decay(x[i * FT:(i + 1) * FT, :], y[i * FT:(i + 1) * FT])
        return y


@pytest.mark.slow
def test_a_fork_of_48_equal_tasks_of_counted_work_takes_one_task_plus_its_pickup_within_10_percent():
    x = rand((FN * FT, COLS), 13)
    r = Run(Fork48, x, poison(x.shape))
    want = x.copy()
    for _ in range(FK):
        want = np.exp(-want)
    np.testing.assert_allclose(r.outs[1], want, rtol=1e-5)
    assert len(r.work) == FN and len({t.engine for t in r.work}) == FN  # one AIV each
    dur = {t.end_ns - t.start_ns for t in r.work}
    assert len(dur) == 1 and dur.pop() > 100_000  # equal tasks, over 100 µs of counted work
    one = r.work[0].end_ns - r.work[0].start_ns + PICKUP_NS
    assert one <= r.wall_ns <= 1.1 * one
