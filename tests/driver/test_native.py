"""Run the driver's standalone C tests under both sanitizers.

native/tests/run.sh builds native/src/*.c and every native/tests/*.c program
with -fsanitize=address,undefined (asan) or -fsanitize=thread (tsan) and runs
the multi-stream stress among them; any sanitizer report fails the run.
"""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "native" / "tests" / "run.sh"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc with sanitizers")
@pytest.mark.parametrize("mode", ["asan", "tsan"])
def test_native_suite_runs_clean_under_sanitizer(mode):
    # Under tests/reliability/run_asan.sh the sanitizer runtimes are preloaded for Python;
    # gcc and the C programs must not inherit that (LeakSanitizer would report gcc itself).
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    proc = subprocess.run(["bash", str(RUN), mode], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAIL" not in proc.stdout
