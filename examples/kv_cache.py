"""A KV cache that stays in device memory across two different compiled programs.

``prefill`` projects a prompt into the first rows of the cache; ``attend``
scores a query against every cached row.  Between decode steps the new row is
appended straight into device memory (``copy_to`` at the row's address), and
the cache itself never crosses back to the host: only the scores do.

    python examples/kv_cache.py [--steps 8]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig

T, D, P = 64, 32, 16  # cache rows, features, prompt length


@pl.jit
def prefill(x: pl.Tensor, wk: pl.Tensor, cache: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        k = pl.matmul(pl.load(x, [0, 0], [P, D]), pl.load(wk, [0, 0], [D, D]))
        pl.store(k, [0, 0], cache)  # rows [0, P) of the cache
    return cache


@pl.jit
def attend(cache: pl.Tensor, q: pl.Tensor, scores: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        s = pl.matmul(pl.load(cache, [0, 0], [T, D]), pl.load(q, [0, 0], [D, 1]))
        pl.store(s, [0, 0], scores)
    return scores


def main(steps: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((P, D)).astype(np.float32)
    wk = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
    prefill_c = ir.compile(prefill.lower(torch.zeros(P, D), torch.zeros(D, D), torch.zeros(T, D)),
                           platform="sim")
    attend_c = ir.compile(attend.lower(torch.zeros(T, D), torch.zeros(D, 1), torch.zeros(T, 1)),
                          platform="sim")
    reference = np.zeros((T, D), np.float32)
    reference[:P] = x @ wk
    row_bytes = D * 4
    with ChipWorker(RunConfig(platform="sim")) as w:
        cache = w.alloc_tensor((T, D), np.float32, init=np.zeros((T, D), np.float32))
        weights = w.alloc_tensor((D, D), np.float32, init=wk)
        w.run(prefill_c, x, weights, cache)          # program 1 writes the cache
        attend_h = w.register(attend_c)
        for step in range(steps):
            pos = P + step
            new_row = rng.standard_normal((1, D)).astype(np.float32) @ wk
            w.copy_to(cache.data_ptr + pos * row_bytes, new_row, row_bytes)  # append in place
            reference[pos] = new_row
            q = rng.standard_normal((D, 1)).astype(np.float32)
            scores = np.full((T, 1), np.nan, np.float32)
            attend_h(cache, q, scores)                  # program 2 reads it, every step
            np.testing.assert_allclose(scores, reference @ q, rtol=1e-4, atol=1e-4)
        before = w.stats().bytes_d2h
        final = cache.numpy()  # the only time the cache crosses back
        np.testing.assert_allclose(final, reference, rtol=1e-5, atol=1e-5)
        assert w.stats().bytes_d2h - before == cache.nbytes
        w.free_tensor(cache)
        w.free_tensor(weights)
    print(f"kv cache: prefill of {P} rows, {steps} decode steps appended in device memory; "
          "scores and the final cache verified")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    main(parser.parse_args().steps)
