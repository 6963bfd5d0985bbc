"""benchmarks/pypto_st.py: how PyPTO's system tests are staged, run and counted, and the page it writes.

The fast tests need no PyPTO checkout (a small synthetic tree in ``tmp_path``); the slow one that runs
real PyPTO files needs ``PYPTO_CHECKOUT`` and is skipped without it.
"""

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    name = "pypto_st_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "pypto_st.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up while the class is made
        spec.loader.exec_module(mod)
    return sys.modules[name]


# A PyPTO-shaped test file: a case that matches, one whose program writes the wrong value, one PyPTO runs
# on a board only (by parametrization and by marker), and a jit-style test taking test_config.
_CASES = textwrap.dedent('''\
    import pypto.language as pl
    import pytest
    import torch
    from harness.core.harness import ONBOARD_PLATFORMS, PLATFORMS, DataType, PTOTestCase, TensorSpec
    from pypto.runtime.runner import RunConfig


    def _program(scale):
        @pl.program
        class Scale:
            @pl.function(type=pl.FunctionType.InCore)
            def kernel(self, a: pl.Tensor[[16, 16], pl.FP32],
                       out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
                t: pl.Tile[[16, 16], pl.FP32] = pl.load(a, [0, 0], [16, 16])
                out = pl.store(pl.tile.muls(t, scale), [0, 0], out)
                return out

            @pl.function(type=pl.FunctionType.Orchestration)
            def orchestrator(self, a: pl.Tensor[[16, 16], pl.FP32],
                             out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]) -> pl.Tensor[[16, 16], pl.FP32]:
                out = self.kernel(a, out)
                return out
        return Scale


    class Double(PTOTestCase):
        def __init__(self, scale=2.0, **kw):
            super().__init__(RunConfig(rtol=1e-5, atol=1e-5), **kw)
            self.scale = scale

        def get_name(self):
            return f"double_{self.scale}"

        def define_tensors(self):
            return [TensorSpec("a", [16, 16], DataType.FP32, init_value=torch.randn([16, 16])),
                    TensorSpec("out", [16, 16], DataType.FP32, is_output=True)]

        def get_program(self):
            return _program(self.scale)

        def compute_expected(self, tensors, params=None):
            tensors["out"][:] = tensors["a"] * 2.0


    @pytest.mark.parametrize("platform", PLATFORMS)
    def test_matches(test_runner, platform):
        result = test_runner.run(Double(platform=platform))
        assert result.passed, result.error


    def test_mismatches(test_runner):
        result = test_runner.run(Double(3.0))
        assert result.passed, result.error


    @pytest.mark.parametrize("platform", ONBOARD_PLATFORMS)
    def test_onboard(test_runner, platform):
        raise AssertionError("never run off-board")


    @pytest.mark.platforms("a2a3")
    def test_marked_onboard(test_runner):
        raise AssertionError("never run off-board")


    @pytest.mark.platforms("a2a3", "a2a3sim")
    def test_marked_with_sim(test_config):
        assert test_config.platform == "sim"
    ''')


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "pypto"
    files = {
        "tests/st/conftest.py": "raise SystemExit('PyPTO conftest: replaced by the adapter')\n",
        "tests/st/harness/__init__.py": "raise SystemExit('PyPTO harness: replaced by the adapter')\n",
        "tests/st/runtime/conftest.py": "import pypto.language as pl  # runs, adapted\n",
        "tests/st/runtime/ops/test_cases.py": _CASES,
        "tests/st/runtime/ops/test_broken.py": "from pypto.language import frobnicate\n",
        "tests/st/runtime/ops/README.md": "not a test\n",
        "examples/__init__.py": "",
        "examples/helpers.py": "import pypto\nPLATFORM = 'a5sim'\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_test_files_are_those_under_tests_st_but_the_harness(tmp_path):
    r = _runner()
    root = _checkout(tmp_path)
    (root / "tests/st/harness/test_dtype.py").write_text("")
    assert r.test_files(root) == ["runtime/ops/test_broken.py", "runtime/ops/test_cases.py"]
    assert r.test_files(root, "runtime/ops/test_c") == ["runtime/ops/test_cases.py"]
    assert r.test_files(root, "codegen") == []


def test_staging_adapts_the_tests_and_examples_and_puts_the_adapter_in_for_the_harness(tmp_path):
    r = _runner()
    st = r.stage(_checkout(tmp_path), tmp_path / "scratch")
    assert "from pypto_async.runtime.runner import RunConfig" in (st / "runtime/ops/test_cases.py").read_text()
    assert (st / "runtime/conftest.py").read_text().startswith("import pypto_async.language as pl")
    assert (st.parent.parent / "examples/helpers.py").read_text() == 'import pypto_async as pypto\nPLATFORM = "sim"\n'
    assert (st / "runtime/ops/README.md").read_text() == "not a test\n"
    assert (st / "conftest.py").read_text() == (ROOT / "benchmarks/pypto_st_adapter/conftest.py").read_text()
    assert (st / "harness/core/harness.py").is_file() and "SystemExit" not in (st / "harness/__init__.py").read_text()


def test_each_test_is_counted_from_the_phases_reported():
    r = _runner()
    entries = [
        {"test": "f.py::test_a", "when": "call", "outcome": "passed"},
        {"test": "f.py::test_b", "when": "call", "outcome": "failed",
         "message": "AssertionError: compile: PtoCompileError: /scratch/tests/st/f.py:3: bad\nTraceback (most...)"},
        {"test": "f.py::test_c", "when": "setup", "outcome": "failed", "message": "fixture 'x' not found"},
        {"test": "f.py::test_d[a2a3]", "when": "setup", "outcome": "skipped",
         "message": "Skipped: onboard only: PyPTO ..."},
        {"test": "f.py::test_e", "when": "setup", "outcome": "skipped", "message": "Skipped: needs torch 3"},
        {"test": "f.py::test_f", "when": "call", "outcome": "failed", "message": "AssertionError: x"},
        {"test": "f.py::test_f", "when": "teardown", "outcome": "failed", "message": "teardown broke"},
    ]
    res = r.collect("f.py", entries, "/scratch")
    assert (res.passed, res.failed, res.errors, res.skipped, res.tests) == (1, 2, 1, 2, 6)
    assert [(f.test, f.outcome, f.detail) for f in res.failures] == [
        ("test_b", "failed", "compile: PtoCompileError: tests/st/f.py:3: bad"),
        ("test_c", "error", "fixture 'x' not found"),
        ("test_e", "skipped", "needs torch 3"),  # not an onboard-only skip: listed
        ("test_f", "failed", "AssertionError: x"),  # a failed body stays failed when its teardown fails too
    ]
    broken = r.collect("g.py", [{"test": "g.py", "when": "collect", "outcome": "failed",
                                 "message": "E   ImportError: cannot import name 'x'"}])
    assert (broken.errors, broken.failures[0].detail) == (1, "ImportError: cannot import name 'x'")


def test_failures_are_grouped_by_the_missing_feature_they_name():
    blocker = _runner().blocker
    assert blocker("ModuleNotFoundError: No module named 'pypto_async.runtime.runner'") == (
        "module `pypto.runtime.runner`")
    assert blocker("ImportError: cannot import name 'reset_for_testing' from 'pypto_async.backend' (x)") == (
        "`pypto.backend.reset_for_testing`")
    assert blocker("AttributeError: module 'pypto_async.language' has no attribute 'sin'") == (
        "`sin` (a name not here)")
    assert blocker("compile: ValueError: something new") == "other: compile: ValueError: something new"


def _results(r):
    return [
        r.FileResult("runtime/ops/test_a.py", 3, 1, 0, 2, [r.Failure("test_x[sim]", "failed", "mismatch: a | b")]),
        r.FileResult("runtime/ops/test_b.py", 0, 0, 1, 1, [r.Failure("(the file)", "error", "ImportError: n"),
                                                           r.Failure("test_`q`", "skipped", "needs a board")]),
        r.FileResult("codegen/test_c.py", 2, 0, 0, 0, []),
    ]


def test_the_page_round_trips_through_the_script():
    r = _runner()
    results = _results(r)
    page = r.render(results, "0123abcd")
    assert r.parse(page) == (results, "0123abcd")
    assert "**5 of 7 tests pass** (1 failed, 1 errors; 3 skipped; 3 files)." in page
    assert "| `runtime/ops` | 2 | 8 | 3 | 1 | 1 | 3 |" in page


def _check_counts_add_up(r, page: str) -> None:
    results, commit = r.parse(page)
    assert len(commit) == 40 and results
    assert r.render(results, commit) == page  # every row in the script's format, the counts its own
    for res in results:  # a file's listed failures are among its counts
        outcomes = [f.outcome for f in res.failures]
        assert outcomes.count("failed") == res.failed and outcomes.count("error") == res.errors
        assert outcomes.count("skipped") <= res.skipped
        assert all(f.detail for f in res.failures)
    t = r.totals(results)
    assert t["tests"] == t["passed"] + t["failed"] + t["errors"] + t["skipped"]
    grouped = page.split("## What stops the failing tests", 1)[1].split("## Per file", 1)[0]
    counts = [int(n) for n in __import__("re").findall(r"^- .* \((\d+)\): ", grouped, __import__("re").M)]
    assert sum(counts) == t["failed"] + t["errors"]


def test_the_committed_page_is_what_the_script_writes_and_its_counts_add_up():
    r = _runner()
    _check_counts_add_up(r, (ROOT / "docs" / "pypto_st.md").read_text())


@pytest.mark.slow  # two pytest children, a kernel build each
def test_the_adapter_runs_a_pypto_shaped_file_as_pypto_harness_would(tmp_path):
    r = _runner()
    root = _checkout(tmp_path)
    results = {res.name: res for res in r.run_all(root, r.test_files(root), ROOT, timeout=300, jobs=2)}
    cases, broken = results["runtime/ops/test_cases.py"], results["runtime/ops/test_broken.py"]
    assert (cases.passed, cases.failed, cases.errors, cases.skipped) == (2, 1, 0, 3)
    [failure] = cases.failures
    assert failure.test == "test_mismatches" and failure.detail.startswith("mismatch: output 'out': 256 of 256")
    assert (broken.tests, broken.errors) == (1, 1) and "frobnicate" in broken.failures[0].detail


@pytest.mark.slow  # real PyPTO files: a few seconds
def test_pypto_own_small_files_run(tmp_path):
    checkout = os.environ.get("PYPTO_CHECKOUT")
    if not checkout:
        pytest.skip("PYPTO_CHECKOUT is not set: the path of a PyPTO checkout to run its tests/st files from")
    r = _runner()
    files = ["runtime/ops/test_abs.py", "runtime/ops/test_rsqrt.py", "runtime/ops/test_log.py"]
    results = r.run_all(Path(checkout), [f for f in files if (Path(checkout) / r.ST / f).is_file()], ROOT,
                        timeout=300, jobs=2)
    assert results and all(res.tests for res in results)
    page = r.render(results, "0" * 40)
    _check_counts_add_up(r, page)
    assert sum(res.passed for res in results) > 0
