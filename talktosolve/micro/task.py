"""The micro task: procedurally generated split-fact word problems in plain English, for teams of 2 to 4 seats.

A problem follows one person's stock of one kind of thing:

    Mia has 27 shells. Mia finds 5 shells. Ben takes 9 shells from Mia. Leo gives Mia 4 shells.
    How many shells does Mia have now?

* fact 1 is the starting amount `S` (16-45); the later facts each add or take away `v` (2-15), phrased with one
  of several verbs (`buys`, `finds`, `X gives Mia`, ... / `loses`, `sells`, `gives ... to X`,
  `X takes ... from Mia`, ...). Names, objects and templates vary. The losses never add up to more than `S`, so
  the stock never drops below 0, whatever order the facts are applied in.
* the gold is `S` plus the signed changes.

The problem is produced as TEXT and cut by `talktosolve.task.split.split_problem(text, seats)`, exactly as a GSM8K
problem is, and its facts are dealt round-robin: seat k of N gets facts k, k+N, ... (`arms.deal_round_robin`).
`make_problems(split, n, seed, seats)` gives one *family* per number of seats N:

* **N = 2** (ids `micro-<split>-<i>`): 2, 3 or 4 facts (20%, 40%, 40%); copy A gets facts 1 and 3 (so always the
  start), copy B facts 2 and 4. From one half alone the best answer (the half's own total plus the most likely
  value of what it does not see, `guess_rate`) is right about 3 times in 100.
* **N = 3 or 4** (ids `micro<N>-<split>-<i>`): N to 2N facts (equally likely), so every seat holds one or two
  facts and seat A the start. Two more rules, checked on every draw (a draw that breaks one is drawn again):
  the start plus all the gains is at most `MAX_NUMBER`, so every running sum of any of the facts, in any order,
  lies in 0..MAX_NUMBER; and the answer needs every hand: for every set of hands short of all of them (one
  seat's own, two seats' pooled, ...), the signed total of their facts (start + gains - losses) is not the gold.
  So a seat that sums its own hand, or its own and some partners' but not all, is wrong; the one exception left
  is a sum without the start that the floor at 0 (`answer_from_facts`) happens to bring to the gold.

Every family is deterministic, and its train and test streams are disjoint: a hash of the text decides its side
(the same hash in every family, so a text is on the same side in all of them), so no test text is in any train
stream, nor in a pretraining corpus (drawn from train streams).

`read_fact` turns a fact sentence back into its signed term; `answer_from_facts` gives the total of any set of
facts (the gold from all of them); `best_guess_from_hand` is the one-hand oracle used to measure guessability
(`best_guess_from_half` its two-seat case).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from itertools import combinations

from talktosolve.arms import deal_round_robin
from talktosolve.task.data import Problem
from talktosolve.task.split import split_problem

NAMES = ("Tom", "Ann", "Sam", "Mia", "Ben", "Lily", "Max", "Zoe", "Leo", "Eva", "Dan", "Kim", "Jack", "Emma",
         "Nick", "Rosa")
OBJECTS = ("apples", "books", "coins", "cards", "pens", "eggs", "stamps", "shells", "cookies", "marbles",
           "stickers", "toys", "beads", "rocks", "shirts", "cups")

START = ("{n} has {k} {o}.", "{n} starts with {k} {o}.", "At first, {n} has {k} {o}.", "{n} owns {k} {o}.")
GAIN = ("{n} buys {k} more {o}.", "{n} finds {k} {o}.", "{f} gives {n} {k} {o}.", "{n} gets {k} {o} from {f}.",
        "Then {n} wins {k} {o}.", "{n} picks up {k} more {o}.")
LOSS = ("{n} gives {k} {o} to {f}.", "{n} loses {k} {o}.", "{n} sells {k} {o}.", "Then {n} gives away {k} {o}.",
        "{f} takes {k} {o} from {n}.", "{n} uses {k} {o}.")
QUESTION = ("How many {o} does {n} have now?", "How many {o} does {n} have at the end?",
            "How many {o} does {n} have in the end?")

START_RANGE = (16, 45)
CHANGE_RANGE = (2, 15)
N_FACTS = ((2, 0.2), (3, 0.4), (4, 0.4))
"""The two-seat family's fact counts and their weights."""
MAX_NUMBER = 99
"""Every number the task, the chats and their arithmetic can hold lies in 0..MAX_NUMBER (two seats: 45 + 3 * 15
= 90; more seats: a rule of the draw)."""

