"""The recipe's plan: which runs a config trains and which evaluations it makes, written once, read by the recipe
that runs them and by the report and checks that read them back.

What is trained is a list of `Line`s, each one run per seed: every arm of `arms`, and the `variant` when the
config names one (an arm trained with other settings, e.g. base partners; its runs are `{variant}-s{seed}`).

Evaluations are `EvalSpec` records (an arm, and who plays each seat: a run or the base; `recipe_evals`): the
untrained team in each arm, each trained run in every seat, cross-play (the run in the first seat, the base in
the others) and its other side (the base in the first seat, the run in the others), each in the run's own arm;
with `eval.cross_seed`, each run in the first seat with every other run of its line in the others (the
cross-seed matrix, `crossplay`). Their folder names (`base-chat`, `chat-s0`, `cross-chat-s0`,
`cross-others-chat-s0`, `chat-s0-with-chat-s1`) are for reading only; results.json records each evaluation's
arm and seats. Evaluations played together (`eval.batch_evals` above 1) share engine passes in the groups
`pass_groups` makes. Pure: no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from talktosolve.config import Config
from talktosolve.protocol import Protocol, swapped_roles


def run_name(line: str, seed: int) -> str:
    """A training run's folder and display name (`chat-s0`: an arm's or the variant's name, and the seed); results
    refer to a run by it."""
    return f"{line}-s{seed}"


KINDS = ("base", "team", "cross", "cross_others", "cross_seed", "role_swap")
"""What an evaluation is, from who sits where: the untrained team; a run in every seat; a run in the first seat
with the base in the others (cross-play); the base in the first seat with a run in the others (its other side);
a run in the first seat with another run in the others (a cell of the cross-seed matrix)."""


def eval_kind(entry: dict) -> tuple[str, str | None]:
    """(kind, run or None) of an evaluation entry, read from its `seats` record (and `roles`: a per-role run's
    weights played in other seats than their own is its role swap)."""
    who = list(entry["seats"].values())
    if entry.get("roles"):
        if len(set(who)) != 1 or who[0] == "base":
            raise ValueError(f"an evaluation with roles {entry['roles']} must seat one run in every seat")
        return "role_swap", who[0]
    first, rest = who[0], set(who[1:])
    if first == "base" and rest == {"base"}:
        return "base", None
    if rest == {first}:
        return "team", first
    if rest == {"base"}:
        return "cross", first
    if first == "base" and len(rest) == 1:
        return "cross_others", rest.pop()
    if len(rest) == 1 and "base" not in rest:
        return "cross_seed", first
    raise ValueError(f"an evaluation with seats {entry['seats']} is none of {KINDS}")


@dataclass(frozen=True)
class EvalSpec:
    """One evaluation of the recipe: an arm, and who plays each seat (a run's name, or None for the base)."""

    arm: str
    seats: tuple[str | None, ...]
    """One entry per seat of the protocol, in its order."""
    roles: tuple[str, ...] | None = None
    """Per-role runs: the seat whose weights each seat plays (a role swap); None: each seat its own."""

    @property
    def name(self) -> str:
        """For display and the folder only; nothing reads an evaluation's identity back from it. Its kind is read
        as results.json's readers read it (`eval_kind`)."""
        kind, run = eval_kind({"seats": {k: run or "base" for k, run in enumerate(self.seats)},
                               **({"roles": self.roles} if self.roles else {})})
        if kind == "cross_seed":
            return f"{run}-with-{self.seats[1]}"
        return {"base": f"base-{self.arm}", "team": run, "cross": f"cross-{run}",
                "cross_others": f"cross-others-{run}", "role_swap": f"swap-{run}"}[kind]

    def role_map(self, seats) -> dict[str, str] | None:
        """`{seat: the seat whose weights play it}` (`evaluate`'s `roles`), or None."""
        return None if self.roles is None else dict(zip(seats, self.roles))


@dataclass
class Line:
    """One line of trained runs, one per seed: an arm of the recipe, or its variant (an arm trained otherwise)."""

    name: str
    """The arm's name, or the variant's; its runs are `{name}-s{seed}`."""
    arm: str
    """The arm its runs play in."""
    cfg: Config
    """The config its runs train with."""

    def runs(self, seeds) -> list[str]:
        return [run_name(self.name, s) for s in seeds]

    @property
    def per_role(self) -> bool:
        """Its runs train one set of weights per seat (`model.adapters=per_role`)."""
        return self.cfg.model.adapters == "per_role"


def trained_lines(cfg: Config) -> list[Line]:
    """The recipe's arms, then the variant (when `variant.name` is set), trained with its own settings."""
    lines = [Line(arm, arm, cfg) for arm in cfg.arms]
    v = cfg.variant
    if v.name:
        model = dataclasses.replace(cfg.model, adapters=v.adapters or cfg.model.adapters)
        lines.append(Line(v.name, v.arm, dataclasses.replace(cfg, model=model, train=dataclasses.replace(
            cfg.train, partners=v.partners, partner=v.partner or cfg.train.partner))))
    return lines


def recipe_evals(cfg: Config, protocol: Protocol) -> list[EvalSpec]:
    """The recipe's evaluations (`planned_evals`) for a config: its arms, its lines of runs and its seeds."""
    return planned_evals(cfg.arms, [(line.name, line.arm, line.per_role) for line in trained_lines(cfg)], cfg.seeds,
                         protocol.seats, cfg.eval.cross_seed)


def planned_evals(arms, lines: list[tuple[str, str, bool]], seeds, seats, cross_seed: bool) -> list[EvalSpec]:
    """The evaluations of a recipe of `arms` and `lines` (name, arm, per-role weights) over `seeds`: the untrained
    team in each arm; for each trained run (of every line), the run in every seat, the run in the first seat with
    the base in the others (cross-play), and the base in the first seat with the run in the others (the other
    side), and for a run with per-role weights its role swap (`protocol.swapped_roles`); with `cross_seed`, each
    run in the first seat with each other run of its line in the others. The recipe runs this list, and the
    results check (`results.validate_results`) holds results.json to it."""
    n = len(seats)
    out = [EvalSpec(arm, (None,) * n) for arm in arms]
    swap = tuple(swapped_roles(seats).values())
    for name, arm, per_role in lines:
        for run in (run_name(name, s) for s in seeds):
            out += [EvalSpec(arm, (run,) * n), EvalSpec(arm, (run,) + (None,) * (n - 1)),
                    EvalSpec(arm, (None,) + (run,) * (n - 1))]
            if per_role:
                out.append(EvalSpec(arm, (run,) * n, swap))
    if cross_seed:
        for name, arm, _ in lines:
            runs = [run_name(name, s) for s in seeds]
            out += [EvalSpec(arm, (a,) + (b,) * (n - 1)) for a in runs for b in runs if a != b]
    return out


def replayed_teams(specs: list[EvalSpec]) -> list[EvalSpec]:
    """The evaluations the influence stage replays: one model in every seat (the untrained team, each run)."""
    return [spec for spec in specs if len(set(spec.seats)) == 1 and spec.roles is None]


def headline_first(specs: list[EvalSpec]) -> list[EvalSpec]:
    """The same evaluations, those of one model in every seat first (each arm's untrained team and each run's own:
    the arms' comparison), then the rest, each part in its order. Evaluations played together run in this order,
    so a recipe stopped during them (a lease that ends, memory that runs out) already holds its comparison."""
    own = set(replayed_teams(specs))
    return [s for s in specs if s in own] + [s for s in specs if s not in own]


def pass_groups(items: list, at_most: int) -> list[list]:
    """`items` (evaluations to play together) in the fewest groups of at most `at_most`, in order, their sizes as
    equal as possible and the larger first: 38 at 6 are three groups of 6 and four of 5, not six of 6 and a last
    pass of 2 (a pass costs its turns' longest messages, however few evaluations it holds)."""
    n = -(-len(items) // max(1, at_most))
    size, larger = divmod(len(items), n) if n else (0, 0)
    groups, start = [], 0
    for g in range(n):
        end = start + size + (g < larger)
        groups.append(items[start:end])
        start = end
    return groups
