"""Talk metrics on hand-built chats: own-only numbers, send/use/ask/agree, and their pooled means."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from talktosolve.talk import TALK_KEYS, aggregate_talk, talk_metrics

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


def test_aggregate():
    rows = [
        {"send_a": 1.0, "send_b": None, "use_a": 0.5, "use_b": None, "ask_a": True, "ask_b": False, "agree": True,
         "use_given_sent_a": None, "use_given_sent_b": 1.0, "chars_a": 10, "chars_b": 20},
        {"send_a": 0.0, "send_b": 0.5, "use_a": None, "use_b": None, "ask_a": False, "ask_b": False, "agree": False,
         "use_given_sent_a": None, "use_given_sent_b": 0.0, "chars_a": 30, "chars_b": 40},
    ]
    out = aggregate_talk(rows)
    assert out["send_a"] == 0.5 and out["send_b"] == 0.5
    assert out["use_a"] == 0.5 and out["use_b"] is None
    assert out["ask_a"] == 0.5 and out["ask_b"] == 0.0 and out["agree"] == 0.5
    assert out["use_given_sent_a"] is None and out["use_given_sent_b"] == 0.5
    assert out["chars_a"] == 20 and out["chars_b"] == 30
    assert out["send"] == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3
    assert out["use"] == 0.5 and out["n_send"] == 3 and out["n_use"] == 1
    assert out["ask"] == 0.25 and out["use_given_sent"] == 0.5


def test_aggregate_empty():
    out = aggregate_talk([])
    assert all(out[key] is None for key in (*TALK_KEYS, "send", "use", "use_given_sent", "ask"))
    assert out["n_send"] == 0 and out["n_use"] == 0


def test_aggregate_of_real_rows():
    rows = [talk_metrics(FACTS_A, FACTS_B, QUESTION, chat("I have 1000?", "7")) for _ in range(3)]
    out = aggregate_talk(rows)
    assert out["send_a"] == 0.5 and out["send_b"] == 1.0 and out["ask"] == 0.5 and out["n_send"] == 6


TEXT = st.text(alphabet=st.sampled_from(list("0123456789.,$%?{}\\boxed ab-/")) | st.characters(), max_size=80)


@settings(max_examples=200, deadline=2000)
@given(st.lists(TEXT, max_size=4), st.lists(TEXT, max_size=4), TEXT, st.lists(TEXT, min_size=4, max_size=4))
def test_talk_metrics_never_crashes(facts_a, facts_b, question, messages):
    out = talk_metrics(facts_a, facts_b, question, messages)
    assert set(out) == set(TALK_KEYS)
    for key in ("send_a", "send_b", "use_a", "use_b", "use_given_sent_a", "use_given_sent_b"):
        assert out[key] is None or 0.0 <= out[key] <= 1.0
    assert all(isinstance(out[key], bool) for key in ("ask_a", "ask_b", "agree"))
    aggregate_talk([out, out])