SPLITS = {"train": 0, "test": 1}
SEAT_NAMES = ("A", "B", "C", "D")
"""The seats of an N-seat family, in dealing order: the first N of these."""


def _pattern(template: str) -> re.Pattern:
    text = re.escape(template)
    for key, group in (("{n}", r"(?P<n>[A-Z][a-z]+)"), ("{f}", r"(?P<f>[A-Z][a-z]+)"), ("{k}", r"(?P<k>\d+)"),
                       ("{o}", r"(?P<o>[a-z]+)")):
        text = text.replace(re.escape(key), group)
    return re.compile(text + r"$")


_READERS = ([(_pattern(t), 0) for t in START] + [(_pattern(t), 1) for t in GAIN]
            + [(_pattern(t), -1) for t in LOSS])


def read_fact(sentence: str) -> tuple[int, int]:
    """`(kind, value)` of a fact: kind 0 for the starting amount, +1 for a gain, -1 for a loss."""
    for pattern, kind in _READERS:
        m = pattern.match(sentence.strip())
        if m:
            return kind, int(m.group("k"))
    raise ValueError(f"not a micro fact: {sentence!r}")


def answer_from_facts(facts: list[str]) -> int:
    """The total of these facts: the start (0 if absent) plus the gains minus the losses, never below 0.

    Over all of a problem's facts this is the gold; over one half's facts it is what a copy that ignores its
    partner would answer.
    """
    total = 0
    for kind, value in sorted((read_fact(f) for f in facts), key=lambda kv: kv[0] != 0):
        total = max(0, total + value if kind >= 0 else total - value)
    return total


def _draw(rng: random.Random) -> tuple[str, int]:
    """One two-seat problem's text and gold."""
    name, friend = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    n_facts = rng.choices([n for n, _ in N_FACTS], [w for _, w in N_FACTS])[0]
    start = rng.randint(*START_RANGE)
    facts = [rng.choice(START).format(n=name, k=start, o=obj)]
    total, lost = start, 0
    for _ in range(n_facts - 1):
        value = rng.randint(*CHANGE_RANGE)
        if rng.random() < 0.5 and lost + value <= start:
            lost += value
            total -= value
            facts.append(rng.choice(LOSS).format(n=name, f=friend, k=value, o=obj))
        else:
            total += value
            facts.append(rng.choice(GAIN).format(n=name, f=friend, k=value, o=obj))
    question = rng.choice(QUESTION).format(n=name, o=obj)
    return " ".join(facts + [question]), total


def _draw_team(rng: random.Random, seats: int) -> tuple[str, int]:
    """One N-seat problem's text and gold (N >= 3): N to 2N facts, drawn again until the rules of the module doc
    hold (every running sum in 0..MAX_NUMBER; no set of hands short of all of them totals the gold)."""
    while True:
        name, friend = rng.sample(NAMES, 2)
        obj = rng.choice(OBJECTS)
        n_facts = rng.randint(seats, 2 * seats)
        start = rng.randint(*START_RANGE)
        facts = [rng.choice(START).format(n=name, k=start, o=obj)]
        signed = [start]
        gained = lost = 0
        for _ in range(n_facts - 1):
            value = rng.randint(*CHANGE_RANGE)
            if rng.random() < 0.5 and lost + value <= start:
                lost += value
                signed.append(-value)
                facts.append(rng.choice(LOSS).format(n=name, f=friend, k=value, o=obj))
            else:
                gained += value
                signed.append(value)
                facts.append(rng.choice(GAIN).format(n=name, f=friend, k=value, o=obj))
        gold = start + gained - lost
        hand_totals = [sum(signed[k::seats]) for k in range(seats)]
        needed = all(sum(hand_totals[k] for k in some) != gold
                     for size in range(1, seats) for some in combinations(range(seats), size))
        if start + gained <= MAX_NUMBER and needed:
            question = rng.choice(QUESTION).format(n=name, o=obj)
            return " ".join(facts + [question]), gold


def _side(text: str) -> str:
    """Which split a problem text belongs to, by a hash of the text: one text in 8 is a test text."""
    return "test" if hashlib.sha256(text.encode()).digest()[0] % 8 == 0 else "train"


