"""Scripted chats and solo answers: the text the micro base models imitate in pretraining.

Every number a seat writes is a *term*: its start as `27`, a change as `+ 5` or `- 9` (read from its facts by
`task.read_fact`). Whose numbers are whose is always marked, so that a seat reading a partner's final message
never counts its own numbers twice:

* a non-final message that states numbers: `my numbers are 27 - 3.` (the writer's own terms only);
* a final message: `mine 27 - 3 = 24 , yours + 5 = 29 \\boxed{29}`: a running sum, one step at a time, over the
  writer's own terms (all of them, marked `mine`) and each partner's terms it takes (if any), one group per
  partner, marked `yours` when the team has two seats and by the partner's seat name when it has more
  (`mine 27 - 3 = 24 , B + 5 = 29 , C - 4 = 25`); the group holding the start goes first (so B of two writes
  `yours 27 - 3 = 24 , mine + 5 = 29`), the others keep the order mine, then partners in seat order. A seat with no
  start and nothing taken that holds one sums from 0, never below 0 (`mine 0 + 5 = 5 - 9 = 0`). A seat's final
  thus restates all of its own numbers, marked as its own, for the seats after it to read.

What a seat has *heard* from a partner before a turn: the terms that partner stated in the messages the arm
showed it (`Arm.shows`): the kept terms of a stating message, and all of the partner's own terms from its final
message. Relayed terms (a partner's group marked with another seat) are never taken again.

The repertoire (`Repertoire`, defaults below) is a spread of behaviours, not the best protocol: a non-final
message states the writer's numbers with probability `p_state` (each number kept with probability `p_keep`, at
least one), asks for its partners' numbers with `p_ask`, and otherwise says something idle; a final message takes
what it heard from each partner with probability `p_use`, one draw per partner (in seat order, drawn whether or
not it heard anything), independently of everything else, and otherwise answers from its own facts. In an arm that
deals every seat every fact (`full`) a final takes nothing (it holds every number already), the draws still made.
So an untrained team is usually wrong, and a team that always states and always uses is always right: that gap is
what reinforcement learning on the team's reward can close.

`team_chat(hands, protocol, arm, rng, rep)` plays any protocol; `scripted_chat(facts_a, facts_b, arm, rng, rep)`
is the two-seat chat A, B, A, B, drawing the same random numbers in the same order as `team_chat` does for it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from talktosolve.arms import ARMS, Arm
from talktosolve.micro.task import read_fact
from talktosolve.protocol import Protocol, partners_text

ASK = ("{partner}, what are your numbers?", "what numbers do you have?", "tell me your numbers.",
       "what are your facts, {partner}?")
IDLE = ("hello {partner}.", "let us solve it.", "I will think.", "ok.", "we can do it.", "good luck, {partner}.")
STATE = "my numbers are {terms}."

TWO_SEATS = Protocol.build(("A", "B"), ("A", "B", "A", "B"), final_tokens=36, message_tokens=16)
"""The two-seat chat A, B, A, B (finals 2 and 3); the scripts never read its token limits."""


@dataclass(frozen=True)
class Repertoire:
    p_state: float = 0.6
    """A non-final message states the writer's own numbers."""
    p_ask: float = 0.2
    """A non-final message asks for the partners' numbers (else, idle talk)."""
    p_keep: float = 0.7
    """Each own number is kept in a stating message (at least one is)."""
    p_use: float = 0.3
    """A final message takes the numbers it heard from a partner (one draw per partner)."""


def terms(facts: list[str]) -> list[str]:
    """`["27", "- 3"]`: a hand's facts as terms, in their order."""
    out = []
    for kind, value in map(read_fact, facts):
        out.append(str(value) if kind == 0 else f"{'+' if kind > 0 else '-'} {value}")
    return out


def _signed(term: str) -> tuple[str, int]:
    return ("+", int(term)) if term[0].isdigit() else (term[0], int(term[2:]))


