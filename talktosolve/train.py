"""Train one arm and seed: the GRPO loop, top to bottom, writing a resumable run folder.

    run_dir/
      config.json           every config field, plus the arm and seed
      metrics.jsonl         one line per step (train/, talk/, loss/, perf/ namespaces; perf/ holds tokens,
                            seconds, sample_seconds, learn_seconds, the learner's row and padded tokens and
                            the messages it skipped for a zero advantage (of rank 0) and, on a GPU, peak_gpu_gb = max(peak_sample_gb, peak_learn_gb); runs sharing
                            a process add shared_runs, and each is charged its share of the common sampling)
      transcripts.jsonl     every chat of every step: views, messages, answers, rewards, advantages (and, when
                            training with partners, `partner_seat`: the seat the frozen base played, or null)
      checkpoints/step-N/   trainable weights, optimizer state (safetensors) and state.json
      final/                the trained adapter (PEFT format) or full weights, safetensors
      done.json             written last: the run finished, and which config produced it

All randomness of step k is derived from (seed, k): which problems, and the sampling generator. So a resumed run
needs only the weights, the optimizer and the step number to continue exactly as if never stopped.

With `train.partners`, a share of each step's problems seats the frozen untrained base (a second copy of it) in
one seat of all their chats, chosen from (seed, k) (`partners.py`); only the learner's messages are trained.

Several runs can share a process (`train_runs`, `train.runs_per_process`): one frozen base, one adapter and one
AdamW state per run, swapped into the model's adapter in turn; each step samples every run's chats in one batch
(each run's rows through its own adapter, `fast_engine` slot mode), then each run learns from its own chats. The
sampling generator is then derived from (the runs' seeds, k), and each run's folder is written as above.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from talktosolve import distributed
from talktosolve.config import Config, config_key
from talktosolve.fast_engine import StaticEngine, make_engine
from talktosolve.grpo import NonFiniteLoss, Sample, group_advantages, grpo_update
from talktosolve.policy import (compile_layers, enable_gradient_checkpointing, load_base, load_tokenizer,
                                make_trainable, resolve_device, save_policy, stop_ids)
from talktosolve.arms import ARMS
from talktosolve.partners import lineups, partner_seats
from talktosolve.protocol import Protocol, protocol_of
from talktosolve import reward
from talktosolve.rollout import Player, play_chats
from talktosolve.store import append_jsonl, read_json, truncate_jsonl, write_json
from talktosolve.talk import aggregate_talk, chat_talk


class TrainingError(RuntimeError):
    """Training stopped; the message says why and what is kept."""


def run_config(cfg: Config, arm: str, seed: int) -> dict:
    """What determines a training run's outputs: the model, data, chat and train sections, the arm and seed.
    `train.runs_per_process` counts only when above 1 and `train.partners` only when above 0 (so runs that do
    not use them keep the keys they had before these settings existed)."""
    d = cfg.to_dict()
    if d["train"]["runs_per_process"] == 1:
        del d["train"]["runs_per_process"]
    if d["train"]["partners"] == 0:
        del d["train"]["partners"]
    return {"model": d["model"], "data": d["data"], "chat": d["chat"], "train": d["train"], "arm": arm,
            "seed": seed}


def is_done(run_dir: Path, cfg: Config, arm: str, seed: int) -> bool:
    done = Path(run_dir) / "done.json"
    return done.exists() and read_json(done).get("key") == config_key(run_config(cfg, arm, seed))


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


def _save_checkpoint(run_dir: Path, model, optimizer, step: int) -> None:
    final = run_dir / "checkpoints" / f"step-{step:06d}"
    tmp = run_dir / "checkpoints" / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for g in optimizer.param_groups for p in g["params"]]
    save_file({names[id(p)]: p.detach().cpu().contiguous() for p in params}, str(tmp / "trainable.safetensors"))
    opt = optimizer.state_dict()
    tensors = {}
    for idx, state in opt["state"].items():
        for key, value in state.items():
            tensors[f"{idx}.{key}"] = (value if torch.is_tensor(value) else torch.tensor(value)).cpu().contiguous()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    write_json(tmp / "state.json", {"step": step, "param_groups": opt["param_groups"]})
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)  # a checkpoint appears whole or not at all
    for old in sorted((run_dir / "checkpoints").glob("step-*"))[:-2]:
        shutil.rmtree(old, ignore_errors=True)


def _load_checkpoint(ckpt: Path, model, optimizer) -> int:
    device = next(model.parameters()).device
    weights = load_file(str(ckpt / "trainable.safetensors"), device=str(device))
    by_name = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            by_name[name].copy_(value)
    state = read_json(ckpt / "state.json")
    tensors = load_file(str(ckpt / "optimizer.safetensors"), device=str(device))
    opt_state: dict = {}
    for key, value in tensors.items():
        idx, field = key.split(".", 1)
        opt_state.setdefault(int(idx), {})[field] = value.cpu() if field == "step" else value
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
    return int(state["step"])


def checkpoints(run_dir: Path) -> dict[int, Path]:
    """A run folder's complete checkpoints, by step."""
    found = (p for p in (Path(run_dir) / "checkpoints").glob("step-*") if (p / "state.json").exists())
    return {int(p.name.split("-")[1]): p for p in found}


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = checkpoints(run_dir)
    return ckpts[max(ckpts)] if ckpts else None


