"""Who plays whom, in figures: the cross-seed matrix of a line of trained runs, and a variant against its arm.

The cross-seed matrix of runs r_1..r_S (one line: an arm's seeds, or the variant's): cell (i, j) is the
accuracy of run i in the first seat with run j in every other seat, with its 95% interval over problems; the
diagonal is each trained team (zero-shot coordination: off the diagonal, two protocols learned apart meet).
`self_minus_cross` is the diagonal minus the off-diagonal mean: per problem, each run's own team against the
mean of its S - 1 meetings, through `stats.paired_delta_report` (the problem+seed interval).

A variant (an arm trained another way) is held against its arm's runs, each figure paired over the same
held-out problems with the same interval: the trained teams, cross-play with the untrained base in the other
seats, the other side (the base in the first seat), and both sides together (their per-problem mean).

Pure: numpy and `talktosolve.stats`, no torch.
"""

from __future__ import annotations

import numpy as np

from talktosolve.stats import mean_ci, paired_delta_report

SIDES = ("team", "cross", "cross_others", "both_sides")
"""The figures a variant is compared on (`against_arm`)."""


def cross_seed_matrix(runs: list[str], scores) -> dict:
    """`scores(i, j)`: per-problem scores of run i in the first seat with run j in the others (i == j: the
    trained team). At least 2 runs."""
    if len(runs) < 2:
        raise ValueError("a cross-seed matrix needs at least 2 runs")
    cells = [[mean_ci(np.array([scores(a, b)])) for b in runs] for a in runs]
    own = np.array([scores(a, a) for a in runs])  # [S, P]
    met = np.array([np.mean([scores(a, b) for b in runs if b != a], axis=0) for a in runs])  # [S, P]
    return {"runs": list(runs),
            "accuracy": [[c[0] for c in row] for row in cells],
            "lo": [[c[1] for c in row] for row in cells],
            "hi": [[c[2] for c in row] for row in cells],
            "self_minus_cross": paired_delta_report(own, met)}


def against_arm(variant: dict[str, np.ndarray], arm: dict[str, np.ndarray]) -> dict:
    """Each of `SIDES`: the variant's runs minus the arm's. `variant`, `arm`: {`team`, `cross`, `cross_others`:
    [seeds, problems]}."""
    def sides(x):
        return {**x, "both_sides": (np.asarray(x["cross"]) + np.asarray(x["cross_others"])) / 2}

    v, a = sides(variant), sides(arm)
    return {side: paired_delta_report(v[side], a[side]) for side in SIDES}
