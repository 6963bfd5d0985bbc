"""Benchmark PyPTO's two call shapes with torch tensors: return style against in place.

A service developer calls a compiled program with torch CPU tensors, as the
README's quickstart does, either **return style** (``y = w.run(prog, x, w_)``:
the output is made by the call and returned as a torch tensor) or **in place**
(``w.run(prog, x, w_, y)`` into a tensor made once).  The two do the same
device work; the return-style call only has to make its output.  Issue 25
(item 11) found that costing about 8 ms on a 2-CPU host, as ``torch.zeros``
woke torch's intra-op thread pool for every output.

``ratio``
    Median host time of a return-style call over that of an in-place call
    (sync mode: the call returns once the output is on the host), for
    float32 outputs of 128x128 and 256x256.  Target: <= 1.2x.

Every call's output is checked against torch.  The machine's load average is
reported with the figures: on a shared machine, read the ratio, not the times.

    python benchmarks/bench_calls.py [--quick] [--json] [--calls 400]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (the point: calls made with torch tensors, torch imported)

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402

TARGET = 1.2
SHAPES = ((128, 128), (256, 256))


def _program(rows: int, cols: int):
    @pl.jit
    def scale_by(x: pl.Tensor, w: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [rows, cols]), pl.load(w, [0, 0], [rows, cols])), [0, 0], out)
        return out

    z = np.zeros((rows, cols), np.float32)
    return ir.compile(scale_by.lower(z, z, z))


def _median_us(fn, calls: int, rounds: int) -> float:
    """Median over `rounds` of the mean host time of one `fn()` over `calls` calls, in microseconds."""
    per_round = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_round.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_round)


def bench_shape(w, shape, calls: int, rounds: int) -> dict:
    prog = _program(*shape)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=g)
    wt = torch.randn(shape, generator=g)
    want = x * wt
    out = torch.full(shape, float("nan"))

    def in_place():
        w.run(prog, x, wt, out)

    def return_style():
        return w.run(prog, x, wt)

    # Warm both paths, and check what each gives.
    in_place()
    torch.testing.assert_close(out, want)
    got = return_style()
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and tuple(got.shape) == shape
    torch.testing.assert_close(got, want)
    # Interleaved rounds, so a change in the machine's load hits both alike.
    ref, fig = [], []
    for _ in range(rounds):
        ref.append(_median_us(in_place, calls, 1))
        fig.append(_median_us(return_style, calls, 1))
    torch.testing.assert_close(return_style(), want)
    r, f = statistics.median(ref), statistics.median(fig)
    return {"shape": list(shape), "in_place_us": r, "return_style_us": f, "ratio": f / r}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test, not a measurement)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--calls", type=int, default=400, help="calls per round")
    args = parser.parse_args(argv)
    calls, rounds = (40, 3) if args.quick else (args.calls, 7)
    load_before = os.getloadavg()[0]
    results: dict = {"config": {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                                "cpus": os.cpu_count(), "calls": calls, "rounds": rounds}}
    with ChipWorker(RunConfig(platform="sim")) as w:
        shapes = [bench_shape(w, s, calls, rounds) for s in SHAPES]
    results["config"]["load_average"] = [load_before, os.getloadavg()[0]]
    results["shapes"] = shapes
    results["rows"] = [
        {"name": f"return-style call, torch {s['shape'][0]}x{s['shape'][1]} float32", "figure": s["return_style_us"],
         "unit": "us", "reference": s["in_place_us"], "reference_name": "the same call in place",
         "ratio": s["ratio"], "target": f"≤ {TARGET:g}x", "ok": s["ratio"] <= TARGET}
        for s in shapes
    ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        cfg = results["config"]
        print(f"torch {cfg['torch']} ({cfg['torch_threads']} threads), {cfg['cpus']} CPUs, "
              f"load average {cfg['load_average'][0]:.2f} -> {cfg['load_average'][1]:.2f}")
        for s in shapes:
            print(f"{s['shape'][0]}x{s['shape'][1]}: return style {s['return_style_us']:8.1f} us, in place "
                  f"{s['in_place_us']:8.1f} us: {s['ratio']:.2f}x (target <= {TARGET}x)")
    return results


if __name__ == "__main__":
    main()
