"""The conftest of PyPTO's system tests (``tests/st``) as run on pypto_async by benchmarks/pypto_st.py.

* PyPTO's command-line options are accepted (most change nothing on the simulator);
* the fixtures the tests take: ``test_config`` (the session's RunConfig), ``test_runner``
  (harness.core.test_runner.TestRunner), ``device_ids``, ``optimization_strategy``, ``tensor_shape``;
* a test PyPTO runs on a board only is skipped: parametrized over ``ONBOARD_PLATFORMS``, or marked
  ``@pytest.mark.platforms(...)`` with no simulator id in PyPTO's own file (read from
  ``$PYPTO_ST_SOURCE``, the checkout's ``tests/st``, since the copy here reads ``"sim"`` for every id);
* with ``$PYPTO_ST_RESULTS`` set, every test's outcome (and a failure's first error) is appended
  there as a JSON line as it happens, so a file that runs past its time limit keeps what finished.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

_ST_DIR = Path(__file__).resolve().parent
for _p in (_ST_DIR, _ST_DIR.parent.parent):  # harness/, and the root holding examples/ and tests/
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness.core.harness import ONBOARD_ONLY  # noqa: E402
from harness.core.test_runner import TestRunner  # noqa: E402

from pypto_async.ir.pass_manager import OptimizationStrategy  # noqa: E402
from pypto_async.runtime import RunConfig  # noqa: E402

_SIM_IDS = {"a2a3sim", "a5sim"}

_FLAGS = ("--save-kernels", "--dump-passes", "--codegen-only", "--execute-via-task-submit",
          "--analyze-auto-scopes-for-deps", "--enable-dep-gen", "--enable-scope-stats", "--enable-l2-swimlane")
_VALUES = {"--platform": "sim", "--device": "0", "--strategy": "Default", "--memory-planner": "default",
           "--kernels-dir": None, "--precompile-workers": None, "--task-max-time": "600",
           "--task-queue-timeout": "1800", "--task-submit-device": "auto", "--execute-batch-size": "64",
           "--pypto-log-level": "ERROR", "--runtime-log-level": None, "--chip-swimlane-level": None}


def pytest_addoption(parser):
    for flag in _FLAGS:
        parser.addoption(flag, action="store_true", default=False, help="PyPTO's option (accepted)")
    for opt, default in _VALUES.items():
        parser.addoption(opt, action="store", default=default, help="PyPTO's option (accepted)")
    parser.addoption("--enable-chip-swimlane", action="store_const", const=4, default=0, help="PyPTO's option")
    for opt in ("--dump-args", "--enable-pmu"):
        parser.addoption(opt, nargs="?", type=int, const=1, default=0, help="PyPTO's option (accepted)")


def pytest_configure(config):
    for marker in ("platforms(*ids): PyPTO's platform allowlist", "slow: PyPTO's slow tests",
                   "device_batch: PyPTO's batched-execution tests"):
        config.addinivalue_line("markers", marker)


def _devices(raw: str) -> list[int]:
    out: list[int] = []
    for tok in str(raw).split(","):
        lo, _, hi = tok.strip().partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return list(dict.fromkeys(out))


@pytest.fixture(scope="session")
def test_config(request) -> RunConfig:
    return RunConfig(platform="sim", device_id=_devices(request.config.getoption("--device"))[0])


@pytest.fixture(scope="session")
def test_runner(test_config) -> TestRunner:
    return TestRunner(test_config)


@pytest.fixture(scope="session")
def device_ids(request) -> list[int]:
    return _devices(request.config.getoption("--device"))


@pytest.fixture
def optimization_strategy(request) -> str:
    return OptimizationStrategy.Default.value


@pytest.fixture(params=[(64, 64), (128, 128), (256, 256)])
def tensor_shape(request):
    return list(request.param)


# --- onboard-only tests, by PyPTO's own platforms markers --------------------------------------------

_trees: dict[Path, ast.Module | None] = {}


def _original(path: Path) -> ast.Module | None:
    if path not in _trees:
        source = os.environ.get("PYPTO_ST_SOURCE")
        try:
            _trees[path] = ast.parse((Path(source) / path.relative_to(_ST_DIR)).read_text()) if source else None
        except (OSError, ValueError, SyntaxError):
            _trees[path] = None
    return _trees[path]


def _marked_ids(decorators) -> list[str] | None:
    for d in decorators:
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "platforms":
            return [a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return None


def _pypto_platforms(item) -> list[str] | None:
    """The ids of the closest ``platforms`` marker on the item in PyPTO's file (function, class, module)."""
    tree = _original(Path(item.path))
    if tree is None:
        return None
    scope, chain = tree.body, []
    if item.cls is not None:
        cls = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == item.cls.__name__), None)
        if cls is None:
            return None
        chain.append(cls.decorator_list)
        scope = cls.body
    name = getattr(item, "originalname", item.name)
    fn = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)
    if fn is not None:
        chain.insert(0, fn.decorator_list)
    for decorators in chain:
        ids = _marked_ids(decorators)
        if ids is not None:
            return ids
    for node in tree.body:  # pytestmark = pytest.mark.platforms(...)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            ids = _marked_ids(values)
            if ids is not None:
                return ids
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        ids = _pypto_platforms(item)
        if ids is not None and not _SIM_IDS & set(ids):
            item.add_marker(pytest.mark.skip(reason=ONBOARD_ONLY))


# --- results, one JSON line per test as it finishes -------------------------------------------------


def _message(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return str(longrepr or "").strip().splitlines()[-1] if longrepr else ""


def _record(entry: dict) -> None:
    path = os.environ.get("PYPTO_ST_RESULTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _record({"test": report.nodeid, "when": report.when, "outcome": report.outcome,
                 "message": _message(report) if report.outcome != "passed" else ""})


def pytest_collectreport(report):
    if report.outcome == "failed":
        _record({"test": report.nodeid, "when": "collect", "outcome": "failed", "message": _message(report)})
