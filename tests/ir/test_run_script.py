"""debug/run.py: the re-runner every compile leaves in its artifact directory (PyPTO's debug harness)."""

from __future__ import annotations

import ast
import importlib.util

import numpy as np
import pytest
import torch

from pypto_async import ir
from pypto_async._dtypes import BF16, BOOL, FP32, INT32
from pypto_async._signature import ParamSpec
from pypto_async.ir._run_script import render

from .test_kernels import ROWS, COLS, add_kernel


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_ASYNC_CACHE_DIR", str(tmp_path / "cache"))


def _load(path):
    spec = importlib.util.spec_from_file_location("pypto_debug_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("where", ["cache", "output_dir"])
def test_run_script_reruns_the_program(fresh_cache, tmp_path, where):
    a = np.zeros((ROWS, COLS), np.float32)
    out_dir = None if where == "cache" else tmp_path / "art"
    compiled = ir.compile(add_kernel.lower(a, a, a), platform="sim", output_dir=out_dir)
    script = compiled.output_dir / "debug" / "run.py"
    assert script.is_file()
    text = script.read_text()
    ast.parse(text)
    assert f"a = torch.randn(({ROWS}, {COLS}), dtype=getattr(torch, 'float32'))" in text
    assert f"out = torch.zeros(({ROWS}, {COLS}), dtype=getattr(torch, 'float32'))" in text

    mod = _load(script)
    made = mod._inline_inputs()
    assert [tuple(t.shape) for t in made] == [(ROWS, COLS)] * 3
    assert not made[2].any()  # the Out parameter starts as zeros
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal((ROWS, COLS)).astype(np.float32))
    poisoned = torch.full((ROWS, COLS), float("nan"))
    mod._inline_inputs = lambda: [x, y, poisoned]  # the user's edit
    seen = []
    mod._user_compare = lambda *args: seen.append(args)
    got = mod.main()
    np.testing.assert_allclose(got[2].numpy(), x.numpy() + y.numpy(), rtol=1e-6, atol=1e-6)
    assert len(seen) == 1 and seen[0][2] is poisoned


def test_run_script_via_jit_cache(fresh_cache):
    add_kernel._cache.clear()
    a = torch.ones((ROWS, COLS))
    c = torch.zeros((ROWS, COLS))
    add_kernel(a, a, c)
    (compiled,) = add_kernel._cache.values()
    assert (compiled.output_dir / "debug" / "run.py").is_file()


def test_render_dtypes_and_scalars():
    params = [
        ParamSpec("n", "scalar", (), INT32),
        ParamSpec("s", "scalar", (), FP32),
        ParamSpec("idx", "in", (4,), INT32),
        ParamSpec("m", "in", (2, 3), BOOL),
        ParamSpec("h", "inout", (8,), BF16),
        ParamSpec("o", "out", (8,), BF16),
    ]
    text = render("k", params)
    ast.parse(text)
    ns = {}
    body = text.split("def _inline_inputs():", 1)[1].split("\n\n\n", 1)[0]
    exec("import torch\ndef f():" + body.split('"""', 2)[2], ns)  # noqa: S102 - our own generated text
    n, s, idx, m, h, o = ns["f"]()
    assert (n, s) == (0, 0.0)
    assert idx.dtype == torch.int32 and tuple(idx.shape) == (4,) and int(idx.min()) >= 0
    assert m.dtype == torch.bool and tuple(m.shape) == (2, 3)
    assert h.dtype == torch.bfloat16 and o.dtype == torch.bfloat16 and not o.any()


def test_no_params_program_renders():
    ast.parse(render("empty", []))


