"""Train one arm and seed: the GRPO loop, top to bottom, writing a resumable run folder.

    run_dir/
      config.json           every config field, plus the arm and seed
      metrics.jsonl         one line per step (train/, talk/, loss/, perf/ namespaces; perf/ holds tokens,
                            seconds, sample_seconds, learn_seconds, the learner's row and padded tokens and
                            the messages it skipped for a zero advantage (of rank 0) and, on a GPU, peak_gpu_gb = max(peak_sample_gb, peak_learn_gb); runs sharing
                            a process add shared_runs, and each is charged its share of the common sampling)
      transcripts.jsonl     every chat of every step: views, messages, answers, rewards, advantages (and, when
                            training with partners, `partner_seat`: the seat the frozen partner played, or null,
                            and with a snapshot partner `partner_step`: the step whose weights it held; with
                            informative groups, `draw`: the batch of the step it was drawn in, and `trained`)
      checkpoints/step-N/   trainable weights, optimizer state (safetensors) and state.json
      final/                the trained adapter (PEFT format) or full weights, safetensors
      done.json             written last: the run finished, and which config produced it

With informative groups (`train.dynamic_sampling`) metrics.jsonl's `train/reward` and `talk/` figures are those
of the step's first batch (the problems a step without the option would have drawn), and `train/draws`,
`train/groups_drawn`, `train/informative_share` and `train/reward_trained` say what the step drew and learned
from (`informative.py`); with a KL penalty, `loss/kl` is the k3 estimate per generated token.

All randomness of step k is derived from (seed, k): which problems, and the sampling generator. So a resumed run
needs only the weights, the optimizer and the step number to continue exactly as if never stopped.

With `train.partners`, a share of each step's problems seats a frozen partner (`train.partner`: the untrained
base, a snapshot of this run, or a finished run; `frozen.py`) in one seat of all their chats, chosen from
(seed, k) (`partners.py`); only the learner's messages are trained. Under LoRA the partner samples in the
learner's own engine, in slot mode: the learner's rows through its adapter (slot 0, stored each step), the
partner's through none (the base) or through its own slot (a snapshot, a finished run), one call a turn for both.

Several runs can share a process (`train_runs`, `train.runs_per_process`): one frozen base, one adapter and one
AdamW state per run, swapped into the model's adapter in turn; each step samples every run's chats in one batch
(each run's rows through its own adapter, `fast_engine` slot mode), then each run learns from its own chats. The
sampling generator is then derived from (the runs' seeds, k), and each run's folder is written as above.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from talktosolve.arms import ARMS
from talktosolve.config import RUN, Config, config_key, key_fields
from talktosolve.experiment.frozen import FrozenPartner, in_learners_engines, partner_key, partner_slots
from talktosolve.experiment.partners import lineups, partner_seats
from talktosolve.experiment.pool import PoolError, training_pool
from talktosolve.learning import distributed
from talktosolve.learning.grpo import NonFiniteLoss, Sample, StepStats, group_advantages, grpo_update
from talktosolve.learning.informative import chosen, enough, informative, more_problems
from talktosolve.model import checkpoint
from talktosolve.model.policy import (
    compile_layers,
    enable_gradient_checkpointing,
    load_base,
    load_tokenizer,
    make_trainable,
    resolve_device,
    save_policy,
    stop_ids,
)
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.sampling.fast_engine import StaticEngine, make_engine
from talktosolve.sampling.rollout import Player, play_chats
from talktosolve.store import append_jsonl, read_json, truncate_jsonl, write_json
from talktosolve.team import reward
from talktosolve.team.talk import aggregate_talk, chat_talk


class TrainingError(RuntimeError):
    """Training stopped; the message says why and what is kept."""


def run_config(cfg: Config, arm: str, seed: int) -> dict:
    """What determines a training run's outputs: the config fields that declare themselves part of a run's key
    (`config.RUN`: the model, data, chat and train sections, each setting added since only when used), the arm and
    the seed. A partner run counts by its own key (`frozen.partner_key`), not its path."""
    d = key_fields(cfg, RUN)
    if "partner" in d["train"]:
        d["train"]["partner"] = partner_key(d["train"]["partner"])
    return {**d, "arm": arm, "seed": seed}


def is_done(run_dir: Path, cfg: Config, arm: str, seed: int) -> bool:
    """Whether `run_dir` holds a finished run of this config, arm and seed. A run finished in a group of another
    size (`train.runs_per_process`, recorded in its config.json) counts: the group only chose which random
    numbers its chats drew, so a recipe whose seeds grow, trained more runs at a time, reuses it."""
    done = Path(run_dir) / "done.json"
    if not done.exists():
        return False
    key = read_json(done).get("key")
    if key == config_key(run_config(cfg, arm, seed)):
        return True
    config = Path(run_dir) / "config.json"
    group = read_json(config).get("train", {}).get("runs_per_process") if config.exists() else None
    if not isinstance(group, int) or group == cfg.train.runs_per_process:
        return False
    grouped = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, runs_per_process=group))
    return key == config_key(run_config(grouped, arm, seed))


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
class _Role:
    """One set of a run's trained weights and the seats it plays: the shared adapter (every seat), or, with
    per-role adapters, one seat's own (its own model, engine and optimizer)."""

    name: str
    """`""` for the shared weights; the seat's name for a role's (its checkpoint subfolder and final/ folder)."""
    seats: tuple[str, ...]
    model: object
    params: list
    optimizer: torch.optim.Optimizer | None = None


