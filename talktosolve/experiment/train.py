"""Train one arm and seed: the GRPO loop, top to bottom, writing a resumable run folder.

    run_dir/
      config.json           every config field, plus the arm and seed
      metrics.jsonl         one line per step (train/, talk/, loss/, perf/ namespaces; perf/ holds tokens,
                            seconds, sample_seconds, learn_seconds, the learner's row and padded tokens and
                            the messages it skipped for a zero advantage (of rank 0) and, on a GPU,
                            peak_gpu_gb = max(peak_sample_gb, peak_learn_gb); runs sharing a process add
                            shared_runs, and each is charged its share of the common sampling)
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
needs only the weights, the optimizer and the step number to continue exactly as if never stopped. A SIGTERM or
Ctrl-C stops training after the step in progress, with every run's checkpoint saved there (`stopping.py`).

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
import shutil
import time
from pathlib import Path

import torch

from talktosolve.config import RUN, Config, config_key, key_fields
from talktosolve.config_values import ConfigError, build
from talktosolve.experiment.frozen import partner_key
from talktosolve.experiment.pool import PoolError, training_pool
from talktosolve.experiment.seating import build as build_seating
from talktosolve.experiment.seating import swap_in
from talktosolve.experiment.step import Loop, Role, Run, fmt
from talktosolve.experiment.stopping import stop_on_signal
from talktosolve.learning import distributed
from talktosolve.learning.grpo import NonFiniteLoss
from talktosolve.model import checkpoint
from talktosolve.model.policy import (
    enable_gradient_checkpointing,
    load_base,
    load_tokenizer,
    make_trainable,
    resolve_device,
    save_policy,
)
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.store import read_json, truncate_jsonl, write_json


class TrainingError(RuntimeError):
    """Training stopped; the message says why and what is kept."""


def training_pools(cfg: Config, arms: list[str], problems: list, pool_dir: Path, progress: bool) -> dict[str, list]:
    """Each arm's training problems (`pool.training_pool`: all of them, or its pool, played once into
    `pool_dir/{arm}/` and read from there after), by arm; a pool too small fails as a `TrainingError`."""
    try:
        return {arm: training_pool(cfg, arm, problems, pool_dir, progress=progress) for arm in dict.fromkeys(arms)}
    except PoolError as e:
        raise TrainingError(str(e)) from None


def run_config(cfg: Config, arm: str, seed: int) -> dict:
    """What determines a training run's outputs: the config fields that declare themselves part of a run's key
    (`config.RUN`: the model, data, chat and train sections, each setting added since only when used), the arm and
    the seed. A partner run counts by its own key (`frozen.partner_key`), not its path."""
    d = key_fields(cfg, RUN)
    if "partner" in d["train"]:
        d["train"]["partner"] = partner_key(d["train"]["partner"])
    return {**d, "arm": arm, "seed": seed}


def key_differences(stored: dict, cfg: Config, arm: str, seed: int) -> list[str]:
    """The settings of a run's key in which a run folder's config.json (`stored`) differs from this config, arm
    and seed, each as `name: value in the folder, value now`; empty if that file no longer reads as a config."""
    keyed = key_fields(Config(), RUN)
    sections = {k: v for k, v in stored.items() if k in keyed}
    try:
        there = run_config(build(Config, sections, ""), stored.get("arm"), stored.get("seed"))
    except ConfigError:
        return []
    here = run_config(cfg, arm, seed)

    def flat(d: dict, at: str = "") -> dict:
        return {k: v for name, value in d.items()
                for k, v in (flat(value, f"{at}{name}.") if isinstance(value, dict) else {at + name: value}).items()}

    there, here = flat(there), flat(here)
    unset = object()
    return [f"{k}: {there.get(k, 'unset')!r} in the folder, {here.get(k, 'unset')!r} now"
            for k in sorted(there.keys() | here.keys()) if there.get(k, unset) != here.get(k, unset)]


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
        if config_path.exists() and (stored := read_json(config_path)).get("key") != key:
            differs = key_differences(stored, cfg, arm, seed)
            why = f" ({'; '.join(differs[:4])}{'; ...' if len(differs) > 4 else ''})" if differs else ""
            raise TrainingError(f"{run_dir} holds a run of a different config{why}. Use a new --out folder, rerun "
                                "with the folder's settings, or delete it to start over.")
        pending.append(Run(arm, seed, run_dir, key, logs))
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
    pools = training_pools(cfg, [run.arm for run in pending], problems, Path(pool_dir or pending[0].dir / "pool"),
                           progress)
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
        run.roles = [Role(name, seats, m, [p for p in m.parameters() if p.requires_grad])
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

    seating = build_seating(cfg, protocol, tokenizer, device, roles, models, pending, params, rank, size)
    loop = Loop(cfg, protocol, tokenizer, device, rank, size, params, seating, reference)
    first = min(run.start for run in pending)
    desc = f"train {pending[0].name}" if not shared else f"train {len(pending)} runs together"
    bar = tqdm(total=t.steps, initial=first, desc=desc, disable=not (progress and main), dynamic_ncols=True)
    with stop_on_signal() as stop:  # SIGTERM / Ctrl-C: stop after this step, a checkpoint kept there
        for step in range(first, t.steps):
            began = time.perf_counter()
            active = [run for run in pending if run.start <= step]  # a resumed run further along waits
            if loop.gpu:
                torch.cuda.reset_peak_memory_stats(device)
            try:
                loop.seat(step, active)
                groups, wanted = loop.draw(step, active)
                loop.release()
                # shared sampling: each run pays its share
                sample_seconds = (time.perf_counter() - began) / len(active)
                peak_sample = torch.cuda.max_memory_allocated(device) / 2**30 if loop.gpu else None
                rows = []
                for run, mine, n in zip(active, groups, wanted):
                    rows.append(loop.learn(step, run, mine, n, len(active), sample_seconds, peak_sample))
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
                            send=fmt(sum(sends) / len(sends) if sends else None))
            bar.update(1)
            if step + 1 < t.steps and distributed.sum_scalar(float(stop.signum is not None), device):
                bar.close()
                loop.keep(step, active)
                raise stop.stopped(step, t.steps)
        bar.close()
        seating.close()
        for run in pending:
            swap_in(params, run)
            _finish(run, cfg, size, main)
        # A signal in the last step (or while saving) left nothing to keep, but the caller must not go on as if
        # none came: a recipe would start its evaluations on a machine that is being taken back.
        if distributed.sum_scalar(float(stop.signum is not None), device):
            raise stop.finished(t.steps)


def role_seats(cfg: Config, protocol: Protocol) -> list[tuple[str, tuple[str, ...]]]:
    """A run's sets of trained weights, each with the seats it plays: `("", every seat)` for the shared
    adapter, or `(seat, (seat,))` for each seat with per-role adapters."""
    if cfg.model.adapters == "per_role":
        return [(seat, (seat,)) for seat in protocol.seats]
    return [("", tuple(protocol.seats))]


def _reference(cfg: Config, base):
    """The KL penalty's reference policy when it is not the learner with its adapter off (LoRA): under full
    fine-tuning, a frozen copy of the loaded `base` (not a second load: a GGUF file is dequantized each time).
    None without a penalty, or under LoRA."""
    if cfg.train.kl_coef == 0 or cfg.model.finetune == "lora":
        return None
    model = copy.deepcopy(base)
    model.requires_grad_(False)
    return model.eval()


def _finish(run: Run, cfg: Config, size: int, main: bool) -> None:
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


def _fresh_adapter(model, seed: int) -> None:
    """Re-initialise the LoRA adapter as PEFT does (A random, B zero) from `seed`: each run of a shared process
    starts from an initialisation of its own seed."""
    torch.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_lora_parameters") and hasattr(module, "lora_A"):
            for name in list(module.lora_A.keys()):
                module.reset_lora_parameters(name, True)


