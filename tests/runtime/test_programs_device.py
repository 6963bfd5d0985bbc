"""Programs on the device: the orchestration submits tasks, ready tasks run on free cores at once.

Concurrency is proved from the trace's timestamps, with delay kernels
(``testing.delay_task``) long enough that an overlap is not luck; ordering is
proved the same way, and by results that would be wrong without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoError, PtoOutOfMemory
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.testing import delay_task

from test_programs import Chain, Diamond, Halves, HelloWorld, Tiles64, carried, chain_manual, poison, rand

R, C = 128, 128
F = pl.FP32
DELAY = 0.1  # seconds a delayed task holds its core: overlaps this long are no accident


def tasks(trace):
    return [r for r in trace.records if r.kind_name == "task"]


def by_name(trace):
    out: dict[str, list] = {}
    for r in sorted(tasks(trace), key=lambda r: r.block):
        out.setdefault(r.name, []).append(r)
    return out


def overlap(a, b) -> bool:
    return a.start_ns < b.end_ns and b.start_ns < a.end_ns


@pytest.mark.slow
def test_programs_compile_to_the_program_abi_and_plain_kernels_do_not():
    assert ir.compile(Diamond).kind == "program" and ir.compile(HelloWorld).kind == "program"

    @pl.jit
    def one_region(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.incore():
            pl.store(pl.load(x, [0, 0], [8, 8]) + 1.0, [0, 0], y)

    assert one_region.compile(rand((8, 8), 0), poison((8, 8))).kind == "kernel"


def test_diamond_middle_tasks_run_at_the_same_time_on_two_cores():
    c = ir.compile(Diamond)
    x = rand((R, C), 21)
    e = np.exp(x.astype(np.float64))
    # The two host core threads and their wall clock (delayed tasks): host timing.
    with ChipWorker(RunConfig(cores=2, timing="host")) as w:
        h = w.register(c)
        delay_task(h, "left", DELAY)
        delay_task(h, "right", DELAY)
        out = poison((R, C))
        with w.trace() as tr:
            h(x, out)
    np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)
    t = {name: rs[0] for name, rs in by_name(tr.trace).items()}
    assert sorted(t) == ["bottom", "left", "right", "top"]
    assert overlap(t["left"], t["right"]) and t["left"].engine != t["right"].engine
    assert t["top"].end_ns <= min(t["left"].start_ns, t["right"].start_ns)
    assert t["bottom"].start_ns >= max(t["left"].end_ns, t["right"].end_ns)
    # One launch: one program command on the stream, its tasks on the cores' lanes, named.
    progs = [r for r in tr.trace.records if r.kind_name == "program"]
    assert len(progs) == 1 and progs[0].engine == -1 and progs[0].token == t["top"].token
    assert all(0 <= r.engine < 2 for r in t.values())


def test_a_traced_task_is_submitted_by_its_orchestration_before_its_predecessors_end():
    """A task's record carries its submission by the orchestration (the clock is read for the trace
    only): inside its program, before its start, and for bottom, submitted with the others while top
    still held its core, not when it became ready."""
    c = ir.compile(Diamond)
    x = rand((R, C), 26)
    with ChipWorker(RunConfig(cores=2, timing="host")) as w:
        h = w.register(c)
        delay_task(h, "top", DELAY / 4)
        out = poison((R, C))
        with w.trace() as tr:
            h(x, out)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)
    prog = next(r for r in tr.trace.records if r.kind_name == "program")
    t = {name: rs[0] for name, rs in by_name(tr.trace).items()}
    for r in t.values():
        assert prog.start_ns <= r.submit_ns <= r.start_ns <= r.end_ns <= prog.end_ns, r
    assert t["bottom"].submit_ns < t["top"].end_ns


@pytest.mark.slow
def test_disjoint_windows_of_one_tensor_are_written_in_parallel():
    c = ir.compile(Halves)
    x = rand((R, C), 22)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        delay_task(h, "neg", DELAY)
        out = poison((R, C))
        with w.trace() as tr:
            h(x, out)
    np.testing.assert_array_equal(out, -x + np.float32(0.5))
    t = by_name(tr.trace)
    a, b = t["neg"]
    assert overlap(a, b) and a.engine != b.engine
    assert t["total"][0].start_ns >= max(a.end_ns, b.end_ns)


@pytest.mark.slow
def test_loop_carried_write_after_read_is_ordered_on_the_device():
    x, y, z = rand((64, 32), 23), poison((16, 32)), poison((64, 32))
    c = carried.compile(x, y, z)
    assert c.kind == "program"
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        delay_task(h, "consume", DELAY / 4)  # a reader that is slow to read
        with w.trace() as tr:
            h(x, y, z)
    np.testing.assert_allclose(z, (x + 1) * 2, rtol=1e-6)
    t = by_name(tr.trace)
    for i in range(1, 4):
        assert t["produce"][i].start_ns >= t["consume"][i - 1].end_ns  # overwrites y only once it was read


@pytest.mark.slow
def test_a_tiled_loop_of_64_tiles_submits_64_tasks_from_one_call_site():
    c = ir.compile(Tiles64)
    src = c.source_path.read_text()
    assert src.count("ops->submit(") == 2 and src.count("for (int64_t") >= 2  # loops, not 128 copies
    x, acc0 = rand((64 * 16, 32), 24), rand((16, 32), 25)
    y, acc = poison((64 * 16, 32)), acc0.copy()
    with ChipWorker() as w:
        h = w.register(c)
        with w.trace() as tr:
            h(x, y, acc)
        st = h.program_stats()
    relu = np.maximum(x, 0)
    np.testing.assert_array_equal(y, relu)
    want = acc0.astype(np.float64) + relu.reshape(64, 16, 32).sum(axis=0)
    np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-5)
    t = by_name(tr.trace)
    assert len(t["relu"]) == 64 and len(t["accumulate"]) == 64
    assert st["instances"] == 128 and st["tasks"] == 128 and st["runs"] == 1 and st["sites"] == 2


@pl.program
class Independent:
    @pl.function(type=pl.FunctionType.InCore)
    def inc(self, x: pl.Tensor[[8, 32], F], y: pl.Out[pl.Tensor[[8, 32], F]]):
        pl.store(pl.load(x, [0, 0], [8, 32]) + 1.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[64 * 8, 32], F], y: pl.Out[pl.Tensor[[64 * 8, 32], F]]):
        for i in pl.range(64):
            self.inc(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
        return y


@pytest.mark.slow
def test_a_full_task_window_makes_the_orchestration_wait_on_the_device():
    c = ir.compile(Independent)
    x = rand((64 * 8, 32), 26)
    with ChipWorker(RunConfig(ring_task_window=4, cores=2)) as w:
        h = w.register(c)
        delay_task(h, "inc", 0.002)
        y = poison((64 * 8, 32))
        h(x, y)
        st = h.program_stats()
    np.testing.assert_array_equal(y, x + 1)
    assert st["window_hwm"] == 4 and st["window_waits"] > 0 and st["tasks"] == 64


@pl.program
class FanIn:
    @pl.function(type=pl.FunctionType.InCore)
    def part(self, x: pl.Tensor[[8, 32], F], y: pl.Out[pl.Tensor[[8, 32], F]]):
        pl.store(pl.load(x, [0, 0], [8, 32]) * 3.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def whole(self, y: pl.Tensor[[64, 32], F], out: pl.Out[pl.Tensor[[64, 32], F]]):
        pl.store(pl.load(y, [0, 0], [64, 32]) - 1.0, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[64, 32], F], out: pl.Out[pl.Tensor[[64, 32], F]]):
        y = pl.create_tensor([64, 32], F)
        for i in range(8):
            self.part(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
        self.whole(y, out)
        return out


def test_an_empty_dependency_pool_makes_the_orchestration_wait_and_drops_no_edge():
    c = ir.compile(FanIn)
    assert {e.src for e in c.task_graph.edges if e.dst == 8} == set(range(8))
    x = rand((64, 32), 27)
    with ChipWorker(RunConfig(ring_dep_pool=2, cores=2)) as w:
        h = w.register(c)
        delay_task(h, "part", 0.01)
        out = poison((64, 32))
        h(x, out)
        st = h.program_stats()
    np.testing.assert_array_equal(out, x * 3 - 1)
    assert st["dep_hwm"] <= 2 and st["dep_waits"] > 0


@pytest.mark.slow
def test_a_scope_larger_than_the_task_window_is_a_deadlock_naming_the_knob():
    @pl.jit
    def scoped(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        with pl.manual_scope():
            for i in pl.range(8):
                with pl.incore(name_hint="step"):
                    pl.store(pl.load(x, [i * 8, 0], [8, 32]) * 2.0, [i * 8, 0], y)

    x = rand((64, 32), 28)
    c = scoped.compile(x, poison((64, 32)))
    assert "scope_begin" in c.source_path.read_text() and c.largest_scope == 8
    with ChipWorker(RunConfig(ring_task_window=4)) as w:
        h = w.register(c)
        y = poison((64, 32))
        # Refused before anything is queued (the device reports the same deadlock: native/tests/program.c).
        with pytest.raises(PtoArgumentError, match=r"holds 8 tasks in one pl.manual_scope\(\), more than "
                                                   r"ring_task_window=4 .*RunConfig\(ring_task_window=8\)"):
            h(x, y)
        assert np.isnan(y).all() and h.program_stats()["runs"] == 0
        w.run(ir.compile(Independent), rand((512, 32), 1), poison((512, 32)))  # the worker keeps working
    with ChipWorker(RunConfig(ring_task_window=8)) as w:
        w.run(c, x, y)
    np.testing.assert_array_equal(y, x * 2)


@pl.program
class Pipeline:
    """A chain through four intermediates: at most two are live at once."""

    @pl.function(type=pl.FunctionType.InCore)
    def step(self, a: pl.Tensor[[R, C], F], b: pl.Out[pl.Tensor[[R, C], F]]):
        pl.store(pl.load(a, [0, 0], [R, C]) + 1.0, [0, 0], b)
        return b

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[R, C], F], out: pl.Out[pl.Tensor[[R, C], F]]):
        t = x
        for _ in range(4):
            t = self.step(t, pl.create_tensor([R, C], F))
        self.step(t, out)
        return out


def test_intermediates_wait_for_ring_heap_room_and_past_it_fail_naming_the_knob():
    c = ir.compile(Pipeline)
    x = rand((R, C), 29)
    tile = R * C * 4
    with ChipWorker(RunConfig(ring_heap=2 * tile)) as w:
        h = w.register(c)
        delay_task(h, "step", 0.005)
        out = poison((R, C))
        h(x, out)
        st = h.program_stats()
        assert st["heap_hwm"] == 2 * tile and st["heap_waits"] > 0
    want = x
    for _ in range(5):
        want = want + np.float32(1)  # one rounding per task, as the device does
    np.testing.assert_array_equal(out, want)
    with ChipWorker(RunConfig(ring_heap=tile)) as w:
        with pytest.raises(PtoOutOfMemory, match=r"ring_heap=65536 bytes .*raise RunConfig\(ring_heap=\.\.\.\)"):
            w.run(c, x, poison((R, C)))


@pl.program
class FailingBeside:
    @pl.function(type=pl.FunctionType.InCore)
    def head(self, x: pl.Tensor[[8, 8], F], n: pl.Scalar[pl.INDEX], s: pl.Out[pl.Tensor[[8, 8], F]]):
        pl.store(pl.fillpad(pl.load(x, [0, 0], [8, 8], valid_shape=[n, 8]), pl.PadValue.zero), [0, 0], s)
        return s

    @pl.function(type=pl.FunctionType.InCore)
    def tail(self, s: pl.Tensor[[8, 8], F], out: pl.Out[pl.Tensor[[8, 8], F]]):
        pl.store(pl.load(s, [0, 0], [8, 8]) + 1.0, [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.InCore)
    def other(self, x: pl.Tensor[[8, 8], F], o: pl.Out[pl.Tensor[[8, 8], F]]):
        pl.store(pl.load(x, [0, 0], [8, 8]) * 4.0, [0, 0], o)
        return o

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[8, 8], F], n: pl.Scalar[pl.INDEX], out: pl.Out[pl.Tensor[[8, 8], F]],
             o: pl.Out[pl.Tensor[[8, 8], F]]):
        s = self.head(x, n, pl.create_tensor([8, 8], F), name_hint="masked_head")
        self.tail(s, out)
        self.other(x, o)
        return out, o


@pytest.mark.slow
def test_a_failing_task_skips_its_dependents_and_independent_tasks_still_run():
    c = ir.compile(FailingBeside)
    x = rand((8, 8), 30)
    with ChipWorker(RunConfig(cores=2)) as w:
        # Device tensors: a failed launch copies nothing back, so look at them on the device.
        out, o = (w.alloc_tensor((8, 8), pl.FP32, init=poison((8, 8))) for _ in range(2))
        with pytest.raises(PtoError, match=r"task masked_head: .*valid extent"):
            w.run(c, x, 9, out, o)
        assert np.isnan(out.numpy()).all()  # tail depends on the failed task: it never ran
        np.testing.assert_array_equal(o.numpy(), x * 4)  # other does not: it ran
        out, o = poison((8, 8)), poison((8, 8))
        w.run(c, x, 8, out, o)
        np.testing.assert_array_equal(out, x + 1)


@pytest.mark.slow
def test_manual_scope_runs_declared_edges_only_on_the_device():
    x, s, out = rand((R, C), 31), poison((R, C)), poison((R, C))
    c = chain_manual.compile(x, s, out)
    with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        delay_task(h, "stage1", DELAY / 4)
        h(x, s, out)
    np.testing.assert_array_equal(out, (x + 1) * 3)  # stage2 waited for stage1, as declared


@pytest.mark.slow
def test_register_loads_a_program_once_and_launches_load_nothing():
    c = ir.compile(Chain)
    x, y = rand((R, C), 32), rand((R, C), 33)
    with ChipWorker() as w:
        assert (w.host_dlopen_count, w.aicpu_dlopen_count) == (0, 0)
        h = w.register(c)
        assert (w.host_dlopen_count, w.aicpu_dlopen_count) == (0, 1)
        for _ in range(3):
            h(x, y, poison((R, C)))
        assert w.register(c) is h and (w.host_dlopen_count, w.aicpu_dlopen_count) == (0, 1)

        @pl.jit
        def kernel(a: pl.Tensor, b: pl.Out[pl.Tensor]):
            pl.store(pl.load(a, [0, 0], [8, 8]), [0, 0], b)

        w.run(kernel.compile(rand((8, 8), 0), poison((8, 8))), rand((8, 8), 1), poison((8, 8)))
        assert (w.host_dlopen_count, w.aicpu_dlopen_count) == (0, 2)  # a kernel is a callable too
        with pytest.raises(PtoArgumentError, match="not a program"):
            w.register(kernel.compile(rand((8, 8), 0), poison((8, 8)))).program_stats()


def test_enable_dep_gen_writes_deps_json_with_inferred_and_declared_edges(tmp_path):
    x, s, out = rand((R, C), 34), poison((R, C)), poison((R, C))
    from test_programs import chain_with_deps

    c = ir.compile(Diamond, output_dir=tmp_path / "diamond")
    d = chain_with_deps.compile(x, s, out)
    with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
        w.register(c)
        w.register(d)
    doc = json.loads((tmp_path / "diamond" / "dfx_outputs" / "deps.json").read_text())
    assert [t["name"] for t in doc["tasks"]] == ["top", "left", "right", "bottom"]
    assert {(e["src"], e["dst"], e["kind"]) for e in doc["edges"]} == {
        (0, 1, "inferred"), (0, 2, "inferred"), (1, 3, "inferred"), (2, 3, "inferred")}
    doc = json.loads((d.output_dir / "dfx_outputs" / "deps.json").read_text())
    assert doc["edges"] == [{"src": 0, "dst": 1, "kind": "declared", "hazard": None, "tensor": None}]
    with ChipWorker() as w:  # off by default
        c2 = ir.compile(HelloWorld, output_dir=tmp_path / "hello")
        w.register(c2)
    assert not (tmp_path / "hello" / "dfx_outputs").exists()


@pytest.mark.slow
def test_from_dir_runs_a_program_in_a_fresh_process(tmp_path):
    ir.compile(Diamond, output_dir=tmp_path / "diamond")
    script = textwrap.dedent(f"""
        import numpy as np
        from pypto_async import ir
        from pypto_async.runtime import ChipWorker
        c = ir.CompiledProgram.from_dir({str(tmp_path / "diamond")!r})
        assert c.kind == "program" and c.program is None
        x = np.random.default_rng(5).standard_normal((128, 128)).astype(np.float32)
        out = np.full((128, 128), np.nan, np.float32)
        with ChipWorker() as w:
            w.run(c, x, out)
            assert w.aicpu_dlopen_count == 1
        e = np.exp(x.astype(np.float64))
        np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)
        print("ok", len(c.task_graph.tasks))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "4"]