@dataclass
class _Run:
    """One (arm, seed) run of this process."""

    arm: str
    seed: int
    dir: Path
    key: str
    loggers: tuple = ()
    roles: list[_Role] = field(default_factory=list)
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


def train(cfg: Config, arm: str, seed: int, run_dir: Path, problems: list, *, progress: bool = True,
          loggers: tuple = (), pool_dir: Path | None = None) -> Path:
    """Train one arm/seed into `run_dir` (resuming it if it holds a checkpoint of the same config)."""
    train_runs(cfg, [(arm, seed, run_dir)], problems, progress=progress, loggers=[loggers], pool_dir=pool_dir)
    return Path(run_dir)


def train_runs(cfg: Config, runs: list[tuple[str, int, Path]], problems: list, *, progress: bool = True,
               loggers: list[tuple] | None = None, pool_dir: Path | None = None) -> None:
    """Train (arm, seed, run_dir) runs side by side in this process, each into its own resumable folder.

    One run is the plain loop. Several share one frozen base (LoRA only): each step their chats are sampled
    together by a slot-mode engine (`StaticEngine(..., slots=n)`, one decode step for every run's rows), then
    each run in turn has its adapter and optimizer state loaded into the model, learns, and is saved back. The
    runs resume from their newest common checkpoint step (`checkpoint.resume_points`); a run further along (one
    of a group with no common step) waits until the others reach its step.

    With per-role adapters (`model.adapters=per_role`, one run at a time) each seat is played by its own copy
    of the trainable model, all copies starting from the same weights; each role learns only from its seat's
    messages, with the team's advantages, normalised by its own tokens (`learn_role`). A copy of the base per role
    costs one more set of base weights each (3 GB at 1.5B parameters in bf16), the simple way to an engine per
    role whose CUDA graphs read only that role's weights.

    With a training pool (`train.pool_chats`), each arm's pool is played once into `pool_dir/{arm}/` (default:
    the first run's folder's `pool/`) before the learner is loaded.
    """
    from tqdm.auto import tqdm

    loggers = loggers or [()] * len(runs)
    pending = []
    for (arm, seed, run_dir), logs in zip(runs, loggers):
        run_dir = Path(run_dir)
        if is_done(run_dir, cfg, arm, seed):
            continue
        key = config_key(run_config(cfg, arm, seed))
        config_path = run_dir / "config.json"
        if config_path.exists() and read_json(config_path).get("key") != key:
            raise TrainingError(f"{run_dir} holds a run of a different config. Use a new --out folder, or delete "
                                "this one to start over.")
        pending.append(_Run(arm, seed, run_dir, key, logs))
    if not pending:
        return
    t = cfg.train
    protocol = protocol_of(cfg.chat)
    shared = len(pending) > 1
    device = resolve_device(cfg.device)
    rank, size = distributed.init(device.type)
    device = distributed.local_device(device)
    if t.problems_per_step % size:
        raise TrainingError(f"train.problems_per_step ({t.problems_per_step}) must be a multiple of the "
                            f"{size} processes, so that every rank plays whole problems.")
    if shared and (size > 1 or cfg.model.finetune != "lora" or cfg.model.adapters != "shared"):
        raise TrainingError("several runs share a process only with one shared LoRA adapter each "
                            "(model.finetune=lora, model.adapters=shared) in a single process; train them one at a "
                            "time (train.runs_per_process=1).")
    if size > 1 and (t.dynamic_sampling or t.pool_chats):
        raise TrainingError("train.dynamic_sampling and train.pool_chats run in a single process; launch without "
                            "torchrun, or turn them off.")
    try:
        pools = {arm: training_pool(cfg, arm, problems, Path(pool_dir or pending[0].dir / "pool"), progress=progress)
                 for arm in dict.fromkeys(run.arm for run in pending)}
    except PoolError as e:
        raise TrainingError(str(e)) from None
    for run in pending:
        run.problems = pools[run.arm]
    main = rank == 0
    if main:
        for run in pending:
            run.dir.mkdir(parents=True, exist_ok=True)
            # Runs sharing a process share the sampler's random stream: which ones is part of the record.
            mates = {"trained_with": [str(r.dir) for r in pending if r is not run]} if shared else {}
            write_json(run.dir / "config.json", {"key": run.key, "arm": run.arm, "seed": run.seed, **mates,
                                                 **cfg.to_dict()})
    if cfg.cpu_threads and device.type == "cpu":
        torch.set_num_threads(cfg.cpu_threads)
    tokenizer = load_tokenizer(cfg.model)
    torch.manual_seed(pending[0].seed)  # adapter initialisation
    base = load_base(cfg.model, device)
    reference = _reference(cfg, base)  # the base as loaded, before training can touch it
    model = make_trainable(base, cfg.model)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    roles = role_seats(cfg, protocol)
    models = [model] + [copy.deepcopy(model) for _ in roles[1:]]  # every role starts from the same weights
    params = [p for p in model.parameters() if p.requires_grad]
    for run, ckpt in zip(pending, checkpoint.resume_points([run.dir for run in pending])):
        if shared:
            _fresh_adapter(model, run.seed)
        run.roles = [_Role(name, seats, m, [p for p in m.parameters() if p.requires_grad])
                     for (name, seats), m in zip(roles, models)]
        for role in run.roles:
            role.optimizer = torch.optim.AdamW(role.params, lr=t.lr, betas=tuple(t.betas),
                                               weight_decay=t.weight_decay)
        if ckpt is not None:
            run.start = checkpoint.load(ckpt, run.parts())
        if main:
            for log in ("metrics.jsonl", "transcripts.jsonl"):
                truncate_jsonl(run.dir / log, lambda row, start=run.start: row.get("step", -1) < start)
        if shared:
            run.weights = [p.detach().clone() for p in params]

    # The partner of a LoRA run samples in the learner's own engine (the base as rows with no adapter, a
    # snapshot or a finished run in slots after the learner's): one call a turn for the learner's and the
    # partner's rows, and no second copy of the model.
    partner_rows = not shared and t.partners > 0 and in_learners_engines(cfg, model, roles)
    extra = partner_slots(cfg, roles) if partner_rows else {}
    slots = {name: len(pending) if shared else (1 + extra[name] if partner_rows else 0) for name, _ in roles}
    engines = [make_engine(m, stop_ids=stop_ids(tokenizer, m), pad_id=tokenizer.pad_token_id,
                           temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                           kind=cfg.chat.engine, slots=slots[name]) for (name, _), m in zip(roles, models)]
    for m, engine in zip(models, engines):
        compile_layers(m, cfg.model, device, static_sampler=isinstance(engine, StaticEngine))
    # Each seat's learner (the shared one in every seat); runs sharing a process seat theirs each step.
    learners = {seat: Player(engine, tokenizer, f"policy{'-' + name if name else ''}", 0 if partner_rows else None)
                for (name, seats), engine in zip(roles, engines) for seat in seats}
    partner = (FrozenPartner(cfg, tokenizer, device, [(r.name, r.seats, r.model) for r in pending[0].roles],
                             {seat: learners[seat].engine for seat in protocol.seats} if partner_rows else None)
               if t.partners > 0 else None)
    if partner is not None and partner.snapshots and pending[0].start:
        partner.load(checkpoint.load_snapshots(checkpoint.latest(pending[0].dir), [r.name for r in pending[0].roles]))
    loop = _Loop(cfg, pending, protocol, tokenizer, device, rank, size, params, engines, learners, partner,
                 partner_rows, reference)
    first = min(run.start for run in pending)
    desc = f"train {pending[0].name}" if not shared else f"train {len(pending)} runs together"
    bar = tqdm(total=t.steps, initial=first, desc=desc, disable=not (progress and main), dynamic_ncols=True)
    for step in range(first, t.steps):
        began = time.perf_counter()
        active = [run for run in pending if run.start <= step]  # a resumed run further along waits
        if loop.gpu:
            torch.cuda.reset_peak_memory_stats(device)
        try:
            players = loop.seat(step, active)
            groups, wanted = loop.draw(step, active, players)
            loop.release()
            sample_seconds = (time.perf_counter() - began) / len(active)  # shared sampling: each run pays its share
            peak_sample = torch.cuda.max_memory_allocated(device) / 2**30 if loop.gpu else None
            rows = []
            for run, mine, n in zip(active, groups, wanted):
                rows.append(loop.learn(step, run, mine, n, sample_seconds, peak_sample))
        except NonFiniteLoss as e:
            bar.close()
            kept = checkpoint.latest(run.dir)
            where = f"Step {step} of {run.name}" if shared else f"Step {step}"
            raise TrainingError(
                f"{where}: {e}. The update was not applied; the last good checkpoint is "
                f"{kept or 'none (no checkpoint yet)'}. Lower train.lr or raise train.grad_clip's strictness "
                "(a smaller value), then rerun the same command to resume."
            ) from e
        except torch.cuda.OutOfMemoryError as e:
            bar.close()
            raise TrainingError(
                f"Step {step}: the GPU ran out of memory. Lower train.chats_per_microbatch "
                f"(now {t.chats_per_microbatch}) or train.microbatch_tokens (now {t.microbatch_tokens}; 0 means "
                "by chats), turn on model.gradient_checkpointing or train.release_sampler, lower "
                "train.problems_per_step or "
                f"train.runs_per_process (now {t.runs_per_process}); rerun the same command to resume from the "
                "last checkpoint."
            ) from e
        distributed.barrier()
        sends = [r["talk/send"] for r in rows if r["talk/send"] is not None]  # the mean over the step's runs
        bar.set_postfix(reward=f"{sum(r['train/reward'] for r in rows) / len(rows):.3f}",
                        send=_fmt(sum(sends) / len(sends) if sends else None))
        bar.update(1)
    bar.close()
    for run in pending:
        if shared:
            _swap_in(params, run)
        _finish(run, cfg, size, main)


