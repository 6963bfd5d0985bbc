"""Return-style calls: the outputs a call makes, in every parameter order (runtime/_call.py, _kernel.py).

A return-style call passes the inputs only; the ``Out`` parameters' arrays are made by the call
(torch tensors when an argument is a torch tensor, numpy arrays otherwise) and returned.  Inputs
are random and every output is compared with torch or numpy; a call's output is new each time, so
each call is checked against its own inputs (a block reused from an earlier output would hold that
call's values).
"""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoClosedError
from pypto_async.runtime import ChipWorker, Launch, RunConfig

torch = pytest.importorskip("torch")

R, C = 8, 16
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pl.jit
def out_between(x: pl.Tensor, out: pl.Out[pl.Tensor], acc: pl.InOut[pl.Tensor], w: pl.Tensor):
    # An Out before an InOut and an input: the outputs are not the last parameters.
    with pl.at(level=pl.Level.CORE_GROUP):
        tx = pl.load(x, [0, 0], [R, C])
        pl.store(pl.mul(tx, pl.load(w, [0, 0], [R, C])), [0, 0], out)
        pl.store(pl.add(pl.load(acc, [0, 0], [R, C]), tx), [0, 0], acc)
    return out, acc


@pl.jit
def two_outs_first(s: pl.Out[pl.Tensor], d: pl.Out[pl.Tensor], a: pl.Tensor, b: pl.Tensor):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.add(ta, tb), [0, 0], s)
        pl.store(pl.sub(ta, tb), [0, 0], d)
    return s, d


@pytest.fixture(scope="module")
def programs():
    z = np.zeros((R, C), np.float32)
    return ir.compile(out_between.lower(z, z, z, z)), ir.compile(two_outs_first.lower(z, z, z, z))


def _rand(g):
    return torch.randn(R, C, generator=g)


@pytest.mark.slow
def test_an_out_between_inputs_is_made_returned_and_fresh_each_call(programs):
    between, _ = programs
    g = torch.Generator().manual_seed(3)
    with ChipWorker(RunConfig(**SMALL)) as w:
        h = w.register(between)
        seen = []
        for _ in range(3):
            x, wt, acc = _rand(g), _rand(g), _rand(g)
            want_acc = acc + x
            got = h(x, acc, wt)  # inputs only: x, acc (InOut), w
            # The return style returns the Out parameters only; the InOut is updated in place.
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and tuple(got.shape) == (R, C)
            assert got.is_contiguous() and got.untyped_storage().resizable()  # torch's own memory
            torch.testing.assert_close(got, x * wt, rtol=0, atol=0)
            torch.testing.assert_close(acc, want_acc, rtol=0, atol=0)
            assert all(got is not s for s in seen)
            seen.append(got)


def test_outputs_first_with_numpy_inputs_are_numpy(programs):
    _, first = programs
    rng = np.random.default_rng(5)
    with ChipWorker(RunConfig(**SMALL)) as w:
        for _ in range(2):
            a = rng.standard_normal((R, C)).astype(np.float32)
            b = rng.standard_normal((R, C)).astype(np.float32)
            s, d = w.run(first, a, b)
            assert type(s) is np.ndarray and type(d) is np.ndarray and s.dtype == np.float32
            np.testing.assert_array_equal(s, a + b)
            np.testing.assert_array_equal(d, a - b)


def test_one_torch_input_among_numpy_ones_makes_torch_outputs(programs):
    _, first = programs
    g = torch.Generator().manual_seed(11)
    a, b = _rand(g), _rand(g)
    with ChipWorker(RunConfig(**SMALL)) as w:
        s, d = w.run(first, a.numpy(), b)
        assert isinstance(s, torch.Tensor) and isinstance(d, torch.Tensor)
        torch.testing.assert_close(s, a + b, rtol=0, atol=0)
        torch.testing.assert_close(d, a - b, rtol=0, atol=0)


@pytest.mark.anyio
async def test_async_return_style_awaits_to_the_outputs(programs, anyio_backend):
    between, first = programs
    g = torch.Generator().manual_seed(13)
    x, wt, acc = _rand(g), _rand(g), _rand(g)
    want_acc = acc + x
    async with ChipWorker(RunConfig(**SMALL)) as w:
        launch = w.register(between)(x, acc, wt)
        assert isinstance(launch, Launch)
        got = await launch
        torch.testing.assert_close(got, x * wt, rtol=0, atol=0)
        torch.testing.assert_close(acc, want_acc, rtol=0, atol=0)
        s, d = await w.register(first)(x, wt)
        torch.testing.assert_close(s, x + wt, rtol=0, atol=0)
        torch.testing.assert_close(d, x - wt, rtol=0, atol=0)


def test_bad_inputs_and_a_closed_worker_are_refused_before_queueing(programs):
    between, _ = programs
    g = torch.Generator().manual_seed(17)
    x, wt, acc = _rand(g), _rand(g), _rand(g)
    w = ChipWorker(RunConfig(**SMALL))
    h = w.register(between)
    before = w.stats().commands_submitted
    with pytest.raises(PtoArgumentError, match="argument 'w': expected shape"):
        h(x, acc, torch.zeros(R, C + 1))
    with pytest.raises(PtoArgumentError, match=r"takes 4 \(in place\) or 3 \(return style\)"):
        h(x, acc)
    assert w.stats().commands_submitted == before
    w.close()
    with pytest.raises(PtoClosedError):
        h(x, acc, wt)
