"""PyPTO's user guide, control flow and directives: ``pl.while_`` / ``pl.cond``, ``pl.static_print``,
``pl.static_assert``, ``pl.const``, ``pl.RUNTIME``, ``@pl.inline`` and ``pl.parse_program``.

Programs in the guide's style (language/02-control-flow, 05-directives, 01-functions,
getting started's "compiling from the signature", tools/00-debugging), checked against torch on
random data with the outputs poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoCompileError


def _nan(*shape):
    return torch.full(shape, float("nan"))


# ---- pl.while_ / pl.cond ---------------------------------------------------------------------


@pl.jit
def halve_until(a: pl.Tensor[[16, 32], pl.FP32], n: pl.Tensor[[1], pl.INT32],
                out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        limit = pl.read(n, [0])
        for (i, acc) in pl.while_(init_values=(0, pl.load(a, [0, 0], [16, 32]))):
            pl.cond(i < limit)
            i_out, acc_out = pl.yield_(i + 1, pl.add(pl.mul(acc, 0.5), 1.0))
        pl.store(acc_out, [0, 0], out)
    return out


@pytest.mark.parametrize("count", [0, 1, 5])
def test_while_runs_while_its_condition_holds(launcher, count):
    a, out = torch.randn(16, 32), _nan(16, 32)
    halve_until(a, torch.tensor([count], dtype=torch.int32), out)
    expected = a.clone()
    for _ in range(count):
        expected = expected * 0.5 + 1.0
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pl.jit
def rows_by_while(a: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for (row,) in pl.while_(init_values=(0,)):
            pl.cond(row < 64)
            pl.store(pl.exp(pl.load(a, [row, 0], [16, 32])), [row, 0], out)
            nxt = pl.yield_(row + 16)  # noqa: F841 (PyPTO's form: the loop's next value)
    return out


def test_while_carries_a_scalar_used_as_an_offset(launcher):
    a, out = torch.randn(64, 32), _nan(64, 32)
    rows_by_while(a, out)
    torch.testing.assert_close(out, torch.exp(a), rtol=1e-6, atol=1e-6)


def _while(body: str):
    ns: dict = {"pl": pl}
    exec(compile(f"""