@dataclass
class _Loop:
    """What every training step reads, set up once by `train_runs`: the runs, the trainable tensors and the
    engines, each seat's learner, the frozen partner. Its methods are the step's phases, in order: `seat` (who
    plays: each run's weights in its slot), `draw` (the problems, played and scored, drawn again for informative
    groups), `release` (the sampler's memory, for learning), `learn` (one run's update, its metrics and logs)."""

    cfg: Config
    pending: list[_Run]
    protocol: Protocol
    tokenizer: object
    device: torch.device
    rank: int
    size: int
    params: list
    """The model's trainable tensors, into which runs sharing a process swap their own."""
    engines: list
    learners: dict
    """Each seat's learner `Player` (the shared one in every seat)."""
    partner: FrozenPartner | None
    partner_rows: bool
    """The frozen partner samples in the learner's own engine (its rows through their own slot or none)."""
    reference: object

    @property
    def shared(self) -> bool:
        return len(self.pending) > 1

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def seat(self, step: int, active: list[_Run]) -> list[Player]:
        """Runs sharing a process: each active run's adapter stored in its slot, a `Player` per slot. A partner in
        the learner's engine: the learner's adapter stored in slot 0 (the slot engines sample from it, not the
        live weights). The frozen partner brought to this step."""
        players = []
        if self.shared:
            for slot, run in enumerate(active):
                _swap_in(self.params, run)
                self.engines[0].store_adapter(slot)
                players.append(Player(self.engines[0], self.tokenizer, f"policy-{slot}", slot))
        elif self.partner_rows:
            for engine in self.engines:
                engine.store_adapter(0)
        if self.partner is not None:
            self.partner.refresh(step)
        return players

    def play(self, step: int, draw: int, batches: list[list], active: list[_Run],
             players: list[Player]) -> list[list[_Group]]:
        """One draw of the step: every run's batch (some may be empty) in one call a turn -> each run's groups, in
        the order of its problems."""
        t, protocol, G = self.cfg.train, self.protocol, self.cfg.train.chats_per_problem
        who = [j for j, b in enumerate(batches) if b]
        key = step if draw == 0 else f"{step}-{draw}"  # the first draw is the step's draw without options
        frozen = None
        if self.shared:
            seating = [{seat: players[j] for seat in protocol.seats} for j in who for _ in range(len(batches[j]) * G)]
            seed = _shared_seed([run.seed for run in active], key)
        else:
            seating = self.learners
            seed = (active[0].seed * 100_003 + step + self.rank * 1_000_000_007 if draw == 0
                    else _shared_seed([active[0].seed], key))
        if self.partner is not None:  # runs sharing a process never have partners (config.validate)
            frozen = partner_seats(active[0].seed, key, t.problems_per_step if draw == 0 else len(batches[0]),
                                   t.partners, protocol.seats)
            frozen = distributed.shard(frozen, self.rank, self.size) if draw == 0 else frozen
            seating = lineups(frozen, G, protocol.seats, self.learners, self.partner.players)
        chats = play_chats([p for j in who for p in batches[j]],
                           [ARMS[active[j].arm] for j in who for _ in batches[j]],
                           seating, protocol, self.cfg.chat, chats_per_problem=G, seed=seed)
        reward.score_chats(chats, protocol)
        out: list[list[_Group]] = [[] for _ in batches]
        for j in who:
            mine, chats = chats[:len(batches[j]) * G], chats[len(batches[j]) * G:]
            out[j] = [_Group(mine[i * G:(i + 1) * G], None if frozen is None else frozen[i], draw)
                      for i in range(len(batches[j]))]
        return out

    def draw(self, step: int, active: list[_Run], players: list[Player]) -> tuple[list[list[_Group]], list[int]]:
        """The step's problems for each run, played and scored; with informative groups, drawn again (up to
        `max_draws` batches) for each run whose groups do not yet hold enough signal. -> (each run's groups, how
        many problems each run's step wants)."""
        t = self.cfg.train
        first_batches = [distributed.shard(step_problems(run.problems, run.seed, step, t.problems_per_step),
                                           self.rank, self.size) for run in active]
        groups = self.play(step, 0, first_batches, active, players)
        wanted = [len(b) for b in first_batches]
        for draw in range(1, t.max_draws if t.dynamic_sampling else 1):
            more = [[] if enough(_rewards(g), n) else
                    more_problems(run.problems, run.seed, step, draw, n, {x.chats[0].problem_id for x in g})
                    for run, g, n in zip(active, groups, wanted)]
            if not any(more):
                break
            for g, new in zip(groups, self.play(step, draw, more, active, players)):
                g += new
        return groups, wanted

    def release(self) -> None:
        """The sampler's memory, given back before learning."""
        if self.shared:
            # The KV pool of every run's rows (8.5 GB for 6 runs of 32 chats at the paper preset's lengths)
            # would sit idle through learning; re-capturing its graphs next step costs little by comparison.
            self.engines[0].release()
        elif self.cfg.train.release_sampler:
            for engine in self.engines:
                if isinstance(engine, StaticEngine):
                    engine.release(weights=True)

    def learn(self, step: int, run: _Run, groups: list[_Group], wanted: int, sample_seconds: float,
              peak_sample: float | None) -> dict:
        """One run's update from its groups (the informative ones, with that option), then its metrics row and
        transcripts written (rank 0) and its checkpoint when one is due. -> the row."""
        t, protocol, G = self.cfg.train, self.protocol, self.cfg.train.chats_per_problem
        learn_began = time.perf_counter()
        if self.gpu:  # the two phases' peaks apart: they call for different remedies
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.shared:
            _swap_in(self.params, run)
        kept = chosen(_rewards(groups), wanted) if t.dynamic_sampling else list(range(len(groups)))
        mine = [c for i in kept for c in groups[i].chats]
        frozen_seats = None if self.partner is None else [groups[i].frozen for i in kept for _ in range(G)]
        role_stats = []
        for role in run.roles:
            for group in role.optimizer.param_groups:  # a function of the step: resuming needs no state
                group["lr"] = learning_rate(t, step)
            role_stats.append(learn_role(role.model, role.optimizer, mine, t, self.tokenizer.pad_token_id,
                                         self.device, protocol.n_turns, frozen_seats, role.seats, self.reference,
                                         self.cfg.chat.temperature))
        stats = _combined([s for s in role_stats if s is not None])
        if self.shared:
            _swap_out(self.params, run)
        learned = time.perf_counter()
        transcripts = distributed.gather([
            {"step": step, **c.transcript(), **_partner_record(g.frozen, self.partner, step),
             **({"draw": g.draw, "trained": i in kept} if t.dynamic_sampling else {})}
            for i, g in enumerate(groups) for c in g.chats])
        row = step_metrics(step, [c for c in transcripts if c.get("draw", 0) == 0], protocol, stats,
                           sample_seconds + learned - learn_began, sample_seconds, learned - learn_began)
        if t.dynamic_sampling:
            row.update(draw_metrics(groups, kept))
        if self.shared:
            row["perf/shared_runs"] = len([r for r in self.pending if r.start <= step])
        if self.gpu:
            peak_learn = torch.cuda.max_memory_allocated(self.device) / 2**30
            row.update({"perf/peak_gpu_gb": max(peak_sample, peak_learn), "perf/peak_sample_gb": peak_sample,
                        "perf/peak_learn_gb": peak_learn})
        if self.rank == 0:
            _record(run, step, row, transcripts, t, self.partner)
        return row


