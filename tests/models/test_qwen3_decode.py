"""A Qwen3 decode layer, stage by stage and whole, against torch on random weights.

The program is :mod:`decode_program`: PyPTO's qwen3_jit structure written
here (it needs no PyPTO checkout), completed with the grouped-query attention
PyPTO's file leaves out.  Outputs are poisoned (NaN) before each launch.  The
whole layer compiles to one program of a few thousand lines of C, so the
layer tests are in the slow tier; the one at Qwen3-32B's shapes takes a
minute or two on two CPUs (docs/models.md has the figures).
"""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from . import decode_program as dp
import pypto_async.language as pl
from pypto_async.runtime import ChipWorker, RunConfig
from .conftest import long_profile

pytestmark = pytest.mark.slow  # each compiles a program of its own: seconds on two CPUs

SMALL = dp.Shape()
F32 = torch.float32


def _close(got, want, tol=2e-2):
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def st():
    return dp.stages(SMALL)


@pytest.fixture(scope="module")
def a():
    return dp.inputs(SMALL, seed=3)


def test_rmsnorm_matches_torch(st, a):
    @pl.jit
    def k(x: pl.Tensor, gamma: pl.Tensor, out: pl.Out[pl.Tensor]):
        out = st.rmsnorm(x, gamma, out, "rmsnorm")
        return out

    out = torch.full((SMALL.batch, SMALL.hidden), float("nan")).to(torch.bfloat16)
    k(a["hidden"], a["rms_in"], out)
    _close(out, dp.rmsnorm_ref(a["hidden"], a["rms_in"], SMALL.eps))


def test_projection_accumulates_over_k_like_torch(st, a):
    """PyPTO's projection form: if k0 == 0: matmul else matmul_acc, on a create_tensor accumulator."""

    @pl.jit
    def k(x: pl.Tensor, w: pl.Tensor, y: pl.Out[pl.Tensor]):
        y = st.linear(x, w, y, "q_proj")
        return y

    x = dp.rmsnorm_ref(a["hidden"], a["rms_in"], SMALL.eps)
    y = torch.full((SMALL.batch, SMALL.hidden), float("nan"))
    k(x, a["wq"], y)
    _close(y, x.float() @ a["wq"].float(), 1e-3)


def test_rope_writes_the_cache_row_each_sequence_length_names(st, a):
    c = SMALL

    @pl.jit
    def k(q: pl.Tensor, kp: pl.Tensor, vp: pl.Tensor, seq_lens: pl.Tensor, cos: pl.Tensor, sin: pl.Tensor,
          k_cache: pl.InOut[pl.Tensor], v_cache: pl.InOut[pl.Tensor], q_rot: pl.Out[pl.Tensor]):
        st.rope_and_cache(q, kp, vp, seq_lens, cos, sin, k_cache, v_cache, q_rot)
        return q_rot

    g = torch.Generator().manual_seed(5)
    q = torch.randn(c.batch, c.hidden, generator=g)
    kp = torch.randn(c.batch, c.kv_hidden, generator=g)
    vp = torch.randn(c.batch, c.kv_hidden, generator=g)
    seq_lens = torch.tensor([1, c.max_seq, 77, 130], dtype=torch.int32)
    k_cache, v_cache = a["k_cache"].clone(), a["v_cache"].clone()
    q_rot = torch.full((c.batch * c.num_heads, c.head_dim), float("nan")).to(torch.bfloat16)
    k(q, kp, vp, seq_lens, a["cos"], a["sin"], k_cache, v_cache, q_rot)

    pos = seq_lens.long() - 1
    cos, sin = a["cos"][pos][:, None], a["sin"][pos][:, None]
    _close(q_rot, dp.rope_ref(q.view(c.batch, c.num_heads, -1), cos, sin).reshape(q_rot.shape))
    want_k, want_v = a["k_cache"].clone(), a["v_cache"].clone()
    rows = ((torch.arange(c.batch)[:, None] * c.num_kv_heads + torch.arange(c.num_kv_heads)) * c.max_seq
            + pos[:, None]).flatten()
    want_k[rows] = dp.rope_ref(kp.view(c.batch, c.num_kv_heads, -1), cos, sin).reshape(-1, c.head_dim).bfloat16()
    want_v[rows] = vp.reshape(-1, c.head_dim).bfloat16()
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)  # every other row untouched


