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

    def __init__(self, vocab: int, stop: int, seed: int = 0):
        self.stop_ids, self.vocab, self.rng = [stop], vocab, random.Random(seed)

    def generate(self, prompts, max_new_tokens, generator=None, *, session=None):
        out = []
        for i in range(len(prompts)):
            n = max_new_tokens if i % 3 else self.rng.randint(1, max_new_tokens - 1)
            row = [self.rng.randrange(self.vocab) for _ in range(n)]
            out.append(row if i % 3 else row + self.stop_ids)
        return out


@pytest.fixture(scope="module")
def qwen_chats(qwen_dir):
    from transformers import AutoTokenizer

    from talktosolve.micro.task import make_problems

    tok = AutoTokenizer.from_pretrained(qwen_dir)
    engine = RandomEngine(150000, tok.convert_tokens_to_ids("<|im_end|>"))
    cfg = make_config("paper", {"chat": {"max_message_tokens": 24, "max_final_tokens": 12}})
    chats = play_chats(make_problems("test", 6, seed=0), "chat", (Player(engine, tok), Player(engine, tok)),
                       cfg.chat, chats_per_problem=2, seed=0)
    return tok, chats


def test_every_prompt_reads_as_the_view_it_records(qwen_chats):
    """Up to the tokenizer's own normalisation (Qwen's NFC), which encoding any text applies."""
    tok, chats = qwen_chats
    for c in chats:
        for t in c.turns:
            assert nfc(tok.decode(t.prompt_ids)) == nfc(render_view(tok, t.view))


def test_a_later_view_continues_from_the_sampled_ids(qwen_chats):
    """Random byte-level tokens rarely survive decode + encode, yet a copy's second view holds its first view and
    its first message's own ids (the message is shown exactly as they decode), so the learner reads that message
    inside the later view's row."""
    tok, chats = qwen_chats
    for c in chats:
        for later in (2, 3):
            first = c.turns[later - 2]
            body = first.completion_ids[:-1] if not first.truncated else first.completion_ids
            assert c.turns[later].prompt_ids[:len(first.prompt_ids) + len(body)] == first.prompt_ids + body
    rows = to_sequences([Sample(t.prompt_ids, t.completion_ids, 0.0, i) for i, c in enumerate(chats)
                         for t in c.turns])
    assert len(rows) == 2 * len(chats)


def test_speakers_alternate(qwen_chats):
    _, chats = qwen_chats
    assert all([t.speaker for t in c.turns] == list(SPEAKERS) for c in chats)
