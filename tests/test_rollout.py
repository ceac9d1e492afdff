"""Token in, token out: a copy's later view continues from the ids it sampled, and reads as the text it shows."""

import random
import unicodedata

import pytest

from talktosolve.chat import SPEAKERS, render_view
from talktosolve.config import make_config
from talktosolve.grpo import Sample, to_sequences
from talktosolve.rollout import Player, play_chats


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


@pytest.fixture(scope="module", params=["byte-level BPE", "Qwen2.5"])
def random_chats(request):
    from talktosolve.micro.task import make_problems

    if request.param == "Qwen2.5":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(request.getfixturevalue("qwen_dir"))
        ordinary = range(150000)
    else:
        tok, n = byte_bpe()
        ordinary = range(2, n)  # after the two special tokens
    engine = RandomEngine(ordinary, tok.convert_tokens_to_ids("<|im_end|>"))
    cfg = make_config("paper", {"chat": {"max_message_tokens": 24, "max_final_tokens": 12}})
    chats = play_chats(make_problems("test", 6, seed=0), "chat", (Player(engine, tok), Player(engine, tok)),
                       cfg.chat, chats_per_problem=2, seed=0)
    return tok, chats


def test_every_prompt_reads_as_the_view_it_records(random_chats):
    """Up to the tokenizer's own normalisation (Qwen's NFC), which encoding any text applies."""
    tok, chats = random_chats
    for c in chats:
        for t in c.turns:
            assert nfc(tok.decode(t.prompt_ids)) == nfc(render_view(tok, t.view))


def test_a_later_view_continues_from_the_sampled_ids(random_chats):
    """Random byte-level tokens rarely survive decode + encode, yet a copy's second view holds its first view and
    its first message's own ids (the message is shown exactly as they decode), so the learner reads that message
    inside the later view's row."""
    tok, chats = random_chats
    for c in chats:
        for later in (2, 3):
            first = c.turns[later - 2]
            body = first.completion_ids[:-1] if not first.truncated else first.completion_ids
            assert c.turns[later].prompt_ids[:len(first.prompt_ids) + len(body)] == first.prompt_ids + body
    rows = to_sequences([Sample(t.prompt_ids, t.completion_ids, 0.0, i) for i, c in enumerate(chats)
                         for t in c.turns])
    assert len(rows) == 2 * len(chats)


def test_speakers_alternate(random_chats):
    _, chats = random_chats
    assert all([t.speaker for t in c.turns] == list(SPEAKERS) for c in chats)


def test_a_message_whose_ids_do_not_read_as_its_text_is_encoded_whole():
    """A special token inside a message is not in its shown text: its copy's next view is encoded from text."""
    from talktosolve.micro.task import make_problems

    tok, n = byte_bpe()
    engine = RandomEngine(range(0, n), tok.convert_tokens_to_ids("<|im_end|>"), seed=3)  # <|im_start|> may appear
    cfg = make_config("paper", {"chat": {"max_message_tokens": 40, "max_final_tokens": 8}})
    chats = play_chats(make_problems("test", 8, seed=1), "chat", (Player(engine, tok), Player(engine, tok)),
                       cfg.chat, chats_per_problem=2, seed=0)
    whole = 0
    for c in chats:
        for later in (2, 3):
            first, view_ids = c.turns[later - 2], c.turns[later].prompt_ids
            if tok.convert_tokens_to_ids("<|im_start|>") in first.completion_ids:
                whole += 1
                assert view_ids == tok(render_view(tok, c.turns[later].view), add_special_tokens=False)["input_ids"]
    assert whole > 0
