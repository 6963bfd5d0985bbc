"""benchmark(): device and host wall time of a compiled program, per round."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ._config import RunConfig, as_run_config

__all__ = ["benchmark", "BenchmarkResult", "Timings"]


class Timings(tuple):
    """Per-round times in microseconds, with summary helpers."""

    __slots__ = ()

    def min(self) -> float:
        """The fastest round."""
        return min(self)

    def max(self) -> float:
        """The slowest round."""
        return max(self)

    def mean(self) -> float:
        """The mean over rounds."""
        return statistics.fmean(self)

    def median(self) -> float:
        """The median over rounds (what to compare)."""
        return statistics.median(self)


@dataclass(frozen=True)
class BenchmarkResult:
    """What :func:`benchmark` measured.

    Attributes
    ----------
    name : str
        The program's name.
    device_wall_us : Timings
        Per round, from the first command's start to the last command's end
        on the device (the driver's record timestamps): copies included for
        host arrays, nothing of the host's own overhead.
    host_wall_us : Timings
        Per round, from the launch call to its return with the launch
        complete, as the host sees it.
    """

    name: str
    device_wall_us: Timings
    host_wall_us: Timings

    @property
    def rounds(self) -> int:
        return len(self.host_wall_us)

    def min(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).min()

    def max(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).max()

    def mean(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).mean()

    def median(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).median()

    def __str__(self) -> str:
        d, h = self.device_wall_us, self.host_wall_us
        return (f"{self.name}: {self.rounds} rounds, device median {d.median():.1f} us "
                f"(min {d.min():.1f}, max {d.max():.1f}), host median {h.median():.1f} us "
                f"(min {h.min():.1f}, max {h.max():.1f})")


def benchmark(compiled, args, *, rounds: int = 100, warmup: int = 3, config=None) -> BenchmarkResult:
    """Run `compiled` with `args` `rounds` times and time each round.

    A worker is opened for the run (sync mode) with `config` (``None``: a
    default :class:`RunConfig` for the program's platform) and closed after.

    Parameters
    ----------
    compiled
        A compiled program.
    args : sequence
        Its arguments (host arrays are copied each round, DeviceTensors are
        not: they would belong to another worker, so pass host arrays).
    rounds : int, optional
        Timed rounds (>= 1).
    warmup : int, optional
        Untimed rounds first (>= 0).
    config : RunConfig or dict, optional
        The worker's config.

    Returns
    -------
    BenchmarkResult
    """
    from ..errors import PtoArgumentError
    from ._worker import ChipWorker

    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise PtoArgumentError(f"benchmark(): rounds must be an int >= 1, not {rounds!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise PtoArgumentError(f"benchmark(): warmup must be an int >= 0, not {warmup!r}")
    cfg = RunConfig(platform=compiled.platform) if config is None else as_run_config(config)
    args = tuple(args)
    device, host = [], []
    clock = time.perf_counter_ns
    with ChipWorker(cfg) as worker:
        handle = worker.register(compiled)
        for _ in range(warmup):
            handle(*args)
        for _ in range(rounds):
            t0 = clock()
            launch = handle(*args)
            t1 = clock()
            host.append((t1 - t0) / 1e3)
            device.append((launch._t1 - launch._t0) / 1e3)
    name = getattr(compiled, "name", None) or compiled.symbol
    return BenchmarkResult(str(name), Timings(device), Timings(host))
