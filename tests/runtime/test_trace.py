"""Swimlane traces (runtime/_trace, _chrome, _recorder, _tracing): the Chrome trace event format, checked.

The conversion is tested on records built by hand (every layout rule, flows,
the overlap summary) and on records the driver itself traced; the output is
validated against a JSON schema of the Chrome trace event format plus the
structural rules Perfetto relies on (slices nest per track, flows pair up).
"""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import numpy as np
import pytest

from pypto_async import _driver as drv
from pypto_async.runtime._chrome import ENGINE_TID_BASE, STREAM_TID_BASE, layout, track_kind
from pypto_async.runtime._recorder import read_records
from pypto_async.runtime._trace import Trace, TraceRecord

# --- the format -----------------------------------------------------------

#: The Chrome trace event format ("JSON Object Format"), as far as we emit it.
#: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
CHROME_TRACE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["ph", "pid", "tid", "name"],
            "properties": {
                "name": {"type": "string"},
                "cat": {"type": "string"},
                "ph": {"enum": ["B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "M", "N", "O", "D"]},
                "ts": {"type": "number", "minimum": 0},
                "dur": {"type": "number", "minimum": 0},
                "pid": {"type": "integer"},
                "tid": {"type": "integer"},
                "id": {"type": ["integer", "string"]},
                "bp": {"const": "e"},
                "args": {"type": "object"},
            },
            "allOf": [
                {
                    "if": {"properties": {"ph": {"const": "X"}}},
                    "then": {"required": ["ts", "dur", "cat", "args"]},
                },
                {
                    "if": {"properties": {"ph": {"enum": ["s", "t", "f"]}}},
                    "then": {"required": ["ts", "id", "cat"]},
                },
                {
                    "if": {"properties": {"ph": {"const": "M"}}},
                    "then": {
                        "required": ["args"],
                        "properties": {
                            "name": {
                                "enum": [
                                    "process_name",
                                    "process_labels",
                                    "process_sort_index",
                                    "thread_name",
                                    "thread_sort_index",
                                ]
                            }
                        },
                    },
                },
                {
                    "if": {"properties": {"ph": {"const": "M"}, "name": {"enum": ["process_name", "thread_name"]}}},
                    "then": {
                        "properties": {
                            "args": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
                        }
                    },
                },
                {
                    "if": {
                        "properties": {"ph": {"const": "M"}, "name": {"enum": ["process_sort_index", "thread_sort_index"]}}
                    },
                    "then": {
                        "properties": {
                            "args": {
                                "type": "object",
                                "required": ["sort_index"],
                                "properties": {"sort_index": {"type": "integer"}},
                            }
                        }
                    },
                },
            ],
        }
    },
}


def check_chrome_trace(doc: dict) -> None:
    """Assert `doc` is a valid Chrome trace that Perfetto lays out as intended."""
    jsonschema.validate(doc, CHROME_TRACE_SCHEMA)
    json.loads(json.dumps(doc))  # plain JSON: no NaN, no objects json cannot write
    events = doc["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    slices: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0
            assert (e["pid"], e["tid"]) in named, f"slice on an unnamed track: {e}"
            # In whole ns, as viewers read them: back-to-back slices (modeled time has many) can
            # differ by an ulp of the µs floats, ts + dur a hair past the next slice's ts.
            start = round(e["ts"] * 1000)
            slices.setdefault((e["pid"], e["tid"]), []).append((start, start + round(e["dur"] * 1000)))
    # On one track, slices are disjoint or nested (never partially overlapping).
    for track, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []
        for start, end in spans:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"misnested slices on track {track}"
            stack.append(end)
    # Flows: each id has one start and one finish, each inside a slice of its track.
    flows: dict[object, dict[str, dict]] = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in flows.setdefault(e["id"], {}), f"flow {e['id']} has two {e['ph']!r} events"
            flows[e["id"]][e["ph"]] = e
            spans = slices.get((e["pid"], e["tid"]), [])
            at = round(e["ts"] * 1000)
            assert any(s <= at <= t for s, t in spans), f"flow event outside any slice: {e}"
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is unpaired"
        assert pair["s"]["ts"] <= pair["f"]["ts"]
        assert pair["s"]["cat"] == pair["f"]["cat"]


def test_schema_rejects_broken_traces():
    good = {"name": "k", "cat": "launch", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1, "args": {}}
    jsonschema.validate({"traceEvents": [good]}, CHROME_TRACE_SCHEMA)
    for bad in (
        {k: v for k, v in good.items() if k != "dur"},
        {**good, "dur": -1},
        {**good, "ph": "Q"},
        {**good, "tid": "one"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"traceEvents": [bad]}, CHROME_TRACE_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"traceEvents": [], "displayTimeUnit": "s"}, CHROME_TRACE_SCHEMA)


