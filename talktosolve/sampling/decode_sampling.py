"""The decode step's sampling: Gumbel-max over each row's logits, on CUDA in a split Triton kernel.

A sample from softmax(z / T) is argmax_j (z_j / T + G_j) with G_j i.i.d. Gumbel, G = -log(-log U), U ~ Uniform
[0, 1) (exact: no top-k, no top-p). Eager, that is six passes over an fp32 [B, V] tensor (cast, draw, two logs,
divide and add, argmax); compiled by torch.compile, one reduction with a program per row, which leaves most of the
chip idle at small batches. Hence this kernel:

- `_gumbel_partial`: grid (B, ceil(V / CHUNK)). A program reads one chunk of one row's bf16 logits, draws its
  uniforms with Triton's Philox (`tl.rand`), and writes the chunk's largest z / T + G and where it is.
- `_gumbel_combine`: grid (B,). The row's largest over its chunks (the first on a tie, as `argmax`).

It makes a decode step a few percent faster than the eager passes or the compiled reduction
(docs/performance.md#decode).

The random numbers are keyed by (seed + step) and counted by the flat index r * V + j, where r is the row's
place in the call (`rows`; by default its place in the batch): `seed` and `step` are one-element device tensors
that the engine sets once a call and a CUDA graph advances at every replay, so a seeded call samples the same
whether its graph was captured before or not, and every step draws afresh; and a row draws the same numbers when
the engine has moved it into a smaller batch (`compaction`).
U = 0 gives G = -inf (never picked). `available()` is False without Triton or off CUDA; the engine then samples
with torch's generator (`sample_eager`; also where it records each token's log-prob, or decodes greedily).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only install: the engine samples with torch's generator
    triton = None

CHUNK = 4096
"""Logits per program: 38 chunks of the Qwen2.5 vocabulary, so 32 rows give 1,216 programs for 132 SMs."""
NUM_WARPS = 8


def available(device: torch.device) -> bool:
    """Whether the engine samples with `sample` here (Triton on a CUDA device)."""
    return triton is not None and device.type == "cuda"


if triton is not None:

    @triton.jit
    def _gumbel_partial(logits, seed, step, rows, best_out, where_out, V, stride_row, inv_t,
                 N_SPLIT: tl.constexpr, CHUNK: tl.constexpr):
        b = tl.program_id(0)
        split = tl.program_id(1)
        cols = split * CHUNK + tl.arange(0, CHUNK)
        inside = cols < V
        z = tl.load(logits + b * stride_row + cols, mask=inside, other=0.0).to(tl.float32)
        key = tl.load(seed) + tl.load(step)  # int64: one Philox key per (call, step)
        u = tl.rand(key, tl.load(rows + b).to(tl.int32) * V + cols)  # [CHUNK] in [0, 1)
        score = tl.where(inside, z * inv_t - tl.log(-tl.log(u)), float("-inf"))
        best = tl.max(score, 0)
        where = tl.argmax(score, 0)
        tl.store(best_out + b * N_SPLIT + split, best)
        tl.store(where_out + b * N_SPLIT + split, split * CHUNK + where)

    @triton.jit
    def _gumbel_combine(best_in, where_in, out, N_SPLIT: tl.constexpr, N_PAD: tl.constexpr):
        b = tl.program_id(0)
        i = tl.arange(0, N_PAD)
        best = tl.load(best_in + b * N_SPLIT + i, mask=i < N_SPLIT, other=float("-inf"))
        first = tl.argmax(best, 0)  # the first chunk holding the row's largest: the first index overall
        tl.store(out + b, tl.load(where_in + b * N_SPLIT + first).to(tl.int64))


def sample(logits: torch.Tensor, temperature: float, seed: torch.Tensor, step: torch.Tensor,
           rows: torch.Tensor | None = None, *, chunk: int = CHUNK, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """logits [B, V] (any float dtype, last dimension contiguous); seed, step: int64 [1] on the same device;
    rows: int64 [B], each row's place in the call, which keys its random numbers (None: 0..B-1). Returns the
    sampled token of every row [B] (int64). A fixed grid: graph-capturable."""
    B, V = logits.shape
    if rows is None:
        rows = torch.arange(B, device=logits.device)
    if logits.stride(-1) != 1:
        raise ValueError("sample needs the logits' last dimension contiguous")
    if temperature <= 0:
        raise ValueError(f"sampling needs a temperature above 0, not {temperature} (greedy decoding is argmax)")
    if B * V >= 2**31:
        raise ValueError(f"{B} rows of {V} logits pass the 2^31 random-number counter; sample fewer rows at once")
    n_split = triton.cdiv(V, chunk)
    best = torch.empty(B, n_split, device=logits.device, dtype=torch.float32)
    where = torch.empty(B, n_split, device=logits.device, dtype=torch.int32)
    _gumbel_partial[(B, n_split)](logits, seed, step, rows, best, where, V, logits.stride(0), 1.0 / temperature,
                           N_SPLIT=n_split, CHUNK=chunk, num_warps=num_warps)
    out = torch.empty(B, device=logits.device, dtype=torch.long)
    _gumbel_combine[(B,)](best, where, out, N_SPLIT=n_split, N_PAD=max(2, triton.next_power_of_2(n_split)))
    return out


def sample_eager(logits: torch.Tensor, temperature: float, *, greedy: bool = False,
                 logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [B, V] -> (the sampled token of every row [B], its log-prob under softmax(logits / T) [B] or None),
    drawn from torch's generator; `greedy`: the argmax instead."""
    logits = logits.float()
    if greedy:
        tok = logits.argmax(-1)
    else:
        # On CUDA G is drawn as -log E, E ~ Exp(1) (an exponential race: fewer passes over the [B, V] logits); a
        # CPU's exponential sampler is slow, so there G = -log(-log U), U ~ Uniform.
        if logits.is_cuda:
            noise = -torch.empty_like(logits).exponential_().log_()
        else:
            noise = -torch.log(-torch.log(torch.rand_like(logits).clamp_(min=1e-20)))
        tok = (logits / temperature + noise).argmax(-1)
    logp = torch.gather(torch.log_softmax(logits / temperature, -1), 1, tok[:, None])[:, 0] if logprobs else None
    return tok, logp
