"""Message-ablation replay of a finished evaluation, and its influence figures (`talktosolve.team.influence`).

    eval_dir/influence/
      replays.jsonl     every replayed chat: its problem, chat, position, pass (`control` or an ablation), what
                        the listeners were shown, the messages from the position on and the listeners' answers
      influence.json    the outcomes (one per chat, position, ablation and listener), the figures, the share of
                        control replays that repeat the recorded chat, the key and the seconds

For each position t of the protocol (`influence.positions`) the evaluation's first `eval.influence_problems`
problems are replayed once as a control and once per ablation: every chat starts from its recorded messages
0..t (the ablation changes only what the listeners are shown of message t), and turns t+1 .. the last
listener's final are re-sampled. Each pass plays exactly the evaluation's batches with their seeds
(`evaluate.batches`), so passes draw the same random numbers row by row; when the replayed problems are the
evaluation's whole first batch, a control replay repeats the recorded chat wherever the sampler is
deterministic in its inputs (the share is reported as `reproduced`).

A replay checks its input before it writes anything: the evaluation must be finished, made under this config
(its key: same model, data, chat and eval settings), its transcripts complete, and the positions asked for
must be messages some partner answers after.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from talktosolve.arms import ARMS
from talktosolve.config import Config, config_key
from talktosolve.experiment.evaluate import batches, eval_key, load_players, says_what_to_lower
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.sampling.rollout import Prefix, play_chats
from talktosolve.store import read_json, write_json, write_text
from talktosolve.task.data import Problem
from talktosolve.team import reward
from talktosolve.team.influence import InfluenceError, Position, ablations, figures, outcome, positions

CONTROL = "control"
"""The pass that changes nothing: every ablation is measured against it."""


def influence_key(cfg: Config, summary: dict, turns: list[int]) -> str:
    """What determines a replay's output: the evaluation replayed (its key), the problems, ablations and turns."""
    e = cfg.eval
    return config_key({"eval": summary["key"], "problems": e.influence_problems, "kinds": list(e.influence_kinds),
                       "turns": turns})


def _seats(summary: dict) -> dict[str, str | None]:
    return {seat: None if who == "base" else who for seat, who in summary["seats"].items()}


