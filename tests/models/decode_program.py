"""A Qwen3-style decode layer written as PyPTO programs are (``@pl.jit`` entry, ``@pl.jit.inline`` stages).

The same structure as PyPTO's ``examples/models/qwen3_jit`` (RMSNorm, Q/K/V
projections tiled over K with ``if k0 == 0: matmul else matmul_acc``, RoPE and
the KV-cache write at the position each request's ``seq_lens`` gives, an MLP
whose gate/up tiles cross into the SiLU region), written here from scratch and
completed with the grouped-query attention PyPTO's file leaves out: each
(request, KV head) region reads its context length at run time and runs an
online softmax over the cache in ``seq_tile`` steps, the last one partial.

:func:`build` makes the kernel for a :class:`Shape`; :func:`reference` is the
same layer in torch (``scaled_dot_product_attention`` for the attention),
rounding to BF16 where the kernel stores BF16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import pypto_async.language as pl


@dataclass(frozen=True)
class Shape:
    batch: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 512
    max_seq: int = 256
    seq_tile: int = 64
    k_chunk: int = 128
    n_chunk: int = 128
    eps: float = 1e-6

    @property
    def hidden(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def cache_rows(self) -> int:
        return self.batch * self.num_kv_heads * self.max_seq


#: Qwen3-32B's decode layer (PyPTO's qwen3_jit/config.py shapes), with seq_tile 256.
QWEN3_32B = Shape(batch=16, num_heads=64, num_kv_heads=8, head_dim=128, intermediate=25600, max_seq=4096,
                  seq_tile=256, k_chunk=128, n_chunk=256)


def stages(c: Shape) -> SimpleNamespace:
    """The layer's stages for shape ``c``, each a ``@pl.jit.inline`` helper (``rmsnorm``, ``linear``, ...)."""
    B, H, D, NKV = c.batch, c.hidden, c.head_dim, c.num_kv_heads
    HALF, QPK, S, T = D // 2, c.num_heads // c.num_kv_heads, c.max_seq, c.seq_tile
    KC, NC = c.k_chunk, c.n_chunk
    scale = 1.0 / math.sqrt(D)

    @pl.jit.inline
    def rmsnorm(x: pl.Tensor, gamma: pl.Tensor, normed: pl.Tensor, name):
        with pl.at(level=pl.Level.CORE_GROUP, name_hint=name):
            sq = pl.full([1, B], dtype=pl.FP32, value=0.0)
            for kb in pl.range(H // KC):
                xc = pl.cast(x[:, kb * KC:(kb + 1) * KC], target_type=pl.FP32)
                sq = pl.add(sq, pl.reshape(pl.row_sum(pl.mul(xc, xc)), [1, B]))
            inv = pl.reshape(pl.rsqrt(pl.add(pl.mul(sq, 1.0 / H), c.eps)), [B, 1])
            for kb in pl.range(H // KC):
                k0 = kb * KC
                xc = pl.cast(x[:, k0:k0 + KC], target_type=pl.FP32)
                y = pl.col_expand_mul(pl.row_expand_mul(xc, inv), gamma[:, k0:k0 + KC])
                normed = pl.assemble(normed, pl.cast(y, target_type=pl.BF16), [0, k0])
        return normed

    @pl.jit.inline
    def linear(x: pl.Tensor, w: pl.Tensor, y: pl.Tensor, name):
        """y = x @ w (FP32), one task per NC output columns, accumulated over K in KC chunks."""
        for n0 in pl.parallel(0, w.shape[1], NC):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint=name):
                acc = pl.create_tensor([B, NC], dtype=pl.FP32)
                for kb in pl.range(w.shape[0] // KC):
                    k0 = kb * KC
                    if k0 == 0:
                        acc = pl.matmul(x[:, k0:k0 + KC], w[k0:k0 + KC, n0:n0 + NC], out_dtype=pl.FP32)
                    else:
                        acc = pl.matmul_acc(acc, x[:, k0:k0 + KC], w[k0:k0 + KC, n0:n0 + NC])
                y = pl.assemble(y, acc, [0, n0])
        return y

    @pl.jit.inline
    def rope_and_cache(q_proj: pl.Tensor, k_proj: pl.Tensor, v_proj: pl.Tensor, seq_lens: pl.Tensor,
                       cos: pl.Tensor, sin: pl.Tensor, k_cache: pl.Tensor, v_cache: pl.Tensor,
                       q_rot: pl.Tensor):
        for b in pl.parallel(B):
            pos = pl.read(seq_lens, [b]) - 1  # the new token's position, read by the task below
            cos_lo, cos_hi = cos[pos:pos + 1, 0:HALF], cos[pos:pos + 1, HALF:D]
            sin_lo, sin_hi = sin[pos:pos + 1, 0:HALF], sin[pos:pos + 1, HALF:D]
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="rope_kv_cache"):
                for ki in pl.range(NKV):
                    lo = k_proj[b:b + 1, ki * D:ki * D + HALF]
                    hi = k_proj[b:b + 1, ki * D + HALF:(ki + 1) * D]
                    row = (b * NKV + ki) * S + pos
                    k_lo = pl.sub(pl.col_expand_mul(lo, cos_lo), pl.col_expand_mul(hi, sin_lo))
                    k_hi = pl.add(pl.col_expand_mul(hi, cos_hi), pl.col_expand_mul(lo, sin_hi))
                    k_cache = pl.assemble(k_cache, pl.cast(k_lo, target_type=pl.BF16), [row, 0])
                    k_cache = pl.assemble(k_cache, pl.cast(k_hi, target_type=pl.BF16), [row, HALF])
                    v_cache = pl.assemble(v_cache, pl.cast(v_proj[b:b + 1, ki * D:(ki + 1) * D],
                                                           target_type=pl.BF16), [row, 0])
                for h in pl.range(c.num_heads):
                    lo = q_proj[b:b + 1, h * D:h * D + HALF]
                    hi = q_proj[b:b + 1, h * D + HALF:(h + 1) * D]
                    q_lo = pl.sub(pl.col_expand_mul(lo, cos_lo), pl.col_expand_mul(hi, sin_lo))
                    q_hi = pl.add(pl.col_expand_mul(hi, cos_hi), pl.col_expand_mul(lo, sin_hi))
                    q_rot = pl.assemble(q_rot, pl.cast(q_lo, target_type=pl.BF16), [b * c.num_heads + h, 0])
                    q_rot = pl.assemble(q_rot, pl.cast(q_hi, target_type=pl.BF16), [b * c.num_heads + h, HALF])
        return k_cache

    @pl.jit.inline
    def attention(q_rot: pl.Tensor, k_cache: pl.Tensor, v_cache: pl.Tensor, seq_lens: pl.Tensor,
                  attn_out: pl.Tensor):
        """Grouped-query decode attention: one task per (request, KV head), online softmax over the cache."""
        for b in pl.parallel(B):
            for ki in pl.parallel(NKV):
                with pl.at(level=pl.Level.CORE_GROUP, name_hint="decode_attention"):
                    ctx = pl.read(seq_lens, [b])
                    base = (b * NKV + ki) * S
                    q = pl.load(q_rot, [b * c.num_heads + ki * QPK, 0], [QPK, D])
                    m = pl.full([QPK, 1], dtype=pl.FP32, value=-1e30)
                    l = pl.full([QPK, 1], dtype=pl.FP32, value=0.0)  # noqa: E741
                    o = pl.full([QPK, D], dtype=pl.FP32, value=0.0)
                    for t in pl.range((ctx + T - 1) // T):
                        valid = pl.min(T, ctx - t * T)
                        k = pl.load(k_cache, [base + t * T, 0], [T, D], valid_shape=[valid, D])
                        v = pl.load(v_cache, [base + t * T, 0], [T, D], valid_shape=[valid, D])
                        k = pl.fillpad(k, pad_value=pl.PadValue.zero)
                        v = pl.fillpad(v, pad_value=pl.PadValue.zero)
                        s = pl.mul(pl.matmul(q, pl.transpose(k), out_dtype=pl.FP32), scale)
                        s = pl.fillpad(pl.slice(s, [QPK, T], [0, 0], valid_shape=[QPK, valid]),
                                       pad_value=pl.PadValue.min)
                        m_new = pl.maximum(m, pl.row_max(s))
                        p = pl.exp(pl.row_expand_sub(s, m_new))
                        alpha = pl.exp(pl.sub(m, m_new))
                        l = pl.add(pl.mul(alpha, l), pl.row_sum(p))  # noqa: E741
                        pv = pl.matmul(pl.cast(p, target_type=pl.BF16), v, out_dtype=pl.FP32)
                        o = pl.add(pl.row_expand_mul(o, alpha), pv)
                        m = m_new
                    out = pl.cast(pl.row_expand_div(o, l), target_type=pl.BF16)
                    for h in pl.range(QPK):
                        attn_out = pl.assemble(attn_out, pl.slice(out, [1, D], [h, 0]),
                                               [b, (ki * QPK + h) * D])
        return attn_out

    @pl.jit.inline
    def mlp(x: pl.Tensor, w_gate: pl.Tensor, w_up: pl.Tensor, act: pl.Tensor):
        for o0 in pl.parallel(0, c.intermediate, NC):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="gate_proj"):
                gate = pl.create_tensor([B, NC], dtype=pl.FP32)
                for kb in pl.range(H // KC):
                    k0 = kb * KC
                    if k0 == 0:
                        gate = pl.matmul(x[:, k0:k0 + KC], w_gate[k0:k0 + KC, o0:o0 + NC], out_dtype=pl.FP32)
                    else:
                        gate = pl.matmul_acc(gate, x[:, k0:k0 + KC], w_gate[k0:k0 + KC, o0:o0 + NC])
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="up_proj"):
                up = pl.create_tensor([B, NC], dtype=pl.FP32)
                for kb in pl.range(H // KC):
                    k0 = kb * KC
                    if k0 == 0:
                        up = pl.matmul(x[:, k0:k0 + KC], w_up[k0:k0 + KC, o0:o0 + NC], out_dtype=pl.FP32)
                    else:
                        up = pl.matmul_acc(up, x[:, k0:k0 + KC], w_up[k0:k0 + KC, o0:o0 + NC])
            with pl.at(level=pl.Level.CORE_GROUP, name_hint="silu"):  # gate and up come from the tasks above
                sig = pl.recip(pl.add(pl.exp(pl.neg(gate)), 1.0))
                act = pl.assemble(act, pl.cast(pl.mul(pl.mul(gate, sig), up), target_type=pl.BF16), [0, o0])
        return act

    @pl.jit.inline
    def residual(a: pl.Tensor, r: pl.Tensor, out: pl.Tensor, dtype, name):
        for n0 in pl.parallel(0, H, NC):
            with pl.at(level=pl.Level.CORE_GROUP, name_hint=name):
                s = pl.add(a[:, n0:n0 + NC], pl.cast(r[:, n0:n0 + NC], target_type=pl.FP32))
                out = pl.assemble(out, pl.cast(s, target_type=dtype), [0, n0])
        return out

    return SimpleNamespace(rmsnorm=rmsnorm, linear=linear, rope_and_cache=rope_and_cache, attention=attention,
                           mlp=mlp, residual=residual)


def build(c: Shape):
    """The decode layer for shape ``c`` as a ``@pl.jit`` kernel (arguments as :func:`inputs` makes them)."""
    B, H, D = c.batch, c.hidden, c.head_dim
    st = stages(c)
    rmsnorm, linear, rope_and_cache, attention, mlp, residual = (
        st.rmsnorm, st.linear, st.rope_and_cache, st.attention, st.mlp, st.residual)

    @pl.jit
    def decode_layer(hidden: pl.Tensor, rms_in: pl.Tensor, wq: pl.Tensor, wk: pl.Tensor, wv: pl.Tensor,
                     seq_lens: pl.Tensor, cos: pl.Tensor, sin: pl.Tensor, k_cache: pl.InOut[pl.Tensor],
                     v_cache: pl.InOut[pl.Tensor], wo: pl.Tensor, rms_post: pl.Tensor, w_gate: pl.Tensor,
                     w_up: pl.Tensor, w_down: pl.Tensor, out: pl.Out[pl.Tensor]):
        normed = rmsnorm(hidden, rms_in, pl.create_tensor([B, H], dtype=pl.BF16), "input_rmsnorm")
        q_proj = linear(normed, wq, pl.create_tensor([B, H], dtype=pl.FP32), "q_proj")
        k_proj = linear(normed, wk, pl.create_tensor([B, c.kv_hidden], dtype=pl.FP32), "k_proj")
        v_proj = linear(normed, wv, pl.create_tensor([B, c.kv_hidden], dtype=pl.FP32), "v_proj")
        q_rot = pl.create_tensor([B * c.num_heads, D], dtype=pl.BF16)
        rope_and_cache(q_proj, k_proj, v_proj, seq_lens, cos, sin, k_cache, v_cache, q_rot)
        attn = attention(q_rot, k_cache, v_cache, seq_lens, pl.create_tensor([B, H], dtype=pl.BF16))
        o_proj = linear(attn, wo, pl.create_tensor([B, H], dtype=pl.FP32), "out_proj")
        resid = residual(o_proj, hidden, pl.create_tensor([B, H], dtype=pl.FP32), pl.FP32, "residual1")
        post = rmsnorm(resid, rms_post, pl.create_tensor([B, H], dtype=pl.BF16), "post_rmsnorm")
        act = mlp(post, w_gate, w_up, pl.create_tensor([B, c.intermediate], dtype=pl.BF16))
        down = linear(act, w_down, pl.create_tensor([B, H], dtype=pl.FP32), "down_proj")
        out = residual(down, resid, out, pl.BF16, "residual2")
        return out

    return decode_layer


def inputs(c: Shape, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights and state for shape ``c`` (``out`` poisoned with NaN)."""
    g = torch.Generator().manual_seed(seed)
    bf = torch.bfloat16

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g) / math.sqrt(rows)).to(bf)

    pos = torch.arange(c.max_seq, dtype=torch.float32)[:, None]
    freq = 1.0 / (10000 ** (torch.arange(c.head_dim // 2, dtype=torch.float32) / (c.head_dim // 2)))
    angle = torch.cat([pos * freq, pos * freq], dim=1)
    return {
        "hidden": torch.randn(c.batch, c.hidden, generator=g).to(bf),
        "rms_in": torch.rand(1, c.hidden, generator=g) + 0.5,
        "wq": w(c.hidden, c.hidden), "wk": w(c.hidden, c.kv_hidden), "wv": w(c.hidden, c.kv_hidden),
        "seq_lens": torch.randint(1, c.max_seq + 1, (c.batch,), generator=g, dtype=torch.int32),
        "cos": torch.cos(angle), "sin": torch.sin(angle),
        "k_cache": torch.randn(c.cache_rows, c.head_dim, generator=g).to(bf),
        "v_cache": torch.randn(c.cache_rows, c.head_dim, generator=g).to(bf),
        "wo": w(c.hidden, c.hidden), "rms_post": torch.rand(1, c.hidden, generator=g) + 0.5,
        "w_gate": w(c.hidden, c.intermediate), "w_up": w(c.hidden, c.intermediate),
        "w_down": w(c.intermediate, c.hidden),
        "out": torch.full((c.batch, c.hidden), float("nan")).to(bf),
    }


def rmsnorm_ref(x, gamma, eps):
    x = x.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma).to(torch.bfloat16)


def rope_ref(x, cos, sin):
    half = x.shape[-1] // 2
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * cos[..., :half] - hi * sin[..., :half], hi * cos[..., half:] + lo * sin[..., half:]], -1)


def reference(c: Shape, a: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The layer in torch: (out, k_cache, v_cache) after the step, from the inputs ``a`` (not changed)."""
    B, NH, NKV, D, S = c.batch, c.num_heads, c.num_kv_heads, c.head_dim, c.max_seq
    f = torch.float32
    k_cache, v_cache = a["k_cache"].clone(), a["v_cache"].clone()
    normed = rmsnorm_ref(a["hidden"], a["rms_in"], c.eps)
    q = normed.to(f) @ a["wq"].to(f)
    k = normed.to(f) @ a["wk"].to(f)
    v = normed.to(f) @ a["wv"].to(f)
    pos = a["seq_lens"].long() - 1
    cos, sin = a["cos"][pos][:, None, :], a["sin"][pos][:, None, :]
    q = rope_ref(q.view(B, NH, D), cos, sin).to(torch.bfloat16)
    k = rope_ref(k.view(B, NKV, D), cos, sin).to(torch.bfloat16)
    rows = (torch.arange(B)[:, None] * NKV + torch.arange(NKV)[None, :]) * S + pos[:, None]
    k_cache[rows.flatten()] = k.reshape(B * NKV, D)
    v_cache[rows.flatten()] = v.view(B, NKV, D).to(torch.bfloat16).reshape(B * NKV, D)
    attn = torch.empty(B, NH, D)
    kc, vc = k_cache.view(B, NKV, S, D).to(f), v_cache.view(B, NKV, S, D).to(f)
    for b in range(B):
        n = int(a["seq_lens"][b])
        qb = q[b].to(f).view(NKV, NH // NKV, D)
        attn[b] = F.scaled_dot_product_attention(qb, kc[b, :, :n], vc[b, :, :n]).reshape(NH, D)
    attn = attn.reshape(B, NH * D).to(torch.bfloat16)
    resid = attn.to(f) @ a["wo"].to(f) + a["hidden"].to(f)
    post = rmsnorm_ref(resid, a["rms_post"], c.eps).to(f)
    gate, up = post @ a["w_gate"].to(f), post @ a["w_up"].to(f)
    act = (F.silu(gate) * up).to(torch.bfloat16)
    out = (act.to(f) @ a["w_down"].to(f) + resid).to(torch.bfloat16)
    return out, k_cache, v_cache
