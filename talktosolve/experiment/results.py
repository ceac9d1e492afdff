"""Validation of `results.json` (docs/results.md) against `results.schema.json`, plus the cross-field checks a
JSON Schema cannot say.

`validate_results(results)` returns None or raises `ResultsError` whose message names the bad field by its path
(`evals.chat-s0.accuracy: 1.5 is greater than the maximum of 1`) and which carries that path as `.path`.

Beyond the schema: every number is finite (no NaN / Infinity); `run.protocol` is consistent; `runs` holds one
run per arm of `run.arms` and seed of `run.seeds` (named `{arm}-s{seed}`), and `curves` one curve per run; `arms`
one entry per arm with one `seeds` entry per seed; `evals` holds exactly the recipe's evaluations, each identified
by its record (its `arm` and `seats`, seat by seat `base` or a run of that arm): the base team in each arm, and
per run the run in every seat, in the first seat only, and in every seat but the first; `lo <= accuracy <= hi`
wherever an interval is given (and `lo <= delta <= hi` in a seed's `minus_base` and `minus_cross_play`, where
present); `comparisons` holds each configured comparison, null exactly when one of its arms
was not run, and `checks.interval_excludes_zero` its `excludes_zero` (null without it); the per-seed check maps
hold exactly the seeds of the arm they concern (`chat_beats_base`, `cross_play_below_pair`: the chat arm;
`cut_near_base`: the cut arm; empty when that arm was not run) and, where the seed carries the interval it is
decided on, agree with it (`SEED_CHECKS`).

Two optional sections: `variant` (present exactly when `config.variant.name` is set: its runs are in `runs`
with a `variant` key, `{name}-s{seed}`, and evaluated like an arm's) and `cross_seed` (present exactly when
`config.eval.cross_seed` is on: per line of runs, the matrix, whose every off-diagonal evaluation is in `evals`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from talktosolve.arms import comparison_arms
from talktosolve.experiment.plan import eval_kind, planned_evals, run_name

__all__ = ["SCHEMA_PATH", "ResultsError", "validate_results", "load_schema", "format_path", "CUT_MARGIN",
           "SEED_CHECKS", "above_zero", "near_or_below", "seed_checks", "check_interval", "run_name"]

SCHEMA_PATH = Path(__file__).with_name("results.schema.json")

_TOL = 1e-9


class ResultsError(ValueError):
    """`results.json` does not match docs/results.md; `.path` is the path to the bad field (a tuple of keys)."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.path = tuple(path)


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def format_path(path) -> str:
    """`("evals", "chat-s0", "talk", "send")` -> `evals.chat-s0.talk.send`; list indices as `[3]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _fail(path, message: str) -> None:
    raise ResultsError(f"results.json: {format_path(path)}: {message}", tuple(path))


def validate_results(results: dict) -> None:
    """Raise `ResultsError` (naming the bad field's path) unless `results` is a valid results.json."""
    import jsonschema
    from jsonschema.exceptions import best_match

    if not isinstance(results, dict):
        _fail((), f"must be an object, got {type(results).__name__}")
    _check_finite(results, ())
    validator = jsonschema.Draft202012Validator(load_schema())
    error = best_match(validator.iter_errors(results))
    if error is not None:
        _fail(tuple(error.absolute_path), error.message)
    _check_consistency(results)


def _check_finite(obj: Any, path: tuple) -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        _fail(path, f"{obj!r} is not a finite number (use null for an undefined figure)")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _check_finite(value, path + (key,))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_finite(value, path + (i,))


def _check_interval(entry: dict, path: tuple, value_key: str) -> None:
    lo, value, hi = entry["lo"], entry[value_key], entry["hi"]
    if not (lo - _TOL <= value <= hi + _TOL):
        _fail(path + (value_key,), f"{value} is outside its interval [lo, hi] = [{lo}, {hi}]")


def _check_seed_deltas(entry: dict, path: tuple) -> None:
    """A seed's `minus_base` and `minus_cross_play`, where present: delta entries with `lo <= delta <= hi`."""
    for key in SEED_DELTAS:
        if key not in entry:
            continue
        d = entry[key]
        if not isinstance(d, dict) or not all(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool)
                                              and -1 <= d[k] <= 1 for k in ("delta", "lo", "hi")):
            _fail(path + (key,), "must be a delta entry: delta, lo, hi numbers in [-1, 1] (docs/results.md)")
        _check_interval(d, path + (key,), "delta")


