"""pl.parse / pl.loads: one @pl.function from source text, traced and lowered into an ir.Function."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir

ADD = """
@pl.function
def vector_add(
    x: pl.Tensor[[128], pl.FP32],
    y: pl.Tensor[[128], pl.FP32],
) -> pl.Tensor[[128], pl.FP32]:
    result: pl.Tensor[[128], pl.FP32] = pl.add(x, y)
    return result
"""


def test_a_parsed_function_returns_a_new_tensor_and_computes_it():
    func = pl.parse(ADD)
    assert isinstance(func, ir.Function) and func.name == "vector_add"
    assert func.func_type is ir.FunctionType.Opaque
    assert [p.name for p in func.params] == ["x", "y"]
    assert [(p.name, p.shape, p.dtype) for p in func.return_types] == [("ret0", (128,), pl.FP32)]
    assert "def vector_add_incore_0(" in func.as_python()
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    ir.compile(func.program)(x, y, out)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


def test_loads_reads_a_file_that_imports_pypto(tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text("import pypto.language as pl\n\n@pl.function\n"
                    "def passthrough(x: pl.Tensor[[64], pl.FP32]) -> pl.Tensor[[64], pl.FP32]:\n    return x\n")
    func = pl.loads(path)
    assert func.name == "passthrough" and [p.name for p in func.return_types] == ["x"]
    assert [p.name for p in func.program.params] == ["x"]  # no implicit output when it returns its tensor


def test_bad_sources_are_refused():
    with pytest.raises(ValueError, match="no @pl.function is defined"):
        pl.parse("x = 42\n")
    with pytest.raises(ValueError, match=r"2 @pl.function definitions \(f, g\)"):
        pl.parse("@pl.function\ndef f(x: pl.Tensor[[8], pl.FP32]):\n    return x\n\n"
                 "@pl.function\ndef g(x: pl.Tensor[[8], pl.FP32]):\n    return x\n")
    with pytest.raises(SyntaxError):
        pl.parse("@pl.function\ndef bad(x: pl.Tensor[[8], pl.FP32]):\n    return x +\n")
