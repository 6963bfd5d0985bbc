"""A fourth pass of programs written from PyPTO's user guide, run on the sim.

The pages the first three passes (test_user_guide_programs.py, 2, 3) do not cite: the performance
pages (performance/01-task-granularity.md, 02-runtime-overhead.md, 03-dependencies.md, 04-incore.md,
05-memory.md, 06-host.md), the tools pages (tools/00-debugging.md, 01-torch-codegen.md,
02-memory-map.md) and the scheduling tutorial (tutorials/05-scheduling-tuning.md).  Each is what a
user following the page would write (the import and the platform changed only): the page's
before/after kernels in other shapes, checked on random data against torch with the outputs
poisoned first, and what the page says to look at to confirm a change (the task count and the
edges of ``compiled.task_graph``, the DFX files) checked too.
"""

import json

import pytest
import torch

import pypto_async
import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoError
from pypto_async.runtime import ChipWorker, RunConfig, benchmark

# The slow tier (CI runs both): whole programs from the guide's pages, a kernel build or more each,
# and the fast tier's budget is mostly the C compiler's.
pytestmark = pytest.mark.slow

CFG = RunConfig(platform="sim")


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


def _tasks(compiled) -> int:
    return len(compiled.task_graph.tasks)


def _edges(compiled) -> set:
    return {(e.src, e.dst) for e in compiled.task_graph.edges}


# --- performance/01-task-granularity.md: larger tiles, a loop inside the region, merged regions ----------

ROWS, COLS = 192, 64


