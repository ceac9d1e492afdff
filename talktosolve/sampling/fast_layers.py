"""The static engine's layer math: a Qwen2/Llama-style decoder layer as plain tensor functions, and the KV
bookkeeping between calls (`fast_engine.StaticEngine` drives them; `weights` holds what they read).

- **Prefill** (`prefill_layer`) runs a block of new tokens through a layer (left-padded rows, or every row's
  tokens packed into one), writing their K/V into a static cache and attending over everything the row holds
  (`prefill_attention`); **decode** (`decode_layer`, or `decode_qkv` and
  `decode_out` around the Triton kernel of `decode_attention`) runs one new token per row against the cache. Both
  are pure tensor work with static shapes, so a decode step can be captured in a CUDA graph and a layer compiled.
- **Slot mode's per-row LoRA** (`linear`): in slot mode the base weight has n adapters' A stacked under it
  (`weights.Fused`), and each row's mask keeps its own adapter's columns.
- **KV bookkeeping between calls**: what a session already holds for a row (`reusable`), keeping a call's K/V
  for the copy's next turn (`hold`), and placing held K/V in front of new tokens (`place`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms(x, w, eps):
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def rotate(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def linear(x, w, b=None, lora=None):
    """`F.linear`, plus, in slot mode, each row's own LoRA term. x [B, T, in]; lora (n_out, B [n*r, out],
    mask [B, 1, n*r]) or None. In slot mode `w` [n_out + n*r, in] is the base weight with the n slots' A
    matrices stacked under it (`weights.Fused.make_slots`), so one matmul gives both the base output and every
    slot's x @ A; the mask keeps only each row's own slot's r columns (all zeros for a row of the base), and one
    more matmul with the slots' B side by side (the scale folded in) adds the rows' LoRA terms, whatever the rows'
    slots and however many rows each has. A decode step is a chain of small kernels, so the A matmul costs its own launch
    more than its reads: inside the base matmul it costs neither."""
    y = F.linear(x, w, b)
    if lora is None:
        return y
    n_out, b_up, mask = lora
    return y[..., :n_out] + (y[..., n_out:] * mask) @ b_up


def split_lora(lora):
    """A layer's four slot adapters (in `weights.GROUPS` order) -> (q|k|v's, the other three), or (None, None)."""
    return (lora[0], lora[1:]) if lora is not None else (None, None)


def qkv(x, cos, sin, ln1, w_qkv, b_qkv, n_heads, n_kv, head_dim, eps, lora=None):
    """Normed input -> rotated q [B, Hq, T, D], k [B, Hkv, T, D], v [B, Hkv, T, D] (one fused matmul).
    `lora`: the q|k|v slot adapters (see `linear`), or None."""
    B, T, _ = x.shape
    qkv = linear(rms(x, ln1, eps), w_qkv, b_qkv, lora)
    q, k, v = qkv.split([n_heads * head_dim, n_kv * head_dim, n_kv * head_dim], dim=-1)
    q = q.view(B, T, n_heads, head_dim).transpose(1, 2)
    k = k.view(B, T, n_kv, head_dim).transpose(1, 2)
    v = v.view(B, T, n_kv, head_dim).transpose(1, 2)
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin, v


def mlp_out(x, attn, ln2, w_o, w_gu, w_down, eps, lora=None):
    """Residual attention output, then the residual SwiGLU MLP (gate and up in one matmul). `lora`: the slot
    adapters of o, gate|up and down (see `linear`), or None."""
    o, gu, down = lora if lora is not None else (None, None, None)
    x = x + linear(attn, w_o, None, o)
    gate, up = linear(rms(x, ln2, eps), w_gu, None, gu).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, w_down, None, down)


def decode_qkv(x, cos, sin, ln1, w_qkv, b_qkv, k_cache, v_cache, col, n_heads: int, n_kv: int, head_dim: int,
                eps: float, lora=None):
    """The new token's q [B, Hkv, G, D], its K/V written into cache column `col`. x [B, 1, H]; caches
    [B, Hkv, L, D]. The G query heads that share a KV head become G query rows of that head (HF's layout: query
    head h reads KV head h // G), so attention never copies K/V per query head."""
    B = x.shape[0]
    q, k, v = qkv(x, cos, sin, ln1, w_qkv, b_qkv, n_heads, n_kv, head_dim, eps, lora)
    k_cache.index_copy_(2, col, k)
    v_cache.index_copy_(2, col, v)
    return q.reshape(B, n_kv, n_heads // n_kv, head_dim)


def decode_layer(x, cos, sin, ln1, ln2, w_qkv, b_qkv, w_o, w_gu, w_down, k_cache, v_cache, col, mask,
                  n_heads: int, n_kv: int, head_dim: int, eps: float, lora=None):
    """One layer for one new token per row, portable attention (the engine uses `decode_attention` instead
    where Triton runs). x [B, 1, H]; caches [B, Hkv, L, D]; mask [B, 1, 1, L] bool; lora: the layer's four slot
    adapters (q|k|v, o, gate|up, down) or None."""
    lora_qkv, lora_out = split_lora(lora)
    q = decode_qkv(x, cos, sin, ln1, w_qkv, b_qkv, k_cache, v_cache, col, n_heads, n_kv, head_dim, eps, lora_qkv)
    if q.is_cuda:
        # Two matmuls and a masked softmax, which torch.compile fuses: for one query row per head the SDPA
        # kernels are launch-heavy (on an H200 they were a quarter of the step, which ran 24% slower with them).
        scores = torch.matmul(q, k_cache.transpose(-1, -2)).float() * head_dim ** -0.5  # [B, Hkv, G, L]
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(q.dtype)
        a = torch.matmul(probs, v_cache)  # [B, Hkv, G, D]
    else:  # on a CPU, eager, SDPA's fused kernel is the faster one (3.6 against 4.6 ms a step, micro model)
        a = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)  # [B, Hkv, G, D]
    return decode_out(x, a, ln2, w_o, w_gu, w_down, eps, lora_out)


def decode_out(x, a, ln2, w_o, w_gu, w_down, eps: float, lora=None):
    """The rest of a decode layer after attention: a [B, Hkv, G, D] -> the layer's output [B, 1, H]."""
    return mlp_out(x, a.reshape(x.shape[0], 1, -1), ln2, w_o, w_gu, w_down, eps, lora)


def prefill_layer(x, cos, sin, ln1, ln2, w_qkv, b_qkv, w_o, w_gu, w_down, k_cache, v_cache, attention,
                   qkv, mlp_out, n_heads: int, n_kv: int, head_dim: int, eps: float, lora=None):
    """One layer over a left-padded block of S new tokens that ends at cache column T. x [B, S, H]; `attention`
    (`prefill_attention.Packed` or `.Masked`) writes the real tokens' K/V into cache columns T-S..T-1, leaving a
    row's padding columns alone (they may hold its reused prefix), and attends over each row's prompt. `qkv` and
    `mlp_out` are `qkv` and `mlp_out`, or compiled versions of them; lora as in `decode_layer`."""
    B, S, _ = x.shape
    lora_qkv, lora_out = split_lora(lora)
    q, k, v = qkv(x, cos, sin, ln1, w_qkv, b_qkv, n_heads, n_kv, head_dim, eps, lora_qkv)
    a = attention(q, k, v, k_cache, v_cache)  # [B, S, Hq, D]
    return mlp_out(x, a.reshape(B, S, n_heads * head_dim), ln2, w_o, w_gu, w_down, eps, lora_out)


def reusable(session, prompts: list[list[int]]) -> list[int]:
    """Per row, how many leading prompt tokens the session's cache already holds (0: read the whole prompt).
    At least one token is always left to read: the next token is predicted from the last one's state."""
    if session is None or session.ids is None or len(session.ids) != len(prompts):
        return [0] * len(prompts)
    return [len(h) if 0 < len(h) < len(p) and p[:len(h)] == h else 0 for p, h in zip(prompts, session.ids)]


def hold(session, s, prompts, rows, T: int) -> None:
    """Keep each row's prompt and message, minus the message's last token (never fed back, so it has no keys
    or values), with their K/V: prompt i sits in columns T - len(p_i) .. T-1, message token j was fed at T + j."""
    held = [p + r[:-1] for p, r in zip(prompts, rows)]
    n = max(len(h) for h in held)
    first = torch.tensor([T - len(p) for p in prompts], device=s["k"].device)
    # Columns past a row's own length hold whatever the pool held: never read, as `reusable` stops at len(ids).
    session.ids, session.k, session.v = held, columns(s["k"], first, n), columns(s["v"], first, n)


def columns(cache, first, width: int):
    """cache [layers, B, kv, L, D] -> [layers, B, kv, width, D]: each row's `width` columns from its own `first`
    [B] on (clamped at the last column)."""
    layers, B, kv, L, D = cache.shape
    cols = (first[:, None] + torch.arange(width, device=first.device)[None]).clamp(max=L - 1)  # [B, width]
    return cache.gather(3, cols[None, :, None, :, None].expand(layers, B, kv, width, D))


def block_mask(valid, S: int):
    """The prefill mask [B, 1, S, T] of a left-padded block of S new tokens ending at column T (valid [B, T] bool:
    the columns that hold a real token): causal over real tokens, and a padding query attends to itself so that
    no row is all -inf (NaN)."""
    T = valid.shape[1]
    cols = torch.arange(T, device=valid.device)
    query = cols[T - S:]  # [S]
    causal = cols[None, :] <= query[:, None]  # [S, T]
    return ((causal[None] & valid[:, None, :]) | (cols[None, None, :] == query[None, :, None]))[:, None]


def place(cache, held, first, count, T: int) -> None:
    """cache[:, b, :, first[b] + j] = held[:, b, :, j] for j < count[b], in one gather (cache [layers, B, kv, L, D],
    held [layers, B, kv, n, D]); other columns are left as they are."""
    layers, B, kv, _, D = cache.shape
    rel = torch.arange(T, device=cache.device)[None] - first[:, None]  # [B, T]
    inside = (rel >= 0) & (rel < count[:, None])
    index = rel.clamp(0, held.shape[3] - 1)[None, :, None, :, None].expand(layers, B, kv, T, D)
    cache[:, :, :, :T] = torch.where(inside[None, :, None, :, None], held.gather(3, index), cache[:, :, :, :T])
