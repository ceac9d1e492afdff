"""One training step of the runs a process trains, in named phases (`Loop`): `seat` (the players brought to the
step: `seating.py` says who plays each seat, for one run or for runs sharing the process), `draw` (the step's
problems, played and scored, and drawn again for informative groups), `release` (the sampler's memory, for
learning), `learn` (each run's update, its metrics, its logs and its checkpoint), and `keep` (every run's
checkpoint at the step, when a signal stops training between checkpoints). `train.train_runs` sets the loop up
and runs it step by step; the records of a run in this process (`Run`, `Role`) and what a step writes
(`step_metrics`, `_record`) live here with it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from talktosolve.arms import ARMS
from talktosolve.config import Config
from talktosolve.experiment.frozen import FrozenPartner
from talktosolve.experiment.seating import Shared, Solo, swap_in, swap_out
from talktosolve.learning import distributed
from talktosolve.learning.grpo import Sample, StepStats, group_advantages, grpo_update
from talktosolve.learning.informative import chosen, enough, informative, more_problems
from talktosolve.model import checkpoint
from talktosolve.protocol import Protocol
from talktosolve.sampling.rollout import play_chats
from talktosolve.store import append_jsonl
from talktosolve.team import reward
from talktosolve.team.talk import aggregate_talk, chat_talk


def learning_rate(t, step: int) -> float:
    """train.lr, ramped up linearly over the first train.warmup_steps steps (step 0 uses lr / warmup_steps)."""
    return t.lr * min(1.0, (step + 1) / t.warmup_steps) if t.warmup_steps else t.lr


def step_problems(problems: list, seed: int, step: int, n: int) -> list:
    """The problems of step `step`: a stream of seeded permutations (epochs) of the training set."""
    orders: dict[int, list[int]] = {}  # one shuffle per epoch this step touches
    out = []
    for i in range(step * n, step * n + n):
        epoch, pos = divmod(i, len(problems))
        if epoch not in orders:
            orders[epoch] = list(range(len(problems)))
            random.Random(f"{seed}-{epoch}").shuffle(orders[epoch])
        out.append(problems[orders[epoch][pos]])
    return out


@dataclass
class Role:
    """One set of a run's trained weights and the seats it plays: the shared adapter (every seat), or, with
    per-role adapters, one seat's own (its own model, engine and optimizer)."""

    name: str
    """`""` for the shared weights; the seat's name for a role's (its checkpoint subfolder and final/ folder)."""
    seats: tuple[str, ...]
    model: object
    params: list
    optimizer: torch.optim.Optimizer | None = None


@dataclass
class Run:
    """One (arm, seed) run of this process."""

    arm: str
    seed: int
    dir: Path
    key: str
    loggers: tuple = ()
    roles: list[Role] = field(default_factory=list)
    start: int = 0
    weights: list | None = None
    """Its trainable tensors while the model holds another run's (runs sharing a process); None when alone."""
    problems: list = field(default_factory=list)
    """The training problems it draws from: all of them, or its arm's pool (`pool.py`)."""

    @property
    def name(self) -> str:
        return f"{self.arm} seed {self.seed}"

    def parts(self) -> checkpoint.Parts:
        return {role.name: (role.model, role.optimizer) for role in self.roles}


