"""`pypto-async bench`: the dated Markdown page it renders, and what it says without a checkout."""

from __future__ import annotations

import json

import pytest

from pypto_async import _bench
from pypto_async._cli import main
from pypto_async._cli_error import CliError

DOC = {
    "python": "3.11.7", "machine": "x86_64", "cpus": 2, "quick": False, "date": "2026-12-01 20:00",
    "commit": "abc1234", "torch": "2.13.0", "load": {"start": [0.5, 0.25, 0.125], "end": [1.5, 1.0, 0.5]},
    "benchmarks": {
        "bench_x": {"status": "ok", "rows": [
            {"name": "a | b", "figure": 2.0, "unit": "µs", "reference": 1.0, "reference_name": "floor",
             "ratio": 2.0, "target": "≤ 1 µs", "ok": False},
            {"name": "plain", "figure": 3.0, "unit": "x", "reference": None, "reference_name": "",
             "ratio": None, "target": "", "ok": None},
            {"name": "paired", "figure": 0.9, "unit": "x", "reference": None,
             "reference_name": "the same rounds apart, 95% interval 0.8-1.0", "ratio": None, "target": "", "ok": None},
        ]},
        "bench_y": {"status": "failed", "error": "timed out after 600 s", "rows": []},
    },
}


def test_the_page_names_date_commit_machine_and_load_and_keeps_each_target_by_its_figure():
    page = _bench.format_markdown(DOC)
    assert "2026-12-01 20:00" in page and "abc1234" in page and "2 CPUs" in page and "torch 2.13.0" in page
    assert "0.50, 0.25, 0.12 at the start, 1.50, 1.00, 0.50 at the end" in page
    assert "| a \\| b | 2 µs | 1 µs (floor) | 2.00x | ≤ 1 µs | no |" in page
    assert "| plain | 3 x |  |  |  |  |" in page
    assert "| paired | 0.9 x | the same rounds apart, 95% interval 0.8-1.0 |  |  |  |" in page  # its text alone
    assert "`bench_y`: failed (timed out after 600 s)" in page
    assert "do not edit by hand" in page
    assert "targets met: 0 of 1" in page
    assert "machine was shared" not in page  # a load of 1.5 on 2 CPUs
    loaded = _bench.format_markdown({**DOC, "load": {"start": [5.0, 4.0, 3.0], "end": [7.0, 6.0, 5.0]}})
    assert "the machine was shared: a load average above its 2 CPUs" in loaded


def test_render_writes_the_page_of_an_earlier_run_without_running_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(_bench, "_run_one", lambda *a, **k: pytest.fail("render ran a benchmark"))
    results = tmp_path / "bench_results.json"
    results.write_text(json.dumps(DOC))
    page = tmp_path / "docs" / "benchmarks.md"
    assert main(["bench", "--render", str(results), "--markdown", str(page)]) == 0
    assert page.read_text() == _bench.format_markdown(DOC)


def test_without_a_checkout_bench_says_in_one_line_what_it_needs(tmp_path, monkeypatch):
    # An installed package: no benchmarks/ beside it.
    monkeypatch.setattr(_bench, "__file__", str(tmp_path / "site-packages" / "pypto_async" / "_bench.py"))
    with pytest.raises(CliError) as ei:
        _bench.find_benchmarks_dir()
    message = str(ei.value)
    assert "\n" not in message
    assert "source checkout" in message and "--dir" in message and "pip install -e ." in message
