"""The protocol as data: finals, limits and reading order for 2, 3 and 4 seats; bad protocols fail in one line."""

import pytest

from talktosolve.config import ConfigError, make_config
from talktosolve.protocol import Protocol, ProtocolError, partners_text


def build(seats, order, **kw):
    return Protocol.build(seats, order, kw.pop("final", 384), kw.pop("message", 160), **kw)


def test_defaults_are_each_seats_last_turn_and_the_two_limits():
    p = build("AB", "ABAB")
    assert p.finals == (2, 3) and p.limits == (160, 160, 384, 384)
    p3 = build("ABC", "ABCABC")
    assert p3.finals == (3, 4, 5) and [p3.is_final(t) for t in range(6)] == [False] * 3 + [True] * 3
    p4 = build("ABCD", "ABCDABCD")
    assert p4.final_turn("D") == 7 and p4.partners("B") == ("A", "C", "D")


def test_longer_chat_and_explicit_settings():
    p = build("AB", "ABABAB", turn_tokens=(10, 11, 12, 13, 14, 15), final_turns=(2, 5))
    assert p.max_tokens(4) == 14 and p.final_turn("A") == 2 and p.last_turn("A") == 4
    assert p.is_final(2) and not p.is_final(4)  # A answers early, then keeps talking


def test_reading_order():
    p = build("ABC", "ABCABC")
    assert p.heard_before_final("A") == [1, 2]
    assert p.heard_before_final("C") == [0, 1, 3, 4]
    assert p.said_before("A", 4) == [0, 3]


def test_partners_text():
    assert partners_text(["B"]) == "B" and partners_text("BC") == "B and C" and partners_text("BCD") == "B, C and D"


@pytest.mark.parametrize("seats, order, kw, message", [
    ("A", "AA", {}, "at least 2 seats"),
    ("AA", "AA", {}, "distinct"),
    ("AB", "ABX", {}, "not in chat.seats"),
    ("ABC", "ABAB", {}, "never gives"),
    ("AB", "ABAB", {"turn_tokens": (1, 2)}, "one per turn"),
    ("AB", "ABAB", {"turn_tokens": (1, 2, 0, 4)}, "at least 1"),
    ("AB", "ABAB", {"final_turns": (2,)}, "one per seat"),
    ("AB", "ABAB", {"final_turns": (1, 3)}, "not one of its turns"),
])
def test_bad_protocols_name_the_setting(seats, order, kw, message):
    with pytest.raises(ProtocolError, match=message):
        build(seats, order, **kw)


def test_config_turns_a_bad_protocol_into_a_config_error():
    with pytest.raises(ConfigError, match="chat.order"):
        make_config("micro", {"chat": {"seats": ["A", "B", "C"]}})
    cfg = make_config("micro", {"chat": {"seats": ["A", "B", "C"], "order": list("ABCABC")}})
    assert cfg.chat.order == tuple("ABCABC")


def test_set_parses_seats_and_integer_limits():
    from talktosolve.config import parse_overrides

    over = parse_overrides(["chat.seats=A,B,C", "chat.order=A,B,C,A,B,C", "chat.turn_tokens=8,8,8,30,30,30"])
    assert over["chat"]["turn_tokens"] == (8, 8, 8, 30, 30, 30) and over["chat"]["seats"] == ("A", "B", "C")
    cfg = make_config("micro", over)
    assert cfg.chat.turn_tokens == (8, 8, 8, 30, 30, 30)


@pytest.mark.parametrize("over, message", [
    ({"arms": ["chat", "loud"]}, "arms holds `loud`"),
    ({"comparisons": ["chat-full-cut"]}, "comparisons holds"),
    ({"comparisons": ["chat-chat"]}, "comparisons holds"),
])
def test_bad_arms_and_comparisons(over, message):
    with pytest.raises(ConfigError, match=message):
        make_config("micro", over)
