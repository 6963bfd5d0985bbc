"""pypto_async.set_log_level / get_log_level / LogLevel: PyPTO's log threshold, on pypto_async's loggers."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pypto_async
from pypto_async import LogLevel, PtoArgumentError, PtoError, PtoTypeError, get_log_level, set_log_level
from pypto_async.ir._perf_hints import write_perf_hints

ROOT = Path(__file__).resolve().parent.parent
HINTS = ["[perf_hint PH001] TileInnermostDimGranularity: a hint at kernel.py:9"]


@pytest.fixture(autouse=True)
def _restore_level():
    # The threshold is process-wide: put the logger back exactly as it was (NOTSET included).
    logger = logging.getLogger("pypto_async")
    saved = logger.level
    yield
    logger.setLevel(saved)


def test_levels_have_pypto_names_and_values():
    assert [(m.name, int(m)) for m in LogLevel] == [
        ("DEBUG", 0), ("INFO", 1), ("WARN", 2), ("ERROR", 3), ("FATAL", 4), ("EVENT", 5), ("NONE", 6)]
    assert pypto_async.LogLevel is LogLevel
    assert {"LogLevel", "set_log_level", "get_log_level"} <= set(pypto_async.__all__)


def test_set_then_get_round_trips_every_level():
    for level in reversed(list(LogLevel)):
        set_log_level(level)
        got = get_log_level()
        assert got is level, (level, got)


def test_an_int_value_is_taken_as_its_level():
    set_log_level(3)
    assert get_log_level() is LogLevel.ERROR
    set_log_level(LogLevel(0))
    assert get_log_level() is LogLevel.DEBUG


def test_save_restore_pair():
    set_log_level(LogLevel.INFO)
    saved = get_log_level()
    set_log_level(LogLevel.NONE)
    set_log_level(saved)
    assert get_log_level() is LogLevel.INFO
    assert logging.getLogger("pypto_async.ir").getEffectiveLevel() == logging.INFO


def test_get_reads_logging_configuration_when_never_set():
    logger = logging.getLogger("pypto_async")
    logger.setLevel(logging.NOTSET)  # inherit: Python's root logger decides
    root = logging.getLogger()
    saved = root.level
    try:
        root.setLevel(logging.WARNING)
        assert get_log_level() is LogLevel.WARN
        root.setLevel(logging.DEBUG)
        assert get_log_level() is LogLevel.DEBUG
        logger.setLevel(25)  # between INFO and WARNING: INFO is dropped, WARN passes
        assert get_log_level() is LogLevel.WARN
        logger.setLevel(logging.CRITICAL + 40)
        assert get_log_level() is LogLevel.NONE
    finally:
        root.setLevel(saved)


def _emit(tmp_path):
    """Make the compiler's real perf-hint logging run: an unwritable target logs a WARNING, then the hints at INFO."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    assert write_perf_hints(blocker, HINTS) is None


def _seen(caplog):
    return [(r.name, r.levelno) for r in caplog.records]


@pytest.mark.parametrize(("level", "expected"), [
    (LogLevel.DEBUG, [logging.WARNING, logging.INFO]),
    (LogLevel.INFO, [logging.WARNING, logging.INFO]),
    (LogLevel.WARN, [logging.WARNING]),
    (LogLevel.ERROR, []),
    (LogLevel.FATAL, []),
    (LogLevel.EVENT, []),
    (LogLevel.NONE, []),
])
def test_threshold_decides_what_the_compiler_logs(level, expected, tmp_path, caplog):
    caplog.set_level(logging.NOTSET)  # the capture handler takes everything: only our threshold filters
    set_log_level(level)
    _emit(tmp_path)
    assert _seen(caplog) == [("pypto_async.ir", n) for n in expected]
    if logging.INFO in expected:
        assert HINTS[0] in caplog.text


def test_summary_line_reaches_the_log_at_info(tmp_path, caplog):
    caplog.set_level(logging.NOTSET)
    set_log_level(LogLevel.INFO)
    assert write_perf_hints(tmp_path, HINTS) is not None
    assert [r.getMessage() for r in caplog.records] == [
        f"[perf_hint] 1 hint across 1 site; see {tmp_path / 'report' / 'perf_hints.log'}"]
    caplog.clear()
    set_log_level(LogLevel.WARN)
    write_perf_hints(tmp_path, HINTS)
    assert caplog.records == []


@pytest.mark.parametrize("bad", ["warn", "WARN", 2.0, None, True, LogLevel, [LogLevel.WARN]])
def test_a_non_level_type_is_a_type_error(bad):
    set_log_level(LogLevel.ERROR)
    with pytest.raises(PtoTypeError, match="takes a LogLevel") as info:
        set_log_level(bad)
    assert isinstance(info.value, TypeError) and isinstance(info.value, PtoError)
    assert get_log_level() is LogLevel.ERROR  # refused before anything changed


@pytest.mark.parametrize("bad", [-1, 7, logging.WARNING])
def test_an_int_that_is_no_level_is_a_value_error(bad):
    set_log_level(LogLevel.INFO)
    with pytest.raises(PtoArgumentError, match="is no LogLevel") as info:
        set_log_level(bad)
    assert isinstance(info.value, ValueError) and not isinstance(info.value, TypeError)
    assert get_log_level() is LogLevel.INFO


def _level_in_child(env_value):
    env = {k: v for k, v in os.environ.items() if k != "PYPTO_LOG_LEVEL"}
    if env_value is not None:
        env["PYPTO_LOG_LEVEL"] = env_value
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", "import pypto_async as p; print(p.get_log_level().name)"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.slow
def test_environment_variable_sets_the_starting_level():
    assert _level_in_child("Error") == "ERROR"  # any case, as PyPTO's
    assert _level_in_child("debug") == "DEBUG"
    assert _level_in_child("loud") == "WARN"  # not a level: ignored, logging's default stands
    assert _level_in_child(None) == "WARN"
