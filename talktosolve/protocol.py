"""The turn protocol of a team: its seats, who speaks at each turn, each turn's token limit, each seat's final turn.

The paper's chat is one value of it: seats `A, B`, order `A, B, A, B`, limits 160, 160, 384, 384, finals 2 and 3.
Everything that once counted two copies or four messages asks a `Protocol` instead: the views (`chat.view`), the
sampler's turn loop (`rollout.play_chats`), the grader (`reward.score_chats`), the talk metrics (`talk`), the
learner's token layout and the evaluation counts.

A seat's *final turn* is the message whose boxed answer is graded (its last turn unless the config says otherwise);
a turn is *final* when it is some seat's final turn, and then it gets the final instruction and the final limit.
A seat may speak after its final turn (a protocol may let it answer early and keep talking); nothing it says then
is graded, but its partners read it.

Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


class ProtocolError(ValueError):
    """A protocol that cannot be played; the message names the setting to change."""


@dataclass(frozen=True)
class Protocol:
    seats: tuple[str, ...]
    """Seat names, in dealing order: seat k is dealt facts k, k+N, k+2N, ... (N seats)."""
    order: tuple[str, ...]
    """Who writes each message, one seat name per turn."""
    limits: tuple[int, ...]
    """Token limit of each turn's message."""
    finals: tuple[int, ...]
    """The turn whose answer is graded, one per seat (aligned with `seats`)."""

    def __post_init__(self):
        seats, order = self.seats, self.order
        if len(seats) < 2:
            raise ProtocolError(f"chat.seats is {list(seats)}: a team needs at least 2 seats.")
        if len(set(seats)) != len(seats) or not all(isinstance(s, str) and s for s in seats):
            raise ProtocolError(f"chat.seats is {list(seats)}: seat names must be distinct non-empty strings.")
        strangers = sorted(set(order) - set(seats))
        if strangers:
            raise ProtocolError(f"chat.order names {strangers}, which are not in chat.seats {list(seats)}.")
        silent = [s for s in seats if s not in order]
        if silent:
            raise ProtocolError(f"chat.order never gives {silent} a turn; every seat must write its final answer.")
        if len(self.limits) != len(order):
            raise ProtocolError(f"chat.turn_tokens has {len(self.limits)} limits for the {len(order)} turns of "
                                "chat.order; give one per turn, or none (the final/non-final limits).")
        if any(not isinstance(n, int) or n < 1 for n in self.limits):
            raise ProtocolError(f"chat.turn_tokens is {list(self.limits)}: every limit must be at least 1.")
        if len(self.finals) != len(seats):
            raise ProtocolError(f"chat.final_turns has {len(self.finals)} turns for {len(seats)} seats; give one "
                                "per seat (in chat.seats order), or none (each seat's last turn).")
        for seat, turn in zip(seats, self.finals):
            if not (0 <= turn < len(order)) or order[turn] != seat:
                raise ProtocolError(f"chat.final_turns gives seat {seat} turn {turn}, which is not one of its turns "
                                    f"{[t for t, s in enumerate(order) if s == seat]}.")

    @classmethod
    def build(cls, seats, order, final_tokens: int, message_tokens: int, turn_tokens=(), final_turns=()) -> Protocol:
        """A protocol from config values: empty `final_turns` means each seat's last turn; empty `turn_tokens`
        means `final_tokens` on final turns and `message_tokens` on the others."""
        seats, order = tuple(seats), tuple(order)
        if not final_turns:
            final_turns = tuple(max((t for t, s in enumerate(order) if s == seat), default=-1) for seat in seats)
        if not turn_tokens:
            turn_tokens = tuple(final_tokens if t in final_turns else message_tokens for t in range(len(order)))
        return cls(seats, order, tuple(turn_tokens), tuple(final_turns))

    @property
    def n_turns(self) -> int:
        return len(self.order)

    def speaker(self, turn: int) -> str:
        return self.order[turn]

    def final_turn(self, seat: str) -> int:
        return self.finals[self.seats.index(seat)]

    def is_final(self, turn: int) -> bool:
        return turn in self.finals

    def max_tokens(self, turn: int) -> int:
        return self.limits[turn]

    def last_turn(self, seat: str) -> int:
        """The seat's last message: after it the seat never reads again, so its KV cache can go."""
        return max(t for t, s in enumerate(self.order) if s == seat)

    def partners(self, seat: str) -> tuple[str, ...]:
        return tuple(s for s in self.seats if s != seat)

    def turns_of(self, seat: str) -> list[int]:
        return [t for t, s in enumerate(self.order) if s == seat]

    def heard_before_final(self, reader: str) -> list[int]:
        """Turns written by the reader's partners before the reader's final turn."""
        return [t for t in range(self.final_turn(reader)) if self.order[t] != reader]

    def said_before(self, writer: str, turn: int) -> list[int]:
        """The writer's own turns before `turn`."""
        return [t for t in range(turn) if self.order[t] == writer]

    def to_json(self) -> dict:
        return {"seats": list(self.seats), "order": list(self.order), "limits": list(self.limits),
                "finals": list(self.finals)}


def protocol_of(chat) -> Protocol:
    """The protocol a `ChatConfig` describes."""
    return Protocol.build(chat.seats, chat.order, chat.max_final_tokens, chat.max_message_tokens,
                          chat.turn_tokens, chat.final_turns)


def partners_text(names) -> str:
    """`B`, `B and C`, `B, C and D`: how the prompts name a seat's partners together."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def swapped_roles(seats) -> dict[str, str]:
    """The role swap of per-role weights: seat k plays the weights trained in seat k + 1 (the last seat, the
    first's); with two seats, A plays B's and B plays A's."""
    seats = list(seats)
    return {seat: seats[(k + 1) % len(seats)] for k, seat in enumerate(seats)}
