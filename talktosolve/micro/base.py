"""The micro base model: a tiny `Qwen2ForCausalLM` the project pretrains itself on scripted chats.

Model (`MODEL`): 3 layers, hidden 128, 4 heads, MLP 384, tied embeddings, the micro tokenizer's ~220 words:
about 0.67M parameters (2.7 MB in fp32). It goes through transformers exactly as the paper model does.

Corpus (`CORPUS`, drawn afresh for every batch from a fixed seed, so pretraining is deterministic). Problems come
from the micro task's train stream (`task.make_problems("train", ..., seed=CORPUS["problem_seed"])`), which never
holds a test text. Each batch is a mixture of:

* **scripted chats, 60% of the sequences.** A chat's four messages come from `script.scripted_chat` with the
  default `script.Repertoire`: a non-final message states the writer's numbers 60% of the time (each number kept
  with probability 0.7, at least one), asks for the partner's 20%, is idle talk 20%; a final message sums the
  writer's own numbers (marked `mine`) and, only 30% of the time, the numbers its partner stated (marked
  `yours`), step by step, and boxes the total. 15% of the chats are in the `cut` format (the partner's words
  are `(no message)`, so there is nothing to take). A chat gives two sequences: copy A's view before its final
  message (`render_view(tokenizer, view(...))`) followed by that message and `<|end|>`, and the same for copy B.
  Each view holds the copy's own first message as an assistant part, so one sequence trains both of a copy's
  messages.
* **solo problems, 40% of the sequences.** A view with every fact and the final instruction (`solo_view`), then
  the solo answer (`mine 27 - 3 = 24 + 5 = 29 \\boxed{29}`): the model can solve a problem whose facts it sees.

The loss is on the assistant message tokens only (each message and its `<|end|>`); a sum's result token (after
`=` or `\\boxed{`) weighs 3 times as much. So the base has a repertoire, not the protocol: it can state its
numbers, ask, take its partner's numbers and add them up, but it imitates a mixture in which the team is
usually wrong (the untrained pair scores 0.1-0.2, the cut arm about 0.01).

Training (`TRAIN`): AdamW (betas 0.9/0.95, weight decay 0.1), lr 3e-3 with 50 warm-up steps and a cosine decay,
800 steps of 64 sequences, gradient clip 1. Number tokens start with Fourier features of their value
(`_init_numbers`), which, with the weight decay and the result weighting, roughly halves the steps the model needs
to learn its sums. About 3-4 minutes on 2 CPU cores.

`pretrain(out_dir)` writes a folder that `AutoModelForCausalLM.from_pretrained` loads, with the tokenizer saved
beside it (load that with `tokenizer.load_tokenizer`, not `AutoTokenizer`: see there). `micro_base_path()` gives
the cached base, copying the shipped checkpoint (`assets/`) or pretraining it once when there is none.

A base is a `BaseRecipe` record (its model name, the tables above, extra vocabulary, corpus type and shipped
folder): `MICRO` is this one; `teams.TEAMS` (`micro-teams`) is the base for teams of 2 to 4 seats, built by the
same `pretrain` and found by the same `micro_base_path(TEAMS)`. `talktosolve.micro.base_recipe(name)` maps a
model name to its recipe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch

from talktosolve.arms import ARMS
from talktosolve.micro import prompts, script, task
from talktosolve.micro.prompts import micro_chat_config
from talktosolve.micro.tokenizer import ASSISTANT, BOXED, END, build_tokenizer, load_tokenizer, vocabulary
from talktosolve.model.policy import cache_root
from talktosolve.protocol import protocol_of
from talktosolve.team.chat import Seat, render_view, view

MODEL = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=True, rope_theta=10000.0,
             rms_norm_eps=1e-6, hidden_act="silu")
CORPUS = dict(problem_seed=7, n_problems=20_000, solo_share=0.4, cut_share=0.15,
              repertoire=dataclasses.asdict(script.Repertoire()))
TRAIN = dict(steps=800, batch=64, lr=3e-3, warmup=50, min_lr_ratio=0.05, weight_decay=0.1, grad_clip=1.0,
             number_init=0.1, result_weight=3.0)
VERSION = 1
"""Bump when the corpus or training code changes in a way the settings above do not show."""

ASSETS = Path(__file__).parent / "assets"


@dataclasses.dataclass(frozen=True)
class BaseRecipe:
    """Everything that makes one micro base, and where its copies live."""

    name: str
    """The model name a config gives (`model.name_or_path`); the cache folder is `<name>-base-<key>`."""
    model: dict
    corpus: dict
    train: dict
    version: int
    words: tuple[str, ...]
    """Texts whose words join the micro vocabulary (`tokenizer.vocabulary(extra=words)`)."""
    corpus_type: type
    """Built as `corpus_type(tokenizer, seed)`: `Corpus` or a subclass with its own `texts`."""
    assets: Path
    """The shipped checkpoint's folder."""

    def tokenizer(self):
        return build_tokenizer(self.words)

    def key(self) -> str:
        """A hash of everything that makes the base: model, corpus, training, vocabulary, prompts, version."""
        blob = json.dumps({"model": self.model, "corpus": self.corpus, "train": self.train,
                           "vocab": vocabulary(self.words), "prompts": prompts.MICRO_PROMPTS,
                           "version": self.version}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def recipe_key() -> str:
    """The two-seat micro base's key (`BaseRecipe.key` of `MICRO`)."""
    return MICRO.key()


def model_config(tokenizer, **overrides):
    """The Qwen2 config of a micro base: `MODEL`, with `overrides` (another recipe's model table) on top."""
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=None, **{**MODEL, **overrides})


