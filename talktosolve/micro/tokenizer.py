"""The micro world's tokenizer, built here from word lists (no download): one token per word.

* Model: the `tokenizers` WordLevel model. Pre-tokenizer: split on whitespace, then every punctuation character
  on its own (`apples.` -> `apples`, `.`). Every integer 0..`task.MAX_NUMBER` is one token, and so is every
  word of the task's templates, names and objects, of the micro prompts and of the scripted messages: the micro
  world never produces the unknown token.
* `\\boxed{` is one (ordinary, not special) token, so a final answer decodes as `\\boxed{ 29 }`, which the grader
  reads as 29. Decoding joins tokens with single spaces: numbers stay separate and readable.
* Special tokens: `<|system|>`, `<|user|>`, `<|assistant|>` open a chat part, `<|end|>` closes one and is the
  `eos_token` (generation stops there), `<|pad|>` pads and `<|unk|>` is the unknown word.
* Chat template: each part is `<|role|>` + content + `<|end|>`; the generation prompt is `<|assistant|>`. So a
  copy's earlier message in a view is tokenized exactly as it was generated (prompt ids + completion ids).
"""

from __future__ import annotations

import re

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from talktosolve.arms import NO_MESSAGE
from talktosolve.micro import prompts, script, task

PAD, UNK, SYSTEM, USER, ASSISTANT, END = "<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIALS = (PAD, UNK, SYSTEM, USER, ASSISTANT, END)
BOXED = "\\boxed{"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def _pre_tokenizer():
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated")])


def _source_texts(extra=()) -> list[str]:
    """Every text whose words must be in the vocabulary (placeholders removed), `extra` texts included."""
    texts = [*task.START, *task.GAIN, *task.LOSS, *task.QUESTION, *script.script_texts(), NO_MESSAGE,
             " ".join(task.NAMES), " ".join(task.OBJECTS), "A B", *map(str, prompts.MICRO_PROMPTS.values()),
             *extra]
    return [re.sub(r"\{\w*\}", " ", t.replace("{{}}", "{}").replace(BOXED, " ")) for t in texts]


def vocabulary(extra=()) -> list[str]:
    """The tokens, in id order: specials, `\\boxed{`, the integers, then the words and marks (sorted); the words
    of the `extra` texts join the micro world's own (a base for a larger world names its extra words there)."""
    split = _pre_tokenizer()
    words = set()
    for text in _source_texts(extra):
        words.update(piece for piece, _ in split.pre_tokenize_str(text))
    numbers = [str(i) for i in range(task.MAX_NUMBER + 1)]
    words -= set(numbers)
    return [*SPECIALS, BOXED, *numbers, *sorted(words)]


def build_tokenizer(extra=()) -> PreTrainedTokenizerFast:
    """The micro tokenizer (deterministic: the same vocabulary and ids every time), with the words of the `extra`
    texts added (`vocabulary`)."""
    vocab = {tok: i for i, tok in enumerate(vocabulary(extra))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = _pre_tokenizer()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    core.add_tokens([AddedToken(BOXED, special=False, normalized=False, single_word=False)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, eos_token=END, bos_token=None,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT], clean_up_tokenization_spaces=False,
        model_max_length=1024, padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def load_tokenizer(path) -> PreTrainedTokenizerFast:
    """The micro tokenizer saved in a model folder.

    Load it with this (or `PreTrainedTokenizerFast.from_pretrained`), not `AutoTokenizer`: transformers 5 maps
    every folder whose config says `qwen2` to `Qwen2Tokenizer`, which rebuilds a byte-level BPE from the vocabulary
    and drops this tokenizer's word splitting (numbers then split into digits and decode without spaces).
    """
    return PreTrainedTokenizerFast.from_pretrained(str(path))
