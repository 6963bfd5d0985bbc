"""Per-call DFX outputs: several runs into one ``save_kernels_dir``, and a directory that cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import ChipWorker, RunConfig

ROOT = Path(__file__).resolve().parents[2]
R, C = 16, 32
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pl.jit
def dfx_add(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])), [0, 0], out)
    return out


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((R, C)).astype(np.float32), rng.standard_normal((R, C)).astype(np.float32)


def one_run(seed: int, save_dir: str) -> None:
    """A run (a process's life): one call dumping its arguments into `save_dir`."""
    a, b = inputs(seed)
    out = np.full((R, C), np.nan, np.float32)
    compiled = ir.compile(dfx_add.lower(a, b, out))
    cfg = RunConfig(enable_dump_args=2, enable_scope_stats=True, save_kernels_dir=save_dir, **SMALL)
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        w.run(compiled, a, b, out, config=cfg)
    np.testing.assert_array_equal(out, a + b)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(path))
    return path


@pytest.mark.slow  # a subprocess or pytester run: seconds
def test_two_runs_dumping_into_one_dir_keep_both_dumps(tmp_path, cache):
    save = tmp_path / "save"
    x = np.zeros((R, C), np.float32)
    ir.compile(dfx_add.lower(x, x, x))  # built once; both runs hit the cache
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "runtime")])}
    seeds = (11, 22)
    runs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
                from test_dfx import one_run
                one_run({seed}, {str(save)!r})
                """)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for seed in seeds]  # at once: neither may lose the other's files or manifest entries
    for p in runs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    dump = save / "dfx_outputs" / "args_dump"
    manifest = json.loads((dump / "args_dump.json").read_text())
    entries = manifest["entries"]
    assert sorted(e["file"] for e in entries) == sorted(p.name for p in dump.glob("*.bin"))  # as on disk
    by_run: dict[str, dict] = {}
    for e in entries:
        by_run.setdefault(e["run"], {})[(e["param"], e["stage"])] = e
    assert len(by_run) == 2 and all(set(d) == {("a", "before"), ("b", "before"), ("out", "after")}
                                    for d in by_run.values())

    def read(e):
        assert (e["shape"], e["dtype"]) == ([R, C], "float32")
        return np.frombuffer((dump / e["file"]).read_bytes(), np.float32).reshape(R, C)

    got = {}
    for d in by_run.values():
        a = read(d[("a", "before")])
        seed = next(s for s in seeds if np.array_equal(a, inputs(s)[0]))
        want_a, want_b = inputs(seed)
        np.testing.assert_array_equal(read(d[("b", "before")]), want_b)
        np.testing.assert_array_equal(read(d[("out", "after")]), want_a + want_b)
        got[seed] = True
    assert sorted(got) == list(seeds)  # each run's own inputs, neither overwritten
    lines = [json.loads(line) for line in (save / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl")
             .read_text().splitlines()]
    assert {line["run"] for line in lines} == set(by_run)


@pytest.mark.parametrize("where", ["a file", "under a file", "dfx_outputs a file", "args_dump a file"])
def test_an_unusable_save_kernels_dir_is_refused_before_anything_is_queued(tmp_path, cache, where):
    a, b = inputs(3)
    compiled = ir.compile(dfx_add.lower(a, b, a))
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    save = {"a file": blocker, "under a file": blocker / "sub", "dfx_outputs a file": tmp_path / "s1",
            "args_dump a file": tmp_path / "s2"}[where]
    if where == "dfx_outputs a file":
        save.mkdir()
        (save / "dfx_outputs").write_text("")
    if where == "args_dump a file":
        (save / "dfx_outputs").mkdir(parents=True)
        (save / "dfx_outputs" / "args_dump").write_text("")
    cfg = RunConfig(enable_dump_args=2, save_kernels_dir=str(save), **SMALL)
    out = np.full((R, C), np.nan, np.float32)
    with ChipWorker(config=RunConfig(**SMALL)) as w:
        before = w.stats().commands_submitted
        with pytest.raises(PtoArgumentError, match="save_kernels_dir"):
            w.run(compiled, a, b, out, config=cfg)
        assert w.stats().commands_submitted == before
        assert np.isnan(out).all()
        w.run(compiled, a, b, out)  # the worker keeps working
    np.testing.assert_array_equal(out, a + b)
