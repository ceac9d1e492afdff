"""The micro world: task, tokenizer, prompts, scripted corpus and the base model's folder (no full pretraining)."""

from __future__ import annotations

import random

import pytest

from talktosolve.arms import ARMS
from talktosolve.micro import script
from talktosolve.micro.base import Corpus, load_micro_base, pretrain, solo_view, task_facts
from talktosolve.micro.prompts import MICRO_PROMPTS, micro_chat_config
from talktosolve.micro.task import (
    answer_from_facts,
    best_guess_from_half,
    guess_rate,
    make_problems,
    problem_text,
    read_fact,
)
from talktosolve.micro.tokenizer import build_tokenizer, load_tokenizer
from talktosolve.protocol import protocol_of
from talktosolve.task.grading import grade_answer
from talktosolve.task.numbers import numbers_in
from talktosolve.task.split import split_problem
from talktosolve.team.chat import Seat, render_view, view


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


# ---- task --------------------------------------------------------------------------------------------------------

def test_problems_are_deterministic_and_splits_disjoint():
    a = make_problems("train", 300, seed=3)
    assert [p.to_json() for p in a] == [p.to_json() for p in make_problems("train", 300, seed=3)]
    assert [p.id for p in a[:2]] == ["micro-train-0", "micro-train-1"]
    other = make_problems("train", 50, seed=4)  # other seeds: other streams
    assert [p.to_json() for p in other] != [p.to_json() for p in a[:50]]
    test = make_problems("test", 300, seed=3)
    assert {problem_text(p) for p in a}.isdisjoint({problem_text(p) for p in test})
    assert len({problem_text(p) for p in test}) == 300


def test_every_problem_is_eligible_and_gold_needs_both_halves():
    problems = make_problems("test", 500, seed=0)
    for p in problems:
        cut = split_problem(problem_text(p))
        assert cut.eligible and cut.facts == p.facts and cut.question == p.question
        assert cut.facts_a == p.facts_a and cut.facts_b == p.facts_b
        assert numbers_in(" ".join(p.facts_a)) and numbers_in(" ".join(p.facts_b))
        assert 2 <= len(p.facts_a) + len(p.facts_b) <= 4
        assert answer_from_facts(task_facts(p)) == int(p.gold) >= 0
        assert not numbers_in(p.question)


def test_one_half_alone_rarely_guesses_the_gold():
    problems = make_problems("test", 2000, seed=0)
    for half in "AB":
        assert guess_rate(problems, half) < 0.05
        naive = sum(answer_from_facts(p.facts_a if half == "A" else p.facts_b) == int(p.gold) for p in problems)
        assert naive / len(problems) < 0.05
    p = problems[0]
    assert isinstance(best_guess_from_half(p.facts_a, "A"), int)


def test_read_fact_kinds():
    assert read_fact("Mia has 27 shells.") == (0, 27)
    assert read_fact("Ben gives Mia 4 shells.") == (1, 4)
    assert read_fact("Mia gives 4 shells to Ben.") == (-1, 4)
    with pytest.raises(ValueError):
        read_fact("Mia eats a cake.")


# ---- tokenizer and prompts ---------------------------------------------------------------------------------------

def _chat_views(n: int, seed: int = 0):
    chat = micro_chat_config()
    protocol = protocol_of(chat)
    rng = random.Random(seed)
    for p in make_problems("train", n, seed=seed):
        arm = rng.choice(["chat", "cut"])
        messages = script.scripted_chat(p.facts_a, p.facts_b, arm, rng)
        hands = ARMS[arm].hands(p.facts, protocol.seats)
        for turn in range(protocol.n_turns):
            seat = Seat(hands[protocol.speaker(turn)], p.question)
            yield view(seat, turn, messages[:turn], ARMS[arm], protocol, chat), messages[turn]
        yield solo_view(task_facts(p), p.question, chat), script.solo_answer(task_facts(p))


