"""Who plays whom in training: which chats of a step seat a frozen partner (partner-mixture training).

With `train.partners` = p, a share p of each step's problems has one seat played by a frozen partner (the
untrained base) in all of its chats; the learner plays the other seats there, and every seat of the other
problems (self-play). Which problems and which seat is a function of (seed, step) alone, so a resumed run draws
the same. A whole problem's group gets the partner, never some of its chats: the group then shares its team,
and centring its rewards (`grpo.group_advantages`) compares chats that differ only in what was said.

Only the learner's seats are trained: the frozen seat's messages are not samples and do not count in the
learner's token normaliser (`grpo`).

Pure Python, no torch.
"""

from __future__ import annotations

import random


def partner_seats(seed: int, step: int, n_problems: int, share: float, seats) -> list[str | None]:
    """One entry per problem of the step: the seat its frozen partner plays, or None (self-play).

    round(share * n_problems) problems get a partner, drawn without replacement; each one's seat is drawn
    uniformly from `seats`. A share of 0 draws nothing."""
    k = round(share * n_problems)
    out: list[str | None] = [None] * n_problems
    if k == 0:
        return out
    rng = random.Random(f"partners-{seed}-{step}")
    for i in sorted(rng.sample(range(n_problems), k)):
        out[i] = rng.choice(list(seats))
    return out


def lineups(frozen: list[str | None], chats_per_problem: int, seats, learner, partner) -> list[dict]:
    """Each chat's `{seat: player}` (chats grouped by problem): `partner` in the problem's frozen seat, the
    `learner` everywhere else (each one player, or `{seat: player}`: per-role weights, a per-role partner)."""
    mine = learner if isinstance(learner, dict) else {seat: learner for seat in seats}
    theirs = partner if isinstance(partner, dict) else {seat: partner for seat in seats}
    return [{seat: theirs[seat] if seat == f else mine[seat] for seat in seats}
            for f in frozen for _ in range(chats_per_problem)]
