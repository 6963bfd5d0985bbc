"""Benchmark copies between devices and an all-reduce, beside a same-device copy in one run.

Two figures, measured in rounds that take turns with their reference (so a
noisy stretch of a shared machine hits both alike), medians over the rounds:

1. Peer copy bandwidth: ``w0.copy(t1, t0)`` of 16 MiB from device 0 to
   device 1 (one peer copy command), against a device-to-device copy of
   the same size on device 0 (``w0.copy(u, t0)``).  Target: at least 0.8x.
2. All-reduce of 4 x 16 MiB float32 over 4 devices (a ring of peer copies):
   its time, its algorithm bandwidth (shard bytes / time) and its bus
   bandwidth (algorithm bandwidth x 2 (n - 1) / n, the bytes each device
   moves), beside the peer copy bandwidth of figure 1.  Reported; no target.

Every round checks its result against numpy.  torch is imported when
installed, as the runtime's users do.

    python benchmarks/bench_devices.py [--quick] [--json PATH]
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

from pypto_async.runtime import ChipWorker, DistributedWorker, RunConfig  # noqa: E402

try:
    import torch  # noqa: E402, F401

    TORCH = torch.__version__
except ImportError:
    TORCH = None

MIB = 1 << 20
clock = time.perf_counter


def timed(fn) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def bench_copies(nbytes: int, rounds: int, cfg: RunConfig) -> dict:
    n = nbytes // 4
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    with ChipWorker(cfg.replace(device_id=0)) as a, ChipWorker(cfg.replace(device_id=1)) as b:
        src = a.alloc_tensor(n, np.float32, init=x)
        same = a.alloc_tensor(n, np.float32)
        peer = b.alloc_tensor(n, np.float32)
        a.copy(same, src)  # warm-up: touch every page of both arenas
        a.copy(peer, src)
        d2d, p2p = [], []
        for _ in range(rounds):
            d2d.append(timed(lambda: a.copy(same, src)))
            p2p.append(timed(lambda: a.copy(peer, src)))
        assert np.array_equal(peer.numpy(), x) and np.array_equal(same.numpy(), x)
        for t in (src, same, peer):
            t.free()
    d, p = statistics.median(d2d), statistics.median(p2p)
    return {"bytes": nbytes, "d2d_gbps": nbytes / d / 1e9, "peer_gbps": nbytes / p / 1e9,
            "ratio": d / p}


def bench_all_reduce(devices: int, nbytes: int, rounds: int, cfg: RunConfig) -> dict:
    n = nbytes // 4
    host = np.random.default_rng(1).standard_normal((devices, n)).astype(np.float32)
    want = host.sum(axis=0)
    with DistributedWorker(range(devices), cfg) as dw:
        t = dw.alloc_stacked_tensor(host)
        out = dw.alloc_stacked_tensor(np.zeros_like(host))
        dw.all_reduce(t, out=out)  # warm-up
        times = [timed(lambda: dw.all_reduce(t, out=out)) for _ in range(rounds)]
        back = np.empty_like(host)
        dw.copy_stacked_from(out, back)
        np.testing.assert_allclose(back, np.broadcast_to(want, host.shape), rtol=1e-4, atol=1e-4)
        dw.free_stacked_tensor(t)
        dw.free_stacked_tensor(out)
    s = statistics.median(times)
    alg = nbytes / s / 1e9
    return {"devices": devices, "bytes": nbytes, "time_ms": s * 1e3, "alg_gbps": alg,
            "bus_gbps": alg * 2 * (devices - 1) / devices}


def rows(copies: dict, ar: dict) -> list[dict]:
    size = f"{copies['bytes'] // MIB} MiB"
    return [
        {"name": f"peer copy, device 0 -> 1 ({size})", "figure": copies["peer_gbps"], "unit": "GB/s",
         "reference": copies["d2d_gbps"], "reference_name": f"same-device d2d copy ({size})",
         "ratio": copies["ratio"], "target": "≥ 0.8x", "ok": copies["ratio"] >= 0.8},
        {"name": f"all_reduce {ar['devices']} x {ar['bytes'] // MIB} MiB, bus bandwidth", "figure": ar["bus_gbps"],
         "unit": "GB/s", "reference": copies["peer_gbps"], "reference_name": "peer copy bandwidth",
         "ratio": ar["bus_gbps"] / copies["peer_gbps"], "target": "", "ok": None},
        {"name": f"all_reduce {ar['devices']} x {ar['bytes'] // MIB} MiB, time", "figure": ar["time_ms"],
         "unit": "ms", "target": "", "ok": None},
    ]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (1 MiB), not a measurement")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    args = parser.parse_args(argv)
    nbytes, rounds = (1 * MIB, 3) if args.quick else (16 * MIB, 15)
    cfg = RunConfig(device_memory=256 * MIB)
    copies = bench_copies(nbytes, rounds, cfg)
    ar = bench_all_reduce(4, nbytes, max(3, rounds // 3), cfg)
    result = {"config": {"torch": TORCH, "quick": args.quick}, "copies": copies, "all_reduce": ar,
              "rows": rows(copies, ar)}
    print(f"torch imported: {TORCH or 'no (not installed)'}")
    print(f"peer copy {copies['peer_gbps']:.2f} GB/s, same-device d2d {copies['d2d_gbps']:.2f} GB/s: "
          f"{copies['ratio']:.2f}x (target ≥ 0.8x)")
    print(f"all_reduce 4 x {nbytes // MIB} MiB: {ar['time_ms']:.2f} ms, algorithm {ar['alg_gbps']:.2f} GB/s, "
          f"bus {ar['bus_gbps']:.2f} GB/s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
