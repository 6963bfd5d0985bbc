"""The error type of the ``pypto-async`` command, in a module of its own.

The subcommands (``_demo.py``, ``_bench.py``) raise it and ``_cli.py`` reports
it; keeping it here lets them import it without importing one another.
"""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A failure the command reports as one line (no traceback)."""
