"""PyPTO's guide and examples: loop-carried tensors (``init_values=`` of a tensor) and ``ir.serialize``.

A carried tensor is carried by reference: yielding what ``pl.store`` returned (PyPTO's
"GM scratch" carry) needs nothing more, and a yielded tile (a tensor-level op's result) is
stored over the tensor, so the next iteration reads it.  Numbers are checked against torch
on random data.  ``ir.serialize`` / ``ir.deserialize`` round-trip every IR node, as PyPTO's
examples/utils/parse_from_text.py uses them.
"""

from __future__ import annotations

import pytest
import torch

import pypto_async.language as pl
from pypto_async import ir
from pypto_async.errors import PtoArgumentError, PtoCompileError


# ---- init_values carrying a tensor ------------------------------------------------------------


@pl.jit
def carry_tile_into(x: pl.Tensor[[32, 64], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i, (running,) in pl.range(4, init_values=(acc,)):
            nxt = pl.add(running, x)
            total = pl.yield_(nxt)
    return total


@pl.jit
def carry_stored(x: pl.Tensor[[32, 64], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        for i, (running,) in pl.range(3, init_values=(acc,)):
            t = pl.load(running, [0, 0], [32, 64])
            u = pl.load(x, [0, 0], [32, 64])
            written = pl.store(pl.mul(pl.add(t, u), 0.5), [0, 0], running)
            final = pl.yield_(written)
    return final


def test_a_carried_tensor_takes_the_yielded_tile_each_iteration(launcher):
    x, acc = torch.randn(32, 64), torch.randn(32, 64)
    expected = acc + 4 * x
    carry_tile_into(x, acc)
    torch.testing.assert_close(acc, expected, rtol=1e-5, atol=1e-5)


def test_a_carried_tensor_yields_what_store_returned(launcher):
    x, acc = torch.randn(32, 64), torch.randn(32, 64)
    expected = acc.clone()
    for _ in range(3):
        expected = (expected + x) * 0.5
    carry_stored(x, acc)
    torch.testing.assert_close(acc, expected, rtol=1e-5, atol=1e-5)


@pl.jit
def carry_with_a_tile(x: pl.Tensor[[32, 64], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 64], pl.FP32]],
                      out: pl.Out[pl.Tensor[[32, 1], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
        m0 = pl.row_max(pl.load(x, [0, 0], [32, 64]))
        for i, (running, m) in pl.range(2, init_values=(acc, m0)):
            nxt = pl.mul(running, 2.0)
            total, m_out = pl.yield_(nxt, pl.add(m, 1.0))
        pl.store(m_out, [0, 0], out)
    return total, out


def test_tensors_and_tiles_carry_side_by_side(launcher):
    x, acc, out = torch.randn(32, 64), torch.randn(32, 64), torch.full((32, 1), float("nan"))
    expected = acc * 4.0
    carry_with_a_tile(x, acc, out)
    torch.testing.assert_close(acc, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, x.amax(dim=1, keepdim=True) + 1.0 + 1.0, rtol=1e-6, atol=1e-6)


def test_parse_carries_a_created_tensor():
    """PyPTO's examples/utils/parse_from_text.py, example 4: a pl.create_tensor carried through pl.range."""
    func = pl.parse('''
@pl.function
def accumulate(x: pl.Tensor[[10], pl.FP32]) -> pl.Tensor[[10], pl.FP32]:
    init_sum: pl.Tensor[[10], pl.FP32] = pl.create_tensor([10], dtype=pl.FP32)
    for i, (running_sum,) in pl.range(5, init_values=(init_sum,)):
        new_sum: pl.Tensor[[10], pl.FP32] = pl.add(running_sum, x)
        result = pl.yield_(new_sum)
    return result
''')
    assert func.name == "accumulate" and len(func.params) == 1
    assert "pl.range" in func.as_python()


def _bad(body: str):
    ns: dict = {"pl": pl}
    exec(compile(f"""
@pl.jit
def k(x: pl.Tensor[[32, 64], pl.FP32], acc: pl.InOut[pl.Tensor[[32, 64], pl.FP32]],
      other: pl.InOut[pl.Tensor[[32, 64], pl.FP32]]):
    with pl.at(level=pl.Level.CORE_GROUP):
{body}
    return acc
""", __file__, "exec"), ns)
    return ns["k"]


@pytest.mark.parametrize("body, message", [
    ("        for i, (r,) in pl.range(2, init_values=(x,)):\n            n = pl.yield_(pl.add(r, 1.0))",
     "the tensor 'x', an input"),
    ("        for i, (r,) in pl.range(2, init_values=(acc,)):\n            n = pl.yield_(other)",
     "carries the tensor 'acc'"),
    ("        for i, (r,) in pl.range(2, init_values=(acc,)):\n"
     "            n = pl.yield_(pl.load(r, [0, 0], [16, 64]))",
     "FP32[16, 64] tile, but init_values[0] is the FP32[32, 64] tensor 'acc'"),
    ("        for i, (r,) in pl.range(2, init_values=(acc[0:16, :],)):\n            n = pl.yield_(r)",
     "is a window of 'acc'"),
])
def test_bad_tensor_carries_are_errors(body, message):
    k = _bad(body)
    with pytest.raises(PtoCompileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        k.trace(torch.randn(32, 64), torch.randn(32, 64), torch.randn(32, 64))


# ---- ir.serialize / ir.deserialize -----------------------------------------------------------


@pl.jit
def staged(a: pl.Tensor[[64, 64], pl.FP32], out: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    mid = pl.create_tensor([64, 64], dtype=pl.FP32)
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="first"):
        t = pl.load(a, [0, 0], [64, 64])
        for i in pl.range(3):
            t = pl.add(t, 1.0)
        pl.store(t, [0, 0], mid)
    with pl.at(level=pl.Level.CORE_GROUP, name_hint="second"):
        pl.store(pl.mul(pl.load(mid, [0, 0], [64, 64]), 2.0), [0, 0], out)
    return out


def test_serialize_round_trips_a_program_and_compiles_the_same(launcher):
    a, out = torch.randn(64, 64), torch.full((64, 64), float("nan"))
    program = staged.lower(a, out)
    data = ir.serialize(program)
    assert isinstance(data, bytes)
    restored = ir.deserialize(data)
    assert restored == program and restored is not program
    assert [s.loc for s in restored.body] == [s.loc for s in program.body]  # locations come back
    compiled = ir.compile(restored)
    assert compiled.ir_hash == ir.compile(program).ir_hash
    launcher.run(compiled, a, out)
    torch.testing.assert_close(out, (((a + 1.0) + 1.0) + 1.0) * 2.0, rtol=0, atol=0)


def test_serialize_round_trips_functions_and_keeps_sharing(tmp_path):
    program = staged.lower(torch.randn(64, 64), torch.zeros(64, 64))
    funcs = list(program.functions.values())
    restored = ir.deserialize(ir.serialize(tuple(funcs)))
    assert [f.name for f in restored] == [f.name for f in funcs] == ["staged_incore_0", "staged_incore_1", "staged"]
    assert [f.func_type for f in restored] == [f.func_type for f in funcs]
    assert restored == tuple(funcs)
    assert restored[0].program is restored[1].program  # one object, written once
    path = tmp_path / "f.bin"
    ir.serialize_to_file(funcs[0], path)
    again = ir.deserialize_from_file(path)
    assert again == funcs[0] and again.as_python() == funcs[0].as_python()


def test_serialize_round_trips_a_parsed_function():
    func = pl.parse('''
@pl.function
def simple_add(x: pl.Tensor[[32], pl.FP32]) -> pl.Tensor[[32], pl.FP32]:
    result: pl.Tensor[[32], pl.FP32] = pl.add(x, 1.0)
    return result
''')
    restored = ir.deserialize(ir.serialize(func))
    assert restored.name == "simple_add" and restored == func
    assert restored.return_types == func.return_types


@pytest.mark.parametrize("data, message", [
    (b"not ir", "not a serialized pypto_async IR node"),
    (ir.serialize(ir.IConst(3))[:-3], "corrupt"),
    (ir.serialize(ir.IConst(3)).replace(b"IConst", b"Popen!"), "names no class of the IR"),
    ("text", "takes bytes"),
])
def test_deserialize_refuses_what_serialize_did_not_write(data, message):
    with pytest.raises(PtoArgumentError, match=message):
        ir.deserialize(data)


def test_serialize_refuses_what_is_not_ir():
    with pytest.raises(PtoArgumentError, match="cannot serialize a object"):
        ir.serialize(object())
    assert ir.deserialize(ir.serialize((1, "a", None, 2.5))) == (1, "a", None, 2.5)
