"""``pypto-async analyze``: scheduler overhead of hand-built swimlane records, against hand-computed answers."""

from __future__ import annotations

import json

import pytest

from pypto_async._analyze import analyze_files, format_analysis
from pypto_async._cli import main


def _task(tid, core, kind, d, s, e, f, **more):
    return {"task_id": tid, "core_id": core, "core_type": kind, "dispatch_time_us": d, "start_time_us": s,
            "end_time_us": e, "finish_time_us": f, "duration_us": e - s, **more}


def _write(tmp_path, tasks, edges, core_types, deps_form="pypto"):
    rec = tmp_path / "l2_swimlane_records.json"
    rec.write_text(json.dumps({"metadata": {"core_types": core_types}, "tasks": tasks}))
    deps = tmp_path / "deps.json"
    if deps_form == "pypto":
        doc = {"edges": [{"pred": a, "succ": b} for a, b in edges]}
    else:  # pypto_async's own deps.json
        doc = {"program": "p", "tasks": [{"id": t["task_id"], "name": f"k{t['task_id']}"} for t in tasks],
               "edges": [{"src": a, "dst": b, "kind": "inferred", "hazard": "RAW", "tensor": "x"} for a, b in edges]}
    deps.write_text(json.dumps(doc))
    return rec, deps


# A chain t0 -> t1 -> t2 on two AIV cores: t1 is dispatched 2 us after t0 finished while both cores sat idle.
CHAIN = [_task(0, 0, "aiv", 0, 1, 11, 12), _task(1, 1, "aiv", 14, 15, 25, 26), _task(2, 0, "aiv", 26, 27, 37, 38)]
CHAIN_EDGES = [(0, 1), (1, 2)]


@pytest.mark.parametrize("deps_form", ["pypto", "pypto_async"])
def test_a_chain_with_a_late_dispatch(tmp_path, deps_form):
    rec, deps = _write(tmp_path, CHAIN, CHAIN_EDGES, ["aiv", "aiv"], deps_form)
    a = analyze_files(rec, deps)
    assert (a.tasks, a.edges, a.makespan_us) == (3, 2, 38)
    o = a.overhead["aiv"]
    assert (o.cores, o.busy_us, o.idle_ready_us, o.lost_core_us) == (2, 30, 2, 2)
    assert o.share == pytest.approx(2 / 38)
    assert a.overhead["system"].idle_ready_us == 2
    p = a.pickup["all"]
    assert (p.n, p.mean, p.min, p.max) == (3, 1, 1, 1)
    c = a.critical_path
    assert c.tasks == [0, 1, 2]
    assert (c.span_us, c.compute_us, c.pickup_us, c.completion_us, c.wait_idle_us, c.wait_busy_us) == \
        (38, 30, 3, 3, 2, 0)
    assert c.scheduler_us == 8
    if deps_form == "pypto_async":
        assert c.names == ["k0", "k1", "k2"]


def test_a_fork_on_fewer_cores_waits_for_a_core_which_is_not_overhead(tmp_path):
    # r on the AIV core forks a, b (AIC) and c (AIV); one AIC core: b waits 12 us for it while a runs.
    tasks = [_task(0, 1, "aiv", 0, 1, 5, 6), _task(1, 0, "aic", 6, 7, 17, 18), _task(2, 0, "aic", 18, 19, 29, 30),
             _task(3, 1, "aiv", 8, 9, 13, 14)]
    rec, deps = _write(tmp_path, tasks, [(0, 1), (0, 2), (0, 3)], ["aic", "aiv"])
    a = analyze_files(rec, deps)
    assert a.makespan_us == 30
    assert (a.overhead["aic"].idle_ready_us, a.overhead["aic"].lost_core_us) == (0, 0)
    assert (a.overhead["aiv"].idle_ready_us, a.overhead["aiv"].lost_core_us) == (2, 2)  # c: 6 -> 8, core idle
    assert a.overhead["system"].idle_ready_us == 2
    assert a.overhead["system"].share == pytest.approx(2 / 30)
    c = a.critical_path
    assert c.tasks == [0, 2]
    assert (c.compute_us, c.pickup_us, c.completion_us, c.wait_idle_us, c.wait_busy_us) == (14, 2, 2, 0, 12)


def test_two_ready_tasks_and_two_idle_cores_lose_twice_the_core_time(tmp_path):
    # Two roots submitted at 0 and dispatched at 3 onto two idle cores: 3 us of wall time, 6 core-us lost.
    tasks = [_task(0, 0, "aiv", 3, 4, 8, 9, submit_time_us=0), _task(1, 1, "aiv", 3, 4, 8, 9, submit_time_us=0),
             _task(2, 0, "aiv", 0, 0.5, 1, 1)]
    rec, deps = _write(tmp_path, tasks, [], ["aiv", "aiv"])
    a = analyze_files(rec, deps)
    o = a.overhead["aiv"]
    # [0, 1): core 1 idle, two waiting -> 1 core; [1, 3): both idle, two waiting -> 2 cores.
    assert (o.idle_ready_us, o.lost_core_us) == (3, 1 + 2 * 2)


