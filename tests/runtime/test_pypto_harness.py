"""runtime.run(): PyPTO's system-test harness, and the RunConfig fields only it reads (runtime/_harness.py)."""

from __future__ import annotations

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import RunConfig, RunResult, run

torch = pytest.importorskip("torch")

R, C = 16, 32
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pl.jit
def tile_add(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(pl.add(ta, tb), [0, 0], c)
    return c


def golden_add(tensors, params=None):
    tensors["c"][:] = tensors["a"] + tensors["b"]


@pytest.fixture
def abc():
    torch.manual_seed(3)
    return torch.randn(R, C), torch.randn(R, C), torch.full((R, C), float("nan"))


def test_run_compiles_runs_and_matches_the_golden(abc):
    a, b, c = abc
    result = run(tile_add, a, b, c, config=RunConfig(platform="a2a3sim", **SMALL), golden=golden_add,
                 test_name="tile_add_16x32")
    assert isinstance(result, RunResult)
    assert result.passed and result.error is None and result.mismatch_count == 0
    assert result.max_abs_error == 0.0 and result.execution_time > 0
    assert set(result.profile) >= {"compile_s", "golden_s", "run_s", "compare_s"}
    assert str(result).startswith("PASS: tile_add_16x32")
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_a_wrong_golden_fails_with_the_mismatch(abc):
    a, b, c = abc

    def golden_sub(tensors):  # the one-argument form is taken too
        tensors["c"][:] = tensors["a"] - tensors["b"]

    result = run(tile_add.lower(a, b, c), a, b, c, config=RunConfig(**SMALL), golden=golden_sub)
    assert not result.passed
    assert "'c'" in result.error and result.mismatch_count == int(((a + b) != (a - b)).sum())
    assert result.max_abs_error == pytest.approx(float((2 * b).abs().max()), rel=1e-6)
    assert result.mismatch_indices and len(result.mismatch_indices) <= 10
    assert str(result).startswith("FAIL")


def test_rtol_and_atol_decide(abc):
    a, b, c = abc

    def golden_near(tensors):
        tensors["c"][:] = tensors["a"] + tensors["b"] + 1e-3

    strict = run(tile_add, a, b, c, config=RunConfig(**SMALL), golden=golden_near)
    loose = run(tile_add, a, b, c, config=RunConfig(atol=1e-2, **SMALL), golden=golden_near)
    assert not strict.passed and loose.passed
    assert 9e-4 < loose.max_abs_error < 1.1e-3


def test_codegen_only_compiles_and_does_not_dispatch(abc, tmp_path):
    a, b, c = abc
    cfg = RunConfig(codegen_only=True, save_kernels=True, save_kernels_dir=str(tmp_path / "k"), **SMALL)
    result = run(tile_add, a, b, c, config=cfg, golden=golden_add)
    assert result.passed and "run_s" not in result.profile
    assert torch.isnan(c).all()  # never dispatched
    assert (tmp_path / "k" / "kernel.so").is_file() and (tmp_path / "k" / "compiled_meta.json").is_file()


def test_save_kernels_decides_where_the_artifacts_go(abc, tmp_path, monkeypatch):
    a, b, c = abc
    monkeypatch.chdir(tmp_path)
    assert run(tile_add, a, b, c, config=RunConfig(**SMALL)).passed  # no golden: ran without error
    assert not (tmp_path / "build_output").exists()  # not saved: the kernel cache only
    assert run(tile_add, a, b, c, config=RunConfig(save_kernels=True, **SMALL)).passed
    (entry,) = (tmp_path / "build_output").iterdir()
    assert entry.name.startswith("tile_add_") and (entry / "kernel.so").is_file()


def test_golden_data_dir_keeps_and_reuses_the_data(abc, tmp_path):
    a, b, c = abc
    calls = []

    def golden(tensors):
        calls.append(1)
        golden_add(tensors)

    cfg = RunConfig(golden_data_dir=str(tmp_path / "data"), **SMALL)
    assert run(tile_add, a, b, c, config=cfg, golden=golden).passed
    assert (tmp_path / "data" / "in" / "a.pt").is_file() and (tmp_path / "data" / "out" / "c.pt").is_file()
    torch.testing.assert_close(torch.load(tmp_path / "data" / "out" / "c.pt"), a + b, rtol=0, atol=0)
    # A second run with other tensors reads the saved inputs and the saved golden.
    a2, b2, c2 = torch.randn(R, C), torch.randn(R, C), torch.full((R, C), float("nan"))
    assert run(tile_add, a2, b2, c2, config=cfg, golden=golden).passed
    assert len(calls) == 1
    torch.testing.assert_close(a2, a, rtol=0, atol=0)
    torch.testing.assert_close(c2, a + b, rtol=0, atol=0)


def test_a_failing_launch_is_a_failed_result(kernels):
    x = np.zeros(16, np.float32)
    result = run(kernels.get("fail", 16), x, config=RunConfig(**SMALL))
    assert not result.passed and "PtoKernelFault" in result.error
    assert result.execution_time > 0


def test_bad_arguments_raise(abc):
    a, b, c = abc
    with pytest.raises(PtoArgumentError, match="golden must be callable"):
        run(tile_add, a, b, c, config=RunConfig(**SMALL), golden=3)
    with pytest.raises(PtoArgumentError, match="not parameters"):
        run(tile_add, a, b, c, config=RunConfig(**SMALL), golden=golden_add, outputs=["d"])
    with pytest.raises(PtoArgumentError, match="unknown RunConfig"):
        run(tile_add, a, b, c, config={"no_such_field": 1})