# --- records built by hand ------------------------------------------------

T0 = 1_000_000_000  # a pto_now_ns()-like origin
CORES, COPY = 2, 2


def rec(kind, stream, start_us, end_us, *, engine=-1, name="", nbytes=0, event=0, block=0,
        status=0, token=0, seq=0, submit_us=None):
    submit = T0 + int((start_us if submit_us is None else submit_us) * 1000)
    return TraceRecord(
        token=token, seq=seq, bytes=nbytes,
        submit_ns=submit, start_ns=T0 + int(start_us * 1000), end_ns=T0 + int(end_us * 1000),
        event_id=event, stream_id=stream, engine=engine, kind=kind, block=block,
        status=status, name=name,
    )


def pipeline_records() -> list[TraceRecord]:
    """Two batches of H2D (stream 1) → kernel (stream 2) → D2H (stream 3), joined by events."""
    out = []
    for b in range(2):
        t = b * 100
        out += [
            rec(drv.PTO_CMD_H2D, 1, t + 0, t + 40, engine=CORES + 0, name="h2d", nbytes=4096, token=10 + b, seq=2 * b + 1),
            rec(drv.PTO_CMD_RECORD, 1, t + 40, t + 40, event=100 + b, submit_us=t, seq=2 * b + 2, name="record"),
            rec(drv.PTO_CMD_WAIT, 2, t + 40, t + 40, event=100 + b, submit_us=t + 1, seq=3 * b + 1, name="wait"),
            rec(drv.PTO_CMD_LAUNCH, 2, t + 40, t + 100, name="add_kernel", token=20 + b, seq=3 * b + 2),
            rec(drv.PTO_CMD_BLOCK, 2, t + 41, t + 99, engine=0, name="add_kernel", block=0),
            rec(drv.PTO_CMD_BLOCK, 2, t + 42, t + 98, engine=1, name="add_kernel", block=1),
            rec(drv.PTO_CMD_RECORD, 2, t + 100, t + 100, event=200 + b, submit_us=t + 1, seq=3 * b + 3, name="record"),
            rec(drv.PTO_CMD_WAIT, 3, t + 100, t + 100, event=200 + b, submit_us=t + 2, seq=2 * b + 1, name="wait"),
            rec(drv.PTO_CMD_D2H, 3, t + 100, t + 130, engine=CORES + 1, name="d2h", nbytes=4096, token=30 + b, seq=2 * b + 2),
        ]
    return out


