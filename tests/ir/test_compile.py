"""ir.compile: artifacts, the on-disk cache, from_dir, concurrent builds, codegen quality."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError, PtoLoadError, PtoNotSupported
from pypto_async.ir import _compile

from helpers.ir_fixtures import poison
from .test_kernels import ROWS, COLS, add_kernel

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
A = np.zeros((ROWS, COLS), np.float32)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(path))
    return path


@pytest.fixture
def compiler_calls(monkeypatch):
    """Record every real compiler run."""
    calls = []
    real = _compile._run_compiler

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(_compile, "_run_compiler", spy)
    return calls


def test_artifact_directory(fresh_cache, compiler_calls):
    c = ir.compile(add_kernel.lower(A, A, A), platform="sim")
    assert len(compiler_calls) == 1
    assert c.output_dir.parent == fresh_cache / "kernels"
    assert {p.name for p in c.output_dir.iterdir()} == {"kernel.c", "kernel.so", "compiled_meta.json", "program.txt",
                                                         "debug"}  # debug/run.py: the artifact run again
    meta = json.loads((c.output_dir / "compiled_meta.json").read_text())
    assert meta["schema_version"] == ir.SCHEMA_VERSION
    assert meta["params"] == [
        {"name": "a", "direction": "in", "shape": [ROWS, COLS], "dtype": "FP32"},
        {"name": "b", "direction": "in", "shape": [ROWS, COLS], "dtype": "FP32"},
        {"name": "out", "direction": "out", "shape": [ROWS, COLS], "dtype": "FP32"},
    ]
    assert meta["block_num"] == 1 and meta["platform"] == "sim" and meta["symbol"] == c.symbol
    assert meta["compiler"] == (os.environ.get("CC") or "cc") and meta["flags"] == list(ir.DEFAULT_CFLAGS)
    assert len(meta["ir_hash"]) == 64
    assert '#include "pto_kernel.h"' in c.source_path.read_text()
    # the seed's members
    assert (c.platform, c.backend_type, c.has_return, c.output_indices) == ("sim", "sim", True, [2])
    assert c.chip_callable.lib_path == c.lib_path and c.chip_callable.symbol == c.symbol
    assert c.runtime_config == {"block_num": 1} and callable(c.validate_ir) and c.runtime_name
    assert [p.name for p in c.params] == list(c.param_names)


def test_cache_hit_does_not_invoke_the_compiler(fresh_cache, compiler_calls):
    prog = add_kernel.lower(A, A, A)
    first = ir.compile(prog)
    second = ir.compile(prog)
    assert len(compiler_calls) == 1
    assert second.output_dir == first.output_dir and second.lib_path.is_file()


@pytest.mark.slow
def test_flags_and_platform_key_the_cache(fresh_cache, compiler_calls):
    prog = add_kernel.lower(A, A, A)
    base = ir.compile(prog)
    o2 = ir.compile(prog, cflags="-O2 -std=c11 -ffp-contract=off")
    alias = ir.compile(prog, platform="a5sim")
    assert len(compiler_calls) == 3
    assert len({base.output_dir, o2.output_dir, alias.output_dir}) == 3
    assert "-O2" in o2.flags and "-shared" in o2.flags and "-fPIC" in o2.flags
    assert alias.platform == "a5sim" and alias.backend_type == "sim"


def test_clear_cache(fresh_cache):
    assert ir.cache_dir() == fresh_cache
    ir.compile(add_kernel.lower(A, A, A))
    assert ir.clear_cache() == 1
    assert ir.clear_cache() == 0
    assert list((fresh_cache / "kernels").iterdir()) == []


def test_output_dir_and_from_dir(tmp_path, launcher, rng):
    out_dir = tmp_path / "artifacts"
    c = ir.compile(add_kernel.lower(A, A, A), output_dir=out_dir)
    assert c.output_dir == out_dir and c.lib_path == out_dir / "kernel.so"
    again = ir.CompiledProgram.from_dir(out_dir)
    assert again.program is None and c.program is not None
    for attr in ("platform", "params", "param_names", "output_indices", "has_return", "block_num", "symbol", "ir_hash"):
        assert getattr(again, attr) == getattr(c, attr), attr
    assert ir.CompiledProgram.load is ir.CompiledProgram.from_dir or ir.CompiledProgram.load(out_dir).symbol == c.symbol
    a = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    b = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    out = poison((ROWS, COLS))
    launcher.run(again, a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_from_dir_takes_pypto_platform_and_backend_overrides_naming_the_sim(tmp_path):
    from pypto_async.backend import BackendType

    out_dir = tmp_path / "artifacts"
    c = ir.compile(add_kernel.lower(A, A, A), output_dir=out_dir)
    again = ir.CompiledProgram.from_dir(out_dir, platform="a2a3sim", backend_type=BackendType.Ascend910B)
    assert again.symbol == c.symbol
    with pytest.raises(PtoNotSupported, match="unknown platform 'a2a3'"):
        ir.CompiledProgram.from_dir(out_dir, platform="a2a3")
    with pytest.raises(PtoArgumentError, match="backend_type"):
        ir.CompiledProgram.from_dir(out_dir, backend_type=BackendType.CCE)


def test_from_dir_rejects_a_non_artifact(tmp_path):
    with pytest.raises(PtoLoadError, match="not an artifact directory"):
        ir.CompiledProgram.from_dir(tmp_path)
    (tmp_path / "compiled_meta.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(PtoLoadError, match="schema 99"):
        ir.CompiledProgram.from_dir(tmp_path)


def _python(code: str, env=None, **kw):
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=120, **kw)


@pytest.mark.slow
def test_from_dir_in_a_fresh_process(tmp_path):
    out_dir = tmp_path / "artifacts"
    ir.compile(add_kernel.lower(A, A, A), output_dir=out_dir)
    res = _python(
        f"""
        import numpy as np
        from pypto_async.ir import CompiledProgram
        from helpers.launcher import Launcher
        c = CompiledProgram.from_dir({str(out_dir)!r})
        assert c.program is None and c.param_names == ["a", "b", "out"]
        rng = np.random.default_rng(7)
        a = rng.standard_normal(({ROWS}, {COLS})).astype(np.float32)
        b = rng.standard_normal(({ROWS}, {COLS})).astype(np.float32)
        out = np.full(({ROWS}, {COLS}), np.nan, np.float32)
        lx = Launcher()
        lx.run(c, a, b, out)
        lx.close()
        assert np.array_equal(out, a + b)
        print("ok", c.symbol)
        """
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok add_kernel_")


@pytest.mark.slow
def test_two_processes_compile_the_same_kernel_with_a_cold_cache(tmp_path):
    """Both processes are inside the C compiler at once (a barrier in $CC); both succeed."""
    cache = tmp_path / "cache"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    cc = tmp_path / "barrier-cc"
    real_cc = os.environ.get("CC") or "cc"
    cc.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            # Wait (up to 30 s) until two builds are in the compiler, then compile.
            if [ "$1" = "--version" ]; then exec {real_cc} "$@"; fi
            case "$*" in *" c-header "*) exec {real_cc} "$@";; esac  # the precompiled headers: no barrier
            touch "{barrier}/$$"
            i=0
            while [ "$(ls "{barrier}" | wc -l)" -lt 2 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done
            exec {real_cc} "$@"
            """
        )
    )
    cc.chmod(0o755)
    code = f"""
        import numpy as np
        from ir.test_kernels import add_kernel
        a = np.zeros(({ROWS}, {COLS}), np.float32)
        c = add_kernel.compile(a, a, a)
        print(c.output_dir)
    """
    env = {"PYPTO_ASYNC_CACHE_DIR": str(cache), "CC": str(cc)}
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), **env}
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full_env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    for out, err, rc in results:
        assert rc == 0, err
    assert len(list(barrier.iterdir())) == 2  # both really compiled
    dirs = {out.strip() for out, _, _ in results}
    assert len(dirs) == 1
    entries = list((cache / "kernels").iterdir())
    assert [e.name for e in entries] == [Path(dirs.pop()).name]  # no temporary directory left behind
    assert ir.CompiledProgram.from_dir(entries[0]).lib_path.is_file()


