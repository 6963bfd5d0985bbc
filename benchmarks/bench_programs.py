"""Benchmark programs (task graphs run on the device) against references measured in the same run.

Three figures, each beside its reference, medians over rounds that take
turns with the reference's rounds (a noisy stretch of a shared machine hits
both alike):

1. ``host_time``: a program of 64 small independent tasks, submitted as one
   launch, against 64 eager launches of the same kernel on the same tiles:
   the host's work in the submission calls (the device then runs both).
   Figure: eager host time over the program's.  Target: at least 10x.  The
   host's work is the submitting thread's CPU time (``time.thread_time_ns``)
   on a worker with ``host_first="off"``: under the default ``"auto"``, with
   no CPU spare for a device thread (a loaded machine), each eager submit
   runs its kernel itself, inside the call, while the program's start is
   left to the scheduler thread, whose wake-up takes the submitting
   thread's CPU (its wall time grows by the scheduler's turn, its CPU time
   does not): the wall times compare the kernels' and a wake-up's, not the
   submissions'.  Beside it, for the record: the wall times on that worker
   (``program_wall_us``, ``eager_wall_us``) and on a default worker
   (``default_*``).
2. ``dispatch_us``: the device's dispatch cost per task, from the trace: in a
   chain of 64 tasks, each from its predecessor's end to its own start
   (median).  Reference: the driver's back-to-back completion latency, the
   same gap between 64 launches queued back to back on one stream.
3. ``fork_join``: a fork, four equal middle tasks and a join on 2 cores:
   the program's wall time (its trace record) over the serial sum of its
   tasks' times.  Target: at most 0.6.  Beside it, ``diamond``: the 1-2-1
   diamond of four equal tasks, whose critical path is three of them (0.75
   at best on any number of cores).

torch is imported when installed, as the runtime's users do.

    python benchmarks/bench_programs.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pypto_async.language as pl  # noqa: E402
from pypto_async import ir  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402

try:
    import torch  # noqa: E402, F401

    TORCH = torch.__version__
except ImportError:
    TORCH = None

F = pl.FP32
TILE, NT = 8, 64
W = 256  # the width of the fork-join's tiles: each task's work
clock = time.perf_counter_ns
cpu_clock = time.thread_time_ns  # the submitting thread's own CPU time


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


@pl.jit
def inc_kernel(x: pl.Tensor, y: pl.Out[pl.Tensor]):
    pl.store(pl.load(x, [0, 0], [TILE, 32]) + 1.0, [0, 0], y)


@pl.program
class ChainOf64:
    @pl.function(type=pl.FunctionType.InCore)
    def step(self, y: pl.InOut[pl.Tensor[[TILE, 32], F]]):
        pl.store(pl.load(y, [0, 0], [TILE, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, y: pl.InOut[pl.Tensor[[TILE, 32], F]]):
        for _ in pl.range(NT):
            self.step(y)
        return y


def _work(t):
    """Equal work for every task of the fork-join and the diamond: a few passes of exp and a multiply."""
    for _ in range(4):
        t = pl.exp(t * 0.5)
    return t


@pl.program
class ForkJoin:
    @pl.function(type=pl.FunctionType.InCore)
    def fork(self, a: pl.Tensor[[W, W], F], s: pl.Out[pl.Tensor[[W, W], F]]):
        pl.store(pl.load(a, [0, 0], [W, W]) + 1.0, [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def middle(self, s: pl.Tensor[[W, W], F], o: pl.Out[pl.Tensor[[W, W], F]]):
        pl.store(_work(pl.load(s, [0, 0], [W, W])), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.InCore)
    def join(self, o: pl.Tensor[[4 * W, W], F], out: pl.Out[pl.Tensor[[1, 8], F]]):
        t = pl.load(o, [0, 0], [1, 8])
        for i in range(1, 4):
            t = t + pl.load(o, [i * W, 0], [1, 8])
        pl.store(t, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, a: pl.Tensor[[W, W], F], out: pl.Out[pl.Tensor[[1, 8], F]]):
        s = self.fork(a, pl.create_tensor([W, W], F))
        o = pl.create_tensor([4 * W, W], F)
        for i in range(4):
            self.middle(s, o[i * W:(i + 1) * W])
        self.join(o, out)
        return out


@pl.program
class Diamond:
    @pl.function(type=pl.FunctionType.InCore)
    def task(self, a: pl.Tensor[[W, W], F], o: pl.Out[pl.Tensor[[W, W], F]]):
        pl.store(_work(pl.load(a, [0, 0], [W, W])), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.InCore)
    def task2(self, a: pl.Tensor[[W, W], F], b: pl.Tensor[[W, W], F], o: pl.Out[pl.Tensor[[W, W], F]]):
        pl.store(_work(pl.load(a, [0, 0], [W, W])) + pl.load(b, [0, 0], [W, W]), [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[W, W], F], out: pl.Out[pl.Tensor[[W, W], F]]):
        top = self.task(x, pl.create_tensor([W, W], F))
        left = self.task(top, pl.create_tensor([W, W], F))
        right = self.task2(x, top, pl.create_tensor([W, W], F))
        self.task2(left, right, out)
        return out


def _host_samples(rounds: int, config: RunConfig) -> dict:
    """Medians, in µs, of one program submission and of 64 eager submits: thread CPU and wall."""
    prog = ir.compile(Independent)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((NT * TILE, 32)).astype(np.float32)
    tile = np.zeros((TILE, 32), np.float32)
    kern = inc_kernel.compile(tile, tile)
    s: dict = {k: [] for k in ("program_cpu", "program_wall", "eager_cpu", "eager_wall")}
    with ChipWorker(config) as w:
        hp, hk = w.register(prog), w.register(kern)
        dx = w.alloc_tensor(x.shape, F, init=x)
        dy = w.alloc_tensor(x.shape, F)
        xs = [w.alloc_tensor((TILE, 32), F, init=x[i * TILE:(i + 1) * TILE]) for i in range(NT)]
        ys = [w.alloc_tensor((TILE, 32), F) for _ in range(NT)]
        for r in range(rounds + 2):  # two warm-up rounds
            t0, c0 = clock(), cpu_clock()
            last = hp.submit(dx, dy)
            c1, t1 = cpu_clock(), clock()
            last.sync()
            t2, c2 = clock(), cpu_clock()
            for a, b in zip(xs, ys):
                last = hk.submit(a, b)
            c3, t3 = cpu_clock(), clock()
            last.sync()
            if r >= 2:
                s["program_cpu"].append((c1 - c0) / 1000)
                s["program_wall"].append((t1 - t0) / 1000)
                s["eager_cpu"].append((c3 - c2) / 1000)
                s["eager_wall"].append((t3 - t2) / 1000)
        np.testing.assert_array_equal(dy.numpy(), x + 1)
    return {k: statistics.median(v) for k, v in s.items()}


def host_time(rounds: int) -> dict:
    off = _host_samples(rounds, RunConfig(cores=2, host_first="off"))
    default = _host_samples(rounds, RunConfig(cores=2))
    p, e = off["program_cpu"], off["eager_cpu"]
    return {"value": e / p, "program_host_us": p, "eager_host_us": e,
            "program_wall_us": off["program_wall"], "eager_wall_us": off["eager_wall"],
            "default_program_wall_us": default["program_wall"], "default_eager_wall_us": default["eager_wall"],
            "default_program_cpu_us": default["program_cpu"], "default_eager_cpu_us": default["eager_cpu"]}


def _gaps(records) -> list[float]:
    records = sorted(records, key=lambda r: r.start_ns)
    return [(b.start_ns - a.end_ns) / 1000 for a, b in zip(records, records[1:])]


def dispatch(rounds: int) -> dict:
    prog = ir.compile(ChainOf64)
    tile = np.zeros((TILE, 32), np.float32)
    kern = ir.compile(inc_kernel.lower(tile, tile))
    task_gaps, launch_gaps = [], []
    with ChipWorker(RunConfig(cores=2)) as w:
        hp, hk = w.register(prog), w.register(kern)
        y = w.alloc_tensor((TILE, 32), F, init=tile)
        a = w.alloc_tensor((TILE, 32), F, init=tile)
        for r in range(rounds + 1):
            with w.trace() as tr:
                hp(y)
            with w.trace() as tl:
                for _ in range(NT):
                    last = hk.submit(a, y)
                last.sync()
            if r:
                task_gaps += _gaps([x for x in tr.trace.records if x.kind_name == "task"])
                launch_gaps += _gaps([x for x in tl.trace.records if x.kind_name == "launch"])
    t, lg = statistics.median(task_gaps), statistics.median(launch_gaps)
    return {"value": t, "back_to_back_launch_us": lg, "ratio": t / lg}


def _wall_over_serial(compiled, args, rounds: int) -> dict:
    ratios, walls, sums = [], [], []
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(compiled)
        dargs = [w.alloc_tensor(a.shape, F, init=a) for a in args]
        for r in range(rounds + 1):
            with w.trace() as tr:
                h(*dargs)
            if not r:
                continue
            recs = tr.trace.records
            prog = next(x for x in recs if x.kind_name == "program")
            serial = sum(x.end_ns - x.start_ns for x in recs if x.kind_name == "task")
            wall = prog.end_ns - prog.start_ns
            ratios.append(wall / serial)
            walls.append(wall / 1000)
            sums.append(serial / 1000)
    return {"value": statistics.median(ratios), "wall_us": statistics.median(walls),
            "serial_sum_us": statistics.median(sums)}


def fork_join(rounds: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((W, W)).astype(np.float32)
    fj = _wall_over_serial(ir.compile(ForkJoin), [a, np.zeros((1, 8), np.float32)], rounds)
    dm = _wall_over_serial(ir.compile(Diamond), [a, np.zeros((W, W), np.float32)], rounds)
    return fj, dm


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 30
    results: dict = {"config": {"torch": TORCH, "tasks": NT}}
    results["host_time"] = host_time(rounds)
    results["dispatch_us"] = dispatch(max(1, rounds // 3))
    results["fork_join"], results["diamond"] = fork_join(max(1, rounds // 3))
    ht, dp, fj, dm = (results[k] for k in ("host_time", "dispatch_us", "fork_join", "diamond"))
    results["rows"] = [
        {"name": "program host time vs 64 eager launches", "figure": ht["program_host_us"], "unit": "us",
         "reference": ht["eager_host_us"], "reference_name": "64 eager submits; thread CPU, host_first off", "ratio": ht["value"],
         "target": ">= 10x", "ok": ht["value"] >= 10},
        {"name": "device dispatch per task (chain)", "figure": dp["value"], "unit": "us",
         "reference": dp["back_to_back_launch_us"], "reference_name": "back-to-back launches",
         "ratio": dp["ratio"]},
        {"name": "fork-join of 4 equal tasks, 2 cores", "figure": fj["wall_us"], "unit": "us",
         "reference": fj["serial_sum_us"], "reference_name": "serial sum", "ratio": fj["value"],
         "target": "<= 0.6", "ok": fj["value"] <= 0.6},
        {"name": "diamond 1-2-1, 2 cores", "figure": dm["wall_us"], "unit": "us",
         "reference": dm["serial_sum_us"], "reference_name": "serial sum", "ratio": dm["value"],
         "target": "0.75 at best"},
    ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"torch imported: {TORCH or 'no (not installed)'}")
        for row in results["rows"]:
            print(f"{row['name']:42s} {row['figure']:10.2f} {row['unit']}  vs {row['reference_name']} "
                  f"{row['reference']:.2f}: ratio {row['ratio']:.3f}  (target {row.get('target', '-')})")
    return results


if __name__ == "__main__":
    main()
