"""The asyncio server, under trio: many concurrent requests against one resident weight.

Same program as ``serve_asyncio.py``; only the event loop differs.  The
worker's completion pump is a trio system task waiting on the driver's
completion fd, and each request is a task in a nursery.

    python examples/serve_trio.py [--requests 2000] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import trio

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

D = 64


@pl.jit
def dense(x: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        tx = pl.load(x, [0, 0], [1, D])
        tw = pl.load(w, [0, 0], [D, D])
        pl.store(pl.relu(pl.matmul(tx, tw)), [0, 0], out)
    return out


async def serve(requests: int, concurrency: int) -> dict:
    compiled = ir.compile(dense.lower(torch.zeros(1, D), torch.zeros(D, D), torch.zeros(1, D)),
                          platform="sim")
    weight = np.random.default_rng(0).standard_normal((D, D)).astype(np.float32) / np.float32(np.sqrt(D))
    xs = np.random.default_rng(1).standard_normal((requests, 1, D)).astype(np.float32)
    outs = np.full((requests, 1, D), np.nan, np.float32)
    async with ChipWorker(RunConfig(platform="sim")) as w:
        resident = w.alloc_tensor((D, D), np.float32, init=weight)  # crosses once
        handle = w.register(compiled)
        streams = [w.stream() for _ in range(4)]
        limit = trio.Semaphore(concurrency)

        async def request(i: int) -> None:
            async with limit:
                await handle(xs[i], resident, outs[i], stream=streams[i % len(streams)])

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(requests):
                nursery.start_soon(request, i)
        elapsed = time.perf_counter() - start
        stats = w.stats()
        resident.free()
        for s in streams:
            s.close()
    np.testing.assert_allclose(outs, np.maximum(xs @ weight, 0), rtol=1e-4, atol=1e-5)
    return {"requests": requests, "seconds": elapsed, "us_per_request": elapsed / requests * 1e6,
            "completions_per_wakeup": stats.completions_per_wakeup}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    r = trio.run(serve, args.requests, args.concurrency)
    print(f"served {r['requests']} requests in {r['seconds'] * 1e3:.0f} ms "
          f"({r['us_per_request']:.1f} us each) under trio, "
          f"{r['completions_per_wakeup']:.1f} completions per pump wake-up; all outputs verified")