def test_chrome_layout_tracks_and_slices():
    trace = Trace(tuple(pipeline_records()), device={"platform": "sim", "cores": CORES, "copy_engines": COPY},
                  stream_names={2: "compute"})
    doc = trace.to_chrome()
    check_chrome_trace(doc)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {
        STREAM_TID_BASE + 1: "stream 1",
        STREAM_TID_BASE + 2: "stream 2 (compute)",
        STREAM_TID_BASE + 3: "stream 3",
        ENGINE_TID_BASE + 0: "core 0",
        ENGINE_TID_BASE + 1: "core 1",
        ENGINE_TID_BASE + 2: "copy engine 0",
        ENGINE_TID_BASE + 3: "copy engine 1",
    }
    procs = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert [p["args"]["name"] for p in procs] == ["device (sim)"]
    xs = [e for e in ev if e["ph"] == "X"]
    by_tid: dict[int, list[dict]] = {}
    for e in xs:
        by_tid.setdefault(e["tid"], []).append(e)
    # Stream tracks carry commands (never blocks); launches are named by kernel.
    s2 = by_tid[STREAM_TID_BASE + 2]
    assert [e["cat"] for e in s2] == ["wait", "launch", "record"] * 2
    launch = s2[1]
    assert launch["name"] == "add_kernel"
    assert launch["ts"] == pytest.approx(40.0) and launch["dur"] == pytest.approx(60.0)
    assert launch["args"]["token"] == 20 and launch["args"]["status"] == "ok"
    # Cores carry blocks; copy engines carry copies with their byte counts.
    assert [(e["cat"], e["args"]["block"]) for e in by_tid[ENGINE_TID_BASE + 1]] == [("block", 1)] * 2
    h2d = by_tid[ENGINE_TID_BASE + 2]
    assert [(e["name"], e["args"]["bytes"]) for e in h2d] == [("h2d", 4096)] * 2
    assert [e["name"] for e in by_tid[ENGINE_TID_BASE + 3]] == ["d2h", "d2h"]
    assert [e["name"] for e in by_tid[STREAM_TID_BASE + 1]] == ["h2d", "record"] * 2
    # Launches are never put on an engine track (their blocks are).
    assert not any(e["cat"] == "launch" for t, es in by_tid.items() if t >= ENGINE_TID_BASE for e in es)
    assert doc["otherData"]["records"] == len(trace)


