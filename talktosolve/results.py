"""Validation of `results.json` (docs/results.md) against `results.schema.json`, plus the cross-field checks a
JSON Schema cannot say.

`validate_results(results)` returns None or raises `ResultsError` whose message names the bad field by its path
(`evals.chat-s0.accuracy: 1.5 is greater than the maximum of 1`) and which carries that path as `.path`.

Beyond the schema: every number is finite (no NaN / Infinity); every arm in `run.arms` has its `arms` entry, its
evaluations (`base-{arm}`, `{arm}-s{seed}`, `cross-{arm}-s{seed}` for each seed in `run.seeds`), its learning
curves (`{arm}-s{seed}`) and one `arms.{arm}.seeds` entry per seed (and nothing for an arm or seed not run); an
evaluation's `arm` matches its name; `lo <= accuracy <= hi` wherever an interval is given; the per-seed check maps
hold exactly the seeds of the arm they concern (`chat_beats_base`, `cross_play_below_pair`: the chat arm;
`cut_near_base`: the cut arm; empty when that arm was not run); `cut_never_sees_partner` is not null when the
cut arm ran; `comparison` and `checks.interval_excludes_zero`
are null exactly when the run has not both arms, and `interval_excludes_zero` equals `comparison.excludes_zero`.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_PATH", "ResultsError", "validate_results", "load_schema", "format_path"]

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


def _check_keys(actual, expected: set, path: tuple, what: str) -> None:
    actual = set(actual)
    missing, extra = sorted(expected - actual), sorted(actual - expected)
    if missing:
        _fail(path, f"missing {what}: {', '.join(map(str, missing))}")
    if extra:
        _fail(path + (extra[0],), f"unexpected {what} (not in run.arms x run.seeds): {', '.join(map(str, extra))}")


def _check_consistency(r: dict) -> None:
    arms: list[str] = list(r["run"]["arms"])
    seeds = [str(s) for s in r["run"]["seeds"]]

    _check_keys(r["arms"], set(arms), ("arms",), "arm")
    for arm in arms:
        entry = r["arms"][arm]
        _check_interval(entry, ("arms", arm), "accuracy")
        _check_keys(entry["seeds"], set(seeds), ("arms", arm, "seeds"), "seed")
        for seed in seeds:
            _check_interval(entry["seeds"][seed], ("arms", arm, "seeds", seed), "accuracy")

    want_evals = {f"base-{a}" for a in arms} | {f"{a}-s{s}" for a in arms for s in seeds} \
        | {f"cross-{a}-s{s}" for a in arms for s in seeds}
    _check_keys(r["evals"], want_evals, ("evals",), "evaluation")
    for name, ev in r["evals"].items():
        arm = name.removeprefix("base-").removeprefix("cross-").split("-s")[0]
        if ev["arm"] != arm:
            _fail(("evals", name, "arm"), f"is `{ev['arm']}` but the evaluation `{name}` is in the `{arm}` arm")
        _check_interval(ev, ("evals", name), "accuracy")

    _check_keys(r["curves"], {f"{a}-s{s}" for a in arms for s in seeds}, ("curves",), "training run")

    checks = r["checks"]
    for key, arm in (("chat_beats_base", "chat"), ("cross_play_below_pair", "chat"), ("cut_near_base", "cut")):
        _check_keys(checks[key], set(seeds) if arm in arms else set(), ("checks", key), "seed")

    if "cut" in arms and checks["cut_never_sees_partner"] is None:
        _fail(("checks", "cut_never_sees_partner"), "is null but the cut arm was run")
    both = "chat" in arms and "cut" in arms
    comp = r["comparison"]
    if both and comp is None:
        _fail(("comparison",), "is null but the run has both arms")
    if not both and comp is not None:
        _fail(("comparison",), "must be null when the run has not both arms")
    if comp is not None:
        _check_interval(comp, ("comparison",), "delta")
    ez = checks["interval_excludes_zero"]
    if comp is None and ez is not None:
        _fail(("checks", "interval_excludes_zero"), "must be null when there is no comparison")
    if comp is not None and ez is not comp["excludes_zero"]:
        _fail(("checks", "interval_excludes_zero"), f"is {ez} but comparison.excludes_zero is {comp['excludes_zero']}")
