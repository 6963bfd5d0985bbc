"""The device model seen from a worker: profiles, and programs' modeled timelines.

Program tasks are timed by a list schedule over the program's task graph when
the run completes (native/src/model.c), so a program's modeled timeline is the
same whatever host threads ran it.  Submission is held (``testing.hold``)
while the launch is queued; the timeline is compared relative to the
program's own modeled start, which is the one absolute the host's submission
time decides.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._profile import A2A3, A5, SIM
from pypto_async.testing import hold

F = pl.FP32
T, N_FORK, K_CHAIN = 8, 48, 6


@pl.program
class Fork:
    @pl.function(type=pl.FunctionType.InCore)
    def relu(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.relu(pl.load(x, [0, 0], [T, 32])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[N_FORK * T, 32], F], y: pl.Out[pl.Tensor[[N_FORK * T, 32], F]]):
        for i in pl.range(N_FORK):
            self.relu(x[i * T:(i + 1) * T, :], y[i * T:(i + 1) * T])
        return y


@pl.program
class ChainK:
    @pl.function(type=pl.FunctionType.InCore)
    def bump(self, acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(acc, [0, 0], [T, 32]) + 1.0, [0, 0], acc)
        return acc

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        for i in pl.range(K_CHAIN):
            self.bump(acc)
        return acc


@pl.program
class Mixed:
    """A fork and a join: two independent halves, then a task that reads both."""

    @pl.function(type=pl.FunctionType.InCore)
    def neg(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(-pl.load(x, [0, 0], [T, 32]), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def add(self, a: pl.Tensor[[T, 32], F], b: pl.Tensor[[T, 32], F], out: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(a, [0, 0], [T, 32]) + pl.load(b, [0, 0], [T, 32]), [0, 0], out)
        return out

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[4 * T, 32], F], out: pl.Out[pl.Tensor[[T, 32], F]]):
        y = pl.create_tensor([4 * T, 32], F)
        for i in pl.range(4):
            self.neg(x[i * T:(i + 1) * T, :], y[i * T:(i + 1) * T])
        t = pl.create_tensor([T, 32], F)
        self.add(y[0:T], y[T:2 * T], t)
        u = pl.create_tensor([T, 32], F)
        self.add(y[2 * T:3 * T], y[3 * T:4 * T], u)
        self.add(t, u, out)
        return out


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_held(cfg, program, *arrays):
    """Run `program` once with submission held; return (its trace, its outputs as numpy)."""
    c = ir.compile(program)
    with ChipWorker(cfg.replace(enable_chip_swimlane=0)) as w:
        h = w.register(c)
        tensors = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in arrays]
        s = w.default_stream
        w.sync()
        with w.trace() as tr:
            with hold(s) as latch:
                h.submit(*tensors)
                latch.release()
            w.sync()
        outs = [t.numpy() for t in tensors]
    return tr.trace, outs


def timeline(trace):
    """Each task's (instance, name, dispatch, start, end, engine), relative to the program's modeled start."""
    prog = [r for r in trace.records if r.kind_name == "program"]
    assert len(prog) == 1
    t0 = prog[0].start_ns
    tasks = sorted((r for r in trace.records if r.kind_name == "task"), key=lambda r: r.block)
    return prog[0], [(r.block, r.name, r.dispatch_ns - t0, r.start_ns - t0, r.end_ns - t0, r.engine)
                     for r in tasks]


# -- profiles --------------------------------------------------------------------------------


def test_the_platform_selects_its_chip_profile():
    assert RunConfig(platform="a2a3sim").profile is A2A3
    assert RunConfig(platform="a5sim").profile is A5
    assert RunConfig().profile is SIM
    assert (A2A3.aic_cores, A2A3.aiv_cores, A2A3.aiv_per_aic, A2A3.transfer_granule_bytes) == (24, 48, 2, 512)
    assert A2A3.pickup_us == 0.8 and A5.aiv_cores == 36
    with ChipWorker(RunConfig(platform="a2a3sim", cores=1, copy_engines=1)) as w:
        assert w.device_profile is A2A3 and w.timing == "model"
        st = w.stats()
        # The modeled device's engines, whatever host threads run them: 24 AIC + 48 AIV + 2 copy.
        assert len(st.engines) == 74 and [e.kind for e in st.engines].count("copy") == 2


def test_a_custom_profile_comes_as_a_dataclass_a_dict_a_name_or_a_json_file(tmp_path):
    mine = SIM.replace(name="mine", aiv_cores=3, pickup_us=2.0)
    path = tmp_path / "mine.json"
    mine.to_json(path)
    assert json.loads(path.read_text())["pickup_us"] == 2.0
    for value in (mine, mine.to_dict(), str(path), path):
        assert RunConfig(device_profile=value).profile == mine
    assert RunConfig(device_profile="a5").profile is A5
    with ChipWorker(RunConfig(device_profile=str(path))) as w:
        assert w.device_profile == mine
        assert len(w.stats().engines) == mine.cores + mine.copy_engines


def test_bad_profiles_and_timings_are_refused_naming_the_field(tmp_path):
    with pytest.raises(PtoArgumentError, match="DeviceProfile.clock_ghz"):
        SIM.replace(clock_ghz=0)
    with pytest.raises(PtoArgumentError, match="DeviceProfile.aiv_cores"):
        SIM.replace(aic_cores=0, aiv_cores=0)
    with pytest.raises(PtoArgumentError, match="unknown field"):
        RunConfig(device_profile={**SIM.to_dict(), "warp_drive": 1})
    with pytest.raises(PtoArgumentError, match="missing field"):
        RunConfig(device_profile={"name": "x"})
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(PtoArgumentError, match="bad.json"):
        RunConfig(device_profile=str(bad))
    with pytest.raises(PtoArgumentError, match="RunConfig.timing"):
        RunConfig(timing="wall")
    with pytest.raises(PtoArgumentError, match="device_profile must be"):
        RunConfig(device_profile=3)


def test_host_timing_keeps_the_host_threads_and_clock():
    with ChipWorker(RunConfig(timing="host", cores=2, copy_engines=1)) as w:
        assert w.timing == "host" and w.device_profile is SIM  # what the model would use
        assert len(w.stats().engines) == 3


# -- programs --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_programs_modeled_timeline_is_the_same_across_runs_and_host_threads():
    x = rand((4 * T, 32), 5)
    want = None
    for cores in (1, 2, 4, 1):
        trace, (xs, out) = run_held(RunConfig(cores=cores), Mixed, x, np.full((T, 32), np.nan, np.float32))
        np.testing.assert_allclose(out, -(x[0:T] + x[T:2 * T]) - (x[2 * T:3 * T] + x[3 * T:]), rtol=1e-6, atol=1e-6)
        prog, got = timeline(trace)
        assert len(got) == 7
        if want is None:
            want = got
        assert got == want, f"cores={cores}"
    # The four halves ran side by side on the sim's four AIV cores, the joins after them.
    starts = {g[0]: g[3] for g in want}
    assert len({g[5] for g in want[:4]}) == 4
    assert min(starts[4], starts[5]) > max(g[4] for g in want[:2])


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")
def test_a_programs_modeled_timeline_is_the_same_with_the_host_threads_pinned():
    """Timestamp for timestamp, in fresh processes pinned to one CPU (every host thread on it)."""
    x = rand((4 * T, 32), 5)
    trace, _ = run_held(RunConfig(cores=2), Mixed, x, np.full((T, 32), np.nan, np.float32))
    want = [list(g) for g in timeline(trace)[1]]
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in dict.fromkeys([cpus[0], cpus[-1]]):
        for cores in (1, 4):
            assert _pinned_timeline(cpu, cores, x) == want, f"cpu={cpu} cores={cores}"


_PINNED = """
import json, os, sys
import numpy as np
os.sched_setaffinity(0, {{{cpu}}})  # before the worker opens: its threads inherit the mask
sys.path.insert(0, {here!r})
import test_device_model as t
from pypto_async.runtime import RunConfig
x = np.load({x!r})
trace, (xs, out) = t.run_held(RunConfig(cores={cores}), t.Mixed, x, np.full((t.T, 32), np.nan, np.float32))
assert os.sched_getaffinity(0) == {{{cpu}}}
print(json.dumps(t.timeline(trace)[1]))
"""


def _pinned_timeline(cpu: int, cores: int, x) -> list:
    """The Mixed program's held timeline from a subprocess pinned to `cpu` (os.sched_setaffinity)."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        np.save(path, x)
        code = _PINNED.format(cpu=cpu, here=here, x=path, cores=cores)
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_chain_of_k_tasks_pays_k_pickups():
    p = SIM
    trace, (acc,) = run_held(RunConfig(), ChainK, np.zeros((T, 32), np.float32))
    np.testing.assert_array_equal(acc, np.full((T, 32), K_CHAIN, np.float32))
    prog, tl = timeline(trace)
    pickup = round(p.pickup_us * 1000)
    orch = round(p.orch_us_per_task * 1000)
    assert [t[0] for t in tl] == list(range(K_CHAIN))
    assert tl[0][2] == orch  # the orchestrator submitted it, a core took it
    for (_, _, d, s, e, _), prev in zip(tl, [None] + tl[:-1]):
        assert s - d == pickup
        if prev is not None:
            assert d == prev[4]  # dispatched as its predecessor ended
    assert prog.end_ns - prog.start_ns == tl[-1][4]  # the program ends with its last task
    dur = tl[0][4] - tl[0][3]
    assert tl[-1][4] == orch + K_CHAIN * (pickup + dur)


