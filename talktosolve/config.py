"""One typed configuration for everything a run does, written into every run folder.

A preset (`talktosolve/presets/NAME.json`) is data: a partial dict of these fields laid over the defaults
below, which are the paper recipe (Park et al., arXiv:2502.18439). The CLI then lays `--set section.field=value` on top.
Unknown keys fail loudly and name the closest valid key.

Each field declares which keys it is part of (`setting(default, *keys, when=...)`): `RUN`, the key of a training
run (`train.run_config`: a finished run with the same key is reused), `EVAL`, the key of an evaluation
(`evaluate.eval_key`), or neither (it changes neither output, or it is recorded by other means). A setting added
after runs existed counts only `when` its section uses it, so runs that do not keep the keys they had before it.
`key_fields(cfg, RUN)` gathers a key's fields.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from talktosolve.arms import ABLATIONS, comparison_name
from talktosolve.config_values import ConfigError, build, closest, coerce, merge_overrides

PRESET_DIR = Path(__file__).parent / "presets"

RUN, EVAL = "run", "eval"
"""The keys a field can be part of: a training run's and an evaluation's."""


def setting(default: Any, *keys: str, when: Callable[[Any], bool] | None = None) -> Any:
    """A config field: its default (a section's class for a section), the keys it is part of (`RUN`, `EVAL`;
    none: neither) and, for a setting added after runs existed, `when` (a test of its section) it counts in them."""
    meta = {"keys": keys, "when": when}
    if isinstance(default, type):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


def key_fields(section: Any, key: str) -> dict[str, Any]:
    """The fields of a config (or of one of its sections) that are part of `key` (`RUN` or `EVAL`) and count now,
    with their values as `Config.to_dict` writes them, sections as nested dicts."""
    out = {}
    for f in dataclasses.fields(section):
        if key not in f.metadata["keys"] or (f.metadata["when"] and not f.metadata["when"](section)):
            continue
        value = getattr(section, f.name)
        out[f.name] = key_fields(value, key) if dataclasses.is_dataclass(value) else value
    return out


@dataclass
class ModelConfig:
    name_or_path: str = setting("Qwen/Qwen2.5-1.5B-Instruct", RUN, EVAL)
    """A Hugging Face causal LM with a chat template (Hub id or local folder), a `.gguf` file (the `gguf` extra;
    dequantized to `dtype`), or `micro` for the built-in one (docs/models.md)."""
    trust_remote_code: bool = setting(False, RUN, EVAL)
    """Run code shipped with the model. Off unless you trust its source."""
    dtype: str = setting("auto", RUN, EVAL)
    """`auto` (bf16 on a GPU, fp32 on a CPU), `bfloat16`, `float16` or `float32`."""
    finetune: str = setting("lora", RUN, EVAL)
    """`lora` (a LoRA adapter) or `full` (every weight trained)."""
    adapters: str = setting("shared", RUN, when=lambda m: m.adapters != "shared")
    """`shared`: one set of trained weights plays every seat (the seed's recipe); `per_role`: each seat has its
    own, trained only on that seat's messages (one adapter per role; under `finetune=full`, one model per role),
    every role starting from the same initialisation."""
    lora_r: int = setting(32, RUN, EVAL)
    """LoRA rank."""
    lora_alpha: int = setting(64, RUN, EVAL)
    """LoRA scale numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = setting(0.0, RUN, EVAL)
    """Dropout on the LoRA branch; 0 keeps the sampler and the learner on the same policy."""
    lora_targets: str = setting("all-linear", RUN, EVAL)
    """Modules that get an adapter: `all-linear` or a comma-separated list of module names."""
    attn_implementation: str = setting("sdpa", RUN, EVAL)
    """Attention kernel passed to transformers (`sdpa`, `eager`, `flash_attention_2`)."""
    gradient_checkpointing: bool = setting(False, RUN, EVAL)
    """Recompute activations in the backward pass to save memory."""
    compile: str = setting("auto", RUN, EVAL)
    """torch.compile each decoder layer for the learner: `auto` (on a GPU, when the static engine samples, as
    it does for Qwen2/Llama-style models unless chat.engine=portable), `on`, `off`. On a GPU the eager update
    is bound by Python launching thousands of small kernels; compiled layers fuse them (the first steps pay the
    compilation)."""


@dataclass
class DataConfig:
    task: str = setting("gsm8k", RUN, EVAL)
    """`gsm8k` (split-fact GSM8K) or `micro` (the built-in synthetic split-fact task)."""
    gsm8k: str | None = setting(None, RUN, EVAL)
    """Local GSM8K folder or .jsonl/.parquet file; None reads `openai/gsm8k` from the Hub."""
    n_train: int = setting(1024, RUN, EVAL)
    """Training problems drawn from the train split."""
    n_test: int = setting(300, RUN, EVAL)
    """Held-out problems drawn from the test split."""
    data_seed: int = setting(0, RUN, EVAL)
    """Seed that chooses the problems (fixed across arms and training seeds, so arms see the same data)."""


@dataclass
class PromptConfig:
    system: str = setting(
        "You are copy {name} of a two-person team solving a math word problem together. You and your partner "
        "{partner} each see only some of the facts; both of you see the question. You take turns writing short "
        "messages to each other. Share what your partner needs and use what your partner tells you.", RUN, EVAL)
    """System prompt of each copy; `{name}` and `{partner}` are filled with A/B."""
    task: str = setting("Your facts:\n{facts}\n\nQuestion: {question}", RUN, EVAL)
    """First user message: the copy's own facts (one per line) and the question."""
    fact_bullet: str = setting("- ", RUN, EVAL)
    """Prefix of each fact line."""
    partner: str = setting("Message from {partner}: {text}", RUN, EVAL)
    """How a partner's message is shown; in the `cut` arm `{text}` is the literal `(no message)`."""
    turn: str = setting("Write your message to {partner} (at most {max_tokens} tokens).", RUN, EVAL)
    """Instruction before a non-final message."""
    final: str = setting(
        "This is your last message. Give your final answer to the question, with the number in \\boxed{{}}.", RUN, EVAL)
    """Instruction before a copy's final message."""


@dataclass
class ChatConfig:
    max_message_tokens: int = setting(160, RUN, EVAL)
    """Token limit of a non-final message."""
    max_final_tokens: int = setting(384, RUN, EVAL)
    """Token limit of each copy's final message (which must box its answer)."""
    temperature: float = setting(1.0, RUN, EVAL)
    """Sampling temperature (no top-k, no top-p: plain sampling from the policy)."""
    force_max_length: bool = setting(False, RUN, EVAL)
    """Never stop at end-of-message (benchmarks on random-weight models, whose text never stops)."""
    engine: str = setting("auto", RUN, EVAL)
    """Sampler: `auto` (the CUDA-graph engine on a GPU for Qwen2/Llama-style models, else portable), `fast`,
    or `portable` (a plain KV-cache loop over transformers' forward, any model, any device)."""
    prompts: PromptConfig = setting(PromptConfig, RUN, EVAL)
    """The role prompts: the only place their wording lives."""
    seats: tuple[str, ...] = setting(("A", "B"), RUN, EVAL)
    """The team's seats (2 or more names), in dealing order: seat k of N is dealt facts k, k+N, ... ."""
    order: tuple[str, ...] = setting(("A", "B", "A", "B"), RUN, EVAL)
    """Who writes each message, one seat per turn (e.g. `A,B,C,A,B,C` or `A,B,A,B,A,B`)."""
    turn_tokens: tuple[int, ...] = setting((), RUN, EVAL)
    """Token limit of each turn, one per turn of `order`; empty: `max_final_tokens` on each seat's final turn,
    `max_message_tokens` on the others."""
    final_turns: tuple[int, ...] = setting((), RUN, EVAL)
    """The turn whose boxed answer is graded, one per seat (in `seats` order); empty: each seat's last turn."""


@dataclass
class TrainConfig:
    steps: int = setting(80, RUN)
    """GRPO steps (one on-policy update each)."""
    problems_per_step: int = setting(8, RUN)
    """Problems sampled per step."""
    chats_per_problem: int = setting(4, RUN)
    """Chats per problem (the GRPO group); advantages are centred within it."""
    chats_per_microbatch: int = setting(2, RUN)
    """Chats whose messages go through one forward/backward, when `microbatch_tokens` is 0 (a memory knob; it
    does not change the update)."""
    microbatch_tokens: int = setting(12288, RUN)
    """Micro-batches are filled up to this many tokens: packed tokens where the learner packs its rows (CUDA with
    FlashAttention: each shared run once, no padding; `learn_packing`), padded tokens (rows x width) elsewhere;
    0 fills them by `chats_per_microbatch` instead. Memory is then bounded whatever the message lengths, and short
    messages still make full-size micro-batches. A memory knob: the update is the same. Larger budgets keep a GPU
    busier and learn faster than a few chats per micro-batch (the seed's setting) at a higher peak; lower it when
    the learning phase runs out of memory (docs/performance.md#learning, #a-24-gb-card)."""
    release_sampler: bool = setting(False, RUN)
    """Free the sampler's KV pool, CUDA graphs and merged weights between sampling and learning, so that the
    learning phase can use their memory; the next step rebuilds them (a memory knob: the chats and the update
    are the same). The pool of runs sharing a process (`runs_per_process` > 1) holds every run's rows, so it grows
    with them. Use it on a card too small for the defaults: learning gains the sampler's memory, and sampling
    pays time every step to rebuild it, most where rows move into smaller batches (each size its own graph)
    (docs/performance.md#a-24-gb-card)."""
    lr: float = setting(1e-4, RUN)
    """AdamW learning rate (constant after warm-up)."""
    warmup_steps: int = setting(0, RUN)
    """Linear learning-rate warm-up steps."""
    weight_decay: float = setting(0.0, RUN)
    """AdamW weight decay."""
    betas: tuple[float, float] = setting((0.9, 0.999), RUN)
    """AdamW betas."""
    grad_clip: float = setting(1.0, RUN)
    """Clip the global gradient norm to this (0 disables)."""
    checkpoint_every: int = setting(20, RUN)
    """Save a resumable checkpoint every this many steps (and at the end)."""
    runs_per_process: int = setting(1, RUN, when=lambda t: t.runs_per_process != 1)
    """The recipe trains up to this many (arm, seed) runs side by side in one process, over one frozen base
    (LoRA only): every step samples all their chats together, one decode step for all rows, each row read
    through its own run's adapter, then each run learns its own adapter with its own optimizer. Decode is
    bound by reading the weights, so on one GPU several runs' steps cost far less than as many steps one at a
    time (docs/performance.md#several-runs-in-one-process). The runs then share the sampler's random stream, so
    their chats differ from those of runs trained one at a time: the setting is part of each run's key. 1: one
    run at a time."""
    partners: float = setting(0.0, RUN, when=lambda t: t.partners != 0)
    """Partner-mixture training: the share of each step's problems (and so of its chats) in which one seat,
    drawn from (seed, step), is played by a frozen partner (`partner`) instead of the learner (`partners.py`);
    only the learner's seats are trained. 0: self-play in every chat."""
    partner: str = setting("base", RUN, when=lambda t: t.partners != 0 and t.partner != "base")
    """Who the frozen partner is: `base` (the untrained base), `snapshot` (this run's own weights as they were at
    the latest multiple of `snapshot_every` steps: the base until then; kept in every checkpoint), or the path
    of a finished run or adapter folder (its final weights; a per-role run's weights for the seat it plays)."""
    snapshot_every: int = setting(20, RUN, when=lambda t: t.partners != 0 and t.partner == "snapshot")
    """With `partner=snapshot`: the frozen partner is refreshed with the learner's weights every this many
    steps."""
    dynamic_sampling: bool = setting(False, RUN, when=lambda t: bool(t.dynamic_sampling))
    """Informative groups (DAPO's dynamic sampling): a step keeps drawing batches of `problems_per_step` problems
    until it holds `problems_per_step` groups whose chats' rewards differ, or has drawn `max_draws` batches, and
    learns from the first `problems_per_step` such groups (at the cap, topped up in the order drawn with groups
    that scored alike). A group whose chats all scored alike has a zero advantage: when most groups are like that,
    as when the untrained team rarely succeeds, an update is a few groups' noise at the optimizer's full step
    size. False: one batch a step (the recipe)."""
    max_draws: int = setting(4, RUN, when=lambda t: bool(t.dynamic_sampling))
    """With `dynamic_sampling`: the most batches of `problems_per_step` problems one step draws (the first
    included), a bound on a step's sampling cost."""
    draw_batches: int = setting(1, RUN, when=lambda t: bool(t.dynamic_sampling) and t.draw_batches != 1)
    """With `dynamic_sampling`: the batches played together in one sampling pass (up to `max_draws` in all): the
    first pass holds the step's first batch and the next `draw_batches - 1`, each later pass the next ones, while
    too few groups are informative. The same batches as drawn one at a time, in fewer passes of more rows, each of
    which waits only once for its slowest chat; a pass may play batches that one at a time would not have needed.
    1: one batch a pass."""
    pool_chats: int = setting(0, RUN, when=lambda t: bool(t.pool_chats))
    """A training pool by difficulty: before training, the untrained team plays this many chats of every training
    problem in the run's arm (cached beside the runs, in `pool/`), and training draws only from the problems it
    solved (team reward above 0) in at least `pool_min` and at most `pool_max` of them. 0: every problem (the
    recipe)."""
    pool_min: int = setting(1, RUN, when=lambda t: bool(t.pool_chats))
    """With `pool_chats`: keep a problem the untrained team solved in at least this many of its chats."""
    pool_max: int = setting(0, RUN, when=lambda t: bool(t.pool_chats))
    """With `pool_chats`: keep a problem the untrained team solved in at most this many of its chats (problems
    it always solves teach as little as those it never does); 0: no upper bound."""
    kl_coef: float = setting(0.0, RUN, when=lambda t: bool(t.kl_coef))
    """Weight of a KL penalty to the untrained base, on every generated token of the learner: the k3 estimator
    exp(ref - logp) - (ref - logp) - 1 of KL(policy || base), summed over tokens and divided by the step's
    token count like the policy term. Under LoRA the reference is the base with the adapter switched off (no
    second model); under full fine-tuning, a frozen copy of the base. It holds the policy near the base while
    the reward says little, so noise-driven updates cannot walk it into collapsed or runaway messages.
    0: no penalty (the recipe)."""


@dataclass
class EvalConfig:
    n_problems: int = setting(300, EVAL)
    """Held-out problems evaluated (the first n of the test set)."""
    chats_per_problem: int = setting(2, EVAL)
    """Chats per held-out problem; both copies are graded, so 2 chats give 4 answers."""
    batch_chats: int = setting(128, EVAL)
    """Chats generated together (a memory knob: larger batches decode more tokens per weight read, and hold more
    KV cache). The default fits the paper preset's cross-play (two models, two engines) on a 48 GB card; with 80
    GB or more, 300 saves about a fifth of evaluation time (docs/performance.md#evaluation)."""
    batch_evals: int = setting(1)
    """Evaluations sampled together, at most: with more than 1, the recipe plays up to this many evaluations of
    LoRA runs (and of the base) in the same engine passes, over one frozen base with each run's adapter in a slot
    of its own and each chat's seats read through theirs (`evaluate.evaluate_teams`). Each evaluation keeps its
    problems, batches and folder; its chats are drawn from the same distribution, not the same random numbers
    (under greedy decoding they are the same chats). A pass then holds up to this many x `batch_chats` chats;
    the evaluations are split into groups as equal as this allows (20 at 6: four of 5), which share one engine.
    1: one evaluation at a time, each with its own engines. Full fine-tuning always evaluates one at a time.
    Worth it with memory to spare: past 128 chats a pass, decode is no longer bound by reading the weights, so
    playing several together shortens the evaluation stage, and each adds `batch_chats` chats' KV cache to a pass
    (docs/performance.md#evaluation measures both; running out of memory names this setting)."""
    seed: int = setting(1234, EVAL)
    """Sampling seed of evaluation (same for every model, so comparisons are paired)."""
    influence: bool = setting(False)
    """Recipe: after the evaluations, replay each team evaluation (the untrained team and every trained run, in
    its own arm) with one message at a time ablated, and report each message's influence on its listeners
    (`talktosolve.team.influence`). On in the micro, micro-partners, micro-partners-all, micro-roles, tiny and tiny-3
    presets; it costs, per replayed chat, (1 + ablations) x the turns after each message, and the recipe prints
    its estimate before it runs."""
    influence_problems: int = setting(100)
    """Replays cover the first n evaluation problems (every chat of each)."""
    influence_kinds: tuple[str, ...] = setting(ABLATIONS)
    """The ablations replayed: `remove` (partners see `(no message)`), `replace` (the same seat's message of
    another problem), `renumber` (its own-only numbers swapped for others of the same shape)."""
    cross_seed: bool = setting(False)
    """Recipe: also evaluate each trained run in the first seat with every other seed's run of the same arm in
    the others (the cross-seed matrix: do independently trained protocols understand each other?). With S seeds
    it adds S x (S - 1) evaluations per arm."""


@dataclass
class VariantConfig:
    name: str = setting("")
    """One more line of trained runs: an arm trained with other settings (e.g. `mix`: the chat arm with base
    partners), one run per seed, named `{name}-s{seed}`; empty: none."""
    arm: str = setting("chat")
    """The arm its runs are trained and evaluated in (one of `arms`)."""
    partners: float = setting(0.0)
    """Its `train.partners` (the share of each step's problems that seat a frozen partner)."""
    partner: str = setting("")
    """Its `train.partner` (`base`, `snapshot` or a run folder); empty: the same as the arms'."""
    adapters: str = setting("")
    """Its `model.adapters` (`shared` or `per_role`); empty: the same as the arms'."""


@dataclass
class Config:
    model: ModelConfig = setting(ModelConfig, RUN, EVAL)
    """The base model and how it is fine-tuned."""
    data: DataConfig = setting(DataConfig, RUN, EVAL)
    """Which problems."""
    chat: ChatConfig = setting(ChatConfig, RUN, EVAL)
    """The team's protocol (seats, turn order, limits) and its prompts."""
    train: TrainConfig = setting(TrainConfig, RUN)
    """GRPO."""
    eval: EvalConfig = setting(EvalConfig, EVAL)
    """Held-out evaluation."""
    arms: tuple[str, ...] = setting(("chat", "cut"))
    """Arms of the recipe (`talktosolve.arms`): `chat` delivers messages, `cut` shows `(no message)` instead,
    `full` deals every fact to every seat and delivers messages."""
    comparisons: tuple[tuple[str, str], ...] = setting((("chat", "cut"),))
    """Paired deltas the recipe reports, each a pair (a, b): arm a minus arm b, over the same held-out problems,
    with the problem+seed interval; one whose arms were not both run is skipped. Named `a-b` in presets, in
    `--set comparisons=chat-cut,full-chat`, in config.json and in results.json (`arms.comparison_name`)."""
    seeds: tuple[int, ...] = setting((0, 1, 2))
    """Training seeds of each arm."""
    variant: VariantConfig = setting(VariantConfig)
    """An arm trained a second way, evaluated like the arms and compared with its arm's runs (`recipe`)."""
    parallel_runs: int = setting(1)
    """Recipe: train this many (arm, seed) runs at once, each in its own process; on a host with several GPUs
    each process gets its own GPU (run i on GPU i mod count)."""
    device: str = setting("auto")
    """`auto` (cuda if available, else cpu), `cpu`, `cuda`, `cuda:1`, ..."""
    cpu_threads: int = setting(0)
    """torch threads on CPU (0 keeps torch's default)."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["comparisons"] = tuple(comparison_name(pair) for pair in self.comparisons)  # as presets name them
        return d


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["train.lr=3e-4", "seeds=0,1"]` -> a nested dict typed like the defaults."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"`--set {pair}`: expected KEY=VALUE, e.g. `--set train.lr=3e-4`.")
        key, text = pair.split("=", 1)
        parts = key.strip().split(".")
        obj: Any = Config()
        spec = None
        for i, part in enumerate(parts):
            if not dataclasses.is_dataclass(obj) or part not in {f.name for f in dataclasses.fields(obj)}:
                valid = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
                raise ConfigError(f"Unknown config key `{key}`.{closest(part, valid)}")
            spec = next(f for f in dataclasses.fields(obj) if f.name == part)
            obj = getattr(obj, part)
        if dataclasses.is_dataclass(obj):
            fields = ", ".join(f.name for f in dataclasses.fields(obj))
            raise ConfigError(f"`--set {pair}`: `{key}` is a section; set one of its fields ({fields}).")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        try:
            node[parts[-1]] = coerce(text, obj, spec)
        except ConfigError as e:
            raise ConfigError(f"`--set {pair}`: {e}") from None
    return out


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_preset(name: str) -> dict[str, Any]:
    path = Path(name) if name.endswith(".json") else PRESET_DIR / f"{name}.json"
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(f"No preset `{name}` ({path} {what}). Built-in presets: {', '.join(preset_names())}; "
                          "or pass a .json file.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"Preset {path} is not JSON ({e}); a preset is a JSON object of config sections.") from None


def make_config(preset: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults, then the preset, then overrides; validated."""
    values: dict[str, Any] = {}
    if preset:
        values = merge_overrides(values, load_preset(preset))
    if overrides:
        values = merge_overrides(values, overrides)
    cfg = build(Config, values, "")
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Impossible settings fail here, before any model is loaded: each section's checks, then the recipe's (its
    arms, seeds and variant; `config_checks`), each naming the setting and what to give instead."""
    from talktosolve.config_checks import config_problems

    problems = config_problems(cfg)
    if problems:
        # One line, so the command line's error is one line too.
        raise ConfigError("Invalid config: " + " ".join(problems))


def config_key(values: dict[str, Any]) -> str:
    """A short stable hash of a config fragment: what produced an output, so a rerun can tell if it is current."""
    import hashlib

    blob = json.dumps(values, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