@dataclass
class Loop:
    """What every training step reads, set up once by `train_runs`: the runs, the model's trainable tensors, the
    seating (`seating.Solo` for one run, `seating.Shared` for runs sharing the process). Its methods are the
    step's phases, in order: `seat` (the players brought to this step), `draw` (the problems, played and scored,
    drawn again for informative groups), `release` (the sampler's memory, for learning), `learn` (one run's
    update, its metrics and logs)."""

    cfg: Config
    protocol: Protocol
    tokenizer: object
    device: torch.device
    rank: int
    size: int
    params: list
    """The model's trainable tensors, into which runs sharing a process swap their own."""
    seating: Solo | Shared
    reference: object

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def seat(self, step: int, active: list[Run]) -> None:
        """The players brought to this step: each run's weights in its slot, the frozen partner refreshed."""
        self.seating.seat(step, active)

    def play(self, step: int, draw: int, passes: list[list[tuple]], active: list[Run]) -> list[list[_Group]]:
        """One sampling pass of the step (its first batch is `draw`): every run's problems, each with the batch it
        belongs to (some runs may have none), in one call a turn -> each run's groups, in the order of its
        problems."""
        G = self.cfg.train.chats_per_problem
        batches = [[p for p, _ in mine] for mine in passes]
        who = [j for j, b in enumerate(batches) if b]
        lineup = self.seating.lineup(step, draw, batches, active)
        chats = play_chats([p for j in who for p in batches[j]],
                           [ARMS[active[j].arm] for j in who for _ in batches[j]],
                           lineup.seating, self.protocol, self.cfg.chat, chats_per_problem=G, seed=lineup.seed)
        reward.score_chats(chats, self.protocol)
        out: list[list[_Group]] = [[] for _ in batches]
        for j in who:
            mine, chats = chats[:len(batches[j]) * G], chats[len(batches[j]) * G:]
            out[j] = [_Group(mine[i * G:(i + 1) * G], None if lineup.frozen is None else lineup.frozen[i], batch)
                      for i, (_, batch) in enumerate(passes[j])]
        return out

    def draw(self, step: int, active: list[Run]) -> tuple[list[list[_Group]], list[int]]:
        """The step's problems for each run, played and scored; with informative groups, drawn again (up to
        `max_draws` batches, `draw_batches` of them a pass) for each run whose groups do not yet hold enough
        signal. -> (each run's groups, in the order drawn; how many problems each run's step wants)."""
        t = self.cfg.train
        first = [distributed.shard(step_problems(run.problems, run.seed, step, t.problems_per_step),
                                   self.rank, self.size) for run in active]
        wanted = [len(b) for b in first]
        cap, at_once = (t.max_draws, t.draw_batches) if t.dynamic_sampling else (1, 1)
        groups: list[list[_Group]] = [[] for _ in active]
        drawn = 0  # batches drawn so far this step
        while drawn < cap:
            batches = range(drawn, min(drawn + at_once, cap))
            passes = [[] if drawn and enough(_rewards(g), n) else _batches(run, step, batches, n, b0, g)
                      for run, g, n, b0 in zip(active, groups, wanted, first)]
            if drawn and not any(passes):
                break
            for g, new in zip(groups, self.play(step, drawn, passes, active)):
                g += new
            drawn = batches.stop
        return groups, wanted

    def keep(self, step: int, runs: list[Run]) -> None:
        """Each run's checkpoint at the end of `step`, for a stop between checkpoints: its weights swapped into
        the model first (runs sharing a process); one `learn` already saved there is not written again."""
        partner = self.seating.partner
        for run in runs:
            if step + 1 in checkpoint.checkpoints(run.dir):
                continue
            swap_in(self.params, run)
            if self.rank == 0:
                _save(run, step, partner)

    def release(self) -> None:
        """The sampler's memory, given back before learning."""
        self.seating.release()

    def learn(self, step: int, run: Run, groups: list[_Group], wanted: int, shares: int, sample_seconds: float,
              peak_sample: float | None) -> dict:
        """One run's update from its groups (the informative ones, with that option), then its metrics row and
        transcripts written (rank 0) and its checkpoint when one is due; `shares`: the runs this step's sampling
        served. -> the row."""
        t, protocol, G = self.cfg.train, self.protocol, self.cfg.train.chats_per_problem
        learn_began = time.perf_counter()
        if self.gpu:  # the two phases' peaks apart: they call for different remedies
            torch.cuda.reset_peak_memory_stats(self.device)
        swap_in(self.params, run)
        kept = chosen(_rewards(groups), wanted) if t.dynamic_sampling else list(range(len(groups)))
        mine = [c for i in kept for c in groups[i].chats]
        partner = self.seating.partner
        frozen_seats = None if partner is None else [groups[i].frozen for i in kept for _ in range(G)]
        role_stats = []
        for role in run.roles:
            for group in role.optimizer.param_groups:  # a function of the step: resuming needs no state
                group["lr"] = learning_rate(t, step)
            role_stats.append(learn_role(role.model, role.optimizer, mine, t, self.tokenizer.pad_token_id,
                                         self.device, protocol.n_turns, frozen_seats, role.seats, self.reference,
                                         self.cfg.chat.temperature))
        stats = _combined([s for s in role_stats if s is not None])
        swap_out(self.params, run)
        learned = time.perf_counter()
        transcripts = distributed.gather([
            {"step": step, **c.transcript(), **_partner_record(g.frozen, partner, step),
             **({"draw": g.draw, "trained": i in kept} if t.dynamic_sampling else {})}
            for i, g in enumerate(groups) for c in g.chats])
        row = step_metrics(step, [c for c in transcripts if c.get("draw", 0) == 0], protocol, stats,
                           sample_seconds + learned - learn_began, sample_seconds, learned - learn_began)
        if t.dynamic_sampling:
            row.update(draw_metrics(groups, kept))
        if run.weights is not None:  # runs sharing a process: how many this step's sampling served
            row["perf/shared_runs"] = shares
        if self.gpu:
            peak_learn = torch.cuda.max_memory_allocated(self.device) / 2**30
            row.update({"perf/peak_gpu_gb": max(peak_sample, peak_learn), "perf/peak_sample_gb": peak_sample,
                        "perf/peak_learn_gb": peak_learn})
        if self.rank == 0:
            _record(run, step, row, transcripts, t, partner)
        return row


