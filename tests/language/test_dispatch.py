"""The seed's running page end to end: kernels dispatched through the runtime.

These tests hold the contract between the language/IR and the runtime:
``ir.compile(kernel.lower(...))`` runs under a ChipWorker with a resident
DeviceTensor, ``kernel(*args)`` compiles and dispatches, ``compiled(*args)``
does too, and a DeviceTensor handed to the jit entry is refused at trace time.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from pypto_async.runtime import ChipWorker, RunConfig

ROWS, COLS = 128, 128
PLATFORM = "a2a3sim"


@pl.jit
def add_kernel(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [ROWS, COLS])
        tb = pl.load(b, [0, 0], [ROWS, COLS])
        pl.store(pl.add(ta, tb), [0, 0], out)
    return out


@pytest.fixture
def ab():
    torch.manual_seed(0)
    return torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)


def test_seed_quickstart_resident_weight(ab):
    A, B = ab
    compiled = ir.compile(add_kernel.lower(A, B, torch.zeros(ROWS, COLS)), platform=PLATFORM)
    with ChipWorker(config=RunConfig(platform=PLATFORM)) as w:
        resident = w.alloc_tensor((ROWS, COLS), torch.float32, init=B)
        for _ in range(3):
            out = torch.full((ROWS, COLS), float("nan"))
            w.run(compiled, A, resident, out)
            torch.testing.assert_close(out, A + B, rtol=1e-6, atol=0)
        with pytest.raises(PtoCompileError, match="missing inferred tensor metadata for parameter b"):
            add_kernel(A, resident, out)
        w.free_tensor(resident)


def test_jit_call_and_compiled_call_dispatch(ab):
    A, B = ab
    with ChipWorker(config=RunConfig(platform=PLATFORM)):
        out = torch.full((ROWS, COLS), float("nan"))
        add_kernel(A, B, out)
        torch.testing.assert_close(out, A + B, rtol=1e-6, atol=0)
        compiled = add_kernel.compile(A, B, out)
        out2 = np.full((ROWS, COLS), np.nan, np.float32)
        compiled(A.numpy(), B.numpy(), out2)
        np.testing.assert_array_equal(out2, (A + B).numpy())


def test_jit_call_under_async_with_returns_an_awaitable_launch(ab):
    A, B = ab

    async def main():
        async with ChipWorker(config=RunConfig(platform=PLATFORM)):
            out = torch.full((ROWS, COLS), float("nan"))
            await add_kernel(A, B, out)
            return out

    torch.testing.assert_close(asyncio.run(main()), A + B, rtol=1e-6, atol=0)
