"""Attention of one new token per row over a KV cache: a split-length ("flash-decoding") Triton kernel.

The decode step's attention, for each row b and KV head h, is softmax(q K^T / sqrt(D)) V over the cache columns
that hold tokens, for the G query heads that share that KV head. Written as two batched matmuls and a masked
softmax (`fast_engine`'s portable path), it is three kernels that read all L columns of a graph's static cache,
filled or not (a graph serves a whole turn, sized for its longest row at its last token), a large share of a
decode step. PyTorch's SDPA kernels were slower still at one query row; FlexAttention's decoding kernel wants a block mask built on the host for each step, which a CUDA graph
cannot hold. Hence this kernel, written by hand:

- `_partial`: grid (B * Hkv, S). The S programs of one row and KV head split the row's columns into S spans of
  whole blocks, one each, sized on the device from the number of filled columns (read from device memory), so
  one captured graph splits exactly the filled columns evenly at every step. A program reads its span of K and V
  once, for all G query heads at a time (one [G_PAD, D] x [D, BLOCK] product per block of columns), and keeps a
  running max / sum / weighted sum of values in fp32 (online softmax). With S = 1 it divides and writes the
  output itself.
- `_combine` (S > 1): grid (B * Hkv * G,). One program per query head reads its S partial results as one tile,
  rescales them to a common max and divides once.

S is `splits_for`'s: enough programs to keep every SM busy (a batch of 32 rows over 2 KV heads is 64 pairs for
132 SMs, so each pair is split 8 ways) and no more, since a split costs a partial result and the combine's
launch; from 192 rows on (a six-run train step's turn, evaluation's batches) each pair is one program and there
is no combine. A row's result depends on its own columns and S alone, so on the batch's size but not on the
other rows' lengths. Before, every pair was cut into fixed chunks of 128 columns over the cache's whole length,
one program each (those past the filled columns returned at once), and the combine merged a row's chunks one
after another (`bench/decode_attention_before.py` keeps that form for the benchmarks).

A row's tokens are the columns from its first (`first[b]`: rows are left-padded so that every row's newest token
sits in the same column) to the filled count. Columns before a row's first are neither attended nor read: a
row's spans begin at its first column, so a step reads each row's K/V, not the batch's longest row's. Rows of one
call differ most where arms share an engine (the cut arm's views lack the partner's words), as in training with
several runs in one process. Scores are exact fp32 products of the bf16
inputs; the exponentials enter the value product rounded to the cache's dtype, as the portable path's
probabilities do. `available()` is False without Triton or CUDA, or for a head size the kernel cannot tile, and
the engine then keeps the portable path.

What it gains is measured in docs/performance.md#decode: little at batch 32, where reading the weights dominates
a decode step, and most at evaluation's large batches and where a call's rows are unequal; the padding a call
holds is counted there too. `bench/profile_attention.py` times the launch configurations, the kernel before, and
the kernel reading the padding too (`read_padding=True`).
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only install: the engine uses the portable attention
    triton = None

BLOCK = 64
"""Columns per inner product (the N of one [G_PAD, D] x [D, BLOCK] tile)."""
PROGRAMS = 512
"""Programs `splits_for` aims a call at: enough that every SM holds several at once (an H200 has 132), so the
row-by-row imbalance of lengths evens out; past them a row's columns are read by one program alone."""
MAX_SPLITS = 16
"""Programs per (row, KV head) at most: the fastest split measured at 32 rows (docs/performance.md#decode)."""
NUM_WARPS = 4
NUM_STAGES = 2


def _tiles(head_dim: int) -> bool:
    """tl.arange and tl.dot need the head dimension a power of two of at least 16."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


def available(device: torch.device, head_dim: int) -> bool:
    """Whether `attend` runs here for this head size (Triton, on CUDA or under its interpreter)."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"  # tests run the kernels on a CPU this way
    return triton is not None and (device.type == "cuda" or interpreted) and _tiles(head_dim)


def splits_for(pairs: int, columns: int, block: int = BLOCK) -> int:
    """How many programs share one (row, KV head)'s columns: a power of two, so that `pairs x splits` is about
    `PROGRAMS`, at most `MAX_SPLITS` and at most a block of the cache's `columns` each."""
    splits = 1
    while splits < MAX_SPLITS and pairs * splits * 2 <= PROGRAMS and (splits * 2) * block <= columns:
        splits *= 2
    return splits


