"""The micro world for teams: the N-seat task families, scripted chats of any protocol and arm, and the
`micro-teams` base; and that the two-seat micro world they grew from is unchanged."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from itertools import combinations

import pytest

from talktosolve.arms import ARMS, deal_round_robin
from talktosolve.micro import BASES, base_recipe, script
from talktosolve.micro.base import ASSETS, MICRO, Corpus, recipe_key
from talktosolve.micro.task import (
    MAX_NUMBER,
    SEAT_NAMES,
    answer_from_facts,
    guess_rate,
    hand,
    make_problems,
    problem_text,
    read_fact,
)
from talktosolve.micro.teams import ASSETS_TEAMS, TEAMS, TeamsCorpus, corpus_protocol, scripted_team_accuracy
from talktosolve.micro.tokenizer import build_tokenizer
from talktosolve.task.grading import grade_answer
from talktosolve.task.numbers import numbers_in
from talktosolve.task.split import split_problem
from talktosolve.team.chat import Seat, render_view, view

ALL_KNOWING = script.Repertoire(p_state=1.0, p_ask=0.0, p_keep=1.0, p_use=1.0)
"""Seats that state every number in every non-final message and take everything they heard."""


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


# ---- the two-seat micro world is unchanged -------------------------------------------------------------------

def test_two_seat_problems_are_the_ones_published_results_used():
    problems = make_problems("train", 100, 0) + make_problems("test", 100, 0) + make_problems("train", 50, 3)
    assert _sha([p.to_json() for p in problems]) == "e58236724e48869d"
    assert make_problems("test", 5, 0, seats=2)[4].id == "micro-test-4"


def test_two_seat_base_recipe_key_and_corpus_are_unchanged():
    shipped = json.loads((ASSETS / "micro.json").read_text())["recipe_key"]
    assert recipe_key() == MICRO.key() == shipped == "63d5bd495641"
    texts = Corpus(build_tokenizer()).texts(2000)
    assert hashlib.sha256("".join(texts).encode()).hexdigest()[:16] == "5ee4260e77a0d608"


def test_team_chat_of_the_two_seat_protocol_is_scripted_chat():
    for p in make_problems("train", 60, 2):
        for arm in ("chat", "cut"):
            a = script.scripted_chat(p.facts_a, p.facts_b, arm, random.Random(p.id))
            b = script.team_chat({"A": p.facts_a, "B": p.facts_b}, script.TWO_SEATS, ARMS[arm], random.Random(p.id))
            assert a == b


# ---- the N-seat families -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seats", [3, 4])
def test_n_seat_family_has_n_to_2n_facts_and_its_own_ids(seats):
    problems = make_problems("test", 400, 0, seats=seats)
    assert [p.to_json() for p in problems[:50]] == [p.to_json() for p in make_problems("test", 50, 0, seats=seats)]
    assert set(Counter(len(p.facts) for p in problems)) == set(range(seats, 2 * seats + 1))
    assert problems[7].id == f"micro{seats}-test-7"
    assert len({p.id for p in problems} | {p.id for p in make_problems("test", 400, 0)}) == 800
    assert read_fact(problems[0].facts[0])[0] == 0  # the start comes first, so seat A holds it


@pytest.mark.parametrize("seats", [3, 4])
def test_every_number_stays_within_the_tokenizer_at_every_step(seats):
    protocol, _ = corpus_protocol(",".join(SEAT_NAMES[:seats] * 2))
    rng = random.Random(0)
    for p in make_problems("train", 300, 1, seats=seats):
        kinds = [read_fact(f) for f in p.facts]
        gains = sum(v for k, v in kinds if k > 0)
        losses = sum(v for k, v in kinds if k < 0)
        start = kinds[0][1]
        assert start + gains <= MAX_NUMBER and losses <= start
        for arm in ("chat", "full"):
            messages = script.team_chat(ARMS[arm].hands(p.facts, protocol.seats), protocol, arm, rng, ALL_KNOWING)
            assert all(0 <= int(n) <= MAX_NUMBER for m in messages for n in numbers_in(m))


def _signed_total(facts) -> int:
    return sum(v if k >= 0 else -v for k, v in map(read_fact, facts))


@pytest.mark.parametrize("seats", [3, 4])
def test_every_hand_holds_a_number_and_no_fewer_hands_total_the_gold(seats):
    names = SEAT_NAMES[:seats]
    for p in make_problems("test", 300, 0, seats=seats):
        cut = split_problem(problem_text(p), names)
        assert cut.eligible and cut.hands == deal_round_robin(p.facts, names)
        assert answer_from_facts(list(p.facts)) == int(p.gold)
        assert all(numbers_in(" ".join(hand(p, seat, seats))) for seat in names)
        for size in range(1, seats):
            for some in combinations(names, size):
                assert _signed_total([f for s in some for f in hand(p, s, seats)]) != int(p.gold)


def test_three_seat_train_and_test_never_meet_nor_meet_the_other_families():
    train = {problem_text(p) for p in make_problems("train", 2000, 0, seats=3)}
    test = {problem_text(p) for p in make_problems("test", 500, 0, seats=3)}
    assert len(test) == 500 and train.isdisjoint(test)
    assert test.isdisjoint(problem_text(p) for p in make_problems("train", 2000, 0))
    assert train.isdisjoint(problem_text(p) for p in make_problems("test", 500, 0))


def test_one_hand_alone_rarely_guesses_the_gold_in_any_seat():
    problems = make_problems("test", 1000, 0, seats=3)
    for seat in "ABC":
        assert guess_rate(problems, seat, 3) < 0.05


def test_make_problems_names_the_seats_it_takes():
    with pytest.raises(ValueError, match="seats must be an integer from 2 to 4"):
        make_problems("test", 3, 0, seats=5)


# ---- scripted chats for any protocol -------------------------------------------------------------------------

def test_three_seat_finals_mark_each_partner_by_seat_name_and_sum_right():
    protocol, _ = corpus_protocol("A,B,C,A,B,C")
    for p in make_problems("train", 200, 4, seats=3):
        hands = ARMS["chat"].hands(p.facts, protocol.seats)
        messages = script.team_chat(hands, protocol, "chat", random.Random(0), ALL_KNOWING)
        assert len(messages) == 6 and all(m.startswith("my numbers are") for m in messages[:3])
        for seat in "ABC":
            final = messages[protocol.final_turn(seat)]
            assert grade_answer(final, p.gold)
            labels = [w for w in final.replace(",", " , ").split() if w in ("mine", "yours", "A", "B", "C")]
            assert sorted(labels) == sorted(["mine", *(s for s in "ABC" if s != seat)])
        assert messages[3].startswith("mine ")  # A holds the start: its own group goes first


def test_cut_and_full_finals_take_nothing():
    protocol, _ = corpus_protocol("A,B,C,A,B,C")
    right = Counter()
    for p in make_problems("train", 100, 5, seats=3):
        for arm in ("cut", "full"):
            hands = ARMS[arm].hands(p.facts, protocol.seats)
            messages = script.team_chat(hands, protocol, arm, random.Random(1), ALL_KNOWING)
            for seat in "ABC":
                final = messages[protocol.final_turn(seat)]
                assert final == script.final_message(script.terms(hands[seat]), [])
                right[arm] += grade_answer(final, p.gold)
    assert right["full"] == 300 and right["cut"] <= 3  # a cut seat is right only through the floor at 0


def test_a_final_takes_only_what_the_arm_showed():
    protocol, _ = corpus_protocol("A,B,C,A,B,C")
    hidden = ARMS["chat"].hiding({1})  # B's first message reaches no one
    p = make_problems("train", 1, 6, seats=3)[0]
    messages = script.team_chat(hidden.hands(p.facts, protocol.seats), protocol, hidden, random.Random(2), ALL_KNOWING)
    assert ", B " not in messages[3] and ", C " in messages[3]  # A heard C, never B
    assert ", B " in messages[5]  # C heard B's final


def test_six_turn_two_seat_chat_talks_twice_then_answers():
    protocol, _ = corpus_protocol("A,B,A,B,A,B")
    assert protocol.finals == (4, 5)
    rng = random.Random(3)
    for p in make_problems("train", 200, 7):
        messages = script.team_chat({"A": p.facts_a, "B": p.facts_b}, protocol, "chat", rng)
        assert len(messages) == 6 and "\\boxed" not in " ".join(messages[:4])
        assert all("\\boxed" in m for m in messages[4:])
        full = script.team_chat({"A": p.facts_a, "B": p.facts_b}, protocol, "chat", rng, ALL_KNOWING)
        assert all(grade_answer(m, p.gold) for m in full[4:]) and ", yours " in full[4]


def test_scripted_teams_are_usually_wrong_but_sometimes_right():
    assert 0.1 < scripted_team_accuracy("A,B,C,A,B,C", n=300) < 0.3
    assert scripted_team_accuracy("A,B,C,A,B,C", n=300, arm="cut") < 0.01


# ---- the micro-teams base ------------------------------------------------------------------------------------

def test_teams_vocabulary_extends_the_micro_one():
    micro, teams = set(build_tokenizer().get_vocab()), set(TEAMS.tokenizer().get_vocab())
    assert micro < teams and teams - micro == {"C", "D", "and"}


def test_teams_corpus_renders_views_the_teams_tokenizer_reads_whole():
    tok = TEAMS.tokenizer()
    texts = TeamsCorpus(tok, seed=1).texts(400)
    assert any("You are C. Your partner is A and B." in t for t in texts)
    assert any("You are D." in t for t in texts) and any("(no message)" in t for t in texts)
    for ids in tok(texts, add_special_tokens=False)["input_ids"]:
        assert tok.unk_token_id not in ids and len(ids) <= 512


def test_teams_views_of_every_protocol_and_arm_have_no_unknown_token():
    tok = TEAMS.tokenizer()
    rng = random.Random(4)
    for order in TEAMS.corpus["protocols"]:
        protocol, chat = corpus_protocol(order)
        for p in make_problems("test", 10, 0, seats=len(protocol.seats)):
            for arm in ARMS.values():
                hands = arm.hands(p.facts, protocol.seats)
                messages = script.team_chat(hands, protocol, arm, rng)
                for turn, seat in enumerate(protocol.order):
                    v = view(Seat(hands[seat], p.question), turn, messages[:turn], arm, protocol, chat)
                    ids = tok(render_view(tok, v) + messages[turn], add_special_tokens=False)["input_ids"]
                    assert tok.unk_token_id not in ids


def test_base_recipes_by_name():
    assert base_recipe("micro") is MICRO and base_recipe("micro-teams") is TEAMS
    assert BASES == (MICRO.name, TEAMS.name)
    with pytest.raises(ValueError, match="micro bases are micro, micro-teams"):
        base_recipe("micro-huge")


def test_shipped_teams_base_is_the_recipe_and_solves_what_it_sees(tmp_path, monkeypatch):
    import torch

    from talktosolve.micro import base

    assert json.loads((ASSETS_TEAMS / "micro.json").read_text())["recipe_key"] == TEAMS.key()
    monkeypatch.setenv("TALKTOSOLVE_CACHE", str(tmp_path))
    path = base.micro_base_path(TEAMS, progress=False)
    assert path.name == f"micro-teams-base-{TEAMS.key()}"
    model, tok = base.load_micro_base(path)
    assert len(tok) == model.config.vocab_size == 221
    assert sum(f.stat().st_size for f in ASSETS_TEAMS.iterdir()) < 4_000_000
    problems = make_problems("test", 8, 0, seats=3)
    texts = [render_view(tok, base.solo_view(list(p.facts), p.question)) for p in problems]
    batch = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=36, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
    finals = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert sum(grade_answer(f, p.gold) for f, p in zip(finals, problems)) >= 7
