"""The states of a ChipWorker, named once.

``OPEN``
    Usable: the device is open in this process.
``CLOSED``
    :meth:`ChipWorker.close` ran (or opening failed); every call refuses
    with :class:`~pypto_async.errors.PtoClosedError`.
``FORKED``
    Opened in a parent process and seen in a forked child, where the
    driver's threads do not exist: every call refuses with
    :class:`~pypto_async.errors.PtoInvalidStateError`.

Code asks the worker (``worker._alive()``, ``worker._check_open()``); only
the launch hot path (:mod:`._dispatch`) compares ``worker._state`` with
``OPEN`` itself, to save a call per launch.
"""

from __future__ import annotations

__all__ = ["OPEN", "CLOSED", "FORKED"]

OPEN, CLOSED, FORKED = 0, 1, 2
