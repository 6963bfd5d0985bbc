"""The device model for programs without a compile-time table: the driver's resolved edges.

A program whose orchestration loops over a value it reads when it runs has no
compiled task table: the driver resolves each task's edges as it is
submitted (native/src/orch.c), against every instance of the task window,
completed or not, so the graph it hands the model (and ``deps.json``) does
not depend on how far the host threads had got.  Its modeled timeline is
then the one a table program of the same tasks gets: independent tasks
overlap on the profile's cores, a read-after-write chain pays one pickup a
task.  Submission is held (``testing.hold``) and timelines are compared
relative to the program's modeled start, as in test_device_model.py.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.runtime import ChipWorker, RunConfig
from pypto_async.runtime._profile import A2A3, SIM

from .test_device_model import K_CHAIN, N_FORK, T, ChainK, Fork, rand, run_held, timeline

F = pl.FP32


@pl.program
class RFork:
    """Fork's tasks, their count read from a tensor when it runs: no compile-time table."""

    @pl.function(type=pl.FunctionType.InCore)
    def relu(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.relu(pl.load(x, [0, 0], [T, 32])), [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], x: pl.Tensor[[N_FORK * T, 32], F],
             y: pl.Out[pl.Tensor[[N_FORK * T, 32], F]]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            self.relu(pl.slice(x, [T, 32], [i * T, 0]), pl.slice(y, [T, 32], [i * T, 0]))
        return y


@pl.program
class RChain:
    """ChainK's read-after-write chain, its length read when it runs."""

    @pl.function(type=pl.FunctionType.InCore)
    def bump(self, acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(acc, [0, 0], [T, 32]) + 1.0, [0, 0], acc)
        return acc

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], acc: pl.InOut[pl.Tensor[[T, 32], F]]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            self.bump(acc)
        return acc


def _compile(program):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = ir.compile(program)
    assert c.kind == "program" and c.task_graph is None  # the driver resolves its edges
    return c


_CHECKED: set = set()


def _held(cfg, program, *arrays):
    if program not in _CHECKED:
        _compile(program)
        _CHECKED.add(program)
    return run_held(cfg, program, *arrays)