def summed(groups: list[tuple[str, list[str]]]) -> str:
    """A final answer from labelled groups of terms, the writer's own (`mine`) first: a running sum, one step at
    a time; the group holding the start goes first (the start first in it; with no start anywhere the sum starts
    at 0 and never falls below 0), then the box. Groups after the first with no terms are left out."""
    groups = groups[:1] + [g for g in groups[1:] if g[1]]
    groups.sort(key=lambda g: not any(t[0].isdigit() for t in g[1]))  # stable: `mine` first unless another starts
    parts, total, first = [], 0, True
    for label, items in groups:
        items = sorted(items, key=lambda t: not t[0].isdigit())
        parts.append(("" if first else ", ") + label)
        for t in items:
            if first:
                total = int(t) if t[0].isdigit() else 0
                parts.append(str(total))
                first = False
                if t[0].isdigit():
                    continue
            sign, value = _signed(t)
            total = max(0, total + value if sign == "+" else total - value)
            parts.append(f"{sign} {value} = {total}")
    return f"{' '.join(parts)} \\boxed{{{total}}}"


def final_message(own: list[str], partner: list[str]) -> str:
    """The two-seat final: the writer's own terms (`mine`) and the partner's terms it takes (`yours`)."""
    return summed([("mine", own), ("yours", partner)])


def _say(own: list[str], partner_name: str, rng: random.Random, rep: Repertoire) -> tuple[str, list[int]]:
    """A non-final message and the indices (into `own`) of the terms it states."""
    r = rng.random()
    if r < rep.p_state:
        kept = [i for i in range(len(own)) if rng.random() < rep.p_keep] or [rng.choice(range(len(own)))]
        return STATE.format(terms=" ".join(own[i] for i in kept)), kept
    phrases = ASK if r < rep.p_state + rep.p_ask else IDLE
    return rng.choice(phrases).format(partner=partner_name), []


def team_chat(hands: dict[str, list[str]], protocol: Protocol, arm: Arm | str, rng: random.Random,
              rep: Repertoire = Repertoire()) -> list[str]:
    """One scripted chat: a message for each turn of `protocol.order`, each seat holding `hands[seat]`, in `arm`
    (an `arms.Arm` or its name), by the rules of the module doc."""
    arm = ARMS[arm] if isinstance(arm, str) else arm
    own = {seat: terms(hands[seat]) for seat in protocol.seats}
    stated: list[list[int]] = []  # per turn: the indices of the writer's own terms that message states
    messages: list[str] = []
    for turn, writer in enumerate(protocol.order):
        partners = protocol.partners(writer)
        if not protocol.is_final(turn):
            text, kept = _say(own[writer], partners_text(partners), rng, rep)
        else:
            groups = [("mine", own[writer])]
            for partner in partners:
                use = rng.random() < rep.p_use
                heard = sorted({i for t in range(turn) if protocol.order[t] == partner
                                and arm.shows(writer, partner, t) for i in stated[t]})
                if use and arm.deal != "all":
                    label = "yours" if len(protocol.seats) == 2 else partner
                    groups.append((label, [own[partner][i] for i in heard]))
            text, kept = summed(groups), list(range(len(own[writer])))
        messages.append(text)
        stated.append(kept)
    return messages


def scripted_chat(facts_a: list[str], facts_b: list[str], arm: Arm | str, rng: random.Random,
                  rep: Repertoire = Repertoire()) -> list[str]:
    """The four messages A, B, A, B of one two-seat scripted chat; in the `cut` arm nothing stated reaches the
    partner."""
    return team_chat({"A": facts_a, "B": facts_b}, TWO_SEATS, arm, rng, rep)


def solo_answer(facts: list[str]) -> str:
    """The answer of a copy that sees every fact."""
    return final_message(terms(facts), [])


def script_texts() -> list[str]:
    """Every fixed phrase the two-seat scripts write (for the micro tokenizer's vocabulary)."""
    return [*ASK, *IDLE, STATE, "mine yours + - = \\boxed{}", "A B , . ?"]