def _check_keys(actual, expected: set, path: tuple, what: str) -> None:
    actual = set(actual)
    missing, extra = sorted(expected - actual), sorted(actual - expected)
    if missing:
        _fail(path, f"missing {what}: {', '.join(map(str, missing))}")
    if extra:
        _fail(path + (extra[0],), f"unexpected {what} (not in run.arms x run.seeds): {', '.join(map(str, extra))}")


def _check_consistency(r: dict) -> None:
    protocol = r["run"]["protocol"]
    seats = list(protocol["seats"])
    arms: list[str] = list(r["run"]["arms"])
    seed_keys = [str(s) for s in r["run"]["seeds"]]
    if set(protocol["order"]) - set(seats) or len(protocol["limits"]) != len(protocol["order"]) \
            or len(protocol["finals"]) != len(seats):
        _fail(("run", "protocol"), "its order, limits and finals do not fit its seats")

    variant = r.get("variant")
    if (variant is not None) != bool(r["config"].get("variant", {}).get("name")):
        _fail(("variant",), "must be present exactly when config.variant.name is set")
    lines = {a: a for a in arms} | ({variant["name"]: variant["arm"]} if variant else {})
    runs = {run_name(line, s): (a, s) for line, a in lines.items() for s in r["run"]["seeds"]}
    _check_keys(r["runs"], set(runs), ("runs",), "training run")
    for name, (arm, seed) in runs.items():
        if (r["runs"][name]["arm"], r["runs"][name]["seed"]) != (arm, seed):
            _fail(("runs", name), f"is {r['runs'][name]} but the run of arm {arm}, seed {seed} is named {name}")

    _check_keys(r["arms"], set(arms), ("arms",), "arm")
    for arm in arms:
        entry = r["arms"][arm]
        _check_interval(entry, ("arms", arm), "accuracy")
        _check_keys(entry["seeds"], set(seed_keys), ("arms", arm, "seeds"), "seed")
        for seed in seed_keys:
            _check_interval(entry["seeds"][seed], ("arms", arm, "seeds", seed), "accuracy")
            _check_seed_deltas(entry["seeds"][seed], ("arms", arm, "seeds", seed))

    cross_seed = r.get("cross_seed")
    if (cross_seed is not None) != bool(r["config"].get("eval", {}).get("cross_seed")):
        _fail(("cross_seed",), "must be present exactly when config.eval.cross_seed is on")
    # Every evaluation the recipe makes (the plan's own list), by its record: (arm, who sits in each seat, whose
    # weights they play).
    want = {(spec.arm, tuple(run or "base" for run in spec.seats), spec.roles) for spec in planned_evals(
        arms, [(line, a, line_adapters(r, line) == "per_role") for line, a in lines.items()], r["run"]["seeds"],
        seats, cross_seed is not None)}
    if cross_seed is not None:
        _check_keys(cross_seed, set(lines), ("cross_seed",), "line of runs")
        for line, a in lines.items():
            mine = [run_name(line, s) for s in r["run"]["seeds"]]
            if cross_seed[line]["runs"] != mine or cross_seed[line]["arm"] != a:
                _fail(("cross_seed", line), f"must hold the runs {mine} of arm {a}, in seed order")
            for key in ("accuracy", "lo", "hi"):
                if [len(row) for row in cross_seed[line][key]] != [len(mine)] * len(mine):
                    _fail(("cross_seed", line, key), f"must be {len(mine)} x {len(mine)}, one row and column per run")
            for i, row in enumerate(cross_seed[line]["accuracy"]):
                for j, acc in enumerate(row):
                    if not cross_seed[line]["lo"][i][j] - _TOL <= acc <= cross_seed[line]["hi"][i][j] + _TOL:
                        _fail(("cross_seed", line, "accuracy", i, j), f"{acc} is outside its interval")
            _check_interval(cross_seed[line]["self_minus_cross"], ("cross_seed", line, "self_minus_cross"), "delta")
    for line, entry in [(a, r["arms"][a]) for a in arms] + ([(variant["name"], variant)] if variant else []):
        where = ("arms", line) if line in arms else ("variant",)
        if ("role_swap" in entry) != (line_adapters(r, line) == "per_role"):
            _fail(where + ("role_swap",), "must be present exactly when the line trains per-role weights")
        if "role_swap" in entry:
            _check_interval(entry["role_swap"], where + ("role_swap",), "delta")
            for seed in seed_keys:
                if "role_swap" not in entry["seeds"][seed]:
                    _fail(where + ("seeds", seed), "has no role_swap, though its line trains per-role weights")
    if variant is not None:
        _check_interval(variant, ("variant",), "accuracy")
        _check_keys(variant["seeds"], set(seed_keys), ("variant", "seeds"), "seed")
        for seed in seed_keys:
            _check_seed_deltas(variant["seeds"][seed], ("variant", "seeds", seed))
        for side, d in variant["against_arm"].items():
            _check_interval(d, ("variant", "against_arm", side), "delta")
    have = {}
    for name, ev in r["evals"].items():
        path = ("evals", name)
        if ev["arm"] not in arms:
            _fail(path + ("arm",), f"is `{ev['arm']}`, which is not in run.arms")
        if list(ev["seats"]) != seats:
            _fail(path + ("seats",), f"seats {list(ev['seats'])} are not the protocol's {seats}")
        for seat, who in ev["seats"].items():
            if who != "base" and runs.get(who, (None,))[0] != ev["arm"]:
                _fail(path + ("seats", seat), f"`{who}` is neither `base` nor a run of the `{ev['arm']}` arm")
        if list(ev["acc"]) != seats:
            _fail(path + ("acc",), f"holds seats {list(ev['acc'])}, not the protocol's {seats}")
        if list(ev["talk"]["seats"]) != seats:
            _fail(path + ("talk", "seats"), f"holds seats {list(ev['talk']['seats'])}, not the protocol's {seats}")
        _check_interval(ev, path, "accuracy")
        roles = ev.get("roles")
        if roles is not None and list(roles) != seats:
            _fail(path + ("roles",), f"holds seats {list(roles)}, not the protocol's {seats}")
        have[(ev["arm"], tuple(ev["seats"].values()), None if roles is None else tuple(roles.values()))] = name
    missing = sorted(want - set(have), key=str)
    if missing:
        arm, who, roles = missing[0]
        played = f" playing roles {list(roles)}" if roles else ""
        _fail(("evals",), f"missing the evaluation of arm {arm} with seats {list(who)}{played}")
    extra = sorted(set(have) - want, key=str)
    if extra:
        _fail(("evals", have[extra[0]]), "is not an evaluation of this recipe's arms and runs")

    _check_keys(r["curves"], set(runs), ("curves",), "training run")

    comparisons = r["comparisons"]
    config = r["config"].get("comparisons")
    if config is not None:
        _check_keys(comparisons, set(config), ("comparisons",), "comparison")
    checks = r["checks"]
    _check_keys(checks["interval_excludes_zero"], set(comparisons), ("checks", "interval_excludes_zero"),
                "comparison")
    for key, comp in comparisons.items():
        a, b = comparison_arms(key)
        ran = a in arms and b in arms
        if ran and comp is None:
            _fail(("comparisons", key), f"is null but the run has both the {a} and the {b} arm")
        if not ran and comp is not None:
            _fail(("comparisons", key), f"must be null: the run has not both the {a} and the {b} arm")
        ez = checks["interval_excludes_zero"][key]
        if comp is None:
            if ez is not None:
                _fail(("checks", "interval_excludes_zero", key), "must be null when there is no comparison")
            continue
        if (comp["a"], comp["b"]) != (a, b):
            _fail(("comparisons", key), f"compares {comp['a']} with {comp['b']}, not {a} with {b}")
        _check_interval(comp, ("comparisons", key), "delta")
        if ez is not comp["excludes_zero"]:
            _fail(("checks", "interval_excludes_zero", key),
                  f"is {ez} but comparisons.{key}.excludes_zero is {comp['excludes_zero']}")

    for key, (arm, delta, rule) in SEED_CHECKS.items():
        _check_keys(checks[key], set(seed_keys) if arm in arms else set(), ("checks", key), "seed")
        for seed, passed in checks[key].items():
            d = r["arms"][arm]["seeds"][seed].get(delta)
            if d is not None and passed is not rule(d):
                _fail(("checks", key, seed), f"is {passed} but arms.{arm}.seeds.{seed}.{delta} is {d['delta']:+.3f} "
                                             f"[{d['lo']:+.3f}, {d['hi']:+.3f}], which {rule.__name__} says "
                                             f"{'passes' if rule(d) else 'fails'}")


