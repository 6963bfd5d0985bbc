"""Measure compile times of the quickstart kernel: cold, disk-cache hit, in-memory hit.

(a) Cold compile: ``ir.compile(add_kernel.lower(...))`` into an empty cache
    (trace, passes, codegen, the C compiler, the atomic publish; the
    compiler-version probe included), against the reference of running the
    C compiler alone on the same generated source (measured interleaved).
(b) Cache hit: ``ir.compile`` of the same program with the entry on disk
    (passes, hash, one JSON read): target a few milliseconds.
(c) In-memory hit: ``add_kernel.compile(*args)`` once the specialisation is
    cached in the JitFunction (signature key only).

Medians of repeats.  Run ``python benchmarks/bench_compile.py [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.ir import _compile

ROWS, COLS = 128, 128


@pl.jit
def add_kernel(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        ta = pl.load(a, [0, 0], [ROWS, COLS])
        tb = pl.load(b, [0, 0], [ROWS, COLS])
        pl.store(pl.add(ta, tb), [0, 0], out)
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="3 repeats")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 3

    a = np.zeros((ROWS, COLS), np.float32)
    root = Path(tempfile.mkdtemp(prefix="pto_bench_compile_"))
    cold, bare, hit, mem, lower = [], [], [], [], []
    try:
        for r in range(args.repeats):
            os.environ["PYPTO_ASYNC_CACHE_DIR"] = str(root / f"cold{r}")
            _compile._compiler_versions.clear()  # a fresh process probes the compiler once
            program = None

            def cold_compile():
                nonlocal program
                program = add_kernel.lower(a, a, a)
                return ir.compile(program)

            cold.append(_timed(cold_compile))
            compiled = ir.compile(program)
            cmd = [*shlex.split(os.environ.get("CC") or "cc"), *compiled.flags,
                   f"-I{Path(ir.__file__).resolve().parent.parent / 'include'}",
                   "-o", str(root / "bare.so"), str(compiled.source_path), "-lm"]
            bare.append(_timed(lambda: subprocess.run(cmd, check=True)))
            hit.append(_timed(lambda: ir.compile(program)))
            lower.append(_timed(lambda: add_kernel.lower(a, a, a)))
            add_kernel.compile(a, a, a)
            mem.append(_timed(lambda: add_kernel.compile(a, a, a)))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in
           {"cold_s": cold, "bare_cc_s": bare, "disk_hit_s": hit, "memory_hit_s": mem, "lower_s": lower}.items()}
    rows = [
        {"name": "cold compile of the quickstart kernel", "figure": med["cold_s"] * 1e3, "unit": "ms",
         "reference": med["bare_cc_s"] * 1e3, "reference_name": "C compiler alone",
         "ratio": med["cold_s"] / med["bare_cc_s"]},
        {"name": "trace + passes (kernel.lower)", "figure": med["lower_s"] * 1e3, "unit": "ms"},
        {"name": "cache hit, on disk (ir.compile)", "figure": med["disk_hit_s"] * 1e3, "unit": "ms",
         "target": "< 5 ms", "ok": med["disk_hit_s"] < 5e-3},
        {"name": "cache hit, in memory (kernel.compile)", "figure": med["memory_hit_s"] * 1e6, "unit": "µs"},
    ]
    print(f"{'benchmark':40} {'figure':>14} {'reference':>14}  target")
    for r in rows:
        ref = f"{r['reference']:.2f} {r['unit']}" if r.get("reference") is not None else "-"
        print(f"{r['name']:40} {r['figure']:9.2f} {r['unit']:>4} {ref:>14}  {r.get('target', '')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, **med, "repeats": args.repeats}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
