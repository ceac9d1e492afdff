"""Held-out evaluation of a team: each problem x `chats_per_problem` chats, every seat's answer graded.

Each seat is played by the untrained base or a trained model (a run folder or an adapter folder), chosen seat by
seat, so cross-play (a trained model in one seat, the base in the others) is the same call. Every team is
evaluated with the same sampling seed on the same problems, so the per-problem scores of two evaluations are
paired.

Outputs, in `out_dir`: `chats.jsonl` (every chat, as in training transcripts), `config.json` (every config field)
and `summary.json`: accuracy (mean
of the graded answers per problem: seats x chats, averaged over problems), each seat's accuracy, the per-problem
scores (for the paired comparison), the talk metrics aggregated over chats, and who sat where (`seats`, and
`roles` when a run with per-role weights plays other seats' roles).
"""

from __future__ import annotations

from pathlib import Path

from talktosolve.arms import ARMS
from talktosolve.config import Config, ConfigError, config_key
from talktosolve.fast_engine import make_engine
from talktosolve.policy import load_player_model, load_tokenizer, resolve_device, stop_ids, trained_weights
from talktosolve.protocol import Protocol, protocol_of
from talktosolve import reward
from talktosolve.rollout import Player, play_chats
from talktosolve.store import read_json, write_json, write_text
from talktosolve.talk import aggregate_talk, chat_talk

import contextlib
import json
import time


class EvaluationError(RuntimeError):
    """An evaluation that cannot run as configured; the message says which setting to change."""


