"""Whether host memory may be written: the check behind a torch output.

numpy arrays carry a ``writeable`` flag; torch tensors do not.  A tensor made
by ``torch.from_numpy(np.memmap(path, mode="r"))`` sits on a read-only
mapping, and the device's copy back into it would kill the process with
SIGSEGV on a driver thread.  So before the runtime accepts such a tensor as an
output it asks the kernel about the pages themselves:

1. ``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14 and later) prefaults the range
   for writing without touching a byte, and fails on a mapping that may not
   be written.  It is the fast path: one system call, and the pages it
   faults in are the ones the copy back would fault in anyway.
2. When it fails (a read-only mapping, but also an older kernel or a mapping
   it does not handle), ``/proc/self/maps`` decides: every byte of the range
   must lie in a mapping with ``w`` in its permissions.  Reading it costs
   hundreds of microseconds, which only a refusal, or a system without the
   fast path, pays.

Where neither exists (not Linux), the answer is "writeable": nothing here can
tell, and numpy's flag still guards numpy arrays.
"""

from __future__ import annotations

import mmap

__all__ = ["writeable"]

_PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23
_madvise = None  # the libc function once looked up; False where there is none


def writeable(addr: int, nbytes: int) -> bool:
    """Return whether the host bytes ``[addr, addr + nbytes)`` may all be written.

    Never writes them.  True where the platform cannot tell.
    """
    start = addr & -_PAGE
    madvise = _madvise if _madvise is not None else _load_madvise()
    if madvise and madvise(start, addr + nbytes - start, _MADV_POPULATE_WRITE) == 0:
        return True
    return _maps_writeable(addr, addr + nbytes)


def _load_madvise():
    global _madvise
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
        fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        fn.restype = ctypes.c_int
    except (ImportError, OSError, AttributeError):
        fn = False
    _madvise = fn
    return fn


def _maps_writeable(lo: int, hi: int) -> bool:
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return True  # no way to tell
    # The mappings come sorted by address; walk them until [lo, hi) is covered.
    for line in lines:
        fields = line.split(None, 2)
        start, _, end = fields[0].partition(b"-")
        start, end = int(start, 16), int(end, 16)
        if end <= lo:
            continue
        if start > lo or fields[1][1:2] != b"w":
            return False  # a hole, or a mapping that may not be written
        lo = end
        if lo >= hi:
            return True
    return False