@pl.jit
def axpy(x: pl.Tensor, y: pl.Tensor, a: pl.Scalar[pl.FP32], out: pl.Out[pl.Tensor]):
    for i in pl.range(0, 1 << 16, 4096):
        pl.store(pl.load(x, [i], [4096]) * a + pl.load(y, [i], [4096]), [i], out)


def test_fused_loops_vectorise():
    """gcc reports the fused element-wise loop as vectorised (-fopt-info-vec)."""
    x = np.zeros(1 << 16, np.float32)
    c = axpy.compile(x, x, 2.0, x)
    cc = shlex.split(os.environ.get("CC") or "cc")
    include = Path(ir.__file__).resolve().parent.parent / "include"
    res = subprocess.run(
        [*cc, *c.flags, f"-I{include}", "-fopt-info-vec-optimized", "-o", os.devnull, str(c.source_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    src = c.source_path.read_text().splitlines()
    store_line = next(i + 1 for i, line in enumerate(src) if "p_out[" in line)
    loop_line = max(i + 1 for i in range(store_line) if "for (int64_t e0" in src[i])  # the chain's loop
    assert f"kernel.c:{loop_line}:" in res.stderr and "loop vectorized" in res.stderr, res.stderr
    assert "versioned" not in res.stderr, res.stderr  # restrict holds: no runtime alias check


def test_kernel_call_forwards_to_the_runtime(monkeypatch):
    """kernel(*args) and compiled(*args, stream=) go to runtime._entry.dispatch."""
    calls = []
    fake = types.ModuleType("pypto_async.runtime._entry")
    fake.dispatch = lambda compiled, args, stream=None, config=None: calls.append((compiled, args, stream)) or "launched"
    monkeypatch.setitem(sys.modules, "pypto_async.runtime._entry", fake)
    a = np.zeros((ROWS, COLS), np.float32)
    assert add_kernel(a, a, a) == "launched"
    compiled, args, stream = calls[-1]
    assert compiled is add_kernel.compile(a, a, a) and args == (a, a, a) and stream is None
    assert compiled(a, a, a, stream="s1") == "launched" and calls[-1][2] == "s1"


def test_call_without_a_runtime_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pypto_async.runtime._entry", None)  # import fails
    a = np.zeros((ROWS, COLS), np.float32)
    with pytest.raises(PtoNotSupported, match="no runtime"):
        add_kernel(a, a, a)


def test_compile_reports_a_missing_compiler(fresh_cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(PtoCompileError, match="not found"):
        ir.compile(add_kernel.lower(A, A, A))


def test_unusable_cache_dir_is_a_compile_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(blocker))
    with pytest.raises(PtoCompileError, match="cannot use the kernel cache"):
        ir.compile(add_kernel.lower(A, A, A))


def test_output_dir_may_be_the_cache_entry(fresh_cache):
    c = ir.compile(add_kernel.lower(A, A, A))
    again = ir.compile(add_kernel.lower(A, A, A), output_dir=c.output_dir)
    assert again.output_dir == c.output_dir and again.lib_path.is_file()


def _set(field, value):
    def damage(text):
        meta = json.loads(text)
        meta[field] = value
        return json.dumps(meta)
    return damage


def _drop(field):
    def damage(text):
        meta = json.loads(text)
        del meta[field]
        return json.dumps(meta)
    return damage


def _param_shape(text):
    meta = json.loads(text)
    meta["params"][0]["shape"] = "128x128"
    return json.dumps(meta)


#: Damage done to compiled_meta.json, and what the error must name.
DAMAGED_META = {
    "missing field": (_drop("params"), "'params'"),
    "missing symbol": (_drop("symbol"), "'symbol'"),
    "wrong type": (_set("block_num", "1"), "'block_num'"),
    "wrong type in a parameter": (_param_shape, "'params'"),
    "wrong task graph": (_set("task_graph", {"tasks": 3}), "'task_graph'"),
    "bad json": (lambda text: text[: len(text) // 2], "not JSON"),
    "empty file": (lambda text: "", "empty"),
    "not an object": (lambda text: "[1, 2]", "not an object"),
    "wrong schema version": (_set("schema_version", 2), "schema 2"),
}


@pytest.mark.parametrize("case", DAMAGED_META)
def test_from_dir_of_damaged_metadata_names_the_directory_and_field(tmp_path, case):
    damage, needle = DAMAGED_META[case]
    out_dir = tmp_path / "artifacts"
    ir.compile(add_kernel.lower(A, A, A), output_dir=out_dir)
    meta = out_dir / "compiled_meta.json"
    meta.write_text(damage(meta.read_text()))
    with pytest.raises(PtoLoadError) as info:
        ir.CompiledProgram.from_dir(out_dir)
    assert str(out_dir) in str(info.value) and needle in str(info.value)


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
@pytest.mark.parametrize("case", [*DAMAGED_META, "library gone"])
def test_a_damaged_cache_entry_is_a_miss_and_is_rebuilt(fresh_cache, compiler_calls, launcher, rng, case):
    first = ir.compile(add_kernel.lower(A, A, A))
    if case == "library gone":
        first.lib_path.unlink()
    else:
        meta = first.output_dir / "compiled_meta.json"
        meta.write_text(DAMAGED_META[case][0](meta.read_text()))
    again = ir.compile(add_kernel.lower(A, A, A))
    assert len(compiler_calls) == 2  # rebuilt ...
    assert again.output_dir == first.output_dir  # ... in place of the damaged entry
    assert ir.CompiledProgram.from_dir(again.output_dir).symbol == first.symbol
    assert ir.compile(add_kernel.lower(A, A, A)).output_dir == first.output_dir and len(compiler_calls) == 2
    assert [p.name for p in (fresh_cache / "kernels").iterdir()] == [first.output_dir.name]  # nothing left over
    a = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    b = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    out = poison((ROWS, COLS))
    launcher.run(again, a, b, out)
    np.testing.assert_array_equal(out, a + b)
