"""Pretrain the micro base from scratch, then measure the untrained pair it makes.

    python bench/micro_base.py [--steps N] [--out DIR] [--json FILE] [--problems 200] [--load DIR]

Prints the pretraining time and, for the untrained pair on held-out micro problems (`--problems` x 2 chats,
temperature 1, each arm): team accuracy (mean of A's and B's correctness), A's and B's accuracy, send, use, ask,
agree; and solo accuracy (one copy that sees every fact). Writes every figure as JSON. Targets (micro issue):
team accuracy 0.05-0.35 in the chat arm and lower in the cut arm, send 0.3-0.8, use at most 0.5, solo >= 0.9.
`--load DIR` skips pretraining and measures a saved base.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from talktosolve.engine import Engine  # noqa: E402
from talktosolve.grading import grade_many  # noqa: E402
from talktosolve.micro.base import CORPUS, MODEL, TRAIN, load_micro_base, pretrain, solo_view, task_facts  # noqa: E402
from talktosolve.micro.prompts import micro_chat_config  # noqa: E402
from talktosolve.micro.task import make_problems  # noqa: E402
from talktosolve.rollout import Player, play_chats  # noqa: E402
from talktosolve.talk import aggregate_talk, talk_metrics  # noqa: E402


def _engine(model, tok, chat) -> Engine:
    return Engine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, temperature=chat.temperature)


def solo_accuracy(model, tok, problems, *, seed: int = 1234, batch: int = 200) -> float:
    chat = micro_chat_config()
    engine = _engine(model, tok, chat)
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    finals = []
    for i in range(0, len(problems), batch):
        part = problems[i:i + batch]
        prompts = [tok(tok.apply_chat_template(solo_view(task_facts(p), p.question, chat), tokenize=False,
                                               add_generation_prompt=True), add_special_tokens=False)["input_ids"]
                   for p in part]
        outs = engine.generate(prompts, chat.max_final_tokens, gen)
        finals += [tok.decode(o, skip_special_tokens=True) for o in outs]
    return sum(grade_many(finals, [p.gold for p in problems])) / max(len(problems), 1)


def pair_figures(model, tok, problems, arm: str, *, chats: int = 2, seed: int = 1234) -> dict:
    """Team accuracy and talk metrics of the pair (two copies of `model`) in `arm`."""
    chat = micro_chat_config()
    player = Player(_engine(model, tok, chat), tok, "base")
    played = play_chats(problems, arm, (player, player), chat, chats_per_problem=chats, seed=seed)
    talk = aggregate_talk([talk_metrics(c.seats["A"].facts, c.seats["B"].facts, c.seats["A"].question, c.messages)
                           for c in played])
    n = len(played)
    return {"team": sum(c.reward for c in played) / n, "acc_a": sum(c.correct["A"] for c in played) / n,
            "acc_b": sum(c.correct["B"] for c in played) / n,
            "truncated": sum(t.truncated for c in played for t in c.turns) / (4 * n),
            **{k: talk[k] for k in ("send", "send_a", "send_b", "use", "use_a", "use_b", "ask", "agree")},
            "example": [t.text for t in played[0].turns]}


def measure(model, tok, *, n_problems: int = 200, chats: int = 2, seed: int = 1234) -> dict:
    problems = make_problems("test", n_problems, 0)
    model.eval()
    out = {"solo": solo_accuracy(model, tok, problems, seed=seed)}
    for arm in ("chat", "cut"):
        out[arm] = pair_figures(model, tok, problems, arm, chats=chats, seed=seed)
    return out


def table(fig: dict) -> str:
    keys = ("team", "acc_a", "acc_b", "send", "send_a", "send_b", "use", "use_a", "use_b", "ask", "agree",
            "truncated")
    lines = [f"{'arm':6s}" + "".join(f"{k:>8s}" for k in keys)]
    for arm in ("chat", "cut"):
        row = fig[arm]
        lines.append(f"{arm:6s}" + "".join(f"{row[k]:8.3f}" if row[k] is not None else f"{'-':>8s}" for k in keys))
    lines.append(f"solo accuracy (all facts): {fig['solo']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="pretraining steps (default: the recipe's)")
    ap.add_argument("--out", default=None, help="where to save the base (default: a temporary folder)")
    ap.add_argument("--load", default=None, help="measure this saved base instead of pretraining")
    ap.add_argument("--json", default="micro_base.json", help="where to write the figures")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="pretrain and measure here (cpu; cuda for quick studies)")
    ap.add_argument("--train", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a pretraining setting of talktosolve.micro.base.TRAIN (studies)")
    ap.add_argument("--model", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a model setting of talktosolve.micro.base.MODEL (studies)")
    ap.add_argument("--corpus", nargs="*", default=[], metavar="KEY=VALUE",
                    help="override a corpus setting of talktosolve.micro.base.CORPUS (studies)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    result: dict = {}
    for flag, table_ in (("train", TRAIN), ("corpus", CORPUS), ("model", MODEL)):
        for pair in getattr(args, flag):
            key, value = pair.split("=", 1)
            if key not in table_ or not isinstance(table_[key], (int, float)):
                raise SystemExit(f"--{flag} {pair}: no numeric setting `{key}`; settings: {', '.join(table_)}")
            table_[key] = type(table_[key])(float(value))
            result.setdefault(f"{flag}_overrides", {})[key] = table_[key]
    if args.load:
        path = Path(args.load)
    else:
        path = Path(args.out or tempfile.mkdtemp(prefix="micro-base-"))
        start = time.time()
        pretrain(path, steps=args.steps, threads=args.threads, device=args.device, progress=sys.stderr.isatty())
        result["pretrain_seconds"] = round(time.time() - start, 1)
        print(f"pretraining: {result['pretrain_seconds']} s -> {path}")
    model, tok = load_micro_base(path)
    model.to(args.device)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    start = time.time()
    result.update(measure(model, tok, n_problems=args.problems))
    result["measure_seconds"] = round(time.time() - start, 1)
    result["path"] = str(path)
    print(table(result))
    for arm in ("chat", "cut"):
        print(f"example {arm} chat:", *result[arm]["example"], sep="\n  ")
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
