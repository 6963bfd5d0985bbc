"""The precompiled kernel headers: the same library, keyed by what it depends on, built once, never required."""

from __future__ import annotations

import os
import shlex
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError
from pypto_async.ir import _compile

from helpers.ir_fixtures import poison

CC = tuple(shlex.split(os.environ.get("CC") or "cc"))
FLAGS = _compile._flags_from({})
GCH = f"{_compile._PCH_HEADER}.gch"

pytestmark = pytest.mark.skipif(
    (_compile._compiler_version(CC), _compile._gnu_compilers.get(CC))[1] is not True,
    reason="precompiled headers are used with GCC only",
)


@pl.jit
def _axpy(x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor]):
    pl.store(pl.load(x, [0, 0], [16, 32]) * 3.0 + pl.load(y, [0, 0], [16, 32]), [0, 0], out)


X = np.zeros((16, 32), np.float32)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A fresh cache, and a process that has made no precompiled header yet."""
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_compile, "_pch_known", {})
    monkeypatch.setattr(_compile, "_pch_bad", set())
    return tmp_path / "cache"


def _pchs(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "pch").iterdir()) if (cache / "pch").is_dir() else []


@pytest.mark.slow
def test_a_kernel_built_with_the_precompiled_headers_is_the_same_library(fresh, tmp_path, launcher):
    c = ir.compile(_axpy.lower(X, X, X))
    (pch,) = _pchs(fresh)
    assert (pch / GCH).is_file() and not any(p.name.startswith("tmp-") for p in (fresh / "pch").iterdir())
    assert _compile._starts_with_the_headers(c.source_path)
    plain = tmp_path / "plain.so"
    _compile._pch_bad.add(pch)  # this process no longer uses it: a plain build
    _compile._run_compiler(CC, FLAGS, c.source_path, plain)
    assert plain.read_bytes() == c.lib_path.read_bytes()
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    out = poison((16, 32))
    launcher.run(c, x, y, out)
    np.testing.assert_array_equal(out, x * np.float32(3.0) + y)
    assert ir.clear_cache() == 1 and not (fresh / "pch").exists()  # the cache's precompiled headers go with it


def test_the_key_changes_with_the_flags_the_compiler_and_each_header(fresh, tmp_path, monkeypatch):
    include = tmp_path / "include"
    shutil.copytree(_compile._INCLUDE, include)
    monkeypatch.setattr(_compile, "_INCLUDE", include)
    base = _compile._pch_key(CC, FLAGS)
    keys = {base, _compile._pch_key(CC, (*FLAGS, "-DPTO_PROBE=1")), _compile._pch_key(CC, (*FLAGS, "-O1"))}
    with monkeypatch.context() as m:
        m.setitem(_compile._compiler_versions, CC, "cc (another build) 0.0")
        keys.add(_compile._pch_key(CC, FLAGS))
    assert _compile._pch_key(CC, FLAGS) == base
    for name in ("pto_kernel.h", "pto_kernel_rt.h", "pto_gemm.h", "pto_program.h"):
        h = include / name
        h.write_text(h.read_text() + f"/* edited {name} */\n")
        keys.add(_compile._pch_key(CC, FLAGS))
    assert len(keys) == 8
    # flags that put text before the kernel's includes, and -flto (the .gch holds no LTO code): none
    for extra in (("-include", "x.h"), ("-imacros", "x.h"), ("-flto",), ("-save-temps",)):
        assert _compile._pch_key(CC, (*FLAGS, *extra)) is None


@pytest.mark.slow
def test_an_edited_header_is_compiled_not_its_stale_precompiled_form(fresh, tmp_path, monkeypatch):
    include = tmp_path / "include"
    shutil.copytree(_compile._INCLUDE, include)
    monkeypatch.setattr(_compile, "_INCLUDE", include)
    ir.compile(_axpy.lower(X, X, X))
    assert len(_pchs(fresh)) == 1
    rt = include / "pto_kernel_rt.h"
    guard = "#define PTO_KERNEL_RT_H\n"  # inside the include guard: seen only where the header is parsed
    rt.write_text(rt.read_text().replace(guard, guard + "#error the edited header is the one compiled\n", 1))
    assert "#error" in rt.read_text()
    with pytest.raises(PtoCompileError, match="the edited header is the one compiled"):
        ir.compile(_axpy.lower(X, X, np.zeros((16, 32), np.float32) + 0))  # same IR, new key: a build
    assert len(_pchs(fresh)) == 1  # the edited headers do not precompile: no second .gch, plain builds


@pytest.mark.slow
def test_flags_make_their_own_precompiled_header(fresh):
    ir.compile(_axpy.lower(X, X, X))
    ir.compile(_axpy.lower(X, X, X), extra_cflags=["-DPTO_PROBE=1"])
    assert len(_pchs(fresh)) == 2
    ir.compile(_axpy.lower(X, X, X), extra_cflags=["-include", "stdint.h"])  # builds, without one
    assert len(_pchs(fresh)) == 2


@pytest.mark.slow
def test_a_damaged_precompiled_header_still_builds_the_same_kernel(fresh, tmp_path):
    c = ir.compile(_axpy.lower(X, X, X))
    (pch,) = _pchs(fresh)
    (pch / GCH).write_bytes(b"not a precompiled header" * 100)
    again = tmp_path / "again.so"
    _compile._run_compiler(CC, FLAGS, c.source_path, again)
    assert again.read_bytes() == c.lib_path.read_bytes()
    (pch / _compile._PCH_HEADER).write_text("#error a broken precompiled header\n")
    _compile._run_compiler(CC, FLAGS, c.source_path, again)  # fails with it: retried without, and it is dropped
    assert again.read_bytes() == c.lib_path.read_bytes() and pch in _compile._pch_bad


def test_an_unwritable_precompiled_header_folder_is_no_precompiled_header(fresh):
    fresh.mkdir(parents=True)
    (fresh / "pch").write_text("a file where the folder goes")
    c = ir.compile(_axpy.lower(X, X, X))
    assert c.lib_path.is_file() and _compile._pch_dir(CC, FLAGS) is None


@pytest.mark.slow
def test_builders_at_once_all_get_the_one_published(fresh):
    got, errors = [], []
    start = threading.Barrier(4)

    def build():
        try:
            start.wait()
            got.append(_compile._pch_dir(CC, FLAGS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    (pch,) = _pchs(fresh)  # one published, no private folder left behind
    assert got == [pch] * 4 and (pch / GCH).is_file()