def learn_role(model, optimizer, chats: list, t, pad_id: int, device, messages_per_chat: int,
           frozen: list[str | None] | None = None, seats=None, reference=None,
           temperature: float = 1.0) -> StepStats | None:
    """One GRPO update of one set of weights from one run's chats (grouped by problem): advantages, then the
    samples of the seats these weights play (`seats`; None: every seat). `frozen[i]`: the seat a frozen
    partner played in chat i (None: self-play); its messages are not trained. Only the trained messages count
    in the normaliser, so each role's loss is a mean over its own tokens. None when these weights wrote no
    message this step (every one of their seats was frozen): no update."""
    G = t.chats_per_problem
    adv = group_advantages([[c.reward for c in chats[i:i + G]] for i in range(0, len(chats), G)])
    frozen = frozen or [None] * len(chats)
    samples = []
    for ci, (c, a) in enumerate(zip(chats, [a for group in adv for a in group])):
        c.advantage = a
        samples += [Sample(tr.prompt_ids, tr.completion_ids, a, ci) for tr in c.turns
                    if tr.speaker != frozen[ci] and (seats is None or tr.speaker in seats)]
    n_tokens = int(distributed.sum_scalar(sum(len(x.completion_ids) for x in samples), device))
    if n_tokens == 0:
        return None
    return grpo_update(model, optimizer, samples, pad_id=pad_id, n_tokens=n_tokens,
                       chats_per_microbatch=t.chats_per_microbatch, grad_clip=t.grad_clip, device=device,
                       microbatch_tokens=t.microbatch_tokens, messages_per_chat=messages_per_chat,
                       kl_coef=t.kl_coef, reference=reference, temperature=temperature)


def _combined(stats: list[StepStats]) -> StepStats:
    """The step's figures over its roles' updates: losses weighted by tokens (the loss one update over all of
    them would report), gradient norms as the norm of all roles' gradients together, counts summed."""
    if len(stats) == 1:
        return stats[0]
    tokens = sum(s.tokens for s in stats)
    return StepStats(loss=sum(s.loss * s.tokens for s in stats) / tokens,
                     grad_norm=sum(s.grad_norm ** 2 for s in stats) ** 0.5, tokens=tokens,
                     samples=sum(s.samples for s in stats), skipped=sum(s.skipped for s in stats),
                     row_tokens=sum(s.row_tokens for s in stats), padded_tokens=sum(s.padded_tokens for s in stats),
                     microbatches=sum(s.microbatches for s in stats))


