"""benchmark(): per-round device and host wall times (runtime/_benchmark.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import RunConfig, benchmark
from pypto_async.runtime._benchmark import Timings


def test_benchmark_times_every_round(kernels):
    a = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    out = np.zeros(4096, np.float32)
    result = benchmark(kernels.get("add", 4096), (a, a, out), rounds=7, warmup=1,
                       config=RunConfig(cores=1, copy_engines=1, timing="host"))
    assert result.rounds == 7 and result.name == "add"
    assert len(result.device_wall_us) == len(result.host_wall_us) == 7
    assert all(d > 0 for d in result.device_wall_us)
    # The host waits for the device: its wall time covers the device's span (on the host's clock:
    # a modeled span is the chip's, which a host running the work itself may beat).
    assert result.median("host_wall_us") >= result.median("device_wall_us")
    for field in ("device_wall_us", "host_wall_us"):
        t = getattr(result, field)
        assert t.min() <= t.median() <= t.max() and t.min() <= t.mean() <= t.max()
    assert "rounds=7" in str(result)
    np.testing.assert_array_equal(out, a + a)


def test_timings_helpers():
    t = Timings([3.0, 1.0, 2.0, 10.0])
    assert (t.min(), t.max(), t.median(), t.mean()) == (1.0, 10.0, 2.5, 4.0)


@pytest.mark.parametrize("kwargs", [{"rounds": 0}, {"warmup": -1}, {"rounds": 2.5}])
def test_benchmark_checks_its_arguments(kernels, kwargs):
    with pytest.raises(PtoArgumentError):
        benchmark(kernels.get("inc", 16), (np.zeros(16, np.float32),), **kwargs)


@pytest.mark.slow
def test_bench_runtime_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_runtime.py (figures, not timing assertions).
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "bench_runtime.py"), "--quick", "--json",
         "--only", "roundtrip,pipelined,concurrent"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    for name in ("roundtrip", "pipelined", "concurrent"):
        assert results[name]["value"] > 0
    assert results["concurrent"]["ref_asyncio_tasks_us"] > 0
    assert results["concurrent"]["ref_batched_futures_us"] > 0
    # It measures the way users run: with torch imported where torch is installed.
    try:
        import torch
    except ImportError:
        torch = None
    assert results["config"]["torch"] == (torch.__version__ if torch is not None else None)


@pytest.mark.slow
def test_bench_service_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_service.py: every round checks its outputs against numpy;
    # the figures are reported, not asserted.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "bench_service.py"), "--quick", "--json", "--requests", "80"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    for name in ("plain", "busy loop"):
        for ring in ("default_ring", "large_ring"):
            r = results[name][ring]
            assert r["req_per_s"] > 0 and 0 < r["busy_over_wall"] <= 1
    assert results["plain"]["default_ring"]["ring"] == 256 and results["plain"]["large_ring"]["ring"] == 512
    assert len(results["rows"]) == 4


@pytest.mark.slow
def test_bench_calls_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_calls.py: it checks each call shape's output against torch;
    # the ratio is reported, not asserted (timing lives in benchmarks/).
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_calls.py"), "--quick", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert [r["target"] for r in results["rows"]] == ["≤ 1.2x", "≤ 1.2x"]
    assert all(r["figure"] > 0 and r["reference"] > 0 for r in results["rows"])
    assert len(results["config"]["load_average"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(600)  # every curve, small populations: about 10 s on an idle machine
def test_bench_scale_script_runs(tmp_path):
    # A smoke run of benchmarks/bench_scale.py: every curve and figure is produced (no timing assertions).
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               PYPTO_ASYNC_CACHE_DIR=str(tmp_path / "cache"))
    # The script as it is run by hand: not under the sanitizer this session's plugin sets in the
    # environment (pto_sanitize), which put its populations on the checked path at five times the time.
    env.pop("PYPTO_ASYNC_SANITIZE", None)
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_scale.py"), "--quick", "--json", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "load average" in proc.stdout and "memory per idle stream" in proc.stdout
    res = json.loads(out.read_text())
    for name in ("launch @ idle streams", "launch @ live tensors", "launch @ live events",
                 "alloc/free @ live allocations", "compile per task"):
        assert [p for p, *_ in res[name]][:3] in ([1, 10, 100], [10, 100, 1000], [64, 128]), name
    streams, rings = res["streams open / rings allocated"]
    assert streams > 10_000 and rings < 10  # idle streams have no ring
    assert res["parallel program"]["edges"] == 0
