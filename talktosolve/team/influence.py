r"""Message influence: did a message change what its listeners answered?

Counting numbers in messages (`talk`: send, use) cannot tell a message that changed a partner's answer from one
that merely echoed what the partner would have said anyway. Influence asks the counterfactual directly: replay
the chat from its recorded prefix with one message changed, re-sample what follows, and see whether the
listeners' answers move (Jaques et al. 2019 measure influence as the change in a listener's behaviour under
counterfactual messages; Lowe et al. 2019 show why message statistics alone mislead).

For an evaluated chat and a *position* t (a turn whose writer has a partner answering after it; `positions`), the
*listeners* are the writer's partners whose final turn comes after t. Three ablations (`arms.ABLATIONS`) change
what the listeners are shown of message t; the writer keeps its own words, so only the channel is intervened on:

    remove    the listeners are shown `(no message)`, as in the cut arm
    replace   they are shown the same seat's message at the same turn of another problem's chat (problem i+1 of
              the replayed ones, same chat index): fluent, well formed, and about something else
    renumber  its own-only numbers (values in the writer's hand, in no partner's hand and not in the question,
              as `talk` defines them) are replaced by other numbers of the same shape (the same digits before and
              after the point, never a value the problem or the recorded chat holds); the rest is unchanged

Every ablated replay is paired with a *control* replay of the same chats, in the same batches, with the same
seeds and nothing changed (`replay`), so the two draw the same random numbers row by row: where their listeners
differ, the message did it. In the cut arm the listeners are shown `(no message)` whatever message t was, so
every figure there is 0; the recipe reports that as a check (`cut_influence_zero`).

Figures, per (position, listener, kind), each per problem (the mean over its chats) and then over problems with
a 95% interval (over problems and seeds when several trained models are pooled; `stats`):

    drop    = acc(control) - acc(ablated)                       the listener's accuracy lost; in [-1, 1]
    flip    = share of the listener's boxed answers that differ between control and ablated replay
    follow  = share of the listener's final messages holding a planted number, ablated minus control (renumber
              only: the excess over the control replay, where a planted value can turn up only by chance)
    changed = share of chats whose message the ablation actually altered (a message with no own-only number
              is not renumbered; such chats count, with no change, in every figure)

Pure Python and numpy, no torch: the replays themselves are `talktosolve.experiment.replay`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from talktosolve.arms import ABLATIONS, NO_MESSAGE
from talktosolve.protocol import Protocol
from talktosolve.stats import signed_delta_report, signed_mean_ci
from talktosolve.task.numbers import canonical, numbers_in, replace_numerals


class InfluenceError(ValueError):
    """Replay cannot run on this input; the message says why and what to give instead."""


@dataclass(frozen=True)
class Position:
    """A message whose listeners answer after it."""

    turn: int
    writer: str
    listeners: tuple[str, ...]
    """The writer's partners whose final turn comes after `turn`."""
    last: int
    """The last turn a replay of this position needs: its last listener's final."""


def positions(protocol: Protocol) -> list[Position]:
    """Every turn some partner of its writer answers after, in turn order."""
    out = []
    for turn, writer in enumerate(protocol.order):
        listeners = tuple(s for s in protocol.partners(writer) if protocol.final_turn(s) > turn)
        if listeners:
            out.append(Position(turn, writer, listeners, max(protocol.final_turn(s) for s in listeners)))
    return out


# ------------------------------------------------------------------------------------------------ ablations

def own_only(hands: dict, question: str, writer: str) -> set[str]:
    """The writer's own-only numbers: in its hand, in no partner's hand, not in the question (as `talk`)."""
    values = {seat: {v for fact in facts for v in numbers_in(fact)} for seat, facts in hands.items()}
    others = set().union(*(v for seat, v in values.items() if seat != writer))
    return values[writer] - others - set(numbers_in(question))


