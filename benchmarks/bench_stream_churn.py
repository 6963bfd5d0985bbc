"""Benchmark the memory a service keeps per request when each request opens its own stream.

The pattern of issue 25 (item 5): a weight stays resident on the device; each
request opens a stream, reads the weight in a launch (every tenth also writes
it), copies its output back, frees it and closes the stream.  Before the fold
of closed streams (``_stream.fold_point``), the weight kept every stream that
ever used it, with their events and clocks, and the memory grew by about
4-6 KiB per request without bound.  Figures, with ``tracemalloc`` (Python
allocations, after a warm-up and a full GC):

``bytes/request``
    Growth over the measured requests, per request.  Target: under 64 B
    (flat: what is left is noise and caches).
``records``
    The lengths of the weight's joined-stream set and readers, and the
    largest clock of a live stream, at the end.

    python benchmarks/bench_stream_churn.py [--quick] [--sanitize raise] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.kernels import KernelLib  # noqa: E402
from pypto_async.runtime import ChipWorker, RunConfig  # noqa: E402

N = 64


def measure(requests: int, sanitize: str) -> dict:
    lib = KernelLib(tempfile.mkdtemp(prefix="bench_churn_"))
    cfg = RunConfig(cores=2, copy_engines=2, device_memory=64 << 20, sanitize=sanitize)
    with ChipWorker(cfg) as w:
        scale = w.register(lib.get("scale", N))
        inc = w.register(lib.get("inc", N))
        x = np.random.default_rng().standard_normal(N).astype(np.float32)
        weight = w.alloc_tensor(N, np.float32, init=x)
        writes = 0

        def request(i: int) -> None:
            nonlocal writes
            s = w.stream()
            if i % 10 == 3:
                inc.submit(weight, stream=s)
                writes += 1
            out = w.alloc_tensor(N, np.float32, stream=s)
            scale.submit(weight, 2.0, out, stream=s)
            got = out.numpy(stream=s)
            if i % 97 == 0 and not np.allclose(got, 2 * (x + writes), rtol=1e-6):
                raise AssertionError("wrong output")
            out.free()
            s.close()

        for i in range(min(500, requests)):
            request(i)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for i in range(requests):
            request(i)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(st.size_diff for st in after.compare_to(before, "filename"))
        live = list(w._streams.values())
        sizes = [w._hazards.sizes(weight, s) for s in live]  # the driver's records: (reads kept, clock)
        result = {"requests": requests, "sanitize": sanitize, "bytes_per_request": grown / requests,
                  "weight_streams": len(weight._streams), "weight_readers": sizes[0][0],
                  "largest_clock": max(c for _, c in sizes),
                  "largest_oclock": max(len(s._oclock) for s in live)}
        weight.free()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 requests instead of 20,000")
    parser.add_argument("--sanitize", default="off", choices=("off", "raise"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    r = measure(2000 if args.quick else 20000, args.sanitize)
    print(f"stream per request, sanitize={r['sanitize']}: {r['bytes_per_request']:.1f} B/request over "
          f"{r['requests']} requests (target < 64); weight: {r['weight_streams']} streams, "
          f"{r['weight_readers']} readers; largest clock {r['largest_clock']}, "
          f"ordering-only clock {r['largest_oclock']}")
    if args.json:
        r["rows"] = [{"name": f"a stream per request on a resident weight, {r['requests']:,} requests: memory "
                              "grown per request (tracemalloc)",
                      "figure": r["bytes_per_request"], "unit": "B", "target": "< 64 B",
                      "ok": r["bytes_per_request"] < 64}]
        args.json.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
