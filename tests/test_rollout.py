"""Playing chats: a seat's later view continues from the ids it sampled and reads as the text it shows (token in,
token out); turns follow the protocol; hands follow the arm; chats come back ungraded."""

import random
import unicodedata

import pytest

from talktosolve.arms import ARMS, NO_MESSAGE
from talktosolve.config import make_config
from talktosolve.learning.grpo import Sample, to_sequences
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.sampling.rollout import Player, play_chats
from talktosolve.team.chat import render_view
from talktosolve.team.reward import score_chats

THREE = Protocol(("A", "B", "C"), ("A", "B", "C", "A", "B", "C"), (24, 20, 16, 12, 10, 8), (3, 4, 5))
"""Three seats, each turn its own token limit."""


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


class RandomEngine:
    """Writes random ordinary tokens (the benchmark's random-weight model does the same); some messages stop."""

    def __init__(self, ordinary: range, stop: int, seed: int = 0):
        self.stop_ids, self.ordinary, self.rng = [stop], ordinary, random.Random(seed)

    def generate(self, prompts, max_new_tokens, generator=None, *, session=None):
        out = []
        for i in range(len(prompts)):
            n = max_new_tokens if i % 3 else self.rng.randint(1, max_new_tokens - 1)
            row = [self.rng.choice(self.ordinary) for _ in range(n)]
            out.append(row if i % 3 else row + self.stop_ids)
        return out


def byte_bpe():
    """A tiny byte-level BPE with a ChatML template, trained here: random ids of it rarely survive decode +
    encode, as with Qwen's tokenizer, so the tests below need nothing from outside the project."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["You are copy A of a two-person team solving a math word problem together.",
              "Message from B: 12 apples and 7 pears. Write your message to A (at most 160 tokens).",
              "This is your last message. Give your final answer, with the number in \\boxed{}."] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|im_end|>")
    out.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return out, len(out)


def paper_protocol(cfg):
    return protocol_of(cfg.chat)


@pytest.fixture(scope="module", params=[("byte-level BPE", "paper"), ("Qwen2.5", "paper"),
                                        ("byte-level BPE", "three seats")], ids=lambda p: f"{p[0]}, {p[1]}")
def random_chats(request):
    from talktosolve.micro.task import make_problems

    tokenizer, team = request.param
    if tokenizer == "Qwen2.5":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(request.getfixturevalue("qwen_dir"))
        ordinary = range(150000)
    else:
        tok, n = byte_bpe()
        ordinary = range(2, n)  # after the two special tokens
    engine = RandomEngine(ordinary, tok.convert_tokens_to_ids("<|im_end|>"))
    cfg = make_config("paper", {"chat": {"max_message_tokens": 24, "max_final_tokens": 12}})
    protocol = paper_protocol(cfg) if team == "paper" else THREE
    player = Player(engine, tok)
    chats = play_chats(make_problems("test", 6, seed=0), ARMS["chat"], {seat: player for seat in protocol.seats},
                       protocol, cfg.chat, chats_per_problem=2, seed=0)
    return tok, protocol, chats


def test_every_prompt_reads_as_the_view_it_records(random_chats):
    """Up to the tokenizer's own normalisation (Qwen's NFC), which encoding any text applies."""
    tok, _, chats = random_chats
    for c in chats:
        for t in c.turns:
            assert nfc(tok.decode(t.prompt_ids)) == nfc(render_view(tok, t.view))


def test_a_later_view_continues_from_the_sampled_ids(random_chats):
    """Random byte-level tokens rarely survive decode + encode, yet a seat's later view holds its earlier view and
    that view's message's own ids (the message is shown exactly as they decode), so the learner reads that
    message inside the later view's row."""
    tok, protocol, chats = random_chats
    later_turns = [t for t in range(protocol.n_turns) if protocol.said_before(protocol.speaker(t), t)]
    assert later_turns
    for c in chats:
        for later in later_turns:
            first = c.turns[protocol.said_before(protocol.speaker(later), later)[-1]]
            body = first.completion_ids[:-1] if not first.truncated else first.completion_ids
            assert c.turns[later].prompt_ids[:len(first.prompt_ids) + len(body)] == first.prompt_ids + body
    rows = to_sequences([Sample(t.prompt_ids, t.completion_ids, 0.0, i) for i, c in enumerate(chats)
                         for t in c.turns])
    assert len(rows) == len(protocol.seats) * len(chats)  # each seat's messages of a chat share one row