@pl.jit
def unrolled_small(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.unroll(ROWS // 32):  # unrolled while tracing: one region, one task, per chunk
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.sub(pl.load(a, [i * 32, 0], [32, COLS]), pl.load(b, [i * 32, 0], [32, COLS])),
                     [i * 32, 0], c)
    return c


@pl.jit
def unrolled_large(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    for i in pl.unroll(ROWS // 96):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.sub(pl.load(a, [i * 96, 0], [96, COLS]), pl.load(b, [i * 96, 0], [96, COLS])),
                     [i * 96, 0], c)
    return c


@pl.jit
def loop_in_region(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(ROWS // 32):  # a device loop: the chunks in one task
            pl.store(pl.sub(pl.load(a, [i * 32, 0], [32, COLS]), pl.load(b, [i * 32, 0], [32, COLS])),
                     [i * 32, 0], c)
    return c


def test_growing_a_task_keeps_the_result_and_drops_the_task_count():
    a, b = torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)
    for kernel, tasks in ((unrolled_small, 6), (unrolled_large, 2), (loop_in_region, 1)):
        c = _nan(ROWS, COLS)
        kernel(a, b, c, config=CFG)
        torch.testing.assert_close(c, a - b)
        assert _tasks(kernel.compile(a, b, c)) == tasks, kernel.__name__


def test_merging_a_producer_consumer_chain_keeps_the_intermediate_on_chip():
    @pl.jit
    def via_gm(a: pl.Tensor, b: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(a, [0, 0], [64, COLS]), pl.load(b, [0, 0], [64, COLS])), [0, 0], scratch)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.sqrt(pl.abs(pl.load(scratch, [0, 0], [64, COLS]))), [0, 0], out)
        return scratch, out

    @pl.jit
    def merged(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            s = pl.mul(pl.load(a, [0, 0], [64, COLS]), pl.load(b, [0, 0], [64, COLS]))
            pl.store(pl.sqrt(pl.abs(s)), [0, 0], out)
        return out

    a, b = torch.randn(64, COLS), torch.randn(64, COLS)
    want = torch.sqrt(torch.abs(a * b))
    scratch, out = _nan(64, COLS), _nan(64, COLS)
    via_gm(a, b, scratch, out, config=CFG)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(scratch, a * b)
    compiled = via_gm.compile(a, b, scratch, out)
    assert _tasks(compiled) == 2 and _edges(compiled) == {(0, 1)}  # the consumer waits on the producer
    out = _nan(64, COLS)
    merged(a, b, out, config=CFG)
    torch.testing.assert_close(out, want)
    assert _tasks(merged.compile(a, b, out)) == 1


# --- performance/02-runtime-overhead.md: one SPMD dispatch for many blocks, allow_early_resolve -----------


def test_per_block_regions_and_one_spmd_launch_compute_the_same():
    BLOCKS, TR = 4, 16

    @pl.jit
    def per_block(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        for i in pl.unroll(BLOCKS):
            with pl.at(level=pl.Level.CORE_GROUP):
                t = pl.maximum(pl.load(a, [i * TR, 0], [TR, COLS]), pl.load(b, [i * TR, 0], [TR, COLS]))
                pl.store(t, [i * TR, 0], c)
        return c

    @pl.jit
    def spmd(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        for i in pl.spmd(BLOCKS):  # one launch of BLOCKS blocks
            t = pl.maximum(pl.load(a, [i * TR, 0], [TR, COLS]), pl.load(b, [i * TR, 0], [TR, COLS]))
            pl.store(t, [i * TR, 0], c)
        return c

    a, b = torch.randn(BLOCKS * TR, COLS), torch.randn(BLOCKS * TR, COLS)
    for kernel in (per_block, spmd):
        c = _nan(BLOCKS * TR, COLS)
        kernel(a, b, c, config=CFG)
        torch.testing.assert_close(c, torch.maximum(a, b))
    assert _tasks(per_block.compile(a, b, c)) == BLOCKS
    assert spmd.compile(a, b, c).block_num == BLOCKS


def test_an_early_resolve_producer_changes_no_result():
    @pl.jit
    def chain(a: pl.Tensor, scratch: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP, allow_early_resolve=True):
            pl.store(pl.add(pl.load(a, [0, 0], [32, COLS]), 0.5), [0, 0], scratch)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.log(pl.load(scratch, [0, 0], [32, COLS])), [0, 0], out)
        return scratch, out

    a = torch.rand(32, COLS) + 0.1
    scratch, out = _nan(32, COLS), _nan(32, COLS)
    chain(a, scratch, out, config=CFG)
    torch.testing.assert_close(out, torch.log(a + 0.5))
    assert _edges(chain.compile(a, scratch, out)) == {(0, 1)}  # the hint removes no edge


def test_a_hard_barrier_is_refused_by_name():
    @pl.jit
    def barrier(a: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        with pl.spmd(2):
            r = pl.get_block_idx() * 32
            pl.store(pl.load(a, [r, 0], [32, 64]), [r, 0], out)
            pl.system.syncall(core_type="aiv_only")
        return out

    with pytest.raises(PtoError, match="syncall"):
        barrier.compile()


# --- performance/03-dependencies.md: the WAW chain, and the three ways to claim disjointness ---------------

N, TILE = 4, 16


@pl.jit
def serialized(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.range(N):
        with pl.at(level=pl.Level.CORE_GROUP):  # each iteration writes `out`: ordered after the last
            pl.store(pl.exp(pl.load(a, [i * TILE, 0], [TILE, COLS])), [i * TILE, 0], out)
    return out


@pl.jit
def no_dep_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.range(N):
        with pl.at(level=pl.Level.CORE_GROUP, no_dep_args=[out]):
            pl.store(pl.exp(pl.load(a, [i * TILE, 0], [TILE, COLS])), [i * TILE, 0], out)
    return out


@pl.jit
def manual_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.manual_scope():
        for i in pl.range(N):
            with pl.at(level=pl.Level.CORE_GROUP):
                pl.store(pl.exp(pl.load(a, [i * TILE, 0], [TILE, COLS])), [i * TILE, 0], out)
    return out


@pl.jit
def scratch_claim(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    scratch = pl.create_tensor([N * TILE, COLS], pl.FP32, manual_dep=True)
    writers = pl.array.create(N, pl.TASK_ID)
    for i in pl.range(N):
        with pl.at(level=pl.Level.CORE_GROUP) as tid:
            pl.store(pl.exp(pl.load(a, [i * TILE, 0], [TILE, COLS])), [i * TILE, 0], scratch)
        writers[i] = tid
    with pl.at(level=pl.Level.CORE_GROUP, deps=[writers]):  # the reader names its writers itself
        for i in pl.range(N):
            pl.store(pl.load(scratch, [i * TILE, 0], [TILE, COLS]), [i * TILE, 0], out)
    return out


@pytest.mark.parametrize("kernel", [serialized, no_dep_claim, manual_claim, scratch_claim],
                         ids=lambda k: k.__name__)
def test_every_claim_of_disjoint_bands_computes_the_same(kernel):
    a = torch.randn(N * TILE, COLS)
    out = _nan(N * TILE, COLS)
    kernel(a, out, config=CFG)
    torch.testing.assert_close(out, torch.exp(a))


def test_no_band_waits_on_another():
    """The page's serialized kernel has a WAW edge per iteration (PyPTO orders writes to one tensor); here the
    task graph tells the bands' windows apart, so it has none, and the claims leave none either."""
    a, out = torch.randn(N * TILE, COLS), _nan(N * TILE, COLS)
    chain = serialized.compile(a, out).task_graph
    assert len(chain.tasks) == N and not chain.edges
    for kernel in (no_dep_claim, manual_claim):
        graph = kernel.compile(a, out).task_graph
        assert len(graph.tasks) == N and not graph.edges, kernel.__name__
    graph = scratch_claim.compile(a, out).task_graph
    assert {(e.src, e.dst) for e in graph.edges} == {(i, N) for i in range(N)}  # only the declared ones


def test_a_slice_per_iteration_names_a_distinct_region():
    @pl.jit
    def bands(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        for i in pl.range(N):
            part = pl.slice(out, [TILE, COLS], [i * TILE, 0])
            with pl.at(level=pl.Level.CORE_GROUP):
                part[:] = pl.mul(pl.slice(a, [TILE, COLS], [i * TILE, 0]), 2.0)
        return out

    a, out = torch.randn(N * TILE, COLS), _nan(N * TILE, COLS)
    bands(a, out, config=CFG)
    torch.testing.assert_close(out, 2.0 * a)
    assert not bands.compile(a, out).task_graph.edges  # the bands do not overlap: no edge between them


# --- performance/04-incore.md: double buffering, explicit slots, split-K partials --------------------------

NT, TR = 6, 16


@pl.jit
def single_buffer(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(NT):
            pl.store(pl.neg(pl.exp(pl.load(a, [i * TR, 0], [TR, COLS]))), [i * TR, 0], out)
    return out


@pl.jit
def double_buffer(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.pipeline(NT, stage=2):
            pl.store(pl.neg(pl.exp(pl.load(a, [i * TR, 0], [TR, COLS]))), [i * TR, 0], out)
    return out


@pl.jit
def two_slots(a: pl.Tensor, out: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i in pl.range(NT):
            tile: pl.Tile[[TR, COLS], pl.FP32, pl.MemRef("ub", slots=2)[i % 2], pl.Mem.Vec] = pl.load(
                a, [i * TR, 0], [TR, COLS], target_memory=pl.Mem.Vec)
            pl.store(pl.neg(pl.exp(tile)), [i * TR, 0], out)
    return out


@pytest.mark.parametrize("kernel", [single_buffer, double_buffer, two_slots], ids=lambda k: k.__name__)
def test_the_buffering_forms_compute_the_same(kernel):
    a = torch.randn(NT * TR, COLS)
    out = _nan(NT * TR, COLS)
    kernel(a, out, config=CFG)
    torch.testing.assert_close(out, -torch.exp(a))


def test_split_k_partials_combined_after_a_parallel_loop():
    SPLITS, M, K, NN = 4, 16, 128, 32
    KS = K // SPLITS

    @pl.jit
    def split_k(a: pl.Tensor, b: pl.Tensor, parts: pl.Out[pl.Tensor], c: pl.Out[pl.Tensor]):
        for ks in pl.parallel(SPLITS):  # each split its slice of K, a task each
            with pl.at(level=pl.Level.CORE_GROUP):
                acc = pl.matmul(pl.load(a, [0, ks * KS], [M, KS]), pl.load(b, [ks * KS, 0], [KS, NN]))
                pl.store(acc, [ks * M, 0], parts)
        with pl.at(level=pl.Level.CORE_GROUP):
            total = pl.load(parts, [0, 0], [M, NN])
            for j in pl.range(1, SPLITS):
                total = pl.add(total, pl.load(parts, [j * M, 0], [M, NN]))
            pl.store(total, [0, 0], c)
        return parts, c

    a, b = torch.randn(M, K), torch.randn(K, NN)
    parts, c = _nan(SPLITS * M, NN), _nan(M, NN)
    split_k(a, b, parts, c, config=CFG)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    compiled = split_k.compile(a, b, parts, c)
    assert _tasks(compiled) == SPLITS + 1 and _edges(compiled) == {(i, SPLITS) for i in range(SPLITS)}


# --- performance/05-memory.md: manual scope placement, ring sizes --------------------------------------


def test_manual_scopes_place_the_phases_and_change_no_result():
    @pl.jit(auto_scope=False)
    def phases(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.scope():
            for i in pl.range(N):
                with pl.at(level=pl.Level.CORE_GROUP):
                    pl.store(pl.mul(pl.load(a, [i * TILE, 0], [TILE, COLS]), 3.0), [i * TILE, 0], out)
            with pl.scope():  # the second phase one level deeper
                with pl.at(level=pl.Level.CORE_GROUP):
                    for i in pl.range(N):
                        pl.store(pl.sub(pl.load(out, [i * TILE, 0], [TILE, COLS]), 1.0), [i * TILE, 0], out)
        return out

    a = torch.randn(N * TILE, COLS)
    out = _nan(N * TILE, COLS)
    phases(a, out, config=CFG)
    torch.testing.assert_close(out, 3.0 * a - 1.0)


def test_per_level_ring_sizes_on_the_worker():
    @pl.jit
    def scaled(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            for i in pl.range(N):
                pl.store(pl.add(pl.mul(pl.load(a, [i * TILE, 0], [TILE, COLS]), -2.0), 1.0), [i * TILE, 0], out)
        return out

    sized = RunConfig(platform="sim", ring_task_window=[256, 512, 1024, 2048], ring_heap=[1 << 20, 1 << 21, 1 << 21, 1 << 22])
    a = torch.randn(N * TILE, COLS)
    out = _nan(N * TILE, COLS)
    scaled(a, out, config=sized)
    torch.testing.assert_close(out, -2.0 * a + 1.0)
    with pytest.raises(PtoError, match="ring_task_window"):
        scaled(a, out, config=RunConfig(platform="sim", ring_task_window=[256, 512, 1024]))  # one per level


# --- performance/06-host.md: a resident weight, benchmark() -------------------------------------------------


def test_a_resident_weight_is_uploaded_once_and_read_by_every_batch():
    B = pl.dynamic("B")

    @pl.jit
    def project(x: pl.Tensor[[B, 64], pl.FP32], w: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[B, 32], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.matmul(pl.load(x, [0, 0], [16, 64]), pl.load(w, [0, 0], [64, 32])), [0, 0], out)
        return out

    host_weight = torch.randn(64, 32)
    compiled = ir.compile(project.lower(torch.zeros(16, 64), host_weight, torch.zeros(16, 32)), platform=CFG.platform)
    with ChipWorker(config=CFG) as w:
        weight = w.alloc_tensor((64, 32), torch.float32, init=host_weight)
        for _ in range(3):
            x = torch.randn(16, 64)
            out = _nan(16, 32)
            compiled(x, weight, out)
            torch.testing.assert_close(out, x @ host_weight, rtol=1e-4, atol=1e-4)
        w.free_tensor(weight)


def test_benchmark_owns_the_loop_and_reports_per_round_times():
    @pl.jit
    def add(a: pl.Tensor, b: pl.Tensor, c: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            c[:] = pl.add(a, b)
        return c

    a, b, c = torch.randn(32, COLS), torch.randn(32, COLS), _nan(32, COLS)
    compiled = add.compile(a, b, c)
    stats = benchmark(compiled, [a, b, c], rounds=5, warmup=1, platform="sim", device_id=0)
    assert len(stats.samples) == 5 and stats.rounds == 5 and stats.warmup == 1
    assert 0 < stats.device_wall_us_min <= stats.device_wall_us_median
    torch.testing.assert_close(c, a + b)  # the rounds ran the kernel on these tensors


# --- tools/00-debugging.md: the lowered program as source, the log level ---------------------------------


def test_lower_shows_the_outlined_program_and_no_artifacts(tmp_path):
    @pl.jit
    def halve(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.mul(a, 0.5)
        return out

    a = torch.randn(32, COLS)
    src = halve.lower(a, torch.zeros(32, COLS)).as_python()
    assert "@pl.program" in src and "def halve_incore_0(" in src and "pl.at" not in src
    concise = halve.lower(a, torch.zeros(32, COLS)).as_python(concise=True)
    assert "def halve_incore_0(" in concise and len(concise) < len(src)
    ns: dict = {}
    exec(src, ns)  # the printed program runs as it is
    out = _nan(32, COLS)
    compiled = ir.compile(ns["halve"], platform="sim")
    with ChipWorker(config=CFG) as w:
        w.run(compiled, a, out)
    torch.testing.assert_close(out, a * 0.5)


def test_the_log_level_round_trips():
    before = pypto_async.get_log_level()
    try:
        pypto_async.set_log_level(pypto_async.LogLevel.DEBUG)
        assert pypto_async.get_log_level() == pypto_async.LogLevel.DEBUG
    finally:
        pypto_async.set_log_level(before)
    assert pypto_async.get_log_level() == before


# --- tools/01-torch-codegen.md: a program as torch code, against a golden ----------------------------------


@pl.program
class NormThenProject:
    """An RMS norm and a projection, in BF16 storage: the page's golden-check pattern."""

    @pl.function(type=pl.FunctionType.InCore)
    def norm(self, x: pl.Tensor[[16, 64], pl.FP32], g: pl.Tensor[[1, 64], pl.FP32],
             y: pl.Out[pl.Tensor[[16, 64], pl.BF16]]) -> pl.Tensor[[16, 64], pl.BF16]:
        t = pl.load(x, [0, 0], [16, 64])
        ms = pl.row_sum(pl.mul(t, t))
        inv = pl.rsqrt(pl.add(pl.mul(ms, 1.0 / 64), 1e-6))
        return pl.store(pl.cast(pl.col_expand_mul(pl.row_expand_mul(t, inv), pl.load(g, [0, 0], [1, 64])),
                                pl.BF16), [0, 0], y)

    @pl.function(type=pl.FunctionType.InCore)
    def project(self, y: pl.Tensor[[16, 64], pl.BF16], w: pl.Tensor[[64, 32], pl.BF16],
                out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]) -> pl.Tensor[[16, 32], pl.FP32]:
        return pl.store(pl.matmul(pl.load(y, [0, 0], [16, 64]), pl.load(w, [0, 0], [64, 32]),
                                  out_dtype=pl.FP32), [0, 0], out)

    @pl.function(type=pl.FunctionType.Orchestration)
    def main(self, x: pl.Tensor[[16, 64], pl.FP32], g: pl.Tensor[[1, 64], pl.FP32],
             w: pl.Tensor[[64, 32], pl.BF16], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
        y = pl.create_tensor([16, 64], pl.BF16)
        y = self.norm(x, g, y)
        out = self.project(y, w, out)
        return out


def _norm_golden(x, g, w):
    inv = torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    y = (x * inv * g).bfloat16()
    return y.float() @ w.float()


def test_torch_codegen_of_a_program_matches_the_golden_and_the_device():
    from pypto_async.backend import BackendType, reset_for_testing, set_backend_type
    from pypto_async.debug import torch_codegen
    from pypto_async.ir.pass_manager import OptimizationStrategy, PassManager

    torch.manual_seed(7)
    x, g = torch.randn(16, 64), torch.rand(1, 64) + 0.5
    w = (torch.randn(64, 32) / 8).bfloat16()
    want = _norm_golden(x, g, w)
    ns: dict = {}
    exec(torch_codegen(NormThenProject, check_shapes=True), ns)  # noqa: S102 - the page's pattern
    out = _nan(16, 32)
    ns["main"](x, g, w, out)
    torch.testing.assert_close(out, want, rtol=5e-2, atol=5e-2)
    reset_for_testing()
    set_backend_type(BackendType.Ascend910B)
    try:
        transformed = PassManager.get_strategy(OptimizationStrategy.Default).run_passes(NormThenProject)
        ns = {}
        exec(torch_codegen(transformed, check_shapes=True), ns)  # noqa: S102
    finally:
        reset_for_testing()
    again = _nan(16, 32)
    ns["main"](x, g, w, again)
    torch.testing.assert_close(again, out)
    device = _nan(16, 32)
    with ChipWorker(config=CFG) as wk:
        wk.run(ir.compile(NormThenProject, platform="sim"), x, g, w, device)
    torch.testing.assert_close(device, want, rtol=5e-2, atol=5e-2)


# --- tools/02-memory-map.md, tutorials/05-scheduling-tuning.md: the pass dumps and the DFX files ----------


def test_explicit_pass_dumps_land_in_the_output_dir():
    @pl.jit
    def twice(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(a, a)
        return out

    a = torch.randn(16, COLS)
    compiled = twice.compile(a, a, config=RunConfig(platform="sim", dump_passes=ir.PassDumpLevel.EXPLICIT))
    dumps = sorted(p.name for p in (compiled.output_dir / "passes_dump").iterdir())
    assert dumps and dumps[0].startswith("00_")
    out = _nan(16, COLS)
    compiled(a, out)
    torch.testing.assert_close(out, 2 * a)


def test_the_scheduling_tutorials_dfx_switches_write_their_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    @pl.jit
    def stages(a: pl.Tensor, b: pl.Tensor, out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.add(pl.load(a, [0, 0], [32, COLS]), pl.load(b, [0, 0], [32, COLS]))
            pl.store(t, [0, 0], out)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.exp(pl.load(out, [0, 0], [32, COLS])), [0, 0], out)
        return out

    a, b = torch.randn(32, COLS), torch.randn(32, COLS)
    runs = {"enable_dep_gen": True, "enable_chip_swimlane": True, "enable_scope_stats": True}
    for field, value in runs.items():
        out = _nan(32, COLS)
        cfg = RunConfig(platform="sim", save_kernels_dir=str(tmp_path / field), **{field: value})
        stages(a, b, out, config=cfg)
        torch.testing.assert_close(out, torch.exp(a + b))
    found = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert "deps.json" in found
    assert any(n.startswith("merged_swimlane_") and n.endswith(".json") for n in found)
    assert "scope_stats.jsonl" in found
    deps = json.loads(next(tmp_path.rglob("deps.json")).read_text())
    assert deps  # the graph of the two stages
    out = _nan(32, COLS)
    stages(a, b, out, config=RunConfig(platform="sim", ring_task_window=64, ring_heap=1 << 20))
    torch.testing.assert_close(out, torch.exp(a + b))


# --- appendix/00-feature-matrix.md: the platform strings and their backends --------------------------------


def test_each_platform_string_compiles_with_its_backend_to_the_same_numbers():
    from pypto_async.backend import BackendType

    @pl.jit
    def axpb(a: pl.Tensor[[16, 64], pl.FP32], b: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        with pl.at(level=pl.Level.CORE_GROUP):
            out[:] = pl.add(pl.mul(a, 1.5), b)
        return out

    a, b = torch.randn(16, 64), torch.randn(16, 64)
    for platform, backend in (("a2a3sim", BackendType.Ascend910B), ("a5sim", BackendType.Ascend950)):
        compiled = ir.compile(axpb.lower(a, b, a), platform=platform, backend_type=backend)
        out = _nan(16, 64)
        with ChipWorker(config=RunConfig(platform=platform)) as w:
            w.run(compiled, a, b, out)
        torch.testing.assert_close(out, a * 1.5 + b)
    with pytest.raises(PtoError, match="CCE"):
        ir.compile(axpb.lower(a, b, a), platform="a2a3sim", backend_type=BackendType.CCE)


# --- performance/00-swimlane.md: a worker traced for its whole life, with its task graph ------------------


def test_a_worker_configured_for_the_swimlane_writes_its_trace_when_it_closes(tmp_path):
    @pl.jit
    def two_stage(a: pl.Tensor, mid: pl.Out[pl.Tensor], out: pl.Out[pl.Tensor]):
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.mul(pl.load(a, [0, 0], [32, COLS]), 4.0), [0, 0], mid)
        with pl.at(level=pl.Level.CORE_GROUP):
            pl.store(pl.sub(pl.load(mid, [0, 0], [32, COLS]), 1.0), [0, 0], out)
        return mid, out

    cfg = RunConfig(platform="sim", enable_chip_swimlane=4, enable_dep_gen=True, save_kernels=True,
                    save_kernels_dir=str(tmp_path))
    a = torch.randn(32, COLS)
    compiled = two_stage.compile(a, a, a)
    with ChipWorker(config=cfg) as w:
        for _ in range(2):
            mid, out = _nan(32, COLS), _nan(32, COLS)
            w.run(compiled, a, mid, out)
            torch.testing.assert_close(out, 4.0 * a - 1.0)
    traces = list(tmp_path.glob("pto_swimlane_*.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())
    assert events  # the worker's launches, in Chrome/Perfetto form