def test_flows_join_each_record_to_its_wait():
    doc = Trace(tuple(pipeline_records()), device={"cores": CORES, "copy_engines": COPY}).to_chrome()
    check_chrome_trace(doc)
    ev = doc["traceEvents"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == len(ends) == 4
    pairs = sorted((starts[i]["tid"], ends[i]["tid"], starts[i]["name"]) for i in starts)
    assert pairs == [
        (STREAM_TID_BASE + 1, STREAM_TID_BASE + 2, "event 100"),
        (STREAM_TID_BASE + 1, STREAM_TID_BASE + 2, "event 101"),
        (STREAM_TID_BASE + 2, STREAM_TID_BASE + 3, "event 200"),
        (STREAM_TID_BASE + 2, STREAM_TID_BASE + 3, "event 201"),
    ]
    assert all(e.get("bp") == "e" for e in ends.values())
    # A zero-length record's flow start follows its slice in the file (it binds to it).
    idx = {id(e): i for i, e in enumerate(ev)}
    for s in starts.values():
        slice_ = next(e for e in ev if e["ph"] == "X" and e["tid"] == s["tid"] and e["ts"] <= s["ts"] <= e["ts"] + e["dur"])
        assert idx[id(slice_)] < idx[id(s)]


def test_wait_matches_the_recording_current_at_submission():
    # Event 7 is recorded twice on stream 1; the wait on stream 2 was submitted
    # between the two recordings, so its arrow comes from the first one.
    records = (
        rec(drv.PTO_CMD_RECORD, 1, 10, 10, event=7, submit_us=5, seq=1),
        rec(drv.PTO_CMD_WAIT, 2, 12, 13, event=7, submit_us=6),
        rec(drv.PTO_CMD_RECORD, 1, 30, 30, event=7, submit_us=20, seq=2),
        rec(drv.PTO_CMD_WAIT, 3, 40, 41, event=99),  # never recorded: no arrow
        rec(drv.PTO_CMD_WAIT, 1, 50, 51, event=7, submit_us=45),  # same stream: no arrow
    )
    doc = Trace(records).to_chrome()
    check_chrome_trace(doc)
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(starts) == 1
    assert starts[0]["ts"] == pytest.approx(5.0)  # the first record, 5 µs after the origin


def test_arrow_starts_from_the_covered_work_when_the_record_is_stamped_late():
    # The driver stamps a record just after it wakes the waiter: here the record
    # (t=50.7) ends after the wait (t=50.0), so the arrow leaves from the H2D
    # it covers, and Perfetto still sees the "s" before the "f".
    records = (
        rec(drv.PTO_CMD_H2D, 1, 10, 50, engine=2, name="h2d", nbytes=64, submit_us=0),
        rec(drv.PTO_CMD_RECORD, 1, 50.7, 50.7, event=3, submit_us=1),
        rec(drv.PTO_CMD_WAIT, 2, 5, 50, event=3, submit_us=2),
        rec(drv.PTO_CMD_LAUNCH, 2, 51, 60, name="k", submit_us=3),
    )
    doc = Trace(records, device={"cores": 2, "copy_engines": 1}).to_chrome()
    check_chrome_trace(doc)
    (s,) = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    (f,) = [e for e in doc["traceEvents"] if e["ph"] == "f"]
    assert s["tid"] == STREAM_TID_BASE + 1 and s["ts"] == pytest.approx(30.0)  # middle of the H2D
    assert f["tid"] == STREAM_TID_BASE + 2 and s["ts"] <= f["ts"] < 50.0


def test_failed_and_canceled_commands_keep_their_status():
    records = (
        rec(drv.PTO_CMD_LAUNCH, 1, 0, 5, name="fail", status=-drv.PTO_EKERNEL, token=1),
        rec(drv.PTO_CMD_H2D, 1, 5, 5, engine=4, name="h2d", status=-drv.PTO_EDEP, token=2),
        TraceRecord(3, 3, 64, T0 + 1000, 0, T0 + 9000, 0, 1, -1, drv.PTO_CMD_D2H, 0, -drv.PTO_ECANCELED, "d2h"),
    )
    doc = Trace(records, device={"cores": 4, "copy_engines": 1}).to_chrome()
    check_chrome_trace(doc)
    stream = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == STREAM_TID_BASE + 1]
    assert [e["args"]["status"] for e in stream] == ["PTO_EKERNEL", "PTO_EDEP", "PTO_ECANCELED"]
    assert stream[2]["dur"] == 0 and stream[2]["ts"] == pytest.approx(9.0)  # never started: an instant at its end


def test_engine_names_without_device_shape():
    # Without the device's shape the first copy engine's id tells where cores end.
    records = (
        rec(drv.PTO_CMD_BLOCK, 1, 0, 5, engine=0, name="k"),
        rec(drv.PTO_CMD_H2D, 1, 5, 6, engine=3, name="h2d", nbytes=8),
    )
    doc = Trace(records).to_chrome()
    check_chrome_trace(doc)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names[ENGINE_TID_BASE + 0] == "core 0"
    assert names[ENGINE_TID_BASE + 3] == "copy engine 0"


def test_empty_trace_is_valid():
    doc = Trace(()).to_chrome()
    check_chrome_trace(doc)
    assert [e["ph"] for e in doc["traceEvents"]] == ["M"]


def test_save_writes_the_same_json(tmp_path):
    trace = Trace(tuple(pipeline_records()), device={"cores": CORES, "copy_engines": COPY})
    path = trace.save(tmp_path / "sub" / "t.json")
    assert path == tmp_path / "sub" / "t.json"
    assert json.loads(path.read_text()) == trace.to_chrome()
    assert [p.name for p in path.parent.iterdir()] == ["t.json"]  # no temporary file left behind


