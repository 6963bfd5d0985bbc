"""Bad input: every public call refuses it with a clear PtoError, queues nothing, and the
worker keeps working."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from pypto_async.errors import (
    PtoArgumentError,
    PtoClosedError,
    PtoError,
    PtoForeignTensorError,
    PtoOutOfMemory,
    PtoPlatformMismatch,
    PtoTensorFreedError,
)
from pypto_async.runtime import ChipWorker, RunConfig

from .conftest import SMALL, mem_stats, stream_stats

N = 16


def _snapshot(w, streams):
    m = mem_stats(w)
    return ([stream_stats(s).submitted for s in streams], m.allocations, m.in_use, m.reserved,
            w.stats().in_flight)


@pytest.fixture
def setup(rel_kernels):
    with ChipWorker(RunConfig(**SMALL)) as w:
        s = w.stream()
        add = w.register(rel_kernels.get("add", N))
        scale = w.register(rel_kernels.get("scale", N))
        t = w.alloc_tensor((N,), np.float32, init=np.arange(N, dtype=np.float32))
        yield w, s, add, scale, t, rel_kernels
        t.close()


def _f(n=N, dtype=np.float32):
    return np.random.default_rng(n).standard_normal(n).astype(dtype)


def _read_only_torch(tmp_path, n=N):
    """A torch tensor over a read-only file mapping (torch has no writeable flag to say so)."""
    path = tmp_path / "ro.bin"
    np.arange(n, dtype=np.float32).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "the given NumPy array is not writable"
        return torch.from_numpy(np.memmap(path, np.float32, mode="r", shape=(n,)))


def _bad_calls(w, s, add, scale, t, kernels, tmp_path):
    """(description, call, error class, words the message must contain)."""
    other = ChipWorker(RunConfig(**SMALL))
    inc = w.register(kernels.get("inc", N))
    ro_torch = _read_only_torch(tmp_path)
    big_endian = _f().astype(">f4")
    foreign = other.alloc_tensor((N,), np.float32)
    freed = w.alloc_tensor((N,), np.float32)
    freed.free()
    w.default_stream.sync()  # let the free execute: snapshots below must be steady
    out = np.zeros(N, np.float32)
    arm = kernels.get("add", N, platform="a5")
    cases = [
        ("arity: too few", lambda: add(_f()), PtoArgumentError, ["3 (in place) or 2 (return style)", "got 1"]),
        ("arity: too many", lambda: add(_f(), _f(), out, out), PtoArgumentError, ["got 4"]),
        ("wrong shape", lambda: add(_f(8), _f(), out), PtoArgumentError, ["'a'", "shape"]),
        ("wrong dtype", lambda: add(_f(), _f(dtype=np.float64), out), PtoArgumentError, ["'b'", "dtype"]),
        ("torch wrong dtype", lambda: add(_f(), torch.zeros(N, dtype=torch.int32), out), PtoArgumentError,
         ["'b'", "dtype"]),
        ("not an array", lambda: add(_f(), [1.0] * N, out), PtoArgumentError, ["'b'", "list"]),
        ("non-contiguous", lambda: add(_f(2 * N)[::2], _f(), out), PtoArgumentError, ["'a'", "contiguous"]),
        ("torch non-contiguous", lambda: add(torch.zeros(2 * N)[::2], _f(), out), PtoArgumentError,
         ["'a'", "contiguous"]),
        ("torch not on the CPU", lambda: add(torch.zeros(N, device="meta"), _f(), out), PtoArgumentError,
         ["'a'", "not on the CPU"]),
        ("unsupported dtype", lambda: add(_f(), np.zeros(N, np.complex64), out), PtoArgumentError,
         ["'b'", "unsupported dtype"]),
        ("torch unsupported dtype", lambda: add(torch.zeros(N, dtype=torch.complex64), _f(), out),
         PtoArgumentError, ["'a'", "unsupported dtype"]),
        ("read-only output", lambda: add(_f(), _f(), np.frombuffer(bytes(4 * N), np.float32)),
         PtoArgumentError, ["'out'", "read-only"]),
        ("scalar is an array", lambda: scale(_f(), _f(), out), PtoArgumentError, ["'alpha'", "scalar"]),
        ("scalar is a string", lambda: scale(_f(), "2", out), PtoArgumentError, ["'alpha'", "str"]),
        ("freed tensor", lambda: add(freed, _f(), out), PtoTensorFreedError, ["'a'", "freed"]),
        ("foreign tensor", lambda: add(_f(), foreign, out), PtoForeignTensorError, ["'b'", "another"]),
        ("stream of another type", lambda: add(_f(), _f(), out, stream=3), PtoArgumentError, ["stream"]),
        ("stream of another worker", lambda: add(_f(), _f(), out, stream=other.default_stream),
         PtoArgumentError, ["stream", "another"]),
        ("platform mismatch", lambda: w.register(arm), PtoPlatformMismatch, ["platform", "'a5'"]),
        ("not a program", lambda: w.register(object()), PtoArgumentError, ["compiled program"]),
        ("alloc negative size", lambda: w.alloc_tensor((-1,), np.float32), PtoArgumentError, ["shape"]),
        ("alloc bad shape type", lambda: w.alloc_tensor("16", np.float32), PtoArgumentError, ["shape"]),
        ("alloc bad dtype", lambda: w.alloc_tensor((N,), "complex"), PtoArgumentError, ["complex"]),
        ("alloc init shape", lambda: w.alloc_tensor((N,), np.float32, init=_f(8)), PtoArgumentError,
         ["init", "shape"]),
        ("alloc init dtype", lambda: w.alloc_tensor((N,), np.float32, init=_f(dtype=np.float64)),
         PtoArgumentError, ["init", "dtype"]),
        ("alloc init on the device", lambda: w.alloc_tensor((N,), np.float32, init=t), PtoArgumentError,
         ["init", "DeviceTensor"]),
        ("alloc huge", lambda: w.alloc_tensor((1 << 40,), np.float32), PtoOutOfMemory, ["allocating"]),
        ("free twice", lambda: w.free_tensor(freed), PtoTensorFreedError, ["free_tensor", "freed"]),
        ("free foreign", lambda: w.free_tensor(foreign), PtoForeignTensorError, ["free_tensor", "another"]),
        ("free a host array", lambda: w.free_tensor(out), PtoArgumentError, ["free_tensor", "ndarray"]),
        ("copy host to host", lambda: w.copy(out, _f()), PtoArgumentError, ["copy", "DeviceTensor"]),
        ("copy size", lambda: w.copy(t, _f(8)), PtoArgumentError, ["copy", "sizes"]),
        ("copy dtype", lambda: w.copy(t, np.zeros(N, np.int32)), PtoArgumentError, ["copy", "dtype"]),
        ("copy freed", lambda: w.copy(out, freed), PtoTensorFreedError, ["src", "freed"]),
        ("copy foreign", lambda: w.copy(foreign, _f()), PtoForeignTensorError, ["dst", "another"]),
        ("copy_from negative", lambda: w.copy_from(out, t.data_ptr, -4), PtoArgumentError, ["nbytes"]),
        ("copy_from short buffer", lambda: w.copy_from(np.zeros(2, np.float32), t.data_ptr, t.nbytes),
         PtoArgumentError, ["host_ptr", "fewer"]),
        ("copy_to bad pointer", lambda: w.copy_to(0, out, t.nbytes), PtoArgumentError, ["dev_ptr"]),
        ("copy_from bad host pointer", lambda: w.copy_from(0, t.data_ptr, t.nbytes), PtoArgumentError,
         ["host_ptr", "not a host address"]),
        ("copy_from not a buffer", lambda: w.copy_from(object(), t.data_ptr, t.nbytes), PtoArgumentError,
         ["host_ptr", "buffer"]),
        ("alloc shape not a shape", lambda: w.alloc_tensor(3.5, np.float32), PtoArgumentError, ["shape"]),
        ("stream priority", lambda: w.stream("high"), PtoArgumentError, ["priority"]),
        ("input in the other byte order", lambda: add(big_endian, _f(), out), PtoArgumentError,
         ["'a'", "'>f4'", "byte order"]),
        ("output in the other byte order", lambda: add(_f(), _f(), np.zeros(N, ">f4")), PtoArgumentError,
         ["'out'", "byte order"]),
        ("inout in the other byte order", lambda: inc(big_endian), PtoArgumentError, ["'x'", "byte order"]),
        ("alloc init in the other byte order", lambda: w.alloc_tensor((N,), np.float32, init=big_endian),
         PtoArgumentError, ["init", "byte order"]),
        ("alloc dtype in the other byte order", lambda: w.alloc_tensor((N,), np.dtype(">f4")),
         PtoArgumentError, ["dtype", "byte order"]),
        ("copy in from the other byte order", lambda: w.copy(t, big_endian), PtoArgumentError,
         ["src", "byte order"]),
        ("copy out to the other byte order", lambda: w.copy(np.zeros(N, ">f4"), t), PtoArgumentError,
         ["dst", "byte order"]),
        ("read-only torch output", lambda: add(_f(), _f(), ro_torch), PtoArgumentError, ["'out'", "read-only"]),
        ("read-only torch inout", lambda: inc(ro_torch), PtoArgumentError, ["'x'", "read-only"]),
        ("copy to a read-only torch tensor", lambda: w.copy(ro_torch, t), PtoArgumentError,
         ["dst", "read-only"]),
        ("copy_from into a read-only torch tensor", lambda: w.copy_from(ro_torch, t.data_ptr, t.nbytes),
         PtoArgumentError, ["host_ptr", "read-only"]),
        ("copy_from into bytes", lambda: w.copy_from(bytes(t.nbytes), t.data_ptr, t.nbytes), PtoArgumentError,
         ["host_ptr", "read-only"]),
        ("copy_from into a non-contiguous memoryview",
         lambda: w.copy_from(memoryview(bytearray(2 * t.nbytes))[::2], t.data_ptr, t.nbytes), PtoArgumentError,
         ["host_ptr", "contiguous"]),
        ("copy_to from a non-contiguous memoryview",
         lambda: w.copy_to(t.data_ptr, memoryview(bytearray(2 * t.nbytes))[::2], t.nbytes), PtoArgumentError,
         ["host_ptr", "contiguous"]),
        ("alloc empty shape", lambda: w.alloc_tensor((), np.float32), PtoArgumentError, ["shape", "()"]),
        ("alloc zero dimension", lambda: w.alloc_tensor((4, 0), np.float32), PtoArgumentError,
         ["shape", "(4, 0)"]),
        ("alloc zero size", lambda: w.alloc_tensor(0, np.float32), PtoArgumentError, ["shape", "0"]),
        ("scalar is a torch 1-d tensor", lambda: scale(_f(), torch.ones(1), out), PtoArgumentError,
         ["'alpha'", "scalar"]),
    ]
    return other, cases


def test_every_bad_call_is_refused_before_anything_is_queued(setup, tmp_path):
    w, s, add, scale, t, kernels = setup
    other, cases = _bad_calls(w, s, add, scale, t, kernels, tmp_path)
    try:
        streams = [w.default_stream, s]
        for what, call, cls, words in cases:
            before = _snapshot(w, streams)
            with pytest.raises(cls) as info:
                call()
            assert isinstance(info.value, PtoError)
            msg = str(info.value)
            for word in words:
                assert word in msg, f"{what}: {word!r} not in {msg!r}"
            assert _snapshot(w, streams) == before, f"{what}: something was queued or allocated"
        # The worker still computes.
        a, b, out = _f(), _f() + 1, np.full(N, np.nan, np.float32)
        add(a, b, out, stream=s)
        np.testing.assert_array_equal(out, a + b)
    finally:
        other.close()


def test_config_errors_name_the_field():
    for field, value in [("ring_task_window", 3), ("cores", -1), ("platform", 7), ("device_memory", "1G")]:
        with pytest.raises(PtoArgumentError, match=field):
            RunConfig(**{field: value})
    with pytest.raises(PtoError, match="cuda9"):
        ChipWorker(RunConfig(platform="cuda9"))


def test_closed_worker_refuses_everything(rel_kernels):
    w = ChipWorker(RunConfig(**SMALL))
    h = w.register(rel_kernels.get("inc", N))
    t = w.alloc_tensor((N,), np.float32)
    s = w.stream()
    w.close()
    w.close()  # idempotent
    assert t.freed and w.is_closed and s.is_closed
    for call in (lambda: h(_f()), lambda: w.alloc_tensor((N,), np.float32), lambda: w.stream(),
                 lambda: w.register(rel_kernels.get("add", N)), lambda: w.copy(np.zeros(N, np.float32), t),
                 lambda: s.record(), lambda: w.stats(), lambda: w.default_stream):
        with pytest.raises(PtoClosedError, match="closed"):
            call()
    t.close()  # idempotent after the worker closed


def test_closed_stream_refuses_work_and_others_go_on(setup):
    w, s, add, scale, t, kernels = setup
    s2 = w.stream()
    s2.close()
    with pytest.raises(PtoClosedError, match="closed"):
        add(_f(), _f(), np.zeros(N, np.float32), stream=s2)
    with pytest.raises(PtoArgumentError, match="default stream"):
        w.default_stream.close()
    a, b, out = _f(), _f(), np.zeros(N, np.float32)
    add(a, b, out, stream=s)
    np.testing.assert_array_equal(out, a + b)


def test_runconfig_is_frozen():
    cfg = RunConfig(**SMALL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cores = 3


@pytest.mark.parametrize("what", [
    "elapsed_ms of a non-event",
    "stream sync timeout of the wrong type",
    "alloc with dtype None",
    "alloc of more bytes than 64 bits hold",
    "stream priority out of range",
    "negative sync timeout",
])
def test_more_bad_arguments_raise_pto_errors(setup, what):
    w, s, add, scale, t, kernels = setup
    ev = s.record()
    ev.sync()
    calls = {
        "elapsed_ms of a non-event": lambda: ev.elapsed_ms(3),
        "stream sync timeout of the wrong type": lambda: s.sync(timeout="soon"),
        "alloc with dtype None": lambda: w.alloc_tensor((N,), None),
        "alloc of more bytes than 64 bits hold": lambda: w.alloc_tensor((1 << 62, 1 << 62), np.float32),
        "stream priority out of range": lambda: w.stream(1 << 40),
        "negative sync timeout": lambda: add.submit(_f(), _f(), np.zeros(N, np.float32)).sync(timeout=-1),
    }
    before = mem_stats(w).allocations
    try:
        calls[what]()
    except PtoError:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{what}: {type(exc).__name__} ({exc}), not a PtoError")
    else:
        if what != "negative sync timeout":
            pytest.fail(f"{what}: accepted")
    s.sync()
    w.default_stream.sync()
    assert mem_stats(w).allocations == before
