"""The frozen partner of partner-mixture training (`train.partners`): who it is, and where it samples.

`train.partner` names it:

- `base`: the untrained base.
- `snapshot`: this run's own weights as they were at the latest multiple of `train.snapshot_every` steps (the
  initial weights, which are the base's, until the first), taken again at those steps (`refresh`). Its tensors
  go into every checkpoint, so a resumed run plays against the same snapshot as one never stopped.
- a folder: a finished run's final weights (or an adapter folder); a run with per-role weights plays each seat
  with that seat's weights.

Where it samples. Under LoRA, where the learner's sampler can run in slot mode (`in_learners_engines`), the
partner's rows are rows of the learner's own engine: the base reads no adapter, a snapshot or a finished run's
adapter sits in a slot after the learner's (`partner_slots`), so one call a turn serves the learner's and the
partner's rows, and no second copy of the model is held. Otherwise (full fine-tuning, whose weights move; a
model the static engine does not support; a finished run's adapter of another shape) the partner is a model of
its own with its own sampler: a copy of the base, of the learner (a snapshot), or of the finished run.

Which chats seat the partner, and in which seat, is `partners.py`'s (pure); this module holds the models.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from talktosolve.model.policy import adapter_shape, load_base, load_player_model, stop_ids, trained_weights, weights_key
from talktosolve.sampling.factory import make_engine, slot_mode_fits
from talktosolve.sampling.rollout import Player


def in_learners_engines(cfg, model, roles) -> bool:
    """Whether the partner can sample in the learner's slot-mode engines: a LoRA learner on the static engine,
    and for a finished run, adapters of the learner's shape (rank, alpha, targets) in every seat."""
    if cfg.model.finetune != "lora" or not slot_mode_fits(model, cfg.chat.engine):
        return False
    if cfg.train.partner in ("base", "snapshot"):
        return True
    c = model.peft_config[next(iter(model.peft_config))]
    mine = (c.r, c.lora_alpha, tuple(sorted(c.target_modules)))
    return all(adapter_shape(trained_weights(cfg.train.partner, seat)) == mine for _, seats in roles for seat in seats)


def partner_slots(cfg, roles) -> dict[str, int]:
    """Slots each role's engine holds for the partner, besides the learner's own (slot 0): none for the base,
    one for a snapshot, one per distinct set of a finished run's weights among the role's seats."""
    kind = cfg.train.partner
    if kind == "base":
        return {name: 0 for name, _ in roles}
    if kind == "snapshot":
        return {name: 1 for name, _ in roles}
    return {name: len({trained_weights(kind, seat) for seat in seats}) for name, seats in roles}


@torch.no_grad()
def _copy_into(tensors: dict[str, torch.Tensor], source: dict[str, torch.Tensor]) -> None:
    """tensors[n] = source[n] in place, for every name of `tensors`."""
    for n, t in tensors.items():
        t.copy_(source[n])


class _Copy:
    """A snapshot sampled from a frozen copy of the learner's model: its trainable tensors are the copy's."""

    def __init__(self, model):
        self.frozen = copy.deepcopy(model).eval().requires_grad_(False)
        mine = dict(self.frozen.named_parameters())
        self.tensors = {n: mine[n] for n, p in model.named_parameters() if p.requires_grad}

    def take(self, model) -> None:
        _copy_into(self.tensors, dict(model.named_parameters()))

    def put(self, tensors) -> None:
        _copy_into(self.tensors, tensors)


class _Slot:
    """A snapshot held in a slot of the learner's engine, and its tensors kept beside it (for checkpoints)."""

    def __init__(self, model, engine, slot: int):
        self.model, self.engine, self.slot = model, engine, slot
        self.tensors = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    def take(self, model) -> None:
        _copy_into(self.tensors, dict(model.named_parameters()))
        self.engine.store_adapter(self.slot)  # the live weights are the snapshot now

    def put(self, tensors) -> None:
        _copy_into(self.tensors, tensors)
        store_in_slot(self.engine, self.model, self.tensors, self.slot)


