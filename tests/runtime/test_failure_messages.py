"""A dependency error says its chain once: the events it came through, the first failure and its message."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pypto_async.errors import PtoDependencyError, PtoKernelFault

N = 64


def test_a_wait_carried_failure_names_the_event_and_the_first_failure_once(worker, kernels):
    fail = worker.register(kernels.get("fail", N))
    inc = worker.register(kernels.get("inc", N))
    a, b, c = worker.stream(), worker.stream(), worker.stream()
    x = np.random.default_rng(3).standard_normal(N).astype(np.float32)
    t = worker.alloc_tensor(N, np.float32, init=x, stream=a)
    u = worker.alloc_tensor(N, np.float32, init=x, stream=b)
    v = worker.alloc_tensor(N, np.float32, init=x, stream=c)
    worker.sync(timeout=10)
    failed = fail.submit(t, stream=a)
    on_a = a.record()
    b.wait(on_a)
    behind_b = inc.submit(u, stream=b)
    on_b = b.record()
    c.wait(on_b)
    behind_c = inc.submit(v, stream=c)
    for s in (a, b, c):
        with pytest.raises(PtoDependencyError):
            s.sync(timeout=10)
    assert isinstance(failed.exception(), PtoKernelFault)
    one, two = str(behind_b.exception()), str(behind_c.exception())
    for text, hops in ((one, 1), (two, 2)):
        assert text.count("depends on failed token") == 1, text
        assert text.count("failing on purpose") == 1, text  # the kernel's own message, once
        assert text.count("(first failure: launch of 'fail')") == 1, text
        via = re.findall(r"via event (\d+), ", text)  # each event it came through, nearest first
        assert len(via) == len(set(via)) == hops and text.index("via event") < text.index("depends on"), text
    assert isinstance(behind_b.exception(), PtoDependencyError) and behind_b.exception().__cause__ is failed.exception()
    assert behind_c.exception().__cause__ is failed.exception()
    for tensor, s in ((t, a), (u, b), (v, c)):
        tensor.free(stream=s)
    worker.sync(timeout=10)

