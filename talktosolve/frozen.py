"""The frozen partner of partner-mixture training (`train.partners`): who it is, and its sampler.

`train.partner` names it:

- `base`: the untrained base. Under LoRA, where the learner's sampler can run in slot mode, the partner's rows
  are that sampler's rows with no adapter: one call a turn serves the learner's and the partner's rows
  (`fast_engine`, `train.train_runs`). Otherwise (full fine-tuning, whose weights move; a model the static
  engine does not support) a second copy of the base with its own sampler.
- `snapshot`: this run's own weights as they were at the latest multiple of `train.snapshot_every` steps (the
  initial weights, which are the base's, until the first): a copy of each of the learner's sets of weights,
  overwritten at those steps (`refresh`). Its tensors go into every checkpoint, so a resumed run plays against
  the same snapshot as one never stopped.
- a folder: a finished run's final weights (or an adapter folder); a run with per-role weights plays each seat
  with that seat's weights.

Which chats seat the partner, and in which seat, is `partners.py`'s (pure); this module holds the models.
"""

from __future__ import annotations

import copy

import torch

from talktosolve.evaluate import weights_key
from talktosolve.fast_engine import make_engine
from talktosolve.policy import load_base, load_player_model, stop_ids, trained_weights
from talktosolve.rollout import Player


class FrozenPartner:
    """The partner's player in each seat; for a snapshot, the copies it samples from."""

    def __init__(self, cfg, tokenizer, device, learners: list | None = None, base_engines: dict | None = None):
        """`learners`: the run's `(role name, seats, model)` sets of weights (a snapshot copies them);
        `base_engines`: `{seat: the learner's slot-mode engine}`, whose base weights then play the base partner
        (rows with no adapter) instead of a copy of the base."""
        self.kind = cfg.train.partner
        self.every = cfg.train.snapshot_every
        self.copies: list[tuple[str, object, object]] = []  # (role name, learner model, its frozen copy)
        self.players: dict[str, Player] = {}
        by_weights: dict = {}
        seats = cfg.chat.seats
        for seat in seats:
            if base_engines is not None:
                self.players[seat] = Player(base_engines[seat], tokenizer, "partner-base", adapter=None)
                continue
            if self.kind == "base":
                key = None
            elif self.kind == "snapshot":
                key = next(name for name, mine, _ in learners if seat in mine)
            else:
                key = trained_weights(self.kind, seat)
            if key not in by_weights:
                if self.kind == "snapshot":
                    name, _, model = next(r for r in learners if r[0] == key)
                    frozen = copy.deepcopy(model).eval().requires_grad_(False)
                    self.copies.append((name, model, frozen))
                elif self.kind == "base":
                    frozen = load_base(cfg.model, device).eval().requires_grad_(False)
                else:
                    frozen = load_player_model(cfg, self.kind, device, seat).requires_grad_(False)
                engine = make_engine(frozen, stop_ids=stop_ids(tokenizer, frozen), pad_id=tokenizer.pad_token_id,
                                     temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                                     kind=cfg.chat.engine)
                by_weights[key] = Player(engine, tokenizer, f"partner-{self.kind if key is None else seat}")
            self.players[seat] = by_weights[key]

    def snapshot_step(self, step: int) -> int | None:
        """The step whose weights the snapshot partner holds during `step` (None for other partners)."""
        return step // self.every * self.every if self.kind == "snapshot" else None

    @torch.no_grad()
    def refresh(self, step: int) -> None:
        """At a multiple of `snapshot_every`, copy the learner's trainable weights into the snapshot."""
        if self.kind != "snapshot" or step % self.every:
            return
        for _, model, frozen in self.copies:
            mine = dict(frozen.named_parameters())
            for name, p in model.named_parameters():
                if p.requires_grad:
                    mine[name].copy_(p)

    def tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """The snapshot's trainable tensors by role name, for a checkpoint (empty for other partners)."""
        out = {}
        for role, model, frozen in self.copies:
            trainable = {n for n, p in model.named_parameters() if p.requires_grad}
            out[role] = {n: p.detach().cpu().contiguous() for n, p in frozen.named_parameters() if n in trainable}
        return out

    @torch.no_grad()
    def load(self, tensors: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore the snapshot from a checkpoint's `tensors()`."""
        for role, _, frozen in self.copies:
            mine = dict(frozen.named_parameters())
            for name, value in tensors[role].items():
                mine[name].copy_(value)


def partner_key(partner: str) -> str:
    """What identifies a partner in a run's key: `base`, `snapshot`, or the folder's identity as an evaluation
    names its players (`evaluate.weights_key`: the run's config key, else its resolved path)."""
    return partner if partner in ("base", "snapshot") else weights_key(partner)