def test_decode_attention_matches_sdpa(st, a):
    """One task per (request, KV head); each reads its context length and ends on a partial tile."""
    c = SMALL

    @pl.jit
    def k(q_rot: pl.Tensor, k_cache: pl.Tensor, v_cache: pl.Tensor, seq_lens: pl.Tensor,
          out: pl.Out[pl.Tensor]):
        out = st.attention(q_rot, k_cache, v_cache, seq_lens, out)
        return out

    g = torch.Generator().manual_seed(6)
    q_rot = torch.randn(c.batch * c.num_heads, c.head_dim, generator=g).bfloat16()
    seq_lens = torch.tensor([1, c.max_seq, c.seq_tile + 1, 100], dtype=torch.int32)
    out = torch.full((c.batch, c.hidden), float("nan")).to(torch.bfloat16)
    compiled = k.compile(q_rot, a["k_cache"], a["v_cache"], seq_lens, out)
    for lens in (seq_lens, torch.tensor([c.max_seq, 3, 64, 65], dtype=torch.int32)):  # one kernel, any lengths
        out.fill_(float("nan"))
        compiled(q_rot, a["k_cache"], a["v_cache"], lens, out)
        kc = a["k_cache"].view(c.batch, c.num_kv_heads, c.max_seq, -1).float()
        vc = a["v_cache"].view(c.batch, c.num_kv_heads, c.max_seq, -1).float()
        for b in range(c.batch):
            n = int(lens[b])
            qb = q_rot.view(c.batch, c.num_kv_heads, c.num_heads // c.num_kv_heads, -1)[b].float()
            want = F.scaled_dot_product_attention(qb, kc[b, :, :n], vc[b, :, :n])
            _close(out[b].view(c.num_kv_heads, -1, c.head_dim), want)


def test_mlp_tiles_cross_from_the_projection_tasks_into_silu(st, a):
    c = SMALL

    @pl.jit
    def k(x: pl.Tensor, w_gate: pl.Tensor, w_up: pl.Tensor, act: pl.Out[pl.Tensor]):
        act = st.mlp(x, w_gate, w_up, act)
        return act

    x = dp.rmsnorm_ref(a["hidden"], a["rms_in"], c.eps)
    act = torch.full((c.batch, c.intermediate), float("nan")).to(torch.bfloat16)
    k(x, a["w_gate"], a["w_up"], act)
    want = F.silu(x.float() @ a["w_gate"].float()) * (x.float() @ a["w_up"].float())
    _close(act, want)
    program = k.lower(x, a["w_gate"], a["w_up"], act)
    silu = [f for f in program.functions.values() if "silu" in str(getattr(f, "name", ""))]
    assert program is not None and len(silu) <= 1


def test_decode_layer_matches_torch():
    kernel, args = dp.build(SMALL), dp.inputs(SMALL, seed=1)
    want_out, want_k, want_v = dp.reference(SMALL, args)
    kernel(*args.values())
    _close(args["out"], want_out)
    _close(args["k_cache"], want_k)  # the new rows within BF16 rounding of the FP32 projections, the rest equal
    _close(args["v_cache"], want_v)


@long_profile
@pytest.mark.timeout(1800)
def test_decode_layer_at_qwen3_32b_shapes_matches_torch():
    """Qwen3-32B's decode layer (hidden 8192, 64 heads over 8 KV heads, intermediate 25600, batch 16,
    4096-token caches): 1.5 GiB of BF16 weights and 256 MiB of caches, on a device given 8 GiB."""
    c = dp.QWEN3_32B
    kernel, args = dp.build(c), dp.inputs(c, seed=2)
    want_out, want_k, want_v = dp.reference(c, args)
    with ChipWorker(RunConfig(device_memory=8 << 30)):
        kernel(*args.values())
    _close(args["out"], want_out)
    _close(args["k_cache"], want_k)  # the new rows within BF16 rounding of the FP32 projections, the rest equal
    _close(args["v_cache"], want_v)
