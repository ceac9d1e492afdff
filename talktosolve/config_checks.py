"""The config's checks, by section: every impossible setting found before any model is loaded, each as one
sentence that names the setting and what to give instead (`config.validate` joins them into one error line).
Each takes a `config.Config`; this module imports nothing of it, so the config can call its checks without an
import circle. Pure: no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from talktosolve.arms import ABLATIONS, ARMS, comparison_name
from talktosolve.protocol import ProtocolError, protocol_of

ADAPTERS = ("shared", "per_role")
"""The values of `model.adapters`."""


def config_problems(cfg) -> list[str]:
    """Every problem of `cfg`, section by section: model, data, chat, train, eval, then the recipe's (its arms,
    seeds and variant)."""
    return [*_model_problems(cfg), *_data_problems(cfg), *_chat_problems(cfg), *_train_problems(cfg),
            *_eval_problems(cfg), *_recipe_problems(cfg)]


def _at_least(low: int, pairs: list[tuple[str, Any]]) -> list[str]:
    """Each (name, value) below `low` (1, or 0) as a problem."""
    must = "it must be at least 1" if low == 1 else "it must be 0 or more"
    return [f"{name} is {value}; {must}." for name, value in pairs if value < low]


def _seeds_in_range(pairs: list[tuple[str, int]]) -> list[str]:
    return [f"{name} holds {value}; a seed is a whole number from 0 to 2**63 - 1." for name, value in pairs
            if not 0 <= value < 2**63]


def _model_problems(cfg) -> list[str]:
    m = cfg.model
    problems = []
    if m.finetune not in ("lora", "full"):
        problems.append(f"model.finetune is `{m.finetune}`; use `lora` or `full`.")
    if m.adapters not in ADAPTERS:
        problems.append(f"model.adapters is `{m.adapters}`; use shared or per_role.")
    if m.compile not in ("auto", "on", "off"):
        problems.append(f"model.compile is `{m.compile}`; use auto, on or off.")
    problems += _at_least(1, [("model.lora_r", m.lora_r), ("model.lora_alpha", m.lora_alpha)])
    if not 0 <= m.lora_dropout < 1:
        problems.append(f"model.lora_dropout is {m.lora_dropout}; it must be in [0, 1).")
    return problems


def _data_problems(cfg) -> list[str]:
    d = cfg.data
    problems = []
    if d.task not in ("gsm8k", "micro"):
        problems.append(f"data.task is `{d.task}`; use `gsm8k` or `micro`.")
    return (problems + _at_least(1, [("data.n_train", d.n_train), ("data.n_test", d.n_test)])
            + _seeds_in_range([("data.data_seed", d.data_seed)]))


def _chat_problems(cfg) -> list[str]:
    c = cfg.chat
    problems = []
    if c.engine not in ("auto", "fast", "portable"):
        problems.append(f"chat.engine is `{c.engine}`; use auto, fast or portable.")
    try:
        protocol_of(c)
    except ProtocolError as e:
        problems.append(str(e))
    problems += _at_least(1, [("chat.max_message_tokens", c.max_message_tokens),
                              ("chat.max_final_tokens", c.max_final_tokens)])
    if not (c.temperature > 0):
        problems.append(f"chat.temperature is {c.temperature}; it must be positive (plain sampling).")
    return problems


def _train_problems(cfg) -> list[str]:
    t = cfg.train
    problems = _at_least(1, [("train.problems_per_step", t.problems_per_step),
                             ("train.chats_per_problem", t.chats_per_problem),
                             ("train.chats_per_microbatch", t.chats_per_microbatch),
                             ("train.runs_per_process", t.runs_per_process),
                             ("train.snapshot_every", t.snapshot_every),
                             ("train.checkpoint_every", t.checkpoint_every)])
    problems += _at_least(0, [("train.warmup_steps", t.warmup_steps), ("train.weight_decay", t.weight_decay),
                              ("train.grad_clip", t.grad_clip), ("train.steps", t.steps)])
    if t.chats_per_problem < 2:
        problems.append("train.chats_per_problem must be at least 2: the advantage is centred within the group.")
    if t.problems_per_step > cfg.data.n_train:
        problems.append(f"train.problems_per_step ({t.problems_per_step}) exceeds data.n_train ({cfg.data.n_train}).")
    if t.microbatch_tokens < 0:
        problems.append(f"train.microbatch_tokens is {t.microbatch_tokens}; use 0 (micro-batches by chats) or a "
                        "token budget such as 12288 (the default).")
    if not (t.lr > 0):
        problems.append(f"train.lr is {t.lr}; it must be positive.")
    if len(t.betas) != 2 or not all(0 <= b < 1 for b in t.betas):
        problems.append(f"train.betas is {t.betas}; give two numbers in [0, 1), e.g. 0.9,0.999.")
    return problems + _sharing_problems(cfg) + _partner_problems(cfg) + _learning_option_problems(cfg)


def _sharing_problems(cfg) -> list[str]:
    """What runs sharing a process (`train.runs_per_process` > 1) cannot do."""
    t = cfg.train
    if t.runs_per_process <= 1:
        return []
    problems = []
    if "per_role" in (cfg.model.adapters, cfg.variant.adapters):
        problems.append("per-role adapters (adapters=per_role) train one run at a time; set "
                        "train.runs_per_process=1.")
    if cfg.model.finetune != "lora":
        problems.append("train.runs_per_process > 1 shares one frozen base between runs' LoRA adapters; with "
                        "model.finetune=full set it to 1.")
    if cfg.parallel_runs > 1:
        problems.append("set either parallel_runs (runs in separate processes) or train.runs_per_process (runs "
                        "side by side in one process) above 1, not both.")
    if t.partners > 0:
        problems.append("train.partners > 0 trains with a frozen partner, which runs sharing a process "
                        "(train.runs_per_process > 1) do not support; set train.runs_per_process=1.")
    return problems


def _partner_problems(cfg) -> list[str]:
    t = cfg.train
    problems = []
    if not 0 <= t.partners <= 1:
        problems.append(f"train.partners is {t.partners}; it is a share of each step's problems, from 0 to 1.")
    for where, value in [("train.partner", t.partner)] + ([("variant.partner", cfg.variant.partner)]
                                                           if cfg.variant.partner else []):
        if value not in ("base", "snapshot") and not Path(value).expanduser().is_dir():
            problems.append(f"{where} is `{value}`: neither base, snapshot nor a folder of trained weights (a run "
                            "folder or an adapter folder).")
    return problems


def _learning_option_problems(cfg) -> list[str]:
    """Informative groups, the training pool and the KL penalty."""
    t = cfg.train
    problems = []
    if t.max_draws < 1:
        problems.append(f"train.max_draws is {t.max_draws}; it must be at least 1 (the first batch).")
    elif not 1 <= t.draw_batches <= t.max_draws:
        problems.append(f"train.draw_batches is {t.draw_batches}; it must be from 1 to train.max_draws "
                        f"({t.max_draws}): the batches one sampling pass plays.")
    if t.pool_chats < 0:
        problems.append(f"train.pool_chats is {t.pool_chats}; use 0 (no pool) or the chats per problem of the "
                        "pool's pre-pass, e.g. 4.")
    elif t.pool_chats > 0 and not (1 <= t.pool_min <= t.pool_chats):
        problems.append(f"train.pool_min is {t.pool_min}; with train.pool_chats={t.pool_chats} it must be from 1 "
                        f"to {t.pool_chats}.")
    elif t.pool_chats > 0 and t.pool_max and not (t.pool_min <= t.pool_max <= t.pool_chats):
        problems.append(f"train.pool_max is {t.pool_max}; use 0 (no upper bound) or a count from train.pool_min "
                        f"({t.pool_min}) to train.pool_chats ({t.pool_chats}).")
    if not t.kl_coef >= 0:
        problems.append(f"train.kl_coef is {t.kl_coef}; it must be 0 (no penalty) or more.")
    return problems


def _eval_problems(cfg) -> list[str]:
    e = cfg.eval
    problems = _at_least(1, [("eval.n_problems", e.n_problems), ("eval.chats_per_problem", e.chats_per_problem),
                             ("eval.batch_chats", e.batch_chats), ("eval.batch_evals", e.batch_evals)])
    if e.n_problems > cfg.data.n_test:
        problems.append(f"eval.n_problems ({e.n_problems}) exceeds data.n_test ({cfg.data.n_test}).")
    if e.influence_problems < 2:
        problems.append(f"eval.influence_problems is {e.influence_problems}; an interval over problems "
                        "needs at least 2.")
    kinds = e.influence_kinds
    if not kinds or any(k not in ABLATIONS for k in kinds) or len(set(kinds)) != len(kinds):
        problems.append(f"eval.influence_kinds is {list(kinds)}; give one or more of {', '.join(ABLATIONS)}, "
                        "each once.")
    if e.cross_seed and len(cfg.seeds) < 2:
        problems.append("eval.cross_seed pairs runs of different seeds; give at least 2 seeds or set it to false.")
    return problems + _seeds_in_range([("eval.seed", e.seed)])


def _recipe_problems(cfg) -> list[str]:
    """The recipe's own fields: its arms, comparisons, seeds, variant and processes."""
    problems = [f"arms holds `{arm}`; arms are {', '.join(ARMS)}." for arm in cfg.arms if arm not in ARMS]
    if len(set(cfg.arms)) != len(cfg.arms):
        problems.append(f"arms holds an arm twice: {list(cfg.arms)}.")
    for pair in cfg.comparisons:
        if len(pair) != 2 or not all(a in ARMS for a in pair) or pair[0] == pair[1]:
            problems.append(f"comparisons holds `{comparison_name(pair)}`; write X-Y with two different arms of "
                            f"{', '.join(ARMS)} (e.g. chat-cut).")
    if not cfg.seeds:
        problems.append("seeds is empty; give at least one training seed.")
    problems += _seeds_in_range([("seeds", s) for s in cfg.seeds])
    problems += _at_least(1, [("parallel_runs", cfg.parallel_runs)])
    problems += _at_least(0, [("cpu_threads", cfg.cpu_threads)])
    v = cfg.variant
    if v.adapters not in ADAPTERS + ("",):
        problems.append(f"variant.adapters is `{v.adapters}`; use shared or per_role.")
    if v.name:
        if v.name in ARMS or "-" in v.name or not v.name.isidentifier():
            problems.append(f"variant.name is `{v.name}`; name it with letters, digits or `_` (no `-`), unlike "
                            f"the arms {', '.join(ARMS)}.")
        if v.arm not in cfg.arms:
            problems.append(f"variant.arm is `{v.arm}`, which is not in arms {list(cfg.arms)}; add it there.")
        if not 0 <= v.partners <= 1:
            problems.append(f"variant.partners is {v.partners}; it is a share, from 0 to 1.")
        if v.partners > 0 and cfg.train.runs_per_process > 1:
            problems.append("variant.partners > 0 trains with a frozen partner, which runs sharing a process do "
                            "not support; set train.runs_per_process=1.")
    return problems