def test_a_fork_of_n_tasks_on_fewer_cores_runs_in_waves():
    p = SIM  # 4 AIV cores for 48 vector tasks: 12 each
    x = rand((N_FORK * T, 32), 6)
    trace, (_, y) = run_held(RunConfig(), Fork, x, np.full_like(x, np.nan))
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    _, tl = timeline(trace)
    by_core: dict[int, list] = {}
    for t in tl:
        by_core.setdefault(t[5], []).append(t)
    assert sorted(by_core) == list(range(p.aic_cores, p.cores))
    assert all(len(v) == N_FORK // p.aiv_cores for v in by_core.values())
    pickup = round(p.pickup_us * 1000)
    for tasks in by_core.values():
        for prev, cur in zip(tasks, tasks[1:]):
            assert cur[3] - prev[4] == pickup  # back to back: the core never waits for the orchestrator


N_UNEVEN = 12


@pl.program
class Uneven:
    """A fork of three sites of unequal work, interleaved: the cores come free out of turn."""

    @pl.function(type=pl.FunctionType.InCore)
    def light(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.relu(pl.load(x, [0, 0], [T, 32])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def heavy(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        t = pl.load(x, [0, 0], [T, 32])
        for k in pl.range(40):
            t = pl.relu(pl.mul(t, 1.0))
        pl.store(t, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def medium(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        t = pl.load(x, [0, 0], [T, 32])
        for k in pl.range(12):
            t = pl.relu(pl.mul(t, 1.0))
        pl.store(t, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, x: pl.Tensor[[3 * N_UNEVEN * T, 32], F], y: pl.Out[pl.Tensor[[3 * N_UNEVEN * T, 32], F]]):
        for i in pl.range(N_UNEVEN):
            self.heavy(x[3 * i * T:(3 * i + 1) * T, :], y[3 * i * T:(3 * i + 1) * T])
            self.light(x[(3 * i + 1) * T:(3 * i + 2) * T, :], y[(3 * i + 1) * T:(3 * i + 2) * T])
            self.medium(x[(3 * i + 2) * T:(3 * i + 3) * T, :], y[(3 * i + 2) * T:(3 * i + 3) * T])
        return y


@pytest.mark.slow
def test_a_fork_of_unequal_tasks_takes_the_core_free_first_each_in_turn():
    # The least a kernel takes, the pickup and the orchestrator's step lowered, so the sites' work
    # sets how long a core is busy; the reference schedule: each task in instance order, submitted
    # at (i + 1) orchestrator steps, on the AIV free first (ties: the lowest), dispatched when both
    # are ready, started a pickup later.
    p = SIM.replace(min_kernel_us=0.01, pickup_us=0.05, orch_us_per_task=0.01)
    x = rand((3 * N_UNEVEN * T, 32), 9)
    trace, (_, y) = run_held(RunConfig(device_profile=p), Uneven, x, np.full_like(x, np.nan))
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    _, tl = timeline(trace)
    assert [t[0] for t in tl] == list(range(3 * N_UNEVEN))
    durs = [e - s for (_, _, _, s, e, _) in tl]
    assert len(set(durs)) == 3 and max(durs) > 3 * min(durs)
    pickup, orch = round(p.pickup_us * 1000), round(p.orch_us_per_task * 1000)
    free = {c: 0 for c in range(p.aic_cores, p.cores)}
    want = []
    for i, dur in enumerate(durs):
        core = min(free, key=lambda c: (free[c], c))
        d = max(orch * (i + 1), free[core])
        want.append((d, d + pickup, d + pickup + dur, core))
        free[core] = d + pickup + dur
    assert [(d, s, e, c) for (_, _, d, s, e, c) in tl] == want
    # The cores came free out of instance order (a task's core is not always the one after the last's).
    assert [c for *_, c in want] != [p.aic_cores + i % p.aiv_cores for i in range(len(want))]


def test_a_fork_of_48_equal_tasks_on_a2a3_takes_one_task_plus_its_pickup():
    # Tasks of 200 µs each (the least a kernel takes, raised): large against the orchestrator's 48 * 0.2 µs.
    p = A2A3.replace(min_kernel_us=200.0)
    x = rand((N_FORK * T, 32), 7)
    trace, (_, y) = run_held(RunConfig(platform="a2a3sim", device_profile=p), Fork, x, np.full_like(x, np.nan))
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    prog, tl = timeline(trace)
    assert len({t[5] for t in tl}) == 48 and all(p.aic_cores <= t[5] < p.cores for t in tl)  # 48 AIVs
    one = tl[0][4] - tl[0][3] + round(p.pickup_us * 1000)
    wall = prog.end_ns - prog.start_ns
    assert one <= wall <= 1.1 * one
    # Exactly: each task on an AIV of its own, dispatched as the orchestrator submits it, started a
    # pickup later; the wall is one task plus its pickup plus the orchestrator's 48 submissions.
    pickup, orch, dur = round(p.pickup_us * 1000), round(p.orch_us_per_task * 1000), round(p.min_kernel_us * 1000)
    for i, (_, _, d, s, e, _) in enumerate(tl):
        assert (d, s, e) == (orch * (i + 1), orch * (i + 1) + pickup, orch * (i + 1) + pickup + dur)
    assert wall == N_FORK * orch + pickup + dur


@pytest.mark.slow
def test_a_program_traces_its_tasks_on_modeled_lanes_and_host_lanes():
    x = rand((4 * T, 32), 8)
    trace, _ = run_held(RunConfig(cores=2), Mixed, x, np.zeros((T, 32), np.float32))
    doc = trace.to_chrome()
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"AIC 0", "AIC 1", "AIV 0", "AIV 3", "copy engine 1"} <= names
    assert any(n.startswith("host core thread") and n.endswith("(wall time)") for n in names)
    tasks = [r for r in trace.records if r.kind_name == "task"]
    assert all(r.host_engine in (0, 1) and r.host_end_ns >= r.host_start_ns > 0 for r in tasks)
    back = type(trace).from_chrome(doc)
    assert {r for r in back.records if r.kind_name == "task"} == set(tasks)


def test_the_swimlane_records_give_dispatch_start_end_finish_per_task_beside_deps(tmp_path):
    x = rand((4 * T, 32), 9)
    out = np.full((T, 32), np.nan, np.float32)
    c = ir.compile(Mixed)
    cfg = RunConfig(enable_chip_swimlane=4, enable_dep_gen=True, save_kernels_dir=str(tmp_path))
    with ChipWorker(RunConfig()) as w:
        w.run(c, x, out, config=cfg)
    np.testing.assert_allclose(out, -(x[0:T] + x[T:2 * T]) - (x[2 * T:3 * T] + x[3 * T:]), rtol=1e-6, atol=1e-6)
    dfx = tmp_path / "dfx_outputs"
    doc = json.loads((dfx / "l2_swimlane_records.json").read_text())
    deps = json.loads((dfx / "deps.json").read_text())
    assert doc["timing"] == "model" and doc["profile"] == "sim"
    assert doc["metadata"]["core_types"] == ["aic", "aic", "aiv", "aiv", "aiv", "aiv"]
    tasks = {t["task_id"]: t for t in doc["tasks"]}
    assert sorted(tasks) == [t["id"] for t in deps["tasks"]] == list(range(7))
    assert {t["func_name"] for t in doc["tasks"]} == {"neg", "add"}
    pickup = SIM.pickup_us
    for t in doc["tasks"]:
        assert t["core_type"] == "aiv" and 2 <= t["core_id"] < 6
        assert t["start_time_us"] - t["dispatch_time_us"] == pytest.approx(pickup)
        assert t["dispatch_time_us"] <= t["start_time_us"] < t["end_time_us"] == t["finish_time_us"]
    orch = SIM.orch_us_per_task
    for i, t in tasks.items():  # the orchestrator submits one task per orch_us_per_task
        assert t["submit_time_us"] == pytest.approx(i * orch) and t["submit_time_us"] <= t["dispatch_time_us"]
    for e in deps["edges"]:  # each task started after the tasks it depends on ended
        assert tasks[e["dst"]]["dispatch_time_us"] >= tasks[e["src"]]["end_time_us"]


def test_a_worker_opened_with_the_swimlane_writes_each_programs_records_beside_deps(tmp_path, kernels):
    # Not a per-call config: the worker's own.  Its last run's records go beside the deps.json it writes.
    x = rand((4 * T, 32), 13)
    c = ir.compile(Mixed, output_dir=tmp_path / "mixed")
    add = kernels.get("add", 256, blocks=3)
    a = rand(256, 14)
    cfg = RunConfig(enable_chip_swimlane=2, enable_dep_gen=True, save_kernels_dir=str(tmp_path / "saved"))
    with ChipWorker(cfg) as w:
        h, k = w.register(c), w.register(add)
        for seed in (15, 16):  # the second run is the one written
            out = np.full((T, 32), np.nan, np.float32)
            if seed == 16:
                with w.trace() as tr:
                    w.run(c, x, out)
            else:
                w.run(c, x, out)
            np.testing.assert_allclose(out, -(x[0:T] + x[T:2 * T]) - (x[2 * T:3 * T] + x[3 * T:]), rtol=1e-6,
                                       atol=1e-6)
        y = np.full(256, np.nan, np.float32)
        w.run(add, a, a, y)  # a kernel without an output_dir of its own: written nowhere, no failure
        np.testing.assert_array_equal(y, a + a)
        assert h is not None and k is not None
    dfx = tmp_path / "mixed" / "dfx_outputs"
    doc = json.loads((dfx / "l2_swimlane_records.json").read_text())
    deps = json.loads((dfx / "deps.json").read_text())
    assert (doc["program"], doc["timing"], doc["profile"], doc["time_unit"]) == ("Mixed", "model", "sim", "us")
    assert doc["metadata"]["core_types"] == ["aic"] * SIM.aic_cores + ["aiv"] * SIM.aiv_cores
    assert sorted(t["task_id"] for t in doc["tasks"]) == [t["id"] for t in deps["tasks"]] == list(range(7))
    fields = {"task_id", "func_name", "core_type", "core_id", "dispatch_time_us", "start_time_us", "end_time_us",
              "finish_time_us", "duration_us", "submit_time_us", "status"}
    assert all(set(t) == fields for t in doc["tasks"])
    # Times in modeled µs from the run's first submission: the window's trace of that run, task by task.
    tasks = [r for r in tr.trace.records if r.kind_name == "task"]
    origin = min(min(r.submit_ns, r.dispatch_ns) for r in tasks)
    want = {r.block: (r.name, r.engine, round((r.dispatch_ns - origin) / 1e3, 3), round((r.start_ns - origin) / 1e3, 3),
                      round((r.end_ns - origin) / 1e3, 3), round((r.submit_ns - origin) / 1e3, 3)) for r in tasks}
    got = {t["task_id"]: (t["func_name"], t["core_id"], t["dispatch_time_us"], t["start_time_us"], t["end_time_us"],
                          t["submit_time_us"]) for t in doc["tasks"]}
    assert got == want
    for t in doc["tasks"]:
        assert t["start_time_us"] - t["dispatch_time_us"] == pytest.approx(SIM.pickup_us)
        assert t["end_time_us"] == t["finish_time_us"] and t["duration_us"] == pytest.approx(SIM.min_kernel_us)


def test_benchmark_reports_modeled_device_time():
    from pypto_async.runtime import benchmark

    p = A2A3.replace(min_kernel_us=50.0)  # each task of the chain takes 50 µs on the modeled chip
    acc = np.zeros((T, 32), np.float32)
    st = benchmark(ir.compile(ChainK), [acc], rounds=3, warmup=1,
                   config=RunConfig(platform="a2a3sim", device_profile=p))
    # Each round: its H2D and D2H of acc (the link's latency and 1 KiB), the orchestrator's first
    # submission, then K tasks of a pickup and 50 µs each; more only where the device waited for the host.
    copy = p.host_link_latency_us + acc.nbytes / (p.host_link_gbps * 1e3)
    least = 2 * copy + p.orch_us_per_task + K_CHAIN * (p.pickup_us + 50.0)
    assert min(st.device_wall_us) >= least - 0.01


@pytest.mark.anyio
async def test_the_trace_summary_measures_overlap_in_modeled_time(kernels, anyio_backend):
    n = 1 << 20  # 4 MiB: the copy takes the link's latency and 168 µs at 25 GB/s
    add = kernels.get("add", 1024)
    x = rand(n, 10)
    small = rand(1024, 11)
    async with ChipWorker(RunConfig(cores=1, copy_engines=1)) as w:
        k = w.register(add)
        big = w.alloc_tensor(n, np.float32)
        a = w.alloc_tensor(1024, np.float32, init=small)
        out = w.alloc_tensor(1024, np.float32)
        s_copy, s_k = w.stream(), w.stream()
        await w.default_stream
        async with w.trace() as tr:
            with hold(s_copy) as latch:
                start = s_copy.record()  # when the hold ends: the copy starts then too
                copy = w.copy(big, x, stream=s_copy)
                s_k.wait(start)
                launch = k(a, a, out, stream=s_k)  # a pickup after the copy's start, ends long before it
                latch.release()
            await copy
            await launch
        np.testing.assert_array_equal(await out.to_host(), small + small)
        np.testing.assert_array_equal(await big.to_host(), x)
    s = tr.trace.summary()
    p = SIM
    assert s.copy_ns == round(p.host_link_latency_us * 1000) + round(4 * n / p.host_link_gbps)
    assert s.compute_ns == round(p.min_kernel_us * 1000)  # a kernel that counts no work: the floor
    assert s.overlapped_ns == s.compute_ns and s.overlap == 1.0


def test_analyze_reads_the_modeled_records(tmp_path):
    analyze = pytest.importorskip("pypto_async._analyze", reason="pypto-async analyze lands with the work branch")
    x = rand((4 * T, 32), 12)
    cfg = RunConfig(enable_chip_swimlane=4, enable_dep_gen=True, save_kernels_dir=str(tmp_path))
    with ChipWorker(RunConfig()) as w:
        w.run(ir.compile(Mixed), x, np.zeros((T, 32), np.float32), config=cfg)
    dfx = tmp_path / "dfx_outputs"
    a = analyze.analyze_files(dfx / "l2_swimlane_records.json", dfx / "deps.json")
    assert (a.tasks, a.edges) == (7, 6)
    assert a.pickup["all"].min == pytest.approx(SIM.pickup_us) and a.pickup["all"].max == pytest.approx(SIM.pickup_us)
    # Four idle AIVs for four ready halves: the list schedule leaves no ready work waiting.
    assert a.overhead["aiv"].idle_ready_us == pytest.approx(0.0, abs=1e-6)