@pl.jit
def k(a: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
{body}
    return out
""", "<while>", "exec"), ns)
    return ns["k"]


@pytest.mark.parametrize("body, message", [
    ("        for (x,) in pl.while_():\n            pl.cond(x < 3)\n            y = pl.yield_(x + 1)",
     r"while_\(\) requires init_values to be specified"),
    ("        for (x,) in pl.while_(init_values=(0,)):\n            y = pl.yield_(x + 1)",
     "must start with pl.cond"),
    ("        for (x,) in pl.while_(init_values=(0,)):\n            t = pl.load(a, [0, 0], [16, 32])\n"
     "            pl.cond(x < 3)\n            y = pl.yield_(x + 1)", "must be the first statement"),
    ("        for (x,) in pl.while_(init_values=(0,)):\n            pl.cond(x < 3)\n            y = 1",
     "must end with pl.yield_"),
    ("        pl.cond(1)", "belongs directly in the body of a pl.while_"),
    ("        for (x,) in pl.while_(init_values=(0,)):\n            pl.cond(x < 3)\n"
     "            y = pl.yield_(pl.load(a, [0, 0], [16, 32]))", "must be an int or an index"),
])
def test_bad_while_loops_are_errors(body, message):
    with pytest.raises(PtoCompileError, match=message):
        _while(body).trace(torch.zeros(16, 32), torch.zeros(16, 32))


def test_while_outside_a_region_is_an_error():
    @pl.jit
    def k(a: pl.Tensor[[16, 32], pl.FP32]):
        for (x,) in pl.while_(init_values=(0,)):
            pl.cond(x < 3)
            y = pl.yield_(x + 1)  # noqa: F841 (PyPTO's form)

    with pytest.raises(PtoCompileError, match="pl.while_ runs inside a pl.at region"):
        k.compile()


# ---- static_print, static_assert, const ------------------------------------------------------


@pl.jit.incore
def probe(x: pl.Tensor[[64, 128], pl.FP32], out: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
    pl.static_print("x =", x)
    pl.static_assert(x.shape[1] == 128, "expected 128 columns")
    out[:] = pl.mul(x, pl.const(2, pl.FP32))
    return out


@pl.jit
def probe_entry(x: pl.Tensor[[64, 128], pl.FP32], out: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
    probe(x, out)
    return out


def test_static_directives_run_at_trace_time_and_leave_no_ir(launcher, capsys):
    x, out = torch.randn(64, 128), _nan(64, 128)
    probe_entry(x, out)
    assert "x = <window x[0:+64, 0:+128]: FP32>" in capsys.readouterr().out  # what the tracer sees
    torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)
    probe_entry(x, out)  # the cached signature is not traced again
    assert capsys.readouterr().out == ""


def test_static_assert_fails_at_its_line():
    @pl.jit
    def k(x: pl.Tensor[[64, 64], pl.FP32]):
        pl.static_assert(x.shape[1] == 128, "expected 128 columns")

    with pytest.raises(PtoCompileError, match="static_assert failed: expected 128 columns") as excinfo:
        k.compile()
    assert excinfo.value.line == k.fn.__code__.co_firstlineno + 2


def test_static_assert_refuses_a_runtime_condition_and_a_non_string_message():
    @pl.jit
    def k(x: pl.Tensor[[64, 64], pl.FP32]):
        for i in pl.range(4):
            pl.static_assert(i < 4, "a loop index")

    with pytest.raises(PtoCompileError, match="known at compile time"):
        k.compile()

    @pl.jit
    def m(x: pl.Tensor[[64, 64], pl.FP32]):
        pl.static_assert(True, 3)

    with pytest.raises(PtoCompileError, match="must be a string literal"):
        m.compile()


def test_const_pins_a_dtype():
    assert pl.const(1, pl.INT32).dtype == np.int32 and pl.const(1, pl.INT32) == 1
    assert pl.const(0.5, pl.FP16).dtype == np.float16
    with pytest.raises(PtoCompileError, match="not an integer"):
        pl.const(1.5, pl.INT32)


# ---- pl.RUNTIME ------------------------------------------------------------------------------


@pl.jit
def scaled(x: pl.Tensor[[32, 32], pl.FP32], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
           k: pl.Scalar[pl.FP32] = pl.RUNTIME):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.mul(x, k)
    return out


def test_runtime_scalars_take_their_value_at_dispatch(launcher):
    compiled = scaled.compile()
    assert compiled is scaled.compile(k=pl.RUNTIME)  # the signature default and the keyword agree
    for k in (1.5, -3.0):
        x, out = torch.randn(32, 32), _nan(32, 32)
        launcher.run(compiled, x, out, k)
        torch.testing.assert_close(out, x * k, rtol=0, atol=0)


def test_runtime_needs_a_dtype():
    @pl.jit
    def k(x: pl.Tensor[[32, 32], pl.FP32], n=pl.RUNTIME):
        pass

    with pytest.raises(PtoCompileError, match="parameter 'n' is pl.RUNTIME: annotate its dtype"):
        k.compile()


# ---- @pl.inline, pl.parse_program --------------------------------------------------------------


@pl.inline
def normalize(x: pl.Tensor[[64, 64], pl.FP32]) -> pl.Tensor[[64, 64], pl.FP32]:
    return pl.mul(x, 2.0)


@pl.jit
def uses_inline(x: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        out[:] = pl.add(normalize(x), 1.0)
    return out


def test_pl_inline_splices_at_the_call(launcher):
    assert isinstance(normalize, pl.InlineFunction)
    x, out = torch.randn(64, 64), _nan(64, 64)
    uses_inline(x, out)
    torch.testing.assert_close(out, x * 2.0 + 1.0, rtol=0, atol=0)
    assert len(uses_inline.lower(x, out).functions) == 2  # one InCore function: nothing left of the helper


def test_parse_program_reads_back_the_printed_program(launcher, tmp_path):
    x, out = torch.randn(64, 64), _nan(64, 64)
    src = uses_inline.lower(x, out).as_python()
    prog = pl.parse_program(src)
    launcher.run(ir.compile(prog), x, out)
    torch.testing.assert_close(out, x * 2.0 + 1.0, rtol=0, atol=0)
    path = tmp_path / "prog.py"
    path.write_text(src.replace("import pypto_async.language as pl", "import pypto.language as pl"))
    assert pl.loads_program(path).name == "uses_inline"
    with pytest.raises(ValueError, match="no @pl.program"):
        pl.parse_program("x = 1")


@pl.jit.inline
def first_or_rest(x: pl.Tensor, out: pl.Out[pl.Tensor]):
    for i in pl.range(4):
        with pl.at(level=pl.Level.CORE_GROUP):
            t = pl.load(x, [i * 16, 0], [16, 32])
            if i == 0:  # a loop index: both branches are traced, each runs or not on the core
                pl.store(pl.mul(t, 10.0), [i * 16, 0], out)
            else:
                pl.store(t, [i * 16, 0], out)
    return out


@pl.jit
def calls_first_or_rest(x: pl.Tensor[[64, 32], pl.FP32], out: pl.Out[pl.Tensor[[64, 32], pl.FP32]]):
    return first_or_rest(x, out)


def test_an_inline_helpers_if_on_a_loop_index_is_a_runtime_if(launcher):
    x, out = torch.randn(64, 32), _nan(64, 32)
    calls_first_or_rest(x, out)
    torch.testing.assert_close(out[:16], x[:16] * 10.0, rtol=0, atol=0)
    torch.testing.assert_close(out[16:], x[16:], rtol=0, atol=0)
