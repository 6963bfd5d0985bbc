"""Measure generated kernels against numpy, side by side in one process.

(a) Element-wise ``a*x + y`` on 16M float32: one block on a one-core device,
    against numpy's ``a * x + y`` (same expression, same dtype).  The figure
    is the throughput ratio numpy_time / kernel_time (target >= 0.8x).
(b) The same kernel launched with ``pl.spmd(n)`` for n = 1 .. cores on a
    device with one compute core per CPU: time and speed-up over n = 1.
(c) 512x512x512 float32 matmul on one core against numpy's matmul with BLAS
    limited to one thread (threadpoolctl): GFLOP/s and ratio (aim >= 0.3x).

Kernels run through the raw driver (pypto_async._driver) on resident device
buffers: the timed region is one launch plus a stream synchronize.  Each
figure is a median of repeats; every result is checked against numpy first.
Which BLAS numpy uses (and OPENBLAS_CORETYPE, which can slow it) is printed.

Run ``python benchmarks/bench_kernels.py [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import pypto_async.language as pl
from pypto_async._driver import check, device_config, ffi, lib


class Device:
    """A sim device with ``cores`` compute cores and one stream."""

    def __init__(self, cores: int, memory: int):
        out = ffi.new("pto_device **")
        check(lib.pto_device_open(b"sim", device_config(cores=cores, device_memory=memory), out))
        self.dev = out[0]
        s = ffi.new("pto_stream **")
        check(lib.pto_stream_create(self.dev, 0, s))
        self.stream = s[0]
        self.records = ffi.new("pto_completion[64]")

    def close(self) -> None:
        lib.pto_device_close(self.dev)

    def upload(self, host: np.ndarray) -> int:
        ptr = ffi.new("pto_devptr *")
        check(lib.pto_mem_alloc(self.dev, host.nbytes, ffi.NULL, ptr))
        check(lib.pto_stream_copy_h2d(self.stream, ptr[0], ffi.from_buffer(host), host.nbytes, 0))
        check(lib.pto_stream_synchronize(self.stream, -1))
        return ptr[0]

    def download(self, host: np.ndarray, ptr: int) -> None:
        check(lib.pto_stream_copy_d2h(self.stream, ffi.from_buffer(host), ptr, host.nbytes, 0))
        check(lib.pto_stream_synchronize(self.stream, -1))

    def kernel(self, compiled):
        out = ffi.new("pto_kernel **")
        check(lib.pto_kernel_load(self.dev, str(compiled.lib_path).encode(), compiled.symbol.encode(), out))
        return out[0]

    def launcher(self, kernel, blocks: int, slots: list[int]):
        """Return a function that launches once, waits, and checks the launch's status."""
        argv = ffi.new("uint64_t[]", slots)

        def run() -> None:
            check(lib.pto_stream_launch(self.stream, kernel, blocks, argv, len(slots), 1))
            check(lib.pto_stream_synchronize(self.stream, -1))
            n = lib.pto_cq_drain(self.dev, self.records, 64)
            for j in range(n):
                if self.records[j].status != 0:
                    raise RuntimeError(ffi.string(self.records[j].message).decode())

        return run