def solo_view(facts: list[str], question: str, chat=None) -> list[dict]:
    """What a copy sees when it holds every fact: the role prompt, the facts and question, the final instruction."""
    chat = chat or micro_chat_config()
    p = chat.prompts
    facts_text = "\n".join(p.fact_bullet + f for f in facts)
    return [{"role": "system", "content": p.system.format(name="A", partner="B")},
            {"role": "user", "content": p.task.format(facts=facts_text, question=question) + "\n\n"
             + p.final.format(partner="B", max_tokens=chat.max_final_tokens)}]


# ---- the corpus --------------------------------------------------------------------------------------------------

class Corpus:
    """Batches of (ids, loss mask) drawn from a seeded generator: the same batches for the same seed."""

    stream = "micro-corpus"
    """The name of the corpus's random stream (a subclass names its own)."""

    def __init__(self, tokenizer, seed: int = 0):
        self.tok = tokenizer
        self.rng = random.Random(f"{self.stream}/{seed}")
        self.assistant = tokenizer.convert_tokens_to_ids(ASSISTANT)
        self.end = tokenizer.convert_tokens_to_ids(END)
        self.setup()

    def setup(self) -> None:
        """What `texts` draws from (a subclass sets up its own)."""
        self.problems = task.make_problems("train", CORPUS["n_problems"], CORPUS["problem_seed"])
        self.chat = micro_chat_config()
        self.protocol = protocol_of(self.chat)
        self.rep = script.Repertoire(**CORPUS["repertoire"])

    def texts(self, n: int) -> list[str]:
        """`n` training texts (each a view plus the message written after it)."""
        out: list[str] = []
        while len(out) < n:
            p = self.rng.choice(self.problems)
            share = CORPUS["solo_share"]  # of sequences; a chat gives two, so draw a solo with 2s / (1 + s)
            if self.rng.random() < 2 * share / (1 + share):
                facts = task_facts(p)
                out.append(render_view(self.tok, solo_view(facts, p.question, self.chat))
                           + script.solo_answer(facts) + END)
                continue
            arm = "cut" if self.rng.random() < CORPUS["cut_share"] else "chat"
            messages = script.scripted_chat(p.facts_a, p.facts_b, arm, self.rng, self.rep)
            for name, facts, turn in (("A", p.facts_a, 2), ("B", p.facts_b, 3)):
                seen = view(Seat(list(facts), p.question), turn, messages[:turn], ARMS[arm], self.protocol, self.chat)
                out.append(render_view(self.tok, seen) + messages[turn] + END)
        return out[:n]

    def batches(self, n: int, group: int = 4):
        """Endless batches of `n` sequences: ids [n, L] right-padded, loss mask [n, L] (assistant message tokens).

        `group` batches are drawn at once and cut by length, so a batch holds sequences of similar length and
        little padding (no attention mask is needed: with right padding, causal attention never reads a pad
        before a real token)."""
        while True:
            rows = self.tok(self.texts(n * group), add_special_tokens=False)["input_ids"]
            rows.sort(key=len)
            chunks = [rows[i:i + n] for i in range(0, len(rows), n)]
            self.rng.shuffle(chunks)
            for chunk in chunks:
                yield self._tensors(chunk)

    def _tensors(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.tok.pad_token_id, dtype=torch.long)
        loss = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            inside = False
            for j, t in enumerate(row):
                if inside:
                    loss[i, j] = True
                    inside = t != self.end
                elif t == self.assistant:
                    inside = True
        return ids, loss


