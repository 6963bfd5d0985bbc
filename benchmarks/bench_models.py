"""Benchmark the model programs: task counts, compile and launch times, at small and at real shapes.

Each model is compiled (a fresh kernel cache, so the C compiler runs) and launched once on
random data; one line per model gives its shape, the tasks and edges of its program (the
task graph ``deps.json`` is written from), the compile time and the launch time (wall clock,
the first launch, which loads the program).  Models:

``decode-small`` / ``decode-qwen3-32b``
    tests/models/decode_program.py: a whole Qwen3 decode layer (RMSNorm, Q/K/V, RoPE and the
    KV-cache write, grouped-query attention over the cache, out projection, MLP), at a small
    shape and at Qwen3-32B's (hidden 8192, 64/8 heads, intermediate 25600, batch 16, 4096-token
    caches).
``pypto-qwen3_jit``
    PyPTO's ``examples/models/qwen3_jit/qwen3_decode.py`` at its own (Qwen3-32B) shapes, adapted
    as benchmarks/pypto_examples.py adapts it (needs ``--pypto CHECKOUT``).
``flash-attention`` / ``paged-attention``
    tests/models/test_attention.py's programs.

    python benchmarks/bench_models.py [--quick] [--pypto /tmp/pypto] [--json PATH]

``--quick`` leaves out the two real-shape decode layers.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "models"))


def _measure(name: str, shape: str, kernel, args: list, device_memory: int | None = None) -> dict:
    from pypto_async.runtime import ChipWorker, RunConfig

    t0 = time.perf_counter()
    compiled = kernel.compile(*args)
    t1 = time.perf_counter()
    with ChipWorker(RunConfig(device_memory=device_memory) if device_memory else RunConfig()):
        compiled(*args)
    t2 = time.perf_counter()
    graph = compiled.task_graph
    return {"model": name, "shape": shape, "tasks": len(graph.tasks) if graph else None,
            "edges": len(graph.edges) if graph else None, "compile_s": round(t1 - t0, 2),
            "launch_s": round(t2 - t1, 2)}


class _Program:
    """A @pl.program class as the kernel interface _measure takes (compile, then call)."""

    def __init__(self, cls):
        self.cls = cls

    def compile(self, *args):
        from pypto_async import ir

        return ir.compile(self.cls)


def _decode(shape, label: str, memory: int | None):
    import decode_program as dp

    args = list(dp.inputs(shape).values())
    desc = (f"batch {shape.batch}, hidden {shape.hidden}, heads {shape.num_heads}/{shape.num_kv_heads}, "
            f"intermediate {shape.intermediate}, cache {shape.max_seq}")
    return _measure(label, desc, dp.build(shape), args, memory)


def _pypto_qwen3(checkout: Path) -> dict:
    import torch

    spec = importlib.util.spec_from_file_location("pypto_examples_runner", ROOT / "benchmarks" / "pypto_examples.py")
    runner = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = runner
    spec.loader.exec_module(runner)
    tmp = Path(tempfile.mkdtemp(prefix="bench_models_"))
    for src in (checkout / "examples").rglob("*.py"):
        if "models" in src.relative_to(checkout / "examples").parts[:1] or src.parent == checkout / "examples":
            dst = tmp / "examples" / src.relative_to(checkout / "examples")
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(runner.adapt(src.read_text()))
    (tmp / "examples" / "__init__.py").touch()
    sys.path.insert(0, str(tmp))
    C = importlib.import_module("examples.models.qwen3_jit.config")
    kernel = importlib.import_module("examples.models.qwen3_jit.qwen3_decode").qwen3_decode
    bf = torch.bfloat16
    B, H, KV, D, S, I = C.BATCH, C.HIDDEN, C.KV_HIDDEN, C.HEAD_DIM, C.MAX_SEQ, C.INTERMEDIATE
    args = [torch.randn(B, H).to(bf), torch.rand(1, H) + 0.5, torch.randn(H, H).to(bf), torch.randn(H, KV).to(bf),
            torch.randn(H, KV).to(bf), torch.randint(1, S + 1, (B,), dtype=torch.int32), torch.randn(S, D),
            torch.randn(S, D), torch.zeros(C.CACHE_ROWS, D, dtype=bf), torch.zeros(C.CACHE_ROWS, D, dtype=bf),
            torch.randn(H, H).to(bf), torch.rand(1, H) + 0.5, torch.randn(H, I).to(bf), torch.randn(H, I).to(bf),
            torch.randn(I, H).to(bf), torch.zeros(B, H, dtype=bf)]
    return _measure("pypto-qwen3_jit", f"batch {B}, hidden {H}, intermediate {I} (PyPTO's config.py)", kernel,
                    args, 8 << 30)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the real-shape decode layers")
    parser.add_argument("--pypto", type=Path, default=None, help="a PyPTO checkout (for its qwen3_jit)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYPTO_ASYNC_CACHE_DIR", tempfile.mkdtemp(prefix="bench_models_cache_"))

    import decode_program as dp
    import test_attention as ta
    import torch

    rows = [_decode(dp.Shape(), "decode-small", None)]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, ta.D, generator=g).bfloat16() for n in (ta.SQ, ta.SK, ta.SK))
    rows.append(_measure("flash-attention", f"q {ta.SQ}, kv {ta.SK}, head_dim {ta.D}", ta.flash_attention,
                         [q, k, v, torch.zeros(ta.SQ, ta.D)]))
    pa = [torch.randn(ta.BATCH * ta.HEADS, ta.D).bfloat16(), torch.randn(ta.POOL * ta.BS, ta.D).bfloat16(),
          torch.randn(ta.POOL * ta.BS, ta.D).bfloat16(), torch.randperm(ta.POOL)[:ta.BATCH * ta.MAXB].int(),
          torch.full((ta.BATCH,), ta.NB * ta.BS, dtype=torch.int32), torch.zeros(ta.BATCH * ta.HEADS, ta.D)]
    rows.append(_measure("paged-attention", f"batch {ta.BATCH}, heads {ta.HEADS}, {ta.NB} blocks of {ta.BS}",
                         _Program(ta.PagedAttention), pa))
    if not args.quick:
        rows.append(_decode(dp.QWEN3_32B, "decode-qwen3-32b", 8 << 30))
        if args.pypto is not None:
            rows.append(_pypto_qwen3(args.pypto))
    print("| model | shape | tasks | edges | compile s | launch s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['shape']} | {r['tasks']} | {r['edges']} | {r['compile_s']} | {r['launch_s']} |")
    if args.json:  # pypto-async bench reads "rows" (see pypto_async/_bench.py); "models" holds the table
        table = []
        for r in rows:
            table.append({"name": f"{r['model']}: tasks (edges {r['edges']})", "figure": r["tasks"], "unit": "tasks"})
            table.append({"name": f"{r['model']}: first launch", "figure": r["launch_s"], "unit": "s"})
        args.json.write_text(json.dumps({"rows": table, "models": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
