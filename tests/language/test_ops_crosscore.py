"""PyPTO's explicit cross-core pipes: tpush / tpop / tfree, their setup, and Group functions of AIC + AIV members."""

import numpy as np
import pytest

import pypto_async.ir as ir
import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoError, PtoNotSupported
from pypto_async.runtime import ChipWorker, RunConfig

N = 16
SLOT = N * N * 4


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _poison(*shape):
    return np.full(shape, np.nan, np.float32)


# ---- one mixed InCore function: both sides in program order ------------------------------------------------------


@pl.jit
def mixed_both_ways(a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
                    out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="mixed"):
        # V2C through pl.*, C2V through pl.system.*, pipe 1 bidirectional and pipe 0 one-way.
        pl.aiv_initialize_pipe(dir_mask=2, slot_size=SLOT, id=0)
        pl.aic_initialize_pipe(dir_mask=2, slot_size=SLOT, id=0)
        pl.system.aiv_initialize_pipe(dir_mask=3, slot_size=SLOT, id=1)
        pl.system.aic_initialize_pipe(dir_mask=3, slot_size=SLOT, id=1)
        ta = pl.load(a, [0, 0], [N, N])
        tb = pl.load(b, [0, 0], [N, N])
        pl.tpush_to_aic(pl.add(ta, tb), split=0)
        pl.tpush_to_aic(pl.sub(ta, tb), split=0, id=1)
        s = pl.tpop_from_aiv(split=0)
        d = pl.tpop_from_aiv(shape=[N, N], dtype=pl.FP32, id=1)
        acc = pl.matmul(s, d)
        pl.tfree_to_aiv(s)
        pl.tfree_to_aiv(d, id=1)
        pl.system.tpush_to_aiv(acc, split=1, id=1)
        r = pl.system.tpop_from_aic(split=1, id=1)
        y = pl.mul(r, 2.0)
        pl.system.tfree_to_aic(r)
        pl.store(y, [0, 0], out)
    return out


