"""Talk metrics of one chat, for a team of any size, and their means over many chats.

A chat is the messages of a protocol's turns (`protocol.Protocol`); each seat's final turn holds its answer.

* A seat's **own-only numbers**: the set of numeral values (`talktosolve.task.numbers`: `1,000` = `1000`,
  `$3.50` = `3.5`) in its own hand that are in no partner's hand and not in the question.
* **send**: share of its own-only numbers that appear in one of its messages some partner reads before that
  partner's final answer (a message written before the partner's final turn).
* **use**: share of its partners' own-only numbers (all partners together) that appear in its own final message.
* **use_given_sent**: among its partners' own-only numbers that a partner sent it (wrote in a message before this
  seat's final turn), the share in its own final message.
* **ask**: its first message contains `?`.
* **chars**: total characters of its messages.
* **agree** (the team): every seat's final message boxes a number (`grading.last_boxed`, read by
  `grading.numeric_value`) and the numbers are all equal. An empty or non-numeric box never agrees: seats that
  fail to give a number have not agreed on an answer.

Counting is by the protocol's turn order, not the arm: a number written before a partner's final is *sent*
whether or not the arm delivers it (in the cut arm, send measures what a seat says, use what its partners could
not have told it).

A share with nothing to count (no own-only numbers, or none sent) is None, never 0. With seats A, B and turns
A, B, A, B these are the seed's figures: A's send counts its messages 1 and 3, B's its message 2; A's use reads
its message 3, B's its message 4. `talk_metrics` keeps that two-copy form with flat keys (`send_a`, ...).

Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from talktosolve.protocol import Protocol
from talktosolve.task.grading import last_boxed, numeric_value
from talktosolve.task.numbers import numbers_in

SEAT_KEYS = ("send", "use", "use_given_sent", "ask", "chars")
"""The per-seat figures of a chat."""
POOLED = ("send", "use", "use_given_sent", "ask")
"""Figures also pooled over every seat (the mean of all seats' defined values together)."""

PAPER_PROTOCOL = Protocol(("A", "B"), ("A", "B", "A", "B"), (1, 1, 1, 1), (2, 3))
"""The seed's two-copy chat (its limits do not matter to the metrics)."""


def _values(texts: Sequence[str] | str) -> set[str]:
    """Numeral values in some texts; each text is read on its own so no numeral spans two of them."""
    if isinstance(texts, str):
        texts = [texts]
    out: set[str] = set()
    for text in texts:
        out.update(numbers_in(text))
    return out


def _share(part: set[str], whole: set[str]) -> float | None:
    return len(part & whole) / len(whole) if whole else None


def agree(finals: Sequence[str]) -> bool:
    """Every final message boxes a number, and all those numbers are equal."""
    values = [numeric_value(box) if box is not None else None for box in map(last_boxed, finals)]
    return all(v is not None for v in values) and len(set(values)) == 1  # canonical strings: equal values, equal text


def team_talk(hands: Mapping[str, Sequence[str]], question: str, messages: Sequence[str], protocol: Protocol) -> dict:
    """Talk metrics of one chat: `{"seats": {seat: {send, use, use_given_sent, ask, chars}}, "agree": bool}`."""
    messages = list(messages)
    if len(messages) != protocol.n_turns:
        raise ValueError(f"the protocol has {protocol.n_turns} turns, got {len(messages)} messages")
    for k, text in enumerate(messages):
        if not isinstance(text, str):
            raise TypeError(f"talk metrics: message {k} is {type(text).__name__}, not str")
    in_q = _values(question)
    held = {seat: _values(hands[seat]) for seat in protocol.seats}
    own = {seat: held[seat] - in_q - set().union(*(held[p] for p in protocol.partners(seat)))
           for seat in protocol.seats}
    said = [_values(text) for text in messages]

    def written(seat: str, before: int) -> set[str]:
        return set().union(*(said[t] for t in protocol.said_before(seat, before)))

    seats = {}
    for seat in protocol.seats:
        partners = protocol.partners(seat)
        final = said[protocol.final_turn(seat)]
        sent = own[seat] & set().union(*(written(seat, protocol.final_turn(p)) for p in partners))
        theirs = set().union(*(own[p] for p in partners))
        sent_to_me = set().union(*(own[p] & written(p, protocol.final_turn(seat)) for p in partners))
        first = protocol.turns_of(seat)[0]
        seats[seat] = {
            "send": _share(sent, own[seat]),
            "use": _share(final, theirs),
            "use_given_sent": _share(final, sent_to_me),
            "ask": "?" in messages[first],
            "chars": sum(len(messages[t]) for t in protocol.turns_of(seat)),
        }
    return {"seats": seats, "agree": agree([messages[protocol.final_turn(s)] for s in protocol.seats])}


def talk_metrics(facts_a: Sequence[str], facts_b: Sequence[str], question: str, messages: Sequence[str]) -> dict:
    """The two-copy chat's metrics (A, B, A, B): keys send_a, send_b, use_a, use_b, use_given_sent_a,
    use_given_sent_b, ask_a, ask_b, chars_a, chars_b, agree. Raises ValueError unless there are 4 messages."""
    messages = list(messages)
    if len(messages) != 4:
        raise ValueError(f"talk_metrics needs the 4 messages of a chat (A, B, A, B), got {len(messages)}")
    t = team_talk({"A": facts_a, "B": facts_b}, question, messages, PAPER_PROTOCOL)
    out = {f"{key}_{seat.lower()}": row[key] for seat, row in t["seats"].items() for key in SEAT_KEYS}
    out["agree"] = t["agree"]
    return out


def chat_talk(transcript: dict, protocol: Protocol) -> dict:
    """`team_talk` of one chat transcript (the records `rollout.Chat.transcript` writes)."""
    return team_talk(transcript["hands"], transcript["question"], [m["text"] for m in transcript["messages"]],
                     protocol)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _defined(values) -> list[float]:
    """The numeric values; None and non-numeric ones skipped (bools count 1/0)."""
    return [float(v) for v in values if isinstance(v, (bool, int, float))]


def aggregate_talk(rows: Sequence[dict]) -> dict:
    """Means over chats (`team_talk` rows; None values skipped, None when nothing is defined).

    `seats`: each seat's mean of each figure; `send`, `use`, `use_given_sent`, `ask`: pooled over every seat
    (e.g. every defined send of every seat together); `agree`: the share of chats that agree; `n_send`, `n_use`:
    the counts of values behind `send` and `use`."""
    names: list[str] = []
    for row in rows:
        names.extend(s for s in row["seats"] if s not in names)
    per_seat = {s: [row["seats"][s] for row in rows if s in row["seats"]] for s in names}
    out: dict = {"seats": {s: {k: _mean(_defined(r[k] for r in per_seat[s])) for k in SEAT_KEYS} for s in names}}
    for key in POOLED:
        out[key] = _mean(_defined(r[key] for s in names for r in per_seat[s]))
    out["agree"] = _mean(_defined(row["agree"] for row in rows))
    out["n_send"] = len(_defined(r["send"] for s in names for r in per_seat[s]))
    out["n_use"] = len(_defined(r["use"] for s in names for r in per_seat[s]))
    return out
