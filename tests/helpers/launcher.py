"""Run a CompiledProgram on the sim device through the raw driver (no runtime).

:class:`Launcher` opens one device and stream; :meth:`Launcher.run` allocates
device memory for every tensor argument, copies every tensor in (outputs
included, so a poisoned output proves the kernel wrote each element),
launches the kernel over the program's blocks, copies Out/InOut tensors back
into the host arrays, frees, and raises the launch's own error if it failed.
"""

from __future__ import annotations

import itertools

import numpy as np

from pypto_async._driver import check, device_config, error_for_status, ffi, lib

__all__ = ["Launcher", "as_numpy", "scalar_bits"]

_tokens = itertools.count(1)


def as_numpy(x) -> np.ndarray:
    """Return a C-contiguous numpy view of a host array (torch bf16 as uint16 bits)."""
    if type(x).__module__.startswith("torch"):
        import torch

        if x.dtype == torch.bfloat16:
            x = x.view(torch.uint16)
        return x.numpy()
    return x


def scalar_bits(value, dtype) -> int:
    """Return the 64-bit argument slot of a scalar converted to ``dtype``."""
    if dtype.name == "BF16":
        import torch

        raw = torch.tensor([float(value)], dtype=torch.bfloat16).view(torch.uint16).numpy().tobytes()
    else:
        raw = np.array(value, dtype=dtype.np_storage).tobytes()
    return int.from_bytes(raw.ljust(8, b"\0"), "little")


class Launcher:
    """A sim device plus one stream; close it when done (idempotent)."""

    def __init__(self, cores: int = 2, device_memory: int = 512 << 20):
        out = ffi.new("pto_device **")
        cfg = device_config(cores=cores, device_memory=device_memory)
        check(lib.pto_device_open(b"sim", cfg, out), "pto_device_open")
        self.dev = out[0]
        sout = ffi.new("pto_stream **")
        check(lib.pto_stream_create(self.dev, 0, sout), "pto_stream_create")
        self.stream = sout[0]
        self.cores = cores
        self._kernels: dict = {}
        self._records = ffi.new("pto_completion[64]")

    def close(self) -> None:
        if self.dev is not None:
            lib.pto_device_close(self.dev)
            self.dev = None

    def kernel(self, compiled):
        key = (str(compiled.lib_path), compiled.symbol)
        k = self._kernels.get(key)
        if k is None:
            out = ffi.new("pto_kernel **")
            check(lib.pto_kernel_load(self.dev, key[0].encode(), key[1].encode(), out), "pto_kernel_load")
            k = self._kernels[key] = out[0]
        return k

    def launch_args(self, compiled, args):
        """Allocate and fill device buffers; return (slots, [(param, host, devptr)])."""
        slots, tensors = [], []
        for p, a in zip(compiled.params, args):
            if not p.is_tensor:
                slots.append(scalar_bits(a, p.dtype))
                continue
            host = np.ascontiguousarray(as_numpy(a))
            assert host.nbytes == p.nbytes, (p, host.shape, host.dtype)
            ptr = ffi.new("pto_devptr *")
            check(lib.pto_mem_alloc(self.dev, p.nbytes, self.stream, ptr), "pto_mem_alloc")
            tensors.append((p, host, ptr[0]))
            slots.append(ptr[0])
        return slots, tensors

    def run(self, compiled, *args, blocks: int | None = None):
        """Launch ``compiled`` with host arrays/scalars ``args``; copy outputs back in place."""
        assert len(args) == len(compiled.params)
        k = self.kernel(compiled)
        slots, tensors = self.launch_args(compiled, args)
        try:
            for _, host, dptr in tensors:
                check(lib.pto_stream_copy_h2d(self.stream, dptr, ffi.from_buffer(host), host.nbytes, next(_tokens)))
            argv = ffi.new("uint64_t[]", slots or [0])
            launch_token = next(_tokens)
            check(
                lib.pto_stream_launch(
                    self.stream, k, blocks or compiled.block_num, argv, len(slots), launch_token
                ),
                "pto_stream_launch",
            )
            backs = []
            for p, host, dptr in tensors:
                if p.copies_out:
                    check(lib.pto_stream_copy_d2h(self.stream, ffi.from_buffer(host), dptr, host.nbytes, next(_tokens)))
                    backs.append(host)
            check(lib.pto_stream_synchronize(self.stream, 60_000_000), "pto_stream_synchronize")
            failure = self._drain()
        finally:
            for _, _, dptr in tensors:
                lib.pto_mem_free(self.dev, dptr)
        if failure is not None:
            raise failure
        # Copy back into the caller's arrays when we had to make contiguous copies.
        it = iter(backs)
        for p, a in zip(compiled.params, args):
            if p.is_tensor and p.copies_out:
                host = next(it)
                view = as_numpy(a)
                if view is not host:
                    view[...] = host
        return args

    def _drain(self):
        first = None
        while True:
            n = lib.pto_cq_drain(self.dev, self._records, 64)
            if n <= 0:
                return first
            for i in range(n):
                r = self._records[i]
                if r.status != 0 and first is None:
                    first = error_for_status(r.status, ffi.string(r.message).decode())
                    # Raised to the caller: the stream's failure is observed (the driver's rule),
                    # so the next run on this stream runs normally.
                    lib.pto_completion_observe(self.dev, ffi.addressof(self._records, i))
