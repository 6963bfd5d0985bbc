"""Compile errors located at the user's line: the two helpers the language tests share."""

from __future__ import annotations

import sys

__all__ = ["next_line", "assert_at"]


def next_line() -> int:
    """The line number after the caller's line."""
    return sys._getframe(1).f_lineno + 1


def assert_at(excinfo, line: int, *fragments: str) -> None:
    """Assert that the raised compile error names the caller's file at `line`, and says each fragment."""
    here = sys._getframe(1).f_code.co_filename
    err = excinfo.value
    assert (err.file, err.line) == (here, line), (err.file, err.line, str(err))
    for f in fragments:
        assert f in str(err), (f, str(err))
