"""Informative groups (`train.dynamic_sampling`): which problems a step draws after its first batch, and which
of the groups it drew it learns from.

A group (the chats of one problem in one step) is informative when its chats' rewards differ: only then is
some advantage non-zero. A step draws its first batch as without the option (`step.step_problems`); while
fewer than `problems_per_step` of its groups are informative and fewer than `max_draws` batches were drawn, it
draws another batch of `problems_per_step` problems not yet drawn this step, from a stream seeded by
(seed, step, draw), so a resumed run draws the same. With `train.draw_batches` several such batches are
played in one sampling pass; each holds the problems it would hold drawn alone. It then learns from the first
`problems_per_step` informative groups in the order drawn; at the cap with fewer, the rest of the batch is
filled with the first groups that scored alike (they carry no advantage, so the update is that of the
informative ones, over a batch of the usual size).

Pure Python, no torch.
"""

from __future__ import annotations

import random


def informative(rewards: list[float]) -> bool:
    """Whether a group's rewards differ (some chat's advantage is then non-zero)."""
    return max(rewards) != min(rewards)


def more_problems(problems: list, seed: int, step: int, draw: int, n: int, drawn: set) -> list:
    """Draw `draw` (1, 2, ...) of step `step`: up to `n` problems whose ids are not in `drawn`, from a stream
    seeded by (seed, step, draw); fewer when the set runs short."""
    left = [p for p in problems if p.id not in drawn]
    return random.Random(f"{seed}-{step}-draw-{draw}").sample(left, min(n, len(left)))


def enough(groups: list[list[float]], n: int) -> bool:
    """Whether `n` of the groups drawn so far (each its chats' rewards) are informative."""
    return sum(informative(g) for g in groups) >= n


def chosen(groups: list[list[float]], n: int) -> list[int]:
    """The indices (in the order drawn) of the `n` groups a step learns from: the first `n` informative ones,
    topped up with the first groups that scored alike when fewer are informative."""
    rich = [i for i, g in enumerate(groups) if informative(g)][:n]
    flat = [i for i, g in enumerate(groups) if not informative(g)][:n - len(rich)]
    return sorted(rich + flat)
