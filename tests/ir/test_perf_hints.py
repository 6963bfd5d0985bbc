"""Compile-time perf hints in PyPTO's form: ``report/perf_hints.log`` (PH001, PH-MR-001)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.ir._perf_hints import perf_hints

from helpers.located import next_line


def _log(tmp_path):
    path = tmp_path / "report" / "perf_hints.log"
    return path.read_text().splitlines() if path.exists() else None


def _rows(cols: int):
    where = {}

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(4):
                where["load"] = next_line()
                t = pl.load(x, [i * 16, 0], [16, cols])
                where["store"] = next_line()
                pl.store(pl.add(t, 1.0), [i * 16, 0], y)

    x = np.zeros((64, cols), np.float32)
    return k.lower(x, x.copy()), where


def test_a_128_byte_row_gets_ph001_in_pypto_s_words(tmp_path, caplog):
    program, where = _rows(32)
    with caplog.at_level(logging.INFO, logger="pypto_async.ir"):
        ir.compile(program, platform="a2a3sim", output_dir=tmp_path)
    tail = ("recommended >= 512B for backend a2a3 (L2 cache line = 512B). Consider increasing tile shape "
            "on the innermost axis.")
    assert _log(tmp_path) == [
        "[perf_hint PH001] TileInnermostDimGranularity: tile.load has innermost dim = 128B (tile fp32[32], "
        f"target_memory=Vec); moves 2048B as 16 x 128B rows; {tail} at {__file__}:{where['load']}",
        "[perf_hint PH001] TileInnermostDimGranularity: tile.store has innermost dim = 128B (tile fp32[32], "
        f"target_memory=Vec); moves 2048B as 16 x 128B rows; {tail} at {__file__}:{where['store']}",
    ]
    assert f"[perf_hint] 2 hints across 2 sites; see {tmp_path / 'report' / 'perf_hints.log'}" in caplog.text


def test_a_512_byte_row_is_silent_and_a_fixed_kernel_removes_the_log(tmp_path):
    ir.compile(_rows(32)[0], platform="a2a3sim", output_dir=tmp_path)
    assert _log(tmp_path) is not None
    ir.compile(_rows(128)[0], platform="a2a3sim", output_dir=tmp_path)
    assert _log(tmp_path) is None


def test_a5_recommends_128_bytes():
    assert perf_hints(_rows(32)[0], "a5sim") == []
    lines = perf_hints(_rows(16)[0], "a5sim")
    assert len(lines) == 2
    assert "innermost dim = 64B (tile fp32[16]" in lines[0]
    assert "recommended >= 128B for backend a5 (L2 cache line = 512B)" in lines[0]


def test_identical_transfers_at_one_line_are_one_hint_with_a_count():
    where = {}

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in range(3):  # a Python loop: three loads traced at one line
                where["load"] = next_line()
                t = pl.load(x, [i * 8, 0], [8, 64])
                pl.store(t, [i * 8, 0], y)

    x = np.zeros((24, 64), np.float32)
    lines = perf_hints(k.lower(x, x.copy()), "sim")
    load = [line for line in lines if "tile.load" in line]
    assert load == [
        "[perf_hint PH001] TileInnermostDimGranularity: tile.load has innermost dim = 256B (tile fp32[64], "
        "target_memory=Vec); moves 2048B as 8 x 256B rows; recommended >= 512B for backend a2a3 "
        "(L2 cache line = 512B). Consider increasing tile shape on the innermost axis. "
        f"(3 occurrences at this source location) at {__file__}:{where['load']}"]


def test_a_runtime_valid_extent_leaves_out_the_volume():
    @pl.jit
    def k(data: pl.Tensor, cfg: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            n = pl.read(cfg, [0])
            t = pl.load(data, [0, 0], [16, 32], valid_shape=[16, n])
            pl.store(pl.tile.fillpad(t, pad_value=pl.PadValue.zero), [0, 0], out)

    data = np.zeros((16, 32), np.float32)
    lines = perf_hints(k.lower(data, np.array([3], np.int64), data.copy()), "sim")
    load = next(line for line in lines if "tile.load" in line)
    assert "(tile fp32[32], target_memory=Vec); recommended >= 512B" in load
    assert "moves" not in load


def _pipelined(stage: int, rows: int):
    where = {}

    @pl.jit
    def k(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            where["loop"] = next_line()
            for i in pl.pipeline(4, stage=stage):
                t = pl.load(x, [i * rows, 0], [rows, 128])
                pl.store(pl.exp(t), [i * rows, 0], y)

    x = np.zeros((4 * rows, 128), np.float32)
    return k.lower(x, x.copy()), where


def test_a_pipeline_whose_stages_do_not_fit_gets_ph_mr_001():
    program, where = _pipelined(4, 128)
    lines = [line for line in perf_hints(program, "a2a3sim") if "PH-MR-001" in line]
    # Per stage: the loaded [128, 128] fp32 tile and its exp, 64 KiB each; Vec holds 184 KiB.
    assert lines == [
        "[perf_hint PH-MR-001] MemoryReuse: software pipelining requested depth 4 for pipeline group 0 in Vec, "
        "but only 1 of 4 buffers fit (131072 B per stage, 188416 B free) — stages 1 apart share storage and "
        "serialize. This operand alone needs 524288 B for depth 4; shrink the per-stage tile to <= 47104 B, or "
        f"reduce the pipeline depth (e.g. `pl.pipeline(stage=)`) to 1. at {__file__}:{where['loop']}"]


@pytest.mark.parametrize("stage, rows", [(2, 32), (1, 128)])
def test_a_pipeline_that_fits_is_silent(stage, rows):
    program, _ = _pipelined(stage, rows)
    assert [line for line in perf_hints(program, "a2a3sim") if "PH-MR-001" in line] == []


def test_an_unwritable_report_dir_logs_the_hints_and_the_compile_goes_on(tmp_path, caplog):
    from pypto_async.ir._perf_hints import write_perf_hints

    (tmp_path / "report").write_text("a file where the directory would be")
    lines = perf_hints(_rows(32)[0], "sim")
    with caplog.at_level(logging.INFO, logger="pypto_async.ir"):
        assert write_perf_hints(tmp_path, lines) is None
    assert "cannot write" in caplog.text and lines[0] in caplog.text
