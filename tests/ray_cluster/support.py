"""What the Ray tests share besides fixtures: the nodes, the shapes, the probe actor."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import numpy as np
import ray

from pypto_async.testing import SIM_DEVICE

ROOT = Path(__file__).resolve().parents[2]
NODE_A, NODE_B = "pto_node_a", "pto_node_b"
ROWS, COLS = 128, 128


def rand(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((ROWS, COLS)).astype(np.float32)


def nan_array() -> np.ndarray:
    return np.full((ROWS, COLS), np.nan, np.float32)


def probe_class():
    """A ChipActor with test-only methods: where it runs, and a latch on its next run's stream.

    Defined in a function, so Ray pickles it by value (the test directory is
    not importable in the actors' processes).
    """
    from pypto_async.ray import ChipWorkerActor
    from pypto_async.testing import fail_next, hold

    class Probe(ChipWorkerActor):
        async def where(self) -> tuple[str, str]:
            import pypto_async

            return ray.get_runtime_context().get_node_id(), pypto_async.__file__

        async def hold_next(self) -> None:
            """Hold the stream the next ``run`` goes on (until :meth:`release`)."""
            await self._open()
            self._held_stream = self._streams[self._turn % len(self._streams)]
            self._held_taken = asyncio.Event()
            self._held = contextlib.ExitStack()
            self._held.enter_context(hold(self._held_stream))

        def _next_stream(self):
            stream = super()._next_stream()
            if stream is getattr(self, "_held_stream", None):
                self._held_taken.set()
            return stream

        async def held_taken(self) -> None:
            """Return once a ``run`` took the held stream.

            An async actor does not run calls in the order they were sent
            (Ray's task-order guide): a call sent after another can reach its
            stream first.  Waiting here orders them.
            """
            await self._held_taken.wait()

        async def fail_next(self) -> None:
            """Make the next ``run``'s first command fail on the device (a copy fault)."""
            await self._open()
            fail_next(self._streams[self._turn % len(self._streams)])

        async def release(self) -> None:
            self._held.close()

    return ray.remote(Probe)


def actor_on(cls, node: str, **kwargs):
    return cls.options(num_cpus=0, resources={node: 0.01}).remote(dict(SIM_DEVICE), **kwargs)
