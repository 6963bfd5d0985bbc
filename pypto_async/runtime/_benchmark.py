"""benchmark(): device and host wall time of a compiled program, per round.

PyPTO's :func:`benchmark` registers a program once, launches it ``warmup``
then ``rounds`` times, and returns a :class:`BenchmarkStats` built from the
runtime's per-launch timing markers.  This one does the same on a worker of
its own and reads the simulated device's own clock: a round's device wall is
the span from its first command's start to its last command's end, as the
driver stamped them (copies of host arrays included), so ``device_wall_us``
holds real, non-zero device times on the simulator, where PyPTO's reads 0.
Those stamps are device time: the device model's by default
(``RunConfig(timing="model")``: what the profile's chip would take, with the
gaps where it waited for the host's submissions; docs/device_model.md), the
host threads' wall clock with ``timing="host"``.  Its host wall runs from the launch call to its return with the launch
complete.

Each round also gets a two-span tree (:class:`TraceInvocation`): the host
span ``run`` and, under it, the device span ``run.device_wall``, which is
what :meth:`BenchmarkStats.print_tree` renders.  ``BenchmarkResult`` is the
older name of the class, and its helpers (``result.median("host_wall_us")``,
``result.device_wall_us.median()``, ``result.name``) still work.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

from .._scalars import is_int
from ..errors import PtoArgumentError
from ._call import complete_args
from ._config import RunConfig, as_run_config
from ._worker import ChipWorker

__all__ = ["benchmark", "BenchmarkStats", "BenchmarkResult", "Timings", "TraceInvocation", "TraceSpan"]

_HOST, _DEVICE = "run", "run.device_wall"
_METRICS = {"device": "device_wall_us", "host": "host_wall_us"}


class Timings(list):
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


@dataclass
class TraceSpan:
    """One timed span of a measured launch (PyPTO's name and fields).

    ``ts`` and ``dur`` are nanoseconds, on the host's monotonic clock for the
    host span and on the device's clock for a device span (``attrs`` then
    holds ``clk=dev``).
    """

    pid: int
    tid: int
    inv: int
    hid: str
    depth: int
    name: str
    ts: int
    dur: int
    attrs: str = ""

    @property
    def is_device(self) -> bool:
        """True for a span on the device's clock."""
        return "clk=dev" in self.attrs

    @property
    def dur_us(self) -> float:
        """The span's duration in microseconds."""
        return self.dur / 1000.0


@dataclass
class TraceInvocation:
    """The spans of one measured launch (PyPTO's name and fields)."""

    pid: int
    inv: int
    hid: str
    spans: list[TraceSpan] = field(default_factory=list)

    def root(self) -> TraceSpan | None:
        """The depth-0 span, or None."""
        return next((s for s in self.spans if s.depth == 0), None)

    def by_name(self) -> dict[str, TraceSpan]:
        """Each span by name (the first of a name)."""
        out: dict[str, TraceSpan] = {}
        for s in self.spans:
            out.setdefault(s.name, s)
        return out

    @property
    def task(self) -> str:
        """The launched program's identity (its kernel symbol)."""
        return self.hid

    @property
    def device_wall_us(self) -> float:
        span = self.by_name().get(_DEVICE)
        return span.dur_us if span is not None else 0.0

    @property
    def host_wall_us(self) -> float:
        span = self.by_name().get(_HOST)
        return span.dur_us if span is not None else 0.0

    @property
    def effective_us(self) -> float:
        """PyPTO's orchestration/scheduler window; here the device wall (one window per launch)."""
        return self.device_wall_us

    def format_tree(self, *, us: bool = True, value_fn=None) -> str:
        """Render the spans as a tree (children under their dotted-name parent), aligned."""
        rows = []
        for s in sorted(self.spans, key=lambda s: (s.depth, s.ts)):
            connector = "" if s.depth == 0 else "   " * (s.depth - 1) + "`- "
            label = connector + s.name.rsplit(".", 1)[-1] + (" [dev]" if s.is_device else "")
            cols = value_fn(s) if value_fn is not None else [f"{s.dur_us:.1f}us" if us else f"{s.dur}ns"]
            rows.append((label, cols))
        width = max((len(label) for label, _ in rows), default=0)
        ncols = max((len(cols) for _, cols in rows), default=0)
        col_w = [max((len(cols[i]) for _, cols in rows if i < len(cols)), default=0) for i in range(ncols)]
        lines = []
        for label, cols in rows:
            line = label.ljust(width) + "".join("  " + c.rjust(col_w[i]) for i, c in enumerate(cols))
            lines.append(line.rstrip())
        return "\n".join(lines)


def _stat(values, fn) -> float:
    return fn(values) if values else 0.0


