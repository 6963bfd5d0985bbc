"""PyPTO's top-level names (``pypto.DT_FP32``, ``pypto.ir``) and pl's aliases (``pl.JITFunction``, ``pl.DynVar``, ``pl.IntLike``)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pypto_async
import pypto_async.language as pl
from pypto_async.errors import PtoNotSupported
from pypto_async.runtime import ensure_pto_isa_root, pto_isa_include_dir

DT = {"DT_BOOL": pl.BOOL, "DT_INT4": pl.INT4, "DT_INT8": pl.INT8, "DT_INT16": pl.INT16, "DT_INT32": pl.INT32,
      "DT_INT64": pl.INT64, "DT_UINT4": pl.UINT4, "DT_UINT8": pl.UINT8, "DT_UINT16": pl.UINT16, "DT_UINT32": pl.UINT32,
      "DT_UINT64": pl.UINT64, "DT_FP4": pl.FP4, "DT_FP8E4M3FN": pl.FP8E4M3FN, "DT_FP8E5M2": pl.FP8E5M2,
      "DT_FP8E8M0": pl.FP8E8M0, "DT_FP16": pl.FP16, "DT_FP32": pl.FP32, "DT_BF16": pl.BF16, "DT_HF4": pl.HF4,
      "DT_HF8": pl.HF8, "DT_INDEX": pl.INDEX}
#: PyPTO's storage-only types: named here, refused when a kernel uses them (pl.INT4 and the rest).
STORAGE_ONLY = {"DT_INT4", "DT_UINT4", "DT_FP4", "DT_HF4", "DT_HF8"}


def test_each_dt_constant_is_the_pl_dtype_of_its_name():
    for name, dtype in DT.items():
        assert getattr(pypto_async, name) is dtype, name
        if name not in STORAGE_ONLY:
            assert isinstance(getattr(pypto_async, name), pypto_async.DataType), name
    assert set(DT) <= set(pypto_async.__all__)
    assert pypto_async.DT_FP32.np_name == "float32" and pypto_async.DT_INDEX is pl.INT64


def test_a_dt_constant_types_a_kernel_parameter():
    @pl.jit
    def double(a: pl.Tensor[[8, 16], pypto_async.DT_FP32], out: pl.Out[pl.Tensor[[8, 16], pypto_async.DT_FP32]]):
        with pl.incore():
            pl.store(pl.add(pl.load(a, [0, 0], [8, 16]), pl.load(a, [0, 0], [8, 16])), [0, 0], out)
        return out

    a = np.random.default_rng(3).standard_normal((8, 16), dtype=np.float32)
    out = np.full_like(a, np.nan)
    double(a, out)
    np.testing.assert_allclose(out, a + a, rtol=1e-6)


@pytest.mark.slow
def test_the_submodules_come_with_the_package():
    # A fresh interpreter: `import pypto_async` alone, then pypto_async.ir / .language / .runtime by attribute.
    code = ("import sys, pypto_async; assert 'pypto_async.runtime' not in sys.modules; "
            "print(pypto_async.ir.compile.__module__, pypto_async.language.jit.__name__, "
            "pypto_async.runtime.ChipWorker.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith("pypto_async.ir") and out[1:] == ["jit", "ChipWorker"]
    assert {"ir", "language", "runtime"} <= set(dir(pypto_async))


def test_pl_aliases_are_pyptos_names_of_the_same_things():
    assert pl.JITFunction is pl.JitFunction
    assert isinstance(pl.jit(lambda a: a), pl.JITFunction)
    m = pl.dynamic("M")
    assert isinstance(m, pl.DynVar) and m.name == "M"
    assert isinstance(4, pl.IntLike) and not isinstance(4.0, pl.IntLike)


def test_the_pto_isa_lookups_refuse_the_sim_has_no_checkout(monkeypatch):
    monkeypatch.delenv("PTO_ISA_ROOT", raising=False)
    for call in (ensure_pto_isa_root, pto_isa_include_dir):
        with pytest.raises(PtoNotSupported, match="no PTO-ISA checkout"):
            call()
    assert "PTO_ISA_ROOT" not in os.environ  # PyPTO exports it on success; a refusal sets nothing
