"""Who plays each seat of the chats a training step plays: the seating of the runs one process trains.

`build` makes the seating of a process's runs, with the engines its players sample in. One interface, two
seatings. Each step the loop calls `seat(step, active)` once (the players brought to this
step), `lineup(step, draw, batches, active)` once a draw (who sits where in each chat, and the sampling seed),
`release()` before learning (the sampler's memory, where `train.release_sampler` asks) and `close()` once
training is over:

- `Solo`: one run in the process. Its learner plays every seat (per role, each role's own seats), except the one
  seat of a chat a frozen partner takes (`train.partners`: `partners.partner_seats` says which problems and
  seats, `partners.lineups` turns them into a player per seat, `frozen.FrozenPartner` is the partner). Its
  sampling seed is a function of the run's seed, the step and the rank (data-parallel ranks sample apart).
- `Shared`: several runs share the process (`train.runs_per_process`), one LoRA adapter each: each run's
  adapter is stored in its own slot of one engine, and each run's chats are played by its slot in every seat.
  They share one sampling seed, a function of the group of seeds and the step. No partners (the config's checks
  refuse them).

A run whose weights another run's may replace in the model (`Shared`) keeps its own in `run.weights`;
`swap_in` and `swap_out` move them in and out of the model, and do nothing for a run alone (`run.weights` None).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from talktosolve.experiment.frozen import FrozenPartner, in_learners_engines, partner_slots
from talktosolve.experiment.partners import lineups, partner_seats
from talktosolve.learning import distributed
from talktosolve.model import checkpoint
from talktosolve.model.policy import compile_layers, stop_ids
from talktosolve.sampling.factory import make_engine
from talktosolve.sampling.fast_engine import StaticEngine
from talktosolve.sampling.rollout import Player


@dataclass
class Lineup:
    """One draw's seating: a player per seat (one map for every chat, or one map per chat), the sampling seed,
    and per problem the seat a frozen partner plays (None: no partners in this run)."""

    seating: dict | list
    seed: int
    frozen: list[str | None] | None = None


@dataclass
class Solo:
    """One run in the process: its learners in their seats, a frozen partner in one seat of some chats."""

    train: object
    """The config's `train` section (the partner share, problems and chats per step)."""
    seats: tuple[str, ...]
    learners: dict
    """Each seat's learner `Player` (the shared one in every seat)."""
    engines: list
    partner: FrozenPartner | None = None
    partner_rows: bool = False
    """The frozen partner samples in the learner's own engine (its rows through their own slot or none)."""
    rank: int = 0
    size: int = 1

    def seat(self, step: int, active: list) -> None:
        """A partner in the learner's engine: the learner's adapter stored in slot 0 (the slot engines sample
        from it, not the live weights). The frozen partner brought to this step."""
        if self.partner_rows:
            for engine in self.engines:
                engine.store_adapter(0)
        if self.partner is not None:
            self.partner.refresh(step)

    def lineup(self, step: int, draw: int, batches: list[list], active: list) -> Lineup:
        seed = (active[0].seed * 100_003 + step + self.rank * 1_000_000_007 if draw == 0
                else group_seed([active[0].seed], _draw_key(step, draw)))
        if self.partner is None:
            return Lineup(self.learners, seed)
        t = self.train
        frozen = partner_seats(active[0].seed, _draw_key(step, draw),
                               t.problems_per_step if draw == 0 else len(batches[0]), t.partners, self.seats)
        frozen = distributed.shard(frozen, self.rank, self.size) if draw == 0 else frozen
        return Lineup(lineups(frozen, t.chats_per_problem, self.seats, self.learners, self.partner.players), seed,
                      frozen)

    def release(self) -> None:
        if self.train.release_sampler:
            self.close()

    def close(self) -> None:
        """The engines' KV pools, graphs and sampling weights freed, whatever `release_sampler` says: training is
        over, and what follows (a recipe's evaluations) builds engines of its own."""
        for engine in self.engines:
            if isinstance(engine, StaticEngine):
                engine.release(weights=True)


