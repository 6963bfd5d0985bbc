"""pypto_async._driver: the status funnel (check, error_for_status, device_config)."""

from __future__ import annotations

import pytest

from pypto_async import _driver as drv
from pypto_async.errors import (
    PtoArgumentError,
    PtoCanceledError,
    PtoClosedError,
    PtoCopyFault,
    PtoDependencyError,
    PtoDeviceLost,
    PtoError,
    PtoKernelFault,
    PtoLoadError,
    PtoNotSupported,
    PtoOutOfMemory,
    PtoTimeout,
    PtoTryAgain,
)

EXPECTED = {
    drv.PTO_EAGAIN: (PtoTryAgain, "PTO_EAGAIN"),
    drv.PTO_ENOMEM: (PtoOutOfMemory, "PTO_ENOMEM"),
    drv.PTO_EINVAL: (PtoArgumentError, "PTO_EINVAL"),
    drv.PTO_EKERNEL: (PtoKernelFault, "PTO_EKERNEL"),
    drv.PTO_EDEP: (PtoDependencyError, "PTO_EDEP"),
    drv.PTO_EDEVLOST: (PtoDeviceLost, "PTO_EDEVLOST"),
    drv.PTO_ECLOSED: (PtoClosedError, "PTO_ECLOSED"),
    drv.PTO_ETIMEDOUT: (PtoTimeout, "PTO_ETIMEDOUT"),
    drv.PTO_ECANCELED: (PtoCanceledError, "PTO_ECANCELED"),
    drv.PTO_EFAULT: (PtoCopyFault, "PTO_EFAULT"),
    drv.PTO_ELOAD: (PtoLoadError, "PTO_ELOAD"),
    drv.PTO_ENOTSUP: (PtoNotSupported, "PTO_ENOTSUP"),
}


def test_abi_version():
    assert drv.PTO_ABI_VERSION == 3


def test_nop_and_clock():
    assert drv.lib.pto_nop() == 0
    a = drv.lib.pto_now_ns()
    b = drv.lib.pto_now_ns()
    assert 0 < a <= b


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_status_name_accepts_code_and_negation(code):
    assert drv.status_name(code) == EXPECTED[code][1]
    assert drv.status_name(-code) == EXPECTED[code][1]


def test_status_name_ok():
    assert drv.status_name(0) == "PTO_OK"


def test_check_passes_non_negative_through():
    assert drv.check(0) == 0
    assert drv.check(17, "count") == 17


def test_check_raises_with_last_error_text():
    # A real failing call sets the thread-local text that check() reports.
    out = drv.ffi.new("pto_device **")
    rc = drv.lib.pto_device_open(b"no-such-platform", drv.ffi.NULL, out)
    assert rc == -drv.PTO_ENOTSUP
    text = drv.last_error()
    assert text, "pto_last_error() is empty after a failing call"
    with pytest.raises(PtoNotSupported) as info:
        drv.check(rc, "pto_device_open")
    assert info.value.status == "PTO_ENOTSUP"
    msg = str(info.value)
    assert msg.startswith("pto_device_open: ")
    assert text in msg and "[PTO_ENOTSUP]" in msg


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_error_for_status_classes(code):
    cls, name = EXPECTED[code]
    exc = drv.error_for_status(-code, "it broke")
    assert type(exc) is cls
    assert exc.status == name
    assert str(exc) == f"it broke [{name}]"
    assert exc.__cause__ is None


def test_error_for_status_dependency_links_first_failure():
    first = drv.error_for_status(-drv.PTO_EKERNEL, b"kernel said no")
    dep = drv.error_for_status(-drv.PTO_EDEP, "", cause=first, cause_token=0x42)
    assert isinstance(dep, PtoDependencyError)
    assert dep.cause_token == 0x42
    assert dep.__cause__ is first
    assert str(first) == "kernel said no [PTO_EKERNEL]"
    assert str(dep) == "PTO_EDEP"


def test_error_for_status_refuses_success_and_tolerates_unknown():
    with pytest.raises(ValueError):
        drv.error_for_status(0, "")
    exc = drv.error_for_status(-999, "odd")
    assert type(exc) is PtoError


def test_error_classes_table_matches_header():
    assert drv.ERROR_CLASSES[0] is None
    for code, (cls, _) in EXPECTED.items():
        assert drv.ERROR_CLASSES[code] is cls


def test_device_config_defaults_and_fields():
    cfg = drv.device_config(cores=3, trace=True, device_memory=1 << 24)
    assert (cfg.cores, cfg.trace, cfg.device_memory) == (3, 1, 1 << 24)
    ref = drv.ffi.new("pto_device_config *")
    drv.lib.pto_device_config_init(ref)
    assert cfg.copy_engines == ref.copy_engines
    assert cfg.ring_task_window == ref.ring_task_window


def test_device_config_rejects_unknown_and_bad_values():
    with pytest.raises(PtoArgumentError, match="unknown device config field 'corez'"):
        drv.device_config(corez=1)
    with pytest.raises(PtoArgumentError, match="must be an int"):
        drv.device_config(cores=-1)
    with pytest.raises(PtoArgumentError, match="must be an int"):
        drv.device_config(cores=1.5)
    with pytest.raises(PtoArgumentError, match="does not fit"):
        drv.device_config(cores=1 << 40)
    with pytest.raises(PtoArgumentError):
        drv.device_config(reserved=1)
