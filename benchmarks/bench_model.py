"""Benchmark the device model's cost: host time with ``timing="model"`` beside ``timing="host"``.

The modeled clock runs in the driver where commands finish (native/src/model.c):
a few additions and a lock per command, block and task, and a list schedule per
program run.  Three figures, each against the same work with host timing.

Times are the process's CPU time (host and driver threads together), with the
process pinned to one CPU for the measurement (os.sched_setaffinity; the CPU
idlest over the moment before, so as not to share one that neighbours pinned
themselves to): the host thread and the driver's threads then take turns on
that CPU, so the figure is the work they did, not how a neighbour's load let
idle threads spin or sleep.  Each figure is measured in many rounds in one
process; a round runs the model, host timing and host timing again back to
back (the order rotating from round to round, the garbage collector held), so
a noisy stretch of the shared machine hits all three alike.  The figure is the
median over rounds of model / host within the round; beside it the A/A
control, the same median of host-again / host: the noise floor.  A figure is
only read as met or missed when its control is within 1-2% of 1.  The medians
of each mode's times are the rows' absolute figures; the fastest rounds and
the interquartile range of the per-round ratios are in the JSON.

1. ``per_launch``: host CPU time per launch of a one-block built-in kernel
   (``add_f32`` on 1 Ki elements), 2000 of them queued on one stream and
   synchronized, 121 rounds, through the raw driver (the least the runtime adds).
   Target: model at most 1.05x host.
2. ``per_task``: host CPU time per task of a program of 64 independent
   tasks run through a worker, 150 runs per round, 201 rounds.  Target: at
   most 1.05x.
3. ``per_task_resolved``: the same for a fork of 4,096 tasks whose count the
   orchestration reads when it runs (no compile-time table: the driver
   resolves the edges at submit, and with the modeled clock checks each task
   against the window's completed instances too, so that the graph it hands
   the model does not depend on the host's progress), 2 runs per round,
   121 rounds.  Target: at most 1.05x.

The rounds are many because the figures are a few percent on a shared
machine: at a load average of 4-8 on 2 CPUs a round's ratio spreads +-7%
(interquartile); the median of 61 rounds of the program task moved by up to
3% from one run of the benchmark to the next, of 300 by 1-2%.  Read a figure
within a percent or two of its target as neither met nor missed.

    python benchmarks/bench_model.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402
from pypto_async._driver import check, device_config, ffi, lib  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402
from pypto_async.runtime._profile import SIM  # noqa: E402

F = pl.FP32
TILE, NT = 8, 64
# CPU time of the whole process (the host thread and the driver's), not wall time: the modeled
# clock's cost is CPU work, and on a shared machine another process's load moves the wall clock
# by more than that work (idle driver threads spin at most 1 µs here: spin_us=1).
clock = time.process_time_ns


@pl.program
class Independent:
    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, x: pl.Tensor[[TILE, 32], F], y: pl.Out[pl.Tensor[[TILE, 32], F]]):
        pl.store(pl.load(x, [0, 0], [TILE, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[NT * TILE, 32], F], y: pl.Out[pl.Tensor[[NT * TILE, 32], F]]):
        for i in pl.range(NT):
            self.inc(x[i * TILE:(i + 1) * TILE], y[i * TILE:(i + 1) * TILE])
        return y


RT = 4096  # tasks of the table-less fork


@pl.program
class RuntimeFork:
    """Independent's tasks, their count read from a tensor when it runs: no compile-time table."""

    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, x: pl.Tensor[[TILE, 32], F], y: pl.Out[pl.Tensor[[TILE, 32], F]]):
        pl.store(pl.load(x, [0, 0], [TILE, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], x: pl.Tensor[[RT * TILE, 32], F],
             y: pl.Out[pl.Tensor[[RT * TILE, 32], F]]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            self.inc(pl.slice(x, [TILE, 32], [i * TILE, 0]), pl.slice(y, [TILE, 32], [i * TILE, 0]))
        return y


def _launch_round(modeled: bool, launches: int) -> float:
    """Host ns per launch: `launches` one-block adds on one stream, then a synchronize."""
    out = ffi.new("pto_device **")
    check(lib.pto_device_open(b"sim", device_config(cores=1, copy_engines=1, spin_us=1), out), "open")
    dev = out[0]
    try:
        if modeled:
            check(lib.pto_device_set_profile(dev, SIM._to_c()), "pto_device_set_profile")
        s = ffi.new("pto_stream **")
        check(lib.pto_stream_create(dev, 0, s), "stream")
        check(lib.pto_stream_set_overflow(s[0], 1), "overflow")
        k = ffi.new("pto_kernel **")
        check(lib.pto_kernel_builtin(dev, b"add_f32", k), "builtin")
        n = 1024
        buf = ffi.new("pto_devptr *")
        check(lib.pto_mem_alloc(dev, 4 * n, ffi.NULL, buf), "alloc")
        args = ffi.new("uint64_t[]", [buf[0], buf[0], buf[0], n])
        t0 = clock()
        for _ in range(launches):
            lib.pto_stream_launch(s[0], k[0], 1, args, 4, 0)
        check(lib.pto_stream_synchronize(s[0], 60_000_000), "sync")
        elapsed = clock() - t0
        lib.pto_stream_destroy(s[0])
        check(lib.pto_mem_free(dev, buf[0]), "free")
        return elapsed / launches
    finally:
        lib.pto_device_close(dev)


def _abba(a, b, flip: bool) -> tuple[float, float, float]:
    """One ABBA pass (BAAB when ``flip``): the ratio b / a of the two modes' sums, and each
    mode's mean.

    A drift of the machine's speed that is linear over the pass lands on both alike; each mode
    runs once first and once last.  Passes alternate ABBA and BAAB, so the first place of a
    pass (after the collector's sweep, which leaves the caches cold) and whatever the mode
    before leaves behind falls on each mode as often."""
    if flip:
        b1 = b()
        a1 = a()
        a2 = a()
        b2 = b()
    else:
        a1 = a()
        b1 = b()
        b2 = b()
        a2 = a()
    return (b1 + b2) / (a1 + a2), (a1 + a2) / 2, (b1 + b2) / 2


WARM_TOL, WARM_WINDOW, WARM_MAX = 0.02, 6, 60


def _measure(rounds: int, fns: dict) -> dict:
    """The figure model / host and the A/A control host-again / host, in one process.

    First warm-up: ABBA passes of the control (host, host again) until the median of its last
    ``WARM_WINDOW`` passes reads 1 +- ``WARM_TOL`` (at most ``WARM_MAX`` passes; the count and
    whether it got there are in the result).  Then ``rounds`` rounds, each an ABBA pass of the
    figure (host, model, model, host) and one of the control (host, again, again, host), the
    garbage collector held; the figure and the control are the medians of their per-round
    ratios.  A figure is read only beside a control within 1 +- ``WARM_TOL``.
    """
    host, model, again = fns["host"], fns["model"], fns["again"]
    enabled = gc.isenabled()
    gc.disable()  # a collection inside one mode's run would land on that mode alone
    try:
        warm: list[float] = []
        settled = False
        while len(warm) < WARM_MAX:
            gc.collect()
            warm.append(_abba(host, again, len(warm) % 2 == 1)[0])
            if len(warm) >= WARM_WINDOW and abs(statistics.median(warm[-WARM_WINDOW:]) - 1) <= WARM_TOL:
                settled = True
                break
        ratio, aa, t_model, t_host, t_again = [], [], [], [], []
        for i in range(rounds):
            gc.collect()
            r, h, m = _abba(host, model, i % 2 == 1)
            ratio.append(r), t_host.append(h), t_model.append(m)
            gc.collect()
            r, _, g = _abba(host, again, i % 2 == 0)
            aa.append(r), t_again.append(g)
    finally:
        if enabled:
            gc.enable()
    return {"ratio": ratio, "control": aa, "model": t_model, "host": t_host, "again": t_again,
            "warmup_rounds": len(warm), "warmed": settled}


def _figures(t: dict) -> dict:
    """The figure: the median over rounds of model / host within the round's ABBA pass; the A/A
    control: the same median of host-again / host (the noise floor the figure is read against).
    The medians of each mode's times and the spread of the per-round ratios (interquartile) are
    beside them."""
    ratio, aa = t["ratio"], t["control"]
    q = statistics.quantiles(ratio, n=4)
    qa = statistics.quantiles(aa, n=4)
    control = statistics.median(aa)
    return {"model_ns": statistics.median(t["model"]), "host_ns": statistics.median(t["host"]),
            "again_ns": statistics.median(t["again"]), "value": statistics.median(ratio),
            "control": control, "readable": abs(control - 1) <= WARM_TOL,
            "ratio_iqr": [q[0], q[2]], "control_iqr": [qa[0], qa[2]],
            "warmup_rounds": t["warmup_rounds"], "warmed": t["warmed"]}


def per_launch(rounds: int, launches: int) -> dict:
    """Host ns per launch with timing="model" against timing="host" (and host again: the control)."""
    t = _measure(rounds, {"model": lambda: _launch_round(True, launches),
                          "host": lambda: _launch_round(False, launches),
                          "again": lambda: _launch_round(False, launches)})
    return _figures(t) | {"launches": launches, "rounds": rounds}


def per_task(rounds: int, runs: int, resolved: bool = False) -> dict:
    """Host ns per program task; `resolved`: of RuntimeFork, whose edges the driver resolves at submit.

    Three workers (model, host, and a second host one: the A/A control), each its own device,
    the program registered and warmed on each."""
    c = ir.compile(RuntimeFork if resolved else Independent)
    n = RT if resolved else NT
    x = np.random.default_rng(0).standard_normal((n * TILE, 32)).astype(np.float32)
    timing = {"model": "model", "host": "host", "again": "host"}
    workers = {k: ChipWorker(RunConfig(timing=t, cores=1, copy_engines=1, spin_us=0)) for k, t in timing.items()}
    try:
        tensors = {}
        for t, w in workers.items():
            h = w.register(c)
            cfg = (w.alloc_tensor(1, np.int32, init=np.array([n], np.int32)),) if resolved else ()
            tensors[t] = (h, *cfg, w.alloc_tensor(x.shape, x.dtype, init=x), w.alloc_tensor(x.shape, x.dtype))
            h(*tensors[t][1:])  # warm

        def one(t):
            h, *args = tensors[t]
            t0 = clock()
            for _ in range(runs):
                h.submit(*args)
            workers[t].sync()
            return (clock() - t0) / (runs * n)

        times = _measure(rounds, {k: (lambda k=k: one(k)) for k in workers})
        for k in workers:
            np.testing.assert_array_equal(tensors[k][-1].numpy(), x + 1)
    finally:
        for w in workers.values():
            w.close()
    return _figures(times) | {"tasks": n, "runs": runs, "rounds": rounds}


_SAVED_AFFINITY: dict = {}


def _idle_ticks() -> dict[int, int]:
    """Each CPU's idle ticks so far (/proc/stat; empty where there is none)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        f = line.split()
        if f and f[0].startswith("cpu") and f[0][3:].isdigit() and len(f) > 5:
            out[int(f[0][3:])] = int(f[4]) + int(f[5])  # idle + iowait
    return out


def _pin() -> int | None:
    """Pin this process to one CPU it may use, the idlest over a moment (None where the platform
    cannot): see the module doc."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    _SAVED_AFFINITY["cpus"] = set(cpus)
    before = _idle_ticks()
    time.sleep(0.3)
    after = _idle_ticks()
    cpu = max(cpus, key=lambda c: (after.get(c, 0) - before.get(c, 0), c))
    os.sched_setaffinity(0, {cpu})
    return cpu


def _unpin(pinned: int | None) -> None:
    if pinned is not None and "cpus" in _SAVED_AFFINITY:
        os.sched_setaffinity(0, _SAVED_AFFINITY.pop("cpus"))


# -- the performance item: a fork of 48 equal tasks on a2a3, in modeled time ----------------

FT, FC, FN, FK = 64, 128, 48, 300


@pl.program
class Fork48:
    @pl.function(type=pl.FunctionType.InCore)
    def decay(self, x: pl.Tensor[[FT, FC], F], y: pl.Out[pl.Tensor[[FT, FC], F]]):
        t = pl.load(x, [0, 0], [FT, FC])
        for k in pl.range(FK):
            t = pl.exp(pl.mul(t, -1.0))
        pl.store(t, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[FN * FT, FC], F], y: pl.Out[pl.Tensor[[FN * FT, FC], F]]):
        for i in pl.range(FN):
            self.decay(x[i * FT:(i + 1) * FT, :], y[i * FT:(i + 1) * FT])
        return y


def fork48() -> dict:
    """The modeled wall of 48 equal independent tasks on a2a3's 48 AIVs, and one task plus its pickup.

    Each task does ~107 µs of counted work (a load, 300 rounds of exp(-t), a store).  Target: the
    wall within 10% of one task plus its pickup.  A modeled figure: the same in every run, whatever
    the host's load (submission is held until the program is queued).
    """
    from pypto_async.runtime._profile import A2A3
    from pypto_async.testing import hold

    x = np.random.default_rng(1).standard_normal((FN * FT, FC)).astype(np.float32)
    with ChipWorker(RunConfig(platform="a2a3sim")) as w:
        h = w.register(ir.compile(Fork48, platform="a2a3sim"))
        a, b = w.alloc_tensor(x.shape, x.dtype, init=x), w.alloc_tensor(x.shape, x.dtype)
        w.sync()
        with w.trace() as tr:
            with hold(w.default_stream) as latch:
                h.submit(a, b)
                latch.release()
            w.sync()
    (prog,) = [r for r in tr.trace.records if r.kind_name == "program"]
    tasks = [r for r in tr.trace.records if r.kind_name == "task"]
    one = tasks[0].end_ns - tasks[0].start_ns + round(A2A3.pickup_us * 1000)
    wall = prog.end_ns - prog.start_ns
    return {"wall_ns": wall, "one_ns": one, "value": wall / one, "tasks": len(tasks),
            "cores": len({t.engine for t in tasks})}


def _fork48_row(fk: dict) -> dict:
    return {"name": "modeled wall, fork of 48 tasks on a2a3", "figure": fk["wall_ns"] / 1e3, "unit": "us",
            "reference": fk["one_ns"] / 1e3, "reference_name": "one task + pickup", "ratio": fk["value"],
            "target": "<= 1.10", "ok": fk["value"] <= 1.10}


DEMO_SHAPE = (256, 1024, 16, 3)  # rows, cols, batches, depth: bench_host's demo, pypto-async demo's loop


def demo_bound(runs: int) -> dict:
    """The demo's modeled speed-up (serial over pipelined modeled device time) against its bound
    (serial time over its busiest engine's: compute and copy from the profile), run after run.
    Target: within 10% of the bound in every run.  A modeled figure: the host's load moves only
    the wall-clock speed-up printed beside it."""
    import asyncio
    import io
    import tempfile

    from pypto_async._demo import _demo

    shares, walls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            r = asyncio.run(_demo(*DEMO_SHAPE, Path(tmp) / str(i), io.StringIO(), False))
            m = r.model
            shares.append(m["serial_ns"] / m["pipelined_ns"] / m["bound"])
            walls.append(r.serial_s / r.pipelined_s)
    return {"runs": runs, "bound": m["bound"], "share_min": min(shares), "share_max": max(shares),
            "within": sum(0.9 <= x <= 1.0001 for x in shares), "wall_speedup_median": statistics.median(walls)}


def _demo_row(d: dict) -> dict:
    return {"name": f"demo's modeled speed-up / its bound {d['bound']:.2f}x, worst of {d['runs']} runs "
                    f"(within 10% in {d['within']} of {d['runs']}; wall speed-up median {d['wall_speedup_median']:.2f}x)",
            "figure": d["share_min"], "unit": "x", "reference": None, "reference_name": "", "ratio": None,
            "target": ">= 0.90 in every run", "ok": d["within"] == d["runs"]}


_FIGURES = (("per_launch", "host time per launch"), ("per_task", "host time per program task"),
            ("per_task_resolved", "host time per table-less program task"))


def _rows(results: dict) -> list[dict]:
    """Each figure's row, its A/A control beside it, then the controls' own rows.  A figure is
    marked met or missed only where its control reads 1 +- WARM_TOL; otherwise it is unread."""
    rows = []
    for key, name in _FIGURES:
        r = results[key]
        ok = (r["value"] <= 1.05) if r["readable"] else None
        rows.append({"name": f"{name}, timing=model (A/A control {r['control']:.3f})", "figure": r["model_ns"] / 1e3,
                     "unit": "us", "reference": r["host_ns"] / 1e3, "reference_name": "timing=host",
                     "ratio": r["value"], "control": r["control"], "target": "<= 1.05", "ok": ok})
    for key, name in _FIGURES:
        r = results[key]
        rows.append({"name": f"A/A control: {name}, host again", "figure": r["again_ns"] / 1e3, "unit": "us",
                     "reference": r["host_ns"] / 1e3, "reference_name": "timing=host", "ratio": r["control"],
                     "target": f"1 +- {WARM_TOL}", "ok": r["readable"]})
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    q = args.quick
    pinned = _pin()
    try:
        results: dict = {"config": {"profile": SIM.name, "pinned_cpu": pinned,
                                    "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}}
        results["per_launch"] = per_launch(5 if q else 121, 500 if q else 2000)
        results["per_task"] = per_task(5 if q else 201, 5 if q else 150)
        results["per_task_resolved"] = per_task(5 if q else 121, 1 if q else 2, resolved=True)
    finally:
        _unpin(pinned)
    results["rows"] = _rows(results)
    results["fork48"] = fk = fork48()
    results["rows"].append(_fork48_row(fk))
    results["demo_bound"] = d = demo_bound(2 if q else 5)
    results["rows"].append(_demo_row(d))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results["rows"]:
            if row["reference"] is None:
                print(f"{row['name']:56s} {row['figure']:8.3f} {row['unit']}  (target {row['target']})")
                continue
            print(f"{row['name']:56s} {row['figure']:8.3f} {row['unit']}  vs {row['reference_name']} "
                  f"{row['reference']:.3f}: ratio {row['ratio']:.3f}  (target {row.get('target', '-')})"
                  + ("" if row.get("ok", True) is not None else "  [unread: control off 1]"))
    return results


if __name__ == "__main__":
    main()
