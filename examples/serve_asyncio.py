"""An asyncio server: many concurrent requests against one resident weight.

The weight is copied to the device once, as a DeviceTensor.  Each request is
its own asyncio task: it awaits one launch whose input and output are host
arrays (copied in and out in stream order with the launch).  Requests spread
over a few streams; the event loop never blocks, and the completion pump
resolves many launches per wake-up.

On a small device (``--device-memory 32768``: the weight and the temporaries
of a few dozen requests) the requests are back-pressured by memory too: a
launch whose host arrays do not fit waits for requests in flight to free
their temporaries, and every request still succeeds.

    python examples/serve_asyncio.py [--requests 2000] [--concurrency 256] [--device-memory BYTES]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

D = 64  # features in and out


@pl.jit
def dense(x: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        tx = pl.load(x, [0, 0], [1, D])
        tw = pl.load(w, [0, 0], [D, D])
        pl.store(pl.relu(pl.matmul(tx, tw)), [0, 0], out)
    return out


async def serve(requests: int, concurrency: int, device_memory: int | None = None) -> dict:
    compiled = ir.compile(dense.lower(torch.zeros(1, D), torch.zeros(D, D), torch.zeros(1, D)),
                          platform="sim")
    weight = np.random.default_rng(0).standard_normal((D, D)).astype(np.float32) / np.float32(np.sqrt(D))
    async with ChipWorker(RunConfig(platform="sim", device_memory=device_memory)) as w:
        resident = w.alloc_tensor((D, D), np.float32, init=weight)  # crosses once
        handle = w.register(compiled)
        streams = [w.stream() for _ in range(4)]
        limit = asyncio.Semaphore(concurrency)
        xs = np.random.default_rng(1).standard_normal((requests, 1, D)).astype(np.float32)
        outs = np.full((requests, 1, D), np.nan, np.float32)

        async def request(i: int) -> None:
            async with limit:
                with w.use_stream(streams[i % len(streams)]):  # this task's default stream
                    await handle(xs[i], resident, outs[i])

        start = time.perf_counter()
        await asyncio.gather(*(request(i) for i in range(requests)))
        elapsed = time.perf_counter() - start
        stats = w.stats()
        resident.free()
        for s in streams:
            s.close()
    np.testing.assert_allclose(outs, np.maximum(xs @ weight, 0), rtol=1e-4, atol=1e-5)
    return {
        "requests": requests,
        "seconds": elapsed,
        "us_per_request": elapsed / requests * 1e6,
        "completions_per_wakeup": stats.completions_per_wakeup,
        "weight_bytes_h2d_once": weight.nbytes,
        "memory_waits": stats.memory_waits,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--device-memory", type=int, default=None, help="device bytes (default 1 GiB)")
    args = parser.parse_args()
    r = asyncio.run(serve(args.requests, args.concurrency, args.device_memory))
    print(f"served {r['requests']} requests in {r['seconds'] * 1e3:.0f} ms "
          f"({r['us_per_request']:.1f} us each), "
          f"{r['completions_per_wakeup']:.1f} completions per pump wake-up, "
          f"{r['memory_waits']} waited for device memory; all outputs verified")
