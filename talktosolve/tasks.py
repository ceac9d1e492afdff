"""Where a run's problems come from: GSM8K (built into split-fact problems) or the generated micro task.

Both give the same `Problem` records (id, question, facts_a, facts_b, gold) and pass the same checks, so every
later stage is task-agnostic. Built GSM8K problems are cached in the run's `data/` folder, keyed by the data
config that produced them.
"""

from __future__ import annotations

import json
from pathlib import Path

from talktosolve.config import Config, config_key
from talktosolve.data import Problem, build_datasets, read_problems
from talktosolve.split import split_problem
from talktosolve.store import read_json, write_json


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
    return isinstance(first_row, dict) and "facts_a" in first_row


def load_problems(cfg: Config, data_dir: Path | None = None) -> tuple[list[Problem], list[Problem], dict | None]:
    """(train, test, eligibility summary or None) for this config."""
    d = cfg.data
    if d.task == "micro":
        from talktosolve.micro.task import make_problems

        return make_problems("train", d.n_train, d.data_seed), make_problems("test", d.n_test, d.data_seed), None
    if d.gsm8k and Path(d.gsm8k).is_dir() and _is_built(Path(d.gsm8k)):
        folder = Path(d.gsm8k)
        train, test = read_problems(folder / "train.jsonl"), read_problems(folder / "test.jsonl")
        return train[: d.n_train], test[: d.n_test], None
    if data_dir is None:
        raise ValueError("load_problems needs a data_dir to build GSM8K problems into")
    data_dir = Path(data_dir)
    key = config_key({"gsm8k": str(Path(d.gsm8k).resolve()) if d.gsm8k else None, "n_train": d.n_train,
                      "n_test": d.n_test, "seed": d.data_seed})
    meta = data_dir / "meta.json"
    if meta.exists() and read_json(meta).get("key") == key:
        summary = read_json(meta)["summary"]
    else:
        summary = build_datasets(d.gsm8k, data_dir, n_train=d.n_train, n_test=d.n_test, seed=d.data_seed)
        write_json(meta, {"key": key, "summary": summary})
    return read_problems(data_dir / "train.jsonl"), read_problems(data_dir / "test.jsonl"), summary


def split_checks(problems: list[Problem]) -> dict:
    """The data checks of results.json (`checks` in docs/results.md), computed: both halves hold a number; A's
    and B's facts are disjoint and together are all the facts. The second is checked by position, not by text (a
    problem may state the same sentence twice): interleaving A's and B's facts and re-splitting the text must give
    back exactly the same halves and question, which holds only if A has facts 1, 3, 5, ... and B facts 2, 4, ...,
    each once."""
    from talktosolve.numbers import has_number

    halves = all(any(map(has_number, p.facts_a)) and any(map(has_number, p.facts_b)) for p in problems)
    complete = True
    for p in problems:
        if not 0 <= len(p.facts_a) - len(p.facts_b) <= 1:
            complete = False
            break
        facts = [f for pair in zip(p.facts_a, p.facts_b + [""]) for f in pair if f]
        again = split_problem(" ".join(facts + [p.question]))
        if (list(again.facts_a), list(again.facts_b), again.question) != (list(p.facts_a), list(p.facts_b), p.question):
            complete = False
            break
    return {"halves_hold_numbers": halves, "facts_disjoint_and_complete": complete, "n_checked": len(problems)}
