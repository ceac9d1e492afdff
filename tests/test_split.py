"""The sentence splitter and the fact split: hard GSM8K-style cases, eligibility reasons, the deal to N seats."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from talktosolve.task.numbers import has_number
from talktosolve.task.split import Split, ends_with_question, split_problem, split_sentences


@pytest.mark.parametrize("text, expected", [
    # decimals and money never end a sentence
    ("Ann paid $1.50 for 3.5 pounds of rice. Bob paid $2.25. How much did they pay?",
     ["Ann paid $1.50 for 3.5 pounds of rice.", "Bob paid $2.25.", "How much did they pay?"]),
    # titles
    ("Mr. Smith has 4 cats. Mrs. Jones has 2. Dr. Lee has 1. How many cats are there?",
     ["Mr. Smith has 4 cats.", "Mrs. Jones has 2.", "Dr. Lee has 1.", "How many cats are there?"]),
    ("Ms. Park lives on St. Mark Road with 3 dogs. How many dogs?",
     ["Ms. Park lives on St. Mark Road with 3 dogs.", "How many dogs?"]),
    # a street can end a sentence, a saint cannot
    ("He lives on Elm St. He has 4 cats. St. Louis has 2 zoos. How many?",
     ["He lives on Elm St.", "He has 4 cats.", "St. Louis has 2 zoos.", "How many?"]),
    # times: mid-sentence they hold, before a capital they end the sentence
    ("The shop opens at 8 a.m. and closes at 5 p.m. on Mondays. It opens at 9 a.m. On Sundays it is shut. Why?",
     ["The shop opens at 8 a.m. and closes at 5 p.m. on Mondays.", "It opens at 9 a.m.",
      "On Sundays it is shut.", "Why?"]),
    # e.g., i.e., vs., etc. mid-sentence, units before a lowercase word
    ("He buys fruit, e.g. Apples, i.e. Red ones, vs. Pears, etc. and 5 lbs. of flour. How much?",
     ["He buys fruit, e.g. Apples, i.e. Red ones, vs. Pears, etc. and 5 lbs. of flour.", "How much?"]),
    # units and "in." before a capital do end a sentence
    ("The wall is 600 sq. ft. A gallon covers 400 sq. ft. The rod is 4 in. How many gallons?",
     ["The wall is 600 sq. ft.", "A gallon covers 400 sq. ft.", "The rod is 4 in.", "How many gallons?"]),
    # quotes: a question inside a quote that the sentence continues after
    ('"Is it 5?" she asked. Tom said "Stop." Then he left.',
     ['"Is it 5?" she asked.', 'Tom said "Stop."', "Then he left."]),
    ('There are 15 "Where\'s Waldo?" books. Each has 30 puzzles.',
     ['There are 15 "Where\'s Waldo?" books.', "Each has 30 puzzles."]),
    # ellipses, ! and ?!
    ("He waited... and waited... Then 3 more came! Really?! Yes.",
     ["He waited... and waited...", "Then 3 more came!", "Really?!", "Yes."]),
    # a bracketed note after the question, and a sentence starting with a digit or $
    ("How long will it take? (There are 128 ounces in a gallon.) 5 cups spill. $3 is lost.",
     ["How long will it take?", "(There are 128 ounces in a gallon.)", "5 cups spill.", "$3 is lost."]),
    # single capitals are labels in GSM8K, so they end sentences
    ("Class B has 21 students fewer than class A. The rest are in class C. How many?",
     ["Class B has 21 students fewer than class A.", "The rest are in class C.", "How many?"]),
    # newlines end sentences, unless the next line continues lowercase; whitespace collapses
    ("Apples: $2\nPears:   $3\nHow much\nfor both?", ["Apples: $2", "Pears: $3", "How much for both?"]),
    ("One.  \n\n  Two.", ["One.", "Two."]),
    ("", []), ("   \n ", []), ("no end punctuation", ["no end punctuation"]),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_rejects_non_text():
    with pytest.raises(TypeError, match="needs a str"):
        split_sentences(None)


def test_ends_with_question():
    assert ends_with_question("How many?")
    assert ends_with_question('"How many?"')
    assert ends_with_question("How many (in all)?)")
    assert not ends_with_question("He asked why.")


def test_split_problem_basic_deal():
    sp = split_problem("Tom has 3 apples. Jim has 4 pears. Ann has 2 plums. Bo has 1 fig. How many fruits?")
    assert sp == Split(True, "ok", ["Tom has 3 apples.", "Ann has 2 plums."], ["Jim has 4 pears.", "Bo has 1 fig."],
                       "How many fruits?",
                       ["Tom has 3 apples.", "Jim has 4 pears.", "Ann has 2 plums.", "Bo has 1 fig."],
                       {"A": ["Tom has 3 apples.", "Ann has 2 plums."], "B": ["Jim has 4 pears.", "Bo has 1 fig."]})
    json.dumps(sp.to_json())  # lists, so it goes straight to JSON


def test_three_seats_are_dealt_round_robin():
    text = "Tom has 3 apples. Jim has 4 pears. Ann has 2 plums. Bo has 1 fig. Cy has 5 nuts. How many fruits?"
    sp = split_problem(text, ("A", "B", "C"))
    assert sp.eligible and sp.reason == "ok"
    assert sp.hands == {"A": ["Tom has 3 apples.", "Bo has 1 fig."], "B": ["Jim has 4 pears.", "Cy has 5 nuts."],
                        "C": ["Ann has 2 plums."]}
    assert (sp.facts_a, sp.facts_b) == (sp.hands["A"], sp.hands["B"])  # the first two seats' hands
    assert sp.question == "How many fruits?" and len(sp.facts) == 5
    named = split_problem(text, ("x", "y", "z", "w"))  # seat names are the config's, in dealing order
    assert list(named.hands) == ["x", "y", "z", "w"] and named.hands["w"] == ["Bo has 1 fig."]
    json.dumps(sp.to_json())


def test_question_in_the_middle_and_facts_after_it():
    sp = split_problem("Tom has 3 apples. How many does he have in all? Jim gives him 4. Ann gives him 2.")
    assert sp.question == "How many does he have in all?"
    assert sp.facts == ["Tom has 3 apples.", "Jim gives him 4.", "Ann gives him 2."]
    assert sp.facts_a == ["Tom has 3 apples.", "Ann gives him 2."] and sp.facts_b == ["Jim gives him 4."]
    assert sp.eligible


def test_last_question_wins():
    sp = split_problem("Is it 3? Tom has 3 apples. Jim has 4. What is the total?")
    assert sp.question == "What is the total?"
    assert sp.facts == ["Is it 3?", "Tom has 3 apples.", "Jim has 4."]


def test_no_question_mark_takes_the_last_sentence():
    sp = split_problem("Tom has 3 apples. Jim has 4 pears. Calculate the total number of fruits.")
    assert sp.question == "Calculate the total number of fruits."
    assert sp.eligible


def test_question_followed_by_closing_quote():
    sp = split_problem('Tom has 3 apples. Jim has 4 pears. The sign says "How many fruits do they have?"')
    assert sp.question == 'The sign says "How many fruits do they have?"'
    assert sp.facts == ["Tom has 3 apples.", "Jim has 4 pears."]


@pytest.mark.parametrize("text, reason", [
    ("", "no_sentences"),
    ("How many?", "too_few_facts"),
    ("Tom has 3 apples. How many?", "too_few_facts"),
    ("Tom has three apples. Jim has 4 pears. How many?", "no_number_in_hand_A"),
    ("Tom has 3 apples. Jim has four pears. How many?", "no_number_in_hand_B"),
    ("Tom has three apples. Jim has four pears. How many if he eats 2?", "no_number_in_hands_A_B"),
    ("Tom has 3 apples. Jim has 4 pears. How many?", "ok"),
    # numbers count in any form the numbers module reads: money, percent, units, fractions
    ("Tom pays $1,000. The tax is 20%. How much?", "ok"),
    ("He runs 5km. He eats 3/4 of a pie. Why?", "ok"),
])
def test_eligibility_reasons(text, reason):
    sp = split_problem(text)
    assert sp.reason == reason
    assert sp.eligible == (reason == "ok")


@pytest.mark.parametrize("text, reason", [
    ("Tom has 3 apples. Jim has 4 pears. How many?", "too_few_facts"),  # 2 facts for 3 seats
    ("Tom has 3 apples. Jim has 4 pears. Ann has 2 plums. How many?", "ok"),
    ("Tom has 3 apples. Jim has 4 pears. Ann has two plums. How many?", "no_number_in_hand_C"),
    ("Tom has 3 apples. Jim has four pears. Ann has two plums. Bo has 1 fig. How many?", "no_number_in_hands_B_C"),
    ("Tom has apples. Jim has 4 pears. Ann has two plums. How many?", "no_number_in_hands_A_C"),
    # a number in any one of a seat's facts is enough: A holds facts 1 and 4
    ("Tom has apples. Jim has 4 pears. Ann has 2 plums. Bo has 1 fig. How many?", "ok"),
])
def test_eligibility_reasons_with_three_seats(text, reason):
    sp = split_problem(text, ("A", "B", "C"))
    assert sp.reason == reason
    assert sp.eligible == (reason == "ok")


def test_ineligible_split_still_fills_fields():
    sp = split_problem("Tom has three apples. Jim has 4 pears. How many?")
    assert sp.facts_a == ["Tom has three apples."] and sp.facts_b == ["Jim has 4 pears."]
    assert sp.hands == {"A": ["Tom has three apples."], "B": ["Jim has 4 pears."]}
    assert sp.question == "How many?"
    few = split_problem("Tom has 3 apples. Jim has 4 pears. How many?", ("A", "B", "C"))
    assert few.reason == "too_few_facts" and few.hands == {"A": ["Tom has 3 apples."], "B": ["Jim has 4 pears."],
                                                           "C": []}


def test_split_is_frozen():
    sp = split_problem("A is 1. B is 2. Sum?")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sp.reason = "changed"


WORDS = st.sampled_from(["Tom", "has", "3", "apples", "$1.50", "Mr.", "e.g.", "a.m.", "3.5", "why", "He", "(A",
                         "B)", '"Is', 'it?"', "it", "...", "!", "?", ".", "\n", "St.", "in.", "20%"])


SEATS = st.sampled_from([("A", "B"), ("A", "B", "C"), ("A", "B", "C", "D")])


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=30), SEATS)
def test_split_invariants(words, seats):
    """For any text and team: the hands are disjoint round-robin slices that interleave back into the facts, in
    order; eligibility agrees with the rule; no sentence is lost (every non-space character survives, in order)."""
    text = " ".join(words)
    sp = split_problem(text, seats)
    facts = sp.facts
    n = len(seats)
    if sp.reason != "no_sentences":
        assert list(sp.hands) == list(seats)
        assert all(sp.hands[seat] == facts[k::n] for k, seat in enumerate(seats))
        assert sp.facts_a == sp.hands[seats[0]] and sp.facts_b == sp.hands[seats[1]]
        merged = [sp.hands[seats[i % n]][i // n] for i in range(len(facts))]
        assert merged == facts and sum(len(h) for h in sp.hands.values()) == len(facts)
    if sp.eligible:
        assert len(facts) >= n
        assert all(any(has_number(f) for f in hand) for hand in sp.hands.values())
    elif sp.reason.startswith("no_number_in_"):
        empty = [seat for seat in seats if not any(has_number(f) for f in sp.hands[seat])]
        assert sp.reason == ("no_number_in_hand_" if len(empty) == 1 else "no_number_in_hands_") + "_".join(empty)
    sentences = split_sentences(text)
    if any(c.isalnum() for c in text):
        assert "".join("".join(sentences).split()) == "".join(text.split())
    if sentences:
        assert sp.question in sentences and len(facts) == len(sentences) - 1
        assert sp.eligible == (len(facts) >= n and all(any(has_number(f) for f in h) for h in sp.hands.values()))
