"""Finding the user's frame: the innermost caller whose code is not pypto_async's.

Error locations (a kernel statement's ``file:line``), the scope a decorator
reads string annotations from, the sanitizer's call sites and the
``stacklevel`` of a warning all name the same frame: walking outward from
where the package was entered, the first frame whose code file lies outside
this package's directory.  This module is the one place that rule is written.

A file's path is compared as Python recorded it when it compiled the code
(``co_filename``, the path the module was imported by), against this package's
directory spelt the same way (``__file__``, not resolved through symlinks), so
an install reached through a symlink still recognises its own frames.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

__all__ = ["PACKAGE_DIR", "in_package", "user_frame", "user_stacklevel"]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""This package's directory, with a trailing separator (``pypto_async_x/`` is not inside it)."""


def in_package(frame: FrameType) -> bool:
    """Whether `frame` runs code from a file of this package."""
    return frame.f_code.co_filename.startswith(PACKAGE_DIR)


def user_frame(frame: FrameType | None) -> FrameType | None:
    """Return `frame`, or the first frame outward from it whose code is outside pypto_async.

    Returns None when every frame up to the outermost one is the package's
    (a driver-thread or interpreter-shutdown call with no user code on the
    stack).
    """
    while frame is not None and in_package(frame):
        frame = frame.f_back
    return frame


def user_stacklevel() -> int:
    """Return the ``stacklevel`` that points a warning issued by your caller at the user's frame.

    Pass it straight to :func:`warnings.warn` from the function that calls
    this one (level 1 is that function itself).  When no frame is outside the
    package the level points past the outermost frame, where ``warnings``
    reports ``sys``.
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None and in_package(frame):
        frame = frame.f_back
        level += 1
    return level