def test_summary_measures_overlap():
    s = Trace(tuple(pipeline_records()), device={"cores": CORES, "copy_engines": COPY}).summary()
    # Batch b: H2D [0,40), blocks [41,99) and [42,98), D2H [100,130) (+100 µs per batch).
    assert s.wall_ns == 230_000
    assert s.compute_ns == 2 * 58_000
    assert s.copy_ns == 110_000  # batch 0's D2H and batch 1's H2D share [100, 130)
    assert s.overlapped_ns == 0  # copies never ran under a kernel
    assert s.overlap == 0.0
    assert s.engine_busy_ns == {0: 2 * 58_000, 1: 2 * 56_000, 2: 2 * 40_000, 3: 2 * 30_000}
    # Shift batch 1's H2D under batch 0's kernel: 40 µs of copy now hides under compute.
    shifted = [r for r in pipeline_records() if not (r.kind == drv.PTO_CMD_H2D and r.token == 11)]
    shifted.append(rec(drv.PTO_CMD_H2D, 1, 50, 90, engine=CORES, name="h2d", nbytes=4096, token=11))
    s2 = Trace(tuple(shifted)).summary()
    assert s2.overlapped_ns == 40_000
    assert s2.overlap == pytest.approx(40_000 / min(s2.compute_ns, s2.copy_ns))
    assert s.concurrency == pytest.approx((116 + 112 + 80 + 60) / 230)  # engines busy per wall µs


# --- the layout and reading a trace back (from_chrome) ----------------------


def without_flow_ids(doc: dict) -> list[dict]:
    """The events of `doc` with the flows' ids left out (their numbering follows the record order)."""
    return [{k: v for k, v in e.items() if k != "id"} for e in doc["traceEvents"]]


def test_track_kinds_follow_from_tids():
    assert track_kind(STREAM_TID_BASE, 2) == "stream"
    assert track_kind(ENGINE_TID_BASE - 1, 2) == "stream"
    assert track_kind(ENGINE_TID_BASE + 1, 2) == "core"
    assert track_kind(ENGINE_TID_BASE + 2, 2) == "copy"
    assert track_kind(0, 2) == "other"
    lay = layout(Trace(tuple(pipeline_records()), device={"cores": CORES, "copy_engines": COPY}))
    assert [(t.name, t.kind) for t in lay.tracks] == [
        ("stream 1", "stream"), ("stream 2", "stream"), ("stream 3", "stream"),
        ("core 0", "core"), ("core 1", "core"), ("copy engine 0", "copy"), ("copy engine 1", "copy"),
    ]
    assert len(lay.flows) == 4 and all(f.src_ts <= f.dst_ts for f in lay.flows)


def test_from_chrome_reads_back_what_to_chrome_wrote():
    trace = Trace(tuple(pipeline_records()), dropped=3,
                  device={"platform": "sim", "cores": CORES, "copy_engines": COPY}, stream_names={2: "compute"})
    doc = json.loads(json.dumps(trace.to_chrome()))
    back = Trace.from_chrome(doc)
    assert len(back) == len(trace) and set(back.records) == set(trace.records)
    assert back.dropped == 3 and back.stream_names == {2: "compute"} and back.device == trace.device
    assert back.to_chrome() == doc
    assert back.summary() == trace.summary()
    # The bare event list reads too (without the origin, times count from 1 ns).
    assert Trace.from_chrome(doc["traceEvents"]).summary() == trace.summary()


