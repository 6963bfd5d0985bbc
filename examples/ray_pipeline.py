"""A two-stage pipeline across two Ray actors, each owning a ChipWorker.

Stage 1 (actor A) computes ``y = x * w`` with the weight ``w`` resident on
A's device; stage 2 (actor B) computes ``z = silu(y + b)`` with ``b``
resident on B's.  The compiled programs travel to the actors by pickle; the
weights stay on the actors behind ``TensorRef`` handles; each stage's output
goes from A to B as a Ray object, without passing through this process.
Up to ``--depth`` batches are in flight, and every result is checked against
numpy.

    python examples/ray_pipeline.py [--batches 16] [--depth 4] [--address HOST:PORT]

Without ``--address`` it starts a local Ray instance; with it, it joins a
cluster started with ``ray start`` (the actors then go wherever Ray places
them).
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np
import ray

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.ray import ChipActor, call, pipeline
from pypto_async.runtime import RunConfig

R, C = 256, 256


@pl.jit
def scale(x: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.mul(pl.load(x, [0, 0], [R, C]), pl.load(w, [0, 0], [R, C])), [0, 0], y)
    return y


@pl.jit
def bias_silu(y: pl.Tensor, b: pl.Tensor, z: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.add(pl.load(y, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C]))
        pl.store(pl.mul(t, pl.recip(pl.add(pl.exp(pl.neg(t)), 1.0))), [0, 0], z)
    return z


async def main(args) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    xs = [rng.standard_normal((R, C)).astype(np.float32) for _ in range(args.batches)]
    like = np.empty((R, C), np.float32)
    stage1 = ir.compile(scale.lower(like, like, like), platform="sim")
    stage2 = ir.compile(bias_silu.lower(like, like, like), platform="sim")

    cfg = RunConfig(platform="sim", cores=2)
    a, bb = (ChipActor.options(num_cpus=0).remote(cfg) for _ in range(2))
    k1, k2 = await call(a.register, stage1), await call(bb.register, stage2)
    w_ref, b_ref = await call(a.put, w), await call(bb.put, b)
    # `None` for an Out parameter: the actor makes the output array from the program's signature.
    results = await pipeline([(a, k1, (w_ref, None)), (bb, k2, (b_ref, None))], xs, depth=args.depth)
    for x, z in zip(xs, results):
        t = x * w + b
        np.testing.assert_allclose(z, t / (1 + np.exp(-t)), rtol=1e-4, atol=1e-5)
    for actor in (a, bb):
        await call(actor.close)
        ray.kill(actor)
    print(f"{args.batches} batches through 2 actors match numpy (depth {args.depth})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--address", default=None, help="join this Ray cluster instead of starting one")
    args = parser.parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=2, include_dashboard=False)
    try:
        asyncio.run(main(args))
    finally:
        ray.shutdown()