def _same_shape(numeral: str, rng: random.Random, banned: set[str]) -> str:
    """Another numeral of the same shape: each digit redrawn (a whole part of several digits keeps a non-zero
    lead), grouping commas and the point kept; never a value in `banned`."""
    whole = numeral.split(".")[0].replace(",", "")
    for _ in range(200):
        out = [str(rng.randint(1 if k == 0 and len(whole) > 1 else 0, 9)) if ch.isdigit() else ch
               for k, ch in enumerate(numeral)]
        text = "".join(out)
        value = canonical(text)
        if value is not None and value not in banned and text != numeral:
            return text
    raise InfluenceError(f"no number of the shape of {numeral!r} is free of this problem's numbers")


def renumber(text: str, own: set[str], banned: set[str], rng: random.Random) -> tuple[str, set[str]]:
    """`text` with each own-only numeral replaced by another of its shape (one value maps to one new value,
    wherever it recurs); returns the text and the planted values."""
    mapping: dict[str, str] = {}
    planted: set[str] = set()

    def swap(numeral: str, value: str | None) -> str:
        if value not in own:
            return numeral
        if value not in mapping:
            mapping[value] = _same_shape(numeral, rng, banned | planted)
            planted.add(canonical(mapping[value]))
        return mapping[value]

    return replace_numerals(text, swap), planted


@dataclass(frozen=True)
class Ablation:
    """What the listeners are shown in place of message `turn`, and the numbers it plants (renumber)."""

    kind: str
    turn: int
    shown: str
    planted: frozenset[str] = frozenset()
    changed: bool = True


def ablations(chats: list[dict], protocol: Protocol, position: Position, kinds=ABLATIONS, seed: int = 0
              ) -> dict[str, list[Ablation]]:
    """For each kind, one ablation per chat (`chats`: recorded transcripts, grouped by problem in order). The
    replacement comes from the chat of the next problem with the same chat index (the last problem takes the
    first's), so it is the same seat's message at the same turn, about another problem."""
    unknown = [k for k in kinds if k not in ABLATIONS]
    if unknown:
        raise InfluenceError(f"no ablation {unknown}; ablations are {', '.join(ABLATIONS)}")
    t = position.turn
    by_problem: dict[str, dict[int, dict]] = {}  # in first-seen order
    for c in chats:
        by_problem.setdefault(c["problem_id"], {})[c["chat"]] = c
    order = list(by_problem)
    following = {pid: order[(i + 1) % len(order)] for i, pid in enumerate(order)}
    out: dict[str, list[Ablation]] = {k: [] for k in kinds}
    for c in chats:
        message = c["messages"][t]["text"]
        for kind in kinds:
            if kind == "remove":
                out[kind].append(Ablation(kind, t, NO_MESSAGE, changed=message != NO_MESSAGE))
            elif kind == "replace":
                nxt = by_problem[following[c["problem_id"]]]
                other = nxt.get(c["chat"]) or next(iter(nxt.values()))
                text = other["messages"][t]["text"]
                out[kind].append(Ablation(kind, t, text, changed=text != message))
            else:
                rng = random.Random(f"{seed}-{c['problem_id']}-{c['chat']}-{t}")
                banned = set(numbers_in(c["question"])) | {v for f in c["facts"] for v in numbers_in(f)}
                banned |= {v for m in c["messages"] for v in numbers_in(m["text"])}
                text, planted = renumber(message, own_only(c["hands"], c["question"], position.writer), banned, rng)
                out[kind].append(Ablation(kind, t, text, frozenset(planted), changed=text != message))
    return out


# -------------------------------------------------------------------------------------------------- figures

@dataclass(frozen=True)
class Outcome:
    """One listener in one pair of replays (control and ablated) of one chat."""

    problem_id: str
    turn: int
    listener: str
    kind: str
    control_correct: bool
    ablated_correct: bool
    control_answer: str | None
    ablated_answer: str | None
    follows: bool
    """Its ablated final message holds a number the ablation planted."""
    control_follows: bool
    """Its control final message holds one (by chance: the control was never shown it)."""
    changed: bool

    def to_json(self) -> dict:
        return dict(self.__dict__)


