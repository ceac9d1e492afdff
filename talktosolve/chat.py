"""The chat protocol: who speaks when, and what each copy sees.

Two copies of one model, A and B, write four messages in the order A, B, A, B (turns 0-3). Turns 0 and 1 are
each copy's non-final message (at most `max_message_tokens`); turns 2 and 3 are A's and B's final messages (at
most `max_final_tokens`), which must box an answer. A copy's *view* before it speaks is a chat:

    system:    the role prompt (`{name}`, `{partner}` filled)
    user:      its own facts and the question [+ the partner's messages so far] + the turn instruction
    assistant: its own earlier messages
    user:      the partner's later messages + the turn instruction

In the `chat` arm a partner's message is shown as `prompts.partner` with its text; in the `cut` arm the same
template shows the literal `(no message)` instead. Nothing else differs between the arms. Consecutive user
parts are joined with a blank line, so every view alternates user/assistant as chat templates expect.

This module is pure (no torch, no tokenizer): views are lists of `{"role", "content"}` dicts, rendered to text by
the model's own chat template in `render_view`.
"""

from __future__ import annotations

from dataclasses import dataclass

from talktosolve.config import ChatConfig

SPEAKERS = ("A", "B", "A", "B")
"""Who writes message 0, 1, 2, 3."""
FINAL_TURN = {"A": 2, "B": 3}
"""Index of each copy's final message."""
NO_MESSAGE = "(no message)"
"""What a copy sees in the `cut` arm wherever its partner's words would be."""


def partner_of(name: str) -> str:
    return "B" if name == "A" else "A"


def is_final(turn: int) -> bool:
    return turn >= 2


def max_tokens(turn: int, chat: ChatConfig) -> int:
    return chat.max_final_tokens if is_final(turn) else chat.max_message_tokens


@dataclass
class Seat:
    """What one copy is given: its facts and the shared question."""

    facts: list[str]
    question: str


def view(seat: Seat, turn: int, messages: list[str], arm: str, chat: ChatConfig) -> list[dict]:
    """The chat copy `SPEAKERS[turn]` sees before writing message `turn`, given the `messages` written so far."""
    if arm not in ("chat", "cut"):
        raise ValueError(f"arm must be `chat` or `cut`, got `{arm}`")
    if len(messages) != turn:
        raise ValueError(f"turn {turn} needs exactly {turn} earlier messages, got {len(messages)}")
    p = chat.prompts
    name = SPEAKERS[turn]
    partner = partner_of(name)
    facts = "\n".join(p.fact_bullet + f for f in seat.facts)
    parts: list[tuple[str, str]] = [
        ("system", p.system.format(name=name, partner=partner)),
        ("user", p.task.format(facts=facts, question=seat.question)),
    ]
    for i, text in enumerate(messages):
        if SPEAKERS[i] == name:
            # The instruction it was given before each of its own earlier messages stays in its view.
            parts.append(("user", _instruction(i, chat, partner)))
            parts.append(("assistant", text))
        else:
            shown = text if arm == "chat" else NO_MESSAGE
            parts.append(("user", p.partner.format(partner=partner, text=shown)))
    parts.append(("user", _instruction(turn, chat, partner)))
    return _merge(parts)


def _instruction(turn: int, chat: ChatConfig, partner: str) -> str:
    p = chat.prompts
    if is_final(turn):
        return p.final.format(partner=partner, max_tokens=chat.max_final_tokens)
    return p.turn.format(partner=partner, max_tokens=chat.max_message_tokens)


def _merge(parts: list[tuple[str, str]]) -> list[dict]:
    out: list[dict] = []
    for role, content in parts:
        if out and out[-1]["role"] == role and role == "user":
            out[-1]["content"] += "\n\n" + content
        else:
            out.append({"role": role, "content": content})
    return out


def render_view(tokenizer, messages: list[dict]) -> str:
    """The view as the prompt text the model continues (its chat template, with the generation prompt)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "The tokenizer has no chat template; talktosolve needs a chat model (for example an -Instruct model)."
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