def test_from_chrome_keeps_statuses_and_commands_that_never_started():
    records = (
        rec(drv.PTO_CMD_LAUNCH, 1, 0, 5, name="fail", status=-drv.PTO_EKERNEL, token=1),
        rec(drv.PTO_CMD_H2D, 1, 5, 5, engine=4, name="h2d", status=-drv.PTO_EDEP, token=2),
        TraceRecord(3, 3, 64, T0 + 1000, 0, T0 + 9000, 0, 1, -1, drv.PTO_CMD_D2H, 0, -drv.PTO_ECANCELED, "d2h"),
        rec(drv.PTO_CMD_FREE, 1, 10, 11, name="free", status=-99, token=4),  # a code the driver has no name for
    )
    doc = Trace(records, device={"cores": 4, "copy_engines": 1}).to_chrome()
    back = Trace.from_chrome(doc)
    assert [r.status for r in back.records[:3]] == [r.status for r in records[:3]]
    assert drv.status_name(back.records[3].status) == "PTO_E?"
    never = back.records[2]
    assert (never.start_ns, never.end_ns, never.duration_ns, never.begin_ns) == (0, T0 + 9000, 0, T0 + 9000)
    assert back.records[:2] == records[:2]
    assert back.to_chrome() == doc


def test_from_chrome_rejects_what_is_not_a_trace():
    for bad in ({"events": []}, {"traceEvents": {}}, "trace.json", 3):
        with pytest.raises(ValueError, match="not a Chrome trace"):
            Trace.from_chrome(bad)
    # Slices outside the layout's tracks, or of kinds the driver does not have, are left out.
    foreign = [{"name": "x", "cat": "launch", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 0, "args": {}},
               {"name": "y", "cat": "gc", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 5, "args": {}}]
    assert len(Trace.from_chrome(foreign)) == 0


# --- records the driver traced --------------------------------------------


def test_driver_records_convert(tmp_path):
    from helpers.device import close_device, open_device

    dev = open_device(trace=1)
    try:
        h2d, k, d2h = (drv.ffi.new("pto_stream **") for _ in range(3))
        for s in (h2d, k, d2h):
            drv.check(drv.lib.pto_stream_create(dev, 0, s))
        ev = drv.ffi.new("pto_event **")
        drv.check(drv.lib.pto_event_create(dev, ev))
        n = 1024
        buf = drv.ffi.new("pto_devptr *")
        drv.check(drv.lib.pto_mem_alloc(dev, n * 4, h2d[0], buf))
        host = drv.ffi.new("float[]", n)
        kern = drv.ffi.new("pto_kernel **")
        drv.check(drv.lib.pto_kernel_builtin(dev, b"fill_f32", kern))
        drv.check(drv.lib.pto_stream_copy_h2d(h2d[0], buf[0], host, n * 4, 1))
        drv.check(drv.lib.pto_stream_record(h2d[0], ev[0], 0))
        drv.check(drv.lib.pto_stream_wait_event(k[0], ev[0], 0))
        args = drv.ffi.new("uint64_t[]", [buf[0], 0x3F800000, n])
        drv.check(drv.lib.pto_stream_launch(k[0], kern[0], 2, args, 3, 2))
        drv.check(drv.lib.pto_stream_record(k[0], ev[0], 0))
        drv.check(drv.lib.pto_stream_wait_event(d2h[0], ev[0], 0))
        drv.check(drv.lib.pto_stream_copy_d2h(d2h[0], host, buf[0], n * 4, 3))
        assert drv.lib.pto_device_synchronize(dev, 10_000_000) == 0
        assert host[n - 1] == 1.0
        drv.check(drv.lib.pto_stream_free(d2h[0], buf[0], 0))
        assert drv.lib.pto_device_synchronize(dev, 10_000_000) == 0
        from pypto_async.runtime._recorder import device_shape

        records = read_records(dev)
        assert read_records(dev) == []  # reading moves them out
        trace = Trace(tuple(records), device=device_shape(dev))
        kinds = sorted(r.kind_name for r in records)
        assert kinds.count("block") == 2 and kinds.count("launch") == 1
        assert {"h2d", "d2h", "record", "wait", "free"} <= set(kinds)
        doc = trace.to_chrome()
        check_chrome_trace(doc)
        flows = [e for e in doc["traceEvents"] if e["ph"] == "s"]
        assert len(flows) == 2
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert {e["name"] for e in xs if e["cat"] == "launch"} == {"fill_f32"}
        assert {e["args"]["bytes"] for e in xs if e["cat"] in ("h2d", "d2h")} == {n * 4}
        summary = trace.summary()
        assert summary.compute_ns > 0 and summary.copy_ns > 0
        assert summary.wall_ns >= max(summary.compute_ns, summary.copy_ns)
        trace.save(tmp_path / "t.json")
        for s in (h2d, k, d2h):
            drv.lib.pto_stream_destroy(s[0])
        drv.lib.pto_event_destroy(ev[0])
    finally:
        close_device(dev)


