"""The micro world's role prompts and chat limits: short, plain wording the micro tokenizer reads word by word.

`MICRO_PROMPTS` has the fields of `talktosolve.config.PromptConfig` and keeps its placeholders (`{name}`,
`{partner}`, `{facts}`, `{question}`, `{text}`); the token limits are left out of the turn instructions, which
the micro model does not need to read. `MICRO_CHAT` holds the suggested `ChatConfig` limits: a micro message
(`my numbers are 27 - 3 .`) takes about 8 tokens, and the longest final (4 numbers listed, a 3-step sum, the
box) about 30.
"""

from __future__ import annotations

MICRO_PROMPTS: dict = {
    "system": "You are {name}. Your partner is {partner}.",
    "task": "Facts:\n{facts}\nQuestion: {question}",
    "fact_bullet": "- ",
    "partner": "{partner} says: {text}",
    "turn": "Write to {partner}.",
    "final": "Answer in \\boxed{{}}.",
}

MICRO_CHAT: dict = {"max_message_tokens": 16, "max_final_tokens": 36}


def micro_chat_config(**overrides):
    """A `ChatConfig` with the micro prompts and limits (fields in `overrides` win)."""
    from talktosolve.config import ChatConfig, PromptConfig

    values = {**MICRO_CHAT, **overrides}
    return ChatConfig(prompts=PromptConfig(**MICRO_PROMPTS), **values)
