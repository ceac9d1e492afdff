"""The training pool by difficulty: the training problems a run draws from, chosen by how often the untrained
team solves them (`train.pool_chats`, `train.pool_min`, `train.pool_max`).

A pre-pass plays the untrained team `pool_chats` chats of every training problem, in the run's arm: an
evaluation of the base team over the training set (`evaluate.evaluate_teams`), written and cached like any
evaluation, in `pool/{arm}/`, so every seed of an arm, and a rerun, reads the same one. A chat solves its
problem when its team reward is above 0 (some seat's boxed answer is right): such a chat differs from one that
scored 0, so a group can carry an advantage. A problem stays in the pool when it was solved in at least
`pool_min` and at most `pool_max` (0: any number) of its chats.

Why: when the untrained team rarely succeeds, most problems give every chat of a group the same reward 0,
and a step learns from the few that do not. Drawing from the problems the team solves sometimes raises the
share of groups with a signal from the first step, at the cost of a pre-pass of `pool_chats` chats per
problem.

`solved_counts` and `keep` are pure; `training_pool` runs the pre-pass.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from talktosolve.config import Config
from talktosolve.store import read_jsonl


class PoolError(RuntimeError):
    """The pool cannot be drawn from; the message says why and what to change."""


def solved_counts(chats: list[dict]) -> dict[str, int]:
    """`{problem_id: how many of its chats scored a team reward above 0}` over evaluation chat records."""
    out: dict[str, int] = {}
    for c in chats:
        out[c["problem_id"]] = out.get(c["problem_id"], 0) + (c["reward"] > 0)
    return out


def keep(problems: list, counts: dict[str, int], lo: int, hi: int = 0) -> list:
    """The problems solved in at least `lo` and at most `hi` (0: no bound) chats, in their order."""
    return [p for p in problems if counts.get(p.id, 0) >= lo and (hi == 0 or counts.get(p.id, 0) <= hi)]


def pool_config(cfg: Config, n_problems: int) -> Config:
    """The pre-pass as an evaluation's config: every training problem, `pool_chats` chats each, as many chats a
    pass as the recipe's evaluations play together (`eval.batch_chats` x `eval.batch_evals`: the memory the user
    gave them)."""
    evaluation = dataclasses.replace(cfg.eval, n_problems=n_problems, chats_per_problem=cfg.train.pool_chats,
                                     batch_chats=cfg.eval.batch_chats * cfg.eval.batch_evals, batch_evals=1,
                                     influence=False, cross_seed=False)
    return dataclasses.replace(cfg, eval=evaluation)


def training_pool(cfg: Config, arm: str, problems: list, folder: Path, *, progress: bool = True) -> list:
    """The problems of `problems` that an `arm` run trains on: all of them without a pool, else those the
    untrained team solved as often as the pool asks (the pre-pass is played once into `folder/{arm}/`)."""
    t = cfg.train
    if t.pool_chats == 0:
        return problems
    from talktosolve.experiment.evaluate import Team, evaluate_teams

    out_dir = Path(folder) / arm
    evaluate_teams(pool_config(cfg, len(problems)), [Team(out_dir, arm, {}, None, f"pool {arm}")], problems,
                   progress=progress)
    kept = keep(problems, solved_counts(read_jsonl(out_dir / "chats.jsonl")), t.pool_min, t.pool_max)
    if len(kept) < t.problems_per_step:
        bound = f"at most {t.pool_max}" if t.pool_max else "any number"
        raise PoolError(f"the {arm} arm's training pool holds {len(kept)} problems (solved by the untrained team "
                        f"in at least {t.pool_min} and {bound} of {t.pool_chats} chats, {out_dir}), fewer than "
                        f"train.problems_per_step ({t.problems_per_step}); lower train.pool_min, raise "
                        "train.pool_chats or data.n_train, or set train.pool_chats=0.")
    return kept
