"""What each seat sees before it speaks: its view of the chat so far, as chat-template messages.

The team's shape comes from a `protocol.Protocol` (seats, turn order, limits, final turns) and what each seat is
dealt and shown from an `arms.Arm`. A seat's *view* before it writes the message of turn t is a chat:

    system:    the role prompt (`{name}` is the seat, `{partner}` its partners: `B`, or `B and C`)
    user:      its own facts and the question [+ the partners' messages so far] + the turn instruction
    assistant: its own earlier messages
    user:      the partners' later messages + the turn instruction

A partner's message is shown through `prompts.partner` (`{partner}` is its writer there) with its text, or with
the literal `(no message)` where the arm does not show it. The instruction before a seat's own message is
`prompts.final` on a final turn and `prompts.turn` otherwise, with that turn's token limit. Consecutive user parts
are joined with a blank line, so every view alternates user/assistant as chat templates expect.

With the paper's protocol (A, B, A, B; finals 2 and 3) and arms `chat`/`cut`, this is exactly the seed's chat.

This module is pure (no torch, no tokenizer): views are lists of `{"role", "content"}` dicts, rendered to text by
the model's own chat template in `render_view`.
"""

from __future__ import annotations

from dataclasses import dataclass

from talktosolve.arms import NO_MESSAGE, Arm
from talktosolve.config import ChatConfig
from talktosolve.protocol import Protocol, partners_text


@dataclass
class Seat:
    """What one seat is given: its facts (its hand) and the shared question."""

    facts: list[str]
    question: str


def view(seat: Seat, turn: int, messages: list[str], arm: Arm, protocol: Protocol, chat: ChatConfig) -> list[dict]:
    """The chat that `protocol.speaker(turn)` sees before writing message `turn`, given the `messages` so far."""
    if not isinstance(arm, Arm):
        raise TypeError(f"view needs an arms.Arm, got {type(arm).__name__}")
    if len(messages) != turn:
        raise ValueError(f"turn {turn} needs exactly {turn} earlier messages, got {len(messages)}")
    p = chat.prompts
    name = protocol.speaker(turn)
    partners = partners_text(protocol.partners(name))
    facts = "\n".join(p.fact_bullet + f for f in seat.facts)
    parts: list[tuple[str, str]] = [
        ("system", p.system.format(name=name, partner=partners)),
        ("user", p.task.format(facts=facts, question=seat.question)),
    ]
    for i, text in enumerate(messages):
        writer = protocol.speaker(i)
        if writer == name:
            # The instruction it was given before each of its own earlier messages stays in its view.
            parts.append(("user", _instruction(i, protocol, chat, partners)))
            parts.append(("assistant", text))
        else:
            shown = text if arm.shows(name, writer, i) else NO_MESSAGE
            parts.append(("user", p.partner.format(partner=writer, text=shown)))
    parts.append(("user", _instruction(turn, protocol, chat, partners)))
    return _merge(parts)


def _instruction(turn: int, protocol: Protocol, chat: ChatConfig, partners: str) -> str:
    p = chat.prompts
    template = p.final if protocol.is_final(turn) else p.turn
    return template.format(partner=partners, max_tokens=protocol.max_tokens(turn))


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