def outcome(problem_id: str, listener: str, ablation: Ablation, control: dict, ablated: dict) -> Outcome:
    """`control` and `ablated`: `{"correct", "answer", "final"}` of the listener in each replay."""
    def holds(final: str) -> bool:
        return bool(ablation.planted & set(numbers_in(final)))

    return Outcome(problem_id, ablation.turn, listener, ablation.kind, bool(control["correct"]),
                   bool(ablated["correct"]), control["answer"], ablated["answer"], holds(ablated["final"]),
                   holds(control["final"]), ablation.changed)


def _per_problem(rows: list[Outcome], value) -> tuple[list[str], np.ndarray]:
    """Problem ids in first-seen order and the mean of `value(row)` over each problem's rows."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        sums.setdefault(r.problem_id, []).append(float(value(r)))
    ids = list(sums)
    return ids, np.array([sum(v) / len(v) for v in sums.values()])


FIGURES = {
    "drop": lambda r: r.control_correct - r.ablated_correct,
    "flip": lambda r: r.control_answer != r.ablated_answer,
    "follow": lambda r: r.follows - r.control_follows,
    "changed": lambda r: r.changed,
}
"""Each figure of one outcome row; a figure is its mean per problem, then over problems."""


def _keys(rows: list[Outcome]) -> list[tuple[int, str, str]]:
    seen: dict = {}
    for r in rows:
        seen.setdefault((r.turn, r.listener, r.kind), None)
    return sorted(seen, key=lambda k: (k[0], k[1], ABLATIONS.index(k[2])))


def per_problem(models: list[list[Outcome]], key: tuple[int, str, str], figure: str) -> np.ndarray:
    """[models, problems]: a figure per problem for each model (models replayed on the same problems)."""
    table, ids = [], None
    for rows in models:
        got, values = _per_problem([r for r in rows if (r.turn, r.listener, r.kind) == key], FIGURES[figure])
        if ids is not None and got != ids:
            raise InfluenceError("influence pools models replayed on different problems; replay them all on the "
                                 "same evaluation problems")
        ids = got
        table.append(values)
    return np.array(table)


def figures(models: list[list[Outcome]], writers: dict[int, str]) -> list[dict]:
    """Every (position, listener, kind)'s figures, pooled over `models` (one model: over problems; several,
    e.g. one per seed: over problems and seeds). `writers`: each position's writer."""
    out = []
    for key in _keys(models[0]):
        turn, listener, kind = key
        entry = {"turn": turn, "writer": writers[turn], "listener": listener, "kind": kind}
        for name in FIGURES:
            if name == "follow" and kind != "renumber":
                entry[name] = None
                continue
            m, lo, hi = signed_mean_ci(per_problem(models, key, name))
            entry[name] = {"mean": m, "lo": lo, "hi": hi}
        entry["n_problems"] = int(per_problem(models, key, "drop").shape[1])
        entry["n_models"] = len(models)
        out.append(entry)
    return out


def differences(trained: list[list[Outcome]], base: list[list[Outcome]]) -> list[dict]:
    """Trained minus base, per (position, listener, kind): the paired delta of `drop` over the same problems
    (problems paired, the trained seeds independent of the base), with its interval."""
    out = []
    for key in _keys(trained[0]):
        rep = signed_delta_report(per_problem(trained, key, "drop"), per_problem(base, key, "drop"))
        turn, listener, kind = key
        out.append({"turn": turn, "listener": listener, "kind": kind, "delta": rep["delta"], "lo": rep["lo"],
                    "hi": rep["hi"], "excludes_zero": rep["excludes_zero"], "method": rep["method"]})
    return out


def includes_zero(entries: list[dict]) -> bool:
    """Every figure's interval (drop, flip, follow) holds 0: what the cut arm must show."""
    return all(e[name] is None or e[name]["lo"] <= 0.0 <= e[name]["hi"]
               for e in entries for name in ("drop", "flip", "follow"))
