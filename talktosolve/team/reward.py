"""The team's reward: every seat's final answer graded against the gold, and their mean.

    correct_s = MathEqual(last \\boxed{} of seat s's final message, gold)      (`grading.grade_many`)
    reward    = (1 / N) * sum_s correct_s                                       N seats

Pure of torch; the training loop and evaluation call it on the sampler's chats (`rollout.play_chats`).
"""

from __future__ import annotations

from talktosolve.protocol import Protocol
from talktosolve.task.grading import extract_answer, grade_many


def score_chats(chats: list, protocol: Protocol) -> None:
    """Grade every seat's final answer of every chat (one batched call); the team reward is their mean."""
    grade_finals(chats, protocol, protocol.seats)
    for c in chats:
        c.reward = sum(c.correct.values()) / len(protocol.seats)


def grade_finals(chats: list, protocol: Protocol, seats) -> None:
    """Grade the final answers of `seats` only, in one batched call (a replay stops once its listeners have
    answered, so other seats' finals may not exist); sets `answers` and `correct` for those seats."""
    finals, golds = [], []
    for c in chats:
        for seat in seats:
            finals.append(c.turns[protocol.final_turn(seat)].text)
            golds.append(c.gold)
    results = iter(grade_many(finals, golds))
    for c in chats:
        for seat in seats:
            c.answers[seat] = extract_answer(c.turns[protocol.final_turn(seat)].text)
            c.correct[seat] = bool(next(results))
