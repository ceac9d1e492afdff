"""Held-out evaluation of a pair of players: each problem x `chats_per_problem` chats, both copies graded.

A player is the untrained base or a trained model (a run folder or an adapter folder), and A and B are chosen
independently, so cross-play (trained A, base B) is the same call. Every model is evaluated with the same
sampling seed on the same problems, so the per-problem scores of two evaluations are paired.

Outputs, in `out_dir`: `chats.jsonl` (every chat, as in training transcripts) and `summary.json`: accuracy (mean
of the 4 graded answers per problem, averaged), A's and B's accuracy, the per-problem scores (for the paired
comparison), and the talk metrics aggregated over chats.
"""

from __future__ import annotations

from pathlib import Path

from talktosolve.chat import SPEAKERS
from talktosolve.config import Config, config_key
from talktosolve.fast_engine import make_engine
from talktosolve.policy import load_player_model, load_tokenizer, resolve_device, stop_ids
from talktosolve.rollout import Player, play_chats
from talktosolve.store import read_json, write_json, write_text
from talktosolve.talk import aggregate_talk, chat_talk

import json
import time


def eval_key(cfg: Config, arm: str, player_a: str | None, player_b: str | None) -> str:
    d = cfg.to_dict()
    return config_key({"model": d["model"], "data": d["data"], "chat": d["chat"], "eval": d["eval"], "arm": arm,
                       "a": _weights_key(player_a), "b": _weights_key(player_b)})


def _weights_key(path: str | None) -> str | None:
    """A player's identity: the base, or the config key of the run whose weights it is (else its path)."""
    if path is None:
        return None
    done = Path(path) / "done.json"
    return read_json(done)["key"] if done.exists() else str(Path(path).resolve())


def is_current(out_dir: Path, key: str) -> bool:
    summary = Path(out_dir) / "summary.json"
    return summary.exists() and read_json(summary).get("key") == key


def evaluate(cfg: Config, problems: list, out_dir: Path, *, arm: str = "chat", player_a: str | None = None,
             player_b: str | None = None, progress: bool = True, label: str = "eval") -> dict:
    """Evaluate A=`player_a`, B=`player_b` (None = the untrained base) in `arm`; returns the summary."""
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    key = eval_key(cfg, arm, player_a, player_b)
    if is_current(out_dir, key):
        # Named as this call names them: a moved or copied folder's summary holds the old paths.
        return {**read_json(out_dir / "summary.json"), "player_a": player_a or "base", "player_b": player_b or "base"}
    e = cfg.eval
    problems = problems[: e.n_problems]
    device = resolve_device(cfg.device)
    tokenizer = load_tokenizer(cfg.model)
    model_a = load_player_model(cfg, player_a, device)
    model_b = model_a if player_b == player_a else load_player_model(cfg, player_b, device)

    def player(m):
        return Player(make_engine(m, stop_ids=stop_ids(tokenizer, m), pad_id=tokenizer.pad_token_id,
                                  temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                                  kind=cfg.chat.engine), tokenizer)

    # One engine serves both copies when they are one model (as in training: each copy keeps its own KV
    # session), so its sampling weights and KV cache are held once, not twice.
    players = (player(model_a),) * 2 if model_b is model_a else (player(model_a), player(model_b))
    began = time.perf_counter()
    per_batch = max(1, e.batch_chats // e.chats_per_problem)
    chats = []
    # Counted in messages, turn by turn: one batch can be the whole evaluation.
    bar = tqdm(total=len(problems) * e.chats_per_problem * len(SPEAKERS), desc=label, unit="msg",
               disable=not progress, dynamic_ncols=True)
    for b, i in enumerate(range(0, len(problems), per_batch)):
        batch = problems[i:i + per_batch]
        chats += play_chats(batch, arm, players, cfg.chat, chats_per_problem=e.chats_per_problem,
                            seed=e.seed * 1_000_003 + b,
                            progress=lambda turn, n=len(batch) * e.chats_per_problem: bar.update(n))
    bar.close()
    transcripts = [c.transcript() for c in chats]
    summary = summarize(chats, transcripts, e.chats_per_problem)
    summary.update({"seconds": time.perf_counter() - began, "key": key, "arm": arm,
                    "player_a": player_a or "base", "player_b": player_b or "base"})
    write_text(out_dir / "chats.jsonl", "".join(json.dumps(t) + "\n" for t in transcripts))
    write_json(out_dir / "summary.json", summary)
    return summary


def summarize(chats: list, transcripts: list[dict], chats_per_problem: int) -> dict:
    """Accuracy per problem (mean of its graded answers) and overall, plus aggregated talk metrics."""
    scores, ids = [], []
    for i in range(0, len(chats), chats_per_problem):
        group = chats[i:i + chats_per_problem]
        scores.append(sum(c.correct["A"] + c.correct["B"] for c in group) / (2 * len(group)))
        ids.append(group[0].problem_id)
    n = len(chats)
    return {
        "accuracy": sum(scores) / len(scores),
        "acc_a": sum(c.correct["A"] for c in chats) / n,
        "acc_b": sum(c.correct["B"] for c in chats) / n,
        "n_problems": len(scores),
        "n_chats": n,
        "problem_ids": ids,
        "scores": scores,
        "talk": aggregate_talk([chat_talk(t) for t in transcripts]),
        "tokens_per_message": sum(len(t.completion_ids) for c in chats for t in c.turns) / (4 * n),
        "truncated_share": sum(t.truncated for c in chats for t in c.turns) / (4 * n),
    }
