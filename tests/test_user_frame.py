"""The user's frame (pypto_async/_user_frame.py): the one rule error locations, scopes and warnings share."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import _user_frame
from pypto_async._user_frame import PACKAGE_DIR, user_frame, user_stacklevel
from pypto_async.errors import PtoCompileError
from pypto_async.language import _annotations, _tracer
from pypto_async.runtime import _sanitizer, _wait

from helpers.located import next_line

# Code that Python believes comes from a file of the package: each function calls `callback` from "inside".
_INSIDE = """
def through(callback):
    return callback()

def frame_of_user():
    return user_frame(sys._getframe())

def warn_at_user():
    warnings.warn("from inside", UserWarning, stacklevel=user_stacklevel())
"""


def _module_at(path: str) -> dict:
    ns = {"sys": sys, "warnings": warnings, "user_frame": user_frame, "user_stacklevel": user_stacklevel}
    exec(compile(_INSIDE, path, "exec"), ns)
    return ns


inside = _module_at(PACKAGE_DIR + "_fake_inside.py")
beside = _module_at(PACKAGE_DIR.rstrip("/") + "_plugin/mod.py")  # pypto_async_plugin/ is not the package


def test_the_package_directory_is_this_package():
    assert PACKAGE_DIR == pl.__file__.rsplit("language", 1)[0]
    assert PACKAGE_DIR.endswith("pypto_async/")


def test_user_frame_skips_the_package_frames_and_stops_at_the_caller():
    here = sys._getframe()
    assert inside["frame_of_user"]() is here
    assert inside["through"](inside["frame_of_user"]) is here  # several package frames deep


def test_a_frame_outside_the_package_is_returned_as_it_is():
    here = sys._getframe()
    assert user_frame(here) is here
    assert user_frame(None) is None


def test_a_directory_whose_name_starts_with_the_package_name_is_user_code():
    frame = beside["frame_of_user"]()
    assert frame.f_code.co_filename.endswith("pypto_async_plugin/mod.py")


def test_user_stacklevel_points_a_warning_at_the_user_line():
    with pytest.warns(UserWarning, match="from inside") as rec:
        line = next_line()
        inside["through"](inside["warn_at_user"])
    assert (rec[0].filename, rec[0].lineno) == (__file__, line)


def test_every_reader_of_the_user_frame_uses_the_one_helper():
    # The rule is written once: the modules that name the user's frame import it, none keeps its own prefix.
    for module in (_annotations, _tracer, _sanitizer):
        assert module.user_frame is _user_frame.user_frame
    assert _wait.user_stacklevel is _user_frame.user_stacklevel
    for module in (_annotations, _tracer, _sanitizer, _wait):
        assert not {"_PACKAGE", "_PKG_DIR", "_PACKAGE_DIR"} & set(vars(module))


def test_user_loc_names_the_caller_through_package_frames():
    line = next_line()
    loc = inside["through"](_tracer.user_loc)
    assert (loc.file, loc.line) == (__file__, line)


def test_a_kernel_error_and_a_kernel_annotation_scope_both_name_the_defining_function():
    rows = 16  # a local of this function that the (string, see the module's __future__ import) annotation names

    @pl.jit
    def kernel(a: pl.Tensor[[rows, 16], pl.FP32], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.load(a, [0, 0], [rows, 17]), [0, 0], out)
        return out

    assert kernel._scope == {"rows": 16}
    with pytest.raises(PtoCompileError) as excinfo:
        kernel.lower(np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32))
    load_line = kernel.fn.__code__.co_firstlineno + 3  # the pl.load line (the first line is the decorator)
    assert (excinfo.value.file, excinfo.value.line) == (__file__, load_line)