def _partner_record(seat: str | None, partner: FrozenPartner | None, step: int) -> dict:
    """A transcript's partner: the seat the frozen partner played (only in runs that train with partners), and
    for a snapshot partner the step whose weights it held."""
    if partner is None:
        return {}
    held = partner.snapshot_step(step) if seat is not None else None
    return {"partner_seat": seat, **({"partner_step": held} if held is not None else {})}


@dataclass
class _Group:
    """The chats of one problem in one step (a GRPO group), the seat a frozen partner played in all of them (or
    None) and the draw of the step it came from."""

    chats: list
    frozen: str | None
    draw: int


def _batches(run: Run, step: int, batches: range, n: int, first: list, groups: list[_Group]) -> list[tuple]:
    """One run's problems of one sampling pass, each with the batch it belongs to: batch 0 is the step's first
    (`first`), a later one `n` problems new to the step (`more_problems`), as if drawn one batch at a time."""
    seen = {g.chats[0].problem_id for g in groups}
    out: list[tuple] = []
    for batch in batches:
        new = first if batch == 0 else more_problems(run.problems, run.seed, step, batch, n, seen)
        seen |= {p.id for p in new}
        out += [(p, batch) for p in new]
    return out


def _rewards(groups: list[_Group]) -> list[list[float]]:
    return [[c.reward for c in g.chats] for g in groups]


def draw_metrics(groups: list[_Group], kept: list[int]) -> dict:
    """With informative groups: how many batches the step drew, the share of its drawn groups whose rewards
    differ, and the mean reward of the chats it learned from."""
    trained = [c.reward for i in kept for c in groups[i].chats]
    return {"train/draws": max(g.draw for g in groups) + 1, "train/groups_drawn": len(groups),
            "train/informative_share": sum(informative(r) for r in _rewards(groups)) / len(groups),
            "train/reward_trained": sum(trained) / len(trained)}


def _record(run: Run, step: int, row: dict, transcripts: list, t, partner: FrozenPartner | None) -> None:
    """A step's logs, then its checkpoint when one is due (the model holds this run's weights)."""
    append_jsonl(run.dir / "transcripts.jsonl", transcripts)
    append_jsonl(run.dir / "metrics.jsonl", [row])
    for log in run.loggers:
        log(row, step)
    if (step + 1) % t.checkpoint_every == 0 or step + 1 == t.steps:
        _save(run, step, partner)


def _save(run: Run, step: int, partner: FrozenPartner | None) -> None:
    """The run's checkpoint at the end of `step` (the model holds its weights), with a snapshot partner's."""
    checkpoint.save(run.dir, run.parts(), step + 1, snapshots=partner.tensors() if partner else None)


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def step_metrics(step: int, chats: list[dict], protocol: Protocol, stats, seconds: float, sample_seconds: float,
                 learn_seconds: float = 0.0) -> dict:
    """A step's metrics row, from its chats' transcripts (every rank's, when data-parallel)."""
    talk = aggregate_talk([chat_talk(c, protocol) for c in chats])
    n = len(chats)
    return {
        "step": step,
        "train/reward": sum(c["reward"] for c in chats) / n,
        **{f"train/acc_{seat}": sum(c["correct"][seat] for c in chats) / n for seat in protocol.seats},
        "talk/send": talk.get("send"),
        "talk/use": talk.get("use"),
        "talk/ask": talk.get("ask"),
        "loss/policy": stats.loss,
        "loss/grad_norm": stats.grad_norm,
        "perf/tokens": stats.tokens,
        "perf/seconds": seconds,
        "perf/sample_seconds": sample_seconds,
        "perf/learn_seconds": learn_seconds,
        "perf/learn_row_tokens": stats.row_tokens,
        "perf/learn_padded_tokens": stats.padded_tokens,
        "perf/learn_skipped_messages": stats.skipped,
        **({"loss/kl": stats.kl} if stats.kl is not None else {}),
    }
