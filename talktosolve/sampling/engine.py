"""Batched sampling from a causal LM: token ids in, token ids out.

The engine knows nothing of chats or tokenizers (nanochat's split): `generate` takes a batch of prompts as id
lists and returns each completion as an id list, ending with a stop id when one was sampled. Sampling is plain
temperature sampling (no top-k, no top-p), as the recipe trains on-policy at temperature 1: the sampler draws
from exactly the distribution the learner's log-probs describe.

Why a hand-written loop and not `model.generate`: `generate` re-validates and re-prepares its inputs every call,
and its default logits processors (top-k over the whole vocabulary) cost time and change the distribution; this
loop is one prefill and one one-token forward per step over a KV cache, with the sampler's randomness coming
from a caller's `torch.Generator` so runs repeat exactly. On a CUDA device the `StaticEngine` in
`talktosolve.sampling.fast_engine` (static cache, CUDA graphs) takes over.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from talktosolve.model.policy import base_model


def sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(logits / temperature). logits: [B, V] -> [B]."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def cut_at_stop(rows: list[list[int]], stop_ids: list[int]) -> list[list[int]]:
    """Each completion up to and including its first stop id (the whole row when it has none)."""
    stops = set(stop_ids)
    out = []
    for row in rows:
        end = next((i + 1 for i, tok in enumerate(row) if tok in stops), len(row))
        out.append(row[:end])
    return out


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [B, L] and attention mask [B, L], prompts aligned to the right so every row's next token is at L."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


class Session:
    """One copy's KV cache, carried from one of its turns to its next (a copy's next view extends its last view
    and its own message, so only the new part needs a forward pass).

    `ids[i]`: the tokens of row i whose keys and values are held; `k`, `v`: [layers, B, kv_heads, n, head_dim],
    row i's in columns [0, len(ids[i])). An engine that cannot reuse a cache ignores the session; one that can
    checks, row by row, that the new prompt begins with `ids[i]`, and otherwise reads the whole prompt.
    """

    def __init__(self):
        self.ids: list[list[int]] | None = None
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.keep = True
        """Hold this call's rows for a later turn; the rollout turns it off for a copy's last turn, whose cache
        nothing would read."""
        self.reused_tokens = 0
        """Prompt tokens served from the cache over the session's calls (a measure of what reuse saved)."""


class Engine:
    """Samples completions from `model` (a transformers causal LM, PEFT-wrapped or not)."""

    def __init__(self, model, *, stop_ids: list[int], pad_id: int, temperature: float = 1.0,
                 force_max_length: bool = False):
        if not stop_ids:
            raise ValueError("the engine needs at least one stop id (the tokenizer's end-of-message token)")
        self.model = model
        self.stop_ids = sorted(set(stop_ids))
        self.pad_id = pad_id
        self.temperature = temperature
        self.force_max_length = force_max_length
        # transformers renamed `past_key_values` to `cache` (5.2x); speak whichever this version's forward takes.
        base = base_model(model)
        self._cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int,
                 generator: torch.Generator | None = None, *, session: Session | None = None) -> list[list[int]]:
        """`session` is accepted for a common signature and ignored: this engine reads every prompt whole."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        was_training = self.model.training
        self.model.eval()
        try:
            return self._generate(prompts, max_new_tokens, generator)
        finally:
            self.model.train(was_training)

    def _generate(self, prompts, max_new_tokens, generator):
        device = self.device
        ids, mask = left_pad(prompts, self.pad_id, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L]: left padding must not shift positions
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self._cache_kw: cache})
        logits = out.logits[:, -1]  # [B, V]
        stop = torch.tensor(self.stop_ids, device=device)
        done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
        next_pos = positions[:, -1:] + 1  # [B, 1]
        steps = []
        for t in range(max_new_tokens):
            tok = sample(logits, self.temperature, generator)  # [B]
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            steps.append(tok)
            if not self.force_max_length:
                done = done | torch.isin(tok, stop)
                if bool(done.all()):
                    break
            if t + 1 == max_new_tokens:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, use_cache=True,
                             **{self._cache_kw: cache})
            logits = out.logits[:, -1]
            next_pos = next_pos + 1
        rows = torch.stack(steps, dim=1).tolist()  # [B, T] -> ragged
        return rows if self.force_max_length else cut_at_stop(rows, self.stop_ids)
