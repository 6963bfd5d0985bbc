"""pypto_async.torch: @pl.jit kernels as torch operators, eagerly, under torch.compile, and in a captured graph.

PyPTO's torch integration (``pypto.torch.init`` / ``register``) as its
``examples/runtime/torch_kernel_capture.py`` uses it.  Every result is
checked against a pure-torch computation of the same thing on random data;
outputs are poisoned (NaN) before a kernel runs, so one that does not write
them cannot pass.  torch.compile tests are in the slow tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pypto_async.language as pl
from pypto_async.errors import PtoArgumentError, PtoCaptureError, PtoInvalidStateError, PtoNotSupported
from pypto_async.runtime import ChipWorker, RunConfig

torch = pytest.importorskip("torch")
import pypto_async.torch as ptorch  # noqa: E402 - with torch installed, it must import

ROOT = Path(__file__).resolve().parent.parent
R, C = 16, 32
SMALL = {"cores": 2, "copy_engines": 2, "device_memory": 64 << 20}


@pl.jit
def scale_add(x: pl.Tensor[[R, C], pl.FP32], y: pl.Tensor[[R, C], pl.FP32], alpha: pl.Scalar[pl.FP32],
              out: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
    """out = x * alpha + y."""
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.add(pl.mul(pl.load(x, [0, 0], [R, C]), alpha), pl.load(y, [0, 0], [R, C])), [0, 0], out)
    return out


@pl.jit
def accumulate_exp(x: pl.Tensor[[R, C], pl.FP32], n: pl.Scalar[pl.INT32], acc: pl.InOut[pl.Tensor[[R, C], pl.FP32]]):
    """acc += exp(x) * n."""
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.add(pl.load(acc, [0, 0], [R, C]), pl.mul(pl.exp(pl.load(x, [0, 0], [R, C])), n))
        pl.store(t, [0, 0], acc)
    return acc


@pl.jit
def two_outputs(x: pl.Tensor[[R, C], pl.FP32], s: pl.Out[pl.Tensor[[R, C], pl.FP32]],
                m: pl.Out[pl.Tensor[[R, 1], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        t = pl.load(x, [0, 0], [R, C])
        pl.store(pl.mul(t, t), [0, 0], s)
        pl.store(pl.row_max(t), [0, 0], m)
    return s, m


M = pl.dynamic("M")


@pl.jit
def double_rows(x: pl.Tensor[[M, C], pl.FP32], out: pl.Out[pl.Tensor[[M, C], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        pl.store(pl.mul(pl.load(x, [0, 0], [x.shape[0], C]), 2.0), [0, 0], out)
    return out


DOUBLE = ptorch.register(double_rows, "pypto_async_test::double_rows")
SCALE_ADD = ptorch.register(scale_add, "pypto_async_test::scale_add")
ACCUMULATE = ptorch.register(accumulate_exp, "pypto_async_test::accumulate_exp")
TWO = ptorch.register(two_outputs, "pypto_async_test::two_outputs")


def nan(*shape):
    return torch.full(shape, float("nan"))


def model(x, y, alpha: float, n: int):
    """A torch model calling both registered kernels among torch ops."""
    h = torch.tanh(x)
    out = torch.empty_like(h).fill_(float("nan"))  # poisoned: the kernel writes every element
    out = torch.ops.pypto_async_test.scale_add(h, y, alpha, out)
    acc = out.clone()
    torch.ops.pypto_async_test.accumulate_exp(y * 0.5, n, acc)
    return acc.sum(dim=1, keepdim=True) + out


def reference(x, y, alpha: float, n: int):
    out = torch.tanh(x) * alpha + y
    acc = out + torch.exp(y * 0.5) * n
    return acc.sum(dim=1, keepdim=True) + out


@pytest.fixture
def xy():
    g = torch.Generator().manual_seed(7)
    return torch.randn(R, C, generator=g), torch.randn(R, C, generator=g)


@pytest.mark.slow
def test_a_torch_model_calling_two_registered_kernels_matches_torch_eagerly(xy):
    x, y = xy
    for alpha, n in ((0.75, 3), (-2.0, -1)):
        torch.testing.assert_close(model(x, y, alpha, n), reference(x, y, alpha, n), rtol=1e-5, atol=1e-5)
    assert str(SCALE_ADD._schema) == (
        "pypto_async_test::scale_add(Tensor x, Tensor y, float alpha, Tensor(a3!) out) -> Tensor(a3!)")
    assert torch.ops.pypto_async_test.scale_add.default is SCALE_ADD


@pytest.mark.slow
def test_inout_is_updated_in_place_and_returned_as_the_argument(xy):
    x, _ = xy
    acc = torch.randn(R, C)
    start, x0 = acc.clone(), x.clone()
    ret = ACCUMULATE(x, 2, acc)
    assert ret is acc  # the alias, not a copy
    torch.testing.assert_close(acc, start + 2 * torch.exp(x), rtol=1e-5, atol=1e-5)
    ACCUMULATE(x, 1, acc)  # reads what the last call wrote
    torch.testing.assert_close(acc, start + 3 * torch.exp(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(x, x0)  # an In tensor is not written
    s, m = nan(R, C), nan(R, 1)
    got = TWO(x, s, m)
    assert isinstance(got, tuple) and got[0] is s and got[1] is m
    torch.testing.assert_close(s, x * x)
    torch.testing.assert_close(m, x.amax(dim=1, keepdim=True))


@pytest.mark.slow
def test_scalars_are_passed_per_call_and_checked(xy):
    x, y = xy
    for alpha in (0.0, 1.5, -3.25):
        out = nan(R, C)
        SCALE_ADD(x, y, alpha, out)
        torch.testing.assert_close(out, x * alpha + y, rtol=1e-6, atol=1e-6)
    SCALE_ADD(x, y, 2, out)  # an int for a float parameter, as torch converts it
    torch.testing.assert_close(out, 2 * x + y, rtol=1e-6, atol=1e-6)
    acc = torch.zeros(R, C)
    with pytest.raises(PtoArgumentError, match=r"argument 'n': 2147483648 is outside the range of INT32"):
        ACCUMULATE(x, 2**31, acc)
    assert torch.equal(acc, torch.zeros(R, C))


@pytest.mark.parametrize("case", ["dtype", "shape", "rank", "device", "contiguity", "grad"])
def test_bad_input_raises_before_anything_is_queued(xy, case):
    from pypto_async.runtime._entry import default_worker

    x, y = xy
    out = nan(R, C)
    bad = {"dtype": (x.double(), r"expected dtype torch.float32, got torch.float64"),
           "shape": (torch.randn(R, C + 1), r"expected shape \[16, 32\], got \[16, 33\]"),
           "rank": (torch.randn(R * C), r"expected 2 dimensions"),
           "device": (torch.randn(R, C, device="meta"), r"on meta, the others on cpu"),
           "contiguity": (torch.randn(C, R).t(), r"not contiguous"),
           "grad": (x.clone().requires_grad_(), r"requires grad")}[case]
    SCALE_ADD(x, y, 1.0, out)  # warm: the kernel is compiled and the worker open
    w = default_worker()
    before = w.stats().launches
    out.fill_(float("nan"))
    with pytest.raises(PtoArgumentError, match=bad[1]):
        SCALE_ADD(x, bad[0], 1.0, out)
    assert w.stats().launches == before and out.isnan().all()  # nothing queued, nothing written
    SCALE_ADD(x, y, 1.0, out)  # the worker keeps working
    torch.testing.assert_close(out, x + y)


@pytest.mark.slow  # FakeTensorMode's first use takes over a second
def test_fake_and_meta_tensors_trace_without_running_anything(xy):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pypto_async.runtime._entry import default_worker

    x, y = xy
    SCALE_ADD(x, y, 1.0, nan(R, C))
    before = default_worker().stats().launches
    meta = [torch.empty(R, C, device="meta") for _ in range(3)]
    assert SCALE_ADD(meta[0], meta[1], 2.0, meta[2]) is meta[2]
    with FakeTensorMode() as mode:
        fx, fo = mode.from_tensor(x), mode.from_tensor(nan(R, C))
        assert SCALE_ADD(fx, fx, 2.0, fo) is fo
        with pytest.raises(PtoArgumentError, match="expected shape"):
            SCALE_ADD(fx, mode.from_tensor(torch.zeros(R, 2 * C)), 2.0, fo)
    assert default_worker().stats().launches == before


def test_a_dynamic_dimension_takes_any_extent_and_the_static_ones_are_checked():
    for rows in (8, 24):
        x = torch.randn(rows, C)
        out = nan(rows, C)
        assert DOUBLE(x, out) is out
        torch.testing.assert_close(out, 2 * x)
    with pytest.raises(PtoArgumentError, match=r"expected shape \[\*, 32\], got \[8, 16\]"):
        DOUBLE(torch.randn(8, 16), nan(8, 16))


def test_on_an_async_worker_the_op_returns_once_it_ran(xy):
    import asyncio

    x, y = xy
    out = nan(R, C)

    async def main():
        async with ChipWorker(RunConfig(**SMALL)) as w:
            with pytest.warns(RuntimeWarning):  # a torch operator blocks the loop until its kernel ran
                assert SCALE_ADD(x, y, 2.0, out) is out
            torch.testing.assert_close(out, 2 * x + y)  # before anything is awaited
            assert w.stats().launches == 1

    asyncio.run(main())


def test_the_op_runs_on_the_worker_opened_around_it(xy):
    x, y = xy
    out = nan(R, C)
    with ChipWorker(RunConfig(**SMALL)) as w:
        SCALE_ADD(x, y, 0.5, out)
        assert w.stats().launches == 1
    torch.testing.assert_close(out, 0.5 * x + y)


def test_register_refuses_what_it_cannot_make_an_operator():
    @pl.jit
    def bare(a: pl.Tensor, out: pl.Out[pl.Tensor]):
        pl.store(pl.load(a, [0, 0], [R, C]), [0, 0], out)
        return out

    @pl.jit
    def no_tensor(n: pl.Scalar[pl.INT32]):
        return None

    assert ptorch.register(scale_add, "pypto_async_test::scale_add") is SCALE_ADD  # the same again
    cases = [
        (lambda: ptorch.register(scale_add.fn, "ns_a::op"), PtoArgumentError, "takes a @pl.jit kernel"),
        (lambda: ptorch.register(scale_add, "no_namespace"), PtoArgumentError, "'namespace::operator'"),
        (lambda: ptorch.register(scale_add, "ns_a::bad-name"), PtoArgumentError, "plain identifier"),
        (lambda: ptorch.register(scale_add, "ns_a::_pypto_x"), PtoArgumentError, "reserved"),
        (lambda: ptorch.register(accumulate_exp, "pypto_async_test::scale_add"), PtoArgumentError,
         "registered already"),
        (lambda: ptorch.register(scale_add, "aten::add"), PtoArgumentError, "defined already"),
        (lambda: ptorch.register(bare, "ns_a::bare"), PtoArgumentError, "needs its shape and dtype"),
        (lambda: ptorch.register(no_tensor, "ns_a::no_tensor"), PtoNotSupported, "at least one tensor"),
        (lambda: ptorch.register(scale_add, "ns_a::c", constexpr={"k": 1}), PtoNotSupported, "constexpr"),
        (lambda: ptorch.register(scale_add, "ns_a::c", config="sim"), PtoArgumentError, "RunConfig"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    assert not hasattr(torch.ops.ns_a, "bare")  # nothing half-defined is left behind


def test_init_fixes_the_default_workers_target_once():
    from pypto_async.runtime._entry import default_worker

    ptorch.init()
    ptorch.init()  # the same target again: nothing happens
    w = default_worker()
    assert ptorch.init() is None and default_worker() is w
    with pytest.raises(PtoInvalidStateError, match="fixed once per process"):
        ptorch.init(aicpu_thread_num=3)
    with pytest.raises(PtoNotSupported, match="simulator"):
        ptorch.init(platform="a2a3")
    with pytest.raises(PtoArgumentError, match="device must be an int"):
        ptorch.init(device="0")
    g = ptorch.Graph()
    with pytest.raises(PtoCaptureError, match="outside a graph capture"):
        with ptorch.graph(g):
            ptorch.init()


def test_a_captured_graph_replays_with_the_tensors_current_contents(xy):
    """The NPU-graph half of PyPTO's example: warm, capture, refill the inputs in place, replay."""
    x, y = xy
    acc, out = torch.zeros(R, C), nan(R, C)
    g = ptorch.Graph()
    with ptorch.graph(g):
        ACCUMULATE(x, 3, acc)  # registered operator
        scale_add(acc, y, 0.5, out)  # and a direct @pl.jit call: both recorded, not run
    assert torch.equal(acc, torch.zeros(R, C)) and out.isnan().all()
    assert g.inputs == ("x", "acc", "y", "out") and len(g) == 2
    expected = torch.zeros(R, C)
    for _ in range(3):
        x.copy_(torch.randn(R, C))  # new contents, same tensor
        g.replay()
        expected = expected + 3 * torch.exp(x)  # the scalar stays what it was when captured
        torch.testing.assert_close(acc, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out, 0.5 * expected + y, rtol=1e-5, atol=1e-5)
    with pytest.raises(PtoInvalidStateError, match="holds a capture already"):
        with ptorch.graph(g):
            pass
    g.reset()
    with pytest.raises(PtoInvalidStateError, match="holds no capture"):
        g.replay()