def test_speakers_follow_the_protocol_order(random_chats):
    _, protocol, chats = random_chats
    assert all([t.speaker for t in c.turns] == list(protocol.order) for c in chats)


def test_each_turn_is_sampled_to_its_own_token_limit(random_chats):
    """The engine is asked for each turn's limit (RandomEngine writes exactly that many tokens in 2 rows of 3)."""
    _, protocol, chats = random_chats
    for turn in range(protocol.n_turns):
        lengths = [len(c.turns[turn].completion_ids) for c in chats]
        assert max(lengths) == protocol.max_tokens(turn) and all(n >= 1 for n in lengths)


def test_chats_record_each_arms_deal_and_come_back_ungraded():
    """One arm per problem: the hands are what each arm deals (split round-robin, or every fact to every seat),
    the transcript names the arm, a cut seat sees `(no message)` for every partner's message; nothing is graded
    until `reward.score_chats`, which grades every seat and averages them into the team reward."""
    from talktosolve.micro.task import make_problems

    tok, n = byte_bpe()
    player = Player(RandomEngine(range(2, n), tok.convert_tokens_to_ids("<|im_end|>")), tok)
    cfg = make_config("paper", {"chat": {"max_message_tokens": 8, "max_final_tokens": 8}})
    problems = make_problems("test", 3, seed=2)
    arms = [ARMS["chat"], ARMS["cut"], ARMS["full"]]
    chats = play_chats(problems, arms, {seat: player for seat in THREE.seats}, THREE, cfg.chat,
                       chats_per_problem=2, seed=1)
    assert [(c.problem_id, c.index, c.arm.name) for c in chats] == [
        (p.id, k, a.name) for p, a in zip(problems, arms) for k in range(2)]
    for c, p in zip(chats, [p for p in problems for _ in range(2)]):
        t = c.transcript()
        assert t["facts"] == p.facts and t["arm"] == c.arm.name and t["hidden"] == []
        assert "facts_a" not in t and "facts_b" not in t
        if c.arm.deal == "all":
            assert t["hands"] == {seat: p.facts for seat in THREE.seats}
        else:
            assert t["hands"] == {seat: p.facts[k::3] for k, seat in enumerate(THREE.seats)}
        for turn, m in enumerate(t["messages"]):
            partners = [u for u in range(turn) if THREE.speaker(u) != m["speaker"]]
            seen = [part["content"] for part in m["view"] if part["role"] == "user"]
            shown = "".join(seen).count(NO_MESSAGE)
            assert shown == (len(partners) if c.arm.name == "cut" else 0)
        assert (c.answers, c.correct, c.reward) == ({}, {}, 0.0)
        assert t["answers"] == {} and t["correct"] == {}
    for c in chats:  # pretend seat B of every second chat boxed the gold
        if c.index == 1:
            c.turns[THREE.final_turn("B")].text = f"so \\boxed{{{c.gold}}}"
    score_chats(chats, THREE)
    for c in chats:
        assert set(c.correct) == set(c.answers) == set(THREE.seats)
        assert c.correct == {"A": False, "B": c.index == 1, "C": False}
        assert c.reward == pytest.approx(sum(c.correct.values()) / 3)
        if c.index == 1:
            assert c.answers["B"] == c.gold


