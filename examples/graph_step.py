"""A decode-like loop of many small kernels: eager launches against one graph replay per step.

Each step runs ``--layers`` tiny kernels, ``h = h * w[l] + b[l]``, ping-ponging
between two device buffers, on a token that comes from the host and goes
back to it.  Eagerly that is a copy in, one launch per layer and a copy out
per step, each paying the runtime's per-call cost.  Captured once with
``w.capture()``, the whole step is one ``graph.replay(x=..., y=...)``: the
host arrays are bound per step and copied by direction inside the replay.
Both loops are checked against numpy; the script prints what each costs.

    python examples/graph_step.py [--steps 50] [--layers 64]
"""

import argparse
import asyncio
import time

import numpy as np

import pypto_async.language as pl
from pypto_async.runtime import ChipWorker

ROWS, COLS = 8, 64


@pl.jit
def fma(h: pl.Tensor, w: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        th = pl.load(h, [0, 0], [ROWS, COLS])
        tw = pl.load(w, [0, 0], [ROWS, COLS])
        tb = pl.load(b, [0, 0], [ROWS, COLS])
        pl.store(pl.add(pl.mul(th, tw), tb), [0, 0], out)
    return out


def reference(x, ws, bs):
    h = x
    for w, b in zip(ws, bs):
        h = h * w + b
    return h


async def main(steps: int, layers: int) -> None:
    rng = np.random.default_rng(0)
    ws_h = [rng.uniform(0.9, 1.1, (ROWS, COLS)).astype(np.float32) for _ in range(layers)]
    bs_h = [rng.uniform(-0.01, 0.01, (ROWS, COLS)).astype(np.float32) for _ in range(layers)]
    tokens = [rng.standard_normal((ROWS, COLS)).astype(np.float32) for _ in range(steps)]
    want = [reference(x, ws_h, bs_h) for x in tokens]
    compiled = fma.compile(tokens[0], ws_h[0], bs_h[0], tokens[0])

    async with ChipWorker() as w:
        kernel = w.register(compiled)
        ws = [w.alloc_tensor((ROWS, COLS), np.float32, init=a) for a in ws_h]
        bs = [w.alloc_tensor((ROWS, COLS), np.float32, init=a) for a in bs_h]
        xd, yd, a, b = (w.alloc_tensor((ROWS, COLS), np.float32) for _ in range(4))

        def step(src, out, a, b):
            """Queue (inside the capture: record) one step's launches, from `src` into `out`."""
            for i, (w_l, b_l) in enumerate(zip(ws, bs)):
                dst = out if i == layers - 1 else (a, b)[i % 2]
                kernel(src, w_l, b_l, dst)
                src = dst

        # Eager: a copy in, the launches, a copy out, per step.
        eager_out = [np.full((ROWS, COLS), np.nan, np.float32) for _ in range(steps)]
        t0 = time.perf_counter()
        for x_h, y_h in zip(tokens, eager_out):
            await w.copy(xd, x_h)
            step(xd, yd, a, b)
            await w.copy(y_h, yd)
        eager_s = time.perf_counter() - t0

        # Captured once, replayed per step with the step's host arrays bound.
        async with w.capture(name="decode step") as cap:
            x = cap.input("x", (ROWS, COLS), np.float32)
            y = cap.input("y", (ROWS, COLS), np.float32)
            step(x, y, *(w.alloc_tensor((ROWS, COLS), np.float32) for _ in range(2)))  # the graph's own
        graph = cap.graph
        replay_out = [np.full((ROWS, COLS), np.nan, np.float32) for _ in range(steps)]
        t0 = time.perf_counter()
        for x_h, y_h in zip(tokens, replay_out):
            await graph.replay(x=x_h, y=y_h)
        replay_s = time.perf_counter() - t0
        described = repr(graph)
        graph.close()
        for t in (*ws, *bs, xd, yd, a, b):
            t.free()

    for i in range(steps):
        np.testing.assert_allclose(eager_out[i], want[i], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(replay_out[i], want[i], rtol=1e-4, atol=1e-5)
    per_eager = eager_s / steps * 1e6
    per_replay = replay_s / steps * 1e6
    print(f"{steps} steps of {layers} kernels: {described}")
    print(f"  eager:  {per_eager:9.1f} us/step  ({per_eager / layers:.2f} us per kernel)")
    print(f"  replay: {per_replay:9.1f} us/step  ({per_replay / layers:.2f} us per kernel)  "
          f"{per_eager / per_replay:.1f}x faster")
    print("eager and replayed steps match numpy: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--layers", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.layers))
