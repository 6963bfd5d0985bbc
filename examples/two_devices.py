"""A two-stage pipeline across two devices, with a peer copy between the stages.

Stage 1 runs on device 0 and leaves its result in device memory there; one
peer copy (``a.copy(dst_on_b, src_on_a)``) moves it to device 1, where stage
2 runs and its output comes back to the host.  Nothing waits on the host
between the stages: the copy waits on the device for stage 1, and stage 2
for the copy.  The intermediate buffers are double-buffered on both
devices, and the runtime orders their reuse (the copy into a slot on device
1 waits until stage 2 of two batches back has read it).  So while device 1
runs stage 2 of one batch, device 0 runs stage 1 of the next.

    python examples/two_devices.py [--batches 8]
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

R, C = 256, 512


@pl.jit
def stage1(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    for i in pl.range(0, R, 64):
        t = pl.load(x, [i, 0], [64, C])
        pl.store(pl.add(pl.mul(t, t), t), [i, 0], y)
    return y


@pl.jit
def stage2(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    for i in pl.range(0, R, 64):
        t = pl.load(x, [i, 0], [64, C])
        pl.store(pl.exp(pl.neg(pl.abs(t))), [i, 0], y)
    return y


def reference(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.abs(x * x + x))


async def main(batches: int) -> None:
    shape = (torch.zeros(R, C), torch.zeros(R, C))
    first = ir.compile(stage1.lower(*shape), platform="sim")
    second = ir.compile(stage2.lower(*shape), platform="sim")
    xs = [np.random.default_rng(i).standard_normal((R, C)).astype(np.float32) for i in range(batches)]
    ys = [np.full((R, C), np.nan, np.float32) for _ in range(batches)]
    small = {"cores": 1, "copy_engines": 1}
    async with ChipWorker(RunConfig(device_id=0, **small)) as a, \
            ChipWorker(RunConfig(device_id=1, **small)) as b:
        k1, k2 = a.register(first), b.register(second)
        on_a = [a.alloc_tensor((R, C), np.float32) for _ in range(2)]
        on_b = [b.alloc_tensor((R, C), np.float32) for _ in range(2)]
        last = []
        for i, x in enumerate(xs):
            slot = i % 2
            k1(x, on_a[slot])                # device 0: x in, stage 1 into on_a[slot]
            a.copy(on_b[slot], on_a[slot])   # device 0 -> device 1: one peer copy
            last.append(k2(on_b[slot], ys[i]))  # device 1: after the copy, on the device
        for launch in last:
            await launch
        for t in on_a + on_b:
            t.free()
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
    print(f"{batches} batches through two devices with a peer copy between the stages: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    asyncio.run(main(parser.parse_args().batches))