def task_facts(problem) -> list[str]:
    """All of a problem's facts in text order."""
    return list(problem.facts)


MICRO = BaseRecipe("micro", MODEL, CORPUS, TRAIN, VERSION, (), Corpus, ASSETS)
"""The two-seat micro base, the `micro` model."""


# ---- pretraining -------------------------------------------------------------------------------------------------

def _lr(step: int, t: dict) -> float:
    if step < t["warmup"]:
        return t["lr"] * (step + 1) / t["warmup"]
    frac = (step - t["warmup"]) / max(1, t["steps"] - t["warmup"])
    return t["lr"] * (t["min_lr_ratio"] + (1 - t["min_lr_ratio"]) * 0.5 * (1 + math.cos(math.pi * frac)))


def pretrain(out_dir, *, seed: int = 0, steps: int | None = None, progress: bool = True, threads: int = 2,
             model_overrides: dict | None = None, device: str = "cpu", recipe: BaseRecipe | None = None) -> Path:
    """Pretrain a micro base (`recipe`, default `MICRO`) from scratch on its scripted corpus and save it (model +
    tokenizer) to `out_dir`.

    Deterministic for a given seed, device and thread count. `steps` shortens the schedule (tests);
    `model_overrides` changes the model's shape (tests build a tinier one).
    """
    from transformers import Qwen2ForCausalLM

    recipe = recipe or MICRO
    t = recipe.train
    out_dir = Path(out_dir)
    steps = t["steps"] if steps is None else steps
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    try:
        tok = recipe.tokenizer()
        config = model_config(tok, **{**recipe.model, **(model_overrides or {})})
        model = Qwen2ForCausalLM(config).to(device)
        if t["number_init"]:
            _init_numbers(model, tok, t["number_init"])
        model.train()
        result_ids = torch.tensor(tok.convert_tokens_to_ids(["=", BOXED]), device=device)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                                 {"params": rest, "weight_decay": 0.0}], lr=t["lr"], betas=(0.9, 0.95))
        corpus = recipe.corpus_type(tok, seed)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps, desc=f"pretraining the {recipe.name} base", unit="step")
        start = time.time()
        ema = None
        batches = corpus.batches(t["batch"])
        for step in range(steps):
            ids, mask = (x.to(device) for x in next(batches))
            for group in opt.param_groups:
                group["lr"] = _lr(step * t["steps"] // max(steps, 1), t)
            logits = model(input_ids=ids).logits[:, :-1]  # [B, L-1, V]
            target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
            per_token = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1),
                                                          ignore_index=-100, reduction="none").view_as(target)
            weight = mask[:, 1:].float()
            if t["result_weight"] != 1.0:  # a sum's result: the token after `=` or `\boxed{`
                weight = weight * torch.where(torch.isin(ids[:, :-1], result_ids), t["result_weight"], 1.0)
            loss = (per_token * weight).sum() / weight.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
            opt.step()
            ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{ema:.3f}")
        if bar is not None:
            bar.close()
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        out_dir.mkdir(parents=True, exist_ok=True)
        model.to("cpu").save_pretrained(out_dir, safe_serialization=True)
        tok.save_pretrained(out_dir)
        meta = {"recipe_key": recipe.key(), "seed": seed, "steps": steps, "threads": threads,
                "seconds": round(time.time() - start, 1), "final_loss": ema,
                "parameters": sum(p.numel() for p in model.parameters()), "torch": torch.__version__,
                "device": str(device)}
        (out_dir / "micro.json").write_text(json.dumps(meta, indent=2))
        return out_dir
    finally:
        torch.set_num_threads(old_threads)


