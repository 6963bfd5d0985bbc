"""Fusion keeps program order: random tile programs against a numpy model.

Hypothesis draws straight-line programs of element-wise ops (with row/column
broadcasting and scalars), reductions, stores to outputs, and loads from and
stores to an InOut tensor at the same window (the case where a fused loop
must not reorder a load past a store).  Each program is compiled (FP64, so
the model is exact up to summation order) and run on the sim device.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto_async.language as pl

R, C = 8, 16
SHAPES = {"full": (R, C), "row": (R, 1), "col": (1, C)}
UNARY = {"neg": (pl.neg, np.negative), "abs": (pl.abs, np.abs), "relu": (pl.relu, lambda v: np.maximum(v, 0))}
BINARY = {
    "add": (pl.add, np.add),
    "sub": (pl.sub, np.subtract),
    "mul": (pl.mul, np.multiply),
    "maximum": (pl.maximum, np.maximum),
    "minimum": (pl.minimum, np.minimum),
}
REDUCE = {"row_sum": (pl.row_sum, "row"), "col_max": (pl.col_max, "col")}


def _broadcast(a: str, b: str) -> str:
    return a if a == b else "full"


@st.composite
def programs(draw):
    shapes = ["full", "row", "col"]  # x, r, c
    ops = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "scalar", "reduce", "store", "load_io", "store_io"]))
        i = draw(st.integers(0, len(shapes) - 1))
        if kind == "unary":
            ops.append(("unary", draw(st.sampled_from(sorted(UNARY))), i))
            shapes.append(shapes[i])
        elif kind == "binary":
            j = draw(st.integers(0, len(shapes) - 1))
            ops.append(("binary", draw(st.sampled_from(sorted(BINARY))), i, j))
            shapes.append(_broadcast(shapes[i], shapes[j]))
        elif kind == "scalar":
            ops.append(("scalar", draw(st.sampled_from(sorted(BINARY))), i, draw(st.sampled_from([0.5, -1.25, 2.0])),
                        draw(st.booleans())))
            shapes.append(shapes[i])
        elif kind == "reduce" and shapes[i] == "full":
            name = draw(st.sampled_from(sorted(REDUCE)))
            ops.append(("reduce", name, i))
            shapes.append(REDUCE[name][1])
        elif kind == "store":
            ops.append(("store", i, shapes[i]))
        elif kind == "load_io":
            ops.append(("load_io",))
            shapes.append("full")
        elif kind == "store_io" and shapes[i] == "full":
            ops.append(("store_io", i))
    ops.append(("store", len(shapes) - 1, shapes[-1]))
    return ops


def build(ops, trips):
    @pl.jit
    def k(x: pl.Tensor, r: pl.Tensor, c: pl.Tensor, io: pl.InOut[pl.Tensor], o_full: pl.InOut[pl.Tensor],
          o_row: pl.InOut[pl.Tensor], o_col: pl.InOut[pl.Tensor]):
        outs = {"full": o_full, "row": o_row, "col": o_col}
        if trips:
            for _ in pl.range(trips):  # a real loop: io's stores feed the next iteration's loads
                body(x, r, c, io, outs)
        else:
            body(x, r, c, io, outs)

    def body(x, r, c, io, outs):
        vals = [pl.load(x, [0, 0], [R, C]), pl.load(r, [0, 0], [R, 1]), pl.load(c, [0, 0], [1, C])]
        for op in ops:
            if op[0] == "unary":
                vals.append(UNARY[op[1]][0](vals[op[2]]))
            elif op[0] == "binary":
                vals.append(BINARY[op[1]][0](vals[op[2]], vals[op[3]]))
            elif op[0] == "scalar":
                fn = BINARY[op[1]][0]
                vals.append(fn(op[3], vals[op[2]]) if op[4] else fn(vals[op[2]], op[3]))
            elif op[0] == "reduce":
                vals.append(REDUCE[op[1]][0](vals[op[2]]))
            elif op[0] == "store":
                pl.store(vals[op[1]], [0, 0], outs[op[2]])
            elif op[0] == "load_io":
                vals.append(pl.load(io, [0, 0], [R, C]))
            elif op[0] == "store_io":
                pl.store(vals[op[1]], [0, 0], io)

    return k


def model(ops, trips, x, r, c, io, outs):
    io, outs = io.copy(), {k: v.copy() for k, v in outs.items()}
    for _ in range(max(trips, 1)):
        _model_body(ops, x, r, c, io, outs)
    return io, outs


def _model_body(ops, x, r, c, io, outs):
    vals = [x, r, c]
    for op in ops:
        if op[0] == "unary":
            vals.append(UNARY[op[1]][1](vals[op[2]]))
        elif op[0] == "binary":
            vals.append(BINARY[op[1]][1](vals[op[2]], vals[op[3]]))
        elif op[0] == "scalar":
            fn = BINARY[op[1]][1]
            vals.append(fn(op[3], vals[op[2]]) if op[4] else fn(vals[op[2]], op[3]))
        elif op[0] == "reduce":
            v = vals[op[2]]
            vals.append(v.sum(axis=1, keepdims=True) if op[1] == "row_sum" else v.max(axis=0, keepdims=True))
        elif op[0] == "store":
            outs[op[2]][...] = np.broadcast_to(vals[op[1]], outs[op[2]].shape)
        elif op[0] == "load_io":
            vals.append(io.copy())
        elif op[0] == "store_io":
            io[...] = vals[op[1]]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=programs(), trips=st.sampled_from([0, 1, 3]), seed=st.integers(0, 2**16))
def test_random_programs_match_numpy(launcher, ops, trips, seed):
    rng = np.random.default_rng(seed)
    x, r, c, io = (rng.standard_normal(s) for s in ((R, C), (R, 1), (1, C), (R, C)))
    outs = {name: rng.standard_normal(shape) for name, shape in SHAPES.items()}
    want_io, want_outs = model(ops, trips, x, r, c, io, outs)
    launcher.run(build(ops, trips).compile(x, r, c, io, *outs.values()), x, r, c, io, *outs.values())
    scale = max(1.0, *(float(np.max(np.abs(v))) for v in (want_io, *want_outs.values())))
    np.testing.assert_allclose(io, want_io, rtol=1e-12, atol=1e-12 * scale)
    for name in SHAPES:
        np.testing.assert_allclose(outs[name], want_outs[name], rtol=1e-12, atol=1e-12 * scale, err_msg=name)