# --- the worker's traces: w.trace() windows and enable_chip_swimlane -----------------

N = 4096
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


def test_trace_window_records_only_its_work(tmp_path, kernels):
    from pypto_async.runtime import ChipWorker, RunConfig

    add = kernels.get("add", N, blocks=2)
    x = np.random.default_rng(3).standard_normal(N).astype(np.float32)
    with ChipWorker(RunConfig(**SMALL)) as w:
        y = np.empty(N, np.float32)
        w.run(add, x, x, y)  # before the window: not in it
        s = w.stream()
        with w.trace(tmp_path / "win.json") as tr:
            for _ in range(3):
                w.run(add, x, x, y, stream=s)
        assert tr.path == tmp_path / "win.json" and tr.stats_path is None
        doc = json.loads(tr.path.read_text())
        check_chrome_trace(doc)
        assert doc == tr.trace.to_chrome()
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        launches = [e for e in xs if e["cat"] == "launch"]
        assert [e["name"] for e in launches] == [add.symbol] * 3  # kernels are named by symbol
        assert {e["tid"] for e in launches} == {STREAM_TID_BASE + s.id}
        assert sum(1 for e in xs if e["cat"] == "block") == 3 * 2
        copies = [e for e in xs if e["cat"] in ("h2d", "d2h") and e["tid"] < ENGINE_TID_BASE]
        assert sorted(e["cat"] for e in copies) == ["d2h"] * 3 + ["h2d"] * 6
        assert all(e["args"]["bytes"] == N * 4 for e in copies)
        assert tr.trace.dropped == 0
        # Tracing is off again outside the window.
        w.run(add, x, x, y)
        assert read_records(w._dev) == []


def test_swimlane_for_the_workers_life_matches_its_windows(tmp_path, kernels):
    from pypto_async.runtime import ChipWorker, RunConfig

    add = kernels.get("add", N)
    x = np.random.default_rng(4).standard_normal(N).astype(np.float32)
    cfg = RunConfig(**SMALL, enable_chip_swimlane=True, enable_scope_stats=True, save_kernels_dir=str(tmp_path))
    with ChipWorker(cfg) as w:
        y = np.empty(N, np.float32)
        w.run(add, x, x, y)
        with w.trace() as outer:
            with w.trace(tmp_path / "inner.json") as inner:
                w.run(add, x, x, y)
            w.run(add, x, x, y)
        life = w._tracing.life_path
    assert life.parent == tmp_path and life.name.startswith("pto_swimlane_")
    doc = json.loads(life.read_text())
    check_chrome_trace(doc)
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "launch") == 3
    assert set(inner.trace.records) < set(outer.trace.records)
    assert sum(r.kind_name == "launch" for r in outer.trace.records) == 2
    # The scope statistics sit next to each trace written.
    assert (tmp_path / "inner.stats.json").is_file() and inner.stats_path == tmp_path / "inner.stats.json"
    stats = json.loads(life.with_name(life.stem + ".stats.json").read_text())
    assert stats["launches"] == 3 and stats["streams"] and stats["engines"]
    # The window's JSON is the life trace's, restricted to the window's commands.
    window_tokens = {e["args"]["token"] for e in inner.trace.to_chrome()["traceEvents"] if e["ph"] == "X"}
    life_window = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["args"]["token"] in window_tokens]
    win = [e for e in json.loads((tmp_path / "inner.json").read_text())["traceEvents"] if e["ph"] == "X"]
    strip = lambda es: sorted((e["name"], e["cat"], e["tid"], e["dur"], e["args"]["seq"]) for e in es)  # noqa: E731
    assert strip(life_window) == strip(win)


