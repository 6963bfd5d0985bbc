"""End to end over the raw driver: open, copy, launch a builtin, drain, close."""

from __future__ import annotations

import numpy as np

from helpers import new_token
from pypto_async._driver import check, lib

from helpers.raw_driver import alloc, builtin, d2h, h2d, launch, sync


def test_open_copy_launch_drain_close(dev, cq, stream, rng):
    n = 4096
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, dtype=np.float32)
    pa, pb, po = (alloc(dev, n * 4, stream) for _ in range(3))
    add = builtin(dev, "add_f32")
    t = [new_token() for _ in range(4)]
    h2d(stream, pa, a, t[0])
    h2d(stream, pb, b, t[1])
    launch(stream, add, 4, [pa, pb, po, n], t[2])
    d2h(stream, out, po, t[3])
    recs = cq.wait(*t)
    assert [recs[x].status for x in t] == [0, 0, 0, 0]
    assert [recs[x].seq for x in t] == sorted(recs[x].seq for x in t)
    np.testing.assert_array_equal(out, a + b)
    for p in (pa, pb, po):
        check(lib.pto_stream_free(stream, p, 0))
    sync(stream)
