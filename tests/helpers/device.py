"""Open a small simulated device for a test and check it for leaks at close."""

from __future__ import annotations

from pypto_async._driver import PTO_EDEVLOST, check, device_config, ffi, lib

__all__ = ["SMALL", "close_device", "open_device"]

#: A device small enough to open in a millisecond and to exhaust on purpose.
SMALL = {"device_memory": 64 << 20, "cores": 2, "copy_engines": 2}


def open_device(platform: str = "sim", **fields: int):
    """Open a device with :data:`SMALL` overridden by `fields`; return the ``pto_device *``."""
    cfg = device_config(**{**SMALL, **fields})
    out = ffi.new("pto_device **")
    check(lib.pto_device_open(platform.encode(), cfg, out), "pto_device_open")
    return out[0]


def close_device(device, *, check_leaks: bool = True, timeout_s: float = 10.0) -> None:
    """Synchronize, assert no device memory is left allocated, and close.

    The device is closed even when the leak check fails.
    """
    try:
        if check_leaks:
            rc = lib.pto_device_synchronize(device, int(timeout_s * 1e6))
            assert rc in (0, -PTO_EDEVLOST), f"pto_device_synchronize returned {rc}"
            stats = ffi.new("pto_mem_stats *")
            check(lib.pto_mem_get_stats(device, stats), "pto_mem_get_stats")
            assert (stats.allocations, stats.in_use, stats.pending_frees) == (0, 0, 0), (
                f"device memory leaked: allocations={stats.allocations} in_use={stats.in_use} "
                f"pending_frees={stats.pending_frees}"
            )
            assert stats.reserved == 0, f"reserved={stats.reserved} after every free executed"
    finally:
        lib.pto_device_close(device)