@pytest.mark.anyio
async def test_async_programs_overlap_with_the_host():
    c = ir.compile(Diamond)
    x = rand((R, C), 35)
    e = np.exp(x.astype(np.float64))
    async with ChipWorker(RunConfig(cores=2)) as w:
        h = w.register(c)
        outs = [poison((R, C)) for _ in range(4)]
        launches = [h(x, o) for o in outs]
        for launch in launches:
            await launch
    for o in outs:
        np.testing.assert_allclose(o, (e + 1) * (e * 2), rtol=1e-5)


@pytest.mark.parametrize("name", ["Diamond", "Tiles64", "Failing", "Halves", "Pipeline"])
def test_as_python_of_a_program_round_trips_through_ir_compile(name):
    import test_programs

    prog = getattr(test_programs, name, None) or globals()[name]
    src = prog.as_python(form="class")
    ns: dict = {}
    exec(compile(src, f"<{name}.as_python()>", "exec"), ns)
    again = ns[name]
    assert again.trace() == prog.trace()  # the same tasks, accesses, parameters and statements
    a, b = ir.compile(prog), ir.compile(again)
    assert b.kind == "program" and b.ir_hash == a.ir_hash and b.task_graph == a.task_graph
    assert again.as_python(form="class") == src  # printing is stable


