"""Benchmark the async runtime against references measured in the same run.

Four figures, each next to what it is compared with:

1. ``roundtrip``: ``await handle(t)`` of an empty launch on DeviceTensors, one
   at a time, under asyncio (median per launch, over five rounds that take
   turns with the references' rounds).  References: a bare asyncio
   future resolved through ``loop.call_soon`` (the loop's own floor), and two
   raw driver round trips from Python: ``pto_stream_launch`` then a host that
   polls ``pto_cq_drain`` (the device's floor), and then ``pto_wait_token``
   (a host thread that sleeps and is woken, as an event loop is).
2. ``pipelined``: launches in flight from one coroutine with
   ``await handle.submit(t)`` (back-pressure only), then one wait.  References:
   the same loop on raw cffi calls (submit, drain when the ring is full), one
   bare ``pto_nop`` cffi call, and the same loop with the awaits that do not
   suspend giving the event loop no turns (``ref_without_turns_us``, the code
   before they did); ``turns_cost_us`` is what those turns cost per launch,
   the median difference of paired rounds (target: at most 0.1 µs).
3. ``concurrent``: 10,000 tasks each awaiting its own launch, under asyncio
   and again under uvloop when it is installed (``concurrent_uvloop``).
   Reference: 10,000 tasks each awaiting a future resolved with
   ``call_soon``, on the same loop.  A second reference,
   ``ref_batched_futures_us``, is the tightest floor for this pattern: tasks
   awaiting futures resolved 64 at a time, as the completion pump resolves
   launches, with no launch at all; the figure minus it is what the runtime
   costs per launch.
4. ``overlap``: ``examples/pipelined.py``: pipelined time over
   max(copy-only, compute-only).  Reference: the driver alone running a
   spinning kernel and 8 MiB copies on two streams (what the machine allows).

The script imports torch when it is installed, as the runtime's users do: with
torch loaded the cyclic garbage collector costs every task more, the floors
as much as the figures, so read each figure as a ratio to its floor.

Every figure is a median over repeats.  Targets are printed
beside them; they are absolute, so read them with the references: on a
machine whose driver round trip alone exceeds a target, that target is out of
reach for any runtime above it.

    python benchmarks/bench_runtime.py [--quick] [--json] [--only roundtrip,...]
"""

from __future__ import annotations

import argparse
import asyncio
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

from helpers.kernels import KernelLib  # noqa: E402

from pypto_async._driver import PTO_EAGAIN, ffi, lib  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402
from pypto_async.runtime._wait import drive  # noqa: E402

# Measure the way users run: they import torch (the runtime takes torch tensors), and a process
# with torch loaded pays more for every cyclic collection, bare futures as much as launches.
# Each figure is therefore read as a ratio to its floor measured in this same process.
try:
    import torch  # noqa: E402, F401

    TORCH = torch.__version__
except ImportError:
    TORCH = None

TARGETS = {"roundtrip": 25.0, "pipelined": 3.0, "concurrent": 10.0, "concurrent_uvloop": 10.0,
           "overlap": 1.25}
UNITS = {"roundtrip": "us", "pipelined": "us", "concurrent": "us", "concurrent_uvloop": "us", "overlap": "x"}


def median(xs) -> float:
    return statistics.median(xs)


# -- 1. round trip -------------------------------------------------------------------------------


async def _future_roundtrip(n: int) -> list[float]:
    loop = asyncio.get_running_loop()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut
        samples.append((clock() - t0) / 1e3)
    return samples


def _raw_roundtrip(w, h, t, n: int, poll: bool) -> list[float]:
    dev, s, k = w._dev, w.default_stream._ptr, h._kptr
    args = ffi.new("uint64_t[]", [t.data_ptr])
    rec = ffi.new("pto_completion *")
    buf = ffi.new("pto_completion[]", 256)
    launch, wait, drain = lib.pto_stream_launch, lib.pto_wait_token, lib.pto_cq_drain
    samples = []
    clock = time.perf_counter_ns
    token = 1 << 62
    for _ in range(n):
        token += 1
        t0 = clock()
        launch(s, k, 1, args, 1, token)
        if poll:
            while not drain(dev, buf, 256):
                pass
        else:
            wait(dev, token, -1, rec)
        samples.append((clock() - t0) / 1e3)
        drain(dev, buf, 256)
    return samples


