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

`evaluate_teams` makes several evaluations (`Team` records) and, with `eval.batch_evals` above 1, plays them
together: one slot-mode engine over the frozen base (`fast_engine`) holds every distinct trained adapter of the
group in a slot, and batch b of every team is one `play_chats` call with batch b's seed, each chat's seats read
through their own slots. A team keeps its problems, batches and folder; its chats share random numbers with the
other teams' rows, so they are drawn as one-at-a-time chats are, not equal to them, except under greedy decoding.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from talktosolve.arms import ARMS
from talktosolve.config import EVAL, Config, ConfigError, config_key, key_fields
from talktosolve.experiment.plan import pass_groups
from talktosolve.model.policy import (
    adapter_shape,
    load_player_model,
    load_tokenizer,
    resolve_device,
    stop_ids,
    trained_weights,
    weights_key,
)
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.sampling.factory import make_engine, slot_mode_fits
from talktosolve.sampling.rollout import Player, play_chats
from talktosolve.store import read_json, write_json, write_text
from talktosolve.team import reward
from talktosolve.team.talk import aggregate_talk, chat_talk


class EvaluationError(RuntimeError):
    """An evaluation that cannot run as configured; the message says which setting to change."""


@contextlib.contextmanager
def says_what_to_lower(cfg: Config, what: str, teams: int = 1):
    """A GPU out-of-memory inside an evaluation (or a replay of one) becomes one line naming the setting that
    bounds its memory: how many chats are sampled together (`teams` evaluations sharing the passes)."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as e:
        if teams > 1:
            raise EvaluationError(
                f"{what}: the GPU ran out of memory sampling {teams} evaluations x eval.batch_chats="
                f"{cfg.eval.batch_chats} chats together. Lower eval.batch_evals (now {cfg.eval.batch_evals}; "
                f"--set eval.batch_evals={max(1, teams // 2)}) and rerun the same command: finished stages are kept."
            ) from e
        lower = max(cfg.eval.chats_per_problem, cfg.eval.batch_chats // 2)
        raise EvaluationError(
            f"{what}: the GPU ran out of memory sampling eval.batch_chats={cfg.eval.batch_chats} chats together. "
            f"Lower it (--set eval.batch_chats={lower}) and rerun the same command: finished stages are kept."
        ) from e


def eval_key(cfg: Config, arm: str, seats: dict[str, str | None], roles: dict[str, str] | None = None) -> str:
    """What determines an evaluation's chats: the config fields that declare themselves part of an evaluation's
    key (`config.EVAL`: the model, data and chat sections and how the evaluation samples; not which evaluations
    the recipe makes, nor the replays made of them, nor how many share engine passes, which changes which random
    numbers a chat draws, not what it is drawn from), the arm, and who plays each seat (how the runs were
    trained is in their keys: the model section is the base's)."""
    return config_key({**key_fields(cfg, EVAL), "arm": arm,
                       "seats": {seat: weights_key(path, (roles or {}).get(seat, seat))
                                 for seat, path in seats.items()}})


def is_current(out_dir: Path, key: str) -> bool:
    summary = Path(out_dir) / "summary.json"
    return summary.exists() and read_json(summary).get("key") == key


@dataclass(frozen=True)
class Team:
    """One evaluation to make: where it is written, its arm, who plays each seat (a run or adapter folder; None
    or absent: the untrained base) and, for runs with per-role weights, which seat's weights play each seat."""

    out_dir: Path
    arm: str = "chat"
    seats: dict[str, str | None] | None = None
    roles: dict[str, str] | None = None
    label: str = "eval"


@dataclass(frozen=True)
class _Seated:
    """A team checked against the protocol: every seat named, roles that differ from their seat, its key."""

    team: Team
    seats: dict[str, str | None]
    roles: dict[str, str]
    key: str
    named: dict


def evaluate(cfg: Config, problems: list, out_dir: Path, *, arm: str = "chat",
             seats: dict[str, str | None] | None = None, roles: dict[str, str] | None = None,
             progress: bool = True, label: str = "eval") -> dict:
    """Evaluate the team whose seat s is played by `seats[s]` (a run or adapter folder; None or absent: the
    untrained base) in `arm`; returns the summary. `roles[s]`: which seat's weights of a run with per-role
    weights play seat s (absent: its own; `{"A": "B", "B": "A"}` swaps the roles)."""
    protocol = protocol_of(cfg.chat)
    seated = seat_team(cfg, protocol, Team(Path(out_dir), arm, seats, roles, label))
    if is_current(seated.team.out_dir, seated.key):
        return _current(seated)
    return _evaluate_alone(cfg, problems, seated, protocol, progress)


def evaluate_teams(cfg: Config, teams: list[Team], problems: list, *, progress: bool = True) -> list[dict]:
    """Evaluate every team (one folder each, as `evaluate` writes it); returns their summaries in order.

    Those not already current are played `eval.batch_evals` at a time in shared engine passes: one slot-mode
    engine over the frozen base holds each distinct set of trained weights in a slot, every team's chats of a
    batch are sampled together, each seat of each chat through its own weights (the base: no adapter). Teams
    whose weights cannot share an engine (full fine-tuning, adapters of other shapes, an architecture the
    static engine lacks) are evaluated one at a time, as `evaluate` does."""
    protocol = protocol_of(cfg.chat)
    seated = [seat_team(cfg, protocol, team) for team in teams]
    summaries: dict[int, dict] = {}
    pending = []
    for i, s in enumerate(seated):
        if is_current(s.team.out_dir, s.key):
            summaries[i] = _current(s)
        else:
            pending.append(i)
    groups = pass_groups(pending, cfg.eval.batch_evals)
    # The slot engine, kept from group to group (loaded and captured once), with slots for the most adapters any
    # group holds.
    engines: dict = {"slots needed": max((len(_weights([seated[i] for i in g])[1]) for g in groups if len(g) > 1),
                                         default=0)}
    for group in groups:
        lineups = slot_lineups(cfg, [seated[i] for i in group], engines) if len(group) > 1 else None
        if lineups is None:
            for i in group:
                summaries[i] = _evaluate_alone(cfg, problems, seated[i], protocol, progress)
        else:
            for i, summary in zip(group, _evaluate_together(cfg, problems, [seated[i] for i in group], lineups,
                                                            protocol, progress)):
                summaries[i] = summary
    return [summaries[i] for i in range(len(teams))]


def seat_team(cfg: Config, protocol: Protocol, team: Team) -> _Seated:
    """A team with its players loaded: who plays each seat (a run's weights or the base), checked against the
    protocol's seats, ready for `evaluate_teams` to play."""
    team = replace(team, out_dir=Path(team.out_dir))
    unknown = sorted(set(team.seats or {}) - set(protocol.seats))
    if unknown:
        raise ConfigError(f"no seat {', '.join(unknown)} in this protocol; its seats are {', '.join(protocol.seats)}.")
    seats = {seat: (team.seats or {}).get(seat) for seat in protocol.seats}
    roles = team.roles or {}
    unknown = sorted(set(roles) - set(protocol.seats)) + sorted(set(roles.values()) - set(protocol.seats))
    if unknown:
        raise ConfigError(f"roles name {', '.join(unknown)}, not seats of this protocol ({', '.join(protocol.seats)}).")
    roles = {seat: role for seat, role in roles.items() if role != seat}
    named = {"seats": {seat: path or "base" for seat, path in seats.items()}, **({"roles": roles} if roles else {})}
    return _Seated(team, seats, roles, eval_key(cfg, team.arm, seats, roles), named)


def _current(seated: _Seated) -> dict:
    # Named as this call names them: a moved or copied folder's summary holds the old paths.
    return {**read_json(seated.team.out_dir / "summary.json"), **seated.named}


def _evaluate_alone(cfg: Config, problems: list, seated: _Seated, protocol: Protocol, progress: bool) -> dict:
    """One team, with its own engines (one per distinct model)."""
    from tqdm.auto import tqdm

    e = cfg.eval
    problems = problems[: e.n_problems]
    players = load_players(cfg, seated.seats, seated.roles)
    began = time.perf_counter()
    chats = []
    # Counted in messages, turn by turn: one batch can be the whole evaluation.
    bar = tqdm(total=len(problems) * e.chats_per_problem * protocol.n_turns, desc=seated.team.label, unit="msg",
               disable=not progress, dynamic_ncols=True)
    with says_what_to_lower(cfg, seated.team.label):
        for batch, seed in batches(cfg, problems):
            played = play_chats(batch, ARMS[seated.team.arm], players, protocol, cfg.chat,
                                chats_per_problem=e.chats_per_problem, seed=seed,
                                progress=lambda turn, n=len(batch) * e.chats_per_problem: bar.update(n))
            reward.score_chats(played, protocol)
            chats += played
    bar.close()
    return _write(cfg, seated, chats, time.perf_counter() - began, protocol)


def _evaluate_together(cfg: Config, problems: list, group: list[_Seated], lineups: list[dict], protocol: Protocol,
                       progress: bool) -> list[dict]:
    """Several teams in the same engine passes: batch b of every team in one `play_chats` call (with batch b's
    seed), each chat through its team's lineup; each team's wall time is its share of the passes."""
    from tqdm.auto import tqdm

    e = cfg.eval
    problems = problems[: e.n_problems]
    label = f"eval {len(group)} together"
    began = time.perf_counter()
    chats: list[list] = [[] for _ in group]
    bar = tqdm(total=len(group) * len(problems) * e.chats_per_problem * protocol.n_turns, desc=label, unit="msg",
               disable=not progress, dynamic_ncols=True)
    with says_what_to_lower(cfg, label, len(group)):
        for batch, seed in batches(cfg, problems):
            n = len(batch) * e.chats_per_problem
            played = play_chats(batch * len(group), [ARMS[s.team.arm] for s in group for _ in batch],
                                [lineup for lineup in lineups for _ in range(n)], protocol, cfg.chat,
                                chats_per_problem=e.chats_per_problem, seed=seed,
                                progress=lambda turn, n=n * len(group): bar.update(n))
            reward.score_chats(played, protocol)
            for j in range(len(group)):
                chats[j] += played[j * n:(j + 1) * n]
    bar.close()
    seconds = (time.perf_counter() - began) / len(group)
    return [_write(cfg, s, c, seconds, protocol) for s, c in zip(group, chats)]


def _write(cfg: Config, seated: _Seated, chats: list, seconds: float, protocol: Protocol) -> dict:
    """An evaluation's folder: chats.jsonl, config.json, then summary.json (written last: the folder is done)."""
    out_dir = seated.team.out_dir
    transcripts = [c.transcript() for c in chats]
    summary = summarize(chats, transcripts, cfg.eval.chats_per_problem, protocol)
    summary.update({"seconds": seconds, "key": seated.key, "arm": seated.team.arm, **seated.named})
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


def slot_lineups(cfg: Config, group: list[_Seated], engines: dict | None = None) -> list[dict[str, Player]] | None:
    """Each team's lineup on one engine: a slot-mode engine over the frozen base with every distinct set of
    trained weights of the group in a slot (the base seats read none), or, when no seat is trained, one plain
    engine for all. None when the weights cannot share one engine: not LoRA adapters, adapters of other shapes
    (rank, alpha, targets), or an architecture the static engine lacks.

    `engines` (a dict kept by the caller from group to group): the slot engine is taken from it when it has the
    group's adapter shape and slots enough, so the base is loaded and the graphs captured once, not per group;
    only the adapters are loaded into its slots. A new one gets at least `engines["slots needed"]` slots."""
    seated, weights = _weights(group)
    engines = {} if engines is None else engines
    if not weights:  # every seat the base: the held slot engine's base rows, else one plain engine
        if "slots" in engines:
            base = Player(engines["slots"][2], load_tokenizer(cfg.model), "base", None)
            return [{seat: base for seat in lineup} for lineup in seated]
        players = load_players(cfg, {seat: None for seat in group[0].seats})
        return [players for _ in group]
    shapes = {adapter_shape(w) for w in weights}
    if cfg.model.finetune != "lora" or len(shapes) != 1 or None in shapes:
        return None
    device = resolve_device(cfg.device)
    tokenizer = load_tokenizer(cfg.model)
    held = engines.get("slots")
    if held is not None and held[0] == shapes and held[2].slots >= len(weights):
        _, model, engine = held
    else:
        engines.pop("slots", None)  # freed before the next one loads
        model = load_player_model(cfg, weights[0], device)
        if not slot_mode_fits(model, cfg.chat.engine):
            return None
        engine = make_engine(model, stop_ids=stop_ids(tokenizer, model), pad_id=tokenizer.pad_token_id,
                             temperature=cfg.chat.temperature, force_max_length=cfg.chat.force_max_length,
                             kind=cfg.chat.engine, slots=max(len(weights), engines.get("slots needed", 0)))
        engines["slots"] = (shapes, model, engine)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    for j, w in enumerate(weights):
        set_peft_model_state_dict(model, load_file(str(w / "adapter_model.safetensors"), device=str(device)))
        engine.store_adapter(j)
    players = {w: Player(engine, tokenizer, f"slot-{j}", j) for j, w in enumerate(weights)}
    base = Player(engine, tokenizer, "base", None)
    return [{seat: base if w is None else players[w] for seat, w in lineup.items()} for lineup in seated]


def _weights(group: list[_Seated]) -> tuple[list[dict], list[Path]]:
    """Each team's seats as weights folders (None: the base), and the distinct ones in order of first use."""
    seated = [{seat: None if path is None else trained_weights(path, s.roles.get(seat, seat))
               for seat, path in s.seats.items()} for s in group]
    return seated, list(dict.fromkeys(w for lineup in seated for w in lineup.values() if w is not None))


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