def test_a_capture_refuses_overlapping_views_and_waiting(xy):
    x, y = xy
    big = torch.zeros(2 * R, C)
    g = ptorch.Graph()
    with pytest.raises(PtoCaptureError, match="overlaps the memory of captured tensor 'acc'"):
        with ptorch.graph(g):
            ACCUMULATE(x, 1, big[:R])
            ACCUMULATE(x, 1, big[R // 2:R // 2 + R])
    assert len(g) == 0 and torch.equal(big, torch.zeros(2 * R, C))
    from pypto_async.torch import torch_npu

    with pytest.raises(PtoCaptureError):
        with ptorch.graph(g):
            ACCUMULATE(x, 1, big[:R])
            torch_npu.npu.synchronize()  # waits for captured work: refused, as in a runtime capture


@pytest.mark.slow  # a process
def test_importing_pypto_async_does_not_import_torch_and_a_missing_torch_is_a_pto_error():
    code = textwrap.dedent("""\
        import sys
        import pypto_async, pypto_async.language, pypto_async.ir, pypto_async.runtime, pypto_async.debug
        assert "torch" not in sys.modules, "importing pypto_async imported torch"
        sys.modules["torch"] = None  # torch is not installed
        from pypto_async.errors import PtoNotSupported
        try:
            import pypto_async.torch
        except PtoNotSupported as exc:
            print("refused:", exc)
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "refused: pypto_async.torch needs PyTorch" in res.stdout


# ---- torch.compile (slow: a compile takes seconds) ---------------------------------------------------------


@pytest.mark.slow
def test_the_model_gives_the_same_result_under_torch_compile_fullgraph(xy):
    x, y = xy
    compiled = torch.compile(model, fullgraph=True)
    for alpha, n in ((0.75, 3), (-2.0, 2)):
        want = reference(x, y, alpha, n)
        eager = model(x, y, alpha, n)
        got = compiled(x, y, alpha, n)
        torch.testing.assert_close(got, eager, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    x2, y2 = torch.randn(R, C), torch.randn(R, C)  # new data through the same compiled graph
    torch.testing.assert_close(compiled(x2, y2, 0.75, 3), reference(x2, y2, 0.75, 3), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_dynamic_dimension_stays_symbolic_under_torch_compile():
    f = torch.compile(lambda x: DOUBLE(x, torch.empty_like(x)) + 1, fullgraph=True, dynamic=True)
    for rows in (8, 24, 40):
        x = torch.randn(rows, C)
        torch.testing.assert_close(f(x), 2 * x + 1)


@pytest.mark.slow
def test_torch_compile_keeps_inout_and_multiple_outputs(xy):
    x, _ = xy

    def step(x, acc):
        acc = torch.ops.pypto_async_test.accumulate_exp(x, 2, acc)
        s, m = torch.ops.pypto_async_test.two_outputs(acc, torch.empty_like(x), x.new_empty(R, 1))
        return s + m

    acc0 = torch.randn(R, C)
    eager_acc, compiled_acc = acc0.clone(), acc0.clone()
    eager = step(x, eager_acc)
    got = torch.compile(step, fullgraph=True)(x, compiled_acc)
    torch.testing.assert_close(got, eager, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(compiled_acc, acc0 + 2 * torch.exp(x), rtol=1e-5, atol=1e-5)  # mutated in place
    a = acc0 + 2 * torch.exp(x)
    torch.testing.assert_close(got, a * a + a.amax(dim=1, keepdim=True), rtol=1e-5, atol=1e-5)


# ---- PyPTO's example, unchanged but for imports and platform ----------------------------------------------

EXAMPLE = "examples/runtime/torch_kernel_capture.py"


def _example() -> Path | None:
    """PyPTO's torch example: in $PYPTO_CHECKOUT, /tmp/pypto, or a checkout of a commit that has it."""
    roots = [os.environ.get("PYPTO_CHECKOUT"), "/tmp/pypto", "/tmp/pypto-torch"]
    for root in filter(None, roots):
        path = Path(root) / EXAMPLE
        if path.is_file():
            return path
    return None


def adapt_example(src: str) -> str:
    """The runner's import and platform change, and the torch_npu import and NPU device of this example."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pypto_examples_runner_t", ROOT / "benchmarks" / "pypto_examples.py")
    runner = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pypto_examples_runner_t", runner)
    spec.loader.exec_module(runner)
    out = runner.adapt(src)
    for old, new in (('import_module("torch_npu")', 'import_module("pypto_async.torch.torch_npu")'),  # an import
                     ('device=f"npu:{device}"', 'device="cpu"')):  # the platform
        assert out.count(old) == 1, f"the example changed: {old!r} is not in it once"
        out = out.replace(old, new)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["torch_ops", "jit"])
def test_pyptos_torch_kernel_capture_example_runs(tmp_path, entry):
    path = _example()
    if path is None:
        pytest.skip(f"no PyPTO checkout with {EXAMPLE} (set PYPTO_CHECKOUT)")
    prog = tmp_path / path.name
    prog.write_text(adapt_example(path.read_text()))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, str(prog), "--device", "0", "--entry", entry], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.splitlines() == [
        "input=2.0, accumulator=6.0, output=10.0",
        "input=5.0, accumulator=21.0, output=25.0",
        "input=1.0, accumulator=24.0, output=28.0",
    ]