@dataclass
class BenchmarkStats:
    """What :func:`benchmark` measured, under PyPTO's names.

    Attributes
    ----------
    device_wall_us : Timings
        Per measured round, microseconds on the device's clock (see the
        module doc); ``samples`` is the same list.
    host_wall_us : Timings
        Per measured round, the host's wall time of the launch.
    rounds, warmup : int
        Measured and discarded launches.
    invocations : list of TraceInvocation
        One span tree per measured round.
    name : str
        The program's name (an extension).

    ``device_us_min`` / ``_median`` / ``_mean`` / ``_max`` / ``_stdev`` and
    their ``device_wall_us_*`` aliases summarize ``device_wall_us``;
    :meth:`per_round` gives a metric's per-round list; :meth:`per_rank` is
    PyPTO's distributed (L3) view, empty for one chip.
    """

    device_wall_us: Timings = field(default_factory=Timings)
    host_wall_us: Timings = field(default_factory=Timings)
    rounds: int = 0
    warmup: int = 0
    invocations: list[TraceInvocation] = field(default_factory=list)
    rounds_dispatches: list = field(default_factory=list)
    fallback_flattened: bool = False
    name: str = ""

    # -- PyPTO's summaries -------------------------------------------------------------

    @property
    def samples(self) -> Timings:
        """The measured device-wall samples (``device_wall_us``)."""
        return self.device_wall_us

    @property
    def device_us_min(self) -> float:
        return _stat(self.device_wall_us, min)

    @property
    def device_us_median(self) -> float:
        return _stat(self.device_wall_us, statistics.median)

    @property
    def device_us_mean(self) -> float:
        return _stat(self.device_wall_us, statistics.fmean)

    @property
    def device_us_max(self) -> float:
        return _stat(self.device_wall_us, max)

    @property
    def device_us_stdev(self) -> float:
        return statistics.stdev(self.device_wall_us) if len(self.device_wall_us) > 1 else 0.0

    device_wall_us_min = device_us_min
    device_wall_us_median = device_us_median
    device_wall_us_mean = device_us_mean
    device_wall_us_max = device_us_max
    device_wall_us_stdev = device_us_stdev

    @property
    def all_zero_device(self) -> bool:
        """True if every device sample is 0 (never on the simulator, which times its device)."""
        return bool(self.device_wall_us) and not any(self.device_wall_us)

    def per_round(self, metric: str = "device") -> list[float]:
        """One value per measured round: ``"device"``, ``"host"`` or ``"effective"`` (the device wall here).

        Raises
        ------
        PtoArgumentError
            For another metric (PyPTO's ``"union"`` is distributed only).
        """
        if metric == "effective":
            metric = "device"
        if metric not in _METRICS:
            raise PtoArgumentError(f"per_round(): metric must be 'device', 'host' or 'effective', not {metric!r}")
        return list(getattr(self, _METRICS[metric]))

    def per_rank(self, metric: str = "device") -> dict[int, list[float]]:
        """PyPTO's per-rank view of a distributed run: always empty for one chip."""
        if metric not in (*_METRICS, "effective"):
            raise PtoArgumentError(f"per_rank(): metric must be 'device', 'host' or 'effective', not {metric!r}")
        return {}

    # -- the older helpers (BenchmarkResult) ---------------------------------------------

    def min(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).min()

    def max(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).max()

    def mean(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).mean()

    def median(self, field: str = "device_wall_us") -> float:
        return getattr(self, field).median()

    # -- trees -------------------------------------------------------------------------

    def format_tree(self, launch: int | None = None, *, us: bool = True) -> str:
        """Render the span tree of measured launch `launch` (None: every launch)."""
        if not self.invocations:
            return "BenchmarkStats: no span tree captured"
        chosen = list(enumerate(self.invocations)) if launch is None else [(launch, self.invocations[launch])]
        out = []
        for i, inv in chosen:
            out.append(f"launch[{i}] (pid={inv.pid} inv={inv.inv} hid={inv.hid}):")
            out.append(inv.format_tree(us=us))
        return "\n".join(out)

    def print_tree(self, launch: int | None = None, *, us: bool = True, file=None) -> None:
        """Print :meth:`format_tree` to `file` (default stdout)."""
        print(self.format_tree(launch, us=us), file=file)

    def mean_invocation(self) -> TraceInvocation | None:
        """One tree whose every span is the mean over the measured launches (None if none)."""
        if not self.invocations:
            return None
        durs: dict[str, list[int]] = defaultdict(list)
        first: dict[str, TraceSpan] = {}
        for inv in self.invocations:
            for s in inv.spans:
                durs[s.name].append(s.dur)
                first.setdefault(s.name, s)
        spans = [TraceSpan(t.pid, t.tid, -1, t.hid, t.depth, name, t.ts, round(statistics.fmean(durs[name])),
                           t.attrs) for name, t in first.items()]
        head = self.invocations[0]
        return TraceInvocation(head.pid, -1, head.hid, spans)

    def format_mean_tree(self, *, us: bool = True, spread: str = "stdev") -> str:
        """The mean tree, each span with its spread: ``"stdev"``, ``"minmax"``, ``"both"`` or ``"none"``."""
        if spread not in ("stdev", "minmax", "both", "none"):
            raise PtoArgumentError(f"format_mean_tree(): spread must be stdev, minmax, both or none, not {spread!r}")
        mean = self.mean_invocation()
        if mean is None:
            return "BenchmarkStats: no span tree captured"
        durs: dict[str, list[int]] = defaultdict(list)
        for inv in self.invocations:
            for s in inv.spans:
                durs[s.name].append(s.dur)
        scale, unit = (1000.0, "us") if us else (1.0, "ns")

        def value(span: TraceSpan) -> list[str]:
            ds = durs[span.name]
            cols = [f"{statistics.fmean(ds) / scale:.1f}{unit}"]
            if spread in ("stdev", "both"):
                cols.append(f"±{(statistics.stdev(ds) if len(ds) > 1 else 0.0) / scale:.1f}")
            if spread in ("minmax", "both"):
                cols.append(f"[{min(ds) / scale:.1f}..{max(ds) / scale:.1f}]")
            return cols

        header = f"mean of {len(self.invocations)} launches (warmup {self.warmup} excluded):"
        return f"{header}\n{mean.format_tree(us=us, value_fn=value)}"

    def print_mean_tree(self, *, us: bool = True, spread: str = "stdev", file=None) -> None:
        """Print :meth:`format_mean_tree` to `file` (default stdout)."""
        print(self.format_mean_tree(us=us, spread=spread), file=file)

    def __str__(self) -> str:
        if not self.device_wall_us:
            return f"BenchmarkStats(rounds={self.rounds}: no samples)"
        head = f"BenchmarkStats({self.name + ', ' if self.name else ''}rounds={self.rounds}, warmup={self.warmup})"
        return (f"{head}: device_wall_us min={self.device_us_min:.1f} median={self.device_us_median:.1f} "
                f"mean={self.device_us_mean:.1f} max={self.device_us_max:.1f} stdev={self.device_us_stdev:.1f}; "
                f"host_wall_us median={self.median('host_wall_us'):.1f}")


