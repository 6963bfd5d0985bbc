"""A pipelined batch loop: H2D, compute and D2H overlap on three streams.

Each batch is copied in on one stream, processed on a second and copied back
on a third.  Device buffers are double-buffered, and events order the reuse:
batch i's input copy waits until batch i-2's kernel has read that slot, and
its kernel waits until batch i-2's output copy has drained it.  Nothing on the
host waits until the end, so copies of one batch run while another computes.

The program then runs the same loop with copies only and with compute only,
and prints the overlap achieved: the pipeline's time against the larger of
the two (1.0 is perfect overlap) and against their sum (no overlap).

    python examples/pipelined.py [--batches 24] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

R, C = 512, 1024
ITERS = 4  # multiply-adds per element: sets the kernel's cost against the copies'


@pl.jit
def work(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    for i in pl.range(0, R, 64):
        t = pl.load(x, [i, 0], [64, C])
        u = t
        for _ in range(ITERS):
            u = pl.add(pl.mul(u, t), t)
        pl.store(pl.exp(pl.neg(pl.abs(u))), [i, 0], y)
    return y


def reference(x: np.ndarray) -> np.ndarray:
    u = x.copy()
    for _ in range(ITERS):
        u = u * x + x
    return np.exp(-np.abs(u))


async def pipeline(w, kernel, xs, ys, *, copies=True, compute=True) -> float:
    """Run every batch through the three streams; return the wall time in seconds."""
    h2d, comp, d2h = w.stream(), w.stream(), w.stream()
    ins = [w.alloc_tensor((R, C), np.float32, stream=h2d) for _ in range(2)]
    outs = [w.alloc_tensor((R, C), np.float32, stream=comp) for _ in range(2)]
    await w.default_stream
    read = [None, None]     # event: the kernel that last read ins[slot]
    drained = [None, None]  # event: the D2H copy that last read outs[slot]
    start = time.perf_counter()
    for i, (x, y) in enumerate(zip(xs, ys)):
        slot = i % 2
        if copies:
            if read[slot] is not None:
                h2d.wait(read[slot])
            w.copy(ins[slot], x, stream=h2d)
            comp.wait(h2d.record())
        if compute:
            if drained[slot] is not None:
                comp.wait(drained[slot])
            await kernel.submit(ins[slot], outs[slot], stream=comp)  # waits only for ring room
            read[slot] = comp.record()
        if copies:
            d2h.wait(comp.record())
            w.copy(y, outs[slot], stream=d2h)
            drained[slot] = d2h.record()
    for s in (h2d, comp, d2h):
        await s
    elapsed = time.perf_counter() - start
    for t in ins + outs:
        t.free()
    for s in (h2d, comp, d2h):
        s.close()
    return elapsed


async def main(batches: int) -> dict:
    torch.manual_seed(0)
    compiled = ir.compile(work.lower(torch.zeros(R, C), torch.zeros(R, C)), platform="sim")
    xs = [np.random.default_rng(i).standard_normal((R, C)).astype(np.float32) for i in range(batches)]
    ys = [np.full((R, C), np.nan, np.float32) for _ in range(batches)]
    # One compute core and one copy engine: on a small machine each gets a CPU of its own.
    async with ChipWorker(RunConfig(platform="sim", cores=1, copy_engines=1)) as w:
        kernel = w.register(compiled)
        await pipeline(w, kernel, xs[:2], ys[:2])  # warm up
        copy_only = await pipeline(w, kernel, xs, ys, compute=False)
        compute_only = await pipeline(w, kernel, xs, ys, copies=False)
        both = await pipeline(w, kernel, xs, ys)
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
    return {
        "batches": batches,
        "copy_only_ms": copy_only * 1e3,
        "compute_only_ms": compute_only * 1e3,
        "pipelined_ms": both * 1e3,
        "vs_max": both / max(copy_only, compute_only),
        "vs_sum": both / (copy_only + compute_only),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = asyncio.run(main(args.batches))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['batches']} batches: copies alone {result['copy_only_ms']:.1f} ms, "
              f"compute alone {result['compute_only_ms']:.1f} ms, "
              f"pipelined {result['pipelined_ms']:.1f} ms")
        print(f"overlap: pipelined / max(copy, compute) = {result['vs_max']:.2f}x "
              f"(1.00 is perfect overlap); / (copy + compute) = {result['vs_sum']:.2f}x")
