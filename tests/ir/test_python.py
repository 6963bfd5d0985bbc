"""Program.as_python(): a lowered program printed back as a @pl.jit function that traces to it again.

Each kernel below is lowered, printed, executed as source and traced for the
same argument types: both compiled kernels compute the same outputs on random
data (outputs poisoned), and printing is stable (lowering the printed source
may order independent statements as fusion emits them, once; after that the
text is a fixed point).
"""

from __future__ import annotations

import numpy as np
import pytest

from pypto_async import ir
import pypto_async.language as pl

from helpers.ir_fixtures import poison


@pl.jit
def cube(a: pl.Tensor, b: pl.Tensor, bias: pl.Tensor, c: pl.Out[pl.Tensor]):
    with pl.at(level=pl.Level.CORE_GROUP):
        acc = pl.create_tile([16, 24], dtype=pl.FP32, target_memory=pl.Mem.Acc)
        for k in pl.range(0, 64, 32):
            ta = pl.move(pl.load(a, [0, k], [16, 32], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
            tb = pl.move(pl.load(b, [k, 0], [32, 24], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
            pl.matmul_acc(acc, ta, tb)
        pl.store(pl.col_expand_add(acc, pl.load(bias, [0, 0], [1, 24])), [0, 0], c)
    return c


@pl.jit
def vector(x: pl.Tensor, s: pl.Scalar[pl.FP32], n: pl.INDEX, y: pl.Out[pl.Tensor], z: pl.Out[pl.Tensor]):
    t = pl.load(x, [0, 0], [16, 32], valid_shape=[16, n])
    p = pl.fillpad(t, pl.PadValue.min)
    m = pl.row_max(p)
    e = pl.exp(pl.row_expand_sub(p, m)) * s
    pl.store(pl.concat(pl.slice(e, [16, 8], [0, 0]), pl.row_expand(pl.zeros([16, 8]), m)), [0, 0], y)
    pl.store(pl.fillpad(pl.slice(t, [16, 16], [0, 4]), pl.PadValue.zero), [0, 0], y)  # inherits [16, n - 4]
    pl.store(pl.reshape(pl.cast(pl.col_sum(e), pl.INT32, mode="floor"), [32]), [0], z)


@pl.jit
def loops(x: pl.Tensor, src: pl.Tensor, y: pl.Out[pl.Tensor], acc_out: pl.InOut[pl.Tensor]):
    tile_x = pl.load(x, [0, 0], [32, 32])
    tile_src = pl.load(src, [0, 0], [32, 16])
    for i in pl.range(32):
        tile_x = pl.tile.assemble(tile_x, pl.slice(tile_src, [1, 16], [i, 0]), [i, 0])
    pl.store(tile_x, [0, 0], y)
    for i, (mx, sm) in pl.range(4, init_values=(pl.full([8, 16], -1e30, pl.FP32), pl.zeros([8, 16]))):
        r = pl.load(x, [i * 8, 0], [8, 16])
        mx, sm = pl.yield_(pl.maximum(mx, r), sm + r)
    for b in pl.spmd(2):
        pl.assemble(acc_out, mx + sm, [0, 0], atomic=pl.AtomicType.Add)
    return acc_out


def _args(rng):
    f32 = np.float32
    return {
        "cube": (rng.standard_normal((16, 64)).astype(f32), rng.standard_normal((64, 24)).astype(f32),
                 rng.standard_normal((1, 24)).astype(f32), poison((16, 24))),
        "vector": ((rng.standard_normal((16, 32)) * 3).astype(f32), 0.75, 21, poison((16, 16)),
                   poison(32, np.int32)),
        "loops": (rng.standard_normal((32, 32)).astype(f32), rng.standard_normal((32, 16)).astype(f32),
                  poison((32, 32)), rng.standard_normal((8, 16)).astype(f32)),
    }


KERNELS = {"cube": cube, "vector": vector, "loops": loops}


def _retrace(kernel, args):
    program = kernel.lower(*args)
    source = program.as_python(form="jit")
    namespace: dict = {}
    exec(compile(source, f"<as_python {kernel.__name__}>", "exec"), namespace)
    return program, source, namespace[kernel.__name__]


@pytest.mark.slow  # over half a second each on two CPUs (the fast tier's budget)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_as_python_traces_back_to_the_program(launcher, rng, name):
    kernel = KERNELS[name]
    args = _args(rng)[name]
    program, source, again = _retrace(kernel, args)
    assert source.startswith("import pypto_async.language as pl\n") and f"def {name}(" in source
    source2 = again.lower(*args).as_python(form="jit")
    namespace: dict = {}
    exec(source2, namespace)
    assert namespace[name].lower(*args).as_python(form="jit") == source2  # a fixed point
    outs = [i for i, p in enumerate(program.params) if p.direction in ("out", "inout")]
    first = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    second = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    launcher.run(kernel.compile(*first), *first)
    launcher.run(again.compile(*second), *second)
    for i in outs:
        np.testing.assert_array_equal(first[i], second[i])
        assert not np.isnan(np.asarray(first[i], dtype=np.float64)).any()


def test_carried_loops_print_in_pyptos_explicit_form(rng):
    _, source, _ = _retrace(loops, _args(rng)["loops"])
    assert "for i0, (t2,) in pl.range(0, 32, 1, init_values=(t0,)):" in source
    assert "t2 = pl.yield_(t4)" in source
    assert "pl.assemble" not in source and "pl.store(" in source and "atomic=pl.AtomicType.Add" in source


def test_functions_of_a_kernel_are_its_outlined_body_and_its_orchestration(rng):
    program = cube.lower(*_args(rng)["cube"])
    fns = program.functions
    assert list(fns) == ["cube_incore_0", "cube"]
    assert [f.func_type for f in fns.values()] == [ir.FunctionType.InCore, ir.FunctionType.Orchestration]
    assert fns["cube"].params == program.params and fns["cube_incore_0"].body == program.body[0].body
