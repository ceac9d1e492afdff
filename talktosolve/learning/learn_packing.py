"""The learner's rows packed into one sequence, each leading run that rows share read once (CUDA).

A step's rows (`grpo.Sequence`: a message's view and tokens, or a chat's final view holding its writer's earlier
message) share long leading runs: every row of one seat on one problem begins with the same view (the seat's role
prompt, its facts, the question), and the four chats of a problem give each seat four such rows. Right-padded,
a micro-batch reads every row's run again, and its padding. Packed, a micro-batch is one sequence of N tokens:

    [run of group 0] [run of group 1] ... [rest of row 0] [rest of row 1] ...

where a group's run is read once and each member contributes only what follows it (a row in no group contributes
all of its tokens as its rest). Positions restart per row: a run counts from 0, a member's rest continues from its
run's length. Attention goes through FlashAttention's varlen kernel with one segment per run and per rest: a run's
queries attend causally to the run, a rest's queries to its run's keys and then to its own, causal from the bottom
right. The keys and values of a run depend on its tokens alone (attention is causal), so each member's log-probs
are those of its whole row, and the gradient reaching the run's keys and values sums over its members (the keys
are gathered per segment by one index per layer, whose backward adds), as it sums over the copies each row held.

Groups are `prefixes.plan`'s (the sampler's: sort, then the partition that reads the fewest tokens, one level);
here nothing is padded, so a group pays whenever its run is at least `prefixes.LEAST` tokens. Micro-batches are
filled in the rows' sorted order, so a problem's rows meet in one, up to `max_tokens` packed tokens.

Transformers has no attention that lets one segment's queries read another's keys (its varlen paths take one
segment per sequence), so the attention is registered in its `AttentionInterface` here and selected for the
learner's forward pass alone (`selected`). Everything else in the model is transformers' own.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from talktosolve.sampling import prefill_attention, prefixes

NAME = "talktosolve_packed"
"""The attention's name in transformers' `AttentionInterface`."""


@dataclass
class Packed:
    """One micro-batch as one sequence: its tokens, their positions, the attention's segments, and where each
    trained token's predicting state sits. Segment s has queries cu_q[s] .. cu_q[s+1] - 1 of the sequence and keys
    keys[cu_k[s] .. cu_k[s+1] - 1] (indices into the sequence)."""

    ids: torch.Tensor
    """[N] token ids."""
    positions: torch.Tensor
    """[N] each token's position in its own row."""
    keys: torch.Tensor
    """[Nk] the sequence index of each segment's keys, segment after segment."""
    cu_q: torch.Tensor
    """[S + 1] int32 offsets of each segment's queries."""
    cu_k: torch.Tensor
    """[S + 1] int32 offsets of each segment's keys in `keys`."""
    max_q: int
    max_k: int
    predict: torch.Tensor
    """[n] the sequence index of the state that predicts each trained token, rows and spans in order."""
    targets: torch.Tensor
    """[n] the trained tokens."""
    advantages: torch.Tensor
    """[n] float32, each trained token's advantage."""
    kernel: object = field(default=None, repr=False)
    """What attends a segment's queries to its keys: `prefill_attention.flash`, or `reference` in tests."""

    def __len__(self) -> int:
        return self.ids.numel()


def _plan(rows) -> tuple[list[int], list[int], list[int], list[int]]:
    """(group, shared) per row and (leaders, runs) per group, as `prefixes.plan` chooses them."""
    p = prefixes.plan([r.ids for r in rows], [0] * len(rows), keep_below=math.inf)
    if p is None:
        return [-1] * len(rows), [0] * len(rows), [], []
    return p.group, p.shared, p.leaders, p.runs


def length(rows) -> int:
    """How many tokens `rows` packed read: every row's tokens, less what its group's run saves."""
    _, shared, _, runs = _plan(rows)
    return sum(len(r.ids) for r in rows) - sum(shared) + sum(runs)