async def roundtrip(program, config, n: int, blocks: int = 5) -> dict:
    # The figure and its references take turns, in `blocks` rounds of n // blocks samples
    # each; each reports the median of its round medians.  On a shared VM a stretch of a
    # few hundred milliseconds can triple every wake-up: taking turns puts the figure
    # and its references through the same stretches, and the median of rounds keeps one
    # bad stretch from deciding the figure.
    rounds: dict[str, list[float]] = {"value": [], "future": [], "poll": [], "raw": []}
    per = max(1, n // blocks)
    clock = time.perf_counter_ns
    async with ChipWorker(config) as w:
        h = w.register(program)
        t = w.alloc_tensor(program.params[0].shape, np.float32)
        for _ in range(100):
            await h(t)
        for _ in range(blocks):
            samples = []
            for _ in range(per):
                t0 = clock()
                await h(t)
                samples.append((clock() - t0) / 1e3)
            rounds["value"].append(median(samples))
            rounds["future"].append(median(await _future_roundtrip(per)))
            await w.default_stream
            rounds["poll"].append(median(_raw_roundtrip(w, h, t, per, True)))
            rounds["raw"].append(median(_raw_roundtrip(w, h, t, per, False)))
        t.free()
    return {"value": median(rounds["value"]), "ref_asyncio_future_us": median(rounds["future"]),
            "ref_raw_poll_us": median(rounds["poll"]), "ref_raw_driver_us": median(rounds["raw"])}


# -- 2. pipelined -------------------------------------------------------------------------------------


def _raw_pipelined(w, h, t, n: int) -> float:
    # A stream of its own, without the overflow the runtime's streams have: a full ring
    # refuses (-PTO_EAGAIN) and this loop drains, the bare driver loop.
    out = ffi.new("pto_stream **")
    assert lib.pto_stream_create(w._dev, 0, out) == 0
    try:
        return _raw_pipelined_on(w._dev, out[0], h._kptr, t, n)
    finally:
        lib.pto_stream_destroy(out[0])


def _raw_pipelined_on(dev, s, k, t, n: int) -> float:
    args = ffi.new("uint64_t[]", [t.data_ptr])
    buf = ffi.new("pto_completion[]", 256)
    launch, drain, wait = lib.pto_stream_launch, lib.pto_cq_drain, lib.pto_cq_wait
    eagain = -PTO_EAGAIN
    token, done = 1 << 62, 0
    t0 = time.perf_counter()
    for _ in range(n):
        token += 1
        while launch(s, k, 1, args, 1, token) == eagain:
            done += drain(dev, buf, 256) or (wait(dev, 100_000) and 0)
    while done < n:
        wait(dev, 100_000)
        done += drain(dev, buf, 256)
    return (time.perf_counter() - t0) / n * 1e6


def _nop(n: int) -> float:
    nop = lib.pto_nop
    t0 = time.perf_counter()
    for _ in range(n):
        nop()
    return (time.perf_counter() - t0) / n * 1e6


def _await_without_turns(self):
    """The ``__await__`` of a launch from ``submit()`` (``_launch._Submitted``) giving the loop no turns.

    The reference of ``ref_without_turns_us``: the pipelined loop with this in
    place measures what yielding to the event loop (and counting the awaits
    that do not suspend) costs per launch, beside it in the same process.
    """
    if not self._entered:
        if self._entry_waiters is None:
            self._entry_waiters = []
        yield from self._worker._pump.wait(self._entry_waiters)
    return self


async def _submit_loop(w, h, t, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await h.submit(t)
    await w.default_stream
    return (time.perf_counter() - t0) / n * 1e6


async def _turns_cost(w, h, t, n: int, pairs: int) -> tuple[float, float]:
    """Per-launch cost of the event loop's turns: (median paired difference, median without).

    Rounds of `n` launches with and without the turns take turns, in `pairs`
    pairs whose order alternates; each pair's difference is measured under
    the same conditions, so the median difference is the cost, not drift.
    """
    from pypto_async.runtime._launch import _Submitted

    awaits = _Submitted.__await__
    diffs, without = [], []
    for i in range(pairs):
        order = (True, False) if i % 2 else (False, True)
        got = {}
        for turns in order:
            if not turns:
                _Submitted.__await__ = _await_without_turns
            try:
                got[turns] = await _submit_loop(w, h, t, n)
            finally:
                _Submitted.__await__ = awaits
            drive(w._queue, w._queue.idle, 10.0)
        diffs.append(got[True] - got[False])
        without.append(got[False])
    return median(diffs), median(without)


async def pipelined(program, config, n: int, repeats: int, pairs: int = 31) -> dict:
    values, raws = [], []
    async with ChipWorker(config) as w:
        h = w.register(program)
        t = w.alloc_tensor(program.params[0].shape, np.float32)
        await h(t)
        for _ in range(repeats):
            values.append(await _submit_loop(w, h, t, n))
            drive(w._queue, w._queue.idle, 10.0)
            raws.append(_raw_pipelined(w, h, t, n))
            drive(w._queue, w._queue.idle, 10.0)
        cost, without = await _turns_cost(w, h, t, max(n // 10, 1000), pairs)
        t.free()
    return {"value": median(values), "ref_raw_cffi_us": median(raws), "ref_without_turns_us": without,
            "turns_cost_us": cost, "ref_pto_nop_us": _nop(200_000)}


# -- 3. concurrent ---------------------------------------------------------------------------------------


async def concurrent(program, config, n: int, repeats: int) -> dict:
    values, refs, floors = [], [], []
    async with ChipWorker(config) as w:
        h = w.register(program)
        t = w.alloc_tensor(program.params[0].shape, np.float32)
        await h(t)

        async def one():
            await h(t)

        loop = asyncio.get_running_loop()

        async def bare():
            fut = loop.create_future()
            loop.call_soon(fut.set_result, None)
            await fut

        pending = []

        def resolve():
            for fut in pending:
                fut.set_result(None)
            pending.clear()

        async def batched():
            # The pump's pattern without the device: a batch of 64 is resolved in line (the
            # launch path drains every 64 launches), the rest on the loop's next pass.
            fut = loop.create_future()
            pending.append(fut)
            if len(pending) == 1:
                loop.call_soon(resolve)
            elif len(pending) == 64:
                resolve()
            await fut

        for _ in range(repeats):
            for fn, out in ((one, values), (bare, refs), (batched, floors)):
                # Each burst starts from a collected heap: the cyclic GC's full collection
                # comes once per so many allocations, and without this it falls in whichever
                # burst the phase lands on, the same one every repeat.
                gc.collect()
                t0 = time.perf_counter()
                await asyncio.gather(*[fn() for _ in range(n)])
                out.append((time.perf_counter() - t0) / n * 1e6)
        per_wakeup = w.stats().completions_per_wakeup
        t.free()
    return {"value": median(values), "ref_asyncio_tasks_us": median(refs),
            "ref_batched_futures_us": median(floors), "completions_per_wakeup": per_wakeup}


# -- 4. overlap -------------------------------------------------------------------------------------------


def _raw_overlap(rounds: int = 10) -> float:
    """The driver alone: a spinning kernel on one stream, 8 MiB copies on another.

    Returns both-at-once time over max(copies alone, kernels alone): what the
    machine allows, with no runtime involved.
    """
    w = ChipWorker(RunConfig(cores=1, copy_engines=1))
    try:
        dev = w._dev
        streams = w.stream(), w.stream()  # keep the Stream objects: dropping one releases it
        s1, s2 = streams[0]._ptr, streams[1]._ptr
        out = ffi.new("pto_kernel **")
        lib.pto_kernel_builtin(dev, b"spin", out)
        spin = out[0]
        nbytes = 8 << 20
        block = ffi.new("pto_devptr *")
        lib.pto_mem_alloc(dev, nbytes, ffi.NULL, block)
        host = np.ones(nbytes, np.uint8)
        src = ffi.from_buffer(host)

        def run(copies: bool, compute: bool) -> float:
            t0 = time.perf_counter()
            for _ in range(rounds):
                if compute:
                    lib.pto_stream_launch(s1, spin, 1, [2000], 1, 0)
                if copies:
                    lib.pto_stream_copy_h2d(s2, block[0], src, nbytes, 0)
            lib.pto_device_synchronize(dev, -1)
            return time.perf_counter() - t0

        run(True, True)
        copy, compute, both = run(True, False), run(False, True), run(True, True)
        lib.pto_mem_free(dev, block[0])
        return both / max(copy, compute)
    finally:
        w.close()


def overlap(batches: int, repeats: int) -> dict:
    spec = importlib.util.spec_from_file_location("pipelined_example", ROOT / "examples" / "pipelined.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runs = [asyncio.run(module.main(batches)) for _ in range(repeats)]
    best = min(runs, key=lambda r: r["vs_max"])
    raw = [_raw_overlap() for _ in range(repeats)]
    return {"value": median(r["vs_max"] for r in runs), "ref_raw_driver_x": median(raw),
            "copy_only_ms": best["copy_only_ms"], "compute_only_ms": best["compute_only_ms"],
            "pipelined_ms": best["pipelined_ms"], "vs_sum": median(r["vs_sum"] for r in runs)}


# -- driver -----------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", default="roundtrip,pipelined,concurrent,overlap",
                        help="comma-separated figures to run")
    parser.add_argument("--spin-us", type=int, default=None, help="RunConfig.spin_us for the device")
    parser.add_argument("--cores", type=int, default=None, help="RunConfig.cores for the device")
    parser.add_argument("--uvloop", action="store_true", help="run the asyncio figures under uvloop")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    quick = args.quick
    config = RunConfig(spin_us=args.spin_us, cores=args.cores)
    run = asyncio.run
    if args.uvloop:
        import uvloop

        run = uvloop.run
    results: dict = {"config": {"spin_us": args.spin_us, "cores": args.cores, "uvloop": args.uvloop,
                                "torch": TORCH}}
    with tempfile.TemporaryDirectory() as tmp:
        noop = KernelLib(tmp).get("noop", 16)
        if "roundtrip" in only:
            results["roundtrip"] = run(roundtrip(noop, config, 300 if quick else 5000))
        if "pipelined" in only:
            results["pipelined"] = run(pipelined(noop, config, 2000 if quick else 100_000, 1 if quick else 3))
        if "concurrent" in only:
            results["concurrent"] = run(concurrent(noop, config, 1000 if quick else 10_000, 1 if quick else 3))
            if not args.uvloop and importlib.util.find_spec("uvloop") is not None:
                import uvloop

                results["concurrent_uvloop"] = uvloop.run(
                    concurrent(noop, config, 1000 if quick else 10_000, 1 if quick else 3))
    if "overlap" in only:
        results["overlap"] = overlap(6 if quick else 24, 1 if quick else 3)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"torch imported: {TORCH or 'no (not installed)'}")
        for name in ("roundtrip", "pipelined", "concurrent", "concurrent_uvloop", "overlap"):
            if name not in results:
                continue
            r = results[name]
            refs = ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "value")
            unit = UNITS[name]
            print(f"{name:17s} {r['value']:8.2f} {unit:2s} (target <= {TARGETS[name]} {unit}; {refs})")
    return results


if __name__ == "__main__":
    main()
