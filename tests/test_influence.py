"""Influence figures and ablations (pure): positions, what each ablation shows, figures worked out by hand."""

import math
import random

import pytest

from talktosolve.arms import NO_MESSAGE
from talktosolve.protocol import Protocol
from talktosolve.stats import t_quantile
from talktosolve.task.numbers import numbers_in
from talktosolve.team.influence import (
    Outcome,
    ablations,
    differences,
    figures,
    includes_zero,
    own_only,
    positions,
    renumber,
)

PAPER = Protocol(("A", "B"), ("A", "B", "A", "B"), (16, 16, 36, 36), (2, 3))
THREE = Protocol(("A", "B", "C"), ("A", "B", "C", "A", "B", "C"), (8,) * 6, (3, 4, 5))


def test_positions_are_the_messages_some_partner_answers_after():
    got = [(p.turn, p.writer, p.listeners, p.last) for p in positions(PAPER)]
    assert got == [(0, "A", ("B",), 3), (1, "B", ("A",), 2), (2, "A", ("B",), 3)]
    three = [(p.turn, p.writer, p.listeners, p.last) for p in positions(THREE)]
    assert three == [(0, "A", ("B", "C"), 5), (1, "B", ("A", "C"), 5), (2, "C", ("A", "B"), 4),
                     (3, "A", ("B", "C"), 5), (4, "B", ("C",), 5)]


def test_own_only_numbers_leave_out_partners_numbers_and_the_question():
    hands = {"A": ["Mia has 27 shells.", "Ben gives Mia 4 shells."], "B": ["Mia finds 4 shells.", "Mia sells 9."]}
    assert own_only(hands, "Does Mia have 27 or more?", "A") == set()
    assert own_only(hands, "How many shells?", "A") == {"27"}
    assert own_only(hands, "How many shells?", "B") == {"9"}


def test_renumber_keeps_each_numbers_shape_and_plants_only_free_values():
    text = "I hold 27 and 1,250 and 3.5 and 27 again, and 4 from you."
    out, planted = renumber(text, own={"27", "1250", "3.5"}, banned={"4", "27", "1250", "3.5"},
                            rng=random.Random(0))
    values = numbers_in(out)
    assert len(values) == 5 and values[4] == "4"  # a number that is not own-only is untouched
    assert values[0] == values[3] and values[0] != "27"  # one value, one replacement wherever it recurs
    words = out.split()
    assert len(words[2]) == 2 and words[2][0] != "0"
    assert len(words[4]) == 5 and words[4][1] == ","  # 1,250 -> d,ddd
    assert words[6][1] == "." and len(words[6]) == 3  # 3.5 -> d.d
    assert planted == set(values[:3]) and not planted & {"4", "27", "1250", "3.5"}
    assert out.replace(words[2], "N").replace(words[4], "N").replace(words[6], "N") == \
        text.replace("27", "N").replace("1,250", "N").replace("3.5", "N")


def _chat(pid: str, k: int, messages: list[str]) -> dict:
    return {"problem_id": pid, "chat": k, "question": "How many?", "facts": ["A has 11.", "B has 22."],
            "hands": {"A": ["A has 11."], "B": ["B has 22."]},
            "messages": [{"turn": i, "text": m} for i, m in enumerate(messages)]}


def test_each_ablation_shows_what_it_says():
    chats = [_chat("p0", 0, ["I have 11", "I have 22", "x", "y"]), _chat("p0", 1, ["I hold 11", "B0", "x", "y"]),
             _chat("p1", 0, ["p1 chat0", "B", "x", "y"]), _chat("p1", 1, ["p1 chat1", "B", "x", "y"])]
    got = ablations(chats, PAPER, positions(PAPER)[0], seed=0)
    assert [a.shown for a in got["remove"]] == [NO_MESSAGE] * 4
    # The same seat's message at the same turn, from the next problem's chat of the same index (wrapping around).
    assert [a.shown for a in got["replace"]] == ["p1 chat0", "p1 chat1", "I have 11", "I hold 11"]
    renumbered = got["renumber"]
    assert renumbered[0].changed and renumbered[0].shown.startswith("I have ") and "11" not in renumbered[0].shown
    assert renumbered[0].planted == set(numbers_in(renumbered[0].shown))
    assert not renumbered[2].changed and renumbered[2].shown == "p1 chat0"  # nothing own-only to renumber


def _outcome(pid, kind, control, ablated, follows=False, control_answer=None, ablated_answer=None):
    return Outcome(pid, 1, "A", kind, control, ablated, control_answer, ablated_answer, follows, False, True)


def test_figures_are_the_per_problem_means_and_their_interval():
    # 4 problems x 2 chats; per-problem drops: p0 (1 + 1) / 2, p1 (1 + 0) / 2, p2 (0 + 0) / 2, p3 (1 + 0) / 2.
    rows = [_outcome("p0", "remove", True, False, ablated_answer="9"), _outcome("p0", "remove", True, False, True),
            _outcome("p1", "remove", True, False), _outcome("p1", "remove", True, True),
            _outcome("p2", "remove", False, False), _outcome("p2", "remove", True, True),
            _outcome("p3", "remove", True, False), _outcome("p3", "remove", False, False)]
    (entry,) = figures([rows], {1: "B"})
    drops = [1.0, 0.5, 0.0, 0.5]
    mean = sum(drops) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in drops) / 3)
    half = t_quantile(0.975, 3) * sd / 2
    assert entry["drop"]["mean"] == pytest.approx(0.5)
    assert entry["drop"]["lo"] == pytest.approx(mean - half) and entry["drop"]["hi"] == 1.0  # clipped at 1
    assert entry["flip"]["mean"] == pytest.approx((0.5 + 0 + 0 + 0) / 4)  # answers differ only in p0's first chat
    assert entry["follow"] is None  # follow is a renumber figure
    assert entry["n_problems"] == 4 and entry["writer"] == "B" and entry["listener"] == "A"


def test_an_ablation_that_changes_nothing_has_every_interval_at_zero():
    rows = [_outcome(f"p{i}", "remove", i % 2 == 0, i % 2 == 0, control_answer="1", ablated_answer="1")
            for i in range(6)]
    (entry,) = figures([rows], {1: "B"})
    assert entry["drop"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0} and includes_zero([entry])
    moved = figures([[_outcome(f"p{i}", "remove", True, False) for i in range(6)]], {1: "B"})
    assert not includes_zero(moved)


def test_trained_minus_base_pairs_the_drops_over_problems():
    trained = [[_outcome(f"p{i}", "remove", True, i % 3 == 0) for i in range(6)] for _ in range(2)]
    base = [[_outcome(f"p{i}", "remove", True, True) for i in range(6)]]
    (d,) = differences(trained, base)
    assert d["delta"] == pytest.approx(4 / 6) and d["excludes_zero"]
    assert (d["turn"], d["listener"], d["kind"]) == (1, "A", "remove")


def test_follow_counts_only_planted_numbers_the_control_does_not_hold_by_chance():
    by_chance = [Outcome(f"p{i}", 0, "B", "renumber", True, True, "5", "5", True, True, True) for i in range(4)]
    heard = [Outcome(f"p{i}", 0, "B", "renumber", True, False, "5", "7", True, False, True) for i in range(4)]
    assert figures([by_chance], {0: "A"})[0]["follow"]["mean"] == 0.0
    assert figures([heard], {0: "A"})[0]["follow"]["mean"] == 1.0
