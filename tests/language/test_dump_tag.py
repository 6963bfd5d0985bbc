"""PyPTO's selective dump (precision/00-workflow step 5, tasks/02-submit): ``pl.dump_tag(t)`` and
``dumps=[t]`` mark tensors that ``RunConfig(enable_dump_args=1)`` dumps.

A user observes the dump: ``dfx_outputs/args_dump/args_dump.json`` and the raw files beside it, which
must hold the marked tensors' values (checked against torch on random data, outputs poisoned first).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from pypto_async.runtime import RunConfig


def _nan(*shape):
    return torch.full(shape, float("nan"))


def _entries(out_dir) -> list[dict]:
    doc = json.loads((out_dir / "dfx_outputs" / "args_dump" / "args_dump.json").read_text())
    return doc["entries"]


@pl.jit
def tagged(q: pl.Tensor[[32, 32], pl.FP32], k: pl.Tensor[[32, 32], pl.FP32],
           out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
    pl.dump_tag(q)
    pl.dump_tag(out)
    with pl.at(level=pl.Level.CORE_GROUP):
        out = pl.store(pl.add(pl.load(q, [0, 0], [32, 32]), pl.load(k, [0, 0], [32, 32])), [0, 0], out)
    return out


def test_dump_tag_dumps_only_the_marked_tensors(tmp_path):
    q, k, out = torch.randn(32, 32), torch.randn(32, 32), _nan(32, 32)
    tagged(q, k, out, config=RunConfig(enable_dump_args=1, save_kernels_dir=str(tmp_path)))
    torch.testing.assert_close(out, q + k, rtol=1e-6, atol=1e-6)
    entries = _entries(tmp_path)
    assert {(e["param"], e["stage"]) for e in entries} == {("q", "before"), ("out", "after")}
    files = {e["param"]: tmp_path / "dfx_outputs" / "args_dump" / e["file"] for e in entries}
    np.testing.assert_array_equal(np.fromfile(files["q"], dtype=np.float32).reshape(32, 32), q.numpy())
    np.testing.assert_array_equal(np.fromfile(files["out"], dtype=np.float32).reshape(32, 32), (q + k).numpy())
    assert tagged.compile(q, k, out).dump_tags == ("q", "out")


def test_at_dumps_and_the_tag_ride_on_the_consuming_task():
    @pl.jit
    def two(x: pl.Tensor[[32, 32], pl.FP32], mid: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
            out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            mid = pl.store(pl.exp(pl.load(x, [0, 0], [32, 32])), [0, 0], mid)
        pl.dump_tag(mid)                               # after the writer: only the reader consumes it after
        with pl.at(level=pl.Level.CORE_GROUP, dumps=[out]):
            out = pl.store(pl.mul(pl.load(mid, [0, 0], [32, 32]), 2.0), [0, 0], out)
        return mid, out

    x, mid, out = torch.randn(32, 32), _nan(32, 32), _nan(32, 32)
    program = two.trace(x, mid, out)
    hints = [dict(s.hints).get("dumps") for s in program.body if isinstance(s, ir.Scope)]
    assert hints == [None, ("out", "mid")]
    assert "dumps=[out, mid]" in program.as_python(form="jit")
    two(x, mid, out)
    torch.testing.assert_close(out, torch.exp(x) * 2.0, rtol=1e-5, atol=1e-6)


@pl.program
class Submitted:
    @pl.function(type=pl.FunctionType.InCore)
    def qk(self, q: pl.Tensor[[32, 32], pl.FP32], k: pl.Tensor[[32, 32], pl.FP32],
           out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        out = pl.store(pl.sub(pl.load(q, [0, 0], [32, 32]), pl.load(k, [0, 0], [32, 32])), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, q: pl.Tensor[[32, 32], pl.FP32], k: pl.Tensor[[32, 32], pl.FP32],
             out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        pl.dump_tag(k)
        out, _ = pl.submit(self.qk, q, k, out, dumps=[out])
        return out


def test_program_tags_and_submit_dumps(tmp_path, launcher):
    compiled = ir.compile(Submitted)
    assert compiled.dump_tags == ("out", "k")
    q, k, out = torch.randn(32, 32), torch.randn(32, 32), _nan(32, 32)
    compiled(q, k, out, config=RunConfig(enable_dump_args=1, save_kernels_dir=str(tmp_path)))
    torch.testing.assert_close(out, q - k, rtol=1e-6, atol=1e-6)
    assert {(e["param"], e["stage"]) for e in _entries(tmp_path)} == {("k", "before"), ("out", "after")}


def test_dump_tag_inside_a_region_is_refused():
    @pl.jit
    def bad(x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.dump_tag(x)
            out = pl.store(pl.load(x, [0, 0], [32, 32]), [0, 0], out)
        return out

    with pytest.raises(PtoCompileError, match="pl.dump_tag belongs to the orchestration"):
        bad.compile()
