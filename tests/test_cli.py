"""The ``pypto-async`` command (_cli.py): every subcommand, its --help and its errors.

Subcommands run in-process through ``main(argv)``; one test runs
``python -m pypto_async`` in a subprocess to keep that entry point working.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pypto_async._cli import main

ROOT = Path(__file__).resolve().parents[1]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUBCOMMANDS = ["demo", "bench", "trace", "info", "cache"]


def pipeline_trace() -> dict:
    from runtime.test_trace import pipeline_records

    from pypto_async.runtime._trace import Trace

    trace = Trace(tuple(pipeline_records()), device={"platform": "sim", "cores": 2, "copy_engines": 2})
    return trace.to_chrome()


def assert_png(path, min_bytes=5_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, "not a PNG"
    assert len(data) >= min_bytes, f"suspiciously small PNG ({len(data)} bytes)"
    # IHDR: width and height are big-endian u32 at bytes 16..24.
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 600 and height >= 200


@pytest.mark.parametrize("cmd", [[], *([c] for c in SUBCOMMANDS)])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: pypto-async")
    if not cmd:
        for c in SUBCOMMANDS:
            assert c in out


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--batches", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "positive integer" in err and err.startswith("pypto-async demo: error:")
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_trace_renders_png(tmp_path, capsys):
    src = tmp_path / "t.json"
    src.write_text(json.dumps(pipeline_trace()))
    out = tmp_path / "pics" / "t.png"
    assert main(["trace", str(src), "-o", str(out)]) == 0
    assert_png(out)
    assert str(out) in capsys.readouterr().out
    # The default output sits next to the input.
    assert main(["trace", str(src)]) == 0
    assert_png(tmp_path / "t.png")


def test_trace_errors_are_one_line(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pypto-async trace: error: no such trace file") and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["trace", str(bad)]) == 1
    assert "not JSON" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    assert main(["trace", str(empty)]) == 1
    assert "no slices" in capsys.readouterr().err
    assert not (tmp_path / "empty.png").exists()


DEEP = 100_000


@pytest.mark.parametrize("text", [
    "[" * DEEP + "]" * DEEP,
    '{"traceEvents": [' + "[" * DEEP + "]" * DEEP + "]}",
    '{"traceEvents": [{"ph": "X", "args": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}]}",
], ids=["top level", "in traceEvents", "in an event's args"])
@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
def test_trace_of_deeply_nested_json_is_a_one_line_error(tmp_path, text):
    """The command as a user runs it: one line on stderr, status 1, no traceback."""
    src = tmp_path / "deep.json"
    src.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYPTO_ASYNC_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "pypto_async", "trace", str(src)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("pypto-async trace: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "nested too deeply" in res.stderr
    assert not (tmp_path / "deep.png").exists()


@pytest.mark.slow
def test_render_lanes_and_failures(tmp_path):
    from pypto_async._plot import _lanes, render_trace
    from pypto_async.runtime._chrome import layout
    from pypto_async.runtime._trace import Trace

    doc = pipeline_trace()
    names = [t.name for t in _lanes(layout(Trace.from_chrome(doc)))]
    assert names == ["stream 1", "stream 2", "stream 3", "core 0", "core 1", "copy engine 0", "copy engine 1"]
    # A failed slice gets drawn too (outlined): rendering must not choke on it.
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "launch":
            e["args"]["status"] = "PTO_EKERNEL"
            break
    assert_png(render_trace(doc, tmp_path / "f.png"))


@pytest.mark.slow
def test_render_reads_through_the_trace_model(tmp_path):
    from runtime.test_trace import CORES, pipeline_records, rec

    from pypto_async import _driver as drv
    from pypto_async._plot import _lanes, _overlap_line, render_trace
    from pypto_async.runtime._chrome import layout
    from pypto_async.runtime._trace import Trace

    # Batch 1's H2D moved under batch 0's kernel: 40 µs of copy hide under compute.
    records = [r for r in pipeline_records() if not (r.kind == drv.PTO_CMD_H2D and r.token == 11)]
    records.append(rec(drv.PTO_CMD_H2D, 1, 50, 90, engine=CORES, name="h2d", nbytes=4096, token=11))
    trace = Trace(tuple(records), device={"platform": "sim", "cores": 2, "copy_engines": 2})
    doc = json.loads(json.dumps(trace.to_chrome()))
    # The title's overlap is the trace's own summary, read back from the JSON.
    assert _overlap_line(Trace.from_chrome(doc).summary()) == _overlap_line(trace.summary()) == (
        "compute busy 116 µs · copy busy 140 µs · overlapped 40 µs (34% of the shorter)")
    assert _overlap_line(Trace(tuple(r for r in records if r.kind != drv.PTO_CMD_BLOCK)).summary()) is None
    # Lane kinds come from the tracks' tids, whatever the labels say.
    lanes = _lanes(layout(Trace.from_chrome(doc)))
    assert [t.kind for t in lanes] == ["stream"] * 3 + ["core"] * 2 + ["copy"] * 2
    # A trace, its JSON and its file draw the same picture.
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc))
    pngs = [render_trace(trace, tmp_path / "a.png", title="t"), render_trace(doc, tmp_path / "b.png", title="t"),
            render_trace(src, tmp_path / "c.png", title="t")]
    assert_png(pngs[0])
    assert pngs[0].read_bytes() == pngs[1].read_bytes() == pngs[2].read_bytes()


@pytest.mark.slow
def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "pypto_async", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: pypto-async")


@pytest.mark.slow
def test_help_does_not_import_heavy_modules():
    code = ("import sys; from pypto_async._cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('matplotlib', 'torch', 'tqdm', 'pypto_async.runtime') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("[]")



# --- bench --------------------------------------------------------------------

_ROWS_SCRIPT = '''
import argparse, json, sys

def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    rows = [{"name": "copy bandwidth", "figure": 8.0, "unit": "GB/s", "reference": 10.0,
             "reference_name": "numpy copy", "target": ">= 0.5x numpy", "ok": True},
            {"name": "launch", "figure": 30.0 if a.quick else 20.0, "unit": "us", "target": "<= 25 us",
             "ok": False}]
    json.dump({"rows": rows}, open(a.json, "w"))
    return 0

if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.mark.slow
def test_bench_table_missing_and_failed(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_runtime.py").write_text(_ROWS_SCRIPT)
    (bench / "bench_extra.py").write_text("import sys\nprint('boom: no device', file=sys.stderr)\nsys.exit(3)\n")
    out = tmp_path / "res" / "bench.json"
    rc = main(["bench", "--dir", str(bench), "--json", str(out), "--no-progress", "--quick"])
    assert rc == 1  # bench_extra failed
    text = capsys.readouterr().out
    assert "copy bandwidth" in text and "0.80x" in text and "numpy copy" in text
    assert "MISSED" in text  # the quick run's 30 us misses its 25 us target
    for name in ("bench_driver", "bench_kernels", "bench_compile"):
        assert f"{name}: MISSING" in text
    assert "bench_extra: FAILED" in text and "boom: no device" in text
    doc = json.loads(out.read_text())
    b = doc["benchmarks"]
    assert b["bench_runtime"]["status"] == "ok"
    assert [r["figure"] for r in b["bench_runtime"]["rows"]] == [8.0, 30.0]
    assert b["bench_runtime"]["rows"][0]["ratio"] == pytest.approx(0.8)
    assert b["bench_driver"]["status"] == "missing" and b["bench_driver"]["rows"] == []
    assert b["bench_extra"]["status"] == "failed"
    assert doc["quick"] is True


def test_bench_only_and_unknown(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_runtime.py").write_text(_ROWS_SCRIPT)
    out = tmp_path / "bench.json"
    assert main(["bench", "--dir", str(bench), "--json", str(out), "--no-progress",
                 "--only", "bench_runtime"]) == 0
    assert list(json.loads(out.read_text())["benchmarks"]) == ["bench_runtime"]
    capsys.readouterr()
    assert main(["bench", "--dir", str(bench), "--only", "bench_nothing", "--no-progress"]) == 1
    assert "unknown benchmark 'bench_nothing'" in capsys.readouterr().err
    assert main(["bench", "--dir", str(tmp_path / "nowhere"), "--no-progress"]) == 1
    assert "no benchmarks directory" in capsys.readouterr().err


# --- info and cache -----------------------------------------------------------------


def test_info_table_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for key in ("platform", "device", "compiler", "kernel cache"):
        assert key in out
    assert str(tmp_path / "cache") in out
    assert "sim (aliases: a2a3sim, a5sim)" in out  # from the platform table
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    from pypto_async._driver import ffi, lib

    dev = ffi.new("pto_device **")
    assert lib.pto_device_open(b"sim", ffi.NULL, dev) == 0
    want = ffi.new("pto_device_info *")
    lib.pto_device_get_info(dev[0], want)
    lib.pto_device_close(dev[0])
    assert info["device"]["platform"] == "sim"
    assert (info["device"]["cores"], info["device"]["copy_engines"]) == (want.cores, want.copy_engines)
    assert info["device"]["device_memory"] == want.device_memory
    assert info["cache"] == {"dir": str(tmp_path / "cache"), "entries": 0, "bytes": 0}
    assert info["compiler"]["version"] and "-shared" in info["compiler"]["flags"]


def test_info_unknown_platform_is_one_line(capsys):
    assert main(["info", "--platform", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PTO_ENOTSUP" in err and "nosuch" in err


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(cache))
    for key in ("a1", "b2"):
        (cache / "kernels" / key).mkdir(parents=True)
        (cache / "kernels" / key / "kernel.so").write_bytes(b"\0" * 2048)
    assert main(["cache"]) == 0
    assert f"{cache} (2 kernels, 4.0 KiB)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 cached kernels" in capsys.readouterr().out
    assert not any((cache / "kernels").iterdir())
    assert main(["cache", "info"]) == 0
    assert "(0 kernels" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_runs_the_real_driver_benchmark(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--only", "bench_driver", "--quick", "--json", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "pto_stream_notify" in text and "pto_nop" in text
    entry = json.loads(out.read_text())["benchmarks"]["bench_driver"]
    assert entry["status"] == "ok"
    submit = entry["rows"][0]
    assert submit["figure"] > 0 and submit["reference"] > 0
    assert submit["ratio"] == pytest.approx(submit["figure"] / submit["reference"])


# --- demo -------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_runs_the_pipeline_and_writes_its_trace(tmp_path, capsys):
    from runtime.test_trace import check_chrome_trace

    out_dir = tmp_path / "demo"
    assert main(["demo", "--batches", "6", "--rows", "64", "--cols", "256", "--depth", "2",
                 "--out", str(out_dir), "--no-progress"]) == 0
    text = capsys.readouterr().out
    trace_json, png = out_dir / "demo_trace.json", out_dir / "demo_trace.png"
    assert f"trace: {trace_json}" in text and f"swimlane: {png}" in text
    assert "6 batches of 64x256" in text and "speed-up" in text and "overlap" in text
    assert "matched numpy" in text
    doc = json.loads(trace_json.read_text())
    check_chrome_trace(doc)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    lanes = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sum(e["cat"] == "launch" for e in xs) == 6  # the pipelined batches only
    assert sum(e["cat"] == "h2d" and e["tid"] < 100_000 for e in xs) == 6
    assert sum(e["cat"] == "d2h" and e["tid"] < 100_000 for e in xs) == 6
    launch_tids = {e["tid"] for e in xs if e["cat"] == "launch"}
    copy_tids = {e["tid"] for e in xs if e["cat"] in ("h2d", "d2h") and e["tid"] < 100_000}
    assert len(launch_tids) == 1 and len(copy_tids) == 2 and not launch_tids & copy_tids  # three streams
    assert {"AIV 0", "copy engine 0"} <= lanes  # the modeled device's lanes (timing="model")
    assert any(name.startswith("host core") for name in lanes)  # and the host threads', in wall time
    assert any(e["ph"] == "s" for e in doc["traceEvents"])  # cross-stream waits drawn as arrows
    assert_png(png)


def test_demo_without_png(tmp_path, capsys):
    assert main(["demo", "--batches", "2", "--rows", "8", "--cols", "64", "--out", str(tmp_path),
                 "--no-progress", "--no-png"]) == 0
    assert "swimlane:" not in capsys.readouterr().out
    assert (tmp_path / "demo_trace.json").is_file() and not (tmp_path / "demo_trace.png").exists()


_STDOUT_SCRIPT = '''
import argparse, json

def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    print("warming up")
    result = {"roundtrip": {"value": 30.0 if args.quick else 20.0, "ref_raw_driver_us": 5.0},
              "overlap": {"value": 1.1}}
    if args.json:
        print(json.dumps(result))
    return result

if __name__ == "__main__":
    main()
'''


def test_bench_reads_a_script_that_prints_its_json(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_runtime.py").write_text(_STDOUT_SCRIPT)
    out = tmp_path / "bench.json"
    assert main(["bench", "--dir", str(bench), "--only", "bench_runtime", "--json", str(out),
                 "--no-progress", "--quick"]) == 0
    rows = json.loads(out.read_text())["benchmarks"]["bench_runtime"]["rows"]
    assert [(r["figure"], r["reference"], r["ok"]) for r in rows] == [(30.0, 5.0, False), (1.1, None, True)]
    assert rows[0]["ratio"] == pytest.approx(6.0)
    assert "MISSED" in capsys.readouterr().out


def test_demo_reports_a_wrong_result_in_one_line(tmp_path, capsys, monkeypatch):
    import pypto_async._demo as demo

    real = demo._silu
    monkeypatch.setattr(demo, "_silu", lambda h: real(h) + 1.0)  # numpy's answer, shifted
    assert main(["demo", "--batches", "2", "--rows", "8", "--cols", "64", "--out", str(tmp_path),
                 "--no-progress", "--no-png"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pypto-async demo: error: batch 0: the device's result differs") and err.count("\n") == 1


# --- a plain install (no extras) ---------------------------------------------------------


@pytest.mark.slow
def test_demo_runs_on_a_plain_install_and_says_how_to_get_the_png(tmp_path):
    """Without the extras (matplotlib, torch unimportable), the demo runs and names the extra."""
    from pypto_async._demo import NO_MATPLOTLIB

    code = ("import sys\n"
            "sys.modules['matplotlib'] = sys.modules['torch'] = None  # what `pip install .` lacks\n"
            "from pypto_async._cli import main\n"
            f"sys.exit(main(['demo', '--batches', '3', '--rows', '16', '--cols', '64', '--out', {str(tmp_path)!r}]))\n")
    env = {**os.environ, "PYPTO_ASYNC_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "matched numpy" in out.stdout and lines[-1] == NO_MATPLOTLIB
    assert "python3 -m pip install '.[demo]'" in NO_MATPLOTLIB and "swimlane: /" not in out.stdout
    assert (tmp_path / "demo_trace.json").is_file() and not (tmp_path / "demo_trace.png").exists()


def test_a_plain_install_has_what_the_main_job_needs():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!~\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert {"anyio", "cffi", "numpy", "tqdm"} <= core  # the demo's progress bar is no extra
    assert "matplotlib" not in core and any(d.startswith("matplotlib") for d in project["optional-dependencies"]["demo"])


@pytest.mark.slow
def test_the_subcommands_do_not_import_the_cli():
    """_demo and _bench raise CliError from its own module: no import cycle through _cli."""
    import ast

    from pypto_async import _cli, _cli_error

    assert _cli.CliError is _cli_error.CliError
    for name in ("_demo.py", "_bench.py"):
        tree = ast.parse((ROOT / "pypto_async" / name).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert "_cli" not in imported and "_cli_error" in imported, name
