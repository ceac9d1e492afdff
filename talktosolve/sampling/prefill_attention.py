"""Prefill attention: each row's new tokens attend to its own prompt, either packed into one sequence through
FlashAttention's variable-length kernel (`Packed`, CUDA) or as a left-padded block under a mask (`Masked`).

A prefill call reads, for each row b, its n_b new tokens: the end of its prompt, which fills cache columns
first_b .. T-1 (held, shared and new tokens alike), the new ones the last n_b of them.

- `Masked` (a CPU, or where FlashAttention cannot run): the rows are a left-padded block [B, S] ending at column
  T, so every row pays for the longest (a group's leader reads its whole shared run, its members only their own
  few tokens), and attention needs the block's [B, 1, S, T] mask. SDPA with a mask runs the memory-efficient
  kernel (no flash kernel accepts one), over K/V copied once per query head.
- `Packed`: every row's new tokens are one sequence [1, N] (no padding goes through the layers); their K/V are
  scattered into the cache and each row's prompt columns gathered from it (one flat-index copy each, `pack`),
  and FlashAttention's varlen forward attends each row's queries to its own keys, causal aligned at the bottom
  right (query j of n_b sees the first len_b - n_b + j + 1 keys), a KV head's G query heads reading it once.

FlashAttention's kernel is several times faster per layer than the masked memory-efficient one, and packing
gains most where a call's rows are uneven, as in a train step of several runs (docs/performance.md, Several runs
in one process).

Both are called alike, with a layer's q [B, Hq, S, D], new k, v [B, Hkv, S, D] and its caches [B, Hkv, L, D]
(B = 1 and S = N when packed): they write the new tokens' K/V into the cache and return the attention
[B, S, Hq, D].

`attention_kernels` is the choice of SDPA kernels that the learner (`grpo`) and the sampler (`fast_engine`) both
run under.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def attention_kernels():
    """SDPA backends for training and sampling: flash / memory-efficient / math, not cuDNN.

    cuDNN's attention builds an execution plan for every new sequence length, and RL batches bring a new length
    nearly every micro-batch, so its plans would cost more than its kernels save (docs/performance.md, What made
    the difference).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def available(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether FlashAttention's varlen kernel runs here: CUDA with flash attention built, an Ampere or newer
    GPU, half precision, and a head size it tiles."""
    return (device.type == "cuda" and torch.backends.cuda.is_flash_attention_available()
            and torch.cuda.get_device_capability(device) >= (8, 0) and dtype in (torch.float16, torch.bfloat16)
            and head_dim % 8 == 0 and head_dim <= 256)


@dataclass
class Packing:
    """Where a call's new tokens, packed row after row into one sequence of N, and each row's prompt columns
    sit, as flat index vectors (one gather or scatter each, shared by every layer and by K and V)."""

    rows: torch.Tensor
    """[N] the row of each new token."""
    offsets: torch.Tensor
    """[N] its index among its row's new tokens (0 .. n_b - 1)."""
    last: torch.Tensor
    """[B] the packed index of each row's last token (whose state predicts the next)."""
    dst: torch.Tensor
    """[Hkv * N] the flat cache row ([B * Hkv * L, D] view) that each new token's K/V go to, head-major."""
    src: torch.Tensor
    """[Nk * Hkv] the flat cache row of each prompt column's K/V, column-major (row b's are first_b .. T-1)."""
    cu_q: torch.Tensor
    """[B + 1] int32 offsets of each row's queries in the packed rows."""
    cu_k: torch.Tensor
    """[B + 1] int32 offsets of each row's keys."""
    max_q: int
    max_k: int


def pack(new: list[int], first: torch.Tensor, T: int, n_kv: int, L: int) -> Packing:
    """new [B]: each row's number of new tokens (the last of its prompt), at least one; first [B]: the cache column
    of each row's first prompt token, so that its keys are columns first_b .. T-1 of a [B, n_kv, L, D] cache."""
    dev = first.device
    B = len(new)
    n_q = torch.tensor(new, device=dev)
    n_k = T - first
    zero = torch.zeros(1, dtype=torch.long, device=dev)
    cu_q, cu_k = torch.cat([zero, n_q.cumsum(0)]), torch.cat([zero, n_k.cumsum(0)])
    heads = torch.arange(n_kv, device=dev)
    rows = torch.repeat_interleave(torch.arange(B, device=dev), n_q)  # [N]
    offsets = torch.arange(rows.numel(), device=dev) - cu_q[rows]
    cols = T - n_q[rows] + offsets  # [N] cache column of each new token
    dst = ((rows[None] * n_kv + heads[:, None]) * L + cols[None]).reshape(-1)  # [Hkv, N]
    k_rows = torch.repeat_interleave(torch.arange(B, device=dev), n_k)  # [Nk]
    k_cols = first[k_rows] + torch.arange(k_rows.numel(), device=dev) - cu_k[k_rows]
    src = ((k_rows[:, None] * n_kv + heads[None]) * L + k_cols[:, None]).reshape(-1)  # [Nk, Hkv]
    return Packing(rows, offsets, cu_q[1:] - 1, dst, src, cu_q.to(torch.int32), cu_k.to(torch.int32),
                   max(new), int(n_k.max()))


def flash(q, k, v, p: Packing, scale: float | None = None):
    """FlashAttention's varlen forward: q [Nq, Hq, D], k, v [Nk, Hkv, D] -> [Nq, Hq, D], causal from the bottom
    right of each row (Hkv may divide Hq); softmax scale 1 / sqrt(D) unless given. Differentiable (aten's
    backward is FlashAttention's varlen backward), which the learner's packed rows rely on."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.ops.aten._flash_attention_forward(q, k, v, p.cu_q, p.cu_k, p.max_q, p.max_k, 0.0, True, False,
                                                   scale=scale)[0]


def reference(q, k, v, p: Packing, scale: float | None = None):
    """What `flash` computes, one row at a time through SDPA with an explicit mask (tests; any device)."""
    out = []
    group = q.shape[1] // k.shape[1]
    for b in range(len(p.cu_q) - 1):
        qb = q[p.cu_q[b]:p.cu_q[b + 1]].transpose(0, 1)  # [Hq, n, D]
        kb = k[p.cu_k[b]:p.cu_k[b + 1]].transpose(0, 1).repeat_interleave(group, 0)  # [Hq, m, D]
        vb = v[p.cu_k[b]:p.cu_k[b + 1]].transpose(0, 1).repeat_interleave(group, 0)
        n, m = qb.shape[1], kb.shape[1]
        causal = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
        out.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=causal, scale=scale).transpose(0, 1))
    return torch.cat(out)


class Packed:
    """Over packed rows (a "block" of one row holding all N new tokens), through `kernel` (`flash`, or `reference`
    in tests): q [1, Hq, N, D], k, v [1, Hkv, N, D] -> [1, N, Hq, D]; caches [B, Hkv, L, D], contiguous."""

    def __init__(self, p: Packing, kernel=None):
        self.p, self.kernel = p, kernel if kernel is not None else flash

    def __call__(self, q, k, v, k_cache, v_cache):
        p, D = self.p, q.shape[-1]
        for new, cache in ((k, k_cache), (v, v_cache)):
            cache.view(-1, D).index_copy_(0, p.dst, new[0].reshape(-1, D))
        keys = k_cache.view(-1, D).index_select(0, p.src).view(-1, k.shape[1], D)  # [Nk, Hkv, D]
        values = v_cache.view(-1, D).index_select(0, p.src).view(-1, k.shape[1], D)
        return self.kernel(q[0].transpose(0, 1), keys, values, p)[None]


class Masked:
    """Over the padded block: mask [B, 1, S, T] bool (`fast_layers.block_mask`), real [B, S] bool. K/V are copied
    once per query head: reading the cache in place instead (a KV head's G query heads as G*S query rows, the mask
    tiled to match) was slower, since SDPA's masked kernel pays for the larger mask more than for the copies
    (docs/performance.md, Several runs in one process)."""

    def __init__(self, mask, real):
        self.mask, self.real = mask, real

    def __call__(self, q, k, v, k_cache, v_cache):
        S, T = q.shape[2], self.mask.shape[-1]
        keep = self.real[:, None, :, None]  # [B, 1, S, 1]
        k_cache[:, :, T - S:T].copy_(torch.where(keep, k, k_cache[:, :, T - S:T]))
        v_cache[:, :, T - S:T].copy_(torch.where(keep, v, v_cache[:, :, T - S:T]))
        group = q.shape[1] // k.shape[1]
        keys, values = k_cache[:, :, :T], v_cache[:, :, :T]
        if group > 1:
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask).transpose(1, 2)