def f32_bits(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def make_axpy(n: int, blocks: int, tile: int):
    per = n // blocks

    @pl.jit
    def axpy(a: pl.Scalar[pl.FP32], x: pl.Tensor, y: pl.Tensor, out: pl.Out[pl.Tensor]):
        for b in pl.spmd(blocks):
            for i in pl.range(0, per, tile):
                off = b * per + i
                pl.store(pl.load(x, [off], [tile]) * a + pl.load(y, [off], [tile]), [off], out)
        return out

    return axpy


def paired_medians(*fns, repeats: int) -> list[float]:
    """Return the median seconds of each function, run interleaved after one warm-up each.

    Interleaving makes the kernel and its reference share whatever else the
    machine is doing at the time.
    """
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def bench_axpy(n: int, repeats: int, tile: int) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    a = np.float32(1.5)
    want = a * x + y

    cores = os.cpu_count() or 1
    results = {"n": n, "tile": tile, "scaling": []}
    for dev_cores, block_counts in ((1, [1]), (cores, list(range(1, cores + 1)))):
        dev = Device(dev_cores, 3 * n * 4 + (64 << 20))
        try:
            px, py = dev.upload(x), dev.upload(y)
            pout = dev.upload(np.zeros(n, np.float32))
            for blocks in block_counts:
                compiled = make_axpy(n, blocks, tile).compile(a, x, y, want)
                k = dev.kernel(compiled)
                got = np.full(n, np.nan, np.float32)
                run = dev.launcher(k, blocks, [f32_bits(a), px, py, pout])
                run()
                dev.download(got, pout)
                if not np.array_equal(got, want):
                    raise AssertionError(f"axpy with {blocks} blocks gives wrong results")
                if dev_cores == 1:
                    results["numpy_s"], results["one_core_s"] = paired_medians(
                        lambda: a * x + y, run, repeats=repeats
                    )
                else:
                    (s,) = paired_medians(run, repeats=repeats)
                    results["scaling"].append({"blocks": blocks, "device_cores": dev_cores, "s": s})
        finally:
            dev.close()
    base = results["scaling"][0]["s"]
    for row in results["scaling"]:
        row["speedup"] = base / row["s"]
    results["ratio"] = results["numpy_s"] / results["one_core_s"]
    return results


def bench_matmul(size: int, repeats: int) -> dict:
    from threadpoolctl import threadpool_info, threadpool_limits

    m = k = n = size
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)

    @pl.jit
    def matmul(ta: pl.Tensor, tb: pl.Tensor, tc: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.matmul(pl.load(ta, [0, 0], [m, k]), pl.load(tb, [0, 0], [k, n])), [0, 0], tc)
        return tc

    c = np.full((m, n), np.nan, np.float32)
    compiled = matmul.compile(a, b, c)
    dev = Device(1, 64 << 20)
    try:
        pa, pb, pc = dev.upload(a), dev.upload(b), dev.upload(c)
        run = dev.launcher(dev.kernel(compiled), 1, [pa, pb, pc])
        run()
        dev.download(c, pc)
        err = float(np.max(np.abs(c - want)) / np.max(np.abs(want)))
        if err > 1e-5:
            raise AssertionError(f"matmul relative error {err}")
        with threadpool_limits(limits=1):
            numpy_s, s = paired_medians(lambda: a @ b, run, repeats=repeats)
    finally:
        dev.close()
    flops = 2.0 * m * n * k
    blas = [
        {key: info.get(key) for key in ("internal_api", "version", "architecture", "num_threads")}
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]
    return {
        "size": size,
        "kernel_s": s,
        "numpy_s": numpy_s,
        "kernel_gflops": flops / s / 1e9,
        "numpy_gflops": flops / numpy_s / 1e9,
        "ratio": numpy_s / s,
        "rel_err": err,
        "blas": blas,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
    }


def rows(ax: dict, mm: dict) -> list[dict]:
    out = [
        {
            "name": f"a*x+y, {ax['n'] >> 20}M fp32, 1 core",
            "figure": ax["n"] / ax["one_core_s"] / 1e9,
            "unit": "Gelem/s",
            "reference": ax["n"] / ax["numpy_s"] / 1e9,
            "reference_name": "numpy a*x+y",
            "ratio": ax["ratio"],
            "target": ">= 0.8x",
            "ok": ax["ratio"] >= 0.8,
        }
    ]
    for r in ax["scaling"]:
        out.append(
            {
                "name": f"a*x+y, pl.spmd({r['blocks']}) on {r['device_cores']} cores",
                "figure": ax["n"] / r["s"] / 1e9,
                "unit": "Gelem/s",
                "ratio": r["speedup"],
                "reference_name": "pl.spmd(1)",
                "reference": ax["n"] / ax["scaling"][0]["s"] / 1e9,
            }
        )
    out.append(
        {
            "name": f"matmul {mm['size']}^3 fp32, 1 core",
            "figure": mm["kernel_gflops"],
            "unit": "GFLOP/s",
            "reference": mm["numpy_gflops"],
            "reference_name": "numpy @, BLAS 1 thread",
            "ratio": mm["ratio"],
            "target": ">= 0.3x",
            "ok": mm["ratio"] >= 0.3,
        }
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16 << 20, help="elements of a*x+y (default 16M)")
    ap.add_argument("--tile", type=int, default=4096, help="tile size of the a*x+y kernel")
    ap.add_argument("--matmul", type=int, default=512, help="matmul size (default 512)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="4M elements, 3 repeats")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 4 << 20, 3
    os.environ.setdefault("PYPTO_ASYNC_CACHE_DIR", tempfile.mkdtemp(prefix="pto_bench_cache_"))

    ax = bench_axpy(args.n, args.repeats, args.tile)
    mm = bench_matmul(args.matmul, args.repeats)
    table = rows(ax, mm)
    print(f"{'benchmark':40} {'figure':>16} {'reference':>16} {'ratio':>8}  target")
    for r in table:
        ref = f"{r['reference']:.3f}" if r.get("reference") is not None else "-"
        print(f"{r['name']:40} {r['figure']:10.3f} {r['unit']:>5} {ref:>16} {r['ratio']:7.2f}x  {r.get('target', '')}")
    print(f"BLAS seen by threadpoolctl: {mm['blas']}; OPENBLAS_CORETYPE={mm['openblas_coretype']!r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": table, "axpy": ax, "matmul": mm}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