def _resume_points(run_dirs: list[Path]) -> list[Path | None]:
    """The checkpoint each run resumes from. Runs sharing a process resume together from the newest step they
    all hold a checkpoint of: a kill between two runs' checkpoints of one step leaves one run a checkpoint ahead
    (its previous one is kept), and replaying that step together makes the same chats as never stopping. Runs
    with no step in common (a group made of other runs before) each resume from their latest."""
    held = [checkpoints(d) for d in run_dirs]
    common = set.intersection(*(set(h) for h in held))
    if common:
        return [h[max(common)] for h in held]
    return [h[max(h)] if h else None for h in held]


@dataclass
class _Run:
    """One (arm, seed) run of this process."""

    arm: str
    seed: int
    dir: Path
    key: str
    loggers: tuple = ()
    optimizer: torch.optim.Optimizer | None = None
    start: int = 0
    weights: list | None = None
    """Its trainable tensors while the model holds another run's (runs sharing a process); None when alone."""

    @property
    def name(self) -> str:
        return f"{self.arm} seed {self.seed}"


def train(cfg: Config, arm: str, seed: int, run_dir: Path, problems: list, *, progress: bool = True,
          loggers: tuple = ()) -> Path:
    """Train one arm/seed into `run_dir` (resuming it if it holds a checkpoint of the same config)."""
    train_runs(cfg, [(arm, seed, run_dir)], problems, progress=progress, loggers=[loggers])
    return Path(run_dir)