@pytest.mark.anyio
async def test_async_trace_window(tmp_path, kernels, anyio_backend):
    from pypto_async.runtime import ChipWorker, RunConfig

    add = kernels.get("add", N)
    x = np.random.default_rng(5).standard_normal(N).astype(np.float32)
    async with ChipWorker(RunConfig(**SMALL)) as w:
        a, b = w.stream(), w.stream()
        ys = [np.empty(N, np.float32) for _ in range(4)]
        async with w.trace(tmp_path / "a.json"):
            first = w.run(add, x, x, ys[0], stream=a)
            b.wait(first)
            for y in ys[1:]:
                w.run(add, x, x, y, stream=b)  # not awaited: the window waits for them
        for y in ys:
            np.testing.assert_array_equal(y, x + x)
    doc = json.loads((tmp_path / "a.json").read_text())
    check_chrome_trace(doc)
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "launch") == 4
    assert any(e["ph"] == "s" for e in doc["traceEvents"])  # b waited on a: an arrow


@pytest.mark.anyio
async def test_a_saved_window_reads_back_as_its_trace(tmp_path, kernels, anyio_backend):
    from pypto_async.runtime import ChipWorker, RunConfig

    add = kernels.get("add", N, blocks=2)
    x = np.random.default_rng(7).standard_normal(N).astype(np.float32)
    async with ChipWorker(RunConfig(**SMALL)) as w:
        a, b = w.stream(), w.stream()
        ys = [np.full(N, np.nan, np.float32) for _ in range(7)]
        async with w.trace(tmp_path / "t.json") as tr:
            w.run(add, x, x, ys[0])  # on the default stream: its track is named
            for i in range(1, 6, 2):
                first = w.run(add, x, x, ys[i], stream=a)
                b.wait(first)  # an arrow from a to b
                w.run(add, x, x, ys[i + 1], stream=b)  # not awaited: the window waits for them
    for y in ys:
        np.testing.assert_array_equal(y, x + x)
    doc = json.loads(tr.path.read_text())
    back = Trace.from_chrome(doc)
    assert back.summary() == tr.trace.summary()
    assert back.stream_names == tr.trace.stream_names and back.device == tr.trace.device
    # The driver leaves some names empty; the JSON names those slices by kind.
    named = {dataclasses.replace(r, name=r.name or r.kind_name) for r in tr.trace.records}
    assert set(back.records) == named
    assert without_flow_ids(back.to_chrome()) == without_flow_ids(doc)
    assert any(e["ph"] == "s" for e in doc["traceEvents"])


def test_trace_on_a_closed_worker_raises(kernels):
    from pypto_async.errors import PtoClosedError
    from pypto_async.runtime import ChipWorker, RunConfig

    w = ChipWorker(RunConfig(**SMALL))
    w.close()
    with pytest.raises(PtoClosedError):
        w.trace()


def test_trace_window_is_written_when_the_block_raises_and_is_single_use(tmp_path, kernels):
    from pypto_async.runtime import ChipWorker, RunConfig

    add = kernels.get("add", N)
    x = np.random.default_rng(6).standard_normal(N).astype(np.float32)
    with ChipWorker(RunConfig(**SMALL)) as w:
        window = w.trace(tmp_path / "t.json")
        with pytest.raises(KeyError):
            with window:
                w.run(add, x, x, np.empty(N, np.float32))
                raise KeyError("user error")
        doc = json.loads((tmp_path / "t.json").read_text())
        check_chrome_trace(doc)
        assert sum(e.get("cat") == "launch" for e in doc["traceEvents"]) == 1
        with pytest.raises(RuntimeError, match="only once"):
            with window:
                pass
