"""Argument binding: scalars and host arrays (runtime/_args.py)."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from pypto_async._dtypes import BF16, BOOL, FP16, FP32, FP64, INT8, INT32, INT64, UINT8
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import _hostmem
from pypto_async.runtime._args import host_array, scalar_bits


@pytest.mark.parametrize(
    "value, dtype, raw",
    [
        (1.5, FP32, struct.pack("<f", 1.5)),
        (-2.25, FP64, struct.pack("<d", -2.25)),
        (0.5, FP16, struct.pack("<e", 0.5)),
        (-7, INT8, struct.pack("<b", -7)),
        (123456, INT32, struct.pack("<i", 123456)),
        (-(2**40), INT64, struct.pack("<q", -(2**40))),
        (255, UINT8, b"\xff"),
        (True, BOOL, b"\x01"),
        (np.float32(3.0), FP32, struct.pack("<f", 3.0)),
        (np.int64(9), INT32, struct.pack("<i", 9)),
        (2, FP32, struct.pack("<f", 2.0)),
    ],
)
def test_scalar_bits_are_little_endian_low_bytes(value, dtype, raw):
    assert scalar_bits(value, dtype, "x") == int.from_bytes(raw, "little")


def test_bf16_rounds_to_nearest_even():
    assert scalar_bits(1.0, BF16, "x") == 0x3F80
    assert scalar_bits(-2.0, BF16, "x") == 0xC000
    bits = struct.unpack("<I", struct.pack("<f", 1.0 + 2**-8))[0]  # exactly halfway: stays even
    assert scalar_bits(1.0 + 2**-8, BF16, "x") == bits >> 16


@pytest.mark.parametrize(
    "value, dtype, pattern",
    [
        ("1", FP32, "number"),
        (True, FP32, "number"),
        (1.5, INT32, "int"),
        (2**31, INT32, "does not fit"),
        (300, UINT8, "does not fit"),
        (1e300, FP32, "does not fit"),
        (np.zeros(3), FP32, "not an array"),
    ],
)
def test_bad_scalars(value, dtype, pattern):
    with pytest.raises(PtoArgumentError, match=f"x: .*{pattern}"):
        scalar_bits(value, dtype, "x")


def test_host_array_views():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    h = host_array(a, "a", writeable=True)
    assert (h.nbytes, h.shape, h.dtype) == (48, (3, 4), FP32)
    with pytest.raises(PtoArgumentError, match="C-contiguous"):
        host_array(a.T, "a", writeable=False)
    with pytest.raises(PtoArgumentError, match="numpy array, a torch CPU tensor"):
        host_array([1, 2, 3], "a", writeable=False)


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i4", ">i8", ">u2", ">f2"])
@pytest.mark.parametrize("writeable", [False, True])
def test_host_array_refuses_the_other_byte_order(dtype, writeable):
    a = np.arange(6).astype(dtype)
    with pytest.raises(PtoArgumentError, match=f"a: dtype '{dtype}' is not in this machine's byte order"):
        host_array(a, "a", writeable=writeable)
    # Native spellings of the same dtype are one dtype: accepted, and cached as one.
    native = a.astype(np.dtype(dtype).newbyteorder("="))
    assert host_array(native, "a", writeable=writeable).nbytes == a.nbytes
    with pytest.raises(PtoArgumentError, match="byte order"):  # not let in by the cache
        host_array(a, "a", writeable=writeable)


def test_single_byte_dtypes_have_no_byte_order():
    for dtype in (">u1", ">i1", ">b1"):
        assert host_array(np.zeros(4, dtype), "a", writeable=True).nbytes == 4


def test_uint16_is_uint16_and_holds_bfloat16_storage():
    torch = pytest.importorskip("torch")
    from pypto_async._dtypes import UINT16, holds

    bits = np.arange(8, dtype=np.uint16)
    assert host_array(bits, "a", writeable=True).dtype is UINT16
    assert host_array(torch.from_numpy(bits), "a", writeable=True).dtype is UINT16
    assert holds(UINT16, BF16)  # where a BF16 tensor is wanted, the uint16 bits are its storage
    assert host_array(torch.zeros(8, dtype=torch.bfloat16), "a", writeable=True).dtype is BF16


def _torch_over(tmp_path, mode):
    torch = pytest.importorskip("torch")
    path = tmp_path / "data.bin"
    np.arange(64, dtype=np.float32).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "the given NumPy array is not writable"
        return torch.from_numpy(np.memmap(path, np.float32, mode=mode, shape=(64,)))


def test_torch_over_read_only_memory_is_refused_where_the_device_writes(tmp_path):
    ro = _torch_over(tmp_path, "r")
    with pytest.raises(PtoArgumentError, match="out: the tensor's memory is read-only"):
        host_array(ro, "out", writeable=True)
    assert host_array(ro, "x", writeable=False).nbytes == 256  # reading it is fine
    with pytest.raises(PtoArgumentError, match="read-only"):  # a view into it, too
        host_array(ro[8:16], "out", writeable=True)


def test_torch_over_memory_torch_did_not_allocate_but_may_write_is_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    for t in (_torch_over(tmp_path, "c"), _torch_over(tmp_path, "r+"),
              torch.from_numpy(np.zeros(64, np.float32))):
        assert not t.untyped_storage().resizable()  # the probe runs
        assert host_array(t, "out", writeable=True).nbytes == 256


def test_host_memory_probe_and_its_slow_judge_agree(tmp_path):
    ro, rw = _torch_over(tmp_path, "r"), np.zeros(4096, np.uint8)
    for addr, n, expected in [(ro.data_ptr(), 256, False), (rw.ctypes.data, rw.nbytes, True),
                              (4096, 4096, False)]:  # never mapped
        assert _hostmem.writeable(addr, n) is expected
        assert _hostmem._maps_writeable(addr, addr + n) is expected


@pytest.mark.parametrize("value, dtype", [(2.5, FP32), (-3, INT32), (True, BOOL), (1.0, BF16), (-7, INT64)])
def test_zero_d_numpy_and_torch_scalars_are_taken_alike(value, dtype):
    torch = pytest.importorskip("torch")
    want = scalar_bits(value, dtype, "x")
    assert scalar_bits(np.array(value), dtype, "x") == want
    assert scalar_bits(torch.tensor(value), dtype, "x") == want
    with pytest.raises(PtoArgumentError, match="x: expected a .* scalar, not an array"):
        scalar_bits(torch.tensor([value]), dtype, "x")
    with pytest.raises(PtoArgumentError, match="x: the 0-d tensor is on meta"):
        scalar_bits(torch.tensor(value, device="meta"), dtype, "x")


def test_zero_d_scalars_launch_alike(worker, kernels):
    torch = pytest.importorskip("torch")
    scale = worker.register(kernels.get("scale", 64))
    x = np.random.default_rng().standard_normal(64).astype(np.float32)
    for alpha in (np.array(-1.5, np.float32), torch.tensor(-1.5), np.array(-1.5, ">f4")):
        out = np.full(64, np.nan, np.float32)
        scale(x, alpha, out)
        np.testing.assert_array_equal(out, np.float32(-1.5) * x)