def train_runs(cfg: Config, runs: list[tuple[str, int, Path]], problems: list, *, progress: bool = True,
               loggers: list[tuple] | None = None) -> None:
    """Train (arm, seed, run_dir) runs side by side in this process, each into its own resumable folder.

    One run is the plain loop. Several share one frozen base (LoRA only): each step their chats are sampled
    together by a slot-mode engine (`StaticEngine(..., slots=n)`, one decode step for every run's rows), then
    each run in turn has its adapter and optimizer state loaded into the model, learns, and is saved back. The
    runs resume from their newest common checkpoint step (`_resume_points`); a run further along (one of a group
    with no common step) waits until the others reach its step.
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
    if shared and (size > 1 or cfg.model.finetune != "lora"):
        raise TrainingError("several runs share a process only with LoRA (model.finetune=lora) in a single "
                            "process; train them one at a time (train.runs_per_process=1).")
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
    model = make_trainable(load_base(cfg.model, device), cfg.model)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    for run, ckpt in zip(pending, _resume_points([run.dir for run in pending])):
        if shared:
            _fresh_adapter(model, run.seed)
        run.optimizer = torch.optim.AdamW(params, lr=t.lr, betas=tuple(t.betas), weight_decay=t.weight_decay)
        if ckpt is not None:
            run.start = _load_checkpoint(ckpt, model, run.optimizer)
        if main:
            for log in ("metrics.jsonl", "transcripts.jsonl"):
                truncate_jsonl(run.dir / log, lambda row, start=run.start: row.get("step", -1) < start)
        if shared:
            run.weights = [p.detach().clone() for p in params]

    engine = make_engine(model, stop_ids=stop_ids(tokenizer, model), pad_id=tokenizer.pad_token_id,
                         temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                         kind=cfg.chat.engine, slots=len(pending) if shared else 0)
    compile_layers(model, cfg.model, device, static_sampler=isinstance(engine, StaticEngine))
    partner = _frozen_base(cfg, tokenizer, device) if t.partners > 0 else None
    gpu = device.type == "cuda"
    first = min(run.start for run in pending)
    desc = f"train {pending[0].name}" if not shared else f"train {len(pending)} runs together"
    bar = tqdm(total=t.steps, initial=first, desc=desc, disable=not (progress and main), dynamic_ncols=True)
    for step in range(first, t.steps):
        began = time.perf_counter()
        active = [run for run in pending if run.start <= step]  # a resumed run further along waits
        batches = [distributed.shard(step_problems(problems, run.seed, step, t.problems_per_step), rank, size)
                   for run in active]
        if gpu:
            torch.cuda.reset_peak_memory_stats(device)
        try:
            if shared:
                for slot, run in enumerate(active):
                    _swap_in(params, run)
                    engine.store_adapter(slot)
                player = Player(engine, tokenizer, "policy", slots=len(active))
                seed = _shared_seed([run.seed for run in active], step)
            else:
                player = Player(engine, tokenizer, "policy")
                seed = active[0].seed * 100_003 + step + rank * 1_000_000_007
            # Runs sharing a process never have partners (config.validate), so this is one run's step.
            frozen = distributed.shard(partner_seats(active[0].seed, step, t.problems_per_step, t.partners,
                                                     protocol.seats), rank, size) if partner else None
            seating = ({seat: player for seat in protocol.seats} if partner is None else
                       lineups(frozen, t.chats_per_problem, protocol.seats, player, partner))
            chats = play_chats([p for b in batches for p in b],
                               [ARMS[run.arm] for run, b in zip(active, batches) for _ in b],
                               seating, protocol, cfg.chat, chats_per_problem=t.chats_per_problem, seed=seed)
            reward.score_chats(chats, protocol)
            if shared:
                # The KV pool of every run's rows (8.5 GB for 6 runs of 32 chats at the paper preset's lengths)
                # would sit idle through learning; re-capturing its graphs next step costs little by comparison.
                engine.release()
            sampled = time.perf_counter()
            peak_sample = torch.cuda.max_memory_allocated(device) / 2**30 if gpu else None
            per_run = len(chats) // len(active)
            rows = []
            for j, run in enumerate(active):
                learn_began = time.perf_counter()
                if gpu:  # the two phases' peaks apart: they call for different remedies
                    torch.cuda.reset_peak_memory_stats(device)
                if shared:
                    _swap_in(params, run)
                for group in run.optimizer.param_groups:  # a function of the step alone: resuming needs no state
                    group["lr"] = learning_rate(t, step)
                mine = chats[j * per_run:(j + 1) * per_run]
                frozen_seats = None if frozen is None else [f for f in frozen for _ in range(t.chats_per_problem)]
                stats = _learn(model, run.optimizer, mine, t, tokenizer.pad_token_id, device, protocol.n_turns,
                               frozen_seats)
                if shared:
                    _swap_out(params, run)
                learned = time.perf_counter()
                # Sampling was shared: each run is charged its share of it.
                sample_seconds = (sampled - began) / len(active)
                transcripts = distributed.gather([{"step": step, **c.transcript(),
                                                   **_partner_record(frozen_seats, i)} for i, c in enumerate(mine)])
                row = step_metrics(step, transcripts, protocol, stats, sample_seconds + learned - learn_began, sample_seconds,
                                   learned - learn_began)
                if shared:
                    row["perf/shared_runs"] = len(active)
                if gpu:
                    peak_learn = torch.cuda.max_memory_allocated(device) / 2**30
                    row.update({"perf/peak_gpu_gb": max(peak_sample, peak_learn), "perf/peak_sample_gb": peak_sample,
                                "perf/peak_learn_gb": peak_learn})
                if main:
                    _record(run, model, step, row, transcripts, t)
                rows.append(row)
        except NonFiniteLoss as e:
            bar.close()
            kept = latest_checkpoint(run.dir)
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
                "by chats), turn on model.gradient_checkpointing, lower train.problems_per_step or "
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
        _finish(run, model, cfg, size, main)


def _learn(model, optimizer, chats: list, t, pad_id: int, device, messages_per_chat: int,
           frozen: list[str | None] | None = None):
    """One GRPO update from one run's chats (grouped by problem): advantages, then the learner's samples.
    `frozen[i]`: the seat a frozen partner played in chat i (None: self-play); its messages are not trained and
    do not count in the normaliser."""
    G = t.chats_per_problem
    adv = group_advantages([[c.reward for c in chats[i:i + G]] for i in range(0, len(chats), G)])
    frozen = frozen or [None] * len(chats)
    samples = []
    for ci, (c, a) in enumerate(zip(chats, [a for group in adv for a in group])):
        c.advantage = a
        samples += [Sample(tr.prompt_ids, tr.completion_ids, a, ci) for tr in c.turns if tr.speaker != frozen[ci]]
    n_tokens = int(distributed.sum_scalar(sum(len(x.completion_ids) for x in samples), device))
    return grpo_update(model, optimizer, samples, pad_id=pad_id, n_tokens=n_tokens,
                       chats_per_microbatch=t.chats_per_microbatch, grad_clip=t.grad_clip, device=device,
                       microbatch_tokens=t.microbatch_tokens, messages_per_chat=messages_per_chat)


def _frozen_base(cfg: Config, tokenizer, device) -> Player:
    """The frozen partner: a second copy of the untrained base with its own sampler. Under full fine-tuning
    the learner's weights move, so the base must be a copy; under LoRA the learner's sampler applies its
    adapter to every row, so a copy (one more set of base weights) is the simple way to rows without it."""
    model = load_base(cfg.model, device).eval().requires_grad_(False)
    engine = make_engine(model, stop_ids=stop_ids(tokenizer, model), pad_id=tokenizer.pad_token_id,
                         temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                         kind=cfg.chat.engine)
    return Player(engine, tokenizer, "base")


def _partner_record(frozen: list[str | None] | None, i: int) -> dict:
    """A transcript's partner: the seat the frozen base played (only in runs that train with partners)."""
    return {} if frozen is None else {"partner_seat": frozen[i]}