def test_no_unknown_token_in_the_micro_world(tok):
    assert 150 <= len(tok) <= 400
    for v, message in _chat_views(80):
        ids = tok(render_view(tok, v) + message + tok.eos_token, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids


def test_numbers_are_single_tokens_and_decode_readably(tok):
    for k in range(100):
        assert len(tok(str(k), add_special_tokens=False)["input_ids"]) == 1
    text = script.final_message(["27", "- 3"], ["+ 5"])
    ids = tok(text, add_special_tokens=False)["input_ids"]
    decoded = tok.decode(ids, skip_special_tokens=True)
    assert numbers_in(decoded) == numbers_in(text) == ["27", "3", "24", "5", "29", "29"]
    assert grade_answer(decoded, "29") and not grade_answer(decoded, "24")
    assert tok(decoded, add_special_tokens=False)["input_ids"] == ids  # decode -> encode is the identity


def test_chat_template_and_eos(tok, tmp_path):
    v = [{"role": "system", "content": "You are A."}, {"role": "user", "content": "Write to B."}]
    text = tok.apply_chat_template(v, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|assistant|>\n") and tok.eos_token == "<|end|>" and tok.pad_token_id is not None
    # A copy's earlier message sits in its later view exactly as it was generated: prompt ids + message ids.
    chat = micro_chat_config()
    protocol = protocol_of(chat)
    p = make_problems("train", 1, seed=0)[0]
    first = render_view(tok, view(Seat(p.facts_a, p.question), 0, [], ARMS["chat"], protocol, chat))
    later = render_view(tok, view(Seat(p.facts_a, p.question), 2, ["ok.", "hello A."], ARMS["chat"], protocol, chat))
    gen = tok(first, add_special_tokens=False)["input_ids"] + tok("ok.", add_special_tokens=False)["input_ids"]
    assert tok(later, add_special_tokens=False)["input_ids"][:len(gen) + 1] == gen + [tok.eos_token_id]
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.apply_chat_template(v, tokenize=False, add_generation_prompt=True) == text
    assert again("mine 27 - 3")["input_ids"] == tok("mine 27 - 3")["input_ids"]


def test_prompts_fill_like_the_defaults():
    from talktosolve.config import PromptConfig

    assert set(MICRO_PROMPTS) == {f for f in PromptConfig.__dataclass_fields__}
    chat = micro_chat_config()
    assert chat.max_message_tokens < chat.max_final_tokens <= 48


# ---- scripts and corpus ------------------------------------------------------------------------------------------

def test_scripted_finals_mark_whose_numbers_and_sum_right():
    for p in make_problems("train", 200, seed=1):
        full = script.final_message(script.terms(p.facts_a), script.terms(p.facts_b))
        assert grade_answer(full, p.gold)
        assert grade_answer(script.solo_answer(task_facts(p)), p.gold)
        assert full.startswith("mine ") and ", yours " in full
        partner_first = script.final_message(script.terms(p.facts_b), script.terms(p.facts_a))
        assert grade_answer(partner_first, p.gold) and partner_first.startswith("yours ")


def test_corpus_masks_only_assistant_messages(tok):
    corpus = Corpus(tok, seed=0)
    ids, mask = next(corpus.batches(16))
    assert ids.shape == mask.shape and mask.any(dim=1).all()
    for row, m in zip(ids, mask):
        trained = tok.decode(row[m].tolist())
        assert "Facts" not in trained and "Question" not in trained and trained.strip().endswith("<|end|>")


# ---- the base model's folder -------------------------------------------------------------------------------------

def test_tiny_pretrain_writes_a_loadable_folder(tmp_path):
    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM

    out = pretrain(tmp_path / "base", steps=2, progress=False,
                   model_overrides={"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                                    "num_attention_heads": 2, "num_key_value_heads": 2})
    model = AutoModelForCausalLM.from_pretrained(out)
    assert isinstance(model, Qwen2ForCausalLM)
    model2, tok2 = load_micro_base(out)
    ids = tok2.apply_chat_template([{"role": "user", "content": "Write to B."}], add_generation_prompt=True,
                                   return_dict=True, return_tensors="pt")["input_ids"]
    assert model2(input_ids=ids).logits.shape[-1] == len(tok2)


def test_micro_base_path_uses_the_shipped_checkpoint(tmp_path, monkeypatch):
    from talktosolve.micro import base

    if not base.is_complete(base.ASSETS, base.recipe_key()):
        pytest.skip("no shipped micro base checkpoint for this recipe (micro_base_path would pretrain one)")
    monkeypatch.setenv("TALKTOSOLVE_CACHE", str(tmp_path))
    path = base.micro_base_path(progress=False)
    assert path.parent == tmp_path and path.name == f"micro-base-{base.recipe_key()}"
    assert base.micro_base_path(progress=False) == path  # cached now
    model, tok = load_micro_base(path)
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    assert sum(f.stat().st_size for f in base.ASSETS.iterdir()) < 5_000_000


def test_micro_presets_use_the_prompts_the_base_was_pretrained_on():
    from talktosolve.config import make_config
    from talktosolve.micro.prompts import MICRO_CHAT

    for preset in ("micro", "tiny"):
        chat = make_config(preset).chat
        assert vars(chat.prompts) == MICRO_PROMPTS, f"presets/{preset}.json has stale micro prompts"
        assert (chat.max_message_tokens, chat.max_final_tokens) == (MICRO_CHAT["max_message_tokens"],
                                                                    MICRO_CHAT["max_final_tokens"])