@pl.jit
def mixed_fp16(a: pl.Tensor[[N, 32], pl.FP16], b: pl.Tensor[[32, N], pl.FP16],
               out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.aiv_initialize_pipe(dir_mask=3, slot_size=N * 32 * 2)
        pl.aic_initialize_pipe(dir_mask=3, slot_size=N * 32 * 2)
        pl.tpush_to_aic(pl.mul(pl.load(a, [0, 0], [N, 32]), 0.5), split=0)
        left = pl.tpop_from_aiv(dtype=pl.FP16)
        acc = pl.matmul(left, pl.load(b, [0, 0], [32, N], target_memory=pl.Mem.Mat))
        pl.tfree_to_aiv(left)
        pl.tpush_to_aiv(acc, split=0)
        r = pl.tpop_from_aic()
        pl.store(pl.add(r, 1.0), [0, 0], out)
        pl.tfree_to_aic(r)
    return out


def test_a_mixed_region_pairs_pushes_with_pops_in_program_order():
    a, b, out = _rand(N, N, seed=1), _rand(N, N, seed=2), _poison(N, N)
    mixed_both_ways(a, b, out)
    np.testing.assert_allclose(out, 2.0 * ((a + b) @ (a - b)), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_fp16_tiles_cross_both_ways():
    a, b = _rand(N, 32, seed=3, dtype=np.float16), _rand(32, N, seed=4, dtype=np.float16)
    out = _poison(N, N)
    mixed_fp16(a, b, out)
    ref = (a.astype(np.float32) * 0.5).astype(np.float16).astype(np.float32) @ b.astype(np.float32) + 1.0
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)


def test_the_device_model_counts_a_pop_as_the_crossing_of_its_tile():
    from helpers.work import run_kernel

    a, b, out = _rand(N, N, seed=5), _rand(N, N, seed=6), _poison(N, N)
    w = run_kernel(mixed_both_ways.compile(a, b, out), a, b, out)
    np.testing.assert_allclose(out, 2.0 * ((a + b) @ (a - b)), rtol=1e-4, atol=1e-4)
    # Two V2C pops (Vec -> Mat, MTE1) and one C2V pop of the accumulator (Acc -> Vec, FIXPIPE).
    assert w["move_bytes"] >= 2 * SLOT and w["fixpipe_bytes"] >= SLOT
    assert w["cube_macs"][1] == N * N * N


# ---- a Group function: an AIC and an AIV member, each its own task ----------------------------------------------


@pl.program
class TwoPipes:
    @pl.function(type=pl.FunctionType.AIV)
    def vector(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
               out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.func_attr({"dual_aiv_dispatch": True})
        p0 = pl.import_peer_buffer(name="buf0", peer_func="cube")
        p1 = pl.system.import_peer_buffer(name="buf1", peer_func="cube")
        pl.aiv_initialize_pipe(pl.const(0, pl.INT32), p0, dir_mask=2, slot_size=SLOT, id=0)
        pl.aiv_initialize_pipe(pl.const(0, pl.INT32), p1, dir_mask=2, slot_size=SLOT, id=1)
        ta = pl.load(a, [0, 0], [N, N])
        tb = pl.load(b, [0, 0], [N, N])
        pl.tpush_to_aic(pl.sub(ta, tb), split=0, id=1)  # reverse id order: the ids keep the pipes apart
        pl.tpush_to_aic(pl.add(ta, tb), split=0, id=0)

    @pl.function(type=pl.FunctionType.AIC)
    def cube(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             out: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        b0 = pl.reserve_buffer(name="buf0", size=SLOT * 8, base=pl.AUTO)
        b1 = pl.system.reserve_buffer(name="buf1", size=SLOT * 8, base=pl.system.AUTO)
        pl.aic_initialize_pipe(pl.const(0, pl.INT32), b0, dir_mask=2, slot_size=SLOT, id=0)
        pl.aic_initialize_pipe(pl.const(0, pl.INT32), b1, dir_mask=2, slot_size=SLOT, id=1)
        s = pl.tpop_from_aiv(split=0, id=0)
        d = pl.tpop_from_aiv(split=0, id=1)
        r = pl.matmul(pl.move(s, target_memory=pl.Mem.Left), pl.move(d, target_memory=pl.Mem.Right))
        pl.tfree_to_aiv(s, id=0)
        pl.tfree_to_aiv(d, id=1)
        return pl.store(r, [0, 0], out)

    @pl.function(type=pl.FunctionType.Group)
    def group(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
              out: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        result = self.cube(a, b, out)  # the consumer is called first: it still runs after its producer
        self.vector(a, b, out)
        return result

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             out: pl.Out[pl.Tensor[[N, N], pl.FP32]]) -> pl.Tensor[[N, N], pl.FP32]:
        return self.group(a, b, out)


@pytest.mark.slow
def test_a_group_runs_its_members_as_tasks_on_cores_of_their_kind():
    a, b, out = _rand(N, N, seed=7), _rand(N, N, seed=8), _poison(N, N)
    c = ir.compile(TwoPipes)
    tasks = c.task_graph.tasks
    assert [t.name for t in tasks] == ["vector", "cube"]  # the producer first, whatever the Group's order
    with ChipWorker(RunConfig()) as w:  # the "sim" profile: AIC 0-1, AIV 2-5
        with w.trace() as tr:
            w.run(c, a, b, out)
            w.sync()
    np.testing.assert_allclose(out, (a + b) @ (a - b), rtol=1e-4, atol=1e-4)
    recs = {r.name: r for r in tr.trace.records if r.kind_name == "task"}
    aic = w.device_profile.aic_cores
    assert recs["cube"].engine < aic <= recs["vector"].engine
    assert recs["cube"].start_ns >= recs["vector"].end_ns  # ordered by the tile it pops


@pl.program
class CubeFeedsVector:
    @pl.function(type=pl.FunctionType.AIC)
    def cube(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aic_initialize_pipe(dir_mask=1, slot_size=SLOT, c2v_consumer_buf=pl.import_peer_buffer(
            name="c2v", peer_func="vector"))
        pl.tpush_to_aiv(pl.load(a, [0, 0], [N, N], target_memory=pl.Mem.Mat), split=0)  # no cube work

    @pl.function(type=pl.FunctionType.AIV)
    def vector(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aiv_initialize_pipe(dir_mask=1, slot_size=SLOT,
                               c2v_consumer_buf=pl.reserve_buffer(name="c2v", size=4 * SLOT, base=0x2000))
        t = pl.tpop_from_aic(split=0)
        pl.store(pl.exp(t), [0, 0], out)
        pl.tfree_to_aic(t)

    @pl.function(type=pl.FunctionType.Group)
    def group(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        self.vector(a, out)
        self.cube(a, out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        self.group(a, out)
        return out


@pytest.mark.slow
def test_an_aic_function_runs_on_an_aic_even_without_cube_work():
    a, out = _rand(N, N, seed=9), _poison(N, N)
    c = ir.compile(CubeFeedsVector)
    with ChipWorker(RunConfig()) as w:
        with w.trace() as tr:
            w.run(c, a, out)
            w.sync()
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5, atol=1e-6)
    recs = {r.name: r for r in tr.trace.records if r.kind_name == "task"}
    assert recs["cube"].engine < w.device_profile.aic_cores <= recs["vector"].engine
    assert ("core", "AIC") in next(t for t in c.program.body if getattr(t, "name", None) == "cube").hints


@pl.program
class GroupAfterATask:
    @pl.function(type=pl.FunctionType.InCore)
    def pre(self, a: pl.Tensor[[N, N], pl.FP32], x: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.store(pl.mul(pl.load(a, [0, 0], [N, N]), 2.0), [0, 0], x)

    @pl.function(type=pl.FunctionType.AIC)
    def cube(self, x: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aic_initialize_pipe(dir_mask=1, slot_size=SLOT)
        pl.tpush_to_aiv(pl.load(x, [0, 0], [N, N], target_memory=pl.Mem.Mat), split=0)

    @pl.function(type=pl.FunctionType.AIV)
    def vector(self, x: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aiv_initialize_pipe(dir_mask=1, slot_size=SLOT)
        t = pl.tpop_from_aic(split=0)
        pl.store(pl.add(t, 1.0), [0, 0], out)
        pl.tfree_to_aic(t)

    @pl.function(type=pl.FunctionType.Group)
    def group(self, x: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        self.vector(x, out)
        self.cube(x, out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[N, N], pl.FP32], x: pl.Out[pl.Tensor[[N, N], pl.FP32]],
             out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        tid = pl.submit(self.pre, a, x)[-1]
        with pl.manual_scope():  # no edge is inferred here: the hand-over still orders the members
            self.group(x, out, deps=[tid])
        return out


@pytest.mark.slow
def test_a_group_in_a_manual_scope_waits_for_its_deps_and_its_producer():
    c = ir.compile(GroupAfterATask)
    tasks = {s.name: s for s in c.program.body if getattr(s, "name", None)}
    assert tasks["cube"].deps == (tasks["pre"].task,)
    assert tasks["vector"].deps == (tasks["pre"].task, tasks["cube"].task)
    a, x, out = _rand(N, N, seed=11), _poison(N, N), _poison(N, N)
    c(a, x, out)
    np.testing.assert_allclose(out, 2.0 * a + 1.0, rtol=1e-6, atol=1e-6)


@pl.program
class BothWays:
    @pl.function(type=pl.FunctionType.AIV)
    def vector(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
               out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aiv_initialize_pipe(dir_mask=3, slot_size=SLOT)
        pl.tpush_to_aic(pl.add(pl.load(a, [0, 0], [N, N]), 1.0), split=0)
        r = pl.tpop_from_aic(split=0)  # waits for the cube's answer
        pl.store(pl.mul(r, 2.0), [0, 0], out)
        pl.tfree_to_aic(r)

    @pl.function(type=pl.FunctionType.AIC)
    def cube(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aic_initialize_pipe(dir_mask=3, slot_size=SLOT)
        x = pl.tpop_from_aiv(split=0)
        acc = pl.matmul(x, pl.load(b, [0, 0], [N, N], target_memory=pl.Mem.Mat))
        pl.tfree_to_aiv(x)
        pl.tpush_to_aiv(acc, split=0)

    @pl.function(type=pl.FunctionType.Group)
    def group(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
              out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        self.cube(a, b, out)
        self.vector(a, b, out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, a: pl.Tensor[[N, N], pl.FP32], b: pl.Tensor[[N, N], pl.FP32],
             out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        return self.group(a, b, out)


@pytest.mark.slow
def test_members_that_feed_each_other_run_as_one_task_in_an_order_that_pairs_every_pop():
    c = ir.compile(BothWays)
    assert [t.name for t in c.task_graph.tasks] == ["cube_vector"]
    a, b, out = _rand(N, N, seed=12), _rand(N, N, seed=13), _poison(N, N)
    c(a, b, out)
    np.testing.assert_allclose(out, 2.0 * ((a + 1.0) @ b), rtol=1e-4, atol=1e-4)


# ---- misuse: compile errors, raised while the kernel is traced ---------------------------------------------------


def _trace(body, *, init=True, shape=(N, N)):
    @pl.jit
    def k(a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            if init:
                pl.aiv_initialize_pipe(dir_mask=3, slot_size=SLOT)
                pl.aic_initialize_pipe(dir_mask=3, slot_size=SLOT)
            body(a, out)
        return out

    return k.trace(np.zeros((N, N), np.float32), np.zeros((N, N), np.float32))


def _push(a):
    pl.tpush_to_aic(pl.load(a, [0, 0], [N, N]), split=0)


def _pop_free():
    t = pl.tpop_from_aiv()
    pl.tfree_to_aiv(t)
    return t


def _loop_push(a):
    for _ in pl.range(2):
        _push(a)
    _pop_free()


def _double_free(a):
    _push(a)
    t = pl.tpop_from_aiv()
    pl.tfree_to_aiv(t)
    pl.tfree_to_aiv(t)


def _wrong_free(a):
    _push(a)
    t = pl.tpop_from_aiv()
    pl.tfree_to_aic(t)


def _wrong_id(a):
    _push(a)
    t = pl.tpop_from_aiv()
    pl.tfree_to_aiv(t, id=1)


MISUSE = [
    ("pop without push", lambda a, o: _pop_free(), "nothing is pushed on the V2C pipe id=0"),
    ("push without pop", lambda a, o: _push(a), "pl.tpush_to_aic at .* has no matching pl.tpop_from_aiv"),
    ("pop without tfree", lambda a, o: (_push(a), pl.tpop_from_aiv()), "is never released: call pl.tfree_to_aiv"),
    ("wrong shape", lambda a, o: (_push(a), pl.tpop_from_aiv(shape=[N, 8])), "shape=\\[16, 8\\] disagrees"),
    ("wrong dtype", lambda a, o: (_push(a), pl.tpop_from_aiv(dtype=pl.FP16)), "dtype=FP16 disagrees"),
    ("split mismatch", lambda a, o: (_push(a), pl.tpop_from_aiv(split=1)), "split=1 disagrees with split=0"),
    ("too big for the slot", lambda a, o: pl.tpush_to_aic(pl.concat(pl.load(a, [0, 0], [N, N]),
                                                                      pl.load(a, [0, 0], [N, N])), split=0),
     "larger than the pipe's slot_size=1024"),
    ("push in a loop, pop outside", lambda a, o: _loop_push(a), "different loop bodies or branches"),
    ("double tfree", lambda a, o: _double_free(a), "released already"),
    ("tfree of the other direction", lambda a, o: _wrong_free(a), "popped by pl.tpop_from_aiv; release it with pl.tfree_to_aiv"),
    ("tfree id mismatch", lambda a, o: _wrong_id(a), "id=1 disagrees with id=0"),
    ("bad dir_mask", lambda a, o: pl.aic_initialize_pipe(dir_mask=4, slot_size=SLOT, id=3), "dir_mask must be 1"),
    ("bad split", lambda a, o: pl.tpush_to_aic(pl.load(a, [0, 0], [N, N]), split=3), "split must be an int in 0..2"),
]


@pytest.mark.parametrize("case", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_is_a_compile_error(case):
    _, body, match = case
    with pytest.raises(PtoCompileError, match=match):
        _trace(body)


def test_a_pipe_used_before_it_is_initialized_is_a_compile_error():
    with pytest.raises(PtoCompileError, match="used before it is initialized on the AIV side"):
        _trace(lambda a, o: _push(a), init=False)

    def consumer_not_set_up(a, o):
        pl.aiv_initialize_pipe(dir_mask=2, slot_size=SLOT)
        _push(a)
        pl.tpop_from_aiv()

    with pytest.raises(PtoCompileError, match="used before it is initialized on the AIC side"):
        _trace(consumer_not_set_up, init=False)


def test_the_ops_outside_an_incore_function_are_compile_errors():
    calls = [lambda a: pl.tpush_to_aiv(a, split=0), lambda a: pl.tpop_from_aic(),
             lambda a: pl.aic_initialize_pipe(dir_mask=1, slot_size=SLOT), lambda a: pl.reserve_buffer(name="x", size=1),
             lambda a: pl.system.import_peer_buffer(name="x", peer_func="f")]
    for call in calls:
        @pl.program
        class P:
            @pl.function(type=pl.FunctionType.InCore)
            def k(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
                pl.store(pl.load(a, [0, 0], [N, N]), [0, 0], out)

            @pl.function(type=pl.FunctionType.Orchestration)
            def main(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
                call(a)  # in the orchestration, beside the kernel call
                self.k(a, out)
                return out

        with pytest.raises(PtoCompileError, match="belongs in an InCore function"):
            ir.compile(P)
    with pytest.raises(PtoError, match="can only be called inside a @pl.jit kernel"):
        pl.tpop_from_aiv()


@pl.jit
def whole_body(a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
    # A @pl.jit body without regions is one InCore function: its pipes pair there, checked at its end.
    pl.aiv_initialize_pipe(dir_mask=2, slot_size=SLOT)
    pl.aic_initialize_pipe(dir_mask=2, slot_size=SLOT)
    pl.tpush_to_aic(pl.load(a, [0, 0], [N, N]), split=0)
    r = pl.tpop_from_aiv()
    pl.store(pl.sub(r, 3.0), [0, 0], out)
    pl.tfree_to_aiv(r)
    return out


def test_a_jit_body_without_regions_is_one_incore_function():
    a, out = _rand(N, N, seed=10), _poison(N, N)
    whole_body(a, out)
    np.testing.assert_allclose(out, a - 3.0, rtol=1e-6, atol=1e-6)

    @pl.jit
    def unpaired(a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
        pl.aiv_initialize_pipe(dir_mask=2, slot_size=SLOT)
        pl.tpush_to_aic(pl.load(a, [0, 0], [N, N]), split=0)
        pl.store(pl.load(a, [0, 0], [N, N]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="has no matching pl.tpop_from_aiv"):
        unpaired.trace(np.zeros((N, N), np.float32), np.zeros((N, N), np.float32))


def _program(vector_body, cube_body):
    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.AIV)
        def vector(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
            pl.aiv_initialize_pipe(dir_mask=3, slot_size=SLOT)
            vector_body(a, out)

        @pl.function(type=pl.FunctionType.AIC)
        def cube(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
            pl.aic_initialize_pipe(dir_mask=3, slot_size=SLOT)
            cube_body(a, out)

        @pl.function(type=pl.FunctionType.Group)
        def group(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
            self.vector(a, out)
            self.cube(a, out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, a: pl.Tensor[[N, N], pl.FP32], out: pl.Out[pl.Tensor[[N, N], pl.FP32]]):
            self.group(a, out)
            return out

    return P


def test_group_misuse_is_a_compile_error():
    def pop_then_push_vector(a, o):
        t = pl.tpop_from_aic()
        pl.tfree_to_aic(t)
        _push(a)

    def pop_then_push_cube(a, o):
        _pop_free()
        pl.tpush_to_aiv(pl.load(a, [0, 0], [N, N], target_memory=pl.Mem.Mat), split=0)

    with pytest.raises(PtoCompileError, match="the members of this Group wait for each other: pl.tpop_from_aic"):
        ir.compile(_program(pop_then_push_vector, pop_then_push_cube))
    with pytest.raises(PtoCompileError, match="pl.tpush_to_aic at .* has no matching pl.tpop_from_aiv"):
        ir.compile(_program(lambda a, o: _push(a), lambda a, o: None))
    with pytest.raises(PtoCompileError, match="pl.tpop_from_aic runs on the AIV side .* this is an AIC function"):
        ir.compile(_program(lambda a, o: None, lambda a, o: pl.tpop_from_aic()))

    def push_in_loop(a, o):
        for _ in pl.range(2):
            _push(a)

    with pytest.raises(PtoNotSupported, match="inside a loop or a branch of a Group member"):
        ir.compile(_program(push_in_loop, lambda a, o: _pop_free()))
