"""`bench/turn_overlap.py` counts the decode steps of real chats' calls turn by turn (each turn as long as its
longest message) and carried on (each call as long as its longest chat), and groups chats into the calls a recipe
made: a training step holds every run's chats of that step, an evaluation pass `batch_evals` evaluations'
`batch_chats` chats each."""

import json
from pathlib import Path

from helpers import bench_script

turn_overlap = bench_script("turn_overlap")


def test_a_call_pays_each_turns_longest_message_turn_by_turn_and_its_longest_chat_carried_on():
    staggered = [[10, 1], [1, 10]]  # each chat is short; each turn has a long message
    at_limits = [[10, 10], [1, 1]]  # one chat is long in every turn: carrying on saves nothing
    c = turn_overlap.counts([staggered, at_limits])
    assert c["decode_steps_turn_by_turn"] == 20 + 20
    assert c["decode_steps_carried_on"] == 11 + 20
    assert c["row_steps"] == 22 + 22 and c["calls_no_shorter"] == 1


def write(path: Path, chats: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in chats))


def chat(lengths, **extra) -> dict:
    return {"messages": [{"turn": t, "tokens": n} for t, n in reversed(list(enumerate(lengths)))], **extra}


def test_calls_are_grouped_as_the_recipe_played_them(tmp_path):
    for run in ("chat-s0", "cut-s0"):
        write(tmp_path / "runs" / run / "transcripts.jsonl", [chat([s + 1, 2], step=s) for s in range(3)])
    for name in ("a", "b", "c"):
        write(tmp_path / "evals" / name / "chats.jsonl", [chat([i, 1]) for i in range(5)])
    steps = turn_overlap.training_calls(tmp_path)
    assert steps == [[[1, 2], [1, 2]], [[2, 2], [2, 2]], [[3, 2], [3, 2]]]  # each step: both runs' chats
    passes = turn_overlap.evaluation_calls(tmp_path, batch_chats=2, batch_evals=2)
    assert [len(p) for p in passes] == [4, 4, 2, 2, 2, 1]  # evaluations a and b together, then c alone
    assert passes[0] == [[0, 1], [1, 1], [0, 1], [1, 1]]
    write(tmp_path / "evals" / "c" / "chats.jsonl", [chat([9, 1]) for _ in range(5)])
    played = turn_overlap.evaluation_calls(tmp_path, batch_chats=2, batch_evals=2, order=["c", "a", "b"])
    assert played[0] == [[9, 1], [9, 1], [0, 1], [1, 1]]  # c and a together, in the order played