@contextlib.contextmanager
def says_what_to_lower(cfg: Config, what: str):
    """A GPU out-of-memory inside an evaluation (or a replay of one) becomes one line naming the setting that
    bounds its memory: how many chats are sampled together."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        lower = max(cfg.eval.chats_per_problem, cfg.eval.batch_chats // 2)
        raise EvaluationError(
            f"{what}: the GPU ran out of memory sampling eval.batch_chats={cfg.eval.batch_chats} chats together. "
            f"Lower it (--set eval.batch_chats={lower}) and rerun the same command: finished stages are kept."
        ) from e


def eval_key(cfg: Config, arm: str, seats: dict[str, str | None], roles: dict[str, str] | None = None) -> str:
    """What determines an evaluation's chats (the influence replays' settings do not)."""
    d = cfg.to_dict()
    # Which evaluations the recipe makes (cross_seed) and the replays made of them (influence*) are not how one
    # evaluation is made.
    evaluation = {k: v for k, v in d["eval"].items() if not k.startswith("influence") and k != "cross_seed"}
    # How the runs were trained is in their keys; an evaluation's own model section is only the base's.
    model = {k: v for k, v in d["model"].items() if k != "adapters"}
    return config_key({"model": model, "data": d["data"], "chat": d["chat"], "eval": evaluation, "arm": arm,
                       "seats": {seat: weights_key(path, (roles or {}).get(seat, seat))
                                 for seat, path in seats.items()}})


def weights_key(path: str | None, role: str | None = None) -> str | None:
    """A player's identity: the base (None), or the config key of the run whose weights it is (with the role it
    plays, when given, for a run with per-role weights), else the weights folder's resolved path; so a moved
    folder of the same run is the same player."""
    if path is None:
        return None
    done = Path(path).expanduser() / "done.json"
    if not done.exists():
        return str(Path(path).expanduser().resolve())
    record = read_json(done)
    return f"{record['key']} {role}" if "roles" in record and role is not None else record["key"]


def is_current(out_dir: Path, key: str) -> bool:
    summary = Path(out_dir) / "summary.json"
    return summary.exists() and read_json(summary).get("key") == key


def evaluate(cfg: Config, problems: list, out_dir: Path, *, arm: str = "chat",
             seats: dict[str, str | None] | None = None, roles: dict[str, str] | None = None,
             progress: bool = True, label: str = "eval") -> dict:
    """Evaluate the team whose seat s is played by `seats[s]` (a run or adapter folder; None or absent: the
    untrained base) in `arm`; returns the summary. `roles[s]`: which seat's weights of a run with per-role
    weights play seat s (absent: its own; `{"A": "B", "B": "A"}` swaps the roles)."""
    from tqdm.auto import tqdm

    protocol = protocol_of(cfg.chat)
    unknown = sorted(set(seats or {}) - set(protocol.seats))
    if unknown:
        raise ConfigError(f"no seat {', '.join(unknown)} in this protocol; its seats are {', '.join(protocol.seats)}.")
    seats = {seat: (seats or {}).get(seat) for seat in protocol.seats}
    unknown = sorted(set(roles or {}) - set(protocol.seats)) + sorted(set((roles or {}).values()) - set(protocol.seats))
    if unknown:
        raise ConfigError(f"roles name {', '.join(unknown)}, not seats of this protocol ({', '.join(protocol.seats)}).")
    roles = {seat: role for seat, role in (roles or {}).items() if role != seat}
    out_dir = Path(out_dir)
    key = eval_key(cfg, arm, seats, roles)
    named = {"seats": {seat: path or "base" for seat, path in seats.items()}, **({"roles": roles} if roles else {})}
    if is_current(out_dir, key):
        # Named as this call names them: a moved or copied folder's summary holds the old paths.
        return {**read_json(out_dir / "summary.json"), **named}
    e = cfg.eval
    problems = problems[: e.n_problems]
    players = load_players(cfg, seats, roles)
    began = time.perf_counter()
    chats = []
    # Counted in messages, turn by turn: one batch can be the whole evaluation.
    bar = tqdm(total=len(problems) * e.chats_per_problem * protocol.n_turns, desc=label, unit="msg",
               disable=not progress, dynamic_ncols=True)
    with says_what_to_lower(cfg, label):
        for batch, seed in batches(cfg, problems):
            played = play_chats(batch, ARMS[arm], players, protocol, cfg.chat, chats_per_problem=e.chats_per_problem,
                                seed=seed, progress=lambda turn, n=len(batch) * e.chats_per_problem: bar.update(n))
            reward.score_chats(played, protocol)
            chats += played
    bar.close()
    transcripts = [c.transcript() for c in chats]
    summary = summarize(chats, transcripts, e.chats_per_problem, protocol)
    summary.update({"seconds": time.perf_counter() - began, "key": key, "arm": arm, **named})
    write_text(out_dir / "chats.jsonl", "".join(json.dumps(t) + "\n" for t in transcripts))
    write_json(out_dir / "config.json", cfg.to_dict())  # what a later replay of these chats needs (`replay`)
    write_json(out_dir / "summary.json", summary)
    return summary


def load_players(cfg: Config, seats: dict[str, str | None], roles: dict[str, str] | None = None) -> dict[str, Player]:
    """Each seat's player (`seats[s]`: a run or adapter folder, or None for the untrained base; `roles[s]`: the
    seat whose weights it plays, for a run with per-role weights, else its own).

    One engine per distinct model: seats played by one model share its engine (each seat keeps its own KV
    session), so its sampling weights and KV cache are held once, not once per seat."""
    device = resolve_device(cfg.device)
    tokenizer = load_tokenizer(cfg.model)
    by_weights: dict = {}
    out = {}
    for seat, path in seats.items():
        role = (roles or {}).get(seat, seat)
        weights = None if path is None else trained_weights(path, role)
        if weights not in by_weights:
            model = load_player_model(cfg, path, device, role)
            by_weights[weights] = Player(make_engine(model, stop_ids=stop_ids(tokenizer, model),
                                                     pad_id=tokenizer.pad_token_id, temperature=cfg.chat.temperature,
                                                     force_max_length=cfg.chat.force_max_length, kind=cfg.chat.engine),
                                         tokenizer)
        out[seat] = by_weights[weights]
    return out


def batches(cfg: Config, problems: list) -> list[tuple[list, int]]:
    """The evaluation's batches of problems and each one's sampling seed (a replay reuses them)."""
    e = cfg.eval
    per_batch = max(1, e.batch_chats // e.chats_per_problem)
    return [(problems[i:i + per_batch], e.seed * 1_000_003 + b)
            for b, i in enumerate(range(0, len(problems), per_batch))]


def summarize(chats: list, transcripts: list[dict], chats_per_problem: int, protocol: Protocol) -> dict:
    """Accuracy per problem (mean of its graded answers: every seat of every chat) and overall, each seat's
    accuracy, and the aggregated talk metrics."""
    scores, ids = [], []
    n_seats = len(protocol.seats)
    for i in range(0, len(chats), chats_per_problem):
        group = chats[i:i + chats_per_problem]
        scores.append(sum(sum(c.correct.values()) for c in group) / (n_seats * len(group)))
        ids.append(group[0].problem_id)
    n = len(chats)
    return {
        "accuracy": sum(scores) / len(scores),
        "acc": {seat: sum(c.correct[seat] for c in chats) / n for seat in protocol.seats},
        "n_problems": len(scores),
        "n_chats": n,
        "problem_ids": ids,
        "scores": scores,
        "talk": aggregate_talk([chat_talk(t, protocol) for t in transcripts]),
        "tokens_per_message": sum(len(t.completion_ids) for c in chats for t in c.turns) / (protocol.n_turns * n),
        "truncated_share": sum(t.truncated for c in chats for t in c.turns) / (protocol.n_turns * n),
    }