def role_seats(cfg: Config, protocol: Protocol) -> list[tuple[str, tuple[str, ...]]]:
    """A run's sets of trained weights, each with the seats it plays: `("", every seat)` for the shared
    adapter, or `(seat, (seat,))` for each seat with per-role adapters."""
    if cfg.model.adapters == "per_role":
        return [(seat, (seat,)) for seat in protocol.seats]
    return [("", tuple(protocol.seats))]


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


def _rewards(groups: list[_Group]) -> list[list[float]]:
    return [[c.reward for c in g.chats] for g in groups]


def draw_metrics(groups: list[_Group], kept: list[int]) -> dict:
    """With informative groups: how many batches the step drew, the share of its drawn groups whose rewards
    differ, and the mean reward of the chats it learned from."""
    trained = [c.reward for i in kept for c in groups[i].chats]
    return {"train/draws": max(g.draw for g in groups) + 1, "train/groups_drawn": len(groups),
            "train/informative_share": sum(informative(r) for r in _rewards(groups)) / len(groups),
            "train/reward_trained": sum(trained) / len(trained)}


def _reference(cfg: Config, base):
    """The KL penalty's reference policy when it is not the learner with its adapter off (LoRA): under full
    fine-tuning, a frozen copy of the loaded `base` (not a second load: a GGUF file is dequantized each time).
    None without a penalty, or under LoRA."""
    if cfg.train.kl_coef == 0 or cfg.model.finetune == "lora":
        return None
    model = copy.deepcopy(base)
    model.requires_grad_(False)
    return model.eval()