#: The older name of :class:`BenchmarkStats`.
BenchmarkResult = BenchmarkStats


def _round_tree(pid: int, inv: int, hid: str, host_t0: int, host_ns: int, dev_t0: int, dev_ns: int) -> TraceInvocation:
    return TraceInvocation(pid, inv, hid, [
        TraceSpan(pid, 0, inv, hid, 0, _HOST, host_t0, host_ns),
        TraceSpan(pid, 0, inv, hid, 1, _DEVICE, dev_t0, dev_ns, "clk=dev"),
    ])


def benchmark(compiled, args, *, rounds: int = 100, warmup: int = 3, platform: str | None = None,
              device_id: int | None = None, config=None) -> BenchmarkStats:
    """Run `compiled` with `args` `warmup` + `rounds` times and time each measured round.

    A worker is opened for the run (sync mode) and closed after; the program
    is registered once.

    Parameters
    ----------
    compiled
        A compiled program.
    args : sequence
        Its arguments: every parameter, or the inputs alone for a program
        that returns something (the outputs are then allocated once).  Host
        arrays are copied each round; pass host arrays, not DeviceTensors,
        which belong to another worker.
    rounds : int, optional
        Measured rounds (>= 1).
    warmup : int, optional
        Rounds run first and discarded (>= 0).
    platform : str, optional
        The worker's platform (default: the config's, else the program's).
    device_id : int, optional
        The worker's device (default: the config's).
    config : RunConfig or dict, optional
        The worker's config.

    Returns
    -------
    BenchmarkStats
    """
    import os

    if not is_int(rounds) or rounds < 1:
        raise PtoArgumentError(f"benchmark(): rounds must be an int >= 1, not {rounds!r}")
    if not is_int(warmup) or warmup < 0:
        raise PtoArgumentError(f"benchmark(): warmup must be an int >= 0, not {warmup!r}")
    cfg = RunConfig(platform=compiled.platform) if config is None else as_run_config(config)
    changes = {k: v for k, v in (("platform", platform), ("device_id", device_id)) if v is not None}
    if changes:
        cfg = cfg.replace(**changes)
    name = str(getattr(compiled, "name", None) or compiled.symbol)
    # Every parameter, or the inputs alone (return style: the outputs allocated once, reused).
    args, _ = complete_args(compiled.params, bool(getattr(compiled, "has_return", False)), tuple(args), name)
    hid = str(getattr(compiled, "symbol", name))
    pid = os.getpid()
    stats = BenchmarkStats(rounds=rounds, warmup=warmup, name=name)
    clock = time.perf_counter_ns
    with ChipWorker(cfg) as worker:
        handle = worker.register(compiled)
        for _ in range(warmup):
            handle(*args)
        for i in range(rounds):
            t0 = clock()
            launch = handle.submit(*args)
            launch.sync()
            t1 = clock()
            stats.host_wall_us.append((t1 - t0) / 1e3)
            stats.device_wall_us.append((launch._t1 - launch._t0) / 1e3)
            stats.invocations.append(_round_tree(pid, i, hid, t0, t1 - t0, launch._t0, launch._t1 - launch._t0))
    return stats
