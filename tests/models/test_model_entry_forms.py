"""The entry forms PyPTO's model files use around their programs (05, 09), unchanged but for the import.

``runtime.run(program, config=...)`` with no tensors compiles and returns the program to
call with them (09); ``ir.compile`` returns a value that is also the artifact's path (05
walks it with ``os.walk``); ``ir.OptimizationStrategy`` is the pass manager's.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from pypto_async.ir.pass_manager import OptimizationStrategy
from pypto_async.runtime import RunConfig, run


@pl.program
class Twice:
    @pl.function(type=pl.FunctionType.InCore)
    def twice(self, x: pl.Tensor[[8, 32], pl.FP32], y: pl.Out[pl.Tensor[[8, 32], pl.FP32]]):
        return pl.store(pl.mul(pl.load(x, [0, 0], [8, 32]), 2.0), [0, 0], y)

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[8, 32], pl.FP32]) -> pl.Tensor[[8, 32], pl.FP32]:
        return self.twice(x, pl.create_tensor([8, 32], dtype=pl.FP32, name="y"))


@pytest.mark.slow  # a second on two CPUs (its program compiles)
def test_run_without_tensors_returns_the_compiled_program_to_call():
    cfg = RunConfig(platform="sim")
    compiled = run(Twice, config=cfg)
    x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(compiled(x, config=cfg)), 2 * x, rtol=1e-6)


def test_run_without_tensors_raises_a_compile_error():
    @pl.program
    class Bad:
        @pl.function(type=pl.FunctionType.Orchestration)
        def orch(self, x: pl.Tensor[[8, 32], pl.FP32]):
            pl.create_tensor([8, 0], dtype=pl.FP32)

    with pytest.raises(PtoCompileError):
        run(Bad, config=RunConfig(platform="sim"))


def test_a_compiled_program_is_its_artifact_path_and_the_strategy_is_spelled_on_ir():
    compiled = ir.compile(Twice)
    assert os.fspath(compiled) == str(compiled.output_dir)
    assert "kernel.so" in os.listdir(compiled)
    assert ir.OptimizationStrategy is OptimizationStrategy
