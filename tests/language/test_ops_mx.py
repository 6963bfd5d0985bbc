"""MX block-scale matmul (pl.matmul_mx / _acc / _bias), the FP8E8M0 scale dtype, matmul's a_trans/b_trans."""

import numpy as np
import pytest
import torch

import pypto_async.language as pl
from pypto_async.errors import PtoCompileError, PtoError
from helpers.ir_fixtures import poison

M, K, N = 32, 128, 64
G = K // 32


def _data(shape, gen) -> torch.Tensor:
    """Random finite FP8E4M3FN data, never all zero."""
    return (torch.randn(shape, generator=gen) * 4).to(torch.float8_e4m3fn)


def _codes(shape, gen) -> torch.Tensor:
    """Random E8M0 scale codes around 2**0 (several distinct exponents)."""
    return torch.randint(121, 134, shape, generator=gen).to(torch.uint8)


def _scale(codes: torch.Tensor) -> torch.Tensor:
    return torch.pow(2.0, codes.to(torch.float32) - 127)


def _mx_ref(a, sa, b, sb) -> torch.Tensor:
    """Dequantize in float32 (each 32-block of K times its scale), multiply in torch."""
    a32 = a.to(torch.float32) * _scale(sa).repeat_interleave(32, 1)
    b32 = b.to(torch.float32) * _scale(sb).repeat_interleave(32, 0)
    return a32 @ b32


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    return _data((M, K), g), _codes((M, G), g), _data((K, N), g), _codes((G, N), g), torch.randn(1, N, generator=g)


