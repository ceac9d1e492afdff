"""Cut a word problem into fact sentences and a question, and deal the facts to the seats of a team.

The rules:

- Sentences end at a run of `.`, `?` or `!` (closing quotes and brackets right after it stay with the sentence),
  followed by whitespace and then a capital letter, a digit, an opening quote or bracket, a currency sign, or the
  end of the text. So `3.5`, `$1.50` and `"Is it?" she asked.` are not cut, and neither is `etc. and` or
  `... and then`. A few abbreviations never end a sentence: titles (`Mr.`, `Mrs.`, `Ms.`, `Dr.`, `Prof.`, `Mt.`,
  `St.` unless it follows a capitalised word, as in `Elm St.`), and `vs.`, `e.g.`, `i.e.`, `cf.`, `approx.`.
  Units (`lbs.`, `oz.`, `ft.`, `in.`) and times (`a.m.`, `p.m.`) may end a sentence: before a capital they
  usually do (`It opens at 8 a.m. It closes ...`), and before a lowercase word they are not cut anyway.
  Single capitals (`class A.`) end sentences: in GSM8K they are labels, not initials.
- A line break ends a sentence unless the next line starts lowercase (a hard-wrapped sentence continues).
  Whitespace inside a sentence is collapsed to single spaces.
- The question is the last sentence that ends with `?` (closing quotes or brackets may follow). Every other
  sentence, before or after it, is a fact, in text order. With no such sentence the last sentence is the question.
- The facts are dealt round-robin to the seats (`arms.deal_round_robin`): with seats A, B, copy A gets facts
  1, 3, 5, ... and copy B facts 2, 4, ...; with A, B, C, seat C gets facts 3, 6, .... Every seat gets the question.
- Eligible: at least one fact per seat, and every hand holds a number written in digits (`talktosolve.task.numbers`).
  Otherwise `reason` says why (`no_sentences`, `too_few_facts`, `no_number_in_hand_B`,
  `no_number_in_hands_A_B`: the seats whose hands hold no number); the hands and question are still filled in.

Pure Python, no torch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from talktosolve.task.numbers import has_number

CLOSERS = "\"'\u201d\u2019)]}"
# What may open a sentence, besides a capital letter or a digit.
OPENERS = "\"'\u201c\u2018([{$\u00a3\u20ac"

# A run of terminal punctuation, the closers glued to it, then the whitespace (if any) that follows.
_END = re.compile(r"[.?!]+[" + re.escape(CLOSERS) + r"]*(\s+|$)")
# The word just before a period, dots inside it kept ("e.g", "Mr").
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_PREV_WORD = re.compile(r"([A-Za-z][\w'.]*)\s+$")

# Abbreviations that are never the last word of a sentence (compared lowercase, final dot removed).
NEVER_FINAL = frozenset({"mr", "mrs", "ms", "dr", "prof", "mt", "st", "vs", "e.g", "i.e", "cf", "approx"})


def _starts_sentence(ch: str) -> bool:
    return ch.isupper() or ch.isdigit() or ch in OPENERS


def _is_abbreviation(text: str, end: int) -> bool:
    """Whether the period at text[end] closes an abbreviation that never ends a sentence."""
    m = _WORD_BEFORE.search(text, 0, end)
    if not m:
        return False
    word = m.group(1).lower()
    if word not in NEVER_FINAL:
        return False
    if word == "st":
        # "St. Louis" is a saint, "Elm St." a street, and a street can end a sentence.
        prev = _PREV_WORD.search(text, 0, m.start())
        return not (prev and prev.group(1)[0].isupper())
    return True


def _boundaries(text: str) -> list[int]:
    """Offsets where a new sentence starts (the end of the text included)."""
    cuts = []
    for m in _END.finditer(text):
        after, gap = m.end(), m.group(1)
        if after >= len(text):
            cuts.append(after)
            continue
        nxt = text[after]
        if "\n" in gap and not nxt.islower():
            cuts.append(after)
            continue
        if not _starts_sentence(nxt):
            continue
        run = m.group(0).rstrip()
        if run == "." and _is_abbreviation(text, m.start()):
            continue
        cuts.append(after)
    return cuts


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, in order, whitespace collapsed; empty pieces dropped."""
    if not isinstance(text, str):
        raise TypeError(f"split_sentences needs a str, got {type(text).__name__}")
    # A line break with no terminal punctuation before it still ends a sentence (lists, headings), unless the
    # next line continues in lowercase: mark those breaks as cuts too.
    cuts = set(_boundaries(text))
    for m in re.finditer(r"\n\s*", text):
        if m.end() < len(text) and not text[m.end()].islower():
            cuts.add(m.end())
    out, pending, start = [], "", 0
    for cut in sorted(cuts) + [len(text)]:
        piece = " ".join(text[start:cut].split())
        start = cut
        if not piece:
            continue
        if not any(ch.isalnum() for ch in piece):
            # Stray punctuation on its own is no sentence: it joins the sentence before it (or, at the very
            # start, the one after), so no character of the text is lost.
            if out:
                out[-1] += " " + piece
            else:
                pending = f"{pending} {piece}".strip()
            continue
        out.append(f"{pending} {piece}".strip())
        pending = ""
    return out


def ends_with_question(sentence: str) -> bool:
    """Whether a sentence ends with `?`, closing quotes or brackets allowed after it."""
    return sentence.rstrip().rstrip(CLOSERS).endswith("?")


@dataclass(frozen=True)
class Split:
    eligible: bool
    reason: str  # "ok", or why not eligible
    facts_a: list[str] = field(default_factory=list)  # the first seat's hand: facts 1, 1+N, ...
    facts_b: list[str] = field(default_factory=list)  # the second seat's hand: facts 2, 2+N, ...
    question: str = ""
    facts: list[str] = field(default_factory=list)  # every fact, in text order
    hands: dict = field(default_factory=dict)  # {seat: its facts}, every seat

    def to_json(self) -> dict:
        return asdict(self)


def split_problem(text: str, seats=("A", "B")) -> Split:
    """Split a problem's text into facts and the question, and deal the facts round-robin to `seats` (rules in
    the module doc)."""
    from talktosolve.arms import deal_round_robin

    seats = tuple(seats)
    sentences = split_sentences(text)
    if not sentences:
        return Split(False, "no_sentences")
    asks = [i for i, s in enumerate(sentences) if ends_with_question(s)]
    q = asks[-1] if asks else len(sentences) - 1
    facts = sentences[:q] + sentences[q + 1:]
    hands = deal_round_robin(facts, seats)
    if len(facts) < len(seats):
        reason = "too_few_facts"
    else:
        empty = [seat for seat in seats if not any(has_number(f) for f in hands[seat])]
        reason = "ok" if not empty else f"no_number_in_{'hand' if len(empty) == 1 else 'hands'}_{'_'.join(empty)}"
    return Split(reason == "ok", reason, hands[seats[0]], hands[seats[1]], sentences[q], facts, hands)
