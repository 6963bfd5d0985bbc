"""PyPTO's tile-and-scalar op forms (adds, subs, muls, divs, maxs, mins) and lrelu, against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError


def test_scalar_forms_and_lrelu(launcher):
    @pl.jit
    def k(x: pl.Tensor, s: pl.Scalar[pl.FP32], y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor],
          w: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [16, 64])
            u = pl.divs(pl.muls(pl.subs(pl.adds(t, 1.5), s), 3.0), 4.0)
            pl.store(pl.mins(pl.maxs(u, -0.5), 0.75), [0, 0], y)
            pl.store(pl.lrelu(t, 0.1), [0, 0], z)
            pl.store(pl.lrelu(t, 2.5), [0, 0], w)  # a slope above one too

    x = torch.from_numpy(np.random.default_rng(7).standard_normal((16, 64)).astype(np.float32))
    y, z, w = (torch.full((16, 64), float("nan")) for _ in range(3))
    launcher.run(k.compile(x, 0.25, y, z, w), x, 0.25, y, z, w)
    torch.testing.assert_close(y, torch.clamp(((x + 1.5) - 0.25) * 3.0 / 4.0, -0.5, 0.75))
    torch.testing.assert_close(z, torch.nn.functional.leaky_relu(x, 0.1))
    torch.testing.assert_close(w, torch.where(x > 0, x, 2.5 * x))


def test_a_scalar_form_refuses_a_tile_as_its_scalar():
    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [0, 0], [8, 8])
            pl.store(pl.adds(t, t), [0, 0], y)

    with pytest.raises(PtoCompileError, match="pl.adds takes a tile and a scalar"):
        k.compile(np.zeros((8, 8), np.float32), np.zeros((8, 8), np.float32))
