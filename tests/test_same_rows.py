"""Rows of docs/pypto_compat.md marked same that no other test ran as PyPTO documents them.

Each test runs the documented usage and checks the result against torch or numpy (outputs poisoned
first); ``tests/test_compat.py::test_every_same_row_is_used_by_a_test`` keeps every same row used.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.runtime import RunConfig, TraceInvocation, TraceSpan, benchmark


def _nan(*shape):
    return torch.full(shape, float("nan"))


@pl.jit
def _recip_tensors(a: pl.Tensor[[32, 16], pl.FP32], b: pl.Tensor[[32, 16], pl.FP32],
                   out: pl.Out[pl.Tensor[[32, 32], pl.FP32]], inv: pl.Out[pl.Tensor[[32, 16], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out = pl.store(pl.matmul(a, b, b_trans=True), [0, 0], out)              # a @ b.T
        inv = pl.store(pl.recip(pl.load(a, [0, 0], [32, 16]), high_precision=True), [0, 0], inv)
    return out, inv


@pytest.mark.slow
def test_matmul_transposes_tensor_operands_and_recip_takes_high_precision():
    a, b = torch.randn(32, 16), torch.randn(32, 16)
    out, inv = _nan(32, 32), _nan(32, 16)
    _recip_tensors(a, b, out, inv)
    torch.testing.assert_close(out, a @ b.T, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(inv, 1.0 / a, rtol=1e-5, atol=1e-5)

    @pl.jit
    def lhs_t(a: pl.Tensor[[16, 32], pl.FP32], b: pl.Tensor[[16, 8], pl.FP32],
              out: pl.Out[pl.Tensor[[32, 8], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out = pl.store(pl.matmul(a, b, a_trans=True), [0, 0], out)            # a.T @ b
        return out

    a, b, out = torch.randn(16, 32), torch.randn(16, 8), _nan(32, 8)
    lhs_t(a, b, out)
    torch.testing.assert_close(out, a.T @ b, rtol=1e-4, atol=1e-4)


def test_scalar_max_min_and_the_expand_ops_as_spelled():
    @pl.jit
    def k(x: pl.Tensor[[64, 32], pl.FP32], r: pl.Tensor[[64, 1], pl.FP32], c: pl.Tensor[[1, 32], pl.FP32],
          o1: pl.Out[pl.Tensor[[64, 32], pl.FP32]], o2: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(0, 64, 16):
                rows = pl.min(16, 64 - i)                 # a scalar min, not a reduction
                start = pl.max(0, i)
                t = pl.load(x, [start, 0], [16, 32], valid_shape=[rows, 32])
                added = pl.row_expand_add(t, pl.load(r, [start, 0], [16, 1], valid_shape=[rows, 1]))
                o1 = pl.store(pl.col_expand_sub(added, pl.load(c, [0, 0], [1, 32])), [start, 0], o1)
                o2 = pl.store(pl.col_expand_div(t, pl.load(c, [0, 0], [1, 32])), [start, 0], o2)
        return o1, o2

    x, r, c = torch.randn(64, 32), torch.randn(64, 1), torch.rand(1, 32) + 0.5
    o1, o2 = _nan(64, 32), _nan(64, 32)
    k(x, r, c, o1, o2)
    torch.testing.assert_close(o1, x + r - c, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(o2, x / c, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_jit_compile_and_call_with_config_and_the_ir_entries(tmp_path):
    a, b = torch.randn(32, 16), torch.randn(32, 16)
    out, inv = _nan(32, 32), _nan(32, 16)
    cfg = RunConfig(platform="sim", save_kernels_dir=str(tmp_path))
    compiled = _recip_tensors.compile(a, b, out, inv, config=cfg)
    assert compiled.platform == "sim"
    lowered = _recip_tensors.compile_for_test(a, b, out, inv)
    assert lowered is not None and _recip_tensors.lower(a, b, out, inv).functions
    _recip_tensors(a, b, out, inv, config=cfg)
    torch.testing.assert_close(out, a @ b.T, rtol=1e-4, atol=1e-4)


def test_benchmark_span_trees_render():
    a, b = np.random.default_rng(1).standard_normal((2, 32, 16)).astype(np.float32)
    compiled = _recip_tensors.compile(a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32))
    stats = benchmark(compiled, (a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32)),
                      rounds=2, warmup=1)
    assert len(stats.invocations) == 2 and all(isinstance(i, TraceInvocation) for i in stats.invocations)
    spans = stats.invocations[0].spans
    assert spans and all(isinstance(s, TraceSpan) for s in spans)
    assert any(s.depth == 0 for s in spans) and all(s.dur >= 0 for s in spans)
    text = stats.format_tree(0)
    assert text.startswith("launch[0]") and "us" in text
    assert len(text.splitlines()) == 1 + len(spans)


def test_dump_passes_takes_pypto_s_levels(tmp_path):
    """precision/01-cases: ir.compile(dump_passes=PassDumpLevel.EXPLICIT) writes the IR after each pass."""
    from pypto_async import ir
    from pypto_async.ir import PassDumpLevel

    a, b = np.random.default_rng(2).standard_normal((2, 32, 16)).astype(np.float32)
    program = _recip_tensors.lower(a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32))
    compiled = ir.compile(program, platform="sim", output_dir=tmp_path / "explicit",
                          dump_passes=PassDumpLevel.EXPLICIT)
    dumps = sorted((compiled.output_dir / "passes_dump").iterdir())
    assert dumps and dumps[0].name.startswith("00_input") and "program" in dumps[0].read_text()
    compiled = ir.compile(program, platform="sim", output_dir=tmp_path / "none", dump_passes=PassDumpLevel.NONE)
    assert not (compiled.output_dir / "passes_dump").exists()
