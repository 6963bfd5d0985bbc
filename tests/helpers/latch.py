"""Hold a stream with the driver's latch, with a timeout so nothing hangs.

The model is cuda.core's ``tests/helpers/latch.py``: a test queues a latch on a
stream, queues work behind it, asserts what it likes while the stream is held,
and releases it.  The latch carries its own timeout, so a test that fails
before releasing it cannot leave a stream (or the device's close) waiting
forever: the latch then expires and its wait completes with -PTO_ETIMEDOUT.
A latch that expired instead of being released fails the test (through
``pypto_async.testing.note_expired``, as the plugin's ``hold`` does): the test
waited for the timeout, not for what it meant to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pypto_async._driver import check, ffi, lib
from pypto_async.testing import note_expired

__all__ = ["Held", "held"]


class Held:
    """A latch holding one or more streams; :meth:`release` lets them go."""

    __slots__ = ("latch", "released")

    def __init__(self, latch):
        self.latch = latch
        self.released = False

    def hold(self, stream, token: int = 0) -> None:
        """Queue another wait on this latch, on `stream`."""
        check(lib.pto_stream_latch_wait(stream, self.latch, token), "pto_stream_latch_wait")

    def release(self) -> None:
        """Release the latch (idempotent); every held stream moves on."""
        if not self.released:
            self.released = True
            lib.pto_latch_release(self.latch)


@contextlib.contextmanager
def held(device, stream, *, timeout_s: float = 10.0, token: int = 0) -> Iterator[Held]:
    """Hold `stream` until the block exits (or :meth:`Held.release` is called).

    Parameters
    ----------
    device : cdata ``pto_device *``
        The device the stream belongs to.
    stream : cdata ``pto_stream *``
        The stream to hold: a latch wait is queued on it before the block runs.
    timeout_s : float, optional
        The latch's own timeout; past it the wait fails with -PTO_ETIMEDOUT
        and the stream moves on, so a broken test cannot hang.
    token : int, optional
        Completion token of the latch-wait command (0: no record).

    Yields
    ------
    Held
        Call ``release()`` to let the stream go early; ``hold(other)`` to hold
        another stream on the same latch.
    """
    out = ffi.new("pto_latch **")
    check(lib.pto_latch_create(device, int(timeout_s * 1e6), out), "pto_latch_create")
    h = Held(out[0])
    try:
        h.hold(stream, token)
        yield h
    finally:
        h.release()
        if lib.pto_latch_expired(h.latch):  # final once released
            note_expired(f"held(stream, timeout_s={timeout_s}): expired after {timeout_s} s")
        lib.pto_latch_destroy(h.latch)
