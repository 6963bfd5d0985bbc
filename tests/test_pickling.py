"""A CompiledProgram pickles as its artifact; a DeviceTensor refuses to pickle."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoLoadError, PtoNotSupported
from pypto_async.runtime import ChipWorker

R, C = 16, 32
ROOT = Path(__file__).resolve().parents[1]


@pl.jit
def axpy(x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor], alpha: pl.Scalar[pl.FP32]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.mul(pl.load(x, [0, 0], [R, C]), alpha), pl.load(y, [0, 0], [R, C])), [0, 0], out)
    return out


@pl.jit
def axmy(x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor], alpha: pl.Scalar[pl.FP32]):
    """axpy's signature, another result: what a forged artifact carries."""
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.sub(pl.mul(pl.load(x, [0, 0], [R, C]), alpha), pl.load(y, [0, 0], [R, C])), [0, 0], out)
    return out


def rand(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((R, C)).astype(np.float32)


def run(compiled, want=lambda x, y: x * 0.5 + y) -> np.ndarray:
    x, y = rand(1), rand(2)
    out = np.full((R, C), np.nan, np.float32)
    with ChipWorker() as w:
        w.run(compiled, x, y, out, 0.5)
    np.testing.assert_allclose(out, want(x, y), rtol=1e-6)
    return out


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "here"))
    x = rand(0)
    return ir.compile(axpy.lower(x, x, x, pl.RUNTIME), output_dir=tmp_path / "artifact")


@pytest.mark.slow
def test_a_program_travels_without_its_directory_or_cache(compiled, tmp_path, monkeypatch):
    data = pickle.dumps(compiled)
    # The receiving side: another cache, and the sender's files gone.
    shutil.rmtree(tmp_path / "artifact")
    shutil.rmtree(tmp_path / "here")
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "there"))
    again = pickle.loads(data)
    assert again.output_dir.parent == tmp_path / "there" / "kernels"  # rebuilt into this cache
    assert (again.output_dir / "kernel.so").is_file()
    assert again.program is None  # as from_dir: the artifact, not the IR objects
    assert (again.name, again.symbol, again.params, again.flags, again.ir_hash) == (
        compiled.name, compiled.symbol, compiled.params, compiled.flags, compiled.ir_hash)
    assert again.source_path.read_text() == pickle.loads(data).source_path.read_text()
    run(again)


def test_unpickling_where_it_was_built_hits_the_cache(compiled, tmp_path):
    entry = ir.compile(compiled.program)  # the cache entry compile() made
    built = (entry.lib_path.stat().st_mtime_ns, entry.lib_path.stat().st_ino)
    again = pickle.loads(pickle.dumps(compiled))
    assert again.output_dir == entry.output_dir
    assert (again.lib_path.stat().st_mtime_ns, again.lib_path.stat().st_ino) == built  # not rebuilt
    assert not [p for p in again.output_dir.parent.iterdir() if p.name.startswith("tmp-")]
    run(again)


@pytest.mark.slow  # a subprocess or pytester run: seconds
def test_a_received_artifact_never_takes_the_key_of_a_local_compile(compiled, tmp_path, monkeypatch):
    """A pickle carrying other code under axpy's IR: local compiles of axpy still run axpy, here and elsewhere."""
    x = rand(0)
    other = ir.compile(axmy.lower(x, x, x, pl.RUNTIME))
    forged = other.source_path.read_text().replace(other.symbol, compiled.symbol)
    (compiled.output_dir / "kernel.c").write_text(forged)  # the artifact as a hostile sender ships it
    data = pickle.dumps(compiled)
    shared = tmp_path / "shared"
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(shared))

    received = pickle.loads(data)
    run(received, want=lambda x, y: x * 0.5 - y)  # it runs what it carries: the forgery is real
    local = ir.compile(axpy.lower(x, x, x, pl.RUNTIME))
    run(local)
    assert local.output_dir != received.output_dir and local.source_path.read_text() != forged
    # A second copy arriving after the local compile changes nothing either.
    assert pickle.loads(data).output_dir == received.output_dir
    run(ir.compile(axpy.lower(x, x, x, pl.RUNTIME)))

    # Another process sharing the cache compiles axpy and gets axpy.
    code = textwrap.dedent("""
        import numpy as np
        import pypto_async.language as pl
        from pypto_async import ir
        from test_pickling import axpy, rand, run
        x = rand(0)
        run(ir.compile(axpy.lower(x, x, x, pl.RUNTIME)))
        print("ok")
        """)
    env = {**os.environ, "PYPTO_ASYNC_CACHE_DIR": str(shared),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_a_program_of_another_schema_is_refused(compiled):
    meta = json.loads((compiled.output_dir / "compiled_meta.json").read_text())
    meta["schema_version"] = 99
    (compiled.output_dir / "compiled_meta.json").write_text(json.dumps(meta))
    with pytest.raises(PtoLoadError, match="schema 99"):
        pickle.loads(pickle.dumps(compiled))


@pytest.mark.parametrize("field, value", [("params", None), ("flags", "-O3"), ("block_num", True)])
def test_a_pickled_program_with_damaged_metadata_names_the_field(compiled, field, value):
    meta = json.loads((compiled.output_dir / "compiled_meta.json").read_text())
    meta[field] = value
    (compiled.output_dir / "compiled_meta.json").write_text(json.dumps(meta))
    with pytest.raises(PtoLoadError, match=f"a pickled program: compiled_meta.json field '{field}'"):
        pickle.loads(pickle.dumps(compiled))


def test_a_program_whose_files_are_gone_cannot_be_pickled(compiled):
    (compiled.output_dir / "kernel.c").unlink()
    with pytest.raises(PtoLoadError, match="incomplete"):
        pickle.dumps(compiled)


def test_a_device_tensor_refuses_to_pickle():
    with ChipWorker() as w:
        t = w.alloc_tensor((R, C), "float32", init=rand(3))
        for dump in (pickle.dumps, lambda obj: pickle.dumps(obj, protocol=0)):
            with pytest.raises(PtoNotSupported, match="TensorRef"):
                dump(t)
        np.testing.assert_array_equal(t.numpy(), rand(3))  # still usable
        w.free_tensor(t)
