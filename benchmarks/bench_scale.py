"""Benchmark how costs grow with the population of idle objects and with the size of the work.

Each curve is printed at 1, 10, 100, 1k, 10k (100k where it fits) as a
ratio to its first point, all measured in one process (medians over rounds):

``launch @ idle streams``
    The cost per launch of the empty kernel (pipelined on one stream, then
    one sync: host and device together) with N idle streams open, in many
    short paired rounds beside a second worker that has none (the median of
    the per-round ratios, with its 95% interval, is the figure: the
    machine's noise cancels) and a third that has none either (the A/A
    control, printed beside it; see ``_Paired``).  Target: at 10,000 at most
    1.2x with one.  Beside it, the memory one idle stream
    costs (the process's resident set over 10,000 of them, driver and
    runtime together) and the driver's count of allocated rings (an idle
    stream has none).
``launch @ live tensors`` / ``launch @ live events``
    The same launch cost with N live DeviceTensors, or N recorded events
    held alive, measured the same way.  Target: at 100,000 at most 1.1x.
``alloc/free @ live allocations``
    A driver ``pto_mem_alloc`` + ``pto_mem_free`` pair with N live
    allocations (every other one freed, so the free space is fragmented).
    Target: at 100,000 at most 1.5x with 10.  Rounds take turns with a
    second device that keeps 10; the cffi call overhead is in every point
    alike.
``compile per task``
    ``ir.compile`` time per task of a program of N independent row tasks
    (C compiler included, a fresh kernel cache each time).  Target: per
    task at 4,096 at most 2x per task at 512.
``parallel program``
    A program of 20,000 independent tasks, each held 100 µs on its core
    (``pypto_async.testing.delay_task``), on 2 cores: its wall time over the
    serial sum of its tasks' delays.  Target: at most 0.6.  Beside it, the
    wall time over the same program's on 1 core (a loaded host oversleeps
    100 µs sleeps, which the nominal serial sum does not count).

torch is imported when installed, as the runtime's users do.  The load
average is printed first: the figures of a busy machine are noisier.

    python benchmarks/bench_scale.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

if importlib.util.find_spec("torch") is not None:
    import torch  # noqa: F401  (the runtime's users import it)

from helpers.kernels import KernelLib  # noqa: E402

import pypto_async.language as pl  # noqa: E402
from pypto_async._bench import median_ci, paired_rounds  # noqa: E402
from pypto_async._driver import check, ffi  # noqa: E402
from pypto_async._driver import lib as driver  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402
from pypto_async.testing import delay_task  # noqa: E402

DEVICE = {"cores": 2, "copy_engines": 1, "device_memory": 256 << 20}


def _rss() -> int:
    """The resident set now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _launch_once(noop, t, stream, n: int) -> tuple[float, float]:
    """µs per launch, wall and the submitting thread's CPU: n pipelined empty launches on `stream`, then a sync."""
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        noop.submit(t, stream=stream)
    stream.sync()
    return (time.perf_counter_ns() - t0) / n / 1e3, (time.thread_time_ns() - c0) / n / 1e3


