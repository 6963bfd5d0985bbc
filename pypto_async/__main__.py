"""``python -m pypto_async``: the ``pypto-async`` command (see :mod:`pypto_async._cli`)."""

from __future__ import annotations

import sys

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