def test_pickup_percentiles_are_nearest_rank(tmp_path):
    tasks = [_task(i, i % 4, "aiv", 10 * i, 10 * i + (i + 1), 10 * i + 9.5, 10 * i + 9.75) for i in range(8)]
    rec, deps = _write(tmp_path, tasks, [], ["aiv"] * 4)
    p = analyze_files(rec, deps).pickup["aiv"]
    assert (p.n, p.min, p.p50, p.p90, p.p99, p.max, p.mean) == (8, 1, 4, 8, 8, 8, 4.5)


def test_an_spmd_task_is_ready_for_its_successor_when_its_last_block_finishes(tmp_path):
    tasks = [_task(0, 0, "aiv", 0, 1, 5, 6), _task(0, 1, "aiv", 0, 1, 9, 10), _task(1, 0, "aiv", 12, 13, 20, 21)]
    rec, deps = _write(tmp_path, tasks, [(0, 1)], ["aiv", "aiv"])
    a = analyze_files(rec, deps)
    assert (a.tasks, a.records) == (2, 3)
    assert a.overhead["aiv"].idle_ready_us == 2  # ready at 10 (the later block), dispatched at 12
    c = a.critical_path
    assert (c.tasks, c.compute_us, c.wait_idle_us) == ([0, 1], 8 + 7, 2)


def test_the_raw_record_file_pypto_s_runtime_writes_reads_the_same(tmp_path):
    # 1 MHz: a cycle is a microsecond; the base is the smallest stamp (PyPTO's converter's join).
    base = 1000
    aicore = [[t["core_id"], t["task_id"], 100 + t["task_id"], base + t["start_time_us"], base + t["end_time_us"], 0]
              for t in CHAIN]
    aicpu = [[t["core_id"], 100 + t["task_id"], base + t["dispatch_time_us"], base + t["finish_time_us"]]
             for t in CHAIN]
    rec = tmp_path / "raw" / "l2_swimlane_records.json"
    rec.parent.mkdir()
    rec.write_text(json.dumps({"l2_swimlane_level": 4, "metadata": {"clock_freq_hz": 1_000_000, "num_cores": 2,
                                                                     "core_types": ["aiv", "aiv"]},
                               "aicore_tasks": aicore, "aicpu_tasks": aicpu}))
    (rec.parent / "deps.json").write_text(json.dumps({"edges": [{"pred": a, "succ": b} for a, b in CHAIN_EDGES]}))
    a = analyze_files(rec)  # deps.json found beside the records
    assert a.overhead["aiv"].idle_ready_us == 2
    assert a.critical_path.scheduler_us == 8


def test_without_deps_only_pickup_is_overhead(tmp_path):
    rec, _ = _write(tmp_path, CHAIN, CHAIN_EDGES, ["aiv", "aiv"])
    (tmp_path / "deps.json").unlink()
    a = analyze_files(rec)
    assert a.overhead["system"].idle_ready_us == 0
    assert any("no deps.json" in n for n in a.notes)


def test_the_cli_prints_the_report_and_json(tmp_path, capsys):
    rec, deps = _write(tmp_path, CHAIN, CHAIN_EDGES, ["aiv", "aiv"])
    assert main(["analyze", str(rec), "--deps", str(deps)]) == 0
    text = capsys.readouterr().out
    assert text == format_analysis(analyze_files(rec, deps)) + "\n"
    assert "3 tasks (3 records, 2 edges), makespan 38.000 us" in text
    assert "  aiv          2      3       30.000            2.000        5.3%         2.000" in text
    assert "  scheduler         8.000 us  21.1%" in text
    assert main(["analyze", str(rec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["overhead"]["system"]["idle_ready_us"] == 2
    assert doc["critical_path"]["scheduler_us"] == 8


def test_records_without_dispatch_times_are_refused_in_one_line(tmp_path, capsys):
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps({"tasks": [{"task_id": 0, "core_id": 0, "start_time_us": 0, "end_time_us": 1}]}))
    assert main(["analyze", str(rec)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("pypto-async analyze: error: tasks[0] lacks dispatch_time_us, finish_time_us")
    assert "\n" not in err
    assert main(["analyze", str(tmp_path / "missing.json")]) == 1
    assert "no such record file" in capsys.readouterr().err


def test_the_path_shows_task_ids_as_pypto_does(tmp_path):
    ring2 = (2 << 32) | 7
    tasks = [_task(5, 0, "aiv", 0, 1, 2, 3), _task(ring2, 0, "aiv", 3, 4, 5, 6, func_name="mix")]
    rec, deps = _write(tmp_path, tasks, [(5, ring2)], ["aiv"])
    assert "  path: t5 -> r2t7 mix" in format_analysis(analyze_files(rec, deps))