class _Paired:
    """Launch cost on a populated worker, in short paired rounds beside a reference worker and an A/A control.

    Three workers alike but for the population: the populated one, the
    reference (none) and the control (none either).  Each point is
    ``pypto_async._bench.paired_rounds`` over the three: many short rounds,
    the order turning each round, the collector on while a side is timed (the
    young collections a launch pays are part of what a population may cost)
    and a full collection every 20 rounds, untimed, not before each side.  A point's figure is the
    median of the per-round ratios populated / reference, with its 95%
    interval; the control's median ratio control / reference beside it reads
    1.0 within the method's resolution.  The curve is the figure over its
    first point's.  The populated worker's own µs per launch (wall, and the
    submitting thread's CPU) is kept beside it.
    """

    def __init__(self, kl, n: int, rounds: int):
        self.n, self.rounds = n, rounds
        self.sides = {}
        for name, seed in (("populated", 1), ("reference", 2), ("control", 3)):
            w = ChipWorker(RunConfig(**DEVICE))
            noop = w.register(kl.get("noop", 16))
            t = w.alloc_tensor(16, np.float32,
                               init=np.random.default_rng(seed).standard_normal(16).astype(np.float32))
            self.sides[name] = (w, noop, t, w.stream())
        for _, noop, t, s in self.sides.values():
            _launch_once(noop, t, s, n)  # warm up

    @property
    def worker(self):
        return self.sides["populated"][0]

    def measure(self) -> tuple[float, ...]:
        """(ratio, µs, cpu µs, ratio's 95% low, high, control's ratio, its low, high) at the population now."""
        sides = {k: v[1:] for k, v in self.sides.items()}
        for side in sides.values():  # the population just grew: its first round is not the figure's
            _launch_once(*side, self.n)
        r = paired_rounds(sides, lambda side: _launch_once(*side, self.n), self.rounds, collector_timed=True)
        pop, ref, ctl = ([wall for wall, _ in r[k]] for k in ("populated", "reference", "control"))
        ratio = median_ci(a / b for a, b in zip(pop, ref))
        control = median_ci(c / b for c, b in zip(ctl, ref))
        return (ratio[0], statistics.median(pop), statistics.median(c for _, c in r["populated"]),
                *ratio[1:], *control)

    def close(self) -> None:
        for w, _, t, s in self.sides.values():
            t.free()
            w.close()


def _curve(points: list[int], grow, measure) -> list[tuple]:
    """Grow the population to each point in turn (grow(k): add k), measure there: (point, *measure())."""
    have, out = 0, []
    for p in points:
        grow(p - have)
        have = p
        out.append((p, *measure()))
    return out


def launch_curves(points: list[int], big: list[int], n: int, rounds: int) -> dict:
    kl = KernelLib(tempfile.mkdtemp(prefix="bench_scale_"))
    res = {}
    # idle streams
    pair = _Paired(kl, n, rounds)
    w = pair.worker
    idle = []
    res["launch @ idle streams"] = _curve(points, lambda k: idle.extend(w.stream() for _ in range(k)), pair.measure)
    gc.collect()
    before = _rss()
    more = [w.stream() for _ in range(10_000)]
    gc.collect()
    res["bytes per idle stream"] = (_rss() - before) / len(more)
    st = ffi.new("pto_device_stats *")
    check(driver.pto_device_get_stats(w._queue.dev, st))
    res["streams open / rings allocated"] = (int(st.streams), int(st.rings_allocated))
    for x in idle + more:
        x.close()
    pair.close()
    # live tensors, live events
    pair = _Paired(kl, n, rounds)
    w = pair.worker
    aux = w.stream()
    tensors, events = [], []
    res["launch @ live tensors"] = _curve(
        big, lambda k: tensors.extend(w.alloc_tensor(16, np.float32, stream=aux) for _ in range(k)), pair.measure)
    for x in tensors:
        x.free()
    tensors.clear()
    w.sync()

    def record(k):
        events.extend(aux.record() for _ in range(k))
        aux.sync()

    res["launch @ live events"] = _curve(big, record, pair.measure)
    events.clear()
    pair.close()
    return res


def alloc_curve(points: list[int], pairs: int, rounds: int) -> list[tuple[int, float, float]]:
    """(n, ratio, µs) per alloc + free pair with n live allocations, paired against a device with 10."""
    from helpers import close_device, open_device

    out = ffi.new("pto_devptr *")
    alloc, free = driver.pto_mem_alloc, driver.pto_mem_free

    def populate(dev, n):
        live = []
        for i in range(2 * n):
            check(alloc(dev, 256 * (1 + i % 3), ffi.NULL, out))
            live.append(out[0])
        for p in live[::2]:  # n live allocations, with holes between them
            check(free(dev, p))
        return live[1::2]

    def once(dev):
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            alloc(dev, 512, ffi.NULL, out)
            free(dev, out[0])
        return (time.perf_counter_ns() - t0) / pairs / 1e3

    ref = open_device(device_memory=1 << 30)
    dev = open_device(device_memory=1 << 30)
    res = []
    try:
        ref_live = populate(ref, 10)
        for n in points:
            live = populate(dev, n)
            ratios, us = [], []
            for _ in range(rounds):
                a, b = once(dev), once(ref)
                ratios.append(a / b)
                us.append(a)
            for p in live:
                check(free(dev, p))
            res.append((n, statistics.median(ratios), statistics.median(us)))
        for p in ref_live:
            check(free(ref, p))
    finally:
        close_device(dev)
        close_device(ref)
    return res