def _record(run: _Run, model, step: int, row: dict, transcripts: list, t) -> None:
    """A step's logs, then its checkpoint when one is due (the model holds this run's weights)."""
    append_jsonl(run.dir / "transcripts.jsonl", transcripts)
    append_jsonl(run.dir / "metrics.jsonl", [row])
    for log in run.loggers:
        log(row, step)
    if (step + 1) % t.checkpoint_every == 0 or step + 1 == t.steps:
        _save_checkpoint(run.dir, model, run.optimizer, step + 1)


def _finish(run: _Run, model, cfg: Config, size: int, main: bool) -> None:
    """The trained weights into `final/`, then `done.json` (the model holds this run's weights)."""
    checksums = distributed.gather([weights_checksum(model)])
    if len(set(checksums)) != 1:
        raise TrainingError(f"ranks ended with different weights ({checksums}); this is a bug, please report it.")
    if main:
        final_tmp = run.dir / ".final.tmp"
        shutil.rmtree(final_tmp, ignore_errors=True)
        save_policy(model, final_tmp, cfg.model)
        shutil.rmtree(run.dir / "final", ignore_errors=True)
        final_tmp.rename(run.dir / "final")
        write_json(run.dir / "done.json", {"key": run.key, "steps": cfg.train.steps, "ranks": size,
                                           "weights_checksum": checksums[0]})
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


def weights_checksum(model) -> str:
    """A hash of the trained weights' bytes: equal on every rank after data-parallel training."""
    import hashlib

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        if p.requires_grad:
            h.update(name.encode())
            h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


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
    }

