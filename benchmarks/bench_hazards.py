"""Benchmark automatic ordering of DeviceTensors across streams, and the sanitizer.

Three figures, each beside its reference measured in the same process, in
rounds that take turns (medians over rounds, µs per launch).  Each is the
host's cost of queueing the launches (every stream's overflow takes them at
once, so the loop never waits for the device); the sync after it is not
timed:

``single stream``
    ``h.submit(t)`` of the empty kernel on one DeviceTensor, pipelined on one
    stream, then one sync: what ``auto_deps=True`` (the default) adds over
    ``auto_deps=False``, in the submitting thread's CPU time (the wall time
    beside it), the median of the differences of 400 short paired rounds of
    its own, printed with its 95% confidence interval and an A/A control (a
    second ``auto_deps=False`` worker in the same rounds).  Target: at most
    0.05 µs per launch.
``crossing streams``
    The same launches alternating between two streams on the same tensor,
    so that every launch must wait for the one before (write after write):
    what automatic ordering (an event recorded and waited for per launch)
    adds over ``auto_deps=False`` with no waits at all (unordered).  Target:
    at most 0.6 µs per launch.  The same program with the waits written by
    hand (``s.wait(other)``) is reported beside it.
    The submitting thread's CPU time is reported beside it.  The unordered
    reference runs the two streams' kernels side by side on the simulated
    device, whose threads share the host's two cores; ordered, they run one
    after the other, and compete less with the submitting thread.  So the
    host's own work is reported too, measured with both streams held on the
    device (a latch each) while the launches are queued: nothing runs,
    nothing competes (target: at most 0.3 µs per launch).  So is the floor under the figure: the same
    launches made straight through the driver (no runtime, no completion
    records), as plain launches and as ``pto_stream_launch_after``, the
    driver call that queues an inferred edge with its launch.
``sanitizer``
    The cost per launch of ``sanitize="raise"`` (no target: a debugging
    mode), on one stream, and crossing streams with the waits written by hand.
``a write after M readers``
    M streams each read a DeviceTensor (``scale(t, 1.0, out_i)``), then one
    launch writes it on another stream: it must wait for all M reads (WAR).
    The write's stream is held on the device meanwhile, so the figure is
    the host's work alone (not a scheduler pass for an idle stream).  The
    figure is the submitting thread's CPU time for queueing that one
    write (µs), for M = 1, 100 and 1,000, and beside it the driver's
    decision alone (``pto_hazards_order``) at M = 1,000: the rest is
    queueing the M edges (fences and one wait).  Target: at most 100 µs at
    M = 1,000.

torch is imported when installed, as the runtime's users do (its objects
weigh on the cyclic GC, the references' as much as the figures').

    python benchmarks/bench_hazards.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
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

from pypto_async._bench import median_ci, paired_rounds  # noqa: E402
from pypto_async._driver import check, ffi  # noqa: E402
from pypto_async._driver import lib as driver  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402
from pypto_async.testing import hold  # noqa: E402

# Rings that hold a whole round (launches, records and waits): a sync-mode submit() returns once
# its launch is in the ring, so a round that overflowed would time the device, not the host.
DEVICE = {"cores": 2, "copy_engines": 1, "device_memory": 16 << 20, "ring_task_window": 16384,
          "ring_heap": 1 << 20, "ring_dep_pool": 16384}


def _single(w, noop, t, n: int) -> tuple[float, float]:
    s = w.default_stream
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        noop.submit(t, stream=s)
    dt = time.perf_counter_ns() - t0  # the host's cost: the ring's overflow takes every launch at once
    dc = time.thread_time_ns() - c0
    w.sync()
    return dt / n / 1e3, dc / n / 1e3


def _crossing(w, noop, t, n: int, s1, s2, explicit: bool) -> tuple[float, float]:
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    if explicit:
        for _ in range(n // 2):
            s1.wait(s2)
            noop.submit(t, stream=s1)
            s2.wait(s1)
            noop.submit(t, stream=s2)
    else:
        for _ in range(n // 2):
            noop.submit(t, stream=s1)
            noop.submit(t, stream=s2)
    dt = time.perf_counter_ns() - t0
    dc = time.thread_time_ns() - c0
    w.sync()
    return dt / n / 1e3, dc / n / 1e3


def _crossing_held(w, noop, t, n: int, s1, s2) -> tuple[float, float]:
    """The crossing launches queued with both streams held on the device: the host's work alone."""
    with hold(s1, timeout=60) as l1, hold(s2, timeout=60) as l2:
        c0 = time.thread_time_ns()
        for _ in range(n // 2):
            noop.submit(t, stream=s1)
            noop.submit(t, stream=s2)
        dc = time.thread_time_ns() - c0
        l1.release()
        l2.release()
    w.sync()
    return dc / n / 1e3, dc / n / 1e3


def _driver_only(w, noop, t, n: int, s1, s2, events, edges: bool) -> float:
    """The crossing launches queued straight through the driver: what the driver alone costs."""
    launch, kptr, blocks, values = noop._launch, noop._kptr, noop._blocks, [t._ptr]
    after = driver.pto_stream_launch_after
    p1, p2 = s1._ptr, s2._ptr
    e1, e2 = events
    c0 = time.thread_time_ns()
    if edges:
        for _ in range(n // 2):
            after(p1, p2, e2, 0, kptr, blocks, values, 1, 0)
            after(p2, p1, e1, 0, kptr, blocks, values, 1, 0)
    else:
        for _ in range(n // 2):
            launch(p1, kptr, blocks, values, 1, 0)
            launch(p2, kptr, blocks, values, 1, 0)
    dc = time.thread_time_ns() - c0
    for p in (p1, p2):
        check(driver.pto_stream_synchronize(p, 60_000_000), "pto_stream_synchronize")
    return dc / n / 1e3, dc / n / 1e3


def _write_after_readers(m: int, rounds: int) -> tuple[float, float | None]:
    """One write queued after reads of the same tensor on `m` streams: its host cost, and the decision's.

    Medians (µs) of the submitting thread's CPU time: the whole ``submit``
    (deciding, and queueing the `m` edges), and the driver's decision alone
    (``pto_hazards_order`` on the same state, None where the driver has no
    such call).  The cyclic GC runs before the reads and is off until the
    write is queued, which follows the reads directly, as in a program.
    The writer's stream is held on the device (a latch) while
    the write is queued, so the figure is the host's work, not the
    scheduler pass the submitting thread runs for a command on an idle
    stream (with an engine thread's wake-up: tens of µs of system time on
    a VM, the same for any M).
    """

    lib = KernelLib(tempfile.mkdtemp(prefix="bench_hazards_war_"))
    with ChipWorker(RunConfig(**DEVICE, sanitize="off")) as w:  # rings that take every edge: the write never waits
        noop = w.register(lib.get("noop", 16))
        scale = w.register(lib.get("scale", 16))
        t = w.alloc_tensor(16, np.float32, init=np.random.default_rng().standard_normal(16).astype(np.float32))
        writer = w.stream()
        readers = [w.stream() for _ in range(m)]
        outs = [w.alloc_tensor(16, np.float32, stream=r) for r in readers]
        decide = getattr(driver, "pto_hazards_order", None)
        if decide is not None:
            acc = ffi.new("pto_hz_access[1]")
            acc[0].addr = t._ptr
            acc[0].flags = driver.PTO_HZ_WRITE
            edges = ffi.new("pto_hz_edge[]", m + 1)
        times, decisions = [], []
        for i in range(rounds + 1):
            gc.collect()  # before the reads, not between them and the write, which follows them as in a program
            gc.disable()
            for r, o in zip(readers, outs):
                scale.submit(t, 1.0, o, stream=r)
            # (Not the first round: its first uses are ordered the general way, with a wait per edge.)
            with hold(writer, timeout=60) if i else contextlib.nullcontext():
                if decide is not None:
                    c0 = time.thread_time_ns()
                    decide(w._hazards.table, writer.id, acc, 1, edges, m + 1)  # changes nothing but a count
                    decisions.append((time.thread_time_ns() - c0) / 1e3)
                c0 = time.thread_time_ns()
                noop.submit(t, stream=writer)
                dt = time.thread_time_ns() - c0
            gc.enable()
            w.sync()
            if i:  # the first round has first uses (joins), not the figure
                times.append(dt / 1e3)
        for o in outs:
            o.free()
        t.free()
    return statistics.median(times), (statistics.median(decisions[1:]) if decisions else None)


def measure(n: int, rounds: int, n_single: int = 1000, rounds_single: int = 400) -> dict:
    lib = KernelLib(tempfile.mkdtemp(prefix="bench_hazards_"))
    kernel = lib.get("noop", 16)
    workers = {
        "auto": ChipWorker(RunConfig(**DEVICE, sanitize="off")),  # (not PYPTO_ASYNC_SANITIZE's choice)
        "manual": ChipWorker(RunConfig(**DEVICE, auto_deps=False, sanitize="off")),
        "sanitize": ChipWorker(RunConfig(**DEVICE, auto_deps=False, sanitize="raise")),
    }
    workers["driver"] = ChipWorker(RunConfig(**DEVICE, auto_deps=False, sanitize="off"))
    setups = {}
    for name, w in workers.items():
        noop = w.register(kernel)
        t = w.alloc_tensor(16, np.float32, init=np.random.default_rng().standard_normal(16).astype(np.float32))
        s1, s2 = w.stream(), w.stream()
        setups[name] = (w, noop, t, s1, s2)
    events = []
    for _ in range(2):
        out = ffi.new("pto_event **")
        check(driver.pto_event_create(workers["driver"]._queue.dev, out), "pto_event_create")
        events.append(out[0])
    # (The one-stream figure's auto_deps side is timed in the paired rounds below; these rounds
    # time its reference and the sanitizer beside it.)
    cases = {
        "single/manual": lambda: _single(*setups["manual"][:3], n),
        "single/sanitize": lambda: _single(*setups["sanitize"][:3], n),
        "crossing/auto": lambda: _crossing(*setups["auto"][:3], n, *setups["auto"][3:], False),
        "crossing/manual_unordered": lambda: _crossing(*setups["manual"][:3], n, *setups["manual"][3:], False),
        "held/auto": lambda: _crossing_held(*setups["auto"][:3], n, *setups["auto"][3:]),
        "held/manual_unordered": lambda: _crossing_held(*setups["manual"][:3], n, *setups["manual"][3:]),
        "crossing/manual_waits": lambda: _crossing(*setups["manual"][:3], n, *setups["manual"][3:], True),
        "crossing/sanitize_waits": lambda: _crossing(*setups["sanitize"][:3], n, *setups["sanitize"][3:], True),
        "driver/launches": lambda: _driver_only(*setups["driver"][:3], n, *setups["driver"][3:], events, False),
        "driver/edges": lambda: _driver_only(*setups["driver"][:3], n, *setups["driver"][3:], events, True),
    }
    for case in cases.values():  # warm up
        case()
    # The one-stream figure: paired rounds of its own (see pypto_async._bench.paired_rounds).  The
    # driver-only worker is configured as the manual one: beside them, it is the A/A control.
    paired = paired_rounds({k: setups[k][:3] for k in ("auto", "manual", "driver")},
                           lambda side: _single(*side, n_single), rounds_single)
    pcpu = {k: [c for _, c in v] for k, v in paired.items()}
    pwall = {k: [w for w, _ in v] for k, v in paired.items()}
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            gc.collect()
            wall, thread = case()
            times[name].append(wall)
            cpu[name].append(thread)
    stats = workers["auto"].stats()
    for event in events:
        driver.pto_event_destroy(event)
    for w, _, t, s1, s2 in setups.values():
        t.free()
        s1.close()
        s2.close()
        w.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    # Paired differences (the rounds take turns), so drift between rounds cancels out.
    single_cpu_added = median_ci(a - b for a, b in zip(pcpu["auto"], pcpu["manual"]))
    single_added = median_ci(a - b for a, b in zip(pwall["auto"], pwall["manual"]))
    single_control = median_ci(a - b for a, b in zip(pcpu["driver"], pcpu["manual"]))
    crossing_added = statistics.median(a - m for a, m in zip(times["crossing/auto"],
                                                              times["crossing/manual_unordered"]))
    # The submitting thread's own CPU time: the runtime's work without the simulated device's
    # threads, which share the host's cores, competing for them.
    driver_added = statistics.median(e - b for e, b in zip(cpu["driver/edges"], cpu["driver/launches"]))
    crossing_cpu_added = statistics.median(a - m for a, m in zip(cpu["crossing/auto"],
                                                                  cpu["crossing/manual_unordered"]))
    held_added = statistics.median(a - m for a, m in zip(cpu["held/auto"], cpu["held/manual_unordered"]))
    return {"median_us": med, "single_added_us": single_added[0], "single_cpu_added_us": single_cpu_added[0],
            "single_cpu_added_ci_us": single_cpu_added[1:], "single_added_ci_us": single_added[1:],
            "single_control_us": single_control[0], "single_control_ci_us": single_control[1:],
            "single_rounds": rounds_single, "single_launches_per_round": n_single,
            "single_cpu_us": statistics.median(pcpu["auto"]), "crossing_added_us": crossing_added,
            "held_added_us": held_added,
            "crossing_cpu_added_us": crossing_cpu_added, "driver_edge_added_us": driver_added,
            "crossing_added_rounds_us": [a - m for a, m in zip(times["crossing/auto"],
                                                               times["crossing/manual_unordered"])],
            "crossing_cpu_reference_us": statistics.median(cpu["crossing/manual_unordered"]),
            "sanitize_single_added_us": med["single/sanitize"] - med["single/manual"],
            "sanitize_crossing_added_us": med["crossing/sanitize_waits"] - med["crossing/manual_waits"],
            "inferred_waits": stats.inferred_waits, "skipped_waits": stats.skipped_waits,
            "write_after_readers_us": {m: _write_after_readers(m, max(3, rounds // 3)) for m in (1, 100, 1000)},
            "launches_per_round": n, "rounds": rounds,
            "torch": sys.modules["torch"].__version__ if "torch" in sys.modules else None}


def rows(r: dict) -> list[dict]:
    med = r["median_us"]

    def row(name, figure, reference, reference_name, target="", ok=None):
        return {"name": name, "figure": figure, "unit": "µs", "reference": reference,
                "reference_name": reference_name, "ratio": figure / reference if reference else None,
                "target": target, "ok": ok}

    return [
        row("auto_deps, one stream: submitting thread's CPU added per launch", r["single_cpu_added_us"],
            med["single/manual"], "auto_deps=False, per launch", "≤ 0.05 µs", r["single_cpu_added_us"] <= 0.05),
        row("auto_deps, one stream: added per launch (wall)", r["single_added_us"], med["single/manual"],
            "auto_deps=False, per launch"),
        row("A/A control, one stream: a second auto_deps=False worker, thread CPU added per launch",
            r["single_control_us"], med["single/manual"], "auto_deps=False, per launch"),
        row("auto_deps, crossing streams: added per launch", r["crossing_added_us"],
            med["crossing/manual_unordered"], "auto_deps=False, no waits, per launch", "≤ 0.6 µs",
            r["crossing_added_us"] <= 0.6),
        row("auto_deps, crossing streams: submitting thread's CPU added per launch", r["crossing_cpu_added_us"],
            r["crossing_cpu_reference_us"], "auto_deps=False, no waits, thread CPU per launch"),
        row("auto_deps, crossing streams, both held on the device: the host's own work added per launch",
            r["held_added_us"], med["held/manual_unordered"], "auto_deps=False, no waits, held the same way",
            "≤ 0.3 µs", r["held_added_us"] <= 0.3),
        row("the driver alone, crossing streams: the edge added per launch (thread CPU)",
            r["driver_edge_added_us"], med["driver/launches"], "the same launches through the driver, no edges"),
        row("waits by hand, crossing streams: added per launch",
            med["crossing/manual_waits"] - med["crossing/manual_unordered"], med["crossing/manual_unordered"],
            "auto_deps=False, no waits, per launch"),
        row("sanitizer, one stream: added per launch", r["sanitize_single_added_us"], med["single/manual"],
            "auto_deps=False, per launch"),
        row("sanitizer, crossing streams with waits by hand: added per launch", r["sanitize_crossing_added_us"],
            med["crossing/manual_waits"], "the same without the sanitizer, per launch"),
        *(row(f"auto_deps, a write after {m} readers on {m} streams: the write's host cost (thread CPU)",
              r["write_after_readers_us"][m][0], r["write_after_readers_us"][1][0], "the same after one reader",
              "≤ 100 µs" if m == 1000 else "", r["write_after_readers_us"][m][0] <= 100 if m == 1000 else None)
          for m in (1, 100, 1000)),
        *(row(f"the driver's decision alone, a write after {m} readers (pto_hazards_order, thread CPU)",
              r["write_after_readers_us"][m][1], r["write_after_readers_us"][1][1], "the same after one reader")
          for m in (1000,) if r["write_after_readers_us"][m][1] is not None),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer launches and rounds (a smoke run)")
    parser.add_argument("--json", nargs="?", const="-", default=None, help="write the results as JSON (to PATH)")
    args = parser.parse_args(argv)
    n, rounds = (1000, 3) if args.quick else (4000, 21)
    r = measure(n, rounds, 1000, 40 if args.quick else 400)
    r["rows"] = rows(r)
    if args.json is not None:
        text = json.dumps(r, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text)
        return 0
    lo, hi = r["single_cpu_added_ci_us"]
    clo, chi = r["single_control_ci_us"]
    print(f"one stream, {r['single_rounds']} paired rounds of {r['single_launches_per_round']} launches: "
          f"thread CPU added {r['single_cpu_added_us']:.3f} µs (95% CI {lo:.3f} .. {hi:.3f}); "
          f"A/A control {r['single_control_us']:.3f} µs ({clo:.3f} .. {chi:.3f})")
    for row in r["rows"]:
        ok = "" if row["ok"] is None else ("  ok" if row["ok"] else "  MISSED")
        print(f"{row['name']:<68} {row['figure']:7.3f} µs   (reference {row['reference']:.3f} µs: "
              f"{row['reference_name']})  {row['target']}{ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
