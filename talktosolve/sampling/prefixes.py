"""Which rows of a prefill share a leading run of tokens, so that the engine reads that run once (pure: no torch).

The four chats of a training problem (an evaluation's two) begin with the same view at the first turn, and at the
second turn their views share the system prompt and the problem, differing only from the first message on. A
batch's prefill reads every row's tokens, padded to its longest, so a shared run is read once per row. Here rows
are put in groups whose members (of the same policy, with nothing held for them from an earlier turn) begin with
the same `shared` tokens; the engine reads each group's run once, places its keys and values in every member's
cache columns, and reads for each member only what follows (at least its last token, whose state predicts the
next). The keys and values of a run depend on its tokens alone (attention is causal), so this changes which
rows a matmul reads, not what it computes.

How groups are chosen. Rows are sorted by (policy, tokens), so that rows sharing a run are neighbours and the run
common to a stretch of neighbours is the least of their neighbour-to-neighbour common prefixes. The partition of
that order into stretches that reads the fewest tokens is found exactly by dynamic programming over where each
stretch ends: a stretch of g rows with common run P saves (g - 1) * P tokens. One level of sharing is kept (a
problem's chats share the system prompt and the problem; chats of different problems share the system prompt
only): the stretch that saves more wins, which on every view of the recipe is the problem's.

A padded batch costs its rows times its longest row, so sharing pays only when every row gets shorter: the plan
is kept only when the group pass (groups x their longest run) plus the rest (rows x their longest rest) reads at
most `keep_below` of the tokens the plain prefill would (rows x longest row); otherwise nothing is shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEAST = 16
"""The shortest run worth a group: shorter ones save less than the extra pass costs to launch."""


@dataclass
class Plan:
    """`group[i]`: row i's group (an index into `leaders`), or -1; `shared[i]`: the tokens row i takes from its
    group's run (0 for rows outside groups). `leaders[g]`: a row whose first `runs[g]` tokens are group g's run."""
    group: list[int]
    shared: list[int]
    leaders: list[int]
    runs: list[int]


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def run_between(a: list[int], b: list[int]) -> int:
    """The run neighbours `a` and `b` can share: their common prefix, leaving each at least its last token to
    read."""
    return min(_common(a, b), len(a) - 1, len(b) - 1)


class Stretches:
    """The partition that saves the most tokens, built one row at a time over rows already in sorted order.

    `push` takes a row's run with the row before it (`run_between`; 0 for the first row, or where rows may not
    share) and returns the most tokens the rows so far can save. A push is one pass over the rows so far, so a
    batch grown row by row (the learner's micro-batches) costs one exact partition per row, not one per row per
    row (docs/performance.md#learning times both)."""

    def __init__(self, least: int = LEAST):
        self.least = least
        self.common: list[int] = []
        """common[j]: the run of rows j-1 and j (common[0] = 0)."""
        self.best = [0]
        """best[k]: the most tokens saved over the first k rows."""
        self.start = [-1]
        """start[k]: where the stretch ending at row k - 1 begins."""

    def push(self, common: int) -> int:
        b = len(self.common)
        self.common.append(common if b else 0)
        if b == 0:
            self.best.append(0)
            self.start.append(0)
            return 0
        runs = np.minimum.accumulate(np.asarray(self.common[b:0:-1]))  # runs[k]: the run of rows b-k-1 .. b
        size = np.arange(1, b + 1)  # rows saved: the stretch's length minus one
        value = np.where(runs >= self.least, np.asarray(self.best[b - 1::-1]) + size * runs, -1)
        k = int(value.argmax())
        best, start = (int(value[k]), b - k - 1) if value[k] > self.best[b] else (self.best[b], b)
        self.best.append(best)
        self.start.append(start)
        return best

    def groups(self) -> list[tuple[int, int, int]]:
        """(first, end, run) of each stretch of more than one row, the last stretch first."""
        out, end = [], len(self.common)
        while end > 0:
            first = self.start[end]
            if end - first > 1:
                out.append((first, end, min(self.common[first + 1:end])))
            end = first
        return out


def plan(prompts: list[list[int]], held: list[int], policies: list | None = None, *, least: int = LEAST,
         keep_below: float = 0.9) -> Plan | None:
    """The groups for one prefill, or None when sharing would not read fewer tokens.

    prompts: each row's tokens; held: how many of them the row already has in its cache from an earlier turn
    (rows with any are left alone); policies: each row's policy (rows of different policies never share), or
    None when all rows have one."""
    B = len(prompts)
    policies = policies if policies is not None else [0] * B
    key = [-1 if p is None else p for p in policies]
    rows = sorted((i for i in range(B) if held[i] == 0), key=lambda i: (key[i], prompts[i]))
    n = len(rows)
    if n < 2:
        return None
    stretches = Stretches(least)
    for before, row in zip([None] + rows, rows):
        shares = before is not None and key[before] == key[row]
        stretches.push(run_between(prompts[before], prompts[row]) if shares else 0)
    group, shared, leaders, runs_out = [-1] * B, [0] * B, [], []
    for first, end, run in stretches.groups():
        for r in rows[first:end]:
            group[r], shared[r] = len(leaders), run
        leaders.append(rows[first])
        runs_out.append(run)
    if not leaders:
        return None
    plain = B * max(len(p) - h for p, h in zip(prompts, held))
    split = len(leaders) * max(runs_out) + B * max(len(p) - h - s for p, h, s in zip(prompts, held, shared))
    return Plan(group, shared, leaders, runs_out) if split <= keep_below * plain else None
