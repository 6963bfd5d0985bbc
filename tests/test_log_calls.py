"""pypto_async.log_debug ... log_event and runtime.configure_log / runtime.log_level: PyPTO's logging calls.

Records are captured by a handler on the logger itself, so only the thresholds under test filter
them; bad input raises a PtoError subclass and changes nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pypto_async
from pypto_async import LogLevel, PtoArgumentError, PtoTypeError, get_log_level, set_log_level
from pypto_async.runtime import configure_log, log_level

ROOT = Path(__file__).resolve().parent.parent
CALLS = [("log_debug", logging.DEBUG, "DEBUG"), ("log_info", logging.INFO, "INFO"),
         ("log_warn", logging.WARNING, "WARNING"), ("log_error", logging.ERROR, "ERROR"),
         ("log_fatal", logging.CRITICAL, "CRITICAL"), ("log_event", logging.CRITICAL + 5, "EVENT")]


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.NOTSET)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(autouse=True)
def _restore_levels():
    loggers = [logging.getLogger(name) for name in ("pypto_async", "pypto_async.runtime")]
    saved = [lg.level for lg in loggers]
    yield
    for lg, level in zip(loggers, saved):
        lg.setLevel(level)


@pytest.fixture
def kept():
    handler = _Keep()
    logger = logging.getLogger("pypto_async")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


def _emit_all(tag):
    for name, _, _ in CALLS:
        getattr(pypto_async, name)(f"{tag} {name}")


@pytest.mark.parametrize(("threshold", "passed"), [
    (LogLevel.DEBUG, 6), (LogLevel.INFO, 5), (LogLevel.WARN, 4), (LogLevel.ERROR, 3), (LogLevel.FATAL, 2),
    (LogLevel.EVENT, 1), (LogLevel.NONE, 0)])
def test_each_call_logs_at_its_level_through_the_threshold(threshold, passed, kept):
    set_log_level(threshold)
    _emit_all("m")
    want = CALLS[len(CALLS) - passed:]
    assert [(r.name, r.levelno, r.levelname, r.getMessage()) for r in kept] == [
        ("pypto_async", level, levelname, f"m {name}") for name, level, levelname in want]


def test_the_calls_are_pypto_s_names_at_the_top_level():
    names = [name for name, _, _ in CALLS]
    assert set(names) <= set(pypto_async.__all__)
    assert [getattr(pypto_async, n).__module__ for n in names] == ["pypto_async._log_level"] * 6


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["a"]])
def test_a_message_that_is_no_str_is_a_type_error(bad, kept):
    set_log_level(LogLevel.DEBUG)
    for name, _, _ in CALLS:
        with pytest.raises(PtoTypeError, match=f"{name}\\(\\) takes the message as a str"):
            getattr(pypto_async, name)(bad)
    assert kept == []


@pytest.mark.slow
def test_with_no_handler_python_prints_warn_and_above_to_stderr():
    code = "import pypto_async as p; p.set_log_level(p.LogLevel.DEBUG); p.log_info('quiet'); p.log_warn('loud')"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stderr.splitlines() == ["loud"]


# -- runtime.configure_log ---------------------------------------------------------------------


@pytest.mark.parametrize(("level", "threshold"), [
    ("debug", 10), ("INFO", 20), ("timing", 25), ("warn", 30), ("Warning", 30), ("error", 40), ("null", 60),
    (35, 35), (1, 1)])
def test_configure_log_sets_the_runtime_threshold(level, threshold):
    set_log_level(LogLevel.ERROR)
    configure_log(level)
    assert log_level() == threshold
    assert logging.getLogger("pypto_async.runtime").getEffectiveLevel() == threshold
    assert get_log_level() is LogLevel.ERROR  # the compiler's threshold is left alone


def test_zero_hands_the_runtime_threshold_back_to_set_log_level():
    configure_log("null")
    set_log_level(LogLevel.INFO)
    assert log_level() == 60
    configure_log(0)
    assert log_level() == logging.INFO
    set_log_level(LogLevel.ERROR)
    assert log_level() == logging.ERROR


@pytest.mark.parametrize(("level", "band"), [
    ("debug", LogLevel.DEBUG), (15, LogLevel.INFO), ("info", LogLevel.INFO), ("timing", LogLevel.WARN),
    ("warn", LogLevel.WARN), ("error", LogLevel.ERROR), (41, LogLevel.NONE), ("null", LogLevel.NONE)])
def test_sync_pypto_moves_the_compiler_threshold_to_the_nearest_band(level, band):
    set_log_level(LogLevel.FATAL)
    configure_log(level, sync_pypto=True)
    assert get_log_level() is band


def test_the_runtime_threshold_filters_runtime_records_and_stays_apart_from_set_log_level(kept):
    runtime_log = logging.getLogger("pypto_async.runtime.worker")
    set_log_level(LogLevel.DEBUG)
    configure_log("timing")
    runtime_log.info("dropped")
    runtime_log.log(25, "timing marker")
    pypto_async.log_info("compiler info")  # the compiler's logger is at DEBUG still
    set_log_level(LogLevel.NONE)
    runtime_log.warning("still shown")
    assert [r.getMessage() for r in kept] == ["timing marker", "compiler info", "still shown"]
    assert log_level() == 25


@pytest.mark.parametrize(("bad", "exc", "pattern"), [
    ("loud", PtoArgumentError, "'loud' is no runtime log level"), (-1, PtoArgumentError, "int >= 0"),
    (None, PtoTypeError, "takes a level name"), (True, PtoTypeError, "takes a level name"),
    (2.5, PtoTypeError, "takes a level name")])
def test_configure_log_refuses_what_is_no_level(bad, exc, pattern):
    configure_log("error")
    set_log_level(LogLevel.WARN)
    with pytest.raises(exc, match=pattern):
        configure_log(bad, sync_pypto=True)
    assert log_level() == 40 and get_log_level() is LogLevel.WARN


def _child(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYPTO_")}
    env.update(env_extra, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import warnings; warnings.simplefilter('always'); import pypto_async as p, pypto_async.runtime as r; "
            "print(r.log_level(), p.get_log_level().name)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip(), out.stderr


@pytest.mark.slow
def test_the_environment_configures_the_runtime_logger_at_import():
    assert _child({"PYPTO_RUNTIME_LOG": "info"})[0] == "20 WARN"
    assert _child({"PYPTO_RUNTIME_LOG": "debug", "PYPTO_RUNTIME_LOG_SYNC": "1"})[0] == "10 DEBUG"
    assert _child({"PYPTO_RUNTIME_LOG_SYNC": "1"})[0] == "30 WARN"  # unset: the runtime follows set_log_level
    out, err = _child({"PYPTO_RUNTIME_LOG": "loud"})
    assert out == "30 WARN" and "PYPTO_RUNTIME_LOG='loud' ignored" in err