if triton is not None:

    @triton.jit
    def _partial(q, k, v, first, n_cols, m_out, l_out, acc_out, out,
                 stride_qb, stride_qh, stride_qg, stride_kb, stride_kh, stride_kl,
                 stride_vb, stride_vh, stride_vl, stride_ob, stride_oh, stride_og, scale,
                 HKV: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
                 SPLITS: tl.constexpr, PRECISION: tl.constexpr, READ_PADDING: tl.constexpr):
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
        start = 0 if READ_PADDING else f  # READ_PADDING: the padding is loaded too (masked out), the benchmarks' form
        span = tl.cdiv(tl.cdiv(n - start, SPLITS), BLOCK) * BLOCK  # whole blocks, so at most one ragged block
        lo = start + split * span
        hi = tl.minimum(lo + span, n)
        if lo < hi:
            qt = tl.load(q + b * stride_qb + h * stride_qh + g[:, None] * stride_qg + d[None, :],
                         mask=g[:, None] < G, other=0.0)  # [G_PAD, D]
            for off in range(lo, hi, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                read = cols < hi
                kt = tl.load(k + b * stride_kb + h * stride_kh + cols[:, None] * stride_kl + d[None, :],
                             mask=read[:, None], other=0.0)  # [BLOCK, D]
                vt = tl.load(v + b * stride_vb + h * stride_vh + cols[:, None] * stride_vl + d[None, :],
                             mask=read[:, None], other=0.0)  # [BLOCK, D], loaded with K: both in flight at once
                s = tl.dot(qt, tl.trans(kt), input_precision=PRECISION) * scale  # [G_PAD, BLOCK] fp32
                s = tl.where((read & (cols >= f))[None, :], s, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, 1))
                # A block with no attended column (READ_PADDING's padding) leaves m at -inf: exp(-inf - -inf) is NaN.
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp(m - m_safe)
                p = tl.exp(s - m_safe[:, None])
                total = total * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PRECISION)
                m = m_new
        if SPLITS == 1:  # the whole row in this program: divide and write the output, no combine
            res = acc / tl.where(total > 0, total, 1.0)[:, None]  # padding query rows have no sum
            tl.store(out + b * stride_ob + h * stride_oh + g[:, None] * stride_og + d[None, :],
                     res.to(out.dtype.element_ty), mask=g[:, None] < G)
        else:
            row = (bh * SPLITS + split) * G + g  # only the G real query rows are kept
            tl.store(m_out + row, m, mask=g < G)
            tl.store(l_out + row, total, mask=g < G)
            tl.store(acc_out + row[:, None] * D + d[None, :], acc, mask=g[:, None] < G)

    @triton.jit
    def _combine(m_in, l_in, acc_in, out, stride_ob, stride_oh, stride_og,
                 HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr):
        """One program per (row, KV head, query head): its SPLITS partial results read at once, as one tile."""
        bhg = tl.program_id(0)
        bh = bhg // G
        gi = bhg % G
        b = bh // HKV
        h = bh % HKV
        sp = tl.arange(0, SPLITS)
        d = tl.arange(0, D)
        row = (bh * SPLITS + sp) * G + gi  # [SPLITS]
        m = tl.load(m_in + row)  # an empty split (no column of its own) holds -inf, 0 and zeros
        top = tl.max(m, 0)
        w = tl.exp(m - tl.where(top == float("-inf"), 0.0, top))  # [SPLITS]
        total = tl.sum(tl.load(l_in + row) * w, 0)
        acc = tl.sum(tl.load(acc_in + row[:, None] * D + d[None, :]) * w[:, None], 0)  # [D]
        res = acc / tl.where(total > 0, total, 1.0)
        tl.store(out + b * stride_ob + h * stride_oh + gi * stride_og + d, res.to(out.dtype.element_ty))


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, first: torch.Tensor,
           n_cols: torch.Tensor, *, splits: int | None = None, block: int = BLOCK, num_warps: int = NUM_WARPS,
           num_stages: int = NUM_STAGES, read_padding: bool = False) -> torch.Tensor:
    """q [B, Hkv, G, D]; caches [B, Hkv, L, D]; first [B] long (row b's tokens are columns first[b]..n-1);
    n_cols [1] long (columns 0..n-1 are filled). Returns the attention output [B, Hkv, G, D] in q's dtype.
    Launches a fixed grid (graph-capturable). `splits`: programs per (row, KV head), a power of two (default
    `splits_for`); the other keyword arguments are the launch configuration (`bench/profile_attention.py` times
    the alternatives); `read_padding=True` loads every column below n, the padding too (masked out of the
    softmax), as the kernel did before it read each row's own columns alone: a benchmarks' baseline."""
    B, Hkv, G, D = q.shape
    L = k_cache.shape[2]
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("attend needs the head dimension contiguous in q and the caches")
    if not _tiles(D):
        raise ValueError(f"attend needs a power-of-two head dimension of at least 16, not {D}")
    splits = splits_for(B * Hkv, L, block) if splits is None else splits
    if splits < 1 or splits & (splits - 1):
        raise ValueError(f"splits must be a power of two, not {splits}")
    g_pad = max(16, triton.next_power_of_2(G))  # tl.dot wants every dimension >= 16
    dev = q.device
    out = torch.empty_like(q)
    if splits == 1:  # written by _partial itself: no partial results
        m = total = acc = out
    else:
        m = torch.empty(B * Hkv, splits, G, device=dev, dtype=torch.float32)
        total = torch.empty_like(m)
        acc = torch.empty(B * Hkv, splits, G, D, device=dev, dtype=torch.float32)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # fp32 caches: no TF32 rounding of scores
    _partial[(B * Hkv, splits)](
        q, k_cache, v_cache, first, n_cols, m, total, acc, out,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        D ** -0.5, HKV=Hkv, G=G, G_PAD=g_pad, D=D, BLOCK=block, SPLITS=splits, PRECISION=precision,
        READ_PADDING=read_padding, num_warps=num_warps, num_stages=num_stages)
    if splits > 1:
        _combine[(B * Hkv * G,)](m, total, acc, out, out.stride(0), out.stride(1), out.stride(2),
                                 HKV=Hkv, G=G, D=D, SPLITS=splits)
    return out
