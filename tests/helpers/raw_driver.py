"""Small wrappers the driver tests share (each one a single driver call plus check)."""

from __future__ import annotations

import numpy as np

from pypto_async._driver import check, ffi, lib

NULL = ffi.NULL


def alloc(dev, size: int, stream=NULL) -> int:
    out = ffi.new("pto_devptr *")
    check(lib.pto_mem_alloc(dev, size, stream, out), "pto_mem_alloc")
    return out[0]


def free(dev, ptr: int) -> None:
    check(lib.pto_mem_free(dev, ptr), "pto_mem_free")


def mem_stats(dev):
    st = ffi.new("pto_mem_stats *")
    check(lib.pto_mem_get_stats(dev, st), "pto_mem_get_stats")
    return st


def stream_stats(s):
    st = ffi.new("pto_stream_stats *")
    check(lib.pto_stream_get_stats(s, st), "pto_stream_get_stats")
    return st


def device_stats(dev):
    st = ffi.new("pto_device_stats *")
    check(lib.pto_device_get_stats(dev, st), "pto_device_get_stats")
    return st


def info(dev):
    out = ffi.new("pto_device_info *")
    check(lib.pto_device_get_info(dev, out), "pto_device_get_info")
    return out


def h2d(s, dst: int, array: np.ndarray, token: int = 0) -> None:
    check(lib.pto_stream_copy_h2d(s, dst, ffi.from_buffer(array), array.nbytes, token), "copy_h2d")


def d2h(s, array: np.ndarray, src: int, token: int = 0) -> None:
    check(lib.pto_stream_copy_d2h(s, ffi.from_buffer(array), src, array.nbytes, token), "copy_d2h")


def notify(s, token: int) -> None:
    check(lib.pto_stream_notify(s, token), "pto_stream_notify")


def sync(s, timeout_s: float = 10.0) -> None:
    check(lib.pto_stream_synchronize(s, int(timeout_s * 1e6)), "pto_stream_synchronize")


def builtin(dev, name: str):
    out = ffi.new("pto_kernel **")
    check(lib.pto_kernel_builtin(dev, name.encode(), out), "pto_kernel_builtin")
    return out[0]


def launch(s, kernel, blocks: int, args, token: int = 0) -> None:
    a = ffi.new("uint64_t[]", [int(x) for x in args]) if args else ffi.NULL
    check(lib.pto_stream_launch(s, kernel, blocks, a, len(args), token), "pto_stream_launch")


def f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def new_event(dev):
    out = ffi.new("pto_event **")
    check(lib.pto_event_create(dev, out), "pto_event_create")
    return out[0]
