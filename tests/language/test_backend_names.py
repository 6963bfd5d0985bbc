"""PyPTO's module names for the backend: ``pypto_async.backend`` is a package with ``pto_backend``."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.backend import BackendType
from pypto_async.backend.pto_backend import PartialCodegenError
from pypto_async.errors import PtoCompileError




@pl.jit
def rebinds(x: pl.Tensor, result: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        result = pl.mul(x, 2.0)  # noqa: F841 - the rebinding under test
        result = pl.add(x, 1.0)
    return result


def test_a_kernel_whose_result_never_reaches_an_output_is_a_partial_codegen_error():
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    with pytest.raises(PartialCodegenError, match="must return its tensor parameters") as info:
        rebinds(x, out)
    err = info.value
    assert isinstance(err, PtoCompileError) and isinstance(err, RuntimeError)
    assert err.files == {}  # nothing is written before the checks pass
    assert err.file == __file__ and err.line == inspect.getsourcelines(rebinds.fn)[1]
    assert str(err).startswith(f"{__file__}:{err.line}:")
    assert np.isnan(out).all()  # nothing ran


def test_the_backend_package_keeps_its_names():
    assert BackendType.PTO.value == "PTO"
    assert PartialCodegenError("m").files == {} and PartialCodegenError("m", {"k.c": "x"}).files == {"k.c": "x"}


def test_a_program_function_has_its_func_type():
    @pl.program
    class P:
        @pl.function(type=pl.FunctionType.InCore)
        def k(self, a: pl.Tensor[[8, 8], pl.FP32], o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            pl.store(pl.load(a, [0, 0], [8, 8]), [0, 0], o)
            return o

        @pl.function(type=pl.FunctionType.Orchestration)
        def main(self, a: pl.Tensor[[8, 8], pl.FP32], o: pl.Out[pl.Tensor[[8, 8], pl.FP32]]):
            o = self.k(a, o)
            return o

    assert [(f.name, f.func_type) for f in P.functions.values()] == [
        ("k", pl.FunctionType.InCore), ("main", pl.FunctionType.Orchestration)]


def test_the_process_backend_type_is_set_once_and_reset_for_testing():
    from pypto_async import backend
    from pypto_async.errors import PtoArgumentError

    backend.reset_for_testing()
    assert not backend.is_backend_configured()
    with pytest.raises(PtoArgumentError, match="no backend type was set"):
        backend.get_backend_type()
    backend.set_backend_type(BackendType.Ascend910B)
    backend.set_backend_type(BackendType.Ascend910B)  # the same again: fine
    assert backend.get_backend_type() is BackendType.Ascend910B and backend.is_backend_configured()
    with pytest.raises(PtoArgumentError, match="already Ascend910B"):
        backend.set_backend_type(BackendType.Ascend950)
    with pytest.raises(PtoArgumentError, match="set_backend_type takes"):
        backend.set_backend_type(BackendType.CCE)
    backend.reset_for_testing()
    backend.set_backend_type(BackendType.Ascend950)
    backend.reset_for_testing()
