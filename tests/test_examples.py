"""Every example in examples/ runs to completion (each checks its own results)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example is a process of its own

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = [
    ("quickstart.py", [], "3 batches against a resident weight OK"),
    ("explicit_dispatch.py", [], "hot loop of 3 launches OK"),
    ("pipelined.py", ["--batches", "6"], "overlap:"),
    ("serve_asyncio.py", ["--requests", "300", "--concurrency", "64"], "all outputs verified"),
    # A small device: most requests wait for device memory, every one succeeds.
    ("serve_asyncio.py", ["--requests", "300", "--concurrency", "256", "--device-memory", "32768"],
     "waited for device memory; all outputs verified"),
    ("serve_trio.py", ["--requests", "300", "--concurrency", "64"], "all outputs verified"),
    ("kv_cache.py", ["--steps", "4"], "scores and the final cache verified"),
    ("program.py", [], "8 tasks, 4 edges, one launch: OK"),
    ("graph_step.py", ["--steps", "5", "--layers", "16"], "eager and replayed steps match numpy: OK"),
    ("two_devices.py", ["--batches", "4"], "4 batches through two devices with a peer copy between the stages: OK"),
]


@pytest.mark.parametrize("script, args, expected", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_runs(script, args, expected, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr
