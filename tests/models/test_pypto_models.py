"""PyPTO's own model programs (``examples/models``), run unchanged but for the import and the platform.

They need a PyPTO checkout: ``$PYPTO_CHECKOUT`` or ``/tmp/pypto`` (PyPTO's main branch; docs/models.md
names the commit); without one these tests skip.  The model tests that do not need PyPTO's files
are test_qwen3_decode.py and test_attention.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from .conftest import long_profile

ROOT = Path(__file__).resolve().parents[2]
PYPTO = Path(os.environ.get("PYPTO_CHECKOUT", "/tmp/pypto"))
MODELS = PYPTO / "examples" / "models"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MODELS.is_dir(), reason=f"no PyPTO checkout at {PYPTO} (set PYPTO_CHECKOUT)"),
]


def _runner():
    name = "pypto_examples_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "pypto_examples.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


#: The model programs that run here, and what they show: their own check passes ("matched"), or
#: they exit cleanly with nothing to compare ("ran": 03's main prints SKIPPED as it does on PyPTO,
#: without calling its kernel, which test_pypto_flash_attention_kernel_runs_and_matches_a_reference_of_its_casts
#: launches; 08 prints its program, which test_pypto_llama_mini_program_matches_torch launches;
#: qwen3_decode lowers its layer and lists the functions).
RUNS = {
    "examples/models/01_ffn.py": "matched",
    "examples/models/02_vector_dag.py": "matched",
    "examples/models/03_flash_attention.py": "ran",
    # Its orchestration loops over context_lens read when it runs (device-resolved edges); 06 does the
    # same at larger sizes (RUNS_LONG).
    "examples/models/07_paged_attention_multi_config.py": "matched",
    # It compiles its program and prints it (test_pypto_batch_paged_attention_matches_a_gather_and_sdpa runs it).
    "examples/models/05_paged_attention_batch.py": "ran",
    "examples/models/08_llama_mini.py": "ran",
    # Its orchestration reads scale (FP32) and hands it to each softmax task (captured as its bits), and
    # dispatches with pl.spmd(core_num=4, sync_start=True), some inside pl.cluster(); 12 s at its own sizes.
    "examples/models/09_paged_attention_spmd.py": "matched",
    # It lowers its layer and lists the functions; the runner says "matched" for it because it
    # imports torch (its check heuristic), though the file compares nothing.
    "examples/models/qwen3_jit/qwen3_decode.py": "matched",
}


#: The long profile's (PYPTO_ASYNC_LONG=1): 06 at its own sizes (64 requests of 8192 tokens:
#: 64 x (1 + 64 x 4) = 16448 tasks, 1 GiB of KV cache) takes about 2 minutes and 3.4 GB here.
RUNS_LONG = {
    "examples/models/06_paged_attention_dynamic.py": "matched",
    # It sizes intermediates and windows from its config tensor ([q_tile, head_dim_cfg]): each takes the
    # kernel parameter's static shape, checked when it runs.  64 requests of 8192 tokens (16448 tasks):
    # about 30 s and 3.4 GB here.
    "examples/models/04_paged_attention.py": "matched",
}


def _run(runs):
    r = _runner()
    progs = [p for p in r.file_programs(PYPTO / "examples", PYPTO) if p.name in runs]
    assert sorted(p.name for p in progs) == sorted(runs)
    results = r.run_all(progs, ROOT, timeout=600, jobs=1)
    got = {res.name: (res.outcome, res.detail) for res in results}
    assert {n: o for n, (o, _) in got.items()} == runs, got


@pytest.mark.timeout(1200)
def test_pypto_model_programs_run_unchanged_but_for_import_and_platform():
    _run(RUNS)


@long_profile
@pytest.mark.timeout(1200)
def test_pypto_model_programs_at_large_sizes_run_unchanged_but_for_import_and_platform():
    _run(RUNS_LONG)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    """PyPTO's qwen3_jit package, adapted (import and platform), importable as ``examples.models.qwen3_jit``."""
    adapt = _runner().adapt
    root = tmp_path_factory.mktemp("pypto_models")
    for src in (PYPTO / "examples").rglob("*.py"):
        if src.parent == PYPTO / "examples" or MODELS in src.parents:
            dst = root / "examples" / src.relative_to(PYPTO / "examples")
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(adapt(src.read_text(encoding="utf-8")), encoding="utf-8")
    (root / "examples" / "__init__.py").touch()
    sys.path.insert(0, str(root))
    try:
        config = importlib.import_module("examples.models.qwen3_jit.config")
        decode = importlib.import_module("examples.models.qwen3_jit.qwen3_decode")
        yield config, decode.qwen3_decode
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
            del sys.modules[name]


