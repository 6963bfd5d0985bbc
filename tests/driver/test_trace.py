"""native/src/trace.c: per-command trace records (kinds, engines, bytes, blocks, times)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from helpers import held, new_token
from pypto_async._driver import (
    PTO_CMD_BLOCK,
    PTO_CMD_D2D,
    PTO_CMD_D2H,
    PTO_CMD_DELAY,
    PTO_CMD_FREE,
    PTO_CMD_H2D,
    PTO_CMD_LATCH,
    PTO_CMD_LAUNCH,
    PTO_CMD_MEMSET,
    PTO_CMD_NOTIFY,
    PTO_CMD_RECORD,
    PTO_CMD_WAIT,
    check,
    ffi,
    lib,
)

from helpers.raw_driver import alloc, builtin, d2h, device_stats, h2d, info, launch, new_event, notify, sync


FIELDS = [name for name, _ in ffi.typeof("pto_trace_record").fields]


def read_trace(dev, cap=4096):
    """Read every trace record, copied out of the buffer (name as bytes)."""
    buf = ffi.new("pto_trace_record[]", cap)
    n = lib.pto_trace_read(dev, buf, cap)
    assert 0 <= n < cap
    out = []
    for i in range(n):
        r = SimpleNamespace(**{f: getattr(buf[i], f) for f in FIELDS if f != "name"})
        r.name = ffi.string(buf[i].name)
        out.append(r)
    return out


def test_records_for_every_kind(open_dev, new_stream, rng):
    dev = open_dev(trace=1, cores=2, copy_engines=2)
    cores = info(dev).cores
    s, s2 = new_stream(device=dev), new_stream(device=dev)
    n = 4096
    data = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    a, b = alloc(dev, n * 4, s), alloc(dev, n * 4, s)
    ev = new_event(dev)
    tok = {k: new_token() for k in ("h2d", "memset", "d2d", "launch", "d2h", "record", "wait",
                                     "notify", "delay", "free", "latch")}
    with held(dev, s, token=tok["latch"]):
        h2d(s, a, data, tok["h2d"])
    check(lib.pto_stream_memset(s, b, 0, n * 4, tok["memset"]))
    check(lib.pto_stream_copy_d2d(s, b, a, n * 4, tok["d2d"]))
    launch(s, builtin(dev, "add_f32"), 3, [a, b, b, n], tok["launch"])
    d2h(s, out, b, tok["d2h"])
    check(lib.pto_stream_record(s, ev, tok["record"]))
    check(lib.pto_stream_wait_event(s2, ev, tok["wait"]))
    notify(s2, tok["notify"])
    check(lib.pto_stream_delay(s2, 100, tok["delay"]))
    check(lib.pto_stream_free(s, a, tok["free"]))
    check(lib.pto_stream_free(s, b, 0))
    sync(s)
    sync(s2)
    np.testing.assert_array_equal(out, data + data)
    recs = read_trace(dev)
    by_token = {r.token: r for r in recs if r.token and r.kind != PTO_CMD_BLOCK}
    kinds = {"h2d": PTO_CMD_H2D, "memset": PTO_CMD_MEMSET, "d2d": PTO_CMD_D2D, "launch": PTO_CMD_LAUNCH,
             "d2h": PTO_CMD_D2H, "record": PTO_CMD_RECORD, "wait": PTO_CMD_WAIT, "notify": PTO_CMD_NOTIFY,
             "delay": PTO_CMD_DELAY, "free": PTO_CMD_FREE, "latch": PTO_CMD_LATCH}
    for name, kind in kinds.items():
        r = by_token[tok[name]]
        assert r.kind == kind, name
        assert r.status == 0
        assert r.submit_ns <= r.start_ns <= r.end_ns, name
    for name in ("h2d", "d2h", "d2d", "memset"):
        r = by_token[tok[name]]
        assert r.bytes == n * 4
        assert cores <= r.engine < cores + 2, f"{name} ran on engine {r.engine}, not a copy engine"
        assert r.name == name.encode()
    for name in ("record", "wait", "notify", "delay", "free", "latch"):
        assert by_token[tok[name]].engine == -1, name
    assert by_token[tok["record"]].event_id != 0
    assert by_token[tok["record"]].event_id == by_token[tok["wait"]].event_id
    assert by_token[tok["wait"]].stream_id == lib.pto_stream_id(s2)
    assert by_token[tok["launch"]].name == b"add_f32"
    blocks = [r for r in recs if r.kind == PTO_CMD_BLOCK]
    assert sorted(r.block for r in blocks) == [0, 1, 2]
    launch_rec = by_token[tok["launch"]]
    for r in blocks:
        assert 0 <= r.engine < cores
        assert r.name == b"add_f32"
        assert r.seq == launch_rec.seq and r.stream_id == launch_rec.stream_id
        assert launch_rec.start_ns <= r.start_ns <= r.end_ns <= launch_rec.end_ns
    assert read_trace(dev) == []  # read moves records out
    lib.pto_event_destroy(ev)


def test_trace_off_records_nothing_and_can_be_enabled(dev, stream):
    notify(stream, 0)
    sync(stream)
    assert read_trace(dev) == []
    lib.pto_trace_enable(dev, 1)
    t = new_token()
    notify(stream, t)
    sync(stream)
    [r] = read_trace(dev)
    assert (r.token, r.kind) == (t, PTO_CMD_NOTIFY)
    lib.pto_trace_enable(dev, 0)
    notify(stream, 0)
    sync(stream)
    assert read_trace(dev) == []


def test_full_buffer_drops_oldest_and_counts(open_dev, new_stream):
    dev = open_dev(trace=1, trace_capacity=8)
    s = new_stream(device=dev)
    toks = [new_token() for _ in range(20)]
    for t in toks:
        notify(s, t)
    sync(s)
    assert lib.pto_trace_dropped(dev) == 12
    assert [r.token for r in read_trace(dev)] == toks[-8:]


def test_engine_stats(open_dev, new_stream, rng):
    dev = open_dev(cores=2, copy_engines=2)
    s = new_stream(device=dev)
    n = 1 << 16
    data = rng.integers(0, 256, n, dtype=np.uint8)
    p = alloc(dev, n, s)
    before = device_stats(dev)
    h2d(s, p, data)
    d2h(s, data, p)
    launch(s, builtin(dev, "spin"), 4, [10])
    check(lib.pto_stream_free(s, p, 0))
    sync(s)
    after = device_stats(dev)
    assert after.launches - before.launches == 1
    assert after.copies - before.copies == 2
    assert after.bytes_h2d - before.bytes_h2d == n
    assert after.bytes_d2h - before.bytes_d2h == n
    es = ffi.new("pto_engine_stats *")
    blocks = copies = moved = 0
    for e in range(4):
        assert lib.pto_engine_get_stats(dev, e, es) == 0
        assert es.engine == e and es.is_copy == (e >= 2)
        if es.is_copy:
            copies += es.commands
            moved += es.bytes
        else:
            blocks += es.commands
        assert es.commands == 0 or es.busy_ns > 0
    assert (blocks, copies, moved) == (4, 2, 2 * n)
    assert lib.pto_engine_get_stats(dev, 4, es) < 0
