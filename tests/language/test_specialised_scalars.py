"""A number given for a scalar parameter specialises the artifact; a launch must pass that number there.

``kernel.compile(n=3)`` compiles a kernel that "only ever sees" 3 (PyPTO's getting-started guide): the
body computes with the number, the parameter stays in the signature.  A launch of that artifact that
passes another value is refused before anything is queued (a ``PtoArgumentError`` naming the
parameter, the value passed and the value compiled in), however the handle was made: registered from
``compile``, called directly, rebuilt ``from_dir`` or unpickled.  ``pl.RUNTIME`` leaves the value to
each launch.  Random data against numpy, outputs poisoned first.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoLoadError
from pypto_async.runtime import ChipWorker, RunConfig

CFG = RunConfig(platform="sim")


@pl.jit
def repeat_add(x: pl.Tensor[[32, 16], pl.FP32], out: pl.Out[pl.Tensor[[32, 16], pl.FP32]],
               n: pl.Scalar[pl.INT32], alpha: pl.Scalar[pl.FP32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(x, [0, 0], [32, 16])
        acc = pl.mul(t, alpha)
        for _ in range(n - 1):  # a Python loop: the trace needs the number
            acc = pl.add(acc, pl.mul(t, alpha))
        pl.store(acc, [0, 0], out)
    return out


@pl.jit
def ignores_n(x: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]], n: pl.Scalar[pl.INT32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.load(x, [0, 0], [16, 16]), 1.0), [0, 0], out)
    return out


def _x(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _nan(*shape):
    return np.full(shape, np.nan, np.float32)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture(scope="module")
def three():
    """``repeat_add`` specialised on n=3, alpha=0.5."""
    return repeat_add.compile(n=3, alpha=0.5)


def test_the_artifact_records_the_values_it_was_compiled_for(three):
    assert three.specialised == {"n": 3, "alpha": 0.5}
    assert three.param_names == ["x", "out", "n", "alpha"]  # the parameters stay in the signature


def test_a_launch_with_the_compiled_values_runs(three, rng):
    x = _x(rng, 32, 16)
    with ChipWorker(config=CFG) as w:
        h = w.register(three)
        out = _nan(32, 16)
        h(x, out, 3, 0.5)
        np.testing.assert_allclose(out, 3 * 0.5 * x, rtol=1e-6)
        out = _nan(32, 16)
        h(x, out, np.int32(3), np.float32(0.5))  # the same numbers in other types
        np.testing.assert_allclose(out, 3 * 0.5 * x, rtol=1e-6)


@pytest.mark.parametrize("n, alpha, name, compiled, got", [
    (4, 0.5, "n", "3", "4"),
    (3, 0.25, "alpha", "0.5", "0.25"),
    (0, 0.5, "n", "3", "0"),
])
def test_another_value_is_refused_before_anything_is_queued(three, rng, n, alpha, name, compiled, got):
    x = _x(rng, 32, 16)
    with ChipWorker(config=CFG) as w:
        h = w.register(three)
        out = _nan(32, 16)
        with pytest.raises(PtoArgumentError, match=rf"argument '{name}': the artifact was compiled for "
                                                   rf"{name}={compiled} .* got {got}; .*pl\.RUNTIME"):
            h(x, out, n, alpha)
        assert np.isnan(out).all()  # nothing ran
        h(x, out, 3, 0.5)  # the worker keeps working
        np.testing.assert_allclose(out, 3 * 0.5 * x, rtol=1e-6)


@pytest.mark.anyio
async def test_a_launch_of_device_tensors_refuses_it_too(three, rng):
    x = _x(rng, 32, 16)
    async with ChipWorker(config=CFG) as w:
        h = w.register(three)
        dx = w.alloc_tensor((32, 16), np.float32, init=x)
        dout = w.alloc_tensor((32, 16), np.float32, init=_nan(32, 16))
        with pytest.raises(PtoArgumentError, match="compiled for n=3"):
            await h(dx, dout, 5, 0.5)
        await h(dx, dout, 3, 0.5)
        np.testing.assert_allclose(await dout.to_host(), 1.5 * x, rtol=1e-6)
        dx.free()
        dout.free()


def test_the_compiled_program_called_directly_refuses_it(three, rng):
    out = _nan(32, 16)
    with pytest.raises(PtoArgumentError, match="compiled for alpha=0.5"):
        three(_x(rng, 32, 16), out, 3, 2.0)
    assert np.isnan(out).all()


def test_from_dir_and_pickle_keep_the_values(tmp_path, rng):
    out_dir = tmp_path / "k"
    c = repeat_add.compile(n=2, alpha=-1.5, output_dir=out_dir)
    assert json.loads((out_dir / "compiled_meta.json").read_text())["specialised"] == {"n": 2, "alpha": -1.5}
    x = _x(rng, 32, 16)
    for handle in (ir.CompiledProgram.from_dir(out_dir), pickle.loads(pickle.dumps(c))):
        assert handle.specialised == {"n": 2, "alpha": -1.5}
        with ChipWorker(config=CFG) as w:
            h = w.register(handle)
            out = _nan(32, 16)
            with pytest.raises(PtoArgumentError, match="compiled for n=2"):
                h(x, out, 3, -1.5)
            h(x, out, 2, -1.5)
            np.testing.assert_allclose(out, -3.0 * x, rtol=1e-6)


def test_a_value_the_body_does_not_read_still_keys_its_own_artifact(rng):
    # The C is the same for every n; the artifact is still n's: a launch passes the value it was compiled for.
    c1, c2 = ignores_n.compile(n=1), ignores_n.compile(n=2)
    assert c1.specialised == {"n": 1} and c2.specialised == {"n": 2} and c1.ir_hash != c2.ir_hash
    x = _x(rng, 16, 16)
    with ChipWorker(config=CFG) as w:
        for c, n in ((c1, 1), (c2, 2)):
            out = _nan(16, 16)
            w.register(c)(x, out, n)
            np.testing.assert_allclose(out, x + 1.0, rtol=1e-6)
        with pytest.raises(PtoArgumentError, match="compiled for n=2"):
            w.register(c2)(x, _nan(16, 16), 1)


def test_calling_the_kernel_with_a_number_compiles_for_it(rng):
    x = _x(rng, 32, 16)
    for n, alpha in ((2, 1.5), (4, -0.25)):
        out = _nan(32, 16)
        repeat_add(x, out, n, alpha, config=CFG)
        np.testing.assert_allclose(out, n * alpha * x, rtol=1e-5)


def test_pl_runtime_takes_any_value_at_each_launch(rng):
    @pl.jit
    def scale(x: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]],
              alpha: pl.Scalar[pl.FP32] = pl.RUNTIME):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(x, [0, 0], [16, 16]), alpha), [0, 0], out)
        return out

    c = scale.compile()
    assert c.specialised == {}
    x = _x(rng, 16, 16)
    with ChipWorker(config=CFG) as w:
        h = w.register(c)
        for alpha in (0.5, -2.0, 3.0):
            out = _nan(16, 16)
            h(x, out, alpha)
            np.testing.assert_allclose(out, alpha * x, rtol=1e-6)


@pytest.mark.parametrize("bad", [{"m": 1}, {"x": 1}, {"n": "3"}, {"n": None}])
def test_metadata_naming_no_scalar_or_no_number_is_refused_on_load(tmp_path, bad):
    out_dir = tmp_path / "k"
    ignores_n.compile(n=1, output_dir=out_dir)
    meta = json.loads((out_dir / "compiled_meta.json").read_text())
    meta["specialised"] = bad
    (out_dir / "compiled_meta.json").write_text(json.dumps(meta))
    with pytest.raises(PtoLoadError, match="field 'specialised'"):
        ir.CompiledProgram.from_dir(out_dir)


def test_the_run_script_beside_the_artifact_passes_the_compiled_values():
    import runpy

    pytest.importorskip("torch")
    compiled = repeat_add.compile(n=2, alpha=1.25)
    script = compiled.output_dir / "debug" / "run.py"
    text = script.read_text()
    assert "'n': 2,  # scalar INT32[]; compiled for this value" in text and "'alpha': 1.25," in text
    values = runpy.run_path(str(script), run_name="run_script")["main"](["--seed", "3"])
    np.testing.assert_allclose(values["out"].numpy(), 2.5 * values["x"].numpy(), rtol=1e-6)