def read_evaluation(cfg: Config, eval_dir: Path) -> tuple[dict, list[dict]]:
    """A finished evaluation's summary and transcripts, checked against this config."""
    eval_dir = Path(eval_dir)
    try:
        summary = read_json(eval_dir / "summary.json")
    except (OSError, ValueError):
        raise InfluenceError(f"{eval_dir} holds no finished evaluation (no readable summary.json).") from None
    needed = {"key", "arm", "seats", "n_chats", "n_problems", "problem_ids"}
    if not isinstance(summary, dict) or not needed <= set(summary):
        raise InfluenceError(f"{eval_dir}/summary.json is not a talktosolve evaluation summary; rerun its "
                             "`talktosolve eval` command.")
    if summary["key"] != eval_key(cfg, summary["arm"], _seats(summary), summary.get("roles")):
        raise InfluenceError(f"{eval_dir} was evaluated under another config (model, data, chat or eval settings, "
                             "or other weights in a seat); give the --preset and --set values it was evaluated with.")
    protocol = protocol_of(cfg.chat)
    chats = []
    with open(eval_dir / "chats.jsonl", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise InfluenceError(f"{eval_dir}/chats.jsonl line {n} is not a whole JSON record (a truncated "
                                     "file?); rerun the evaluation into a new folder.") from None
            if len(row.get("messages", ())) != protocol.n_turns:
                raise InfluenceError(f"{eval_dir}/chats.jsonl line {n} holds {len(row.get('messages', ()))} "
                                     f"messages; this protocol has {protocol.n_turns} turns.")
            chats.append(row)
    if len(chats) != summary["n_chats"]:
        raise InfluenceError(f"{eval_dir}/chats.jsonl holds {len(chats)} chats, its summary {summary['n_chats']}: "
                             "the file is truncated; rerun the evaluation into a new folder.")
    return summary, chats


def chosen_positions(protocol: Protocol, turns: list[int] | None) -> list[Position]:
    """The positions to replay: every one, or those of `turns` (each must be a message some partner answers
    after)."""
    every = positions(protocol)
    if turns is None:
        return every
    by_turn = {p.turn: p for p in every}
    for t in turns:
        if not 0 <= t < protocol.n_turns:
            raise InfluenceError(f"turn {t} is past the chat's end: its turns are 0 to {protocol.n_turns - 1}.")
        if t not in by_turn:
            raise InfluenceError(f"no partner answers after turn {t}, so it has no listener; turns with listeners: "
                                 f"{', '.join(str(p) for p in by_turn)}.")
    return [by_turn[t] for t in sorted(set(turns))]


def replayed_messages(protocol: Protocol, chosen: list[Position], n_chats: int, n_kinds: int) -> int:
    """How many messages the replays sample: every pass re-samples each chat from t+1 to the position's last."""
    return (1 + n_kinds) * n_chats * sum(p.last - p.turn for p in chosen)


def estimate_seconds(summary: dict, protocol: Protocol, messages: int) -> float:
    """The replays' time at the evaluation's own pace (its seconds per sampled message)."""
    return summary.get("seconds", 0.0) / (summary["n_chats"] * protocol.n_turns) * messages


def replay_influence(cfg: Config, eval_dir: Path, *, turns: list[int] | None = None, progress: bool = True,
                     label: str = "influence", players: dict | None = None, announce=None) -> dict:
    """Replay the evaluation in `eval_dir` (see the module docstring); returns influence.json's content.
    `players` (`{seat: rollout.Player}`) replaces the evaluation's own (a scripted policy, in tests).
    `announce(messages, seconds)`, when given, hears the replays' size and estimated time once the input is
    checked and before any model is loaded (not when the folder's replays are already current)."""
    from tqdm.auto import tqdm

    eval_dir = Path(eval_dir)
    protocol = protocol_of(cfg.chat)
    summary, recorded = read_evaluation(cfg, eval_dir)
    chosen = chosen_positions(protocol, turns)
    out = eval_dir / "influence"
    key = influence_key(cfg, summary, [p.turn for p in chosen])
    if (out / "influence.json").exists() and read_json(out / "influence.json").get("key") == key:
        return read_json(out / "influence.json")
    G = cfg.eval.chats_per_problem
    n = min(cfg.eval.influence_problems, summary["n_problems"])
    recorded = recorded[: n * G]
    problems = [Problem(c["problem_id"], c["question"], list(c["facts"]), c["gold"]) for c in recorded[::G]]
    kinds = list(cfg.eval.influence_kinds)
    total = replayed_messages(protocol, chosen, len(recorded), len(kinds))
    if announce is not None:
        announce(total, estimate_seconds(summary, protocol, total))
    arm = ARMS[summary["arm"]]
    players = players or load_players(cfg, _seats(summary), summary.get("roles"))
    began = time.perf_counter()
    bar = tqdm(total=total, desc=label, unit="msg",
               disable=not progress, dynamic_ncols=True)
    rows, outcomes, reproduced = [], [], []
    for position in chosen:
        changes = ablations(recorded, protocol, position, kinds, seed=cfg.eval.seed)
        passes = {CONTROL: None, **changes}
        played = {}
        for name, changed in passes.items():
            prefixes = [Prefix(tuple(m["text"] for m in c["messages"][:position.turn + 1]),
                               {} if changed is None else {position.turn: changed[i].shown})
                        for i, c in enumerate(recorded)]
            played[name] = _play(cfg, protocol, arm, players, problems, prefixes, position, bar)
        for i, c in enumerate(recorded):
            control = played[CONTROL][i]
            if any(control.turns[t].view != c["messages"][t]["view"] for t in range(position.turn + 1)):
                raise InfluenceError(f"{eval_dir}/chats.jsonl: the views of problem {c['problem_id']} up to turn "
                                     f"{position.turn} are not the ones this config builds; was the file edited?")
            after = range(position.turn + 1, position.last + 1)
            reproduced.append(all(control.turns[t].text == c["messages"][t]["text"] for t in after))
            for name, chats in played.items():
                rows.append(_row(chats[i], position, name))
            for kind in kinds:
                for listener in position.listeners:
                    outcomes.append(outcome(c["problem_id"], listener, changes[kind][i],
                                            _heard(control, listener, protocol), _heard(played[kind][i], listener,
                                                                                          protocol)))
    bar.close()
    writers = {p.turn: p.writer for p in chosen}
    result = {
        "key": key, "arm": summary["arm"], "seats": summary["seats"], "n_problems": n, "chats_per_problem": G,
        "kinds": kinds, "positions": [{"turn": p.turn, "writer": p.writer, "listeners": list(p.listeners)}
                                      for p in chosen],
        "reproduced": sum(reproduced) / len(reproduced),
        "figures": figures([outcomes], writers),
        "outcomes": [o.to_json() for o in outcomes],
        "seconds": time.perf_counter() - began,
    }
    write_text(out / "replays.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write_json(out / "influence.json", result)  # written last: its key says the folder is complete
    return result


def _play(cfg: Config, protocol: Protocol, arm, players, problems: list, prefixes: list[Prefix],
          position: Position, bar) -> list:
    """One pass: the evaluation's batches and seeds, each chat from its prefix to the position's last turn."""
    G = cfg.eval.chats_per_problem
    chats = []
    with says_what_to_lower(cfg, "influence replay"):
        for batch, seed in batches(cfg, problems):
            mine = prefixes[len(chats):len(chats) + len(batch) * G]
            played = play_chats(batch, arm, players, protocol, cfg.chat, chats_per_problem=G, seed=seed,
                                prefixes=mine, until=position.last,
                                progress=lambda turn, k=len(mine): bar.update(k))
            reward.grade_finals(played, protocol, position.listeners)
            chats += played
    return chats


def _heard(chat, listener: str, protocol: Protocol) -> dict:
    return {"correct": chat.correct[listener], "answer": chat.answers[listener],
            "final": chat.turns[protocol.final_turn(listener)].text}


def _row(chat, position: Position, name: str) -> dict:
    return {"problem_id": chat.problem_id, "chat": chat.index, "turn": position.turn, "pass": name,
            "shown": chat.shown.get(position.turn),
            "messages": [{"turn": t, "speaker": chat.turns[t].speaker, "text": chat.turns[t].text}
                         for t in range(position.turn, len(chat.turns))],
            "answers": {s: chat.answers[s] for s in position.listeners},
            "correct": {s: chat.correct[s] for s in position.listeners}}