def upload(t: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on `device`, copied without waiting for the device: on CUDA through pinned memory (a copy
    from pageable memory synchronises the stream, so the host could not queue a micro-batch's kernels while the
    device still runs the previous one's)."""
    device = torch.device(device)
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def pack(rows, device, kernel=None) -> Packed:
    """`rows` (`grpo.Sequence`s) as one packed sequence on `device`."""
    group, shared, leaders, runs = _plan(rows)
    ids, positions, keys, q_len, k_len = [], [], [], [], []
    at, run_at = 0, []
    for leader, run in zip(leaders, runs):
        run_at.append(at)
        ids.append(rows[leader].ids[:run])
        positions.append(np.arange(run))
        keys.append(np.arange(at, at + run))
        q_len.append(run)
        k_len.append(run)
        at += run
    predict, targets, advantages = [], [], []
    for r, g, s in zip(rows, group, shared):
        n = len(r.ids) - s
        if s:
            keys.append(np.arange(run_at[g], run_at[g] + s))
        keys.append(np.arange(at, at + n))
        ids.append(r.ids[s:])
        positions.append(np.arange(s, len(r.ids)))
        q_len.append(n)
        k_len.append(s + n)
        row = np.asarray(r.ids)
        for start, end, a in r.spans:
            before = np.arange(start - 1, end - 1)  # token t is predicted from the state at t - 1: in the run or the rest
            predict.append(np.where(before < s, (run_at[g] if s else 0) + before, at + before - s))
            targets.append(row[start:end])
            advantages.append(np.full(end - start, a, dtype=np.float32))
        at += n

    def tensor(parts, dtype=torch.long):
        flat = np.concatenate([np.asarray(x) for x in parts]) if parts else np.zeros(0)
        return upload(torch.from_numpy(flat).to(dtype), device)

    def offsets(lengths):
        return upload(torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32), device)

    return Packed(tensor(ids), tensor(positions), tensor(keys), offsets(q_len), offsets(k_len), max(q_len),
                  max(k_len), tensor(predict), tensor(targets), tensor(advantages, torch.float32),
                  kernel if kernel is not None else prefill_attention.flash)


def microbatches(rows, max_tokens: int) -> list[list]:
    """`rows` in sorted token order (rows that share a run are neighbours), cut into micro-batches of at most
    `max_tokens` packed tokens each; a row longer than that goes alone. The partition is grown row by row
    (`prefixes.Stretches`), so each micro-batch's packed length is `length`'s at one partition step per row."""
    out: list[list] = []
    batch: list = []
    stretches, tokens = prefixes.Stretches(), 0
    for row in sorted(rows, key=lambda r: r.ids):
        saved = stretches.push(prefixes.run_between(batch[-1].ids, row.ids) if batch else 0)
        if batch and tokens + len(row.ids) - saved > max_tokens:
            out.append(batch)
            batch, stretches, tokens = [], prefixes.Stretches(), 0
            stretches.push(0)
        batch.append(row)
        tokens += len(row.ids)
    return out + ([batch] if batch else [])


def supported(model) -> bool:
    """Whether the transformers model `model` reaches its attention through `AttentionInterface`, over full causal
    attention (no sliding window): what packed rows need."""
    config = model.config
    return bool(getattr(model, "_supports_attention_backend", False)) and not getattr(config, "use_sliding_window",
                                                                                       False)


@torch.compiler.disable  # the segments' lengths change every micro-batch; compiled layers run around this call
def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
              packed: Packed | None = None, **kwargs):
    """transformers' attention signature: query [1, Hq, N, D], key and value [1, Hkv, N, D] -> ([1, N, Hq, D],
    None). Reads the segments from the forward pass's `packed` keyword."""
    if packed is None:
        raise ValueError(f"the {NAME} attention needs the packed rows (the `packed` keyword of the forward pass)")
    if dropout:
        raise ValueError(f"the {NAME} attention has no dropout; the model's attention dropout is {dropout}")
    q = query[0].transpose(0, 1)  # [N, Hq, D]
    k = key[0].transpose(0, 1).index_select(0, packed.keys)  # [Nk, Hkv, D]
    v = value[0].transpose(0, 1).index_select(0, packed.keys)
    return packed.kernel(q, k, v, packed, scale=scaling)[None], None


@contextmanager
def selected(model):
    """The packed attention as `model`'s attention for the duration (the learner's forward pass)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before


def _register():
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)


_register()