@long_profile
@pytest.mark.timeout(1800)
def test_pypto_qwen3_decode_at_its_shapes_writes_the_kv_cache_as_torch_does(qwen3):
    """PyPTO's Qwen3-32B decode layer, launched at its own shapes on random weights.

    Its scope 2 stops at the RoPE and KV-cache write (the file leaves the attention out and
    passes an attn_out intermediate it never writes to scope 3), so what the file defines is
    compared: the cache rows each request's seq_lens names, RoPE-rotated K and V of the
    RMSNorm'd projections, and every other row unchanged.  test_qwen3_decode.py checks a
    complete layer, attention included, against torch.
    """
    from pypto_async.runtime import ChipWorker, RunConfig

    C, kernel = qwen3
    g = torch.Generator().manual_seed(11)
    B, H, KV, D, S = C.BATCH, C.HIDDEN, C.KV_HIDDEN, C.HEAD_DIM, C.MAX_SEQ
    bf = torch.bfloat16

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g) / rows ** 0.5).to(bf)

    a = dict(hidden_states=torch.randn(B, H, generator=g).to(bf), input_rms_weight=torch.rand(1, H, generator=g) + 0.5,
             wq=w(H, H), wk=w(H, KV), wv=w(H, KV),
             seq_lens=torch.randint(1, S + 1, (B,), generator=g, dtype=torch.int32),
             rope_cos=torch.randn(S, D, generator=g), rope_sin=torch.randn(S, D, generator=g),
             k_cache=torch.randn(C.CACHE_ROWS, D, generator=g).to(bf),
             v_cache=torch.randn(C.CACHE_ROWS, D, generator=g).to(bf),
             wo=w(H, H), post_rms_weight=torch.rand(1, H, generator=g) + 0.5,
             w_gate=w(H, C.INTERMEDIATE), w_up=w(H, C.INTERMEDIATE), w_down=w(C.INTERMEDIATE, H),
             out=torch.full((B, H), float("nan")).to(bf))
    k_before, v_before = a["k_cache"].clone(), a["v_cache"].clone()
    with ChipWorker(RunConfig(device_memory=8 << 30)):
        kernel(*a.values())

    x = a["hidden_states"].float()
    normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + C.EPS) * a["input_rms_weight"]).to(bf).float()
    k, v = normed @ a["wk"].float(), normed @ a["wv"].float()
    pos = a["seq_lens"].long() - 1
    cos, sin = a["rope_cos"][pos][:, None], a["rope_sin"][pos][:, None]
    half = D // 2
    kh = k.view(B, C.NUM_KV_HEADS, D)
    lo, hi = kh[..., :half], kh[..., half:]
    k_rot = torch.cat([lo * cos[..., :half] - hi * sin[..., :half], hi * cos[..., half:] + lo * sin[..., half:]], -1)
    rows = ((torch.arange(B)[:, None] * C.NUM_KV_HEADS + torch.arange(C.NUM_KV_HEADS)) * S + pos[:, None]).flatten()
    want_k, want_v = k_before.clone(), v_before.clone()
    want_k[rows] = k_rot.reshape(-1, D).to(bf)
    want_v[rows] = v.reshape(-1, D).to(bf)
    torch.testing.assert_close(a["k_cache"].float(), want_k.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(a["v_cache"].float(), want_v.float(), rtol=2e-2, atol=2e-2)
    others = torch.ones(C.CACHE_ROWS, dtype=torch.bool)
    others[rows] = False
    assert torch.equal(a["k_cache"][others], k_before[others]) and torch.equal(a["v_cache"][others], v_before[others])


@pytest.fixture(scope="module")
def batch_paged_attention(tmp_path_factory):
    """PyPTO's 05_paged_attention_batch, adapted (import and platform), imported as a module."""
    adapt = _runner().adapt
    root = tmp_path_factory.mktemp("pypto_05")
    src = MODELS / "05_paged_attention_batch.py"
    (root / "batch05.py").write_text(adapt(src.read_text(encoding="utf-8")), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pypto_batch05", root / "batch05.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pypto_batch_paged_attention_matches_a_gather_and_sdpa(batch_paged_attention):
    """05 only compiles its program (its main prints it); here it runs, against a gather + SDPA of each request.

    Its orchestration reads batch, heads and block size from its config tensor and loops up to the longest
    request's block count (a scalar carried across a loop of the orchestration), all when it runs.
    """
    import struct

    import torch.nn.functional as F

    batch, heads, dim, bs, maxb = 2, 16, 16, 16, 4
    prog = batch_paged_attention.BuildBatchPagedAttentionProgram(
        batch=batch, num_heads=heads, head_dim=dim, block_size=bs, max_num_blocks_per_req=maxb)
    from pypto_async import ir

    compiled = ir.compile(prog)
    g = torch.Generator().manual_seed(5)
    pool = batch * maxb
    query = torch.randn(batch * heads, dim, generator=g).bfloat16()
    key_cache = torch.randn(pool * bs, dim, generator=g).bfloat16()
    value_cache = torch.randn(pool * bs, dim, generator=g).bfloat16()
    for ctx in (3 * bs - 5, maxb * bs):  # a partial last block, then every slot
        context_lens = torch.full((batch,), ctx, dtype=torch.int32)
        block_table = torch.randperm(pool, generator=g).to(torch.int32)
        config = torch.tensor([batch, heads, 1, dim, bs, maxb, struct.unpack("I", struct.pack("f", 1.0))[0]],
                              dtype=torch.int64)
        out = torch.full((batch * heads, dim), float("nan"))
        sizes = [torch.tensor([t.numel() * t.element_size()], dtype=torch.int64) for t in (query, key_cache, value_cache)]
        compiled(query, key_cache, value_cache, block_table, context_lens, out, config, *sizes)
        kc, vc = key_cache.float().view(pool, bs, dim), value_cache.float().view(pool, bs, dim)
        table = block_table.view(batch, maxb).long()
        nb = -(-ctx // bs)
        want = torch.empty(batch, heads, dim)
        for b in range(batch):
            k = kc[table[b, :nb]].reshape(nb * bs, dim)[:ctx]
            v = vc[table[b, :nb]].reshape(nb * bs, dim)[:ctx]
            want[b] = F.scaled_dot_product_attention(query.float().view(batch, heads, dim)[b], k, v, scale=1.0)
        torch.testing.assert_close(out, want.view(batch * heads, dim), rtol=2e-2, atol=2e-2)


@pytest.fixture(scope="module")
def paged_attention(tmp_path_factory):
    """PyPTO's 04_paged_attention, adapted (import and platform), imported as a module."""
    adapt = _runner().adapt
    root = tmp_path_factory.mktemp("pypto_04")
    src = MODELS / "04_paged_attention.py"
    (root / "paged04.py").write_text(adapt(src.read_text(encoding="utf-8")), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pypto_paged04", root / "paged04.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pypto_paged_attention_sized_from_its_config_matches_a_gather_and_sdpa(paged_attention):
    """04 at small sizes (its full run is RUNS_LONG's): its config's head_dim and block_size meet its kernels' 128s.

    Its orchestration sizes intermediates and windows from the config tensor; each takes the static
    shape of the kernel parameter it is passed to, checked when it runs.  A partial last block gives
    a valid length that is not the kernel's 128: the launch fails naming it, and the worker keeps working.
    """
    import torch.nn.functional as F

    from pypto_async import ir
    from pypto_async.errors import PtoError
    from pypto_async.runtime import ChipWorker

    batch, heads, dim, bs, maxb = 2, 16, 128, 128, 3
    compiled = ir.compile(paged_attention.build_paged_attention_program(
        batch=batch, num_heads=heads, head_dim=dim, block_size=bs, max_num_blocks_per_req=maxb))
    g = torch.Generator().manual_seed(4)
    pool = batch * maxb
    query = torch.randn(batch * heads, dim, generator=g).bfloat16()
    key_cache = torch.randn(pool * bs, dim, generator=g).bfloat16()
    value_cache = torch.randn(pool * bs, dim, generator=g).bfloat16()
    block_table = torch.randperm(pool, generator=g).to(torch.int32)
    config = torch.tensor([batch, heads, 1, dim, bs, maxb, 0x3F800000], dtype=torch.int64)
    kc, vc = key_cache.float().view(pool, bs, dim), value_cache.float().view(pool, bs, dim)
    table = block_table.view(batch, maxb).long()
    with ChipWorker() as w:
        h = w.register(compiled)
        lens = torch.tensor([2 * bs, maxb * bs], dtype=torch.int32)  # whole blocks, a different count per request
        out = torch.full((batch * heads, dim), float("nan"))
        h(query, key_cache, value_cache, block_table, lens, out, config)
        want = torch.empty(batch, heads, dim)
        for b in range(batch):
            nb = int(lens[b]) // bs
            k, v = kc[table[b, :nb]].reshape(nb * bs, dim), vc[table[b, :nb]].reshape(nb * bs, dim)
            want[b] = F.scaled_dot_product_attention(query.float().view(batch, heads, dim)[b], k, v, scale=1.0)
        torch.testing.assert_close(out, want.view(batch * heads, dim), rtol=2e-2, atol=2e-2)
        with pytest.raises(PtoError, match=r"'sij' of kernel_softmax_prepare: extent 1 read at run time is not 128"):
            h(query, key_cache, value_cache, block_table, torch.tensor([bs + 5, bs], dtype=torch.int32),
              torch.full((batch * heads, dim), float("nan")), config)
        again = torch.full((batch * heads, dim), float("nan"))
        h(query, key_cache, value_cache, block_table, lens, again, config)
        torch.testing.assert_close(again, out)


#: 03's else branch reads its running max from ``mi_102 = pl.create_tensor(...)``, a fresh tensor
#: that nothing writes, where the algorithm reads the carried ``mi_update``: those two reads.
_FLASH_MAX_READS = ("pl.maximum(mi_102, row_max)", "pl.sub(mi_102, miUpdate_103)")


def _flash_attention(root: Path, name: str, source: str):
    (root / f"{name}.py").write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.flash_attention


def _flash_reference(q, k, v, scale=0.0883883):
    """What 03's kernel computes (its max read from the carried one), following its FP16 casts.

    Per KV block of 64 rows: S = q @ kj.T accumulated in FP32, rounded to FP16 (out_dtype=FP16);
    S * scale, its row max, exp and row sum all FP16; P @ vj accumulated in FP32, rounded to FP16;
    the running max, sum and output FP32 (an FP16 operand with an FP32 one promotes, as PyPTO's
    type deduction has it); the output divided by the sum at the last block.
    """
    f, h = torch.float32, torch.float16
    for i in range(k.shape[0] // 64):
        kj, vj = k[i * 64:(i + 1) * 64].to(f), v[i * 64:(i + 1) * 64].to(f)
        s = (q.to(f) @ kj.T).to(h) * torch.tensor(scale, dtype=h)
        row_max = s.amax(-1, keepdim=True)
        p = torch.exp(s - row_max)
        l_ij = p.to(f).sum(-1, keepdim=True).to(h).to(f)
        pv = (p.to(f) @ vj).to(h).to(f)
        if i == 0:
            o, li, mi = pv, l_ij, row_max.to(f)
        else:
            m_new = torch.maximum(mi, row_max.to(f))
            t2, t4 = torch.exp(mi - m_new), torch.exp(row_max.to(f) - m_new)
            li, o, mi = t2 * li + t4 * l_ij, o * t2 + pv * t4, m_new
    return o / li


def test_pypto_flash_attention_kernel_runs_and_matches_a_reference_of_its_casts(tmp_path):
    """03's ``flash_attention`` kernel, which PyPTO itself never runs (its main prints SKIPPED), launched here.

    q [64, 128], k and v [1024, 128] in FP16 (the kernel's shapes: 16 KV blocks of 64 rows; FP16
    as its FP16 matmuls and casts are written for).  As shipped, its else branch takes the running
    max from a fresh, never-written ``pl.create_tensor`` (``mi_102``) instead of the carried
    ``mi_update``: its result is undefined (it depends on that buffer's contents), so only that it
    runs is checked.  Its other uninitialised ``create_tensor`` init values are defined: the
    ``i == 0`` branch overwrites o, l and m whole, and attn is written at ``i == 15`` before it is
    returned.  With those two reads taken from ``mi_update`` (the file otherwise unchanged) it is
    online-softmax flash attention, compared with a reference that follows its casts and with SDPA.
    """
    adapt = _runner().adapt
    source = adapt((MODELS / "03_flash_attention.py").read_text(encoding="utf-8"))
    assert all(source.count(r) == 1 for r in _FLASH_MAX_READS)
    fixed = source
    for r in _FLASH_MAX_READS:
        fixed = fixed.replace(r, r.replace("mi_102", "mi_update"))
    shipped = _flash_attention(tmp_path, "pypto_flash03", source)
    kernel = _flash_attention(tmp_path, "pypto_flash03_max", fixed)

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n, 128, generator=g).half() for n in (64, 1024, 1024))
    out = shipped(q, k, v)
    assert out.shape == (64, 128) and out.dtype == torch.float32

    out = kernel(q, k, v)
    assert out.shape == (64, 128) and out.dtype == torch.float32
    want = _flash_reference(q, k, v)
    # The reference rounds where the kernel does; what remains is the order of the FP32 sums and
    # the last bit of an FP16 exp or product (5e-4 relative), over outputs |x| < 0.5: under 1e-3.
    assert want.abs().max() < 0.5
    torch.testing.assert_close(out, want, rtol=1e-3, atol=1e-3)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.float()[None], k.float()[None], v.float()[None], scale=0.0883883)[0]
    # Against FP32 attention the FP16 roundings of S (its logits to 5e-4 relative) and P @ V add up
    # to a few 1e-4 at these magnitudes.
    torch.testing.assert_close(out, sdpa, rtol=5e-3, atol=3e-3)


def _llama_mini_reference(hidden, mask, cos, sin, wq, wk, wv, w_dense, w_gate, w_up, w_down, w_lm):
    """What 08's ``llama_mini_orch`` computes, in FP32 as its kernels do, from torch's own pieces.

    RMSNorm without a weight (x / sqrt(mean(x^2) + 1e-6)), projections as ``x @ w`` ([D, D] weights,
    no transpose), rotate-half RoPE on Q and K with [S, D/2] tables, Q K^T scaled by head_dim^-0.5 plus
    the additive mask and a row softmax, then @ V (SDPA with that scale and mask); the dense projection
    and the first residual; RMSNorm, SwiGLU (silu(gate) * up) and the down projection, the second
    residual; the final RMSNorm and the LM head.
    """
    import torch.nn.functional as F

    d = hidden.shape[-1]

    def rms(x):
        return F.rms_norm(x, (d,), eps=1e-6)

    def rope(x):
        left, right = x[:, :d // 2], x[:, d // 2:]
        return torch.cat([left * cos - right * sin, right * cos + left * sin], dim=-1)

    n = rms(hidden)
    q, k, v = rope(n @ wq), rope(n @ wk), n @ wv
    attn = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, scale=d ** -0.5)[0]
    h = hidden + attn @ w_dense
    n2 = rms(h)
    h = h + (F.silu(n2 @ w_gate) * (n2 @ w_up)) @ w_down
    return rms(h) @ w_lm


@pytest.mark.parametrize("seq_len, vocab_size", [(16, 64), (64, 256)])
def test_pypto_llama_mini_program_matches_torch(tmp_path, seq_len, vocab_size):
    """08's program (its main only prints it), built by its ``build_llama_mini_program`` and launched here.

    One decoder layer and one head at head_dim 64 (its Q K^T kernel is unrolled over exactly four
    16-column K tiles, so 64 is the only head_dim it supports); its default shapes (seq_len 16,
    vocab 64) and a longer sequence with a wider vocabulary (64, 256).  Random hidden states and
    weights (scaled by D^-0.5 so activations stay O(1)), a causal mask, RoPE tables of
    base 10000; the logits poisoned with NaN first.  Its deps.json is checked too.
    """
    import json

    from pypto_async import ir
    from pypto_async.runtime import RunConfig

    adapt = _runner().adapt
    (tmp_path / "llama08.py").write_text(adapt((MODELS / "08_llama_mini.py").read_text(encoding="utf-8")),
                                         encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pypto_llama08", tmp_path / "llama08.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    dim = 64
    compiled = ir.compile(mod.build_llama_mini_program(seq_len=seq_len, head_dim=dim, vocab_size=vocab_size))

    g = torch.Generator().manual_seed(8)
    hidden = torch.randn(seq_len, dim, generator=g)
    mask = torch.triu(torch.full((seq_len, seq_len), -1e9), diagonal=1)
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    angles = pos / 10000.0 ** (torch.arange(dim // 2, dtype=torch.float32) * 2 / dim)
    cos, sin = torch.cos(angles), torch.sin(angles)
    weights = [torch.randn(dim, dim, generator=g) * dim ** -0.5 for _ in range(7)]
    w_lm = torch.randn(dim, vocab_size, generator=g) * dim ** -0.5
    logits = torch.full((seq_len, vocab_size), float("nan"))
    compiled(hidden, mask, cos, sin, *weights, w_lm, logits,
             config=RunConfig(enable_dep_gen=True, save_kernels_dir=str(tmp_path / "out")))

    # Inspectable as PyPTO's are: one task per kernel call of the orchestration (no loops), and an
    # edge per tensor a call reads that an earlier one wrote (hidden, the mask, the tables and the
    # weights are inputs): 3 + 2 + 2 + 1 + 1 + 1 + 2 + 1 + 1 + 1 + 2 + 2 + 1 + 2 + 1 + 1 = 24.
    deps = json.loads((tmp_path / "out" / "dfx_outputs" / "deps.json").read_text(encoding="utf-8"))
    mm, rope, rms, add = "kernel_matmul", "kernel_rope", "kernel_rms_norm", "kernel_add"
    assert [t["name"] for t in deps["tasks"]] == [
        rms, mm, mm, mm, rope, rope, "kernel_matmul_trans_b", "kernel_scale_scores", "kernel_add_scores",
        "kernel_softmax", "kernel_matmul_attn", mm, add, rms, mm, mm, "kernel_swiglu", mm, add, rms,
        "kernel_lm_head"]
    assert len(deps["edges"]) == 24 and {e["hazard"] for e in deps["edges"]} == {"RAW"}

    want = _llama_mini_reference(hidden, mask, cos, sin, *weights, w_lm)
    # Every kernel computes in FP32 as the reference does; what differs is the order of the FP32 sums
    # (matmuls over 64 or seq_len terms, row sums) and exp/sqrt/divide's last bits, carried through
    # three RMSNorms and two residuals: measured under 2e-6 over logits |x| up to about 4 (both
    # shapes), so 1e-4 leaves headroom yet fails at once on a wrong mask, scale or rotation (a
    # reference without the mask is off by 1.7).
    assert 0.5 < want.abs().max() < 20
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)
