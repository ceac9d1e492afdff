"""The decode step's attention kernel as it was before its splits: every (row, KV head) cut into fixed chunks of
`CHUNK` columns from column 0, one program each, over the cache's whole length (the chunks past the filled
columns or inside a row's padding return at once), and a combine that merges a row's chunks one after another.
Kept here, out of the package, as the benchmarks' baseline: `bench/profile_attention.py` and
`bench/profile_sample.py --compare splits` time it beside `talktosolve.sampling.decode_attention` in one run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 64
"""Columns per inner product (the N of one [G_PAD, D] x [D, BLOCK] tile)."""
CHUNK = 128
"""Columns per program: at batch 32 and 1,536 columns, 2 KV heads give 64 x 12 programs for 132 SMs."""
NUM_WARPS = 4
NUM_STAGES = 2


@triton.jit
def _partial(q, k, v, first, n_cols, m_out, l_out, acc_out,
             stride_qb, stride_qh, stride_qg, stride_kb, stride_kh, stride_kl,
             stride_vb, stride_vh, stride_vl, scale,
             HKV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
             BLOCK: tl.constexpr, CHUNK: tl.constexpr, PRECISION: tl.constexpr, READ_PADDING: tl.constexpr):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // HKV
    h = bh % HKV
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    m = tl.full([G_PAD], float("-inf"), tl.float32)
    total = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    n = tl.load(n_cols)
    f = tl.load(first + b)
    start = split * CHUNK
    if start < n and (READ_PADDING or start + CHUNK > f):
        qt = tl.load(q + b * stride_qb + h * stride_qh + g[:, None] * stride_qg + d[None, :],
                     mask=g[:, None] < G, other=0.0)  # [G_PAD, D]
        for off in range(0, CHUNK, BLOCK):
            cols = start + off + tl.arange(0, BLOCK)
            ok = (cols < n) & (cols >= f)
            read = (cols < n) if READ_PADDING else ok  # READ_PADDING: the form before, for benchmarks
            kt = tl.load(k + b * stride_kb + h * stride_kh + cols[:, None] * stride_kl + d[None, :],
                         mask=read[:, None], other=0.0)  # [BLOCK, D]
            vt = tl.load(v + b * stride_vb + h * stride_vh + cols[:, None] * stride_vl + d[None, :],
                         mask=read[:, None], other=0.0)  # [BLOCK, D], loaded with K: both in flight at once
            s = tl.dot(qt, tl.trans(kt), input_precision=PRECISION) * scale  # [G_PAD, BLOCK] fp32
            s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            # A block with no attended column leaves m at -inf; exp(-inf - -inf) would be NaN.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m - m_safe)
            p = tl.exp(s - m_safe[:, None])
            total = total * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PRECISION)
            m = m_new
    row = (bh * tl.num_programs(1) + split) * G + g  # only the G real query rows are kept
    tl.store(m_out + row, m, mask=g < G)
    tl.store(l_out + row, total, mask=g < G)
    tl.store(acc_out + row[:, None] * D + d[None, :], acc, mask=g[:, None] < G)

@triton.jit
def _combine(m_in, l_in, acc_in, out, first, n_cols, n_split, stride_ob, stride_oh, stride_og,
             HKV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // HKV
    h = bh % HKV
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    top = tl.full([G_PAD], float("-inf"), tl.float32)
    total = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    used = tl.cdiv(tl.load(n_cols), CHUNK)  # chunks past the filled columns were skipped: never read them
    for split in range(tl.load(first + b) // CHUNK, used):  # nor those wholly inside the row's padding
        row = (bh * n_split + split) * G + g
        real = g < G
        m = tl.load(m_in + row, mask=real, other=float("-inf"))
        new = tl.maximum(top, m)
        safe = tl.where(new == float("-inf"), 0.0, new)
        old_w = tl.exp(top - safe)
        w = tl.exp(m - safe)
        total = total * old_w + tl.load(l_in + row, mask=real, other=0.0) * w
        acc = acc * old_w[:, None] + tl.load(acc_in + row[:, None] * D + d[None, :], mask=real[:, None],
                                             other=0.0) * w[:, None]
        top = new
    res = acc / tl.where(total > 0, total, 1.0)[:, None]  # padding query rows (never stored) have no sum
    tl.store(out + b * stride_ob + h * stride_oh + g[:, None] * stride_og + d[None, :],
             res.to(out.dtype.element_ty), mask=g[:, None] < G)


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, first: torch.Tensor,
           n_cols: torch.Tensor, *, block: int = BLOCK, chunk: int = CHUNK, num_warps: int = NUM_WARPS,
           num_stages: int = NUM_STAGES, read_padding: bool = False) -> torch.Tensor:
    """q [B, Hkv, G, D]; caches [B, Hkv, L, D]; first [B] long (row b's tokens are columns first[b]..n-1);
    n_cols [1] long (columns 0..n-1 are filled). Returns the attention output [B, Hkv, G, D] in q's dtype.
    Launches a fixed grid (graph-capturable). The keyword arguments are the launch configuration
    (`bench/profile_attention.py` times the alternatives); `read_padding=True` loads every column below n, the
    padding too (masked out of the softmax), as the kernel did before: the benchmarks' baseline."""
    B, Hkv, G, D = q.shape
    L = k_cache.shape[2]
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("attend needs the head dimension contiguous in q and the caches")
    if chunk % block:
        raise ValueError(f"chunk ({chunk}) must be a multiple of block ({block})")
    g_pad = max(16, triton.next_power_of_2(G))  # tl.dot wants every dimension >= 16
    n_split = triton.cdiv(L, chunk)
    dev = q.device
    m = torch.empty(B * Hkv, n_split, G, device=dev, dtype=torch.float32)
    total = torch.empty_like(m)
    acc = torch.empty(B * Hkv, n_split, G, D, device=dev, dtype=torch.float32)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # fp32 caches: no TF32 rounding of scores
    _partial[(B * Hkv, n_split)](
        q, k_cache, v_cache, first, n_cols, m, total, acc,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), D ** -0.5,
        HKV=Hkv, G=G, G_PAD=g_pad, D=D, BLOCK=block, CHUNK=chunk, PRECISION=precision, READ_PADDING=read_padding,
        num_warps=num_warps, num_stages=num_stages)
    out = torch.empty_like(q)
    _combine[(B * Hkv,)](m, total, acc, out, first, n_cols, n_split, out.stride(0), out.stride(1), out.stride(2),
                         HKV=Hkv, G=G, G_PAD=g_pad, D=D, CHUNK=chunk)
    return out