def test_independent_tasks_of_a_runtime_bound_program_overlap_as_a_table_programs_do():
    x = rand((N_FORK * T, 32), 21)
    cfg = np.array([N_FORK], np.int32)
    trace, (_, _, y) = _held(RunConfig(), RFork, cfg, x, np.full_like(x, np.nan))
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    prog, got = timeline(trace)
    table, want = timeline(run_held(RunConfig(), Fork, x, np.full_like(x, np.nan))[0])
    assert got == want  # timestamp for timestamp, core for core
    assert prog.end_ns - prog.start_ns == table.end_ns - table.start_ns
    # By hand: 48 tasks on the sim's 4 AIVs, 12 waves, each core's tasks back to back after one pickup.
    p = SIM
    pickup, orch = round(p.pickup_us * 1000), round(p.orch_us_per_task * 1000)
    dur = got[0][4] - got[0][3]
    assert {t[5] for t in got} == set(range(p.aic_cores, p.cores))
    for i, (_, _, d, s, e, core) in enumerate(got):
        wave, lane = divmod(i, p.aiv_cores)
        assert core == p.aic_cores + lane
        assert d == (orch * (i + 1) if wave == 0 else got[i - p.aiv_cores][4])
        assert s == d + pickup and e == s + dur
    assert got[-1][4] == orch * p.aiv_cores + (N_FORK // p.aiv_cores) * (pickup + dur)


def test_a_runtime_bound_fork_of_48_on_a2a3_takes_one_task_plus_its_pickup():
    p = A2A3.replace(min_kernel_us=200.0)
    x = rand((N_FORK * T, 32), 22)
    trace, _ = _held(RunConfig(platform="a2a3sim", device_profile=p), RFork, np.array([N_FORK], np.int32), x,
                     np.full_like(x, np.nan))
    prog, tl = timeline(trace)
    assert len({t[5] for t in tl}) == 48
    one = tl[0][4] - tl[0][3] + round(p.pickup_us * 1000)
    assert one <= prog.end_ns - prog.start_ns <= 1.1 * one


def test_a_runtime_bound_read_after_write_chain_pays_k_pickups():
    p = SIM
    trace, (_, acc) = _held(RunConfig(), RChain, np.array([K_CHAIN], np.int32), np.zeros((T, 32), np.float32))
    np.testing.assert_array_equal(acc, np.full((T, 32), K_CHAIN, np.float32))
    prog, got = timeline(trace)
    _, want = timeline(run_held(RunConfig(), ChainK, np.zeros((T, 32), np.float32))[0])
    assert got == want
    pickup, orch = round(p.pickup_us * 1000), round(p.orch_us_per_task * 1000)
    dur = got[0][4] - got[0][3]
    for prev, cur in zip(got, got[1:]):
        assert cur[2] == prev[4]  # dispatched as its predecessor ended
    assert got[-1][4] == orch + K_CHAIN * (pickup + dur) == prog.end_ns - prog.start_ns


@pytest.mark.parametrize("program", ["fork", "chain"])
def test_a_runtime_bound_programs_timeline_is_the_same_across_runs_and_host_threads(program):
    x = rand((N_FORK * T, 32), 23)
    want = None
    for cores in (1, 2, 4, 1, 3):
        if program == "fork":
            trace, (_, _, y) = _held(RunConfig(cores=cores), RFork, np.array([N_FORK], np.int32), x,
                                     np.full_like(x, np.nan))
            np.testing.assert_array_equal(y, np.maximum(x, 0))
        else:
            trace, (_, acc) = _held(RunConfig(cores=cores), RChain, np.array([K_CHAIN], np.int32),
                                    np.zeros((T, 32), np.float32))
            np.testing.assert_array_equal(acc, np.full((T, 32), K_CHAIN, np.float32))
        got = timeline(trace)[1]
        if want is None:
            want = got
        assert got == want, f"cores={cores}"


def test_edges_to_tasks_that_completed_before_the_submission_still_order_the_model():
    """A tiny window makes the orchestration wait for each task to retire: every edge is to a completed task."""
    cfg = RunConfig(ring_task_window=2, cores=2)
    trace, (_, acc) = _held(cfg, RChain, np.array([K_CHAIN], np.int32), np.zeros((T, 32), np.float32))
    np.testing.assert_array_equal(acc, np.full((T, 32), K_CHAIN, np.float32))
    got = timeline(trace)[1]
    for prev, cur in zip(got, got[1:]):
        assert cur[2] >= prev[4]
    x = rand((N_FORK * T, 32), 24)
    trace, _ = _held(cfg, RFork, np.array([8], np.int32), x, np.full_like(x, np.nan))
    got = timeline(trace)[1]
    # The window's order (task i waits for i - 2 to retire), and nothing more: two at a time side by side.
    assert got[1][2] < got[0][4]
    for i in range(2, 8):
        assert got[i][2] == got[i - 2][4]


def test_dep_gen_writes_the_resolved_edges_of_a_runtime_bound_program(tmp_path):
    c = _compile(RChain)
    acc = np.zeros((T, 32), np.float32)
    cfg = RunConfig(enable_chip_swimlane=1, enable_dep_gen=True, save_kernels_dir=str(tmp_path))
    with ChipWorker(RunConfig()) as w:
        w.run(c, np.array([K_CHAIN], np.int32), acc, config=cfg)
    np.testing.assert_array_equal(acc, np.full((T, 32), K_CHAIN, np.float32))
    dfx = tmp_path / "dfx_outputs"
    deps = json.loads((dfx / "deps.json").read_text())
    assert deps["program"] and [t["id"] for t in deps["tasks"]] == list(range(K_CHAIN))
    assert {t["name"] for t in deps["tasks"]} == {"bump"}
    # Every earlier writer of acc (the driver's rule keeps the redundant ones): RAW on acc.
    assert {(e["src"], e["dst"]) for e in deps["edges"]} == {(j, i) for i in range(K_CHAIN) for j in range(i)}
    assert {(e["kind"], e["hazard"], e["tensor"]) for e in deps["edges"]} == {("inferred", "RAW", "acc")}
    recs = json.loads((dfx / "l2_swimlane_records.json").read_text())
    tasks = {t["task_id"]: t for t in recs["tasks"]}
    for e in deps["edges"]:
        assert tasks[e["dst"]]["dispatch_time_us"] >= tasks[e["src"]]["end_time_us"]


def test_a_fork_resolves_no_edges_and_a_worker_with_dep_gen_records_them(tmp_path):
    c = _compile(RFork)
    x = rand((N_FORK * T, 32), 25)
    with ChipWorker(RunConfig(enable_dep_gen=True)) as w:
        h = w.register(c)
        assert h.resolved_graph() is None  # no run yet
        y = np.full_like(x, np.nan)
        h(np.array([5], np.int32), x, y)
        g = h.resolved_graph()
    assert [t.name for t in g.tasks] == ["relu"] * 5 and g.edges == ()


N_PIPE, W_PIPE = 70, 8


@pl.program
class RPipe:
    """Two tasks an iteration, the second reading what the first wrote: edges within cells and a window back."""

    @pl.function(type=pl.FunctionType.InCore)
    def produce(self, x: pl.Tensor[[T, 32], F], y: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(x, [0, 0], [T, 32]) * 2.0, [0, 0], y)
        return y

    @pl.function(type=pl.FunctionType.InCore)
    def consume(self, y: pl.Tensor[[T, 32], F], z: pl.Out[pl.Tensor[[T, 32], F]]):
        pl.store(pl.load(y, [0, 0], [T, 32]) + 1.0, [0, 0], z)
        return z

    @pl.function(type=pl.FunctionType.Orchestration)
    def orch(self, cfg: pl.Tensor[[1], pl.INT32], x: pl.Tensor[[N_PIPE * T, 32], F],
             y: pl.Out[pl.Tensor[[N_PIPE * T, 32], F]], z: pl.Out[pl.Tensor[[N_PIPE * T, 32], F]]):
        n = pl.read(cfg, [0])
        for i in pl.range(n):
            self.produce(pl.slice(x, [T, 32], [i * T, 0]), pl.slice(y, [T, 32], [i * T, 0]))
            self.consume(pl.slice(y, [T, 32], [i * T, 0]), pl.slice(z, [T, 32], [i * T, 0]))
        return z


@pytest.mark.slow
def test_a_resolved_graph_is_the_same_modeled_or_not_whatever_the_runs_before_it_recorded():
    """The model's recording sizes a run from the last one and keeps sites and hazards only when asked: same graph."""
    c = _compile(RPipe)
    x = rand((N_PIPE * T, 32), 26)

    def graphs(timing, plan):
        got = {}
        with ChipWorker(RunConfig(timing=timing, ring_task_window=W_PIPE, cores=2)) as w:
            h = w.register(c)
            for n, record in plan:
                h.record_edges(record)
                y, z = np.full_like(x, np.nan), np.full_like(x, np.nan)
                h(np.array([n], np.int32), x, y, z)
                np.testing.assert_array_equal(z[:n * T], x[:n * T] * 2.0 + 1.0)
                if record:
                    got[n] = h.resolved_graph()
        return got

    host = graphs("host", [(40, True), (9, True), (N_PIPE, True)])
    # Unrecorded runs before, a shorter run after a longer one and a longer after a shorter: the same graphs.
    model = graphs("model", [(60, False), (40, True), (9, True), (50, False), (N_PIPE, True)])
    assert model == host
    for n, g in host.items():
        assert [t.name for t in g.tasks] == ["produce", "consume"] * n
        raw = {(e.src, e.dst) for e in g.edges if e.hazard == "RAW"}
        assert raw == {(2 * i, 2 * i + 1) for i in range(n)}
        assert {e.tensor for e in g.edges if e.hazard == "RAW"} == {"y"}
        # The window's order: each task waits for the one a window back to retire.
        window = {(e.src, e.dst) for e in g.edges if e.kind == "declared"}
        assert window == {(k - W_PIPE, k) for k in range(W_PIPE, 2 * n)}
        assert len(g.edges) == len(raw) + len(window)