def _record(run: _Run, step: int, row: dict, transcripts: list, t, partner: FrozenPartner | None) -> None:
    """A step's logs, then its checkpoint when one is due (the model holds this run's weights)."""
    append_jsonl(run.dir / "transcripts.jsonl", transcripts)
    append_jsonl(run.dir / "metrics.jsonl", [row])
    for log in run.loggers:
        log(row, step)
    if (step + 1) % t.checkpoint_every == 0 or step + 1 == t.steps:
        checkpoint.save(run.dir, run.parts(), step + 1, snapshots=partner.tensors() if partner else None)


def _finish(run: _Run, cfg: Config, size: int, main: bool) -> None:
    """The trained weights into `final/` (per-role: `final/{seat}/`), then `done.json` (the model holds this
    run's weights)."""
    checksums = distributed.gather([checkpoint.weights_checksum(*(role.model for role in run.roles))])
    if len(set(checksums)) != 1:
        raise TrainingError(f"ranks ended with different weights ({checksums}); this is a bug, please report it.")
    if main:
        final_tmp = run.dir / ".final.tmp"
        shutil.rmtree(final_tmp, ignore_errors=True)
        for role in run.roles:
            save_policy(role.model, final_tmp / role.name, cfg.model)
        shutil.rmtree(run.dir / "final", ignore_errors=True)
        final_tmp.rename(run.dir / "final")
        roles = {"roles": [role.name for role in run.roles]} if cfg.model.adapters == "per_role" else {}
        write_json(run.dir / "done.json", {"key": run.key, "steps": cfg.train.steps, "ranks": size,
                                           "weights_checksum": checksums[0], **roles})
    distributed.barrier()


@torch.no_grad()
def _swap_in(params: list, run: _Run) -> None:
    for p, w in zip(params, run.weights):
        p.copy_(w)


@torch.no_grad()
def _swap_out(params: list, run: _Run) -> None:
    for p, w in zip(params, run.weights):
        w.copy_(p)


def _fresh_adapter(model, seed: int) -> None:
    """Re-initialise the LoRA adapter as PEFT does (A random, B zero) from `seed`: each run of a shared process
    starts from an initialisation of its own seed."""
    torch.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_lora_parameters") and hasattr(module, "lora_A"):
            for name in list(module.lora_A.keys()):
                module.reset_lora_parameters(name, True)


def _shared_seed(seeds: list[int], step: int) -> int:
    """The sampling seed of a step shared by runs of these seeds (a function of the group and the step)."""
    import hashlib

    digest = hashlib.sha256(f"{sorted(seeds)}-{step}".encode()).hexdigest()
    return int(digest[:15], 16)


def _fmt(x) -> str:
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

