"""Benchmark pypto_async.ray: what a ChipActor adds to a Ray call, and what pipelining buys.

Two figures, each against a reference measured in the same process, in
alternating rounds, medians over rounds:

``ChipActor.run``
    The time of one ``await actor.run.remote(key, x, w_ref, None)`` (the
    quickstart's add kernel on 128x128 float32: ``x`` copied in, the weight
    resident behind a TensorRef, the output a new array) against the floor:
    the same call on a bare async Ray actor whose method only makes the
    output array, carrying the same arguments.  Target: at most 1.5x.
``pipeline``
    Throughput of a two-stage pipeline across two ChipActors
    (``y = x * w`` on one, ``z = y + b`` on the other, 128x128 float32) with
    ``depth=4`` against the same pipeline with ``depth=1``.  Target: at
    least 1.5x.  Arrays this small travel inside Ray's messages; larger ones
    (over 100 KiB) go through its object store, which costs more per call.

Every result of every round is checked against numpy.  It starts a local
Ray instance (2 CPUs, no dashboard) and shuts it down at the end, or joins
the cluster at ``--address``.

    python benchmarks/bench_ray.py [--quick] [--json PATH] [--address HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

if importlib.util.find_spec("torch") is not None:
    import torch  # noqa: F401  (the runtime's users import it)

import ray  # noqa: E402

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402
from pypto_async.ray import ChipActor, pipeline  # noqa: E402
from pypto_async.runtime import RunConfig  # noqa: E402

RUN_SHAPE = (128, 128)
PIPE_SHAPE = (128, 128)


def _kernels(shape):
    rows, cols = shape

    @pl.jit
    def add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.add(pl.load(a, [0, 0], [rows, cols]), pl.load(b, [0, 0], [rows, cols])), [0, 0], out)
        return out

    @pl.jit
    def mul(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(a, [0, 0], [rows, cols]), pl.load(b, [0, 0], [rows, cols])), [0, 0], out)
        return out

    like = np.empty(shape, np.float32)
    return ir.compile(add.lower(like, like, like)), ir.compile(mul.lower(like, like, like))


@ray.remote(num_cpus=0)
class Bare:
    """The floor: an async actor call that carries the same arguments and returns an output array."""

    async def run(self, key, x, w, out):
        return np.empty(x.shape, x.dtype)


async def _time_calls(method, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        await method.remote(*args)
    return (time.perf_counter() - t0) / calls


async def bench_run(chip, bare, rounds: int, calls: int) -> dict:
    add, _ = _kernels(RUN_SHAPE)
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(RUN_SHAPE).astype(np.float32) for _ in range(2))
    key = await chip.register.remote(add)
    w_ref = await chip.put.remote(w)
    np.testing.assert_allclose(await chip.run.remote(key, x, w_ref, None), x + w, rtol=1e-6)
    await _time_calls(chip.run, (key, x, w_ref, None), calls)  # warm-up
    await _time_calls(bare.run, (key, x, w_ref, None), calls)
    chip_s, bare_s = [], []
    for _ in range(rounds):
        chip_s.append(await _time_calls(chip.run, (key, x, w_ref, None), calls))
        bare_s.append(await _time_calls(bare.run, (key, x, w_ref, None), calls))
    np.testing.assert_allclose(await chip.run.remote(key, x, w_ref, None), x + w, rtol=1e-6)
    await chip.free.remote(w_ref)
    c, b = statistics.median(chip_s) * 1e6, statistics.median(bare_s) * 1e6
    return {"chip_us": c, "bare_us": b, "ratio": c / b}


async def bench_pipeline(one, two, rounds: int, batches: int) -> dict:
    add, mul = _kernels(PIPE_SHAPE)
    rng = np.random.default_rng(1)
    w, b = (rng.standard_normal(PIPE_SHAPE).astype(np.float32) for _ in range(2))
    xs = [rng.standard_normal(PIPE_SHAPE).astype(np.float32) for _ in range(batches)]
    want = [x * w + b for x in xs]
    k1, k2 = await one.register.remote(mul), await two.register.remote(add)
    w_ref, b_ref = await one.put.remote(w), await two.put.remote(b)
    stages = [(one, k1, (w_ref, None)), (two, k2, (b_ref, None))]

    async def rate(depth: int) -> float:
        t0 = time.perf_counter()
        got = await pipeline(stages, xs, depth=depth)
        elapsed = time.perf_counter() - t0
        for g, z in zip(got, want):
            np.testing.assert_allclose(g, z, rtol=1e-5, atol=1e-5)
        return batches / elapsed

    await rate(4)  # warm-up
    await rate(1)
    deep, flat = [], []
    for _ in range(rounds):
        deep.append(await rate(4))
        flat.append(await rate(1))
    d, f = statistics.median(deep), statistics.median(flat)
    return {"depth4_per_s": d, "depth1_per_s": f, "ratio": d / f}


async def bench_all(rounds: int, calls: int, batches: int) -> tuple[dict, dict]:
    cfg = RunConfig(platform="sim", cores=2)
    one, two = (ChipActor.options(num_cpus=0).remote(cfg) for _ in range(2))
    bare = Bare.remote()
    try:
        run = await bench_run(one, bare, rounds, calls)
        pipe = await bench_pipeline(one, two, rounds, batches)
    finally:
        for actor in (one, two):
            await actor.close.remote()
        for actor in (one, two, bare):
            ray.kill(actor)
    return run, pipe


def rows(run: dict, pipe: dict) -> list[dict]:
    return [
        {"name": "ChipActor.run, one call (128x128 add, weight resident)", "figure": run["chip_us"], "unit": "µs",
         "reference": run["bare_us"], "reference_name": "bare async actor call, same arguments",
         "ratio": run["ratio"], "target": "≤ 1.5x", "ok": run["ratio"] <= 1.5},
        {"name": "pipeline of 2 actors, depth=4 (128x128)", "figure": pipe["depth4_per_s"], "unit": "batch/s",
         "reference": pipe["depth1_per_s"], "reference_name": "the same pipeline, depth=1",
         "ratio": pipe["ratio"], "target": "≥ 1.5x", "ok": pipe["ratio"] >= 1.5},
    ]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    parser.add_argument("--address", help="join this Ray cluster instead of starting one")
    args = parser.parse_args(argv)
    rounds, calls, batches = (3, 20, 16) if args.quick else (9, 100, 48)
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 << 20)
    try:
        run, pipe = asyncio.run(bench_all(rounds, calls, batches))
    finally:
        ray.shutdown()
    result = {"run": run, "pipeline": pipe, "rows": rows(run, pipe), "quick": args.quick}
    print(f"ChipActor.run {run['chip_us']:.0f} µs, bare actor call {run['bare_us']:.0f} µs: "
          f"{run['ratio']:.2f}x (target ≤ 1.5x)")
    print(f"pipeline depth=4 {pipe['depth4_per_s']:.0f} batch/s, depth=1 {pipe['depth1_per_s']:.0f} batch/s: "
          f"{pipe['ratio']:.2f}x (target ≥ 1.5x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