def test_every_seat_needs_a_player_and_every_problem_one_arm():
    from talktosolve.micro.task import make_problems

    tok, n = byte_bpe()
    player = Player(RandomEngine(range(2, n), tok.convert_tokens_to_ids("<|im_end|>")), tok)
    cfg = make_config("paper")
    problems = make_problems("test", 2, seed=0)
    with pytest.raises(ValueError, match=r"no player for seats \['C'\]"):
        play_chats(problems, ARMS["chat"], {"A": player, "B": player}, THREE, cfg.chat, chats_per_problem=1, seed=0)
    with pytest.raises(ValueError, match="1 arms for 2 problems"):
        play_chats(problems, [ARMS["chat"]], {"A": player, "B": player}, paper_protocol(cfg), cfg.chat,
                   chats_per_problem=1, seed=0)


def test_a_message_whose_ids_do_not_read_as_its_text_is_encoded_whole():
    """A special token inside a message is not in its shown text: its copy's next view is encoded from text."""
    from talktosolve.micro.task import make_problems

    tok, n = byte_bpe()
    engine = RandomEngine(range(0, n), tok.convert_tokens_to_ids("<|im_end|>"), seed=3)  # <|im_start|> may appear
    cfg = make_config("paper", {"chat": {"max_message_tokens": 40, "max_final_tokens": 8}})
    protocol = protocol_of(cfg.chat)
    chats = play_chats(make_problems("test", 8, seed=1), ARMS["chat"], {"A": Player(engine, tok),
                                                                         "B": Player(engine, tok)},
                       protocol, cfg.chat, chats_per_problem=2, seed=0)
    whole = 0
    for c in chats:
        for later in (2, 3):
            first, view_ids = c.turns[protocol.said_before(protocol.speaker(later), later)[-1]], c.turns[later].prompt_ids
            if tok.convert_tokens_to_ids("<|im_start|>") in first.completion_ids:
                whole += 1
                assert view_ids == tok(render_view(tok, c.turns[later].view), add_special_tokens=False)["input_ids"]
    assert whole > 0


def _greedy_player(model, tok):
    from talktosolve.sampling.fast_engine import StaticEngine

    return Player(StaticEngine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, greedy=True), tok)


@pytest.mark.slow
def test_a_mixed_batch_samples_each_row_as_an_engine_holding_only_its_rows_policy(tiny_model_dir):
    """Chats of one batch with different players per seat (a trained copy, and the untrained base as a frozen
    partner in either seat): each chat's greedy tokens equal those of the same chat played by a batch whose every
    chat has its lineup, so the base rows see nothing of the trained weights and vice versa."""
    import torch
    from transformers import AutoModelForCausalLM

    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import load_tokenizer

    cfg = make_config("micro", {"model": {"name_or_path": str(tiny_model_dir)},
                                "chat": {"max_message_tokens": 6, "max_final_tokens": 8}})
    tok = load_tokenizer(cfg.model)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    trained = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        torch.manual_seed(1)
        for p in trained.parameters():
            p.add_(0.5 * torch.randn_like(p))
    learner, frozen = _greedy_player(trained, tok), _greedy_player(base, tok)
    lineups = [{"A": learner, "B": learner}, {"A": learner, "B": frozen}, {"A": frozen, "B": learner},
               {"A": frozen, "B": frozen}]
    protocol = protocol_of(cfg.chat)
    problems = make_problems("test", 3, seed=4)
    mixed = play_chats(problems, ARMS["chat"], [lineups[i % 4] for i in range(6)], protocol, cfg.chat,
                       chats_per_problem=2, seed=0)
    alone = {k: play_chats(problems, ARMS["chat"], lineup, protocol, cfg.chat, chats_per_problem=2, seed=0)
             for k, lineup in enumerate(lineups)}
    differ = 0
    for i, c in enumerate(mixed):
        expected = alone[i % 4][i]
        assert [t.completion_ids for t in c.turns] == [t.completion_ids for t in expected.turns]
        differ += [t.completion_ids for t in c.turns] != [t.completion_ids for t in alone[(i + 1) % 4][i].turns]
    assert differ > 0  # the policies write different messages, so the match above is not vacuous