def _init_numbers(model, tok, scale: float) -> None:
    """Start each number token's embedding with Fourier features of its value (mod 100), so sums are easier to
    learn: the embedding of n holds cos and sin of 2 pi k n / 100 for k = 1..dim/4 in its first half."""
    emb = model.get_input_embeddings().weight
    dim = emb.shape[1] // 2
    with torch.no_grad():
        for n in range(task.MAX_NUMBER + 1):
            i = tok.convert_tokens_to_ids(str(n))
            k = torch.arange(1, dim // 2 + 1, dtype=torch.float32)
            angle = 2 * math.pi * k * n / 100
            emb[i, :dim] = scale * torch.cat([torch.cos(angle), torch.sin(angle)]).to(emb.device)


# ---- the cached base ---------------------------------------------------------------------------------------------

def is_complete(folder: Path, key: str) -> bool:
    """Whether `folder` holds a micro base pretrained under the recipe `key`: its micro.json names that key and
    its weights are there."""
    try:
        meta = json.loads((folder / "micro.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("recipe_key") == key and (folder / "model.safetensors").exists()


def micro_base_path(recipe: BaseRecipe | None = None, *, rebuild: bool = False, progress: bool = True) -> Path:
    """The folder of the micro base `recipe` (default `MICRO`; `teams.TEAMS`): cached, else copied from the
    shipped checkpoint, else pretrained once.

    The cache is `$TALKTOSOLVE_CACHE` (default `~/.cache/talktosolve`)`/<name>-base-<key>`; `rebuild` pretrains
    it again from scratch (the `micro` base: a few minutes on 2 CPU cores) instead of using the cache or the
    shipped copy.
    """
    recipe = recipe or MICRO
    name, key = recipe.name, recipe.key()
    target = cache_root() / f"{name}-base-{key}"
    if rebuild and target.exists():
        shutil.rmtree(target)
    if is_complete(target, key):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-base-{key}.", dir=target.parent))
    try:
        if not rebuild and is_complete(recipe.assets, key):
            for f in recipe.assets.iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / f.name)
        else:
            pretrain(tmp, progress=progress, recipe=recipe)
        try:
            os.replace(tmp, target)  # another process may have finished first: keep its folder
        except OSError:
            if not is_complete(target, key):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_micro_base(path=None, *, dtype=torch.float32, recipe: BaseRecipe | None = None):
    """(model, tokenizer) of a micro base (the folder `path`, else the base `recipe`, default `MICRO`): the model
    through `AutoModelForCausalLM` like any Hugging Face model, the tokenizer through `tokenizer.load_tokenizer`
    (see there why not `AutoTokenizer`)."""
    from transformers import AutoModelForCausalLM

    path = Path(path) if path else micro_base_path(recipe)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, load_tokenizer(path)