def _rows(n: int, scale: float):
    @pl.jit
    def rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="row"):
                pl.store(pl.load(x, [i, 0], [1, 8]) * scale, [i, 0], y)

    return rows


def compile_curve(points: list[int], rounds: int) -> list[tuple[int, float]]:
    """µs per task of ir.compile for n independent row tasks, a fresh cache each time."""
    res = []
    old = os.environ.get("PYPTO_ASYNC_CACHE_DIR")
    try:
        for n in points:
            x = np.ones((n, 8), np.float32)
            ts = []
            for r in range(rounds):
                os.environ["PYPTO_ASYNC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_scale_cache_")
                t0 = time.perf_counter()
                _rows(n, 2.0 + r).compile(x, np.empty_like(x))
                ts.append((time.perf_counter() - t0) / n * 1e6)
            res.append((n, statistics.median(ts)))
    finally:
        if old is None:
            os.environ.pop("PYPTO_ASYNC_CACHE_DIR", None)
        else:
            os.environ["PYPTO_ASYNC_CACHE_DIR"] = old
    return res


def _run_program(c, x, cores: int, delay_s: float) -> float:
    with ChipWorker(RunConfig(cores=cores, device_memory=64 << 20)) as w:
        h = w.register(c)
        y = np.full_like(x, np.nan)
        h(x, y)  # warm up (no delay)
        delay_task(h, "row", delay_s)
        y = np.full_like(x, np.nan)
        t0 = time.perf_counter()
        h(x, y)
        wall = time.perf_counter() - t0
    np.testing.assert_array_equal(y, x * 2)
    return wall


def parallel_program(n: int, delay_s: float) -> dict:
    """Wall time on 2 cores over the serial sum: n x the delay, and the same program run on 1 core."""
    x = np.random.default_rng(3).standard_normal((n, 8)).astype(np.float32)
    c = _rows(n, 2.0).compile(x, np.empty_like(x))
    edges = None if c.task_graph is None else len(c.task_graph.edges)
    one = _run_program(c, x, 1, delay_s)  # the tasks one after another, as they really take
    two = _run_program(c, x, 2, delay_s)
    serial = n * delay_s
    return {"tasks": n, "edges": edges, "wall_s": two, "serial_s": serial, "ratio": two / serial,
            "one_core_s": one, "ratio_to_one_core": two / one}


def _ratios(curve):
    """(point, µs, ratio to the first point, cpu µs, 95% low, high, control's ratio to its first point).

    From (point, µs) or (point, ratio, µs) (the last four None), or a paired
    launch curve's (point, ratio, µs, cpu µs, low, high, control, low, high).
    """
    if len(curve[0]) == 2:
        base = curve[0][1]
        return [(p, v, v / base, None, None, None, None) for p, v in curve]
    base = curve[0][1]
    if len(curve[0]) == 3:
        return [(p, us, r / base, None, None, None, None) for p, r, us in curve]
    cbase = curve[0][6]
    return [(p, us, r / base, cpu, lo / base, hi / base, c / cbase) for p, r, us, cpu, lo, hi, c, *_ in curve]


