"""pl.prefetch: PyPTO's GM -> L2 prefetch hint traces, is checked, and changes no value a kernel computes."""

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError, PtoError
from helpers.ir_fixtures import poison

R, C = 1, 128


@pl.program
class PrefetchThenScale:
    """PyPTO's tests/st form: warm L2 with `a`, wait, then compute from it (here `a * b + a`)."""

    @pl.function(type=pl.FunctionType.InCore)
    def kernel(self, a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[C], pl.FP32],
               out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        ctx = pl.prefetch.make_context()
        evt = pl.prefetch.async_prefetch(a, ctx)
        evt_b = pl.prefetch.async_prefetch(b, ctx)
        session = pl.prefetch.session(ctx)
        done = pl.prefetch.wait(evt, session)
        pl.prefetch.wait(evt_b, session)
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.reshape(pl.load(b, [0], [C]), [R, C])
        out = pl.store(pl.add(pl.mul(ta, tb), ta) if done else ta, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orchestrator(self, a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[C], pl.FP32],
                     out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
        out = self.kernel(a, b, out)
        return out


def test_a_prefetched_kernel_computes_what_it_computes_without(launcher, rng):
    a = rng.standard_normal((R, C), dtype=np.float32)
    b = rng.standard_normal(C, dtype=np.float32)
    out = poison((R, C))
    launcher.run(ir.compile(PrefetchThenScale), a, b, out)
    np.testing.assert_allclose(out, a * b + a, rtol=1e-6)


def test_the_handles_are_plain_names():
    assert set(pl.prefetch.__all__) >= {"make_context", "async_prefetch", "session", "wait"}
    assert pl.PrefetchAsyncContext is pl.prefetch.PrefetchAsyncContext
    assert pl.AsyncEvent is pl.prefetch.AsyncEvent and pl.AsyncSession is pl.prefetch.AsyncSession


def _trace(body):
    @pl.jit
    def k(x: pl.Tensor[[8, 8], pl.FP32], flat: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
        with pl.incore():
            body(x, flat)
            pl.store(pl.load(x, [0, 0], [8, 8]), [0, 0], y)

    k.lower(np.zeros((8, 8), np.float32), np.zeros((1, 64), np.float32), poison((8, 8)))


def test_a_flat_tensor_prefetch_traces():
    def body(x, flat):
        ctx = pl.prefetch.make_context()
        assert pl.prefetch.wait(pl.prefetch.async_prefetch(flat, ctx), pl.prefetch.session(ctx)) is True

    _trace(body)


def _other_context(x, flat):
    ctx, other = pl.prefetch.make_context(), pl.prefetch.make_context()
    pl.prefetch.wait(pl.prefetch.async_prefetch(flat, ctx), pl.prefetch.session(other))


@pytest.mark.parametrize(("body", "message"), [
    (lambda x, flat: pl.prefetch.async_prefetch(x, pl.prefetch.make_context()),
     r"async_prefetch: src must be a flat tensor .* got x of shape \[8, 8\]"),
    (lambda x, flat: pl.prefetch.async_prefetch(pl.load(flat, [0, 0], [1, 64]), pl.prefetch.make_context()),
     "async_prefetch: src must be a tensor parameter"),
    (lambda x, flat: pl.prefetch.async_prefetch(flat, None), "async_prefetch: ctx must be what"),
    (lambda x, flat: pl.prefetch.session("ctx"), "session: ctx must be what"),
    (lambda x, flat: pl.prefetch.wait(pl.prefetch.make_context(), None), "wait: event must be what"),
    (lambda x, flat: pl.prefetch.wait(pl.prefetch.async_prefetch(flat, pl.prefetch.make_context()), None),
     "wait: session_handle must be what"),
    (_other_context, r"wait: the event \(flat\) and the session come from different contexts"),
])
def test_bad_prefetch_arguments_are_compile_errors(body, message):
    with pytest.raises(PtoCompileError, match=message) as info:
        _trace(body)
    assert isinstance(info.value, PtoError)


def test_a_prefetch_outside_a_kernel_is_a_compile_error():
    with pytest.raises(PtoCompileError, match="pl.prefetch.make_context can only be called inside"):
        pl.prefetch.make_context()


def _orchestration_prefetch():
    @pl.program
    class PrefetchInOrchestration:
        @pl.function(type=pl.FunctionType.InCore)
        def kernel(self, a: pl.Tensor[[R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            return pl.store(pl.load(a, [0, 0], [R, C]), [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orchestrator(self, a: pl.Tensor[[R, C], pl.FP32],
                         out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            pl.prefetch.make_context()  # the orchestration touches no L2
            out = self.kernel(a, out)
            return out

    return PrefetchInOrchestration


def test_a_prefetch_in_an_orchestration_is_a_compile_error_at_its_line():
    with pytest.raises(PtoCompileError, match=r"test_prefetch\.py:\d+: pl\.prefetch\.make_context: a prefetch belongs "
                                              r"in an InCore function .* this is the orchestration"):
        ir.compile(_orchestration_prefetch())


def test_a_prefetch_in_an_aic_function_is_a_compile_error():
    @pl.program
    class PrefetchOnCube:
        @pl.function(type=pl.FunctionType.AIC)
        def cube(self, a: pl.Tensor[[R, C], pl.FP32], out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            ctx = pl.prefetch.make_context()
            pl.prefetch.wait(pl.prefetch.async_prefetch(a, ctx), pl.prefetch.session(ctx))
            return pl.store(pl.load(a, [0, 0], [R, C]), [0, 0], out)

        @pl.function(type=pl.FunctionType.Orchestration)
        def orchestrator(self, a: pl.Tensor[[R, C], pl.FP32],
                         out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            out = self.cube(a, out)
            return out

    with pytest.raises(PtoCompileError, match=r"make_context: a prefetch runs on the vector core \(AIV\), but this is "
                                              r"an AIC function"):
        ir.compile(PrefetchOnCube)


def test_a_prefetch_in_a_pl_at_region_of_an_orchestration_runs(launcher, rng):
    @pl.program
    class PrefetchInRegion:
        @pl.function(type=pl.FunctionType.Orchestration)
        def orchestrator(self, a: pl.Tensor[[R, C], pl.FP32],
                         out: pl.Out[pl.Tensor[[R, C], pl.FP32]]) -> pl.Tensor[[R, C], pl.FP32]:
            with pl.at(level=pl.Level.CORE_GROUP):
                ctx = pl.prefetch.make_context()
                pl.prefetch.wait(pl.prefetch.async_prefetch(a, ctx), pl.prefetch.session(ctx))
                out = pl.store(pl.mul(pl.load(a, [0, 0], [R, C]), 3.0), [0, 0], out)
            return out

    a = rng.standard_normal((R, C), dtype=np.float32)
    out = poison((R, C))
    launcher.run(ir.compile(PrefetchInRegion), a, out)
    np.testing.assert_allclose(out, 3.0 * a, rtol=1e-6)
