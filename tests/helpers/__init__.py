"""Shared helpers for the test suites (driver, runtime, reliability).

They talk to the raw driver (``pypto_async._driver``) only, so any suite can
use them: ``held`` holds a stream with the driver's latch, ``CompletionLog``
collects completion records with a deadline, ``open_device`` /
``close_device`` open a small device and check it for leaks on the way out.
"""

from .completions import CompletionLog, Record, new_token
from .device import close_device, open_device
from .latch import Held, held

__all__ = ["CompletionLog", "Held", "Record", "close_device", "held", "new_token", "open_device"]