# ------------------------------------------------------------------------------------------ reading the records

SEED_DELTAS = ("minus_base", "minus_cross_play")
"""The delta entries beside each seed of an arm (results written before them lack them): its trained team minus
the base team the checks hold it against, and minus its own cross-play, each paired over the same problems."""

CUT_MARGIN = 0.05
"""The cut arm counts as 'near the base or below' when the upper end of the 95% interval of its trained team
minus the base team (paired over the same problems) is at most this."""


def above_zero(d: dict) -> bool:
    """A difference a - b whose 95% interval lies wholly above 0: a beats b by more than the problems drawn and
    the chats sampled explain. A bare `a > b` passes on any difference, however small beside that noise."""
    return d["lo"] > 0.0


def near_or_below(d: dict) -> bool:
    """A difference a - b whose 95% interval ends at or below `CUT_MARGIN`: the data rule out that a is more than
    the margin above b. A bare `a <= b + margin` lets a few lucky problems fail it and too few problems pass it."""
    return d["hi"] <= CUT_MARGIN


SEED_CHECKS = {"chat_beats_base": ("chat", "minus_base", above_zero),
               "cross_play_below_pair": ("chat", "minus_cross_play", above_zero),
               "cut_near_base": ("cut", "minus_base", near_or_below)}
"""Each per-seed check: the arm it concerns, the seed's delta entry it is decided on, and the rule it asks of
that entry's interval."""