@pl.jit
def mx_family(a: pl.Tensor[[M, K], pl.FP8E4M3FN], sa: pl.Tensor[[M, G], pl.FP8E8M0],
              b: pl.Tensor[[K, N], pl.FP8E4M3FN], sb: pl.Tensor[[G, N], pl.FP8E8M0], bias: pl.Tensor[[1, N], pl.FP32],
              out: pl.Out[pl.Tensor[[M, N], pl.FP32]], out_acc: pl.Out[pl.Tensor[[M, N], pl.FP32]],
              out_bias: pl.Out[pl.Tensor[[M, N], pl.FP32]], out_vec: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    lhs = pl.move(pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
    lhs_s = pl.move(pl.load(sa, [0, 0], [M, G], target_memory=pl.Mem.Mat), target_memory=pl.Mem.LeftScale)
    rhs = pl.move(pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
    rhs_s = pl.move(pl.load(sb, [0, 0], [G, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.RightScale)
    base = pl.matmul_mx(lhs, lhs_s, rhs, rhs_s)
    pl.store(base, [0, 0], out)
    acc = pl.tile.matmul_mx_acc(base, lhs, lhs_s, rhs, rhs_s)
    pl.store(acc, [0, 0], out_acc)
    bt = pl.move(pl.load(bias, [0, 0], [1, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Bias)
    pl.store(pl.matmul_mx_bias(lhs, lhs_s, rhs, rhs_s, bt), [0, 0], out_bias)
    # Vec operands (an FP8 tile computed on, then cast back) reach the cube implicitly.
    av = pl.cast(pl.cast(pl.load(a, [0, 0], [M, K]), pl.FP32) * 0.5, pl.FP8E4M3FN, mode="rint")  # ties to even, as torch
    pl.store(pl.tile.matmul_mx(av, pl.load(sa, [0, 0], [M, G]), pl.load(b, [0, 0], [K, N]),
                               pl.load(sb, [0, 0], [G, N])), [0, 0], out_vec)


def _outs():
    return [torch.full((M, N), float("nan")) for _ in range(4)]


def _check(outs, a, sa, b, sb, bias):
    ref = _mx_ref(a, sa, b, sb)
    torch.testing.assert_close(outs[0], ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(outs[1], 2 * ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(outs[2], ref + bias, rtol=1e-4, atol=1e-3)
    half = (a.to(torch.float32) * 0.5).to(torch.float8_e4m3fn)
    torch.testing.assert_close(outs[3], _mx_ref(half, sa, b, sb), rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_matmul_mx_acc_bias_at_both_layers_match_torch():
    a, sa, b, sb, bias = _inputs(1)
    outs = _outs()
    mx_family(a, sa.view(torch.float8_e8m0fnu), b, sb.view(torch.float8_e8m0fnu), bias, *outs)
    _check(outs, a, sa, b, sb, bias)


@pytest.mark.slow
def test_matmul_mx_takes_uint8_bits_on_the_host():
    a, sa, b, sb, bias = _inputs(2)
    outs = [o.numpy() for o in _outs()]
    mx_family(a.view(torch.uint8).numpy(), sa.numpy(), b.view(torch.uint8).numpy(), sb.numpy(), bias.numpy(), *outs)
    _check([torch.from_numpy(o) for o in outs], a, sa, b, sb, bias)


def test_the_torch_reference_of_a_matmul_mx_kernel_agrees():
    from pypto_async.debug import torch_codegen

    a, sa, b, sb, bias = _inputs(3)
    args = [a, sa.view(torch.float8_e8m0fnu), b, sb.view(torch.float8_e8m0fnu), bias, *_outs()]
    program = mx_family.lower(*args)
    ns: dict = {}
    exec(compile(torch_codegen(program), "<torch_codegen mx>", "exec"), ns)  # noqa: S102
    ns[program.name](*args)
    _check(args[5:], a, sa, b, sb, bias)


def test_the_device_model_counts_matmul_mx_on_the_cube():
    from helpers.work import run_kernel
    from pypto_async.ir._work import CUBE_I8

    a, sa, b, sb, bias = _inputs(4)
    outs = [o.numpy() for o in _outs()]
    args = [a.view(torch.uint8).numpy(), sa.numpy(), b.view(torch.uint8).numpy(), sb.numpy(), bias.numpy(), *outs]
    w = run_kernel(mx_family.compile(*args), *args)
    assert w["cube_macs"][CUBE_I8] == 4 * M * N * K  # matmul_mx, _acc, _bias and the Vec-operand one
    _check([torch.from_numpy(o) for o in outs], a, sa, b, sb, bias)


@pl.jit
def e8m0_kernel(s: pl.Tensor[[4, 64], pl.FP8E8M0], x: pl.Tensor[[4, 64], pl.FP32],
                as_f32: pl.Out[pl.Tensor[[4, 64], pl.FP32]], copy: pl.Out[pl.Tensor[[4, 64], pl.FP8E8M0]],
                rounded: pl.Out[pl.Tensor[[4, 64], pl.FP8E8M0]]):
    t = pl.load(s, [0, 0], [4, 64])
    pl.store(pl.cast(t, pl.FP32), [0, 0], as_f32)
    pl.store(t, [0, 0], copy)
    pl.store(pl.cast(pl.load(x, [0, 0], [4, 64]), pl.FP8E8M0), [0, 0], rounded)


def test_fp8e8m0_loads_as_powers_of_two_and_casts_as_torch_rounds():
    codes = torch.arange(256, dtype=torch.uint8).reshape(4, 64)  # every code, 255 (NaN) included
    s = codes.view(torch.float8_e8m0fnu)
    g = torch.Generator().manual_seed(5)
    x = s.float() * (0.5 + 1.5 * torch.rand(4, 64, generator=g))
    x[0, :8] = torch.tensor([0.0, -0.0, 1e-40, 1.5 * 2.0 ** -127, -3.0, float("inf"), float("nan"), 2.0 ** -149])
    as_f32 = torch.full((4, 64), -1.0)
    copy = torch.zeros(4, 64, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    rounded = torch.zeros(4, 64, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    e8m0_kernel(s, x, as_f32, copy, rounded)
    torch.testing.assert_close(as_f32, s.float(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(copy.view(torch.uint8), codes)
    assert torch.equal(rounded.view(torch.uint8), x.to(torch.float8_e8m0fnu).view(torch.uint8))


def test_fp8e8m0_is_a_dtype_with_torch_and_uint8_host_forms():
    assert pl.FP8E8M0.get_byte() == 1 and pl.FP8E8M0 in pl.ALL_DTYPES
    from pypto_async._dtypes import as_dtype, holds

    assert as_dtype(torch.float8_e8m0fnu) is pl.FP8E8M0 and as_dtype("FP8E8M0") is pl.FP8E8M0
    assert holds(pl.UINT8, pl.FP8E8M0)
    assert pl.Mem.LeftScale.value == "LeftScale" and pl.Mem.RightScale.value == "RightScale"


# ---- bad input: a PtoCompileError naming the op and the operand, at trace time -------------------------------


def _bad(lhs_dt=pl.FP8E4M3FN, rhs_dt=pl.FP8E4M3FN, sa_dt=pl.FP8E8M0, sb_dt=pl.FP8E8M0, m=M, k=K, n=N,
         sa_shape=None, sb_shape=None, rhs_scale_space=pl.Mem.RightScale, op="mx", bias_dt=pl.FP32):
    sa_shape = sa_shape or [m, k // 32]
    sb_shape = sb_shape or [k // 32, n]

    @pl.jit
    def k_(a: pl.Tensor[[m, k], lhs_dt], sa: pl.Tensor[sa_shape, sa_dt], b: pl.Tensor[[k, n], rhs_dt],
           sb: pl.Tensor[sb_shape, sb_dt], bias: pl.Tensor[[1, n], bias_dt], o: pl.Out[pl.Tensor[[m, n], pl.FP32]]):
        lhs = pl.move(pl.load(a, [0, 0], [m, k], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        ls = pl.move(pl.load(sa, [0, 0], sa_shape, target_memory=pl.Mem.Mat), target_memory=pl.Mem.LeftScale)
        rhs = pl.move(pl.load(b, [0, 0], [k, n], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        rs = pl.move(pl.load(sb, [0, 0], sb_shape, target_memory=pl.Mem.Mat), target_memory=rhs_scale_space)
        if op == "mx":
            pl.store(pl.matmul_mx(lhs, ls, rhs, rs), [0, 0], o)
        elif op == "acc":
            pl.store(pl.matmul_mx_acc(pl.full([m, n + 32], 0.0, pl.FP32), lhs, ls, rhs, rs), [0, 0], o)
        else:
            pl.store(pl.matmul_mx_bias(lhs, ls, rhs, rs, pl.load(bias, [0, 0], [1, n])), [0, 0], o)

    args = [np.zeros((m, k), lhs_dt.np_storage), np.zeros(sa_shape, sa_dt.np_storage),
            np.zeros((k, n), rhs_dt.np_storage), np.zeros(sb_shape, sb_dt.np_storage),
            np.zeros((1, n), bias_dt.np_storage), poison((m, n))]
    k_.lower(*args)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lhs_dt": pl.FP16}, "pl.matmul_mx: lhs must be FP8E4M3FN, got FP16"),
    ({"rhs_dt": pl.FP8E5M2}, "pl.matmul_mx: rhs must be FP8E4M3FN, got FP8E5M2"),
    ({"sa_dt": pl.UINT8}, "pl.matmul_mx: lhs_scale must be FP8E8M0, got UINT8"),
    ({"sb_dt": pl.FP8E4M3FN}, "pl.matmul_mx: rhs_scale must be FP8E8M0, got FP8E4M3FN"),
    ({"sa_shape": [M, 8]}, r"lhs_scale must be \[32, 4\] \(one scale per 32 elements of K\), got \[32, 8\]"),
    ({"sb_shape": [G, 32]}, r"rhs_scale must be \[4, 64\]"),
    ({"k": 96}, "K=96 must be a multiple of 64"),
    ({"m": 24}, "M=24 must be a multiple of 16"),
    ({"n": 48}, "N=48 must be a multiple of 32"),
    ({"rhs_scale_space": pl.Mem.LeftScale}, "rhs_scale %.* is in LeftScale, but the cube reads it from RightScale"),
    ({"op": "acc"}, r"pl.matmul_mx_acc|matmul accumulator"),
    ({"op": "bias", "bias_dt": pl.FP16}, "bias"),
])
def test_bad_matmul_mx_operands_are_compile_errors(kwargs, message):
    with pytest.raises(PtoCompileError, match=message):
        _bad(**kwargs)


def test_the_error_class_is_a_pto_error():
    assert issubclass(PtoCompileError, PtoError)


# ---- pl.matmul's a_trans / b_trans on tensor operands --------------------------------------------------------


@pl.jit
def trans_kernel(q: pl.Tensor[[2, 32, 64], pl.FP32], kt: pl.Tensor[[2, 16, 64], pl.FP32],
                 a: pl.Tensor[[64, 32], pl.FP32], b: pl.Tensor[[16, 64], pl.FP32],
                 o3: pl.Out[pl.Tensor[[2, 32, 16], pl.FP32]], o3b: pl.Out[pl.Tensor[[2, 32, 16], pl.FP32]],
                 o2: pl.Out[pl.Tensor[[32, 16], pl.FP32]]):
    pl.store(pl.matmul(q, kt, b_trans=True), [0, 0, 0], o3)
    pl.store(pl.matmul(a, kt, a_trans=True, b_trans=True), [0, 0, 0], o3b)
    pl.store(pl.tensor.matmul(a, b, a_trans=True, b_trans=True), [0, 0], o2)


@pytest.mark.slow
def test_matmul_a_trans_b_trans_on_tensors_of_rank_2_and_3(rng):
    q = rng.standard_normal((2, 32, 64), dtype=np.float32)
    kt = rng.standard_normal((2, 16, 64), dtype=np.float32)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((16, 64), dtype=np.float32)
    o3, o3b, o2 = poison((2, 32, 16)), poison((2, 32, 16)), poison((32, 16))
    trans_kernel(q, kt, a, b, o3, o3b, o2)
    np.testing.assert_allclose(o3, q @ kt.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(o3b, a.T @ kt.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(o2, a.T @ b.T, rtol=1e-4, atol=1e-4)


def test_a_transpose_flag_on_a_1d_operand_or_a_tile_is_refused():
    @pl.jit
    def k1(m: pl.Tensor[[64, 32], pl.FP32], v: pl.Tensor[[64], pl.FP32], o: pl.Out[pl.Tensor[[32], pl.FP32]]):
        pl.store(pl.matmul(m, v, b_trans=True), [0], o)

    with pytest.raises(PtoCompileError, match=r"pl.matmul: b_trans=True swaps its operand's two trailing axes, but "
                                              r"it is 1-D \[64\]"):
        k1.lower(np.zeros((64, 32), np.float32), np.zeros(64, np.float32), poison((32,)))

    @pl.jit
    def k2(m: pl.Tensor[[32, 32], pl.FP32], o: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        t = pl.load(m, [0, 0], [32, 32])
        pl.store(pl.matmul(t, t, a_trans=True), [0, 0], o)

    with pytest.raises(PtoCompileError, match="a_trans=True takes tensor operands"):
        k2.lower(np.zeros((32, 32), np.float32), poison((32, 32)))


def test_the_torch_reference_rounds_to_fp8e8m0_as_the_kernel():
    from pypto_async.debug import torch_codegen

    codes = torch.arange(256, dtype=torch.uint8).reshape(4, 64)
    s = codes.view(torch.float8_e8m0fnu)
    x = s.float() * (0.5 + 1.5 * torch.rand(4, 64, generator=torch.Generator().manual_seed(6)))
    args = [s, x, torch.full((4, 64), -1.0)] + [torch.zeros(4, 64, dtype=torch.uint8).view(torch.float8_e8m0fnu)
                                                for _ in range(2)]
    program = e8m0_kernel.lower(*args)
    ns: dict = {}
    exec(compile(torch_codegen(program), "<torch_codegen e8m0>", "exec"), ns)  # noqa: S102
    ns[program.name](*args)
    assert torch.equal(args[4].view(torch.uint8), x.to(torch.float8_e8m0fnu).view(torch.uint8))
    assert torch.equal(args[3].view(torch.uint8), codes)


# ---- PyPTO's MX scale layouts: the host holds the packed bytes, a whole load gives the logical tile -----------


def _pack_zz(codes: torch.Tensor) -> torch.Tensor:
    """[M, G] -> MX_A_ZZ bytes: 16 x 2 blocks, row-major over blocks and within each."""
    m, g = codes.shape
    return codes.reshape(m // 16, 16, g // 2, 2).permute(0, 2, 1, 3).reshape(m, g).contiguous()


def _pack_nn(codes: torch.Tensor) -> torch.Tensor:
    """[G, N] -> MX_B_NN bytes: by column block, then scale block; each 2 x 16 block column by column."""
    g, n = codes.shape
    return codes.reshape(g // 2, 2, n // 16, 16).permute(2, 0, 3, 1).reshape(g, n).contiguous()


@pl.jit
def mx_layouts(sa: pl.Tensor[[32, 4], pl.FP8E8M0, pl.MX_A_ZZ], sb: pl.Tensor[[4, 32], pl.FP8E8M0, pl.MX_B_NN],
               sa_logical: pl.Out[pl.Tensor[[32, 4], pl.FP8E8M0]], sb_logical: pl.Out[pl.Tensor[[4, 32], pl.FP8E8M0]]):
    pl.store(pl.load(sa, [0, 0], [32, 4], target_memory=pl.Mem.Mat), [0, 0], sa_logical)
    pl.store(pl.load(sb, [0, 0], [4, 32]), [0, 0], sb_logical)


@pytest.mark.slow
def test_mx_layout_scales_are_unpacked_by_a_whole_load():
    g = torch.Generator().manual_seed(7)
    sa, sb = _codes((32, 4), g), _codes((4, 32), g)  # 2 x 2 blocks each: the packed order is not the logical one
    assert not torch.equal(_pack_zz(sa), sa) and not torch.equal(_pack_nn(sb), sb)
    got_a, got_b = torch.zeros(32, 4, dtype=torch.uint8), torch.zeros(4, 32, dtype=torch.uint8)
    mx_layouts(_pack_zz(sa).view(torch.float8_e8m0fnu), _pack_nn(sb).view(torch.float8_e8m0fnu),
               got_a.view(torch.float8_e8m0fnu), got_b.view(torch.float8_e8m0fnu))
    assert torch.equal(got_a, sa) and torch.equal(got_b, sb)


def test_a_window_of_an_mx_layout_tensor_is_refused():
    from pypto_async.errors import PtoNotSupported

    @pl.jit
    def k(sa: pl.Tensor[[M, G], pl.FP8E8M0, pl.MX_A_ZZ], o: pl.Out[pl.Tensor[[16, G], pl.FP8E8M0]]):
        pl.store(pl.load(sa, [0, 0], [16, G]), [0, 0], o)

    with pytest.raises(PtoNotSupported, match="pl.load of a pl.MX_A_ZZ tensor loads it whole"):
        k.lower(np.zeros((M, G), np.uint8), np.zeros((16, G), np.uint8))
    with pytest.raises(PtoCompileError, match=r"pl.MX_B_NN: a 2-D tensor of whole 2 x 16 blocks, got shape \[4, 8\]"):
        pl.Tensor[[4, 8], pl.FP8E8M0, pl.MX_B_NN]