@dataclass
class Shared:
    """Runs sharing the process: each active run's adapter in its own slot of one engine."""

    engine: object
    tokenizer: object
    params: list
    """The model's trainable tensors, into which each run's own are swapped."""
    seats: tuple[str, ...]
    chats_per_problem: int
    release_sampler: bool = False
    """`train.release_sampler`: free the engine's KV pool and graphs before each step's learning."""
    partner: None = None
    players: list = field(default_factory=list)
    """This step's players, one per active run (its slot), set by `seat`."""

    def seat(self, step: int, active: list) -> None:
        """Each active run's adapter stored in its slot, a `Player` per slot."""
        self.players = []
        for slot, run in enumerate(active):
            swap_in(self.params, run)
            self.engine.store_adapter(slot)
            self.players.append(Player(self.engine, self.tokenizer, f"policy-{slot}", slot))

    def lineup(self, step: int, draw: int, batches: list[list], active: list) -> Lineup:
        seating = [{seat: self.players[j] for seat in self.seats}
                   for j, batch in enumerate(batches) if batch for _ in range(len(batch) * self.chats_per_problem)]
        return Lineup(seating, group_seed([run.seed for run in active], _draw_key(step, draw)))

    def release(self) -> None:
        # Kept by default: the pool's graphs serve the next step's calls, where capturing them again (each size a
        # call's rows move into has its own) would cost every step. Freed, learning gains the pool's memory,
        # which grows with the runs sharing it.
        if self.release_sampler:
            self.engine.release()

    def close(self) -> None:
        """The engine's KV pool and graphs freed (see `Solo.close`)."""
        self.engine.release()


def build(cfg, protocol, tokenizer, device, roles: list, models: list, runs: list, params: list, rank: int = 0,
          size: int = 1) -> Solo | Shared:
    """The seating of `runs` (one run, or several sharing the process), with the engines its players sample in,
    one per role's model (`roles`: (name, seats) pairs, `models` their trainable models, whose layers are compiled
    here where the engine is the static one: `policy.compile_layers`).

    The partner of a LoRA run samples in the learner's own engine where it can (the base as rows with no
    adapter, a snapshot or a finished run in slots after the learner's): one call a turn for the learner's and
    the partner's rows, and no second copy of the model. A resumed run's partner snapshot is read back from
    its newest checkpoint."""
    t, shared = cfg.train, len(runs) > 1
    partner_rows = not shared and t.partners > 0 and in_learners_engines(cfg, models[0], roles)
    extra = partner_slots(cfg, roles) if partner_rows else {}
    slots = {name: len(runs) if shared else (1 + extra[name] if partner_rows else 0) for name, _ in roles}
    engines = [make_engine(m, stop_ids=stop_ids(tokenizer, m), pad_id=tokenizer.pad_token_id,
                           temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                           kind=cfg.chat.engine, slots=slots[name]) for (name, _), m in zip(roles, models)]
    for m, engine in zip(models, engines):  # before a frozen partner copies the model
        compile_layers(m, cfg.model, device, static_sampler=isinstance(engine, StaticEngine))
    if shared:
        return Shared(engines[0], tokenizer, params, protocol.seats, t.chats_per_problem, t.release_sampler)
    learners = {seat: Player(engine, tokenizer, f"policy{'-' + name if name else ''}", 0 if partner_rows else None)
                for (name, seats), engine in zip(roles, engines) for seat in seats}
    partner = None
    if t.partners > 0:
        partner = FrozenPartner(cfg, tokenizer, device, [(r.name, r.seats, r.model) for r in runs[0].roles],
                                {seat: learners[seat].engine for seat in protocol.seats} if partner_rows else None)
        if partner.snapshots and runs[0].start:
            partner.load(checkpoint.load_snapshots(checkpoint.latest(runs[0].dir), [r.name for r in runs[0].roles]))
    return Solo(t, protocol.seats, learners, engines, partner, partner_rows, rank, size)


def _draw_key(step: int, draw: int) -> int | str:
    """The first draw is the step's draw without informative groups: its key is the step's."""
    return step if draw == 0 else f"{step}-{draw}"


def group_seed(seeds: list[int], key: int | str) -> int:
    """The sampling seed of a draw shared by runs of these seeds (a function of the group and the draw)."""
    digest = hashlib.sha256(f"{sorted(seeds)}-{key}".encode()).hexdigest()
    return int(digest[:15], 16)


@torch.no_grad()
def swap_in(params: list, run) -> None:
    """The run's own trainable tensors into the model (runs sharing a process); nothing for a run alone."""
    if run.weights is not None:
        for p, w in zip(params, run.weights):
            p.copy_(w)


@torch.no_grad()
def swap_out(params: list, run) -> None:
    """The model's trainable tensors back into the run's own (runs sharing a process); nothing for a run alone."""
    if run.weights is not None:
        for p, w in zip(params, run.weights):
            w.copy_(p)
