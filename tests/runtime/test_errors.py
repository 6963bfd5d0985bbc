"""pypto_async.errors: the documented tree matches the classes, and ``status`` means what it says."""

from __future__ import annotations

import re

from pypto_async import _driver, errors


def test_the_module_docstring_lists_every_error():
    listed = re.findall(r":class:`(Pto\w+)`", errors.__doc__)
    public = [name for name in errors.__all__ if name != "PtoError"]
    assert set(listed) - {"PtoError"} == set(public)
    for name in public:
        assert listed.count(name) == 1, name  # one bullet each


def test_status_names_the_driver_code_of_each_kind():
    known = {_driver.status_name(code) for code in range(1, 13)}
    for name in errors.__all__:
        cls = getattr(errors, name)
        exc = cls("raised by a Python-side check")
        assert exc.status is None or exc.status in known, name
    assert errors.PtoArgumentError("bad").status == "PTO_EINVAL"  # a Python-side check, not the driver
    assert errors.PtoTensorFreedError("freed").status == "PTO_ECLOSED"  # inherited from its branch
    assert errors.PtoError("x").status is None and errors.PtoCompileError("x").status is None
    assert errors.PtoError("x", status="PTO_EKERNEL").status == "PTO_EKERNEL"  # built from a driver status


def test_argument_and_compile_errors_are_value_errors_as_in_pypto():
    assert issubclass(errors.PtoArgumentError, ValueError)
    assert issubclass(errors.PtoCompileError, ValueError)  # PyPTO's compile diagnostics are ValueError
    assert not issubclass(errors.PtoKernelFault, ValueError)  # a fault on the device is not a bad value