@contextmanager
def _weights_kept(model):
    """The model's trainable parameters by name, to overwrite for a while: on leaving, each is bit for bit
    what it was on entering."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    live = {n: p.detach().clone() for n, p in params.items()}
    try:
        yield params
    finally:
        with torch.no_grad():
            for n, value in live.items():
                params[n].copy_(value)


@torch.no_grad()
def store_in_slot(engine, model, tensors: dict[str, torch.Tensor], slot: int) -> None:
    """Put `tensors` (trainable parameter name -> value) in the engine's slot `slot`, leaving the model's own
    weights as they were."""
    with _weights_kept(model) as params:
        for n, value in tensors.items():
            params[n].copy_(value)
        engine.store_adapter(slot)


@torch.no_grad()
def _adapter_tensors(model, folder) -> dict[str, torch.Tensor]:
    """A finished run's adapter as the learner's trainable parameter names -> values (peft maps the names)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    with _weights_kept(model) as params:
        device = str(next(iter(params.values())).device)
        set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors"), device=device))
        return {n: p.detach().clone() for n, p in params.items()}


class FrozenPartner:
    """The partner's player in each seat, and for a snapshot where its weights are held."""

    def __init__(self, cfg, tokenizer, device, learners: list, engines: dict | None = None):
        """`learners`: the run's `(role name, seats, model)` sets of weights. `engines`: `{seat: the slot-mode
        engine of the learner in that seat}` when the partner samples there (`in_learners_engines`; each engine
        built with `partner_slots` slots after the learner's); None: models of its own."""
        self.kind = cfg.train.partner
        self.every = cfg.train.snapshot_every
        self.snapshots: list[tuple[str, object, _Copy | _Slot]] = []  # (role name, learner model, holder)
        self.players: dict[str, Player] = {}
        role_of = {seat: (name, model) for name, seats, model in learners for seat in seats}
        if engines is not None:
            self._in_engines(tokenizer, role_of, engines)
        else:
            self._own_models(cfg, tokenizer, device, role_of)

    def _in_engines(self, tokenizer, role_of, engines) -> None:
        slots: dict[tuple[int, object], int] = {}  # (engine, weights) -> slot
        for seat, engine in engines.items():
            name, model = role_of[seat]
            if self.kind == "base":
                self.players[seat] = Player(engine, tokenizer, "partner-base", None)
                continue
            weights = name if self.kind == "snapshot" else trained_weights(self.kind, seat)
            if (id(engine), weights) not in slots:
                slot = 1 + sum(e == id(engine) for e, _ in slots)
                slots[(id(engine), weights)] = slot
                if self.kind == "snapshot":
                    self.snapshots.append((name, model, _Slot(model, engine, slot)))
                else:
                    store_in_slot(engine, model, _adapter_tensors(model, weights), slot)
            label = "partner-snapshot" if self.kind == "snapshot" else f"partner-{seat}"
            self.players[seat] = Player(engine, tokenizer, label, slots[(id(engine), weights)])

    def _own_models(self, cfg, tokenizer, device, role_of) -> None:
        by_weights: dict = {}
        for seat in cfg.chat.seats:
            name, model = role_of[seat]
            key = None if self.kind == "base" else name if self.kind == "snapshot" else trained_weights(self.kind, seat)
            if key not in by_weights:
                if self.kind == "snapshot":
                    holder = _Copy(model)
                    self.snapshots.append((name, model, holder))
                    frozen = holder.frozen
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

    def refresh(self, step: int) -> None:
        """At a multiple of `snapshot_every`, take the learner's trainable weights as the snapshot."""
        if self.kind != "snapshot" or step % self.every:
            return
        for _, model, holder in self.snapshots:
            holder.take(model)

    def tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """The snapshot's trainable tensors by role name, for a checkpoint (empty for other partners)."""
        return {role: {n: t.detach().cpu().contiguous() for n, t in holder.tensors.items()}
                for role, _, holder in self.snapshots}

    def load(self, tensors: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore the snapshot from a checkpoint's `tensors()`."""
        for role, _, holder in self.snapshots:
            holder.put(tensors[role])


def partner_key(partner: str) -> str:
    """What identifies a partner in a run's key: `base`, `snapshot`, or the folder's identity as an evaluation
    names its players (`policy.weights_key`: the run's config key, else its resolved path)."""
    return partner if partner in ("base", "snapshot") else weights_key(partner)
