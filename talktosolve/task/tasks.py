"""Where a run's problems come from: GSM8K (built into split-fact problems) or a generated task (the micro world's,
registered here by `talktosolve.micro` through `register_task`, so this module imports no world of its own).

Both give the same `Problem` records (id, question, facts, gold) and pass the same checks, so every later stage
is task-agnostic; an arm deals the facts to the protocol's seats. Eligibility depends on the number of seats
(every hand must hold a number), so the seats are part of the built data's key. Built GSM8K problems are cached in the run's `data/` folder, keyed by the data
config that produced them.
"""

from __future__ import annotations

import json
from pathlib import Path

from talktosolve.arms import deal_round_robin
from talktosolve.config import Config, config_key
from talktosolve.store import read_json, write_json
from talktosolve.task.data import Problem, build_datasets, read_problems
from talktosolve.task.split import split_problem

GENERATED: dict = {}
"""`{data.task: make(split, n, seed, seats) -> [Problem]}`: the tasks whose problems are made, not read."""


def register_task(name: str, make) -> None:
    """Make `name` a `data.task` whose problems `make(split, n, seed, seats)` generates (split: train or test)."""
    GENERATED[name] = make


def _is_built(folder: Path) -> bool:
    """A folder written by `talktosolve data` (problem records), not raw GSM8K."""
    first = folder / "train.jsonl"
    if not first.is_file():
        return False
    with open(first, "rb") as f:
        line = f.readline()
    try:
        first_row = json.loads(line.decode("utf-8"))
    except ValueError:  # bad JSON or not UTF-8: raw GSM8K at best, whose rows data.py checks one by one
        return False
    return isinstance(first_row, dict) and ("facts" in first_row or "facts_a" in first_row)


def load_problems(cfg: Config, data_dir: Path | None = None) -> tuple[list[Problem], list[Problem], dict | None]:
    """(train, test, eligibility summary or None) for this config."""
    d = cfg.data
    seats = tuple(cfg.chat.seats)
    if d.task in GENERATED:
        make = GENERATED[d.task]
        return make("train", d.n_train, d.data_seed, seats), make("test", d.n_test, d.data_seed, seats), None
    if d.gsm8k and Path(d.gsm8k).is_dir() and _is_built(Path(d.gsm8k)):
        folder = Path(d.gsm8k)
        train, test = read_problems(folder / "train.jsonl"), read_problems(folder / "test.jsonl")
        return train[: d.n_train], test[: d.n_test], None
    if data_dir is None:
        raise ValueError("load_problems needs a data_dir to build GSM8K problems into")
    data_dir = Path(data_dir)
    key = config_key({"gsm8k": str(Path(d.gsm8k).resolve()) if d.gsm8k else None, "n_train": d.n_train,
                      "n_test": d.n_test, "seed": d.data_seed, "seats": list(seats)})
    meta = data_dir / "meta.json"
    if meta.exists() and read_json(meta).get("key") == key:
        summary = read_json(meta)["summary"]
    else:
        summary = build_datasets(d.gsm8k, data_dir, n_train=d.n_train, n_test=d.n_test, seed=d.data_seed,
                                 seats=seats)
        write_json(meta, {"key": key, "summary": summary})
    return read_problems(data_dir / "train.jsonl"), read_problems(data_dir / "test.jsonl"), summary


def split_checks(problems: list[Problem], seats=("A", "B")) -> dict:
    """The data checks of the recipe, computed for its seats: every hand (round-robin deal) holds a number; the
    hands are disjoint and together are all the facts. The second is checked by position, not by text (a problem
    may state the same sentence twice): each fact index is dealt to exactly one seat, and re-splitting the text
    (facts, then the question) gives back exactly the same facts and question."""
    from talktosolve.task.numbers import has_number

    seats = tuple(seats)
    hold = all(any(map(has_number, hand)) for p in problems for hand in deal_round_robin(p.facts, seats).values())
    complete = True
    for p in problems:
        dealt = sorted(i for hand in deal_round_robin(list(range(len(p.facts))), seats).values() for i in hand)
        again = split_problem(" ".join(list(p.facts) + [p.question]), seats)
        if dealt != list(range(len(p.facts))) or (list(again.facts), again.question) != (list(p.facts), p.question):
            complete = False
            break
    return {"hands_hold_numbers": hold, "hands_disjoint_and_complete": complete, "n_checked": len(problems)}
