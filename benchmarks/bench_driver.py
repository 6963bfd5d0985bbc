"""Measure the native driver's two hot paths from Python.

(a) Submit cost: ``lib.pto_stream_notify`` per call, measured side by side with
    ``lib.pto_nop()`` (an empty C function) in the same process; the ratio is
    the figure that travels between machines.  Target: <= 1 us per notify.
(b) Completion latency: on an idle device (its threads asleep after a gap),
    submit a notify at t0 (``pto_now_ns``), poll the completion eventfd, and
    take the time it turns readable, as an event loop would: asleep in
    poll() (the headline figure, OS wake-up included).  Also measured with a
    host thread spinning on poll(0) (when the fd turns readable, but the
    spinner takes a core from the driver), and back to back (driver threads
    still in their spin window).  The record's ``end_ns - submit_ns`` (the
    device-side share) is reported too.

Run ``python benchmarks/bench_driver.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import statistics
import sys
import time

from pypto_async._driver import check, device_config, ffi, lib


SPIN_US: dict[str, int] = {}  # --spin-us, when given


def _open(window: int):
    out = ffi.new("pto_device **")
    cfg = device_config(ring_task_window=window, device_memory=16 << 20, **SPIN_US)
    check(lib.pto_device_open(b"sim", cfg, out))
    s = ffi.new("pto_stream **")
    check(lib.pto_stream_create(out[0], 0, s))
    return out[0], s[0]


def _drain(dev, buf, cap) -> int:
    total = 0
    while True:
        n = check(lib.pto_cq_drain(dev, buf, cap))
        total += n
        if n < cap:
            return total


def bench_submit(calls: int, repeats: int) -> dict:
    """Median ns per call of pto_nop and of pto_stream_notify (with a token)."""
    window = 1 << max(10, (calls - 1).bit_length())
    dev, s = _open(window)
    buf = ffi.new("pto_completion[]", 1024)
    nop = lib.pto_nop
    notify = lib.pto_stream_notify
    perf = time.perf_counter_ns
    nop_ns, notify_ns = [], []
    token = 1
    try:
        for _ in range(repeats):
            t0 = perf()
            for _ in range(calls):
                nop()
            nop_ns.append((perf() - t0) / calls)

            t0 = perf()
            for tok in range(token, token + calls):
                notify(s, tok)
            notify_ns.append((perf() - t0) / calls)
            token += calls
            # Not timed: let the ring empty and drain every record.
            check(lib.pto_stream_synchronize(s, 30_000_000))
            got = 0
            while got < calls:
                got += _drain(dev, buf, 1024)
                if got < calls:
                    check(lib.pto_cq_wait(dev, 1_000_000))
        st = ffi.new("pto_stream_stats *")
        check(lib.pto_stream_get_stats(s, st))
        if st.refused:
            raise RuntimeError(f"the ring filled {st.refused} times: the measurement is void")
    finally:
        lib.pto_device_close(dev)
    nop_med, notify_med = statistics.median(nop_ns), statistics.median(notify_ns)
    return {
        "calls": calls,
        "repeats": repeats,
        "nop_us": nop_med / 1e3,
        "notify_us": notify_med / 1e3,
        "ratio": notify_med / nop_med,
        "notify_minus_nop_us": (notify_med - nop_med) / 1e3,
        "nop_us_all": [x / 1e3 for x in nop_ns],
        "notify_us_all": [x / 1e3 for x in notify_ns],
    }


def bench_latency(trials: int, gap_us: int, spin: bool) -> dict:
    """Median ns from submit (t0) to the eventfd turning readable, on an idle device.

    With ``spin`` the host polls the fd without blocking, so the figure is when
    the fd turned readable; without it the host sleeps in poll(), and the
    figure adds the kernel's wake-up of a sleeping thread.
    """
    dev, s = _open(256)
    buf = ffi.new("pto_completion[]", 4)
    fd = lib.pto_cq_fd(dev)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    now = lib.pto_now_ns
    notify = lib.pto_stream_notify
    readable_ns, device_ns, wake_ns = [], [], []
    try:
        for tok in range(1, trials + 1):
            if gap_us:
                time.sleep(gap_us / 1e6)  # let the driver's threads stop spinning and sleep
            t0 = now()
            notify(s, tok)
            if spin:
                spins = 0
                while not poller.poll(0):
                    spins += 1
                    if spins % 100_000 == 0 and now() - t0 > 5e9:
                        raise RuntimeError(f"token {tok}: eventfd not readable after 5 s")
            elif not poller.poll(5000):
                raise RuntimeError(f"token {tok}: eventfd not readable after 5 s")
            t1 = now()
            n = check(lib.pto_cq_drain(dev, buf, 4))
            if n != 1 or buf[0].token != tok or buf[0].status != 0:
                raise RuntimeError(f"token {tok}: unexpected drain ({n} records)")
            readable_ns.append(t1 - t0)
            device_ns.append(buf[0].end_ns - buf[0].submit_ns)
            wake_ns.append(t1 - buf[0].end_ns)
    finally:
        lib.pto_device_close(dev)

    def q(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))] / 1e3

    return {
        "trials": trials,
        "gap_us": gap_us,
        "spinning_poller": spin,
        "readable_median_us": statistics.median(readable_ns) / 1e3,
        "readable_p90_us": q(readable_ns, 0.9),
        "readable_p99_us": q(readable_ns, 0.99),
        "record_end_minus_submit_median_us": statistics.median(device_ns) / 1e3,
        "record_end_to_readable_median_us": statistics.median(wake_ns) / 1e3,
    }


def bench_idle_cpu(seconds: float) -> dict:
    """CPU time the process uses per second while a device sits open and idle."""
    dev, s = _open(256)
    try:
        check(lib.pto_stream_notify(s, 0))
        check(lib.pto_stream_synchronize(s, 10_000_000))
        time.sleep(0.05)  # past every spin window
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        c1, t1 = time.process_time(), time.perf_counter()
    finally:
        lib.pto_device_close(dev)
    return {"seconds": t1 - t0, "cpu_ms_per_s": (c1 - c0) * 1e3 / (t1 - t0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000, help="submissions per repeat (default 20000)")
    ap.add_argument("--repeats", type=int, default=9, help="repeats for the submit medians (default 9)")
    ap.add_argument("--trials", type=int, default=2000, help="latency trials (default 2000)")
    ap.add_argument("--gap-us", type=int, default=500,
                    help="idle time before each latency trial, so the device is idle (default 500)")
    ap.add_argument("--spin-us", type=int, default=None,
                    help="driver threads' spin window before sleeping (default: the driver's)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.spin_us is not None:
        SPIN_US["spin_us"] = args.spin_us

    submit = bench_submit(args.calls, args.repeats)
    idle = bench_latency(args.trials, args.gap_us, spin=False)
    idle_spinning = bench_latency(args.trials, args.gap_us, spin=True)
    hot = bench_latency(args.trials, 0, spin=False)
    idle_cpu = bench_idle_cpu(1.0)

    rows = [
        ("pto_nop() per call", f"{submit['nop_us']:.3f} us", ""),
        ("pto_stream_notify() per call", f"{submit['notify_us']:.3f} us", "target <= 1 us"),
        ("  ratio notify / nop", f"{submit['ratio']:.2f}x", ""),
        ("submit -> fd readable (poll waiter), idle device", f"{idle['readable_median_us']:.2f} us",
         "target < 10 us (median)"),
        ("  p90 / p99", f"{idle['readable_p90_us']:.2f} / {idle['readable_p99_us']:.2f} us", ""),
        ("  record end_ns - submit_ns", f"{idle['record_end_minus_submit_median_us']:.2f} us", ""),
        ("  record end_ns -> waiter woken", f"{idle['record_end_to_readable_median_us']:.2f} us", ""),
        ("submit -> fd readable (spinning poller), idle", f"{idle_spinning['readable_median_us']:.2f} us",
         "host spins on a core"),
        ("  record end_ns - submit_ns", f"{idle_spinning['record_end_minus_submit_median_us']:.2f} us", ""),
        ("submit -> fd readable (poll waiter), back to back", f"{hot['readable_median_us']:.2f} us", ""),
        ("  record end_ns - submit_ns", f"{hot['record_end_minus_submit_median_us']:.2f} us", ""),
        ("CPU used by an open, idle device", f"{idle_cpu['cpu_ms_per_s']:.2f} ms/s", "should be ~0"),
    ]
    width = max(len(r[0]) for r in rows)
    spin = f", spin_us={args.spin_us}" if args.spin_us is not None else ""
    print(f"pypto_async driver benchmark (python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs{spin})")
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>16}  {note}")
    result = {"cpus": os.cpu_count(), "spin_us": args.spin_us, "submit": submit, "latency_idle": idle, "latency_idle_spinning": idle_spinning,
              "latency_back_to_back": hot, "idle_cpu": idle_cpu,
              "python": platform.python_version(), "machine": platform.machine()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