def _table_rows(out, figures, targets, comp, ref, pp) -> list[dict]:
    """The figures as ``pypto-async bench`` table rows (each a ratio to its curve's first point)."""
    rows = []
    for name, (at, limit) in targets.items():
        point = next((r for r in figures[name] if r[0] == at), figures[name][-1])
        rows.append({"name": f"{name}: {point[0]:,} vs {figures[name][0][0]:,}", "figure": point[2], "unit": "x",
                     "target": f"≤ {limit:g}x", "ok": point[2] <= limit})
        if point[4] is not None:
            rows[-1]["ci"] = [point[4], point[5]]
            rows.append({"name": f"A/A control, {name}: {point[0]:,} vs {figures[name][0][0]:,} "
                                 "(a second worker with none, the same rounds)", "figure": point[6], "unit": "x"})
    at = dict(comp)
    if 4096 in at:
        r = at[4096] / ref
        rows.append({"name": "compile per task: 4,096 tasks vs 512", "figure": r, "unit": "x",
                     "target": "≤ 2x", "ok": r <= 2.0})
    rows.append({"name": f"{pp['tasks']:,} independent 100 µs tasks on 2 cores: wall / serial sum",
                 "figure": pp["ratio"], "unit": "x", "target": "≤ 0.6", "ok": pp["ratio"] <= 0.6})
    rows.append({"name": "memory per idle stream", "figure": out["bytes per idle stream"] / 1024, "unit": "KiB"})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small populations and rounds (a smoke run)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    q = args.quick
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
          f"{' (quick)' if q else ''}")
    points = [1, 10, 100] if q else [1, 10, 100, 1_000, 10_000]
    big = [1, 10, 100] if q else [1, 10, 100, 1_000, 10_000, 100_000]
    out: dict = launch_curves(points, big, 64 if q else 200, 8 if q else 150)
    out["alloc/free @ live allocations"] = alloc_curve([10, 100, 1000] if q else [10, 100, 1_000, 10_000, 100_000],
                                                       500 if q else 2000, 3 if q else 15)
    out["compile per task"] = compile_curve([64, 128] if q else [64, 512, 1024, 4096], 1 if q else 3)
    out["parallel program"] = parallel_program(500 if q else 20_000, 100e-6)

    targets = {"launch @ idle streams": (10_000, 1.2), "launch @ live tensors": (100_000, 1.1),
               "launch @ live events": (100_000, 1.1), "alloc/free @ live allocations": (100_000, 1.5)}
    figures = {}
    for name in ("launch @ idle streams", "launch @ live tensors", "launch @ live events",
                 "alloc/free @ live allocations"):
        rows = _ratios(out[name])
        at, limit = targets[name]
        print(f"{name} (µs; ratio to the first point; target at {at:,}: <= {limit}x)")
        for p, v, r, cpu, lo, hi, ctl in rows:
            extra = "" if cpu is None else (f" (95% CI {lo:.3f} .. {hi:.3f})   A/A control {ctl:5.3f}x   "
                                            f"submitting thread's CPU {cpu:7.3f} µs")
            print(f"  {p:>7,}  {v:9.3f}  {r:6.3f}x{extra}")
        figures[name] = rows
    print(f"memory per idle stream: {out['bytes per idle stream'] / 1024:.1f} KiB "
          f"(streams open, rings allocated: {out['streams open / rings allocated']})")
    comp = out["compile per task"]
    print("compile per task (µs; ratio to 512 tasks' per-task time; target at 4,096: <= 2x)")
    ref = dict(comp).get(512, comp[0][1])
    for p, v in comp:
        print(f"  {p:>7,}  {v:9.1f}  {v / ref:6.2f}x")
    pp = out["parallel program"]
    print(f"parallel program: {pp['tasks']:,} independent tasks of 100 µs on 2 cores, {pp['edges']} edges: "
          f"wall {pp['wall_s']:.3f} s over serial {pp['serial_s']:.3f} s = {pp['ratio']:.2f} (target <= 0.6); "
          f"over the same program on 1 core ({pp['one_core_s']:.3f} s: what the tasks really take, sleep "
          f"overshoot included) = {pp['ratio_to_one_core']:.2f}")
    if args.json:
        rows = _table_rows(out, figures, targets, comp, ref, pp)
        Path(args.json).write_text(json.dumps({"load": load, "quick": q, "rows": rows, **out},
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
