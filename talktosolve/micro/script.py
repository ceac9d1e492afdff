"""Scripted chats and solo answers: the text the micro base model imitates in pretraining.

Every number a copy writes is a *term*: its start as `27`, a change as `+ 5` or `- 9` (read from its facts by
`task.read_fact`). Whose numbers are whose is always marked, so that a copy reading its partner's final message
never counts its own numbers twice:

* a non-final message that states numbers: `my numbers are 27 - 3.` (the writer's own terms only);
* a final message: `mine 27 - 3 = 24 , yours + 5 = 29 \\boxed{29}`: a running sum, one step at a time, over the
  writer's own terms (all of them, marked `mine`) and the partner's terms it takes (if any, marked `yours`); the
  group holding the start goes first (so B writes `yours 27 - 3 = 24 , mine + 5 = 29`). A copy with no start
  and nothing taken sums from 0, never below 0 (`mine 0 + 5 = 5 - 9 = 0`). A's final thus restates all of A's
  numbers, marked as A's, for B to read.

The repertoire (`Repertoire`, defaults below) is a spread of behaviours, not the best protocol: a non-final
message states the writer's numbers with probability `p_state` (each number kept with probability `p_keep`, at
least one), asks for the partner's numbers with `p_ask`, and otherwise says something idle; a final message
takes the numbers its partner stated with probability `p_use` only, independently of everything else, and
otherwise answers from its own facts. So an untrained pair is usually wrong, and a pair that always states and
always uses is always right: that gap is what reinforcement learning on the team's reward can close.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from talktosolve.micro.task import read_fact

ASK = ("{partner}, what are your numbers?", "what numbers do you have?", "tell me your numbers.",
       "what are your facts, {partner}?")
IDLE = ("hello {partner}.", "let us solve it.", "I will think.", "ok.", "we can do it.", "good luck, {partner}.")
STATE = "my numbers are {terms}."


@dataclass(frozen=True)
class Repertoire:
    p_state: float = 0.6
    """A non-final message states the writer's own numbers."""
    p_ask: float = 0.2
    """A non-final message asks for the partner's numbers (else, idle talk)."""
    p_keep: float = 0.7
    """Each own number is kept in a stating message (at least one is)."""
    p_use: float = 0.3
    """A final message takes the numbers its partner stated."""


def terms(facts: list[str]) -> list[str]:
    """`["27", "- 3"]`: a half's facts as terms, in their order."""
    out = []
    for kind, value in map(read_fact, facts):
        out.append(str(value) if kind == 0 else f"{'+' if kind > 0 else '-'} {value}")
    return out


def _signed(term: str) -> tuple[str, int]:
    return ("+", int(term)) if term[0].isdigit() else (term[0], int(term[2:]))


def final_message(own: list[str], partner: list[str]) -> str:
    """A final answer from the writer's own terms and the partner's terms it takes: a running sum, one step at a
    time, in two groups marked `mine` and `yours`; the group holding the start goes first (the start first in it;
    with no start anywhere the sum starts at 0 and never falls below 0), then the box."""
    groups = [("mine", own)] + ([("yours", partner)] if partner else [])
    groups.sort(key=lambda g: not any(t[0].isdigit() for t in g[1]))  # stable: `mine` first unless `yours` starts
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


def first_message(own: list[str], partner_name: str, rng: random.Random, rep: Repertoire) -> tuple[str, list[str]]:
    """A non-final message and the terms it states."""
    r = rng.random()
    if r < rep.p_state:
        kept = [t for t in own if rng.random() < rep.p_keep] or [rng.choice(own)]
        return STATE.format(terms=" ".join(kept)), kept
    phrases = ASK if r < rep.p_state + rep.p_ask else IDLE
    return rng.choice(phrases).format(partner=partner_name), []


def scripted_chat(facts_a: list[str], facts_b: list[str], arm: str, rng: random.Random,
                  rep: Repertoire = Repertoire()) -> list[str]:
    """The four messages A, B, A, B of one scripted chat; in the `cut` arm nothing stated reaches the partner."""
    own_a, own_b = terms(facts_a), terms(facts_b)
    m0, stated_a = first_message(own_a, "B", rng, rep)
    m1, stated_b = first_message(own_b, "A", rng, rep)
    heard_by_a = stated_b if arm == "chat" else []
    m2 = final_message(own_a, heard_by_a if rng.random() < rep.p_use else [])
    # A's final lists all of A's terms under `mine`, so in the chat arm B has heard them all.
    heard_by_b = own_a if arm == "chat" else []
    m3 = final_message(own_b, heard_by_b if rng.random() < rep.p_use else [])
    return [m0, m1, m2, m3]


def solo_answer(facts: list[str]) -> str:
    """The answer of a copy that sees every fact."""
    return final_message(terms(facts), [])


def script_texts() -> list[str]:
    """Every fixed phrase the scripts write (for the tokenizer's vocabulary)."""
    return [*ASK, *IDLE, STATE, "mine yours + - = \\boxed{}", "A B , . ?"]