def _stream(split: str, seed: int, seats: int = 2):
    """Endless (text, gold) pairs of one split and family: its own random stream, keeping only the texts of its
    side, so no test text is ever a train text (of any seed or family), nor one a pretraining corpus saw."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    if seats == 2:  # the two-seat family's stream, exactly as it was before there were others
        rng = random.Random(f"talktosolve-micro/{split}/{seed}")
        draw = _draw
    else:
        rng = random.Random(f"talktosolve-micro{seats}/{split}/{seed}")
        draw = lambda r: _draw_team(r, seats)  # noqa: E731
    while True:
        text, gold = draw(rng)
        if _side(text) == split:
            yield text, gold


def _check_seats(seats) -> int:
    if not isinstance(seats, int) or not 2 <= seats <= len(SEAT_NAMES):
        raise ValueError(f"seats must be an integer from 2 to {len(SEAT_NAMES)}, got {seats!r}")
    return seats


def family_id(seats: int) -> str:
    """The id prefix of an N-seat family: `micro` for 2 seats (as it always was), `micro3`, `micro4`."""
    return "micro" if seats == 2 else f"micro{seats}"


def make_problems(split: str, n: int, seed: int = 0, seats: int = 2) -> list[Problem]:
    """`n` problems of `split` (`train` or `test`) of the `seats`-seat family, the same for the same arguments;
    ids `<family_id(seats)>-<split>-<i>`.

    Each problem is its text cut by `split_problem(text, seats)`; every one is eligible (every hand holds a
    number). A text appears at most once in a list, and train and test texts never meet (`_side`).
    """
    _check_seats(seats)
    if n < 0:
        raise ValueError(f"n must be 0 or more, got {n}")
    names = SEAT_NAMES[:seats]
    prefix = family_id(seats)
    out: list[Problem] = []
    seen: set[str] = set()
    for text, gold in _stream(split, seed, seats):
        if len(out) == n:
            break
        if text in seen:
            continue
        seen.add(text)
        cut = split_problem(text, names)
        if not cut.eligible:  # cannot happen with these templates; fail loudly if they change
            raise AssertionError(f"micro problem not eligible ({cut.reason}): {text}")
        out.append(Problem(id=f"{prefix}-{split}-{len(out)}", question=cut.question, facts=list(cut.facts),
                           gold=str(gold)))
    return out


def problem_text(problem) -> str:
    """The problem's text again: facts in their original order, then the question."""
    return " ".join(list(problem.facts) + [problem.question])


# ---- the one-hand oracle ----------------------------------------------------------------------------------------

def hand(problem, seat: str, seats: int = 2) -> list[str]:
    """The facts `seat` is dealt when `problem` is split among `seats` seats (round-robin)."""
    return deal_round_robin(problem.facts, SEAT_NAMES[:_check_seats(seats)])[seat]


def _signed_total(facts: list[str]) -> int:
    return sum(v if k >= 0 else -v for k, v in map(read_fact, facts))


def _hand_key(facts: list[str]) -> tuple[int, bool]:
    """What a hand knows about its own shape: how many facts, and whether it holds the start."""
    return len(facts), any(read_fact(f)[0] == 0 for f in facts)


def _offsets(seat: str, seats: int, seed: int = 12345, n: int = 10_000) -> dict[tuple[int, bool], int]:
    """For each hand shape, the most common `gold - own total` over many train problems of the family (the best
    blind correction)."""
    counts: dict[tuple[int, bool], Counter] = {}
    for p in make_problems("train", n, seed, seats):
        facts = hand(p, seat, seats)
        counts.setdefault(_hand_key(facts), Counter())[int(p.gold) - _signed_total(facts)] += 1
    return {key: c.most_common(1)[0][0] for key, c in counts.items()}


_OFFSET_CACHE: dict[tuple[str, int], dict] = {}


def best_guess_from_hand(facts: list[str], seat: str, seats: int = 2) -> int:
    """The best answer from one seat's hand alone: its own signed total plus the most likely value of the part it
    does not see, learnt from many problems of the same family and hand shape."""
    if (seat, seats) not in _OFFSET_CACHE:
        _OFFSET_CACHE[seat, seats] = _offsets(seat, seats)
    return max(0, _signed_total(facts) + _OFFSET_CACHE[seat, seats].get(_hand_key(facts), 0))


def best_guess_from_half(facts: list[str], half: str) -> int:
    """`best_guess_from_hand` of a two-seat problem (`half` is `A` or `B`)."""
    return best_guess_from_hand(facts, half, 2)


def guess_rate(problems: list, seat: str, seats: int = 2) -> float:
    """Share of `problems` whose gold `best_guess_from_hand` gets right from `seat`'s hand alone."""
    hits = sum(best_guess_from_hand(hand(p, seat, seats), seat, seats) == int(p.gold) for p in problems)
    return hits / max(len(problems), 1)