def seed_checks(arms: dict, seeds) -> dict:
    """results.json's per-seed checks from its `arms` (whose seeds carry `minus_base`, `minus_cross_play`):
    {check: {seed: bool}}, in `SEED_CHECKS` order; {} for an arm that was not run."""
    return {check: {str(s): rule(arms[arm]["seeds"][str(s)][key]) for s in seeds} if arm in arms else {}
            for check, (arm, key, rule) in SEED_CHECKS.items()}


def check_interval(results: dict, check: str, seed: str) -> dict | None:
    """The delta entry (delta, lo, hi, ...) a per-seed check was decided on, or None: a check that reads no
    interval, or results written before the checks did."""
    if check not in SEED_CHECKS:
        return None
    arm, key, _ = SEED_CHECKS[check]
    return results["arms"].get(arm, {}).get("seeds", {}).get(str(seed), {}).get(key)


def line_adapters(results: dict, line: str) -> str:
    """`shared` or `per_role`: how a line of runs (an arm, or the variant) was trained, from results.json's
    config (a variant's own `adapters`, else the recipe's `model.adapters`; `shared` before the setting
    existed)."""
    config = results["config"]
    default = config.get("model", {}).get("adapters", "shared")
    variant = config.get("variant", {})
    if line == variant.get("name"):
        return variant.get("adapters") or default
    return default


def find_eval(results: dict, arm: str, kind: str, run: str | None = None) -> tuple[str, dict] | None:
    """(name, entry) of the evaluation of `kind` in `arm` (of `run`, for all but the base), or None; for
    `cross_seed`, the first of the run's (`find_evals` gives them all)."""
    found = find_evals(results, arm, kind, run)
    return found[0] if found else None


def find_evals(results: dict, arm: str, kind: str, run: str | None = None) -> list[tuple[str, dict]]:
    """Every (name, entry) of `kind` in `arm` (of `run`, for all but the base), in results.json's order."""
    return [(name, entry) for name, entry in results["evals"].items()
            if entry["arm"] == arm and eval_kind(entry) == (kind, run)]


def run_names(results: dict, arm: str) -> list[str]:
    """The arm's training runs (the variant's too, when it plays in this arm), in seed order."""
    return [name for name, r in results["runs"].items() if r["arm"] == arm]


def seed_names(results: dict) -> list[str]:
    """The recipe's training seeds, as results.json's per-seed maps key them."""
    return [str(s) for s in results["run"]["seeds"]]


def arm_names(results: dict) -> list[str]:
    """The recipe's arms, in config order."""
    return list(results["run"]["arms"])


def seat_names(results: dict) -> list[str]:
    """The team's seats, in dealing order."""
    return list(results["run"]["protocol"]["seats"])
