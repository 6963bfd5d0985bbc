"""PyPTO's ``pypto.runtime.runner`` names (``from pypto_async.runtime.runner import RunConfig, RunResult``).

PyPTO keeps its run configuration and harness in ``pypto.runtime.runner``; programs and system tests
import them from there.  Here they are the runtime's own: :class:`~pypto_async.runtime.RunConfig`,
:func:`~pypto_async.runtime.run` and :class:`~pypto_async.runtime.RunResult`.
"""

from __future__ import annotations

from ._config import RunConfig
from ._harness import RunResult, run

__all__ = ["RunConfig", "RunResult", "run"]