def test_a_printed_program_runs_like_the_original():
    ns: dict = {}
    exec(compile(Diamond.as_python(form="class"), "<Diamond.as_python()>", "exec"), ns)
    c = ir.compile(ns["Diamond"])
    x = rand((R, C), 36)
    out = poison((R, C))
    c(x, out)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out, (e + 1) * (e * 2), rtol=1e-5)


@pytest.mark.slow
def test_a_program_past_4096_tasks_gets_its_task_graph_not_a_serial_chain():
    """Independent rows stay independent past the old 4,096-instance table limit."""
    n = 4096 + 4

    @pl.jit
    def rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="row"):
                pl.store(pl.load(x, [i, 0], [1, 8]) * 2.0, [i, 0], y)

    x = rand((n, 8), 37)
    c = rows.compile(x, poison((n, 8)))
    assert c.kind == "program" and c.task_graph is not None
    assert len(c.task_graph.tasks) == n and c.task_graph.edges == ()  # no task waits for the one before
    with ChipWorker() as w:
        h = w.register(c)
        y = poison((n, 8))
        h(x, y)
        st = h.program_stats()
    np.testing.assert_array_equal(y, x * 2)
    assert st["instances"] == n and st["tasks"] == n


def test_a_program_too_large_to_expand_warns_and_runs_without_a_table(monkeypatch):
    from pypto_async.ir import _deps, _program_codegen

    monkeypatch.setattr(_deps, "MAX_TASKS", 64)
    monkeypatch.setattr(_program_codegen, "MAX_TASKS", 64)
    monkeypatch.setattr(_deps.program_tasks, "__defaults__", (64,))
    monkeypatch.setattr(_deps.task_graph, "__defaults__", (64,))
    n = 64 + 4

    @pl.jit
    def rows(x: pl.Tensor, y: pl.Out[pl.Tensor]):
        for i in pl.range(n):
            with pl.incore(name_hint="row"):
                pl.store(pl.load(x, [i, 0], [1, 8]) * 3.0, [i, 0], y)

    x = rand((n, 8), 38)
    with pytest.warns(RuntimeWarning, match="without a task graph"):
        c = rows.compile(x, poison((n, 8)))
    assert c.kind == "program" and c.task_graph is None  # no table: the device resolves edges (test_program_edges)
    with ChipWorker() as w:
        h = w.register(c)
        y = poison((n, 8))
        h(x, y)
        st = h.program_stats()
    np.testing.assert_array_equal(y, x * 3)
    assert st["instances"] == 0 and st["tasks"] == n


def test_a_programs_trace_in_chrome_json_puts_each_task_on_its_core_lane_and_reads_back():
    from pypto_async.runtime._chrome import ENGINE_TID_BASE
    from pypto_async.runtime._trace import Trace

    c = ir.compile(Diamond)
    with ChipWorker(RunConfig(cores=2)) as w:
        with w.trace() as tr:
            w.run(c, rand((R, C), 38), poison((R, C)))
    doc = tr.trace.to_chrome()
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    tasks = [e for e in slices if e["cat"] == "task"]
    assert sorted(e["name"] for e in tasks) == ["bottom", "left", "right", "top"]
    assert all(e["tid"] >= ENGINE_TID_BASE and e["tid"] - ENGINE_TID_BASE == e["args"]["engine"] for e in tasks)
    progs = [e for e in slices if e["cat"] == "program"]
    assert len(progs) == 1 and progs[0]["tid"] < ENGINE_TID_BASE  # the launch, on its stream's lane
    back = Trace.from_chrome(doc)
    assert sorted(r.name for r in back.records if r.kind_name == "task") == ["bottom", "left", "right", "top"]
    assert tr.trace.summary().compute_ns > 0  # tasks count as compute
