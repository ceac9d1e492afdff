"""Talk metrics on hand-built chats: own-only numbers, send/use/ask/agree for two seats (the stable
`talk_metrics`) and for any protocol (`team_talk`), and their per-seat and pooled means."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from talktosolve.protocol import Protocol
from talktosolve.team.talk import PAPER_PROTOCOL, aggregate_talk, talk_metrics, team_talk

TALK_KEYS = ("send_a", "send_b", "use_a", "use_b", "ask_a", "ask_b", "agree", "use_given_sent_a",
             "use_given_sent_b", "chars_a", "chars_b")

# A's facts hold 1,000 (own), $3.50 (own) and 12 (also B's: shared, so nobody's own). B's hold 7 (own) and 12.
# The question holds 4: a number everyone is given, so nobody's own either, though A's facts mention it too.
FACTS_A = ["Tom has $1,000 in the bank.", "A pen costs $3.50 and a box holds 12 pens.", "He buys 4 boxes."]
FACTS_B = ["He gives away 7 pens.", "Each shelf holds 12 boxes."]
QUESTION = "How much does he spend on 4 boxes?"


def chat(m1="", m2="", m3=r"\boxed{1}", m4=r"\boxed{1}"):
    return [m1, m2, m3, m4]


def test_keys_and_lengths():
    messages = chat("I have 1000 dollars.", "I gave 7 away?", r"So \boxed{168}", r"\boxed{168.0}")
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, messages)
    assert set(out) == set(TALK_KEYS)
    assert out["chars_a"] == len(messages[0]) + len(messages[2])
    assert out["chars_b"] == len(messages[1]) + len(messages[3])


def test_send_counts_values_not_spelling():
    # A writes "1000" for "$1,000" and "3.5" for "$3.50"; both of A's own numbers are sent.
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("I have 1000 and pens cost 3.5 each."))
    assert out["send_a"] == 1.0
    assert out["send_b"] == 0.0  # B said nothing: 7 was not sent


def test_send_a_counts_message_three_too():
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("I have 1,000.", "", r"pens are $3.50, \boxed{2}"))
    assert out["send_a"] == 1.0
    half = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("I have 1,000."))
    assert half["send_a"] == 0.5


def test_send_b_counts_only_message_two():
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("", "", "", r"7 pens \boxed{7}"))
    assert out["send_b"] == 0.0  # message 4 comes after A's final answer
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("", "I gave away 7."))
    assert out["send_b"] == 1.0


def test_question_and_shared_numbers_are_nobodys_own():
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("12 pens, 4 boxes", "12 boxes, 4 boxes"))
    assert out["send_a"] == 0.0
    assert out["send_b"] == 0.0


def test_use():
    messages = chat("I have 1000.", "7 gone.", r"7 pens away so \boxed{5}", r"1000 and 3.50 gives \boxed{5}")
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, messages)
    assert out["use_a"] == 1.0  # B's only own number, 7, is in A's final
    assert out["use_b"] == 1.0  # both of A's own numbers in B's final
    assert out["use_given_sent_a"] == 1.0  # 7 was sent, and used
    assert out["use_given_sent_b"] == 1.0  # only 1000 was sent (message 1), and B used it

    partial = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("I have 1000.", "", r"\boxed{5}", r"3.5 \boxed{5}"))
    assert partial["use_b"] == 0.5  # 3.5 used, 1000 not
    assert partial["use_given_sent_b"] == 0.0  # only 1000 was sent, and it was not used
    assert partial["use_given_sent_a"] is None  # B sent nothing


def test_none_where_no_own_numbers():
    out = talk_metrics(["He has 5 pens."], ["He buys 5 more pens."], "How many pens?", chat("5", "5"))
    assert out["send_a"] is None and out["send_b"] is None
    assert out["use_a"] is None and out["use_b"] is None
    assert out["use_given_sent_a"] is None and out["use_given_sent_b"] is None
    only_question = talk_metrics(["He has 9 pens."], ["It is Monday."], "Are 9 pens enough?", chat())
    assert only_question["send_a"] is None and only_question["use_b"] is None


def test_ask():
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("How many did you give?", "None.", "Why? \\boxed{1}"))
    assert out["ask_a"] is True and out["ask_b"] is False
    out = talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("Hi.", "What do you have?"))
    assert out["ask_a"] is False and out["ask_b"] is True


@pytest.mark.parametrize(
    "final_a, final_b, agree",
    [
        (r"\boxed{72}", r"\boxed{72.0}", True),
        (r"\boxed{\$1,000}", r"\boxed{1000}", True),
        (r"\boxed{\frac{1}{2}}", r"\boxed{\frac{1}{2}}", False),  # not a number: never agrees
        (r"\boxed{}", r"\boxed{}", False),
        (r"\boxed{ }", r"\boxed{}", False),
        (r"\boxed{abc}", r"\boxed{abc}", False),
        (r"\boxed{72}", r"\boxed{71}", False),
        (r"\boxed{72}", "72", False),
        ("72", "72", False),
        (r"\boxed{1} then \boxed{72}", r"\boxed{72}", True),
    ],
)
def test_agree_means_equal_boxed_numbers(final_a, final_b, agree):
    assert talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("", "", final_a, final_b))["agree"] is agree


@pytest.mark.parametrize("messages", [[], ["a"], ["a", "b", "c"], ["a", "b", "c", "d", "e"]])
def test_wrong_number_of_messages(messages):
    with pytest.raises(ValueError, match="4 messages"):
        talk_metrics(FACTS_A, FACTS_B, QUESTION, messages)


def _row(send_a, send_b, use_a, use_b, ask_a, ask_b, agree, ugs_a, ugs_b, chars_a, chars_b):
    return {"seats": {"A": {"send": send_a, "use": use_a, "use_given_sent": ugs_a, "ask": ask_a, "chars": chars_a},
                      "B": {"send": send_b, "use": use_b, "use_given_sent": ugs_b, "ask": ask_b, "chars": chars_b}},
            "agree": agree}


def test_aggregate():
    rows = [_row(1.0, None, 0.5, None, True, False, True, None, 1.0, 10, 20),
            _row(0.0, 0.5, None, None, False, False, False, None, 0.0, 30, 40)]
    out = aggregate_talk(rows)
    a, b = out["seats"]["A"], out["seats"]["B"]
    assert a["send"] == 0.5 and b["send"] == 0.5
    assert a["use"] == 0.5 and b["use"] is None
    assert a["ask"] == 0.5 and b["ask"] == 0.0 and out["agree"] == 0.5
    assert a["use_given_sent"] is None and b["use_given_sent"] == 0.5
    assert a["chars"] == 20 and b["chars"] == 30
    assert out["send"] == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3
    assert out["use"] == 0.5 and out["n_send"] == 3 and out["n_use"] == 1
    assert out["ask"] == 0.25 and out["use_given_sent"] == 0.5


def test_aggregate_empty():
    out = aggregate_talk([])
    assert all(out[key] is None for key in ("send", "use", "use_given_sent", "ask", "agree"))
    assert out["seats"] == {} and out["n_send"] == 0 and out["n_use"] == 0


def test_aggregate_of_real_rows():
    rows = [team_talk({"A": FACTS_A, "B": FACTS_B}, QUESTION, chat("I have 1000?", "7"), PAPER_PROTOCOL)
            for _ in range(3)]
    out = aggregate_talk(rows)
    assert out["seats"]["A"]["send"] == 0.5 and out["seats"]["B"]["send"] == 1.0
    assert out["ask"] == 0.5 and out["n_send"] == 6


def test_team_talk_of_two_seats_is_talk_metrics():
    messages = chat("I have 1000?", "I gave 7 away.", r"7 and \boxed{5}", r"1000, 3.50 so \boxed{5}")
    flat = talk_metrics(FACTS_A, FACTS_B, QUESTION, messages)
    team = team_talk({"A": FACTS_A, "B": FACTS_B}, QUESTION, messages, PAPER_PROTOCOL)
    for seat in ("A", "B"):
        for key, value in team["seats"][seat].items():
            assert flat[f"{key}_{seat.lower()}"] == value
    assert flat["agree"] == team["agree"] is True


# Three seats, turns A, B, C, A, B, C (finals 3, 4, 5). Own-only: A {10}, B {20}, C {30}; 5 is in the question.
THREE = Protocol(("A", "B", "C"), ("A", "B", "C", "A", "B", "C"), (1,) * 6, (3, 4, 5))
HANDS = {"A": ["Ann has 10 pens and 5 cups."], "B": ["Ben has 20 pens."], "C": ["Cy has 30 pens."]}
Q3 = "How many pens for 5 people?"


def test_three_seats_send_counts_messages_before_some_partners_final():
    # A's final (turn 3) comes before B's and C's finals: it counts as sent. C's turn 2 comes before A's final.
    t = team_talk(HANDS, Q3, ["hi", "hi", "I have 30", r"10 \boxed{1}", r"\boxed{1}", r"\boxed{1}"], THREE)
    assert t["seats"]["A"]["send"] == 1.0 and t["seats"]["C"]["send"] == 1.0 and t["seats"]["B"]["send"] == 0.0
    # C's final (turn 5) comes after every partner's final: nothing in it is sent.
    late = team_talk(HANDS, Q3, ["hi", "hi", "hi", r"\boxed{1}", r"\boxed{1}", r"30 \boxed{1}"], THREE)
    assert late["seats"]["C"]["send"] == 0.0


def test_three_seats_use_pools_every_partners_numbers():
    t = team_talk(HANDS, Q3, ["I have 10", "I have 20", "hi", r"20 \boxed{1}", r"10 and 30 \boxed{1}",
                              r"\boxed{1}"], THREE)
    a, b = t["seats"]["A"], t["seats"]["B"]
    assert a["use"] == 0.5  # 20 of {20, 30}
    assert a["use_given_sent"] == 1.0  # only 20 was sent to A before its final, and A used it
    assert b["use"] == 1.0  # 10 and 30 of {10, 30}
    assert b["use_given_sent"] == 1.0  # 10 was sent (turn 0); 30 never was (C said "hi")
    assert t["seats"]["C"]["use_given_sent"] == 0.0 and t["seats"]["C"]["use"] == 0.0


def test_three_seats_agree_needs_every_final_to_box_the_same_number():
    base = ["", "", "", r"\boxed{7}", r"\boxed{7.0}"]
    assert team_talk(HANDS, Q3, base + [r"\boxed{7}"], THREE)["agree"] is True
    assert team_talk(HANDS, Q3, base + [r"\boxed{8}"], THREE)["agree"] is False
    assert team_talk(HANDS, Q3, base + ["7"], THREE)["agree"] is False


def test_team_talk_needs_one_message_per_turn():
    with pytest.raises(ValueError, match="6 turns"):
        team_talk(HANDS, Q3, ["a"] * 4, THREE)


TEXT = st.text(alphabet=st.sampled_from(list("0123456789.,$%?{}\\boxed ab-/")) | st.characters(), max_size=80)


@settings(max_examples=200, deadline=2000)
@given(st.lists(TEXT, max_size=4), st.lists(TEXT, max_size=4), TEXT, st.lists(TEXT, min_size=4, max_size=4))
def test_talk_metrics_never_crashes(facts_a, facts_b, question, messages):
    out = talk_metrics(facts_a, facts_b, question, messages)
    assert set(out) == set(TALK_KEYS)
    for key in ("send_a", "send_b", "use_a", "use_b", "use_given_sent_a", "use_given_sent_b"):
        assert out[key] is None or 0.0 <= out[key] <= 1.0
    assert all(isinstance(out[key], bool) for key in ("ask_a", "ask_b", "agree"))
    row = team_talk({"A": facts_a, "B": facts_b}, question, messages, PAPER_PROTOCOL)
    aggregate_talk([row, row])
