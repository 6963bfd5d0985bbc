"""Attention kernels in PyPTO's forms against torch: flash attention and paged attention.

``flash_attention`` is PyPTO's ``03_flash_attention`` algorithm (online softmax with
``pl.range(..., init_values=)`` / ``pl.yield_`` and ``pl.matmul(q, k, b_trans=True)``),
written here so that it is attention (PyPTO's file restarts its running max
from a fresh tensor each block, and prints SKIPPED without a device); it is
checked against ``torch.nn.functional.scaled_dot_product_attention``.

The paged program is ``04_paged_attention``'s four-kernel pipeline (QK matmul,
softmax prepare with the valid length of a partial block, PV matmul, online
update flagged first/last), as module-level ``@pl.function`` kernels called by a
``@pl.program`` orchestration that reads each block's physical index from the
block table with ``pl.tensor.read`` and windows the caches at it with
``pl.tensor.slice``.  It is checked against a gather of the same blocks and
``scaled_dot_product_attention``; one compiled program serves any block table
and any context lengths with the same block count.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pypto_async.language as pl
from pypto_async import ir

pytestmark = pytest.mark.slow  # each compiles a program of its own: seconds on two CPUs

SQ, SK, D, QT, KT = 128, 512, 128, 64, 64


@pl.jit
def flash_attention(q: pl.Tensor, k: pl.Tensor, v: pl.Tensor, out: pl.Out[pl.Tensor]):
    for qb in pl.parallel(0, SQ, QT):
        with pl.at(level=pl.Level.CORE_GROUP, name_hint="flash_attention"):
            qi = q[qb:qb + QT, :]
            m0 = pl.full([QT, 1], dtype=pl.FP32, value=-1e30)
            l0 = pl.full([QT, 1], dtype=pl.FP32, value=0.0)
            o0 = pl.full([QT, D], dtype=pl.FP32, value=0.0)
            for j, (m, l, o) in pl.range(SK // KT, init_values=(m0, l0, o0)):  # noqa: E741
                s = pl.matmul(qi, k[j * KT:(j + 1) * KT, :], b_trans=True, out_dtype=pl.FP32)
                s = pl.mul(s, 1.0 / math.sqrt(D))
                m_new = pl.maximum(m, pl.row_max(s))
                p = pl.exp(pl.row_expand_sub(s, m_new))
                alpha = pl.exp(pl.sub(m, m_new))
                l_new = pl.add(pl.mul(alpha, l), pl.row_sum(p))
                pv = pl.matmul(pl.cast(p, target_type=pl.BF16), pl.load(v, [j * KT, 0], [KT, D]))
                o_new = pl.add(pl.row_expand_mul(o, alpha), pv)
                m_out, l_out, o_out = pl.yield_(m_new, l_new, o_new)
            pl.store(pl.row_expand_div(o_out, l_out), [qb, 0], out)
    return out


def test_flash_attention_matches_sdpa():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(n, D, generator=g).bfloat16() for n in (SQ, SK, SK))
    out = torch.full((SQ, D), float("nan"))
    flash_attention(q, k, v, out)
    want = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None])[0]
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)


# ---- paged attention: 04_paged_attention's pipeline ----------------------------------------

BATCH, HEADS, BS, NB, MAXB = 2, 16, 64, 3, 4  # NB blocks per request (MAXB slots in the table row)
POOL = BATCH * MAXB


@pl.function(type=pl.FunctionType.InCore)
def qk_matmul(qi: pl.Tensor[[16, D], pl.BF16], kj: pl.Tensor[[BS, D], pl.BF16],
              sij: pl.Out[pl.Tensor[[16, BS], pl.FP32]]) -> pl.Tensor[[16, BS], pl.FP32]:
    q_l1 = pl.load(qi, [0, 0], [16, D], target_memory=pl.MemorySpace.Mat)
    k_l1 = pl.tile.transpose_view(pl.load(kj, [0, 0], [BS, D], target_memory=pl.MemorySpace.Mat))
    s = pl.matmul(pl.move(q_l1, target_memory=pl.MemorySpace.Left), pl.move(k_l1, target_memory=pl.MemorySpace.Right))
    return pl.store(s, [0, 0], sij)


@pl.function(type=pl.FunctionType.InCore)
def softmax_prepare(sij: pl.Tensor[[16, BS], pl.FP32], scale: pl.Scalar[pl.FP32], valid_len: pl.Scalar[pl.INDEX],
                    pij: pl.Out[pl.Tensor[[16, BS], pl.BF16]], mij: pl.Out[pl.Tensor[[16, 1], pl.FP32]],
                    lij: pl.Out[pl.Tensor[[16, 1], pl.FP32]]):
    s = pl.load(sij, [0, 0], [16, BS], valid_shape=[16, valid_len], target_memory=pl.MemorySpace.Vec)
    s = pl.mul(pl.tile.fillpad(s, pad_value=pl.PadValue.min), scale)
    m = pl.row_max(s)
    p = pl.cast(pl.exp(pl.row_expand_sub(s, m)), target_type=pl.BF16)
    pij = pl.store(p, [0, 0], pij)
    mij = pl.store(m, [0, 0], mij)
    lij = pl.store(pl.row_sum(pl.cast(p, target_type=pl.FP32)), [0, 0], lij)
    return pij, mij, lij


@pl.function(type=pl.FunctionType.InCore)
def pv_matmul(pij: pl.Tensor[[16, BS], pl.BF16], vj: pl.Tensor[[BS, D], pl.BF16],
              oi: pl.Out[pl.Tensor[[16, D], pl.FP32]]) -> pl.Tensor[[16, D], pl.FP32]:
    p_l1 = pl.load(pij, [0, 0], [16, BS], target_memory=pl.MemorySpace.Mat)
    v_l1 = pl.load(vj, [0, 0], [BS, D], target_memory=pl.MemorySpace.Mat)
    o = pl.matmul(pl.move(p_l1, target_memory=pl.MemorySpace.Left), pl.move(v_l1, target_memory=pl.MemorySpace.Right))
    return pl.store(o, [0, 0], oi)


@pl.function(type=pl.FunctionType.InCore)
def online_update(mij: pl.Tensor[[16, 1], pl.FP32], lij: pl.Tensor[[16, 1], pl.FP32],
                  oi_new: pl.Tensor[[16, D], pl.FP32], mi: pl.InOut[pl.Tensor[[16, 1], pl.FP32]],
                  li: pl.InOut[pl.Tensor[[16, 1], pl.FP32]], oi: pl.InOut[pl.Tensor[[16, D], pl.FP32]],
                  dst: pl.Out[pl.Tensor[[16, D], pl.FP32]], bn: pl.Scalar[pl.INDEX]):
    m_j, l_j = pl.load(mij, [0, 0], [16, 1]), pl.load(lij, [0, 0], [16, 1])
    o_j = pl.load(oi_new, [0, 0], [16, D])
    if bn == 0:
        m, l, o = m_j, l_j, o_j  # noqa: E741
    else:
        m_old, l_old, o_old = pl.load(mi, [0, 0], [16, 1]), pl.load(li, [0, 0], [16, 1]), pl.load(oi, [0, 0], [16, D])
        m = pl.maximum(m_old, m_j)
        alpha, beta = pl.exp(pl.sub(m_old, m)), pl.exp(pl.sub(m_j, m))
        l = pl.add(pl.mul(alpha, l_old), pl.mul(beta, l_j))  # noqa: E741
        o = pl.add(pl.row_expand_mul(o_old, alpha), pl.row_expand_mul(o_j, beta))
    mi = pl.store(m, [0, 0], mi)
    li = pl.store(l, [0, 0], li)
    oi = pl.store(o, [0, 0], oi)
    if bn == NB - 1:
        dst = pl.store(pl.row_expand_div(o, l), [0, 0], dst)
    return mi, li, oi, dst


@pl.program
class PagedAttention:
    @pl.function(type=pl.FunctionType.Orchestration)
    def paged_attention(self, query: pl.Tensor[[BATCH * HEADS, D], pl.BF16],
                        key_cache: pl.Tensor[[POOL * BS, D], pl.BF16],
                        value_cache: pl.Tensor[[POOL * BS, D], pl.BF16],
                        block_table: pl.Tensor[[BATCH * MAXB], pl.INT32],
                        context_lens: pl.Tensor[[BATCH], pl.INT32],
                        out: pl.Out[pl.Tensor[[BATCH * HEADS, D], pl.FP32]]):
        for b in pl.range(pl.tensor.dim(context_lens, 0)):
            cur = pl.tensor.read(context_lens, [b])
            for qh in pl.range(HEADS // 16):
                row = b * HEADS + qh * 16
                mi = pl.create_tensor([16, 1], dtype=pl.FP32)
                li = pl.create_tensor([16, 1], dtype=pl.FP32)
                oi = pl.create_tensor([16, D], dtype=pl.FP32)
                for bn in pl.range(NB):
                    blk = pl.tensor.read(block_table, [b * MAXB + bn])
                    kj = pl.tensor.slice(key_cache, [BS, D], [blk * BS, 0])
                    vj = pl.tensor.slice(value_cache, [BS, D], [blk * BS, 0])
                    qi = pl.tensor.slice(query, [16, D], [row, 0])
                    sij = qk_matmul(qi, kj, pl.create_tensor([16, BS], dtype=pl.FP32))
                    valid = pl.min(BS, cur - bn * BS)
                    pij, mij, lij = softmax_prepare(sij, 1.0 / math.sqrt(D), valid,
                                                    pl.create_tensor([16, BS], dtype=pl.BF16),
                                                    pl.create_tensor([16, 1], dtype=pl.FP32),
                                                    pl.create_tensor([16, 1], dtype=pl.FP32))
                    oi_new = pv_matmul(pij, vj, pl.create_tensor([16, D], dtype=pl.FP32))
                    dst = pl.tensor.slice(out, [16, D], [row, 0])
                    mi, li, oi, dst = online_update(mij, lij, oi_new, mi, li, oi, dst, bn)
        return out


def _paged_reference(query, key_cache, value_cache, block_table, context_lens):
    out = torch.empty(BATCH, HEADS, D)
    kc, vc = key_cache.float().view(POOL, BS, D), value_cache.float().view(POOL, BS, D)
    table = block_table.view(BATCH, MAXB).long()
    for b in range(BATCH):
        n = int(context_lens[b])
        k = kc[table[b, :NB]].reshape(NB * BS, D)[:n]  # gather the request's blocks, in table order
        v = vc[table[b, :NB]].reshape(NB * BS, D)[:n]
        out[b] = F.scaled_dot_product_attention(query.float().view(BATCH, HEADS, D)[b], k, v)
    return out.view(BATCH * HEADS, D)


def test_paged_attention_matches_a_gather_and_sdpa_over_the_same_block_table():
    g = torch.Generator().manual_seed(8)
    query = torch.randn(BATCH * HEADS, D, generator=g).bfloat16()
    key_cache = torch.randn(POOL * BS, D, generator=g).bfloat16()
    value_cache = torch.randn(POOL * BS, D, generator=g).bfloat16()
    compiled = ir.compile(PagedAttention)
    for lens in ([(NB - 1) * BS + 1, NB * BS], [NB * BS - 5, (NB - 1) * BS + 40]):  # a partial last block
        context_lens = torch.tensor(lens, dtype=torch.int32)
        block_table = torch.randperm(POOL, generator=g)[:BATCH * MAXB].to(torch.int32)
        out = torch.full((BATCH * HEADS, D), float("nan"))
        compiled(query, key_cache, value_cache, block_table, context_lens, out)
        want = _paged_reference(query, key_cache, value_cache, block_table, context_lens)
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)


# ---- paged attention with its loops bounded at run time (04's orchestration form) ------------

@pl.function(type=pl.FunctionType.InCore)
def online_update_flagged(mij: pl.Tensor[[16, 1], pl.FP32], lij: pl.Tensor[[16, 1], pl.FP32],
                          oi_new: pl.Tensor[[16, D], pl.FP32], mi: pl.InOut[pl.Tensor[[16, 1], pl.FP32]],
                          li: pl.InOut[pl.Tensor[[16, 1], pl.FP32]], oi: pl.InOut[pl.Tensor[[16, D], pl.FP32]],
                          dst: pl.Out[pl.Tensor[[16, D], pl.FP32]], is_first: pl.Scalar[pl.BOOL],
                          is_last: pl.Scalar[pl.BOOL]):
    m_j, l_j = pl.load(mij, [0, 0], [16, 1]), pl.load(lij, [0, 0], [16, 1])
    o_j = pl.load(oi_new, [0, 0], [16, D])
    if is_first:
        m, l, o = m_j, l_j, o_j  # noqa: E741
    else:
        m_old, l_old, o_old = pl.load(mi, [0, 0], [16, 1]), pl.load(li, [0, 0], [16, 1]), pl.load(oi, [0, 0], [16, D])
        m = pl.maximum(m_old, m_j)
        alpha, beta = pl.exp(pl.sub(m_old, m)), pl.exp(pl.sub(m_j, m))
        l = pl.add(pl.mul(alpha, l_old), pl.mul(beta, l_j))  # noqa: E741
        o = pl.add(pl.row_expand_mul(o_old, alpha), pl.row_expand_mul(o_j, beta))
    mi = pl.store(m, [0, 0], mi)
    li = pl.store(l, [0, 0], li)
    oi = pl.store(o, [0, 0], oi)
    if is_last:
        dst = pl.store(pl.row_expand_div(o, l), [0, 0], dst)
    return mi, li, oi, dst


@pl.program
class PagedAttentionRuntime:
    """04's orchestration: the batch from config[0], each request's block count from its context length."""

    @pl.function(type=pl.FunctionType.Orchestration)
    def paged_attention(self, query: pl.Tensor[[BATCH * HEADS, D], pl.BF16],
                        key_cache: pl.Tensor[[POOL * BS, D], pl.BF16],
                        value_cache: pl.Tensor[[POOL * BS, D], pl.BF16],
                        block_table: pl.Tensor[[BATCH * MAXB], pl.INT32],
                        context_lens: pl.Tensor[[BATCH], pl.INT32],
                        out: pl.Out[pl.Tensor[[BATCH * HEADS, D], pl.FP32]],
                        config: pl.Tensor[[2], pl.INT64]):
        batch = pl.tensor.read(config, [0])
        block_num = pl.tensor.read(config, [1])
        for b in pl.range(batch):
            cur = pl.tensor.read(context_lens, [b])
            bn_this = (cur + BS - 1) // BS
            for qh in pl.range(HEADS // 16):
                row = b * HEADS + qh * 16
                mi = pl.create_tensor([16, 1], dtype=pl.FP32)
                li = pl.create_tensor([16, 1], dtype=pl.FP32)
                oi = pl.create_tensor([16, D], dtype=pl.FP32)
                for bn in pl.range(bn_this):
                    blk = pl.tensor.read(block_table, [b * block_num + bn])
                    kj = pl.slice(key_cache, [BS, D], [blk * BS, 0])
                    vj = pl.slice(value_cache, [BS, D], [blk * BS, 0])
                    qi = pl.slice(query, [16, D], [row, 0])
                    sij = qk_matmul(qi, kj, pl.create_tensor([16, BS], dtype=pl.FP32))
                    valid = pl.min(BS, cur - bn * BS)
                    pij, mij, lij = softmax_prepare(sij, 1.0 / math.sqrt(D), valid,
                                                    pl.create_tensor([16, BS], dtype=pl.BF16),
                                                    pl.create_tensor([16, 1], dtype=pl.FP32),
                                                    pl.create_tensor([16, 1], dtype=pl.FP32))
                    oi_new = pv_matmul(pij, vj, pl.create_tensor([16, D], dtype=pl.FP32))
                    if bn == 0:
                        is_first = pl.yield_(1)
                    else:
                        is_first = pl.yield_(0)
                    if bn == bn_this - 1:
                        is_last = pl.yield_(1)
                    else:
                        is_last = pl.yield_(0)
                    dst = pl.slice(out, [16, D], [row, 0])
                    mi, li, oi, dst = online_update_flagged(mij, lij, oi_new, mi, li, oi, dst, is_first, is_last)
        return out


def _paged_reference_ragged(query, key_cache, value_cache, block_table, context_lens, batch):
    out = torch.full((BATCH, HEADS, D), float("nan"))
    kc, vc = key_cache.float().view(POOL, BS, D), value_cache.float().view(POOL, BS, D)
    table = block_table.view(BATCH, MAXB).long()
    for b in range(batch):
        n = int(context_lens[b])
        nb = -(-n // BS)
        k = kc[table[b, :nb]].reshape(nb * BS, D)[:n]  # the request's blocks, in table order
        v = vc[table[b, :nb]].reshape(nb * BS, D)[:n]
        out[b] = F.scaled_dot_product_attention(query.float().view(BATCH, HEADS, D)[b], k, v)
    return out.view(BATCH * HEADS, D)


def test_paged_attention_with_runtime_bounds_matches_a_gather_and_sdpa():
    """One artifact, any batch and any context lengths up to the table's row: the loops are bounded on the device."""
    g = torch.Generator().manual_seed(9)
    query = torch.randn(BATCH * HEADS, D, generator=g).bfloat16()
    key_cache = torch.randn(POOL * BS, D, generator=g).bfloat16()
    value_cache = torch.randn(POOL * BS, D, generator=g).bfloat16()
    compiled = ir.compile(PagedAttentionRuntime)
    assert compiled.kind == "program" and compiled.task_graph is None  # its task count is the lengths'
    for batch, lens in ((2, [MAXB * BS, 5]), (2, [BS + 1, (MAXB - 1) * BS - 7]), (1, [2 * BS, 0])):
        context_lens = torch.tensor(lens, dtype=torch.int32)
        block_table = torch.randperm(POOL, generator=g)[:BATCH * MAXB].to(torch.int32)
        out = torch.full((BATCH * HEADS, D), float("nan"))
        compiled(query, key_cache, value_cache, block_table, context_lens, out,
                 torch.tensor([batch, MAXB], dtype=torch.int64))
        want = _paged_reference_ragged(query, key_cache, value_cache, block_table, context_lens, batch)
        rows = batch * HEADS
        torch.testing.assert_close(out[:rows], want[:rows], rtol=2e-2, atol=2e-2)
