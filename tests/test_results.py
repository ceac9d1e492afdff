"""The recipe's per-seed checks: each decided on a paired interval over the held-out problems (`minus_base`,
`minus_cross_play` beside each seed in results.json), never on a bare comparison of two accuracies."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from test_report import SEEDS, make_results

from talktosolve.experiment.report import render_markdown
from talktosolve.experiment.results import (
    CUT_MARGIN,
    SEED_CHECKS,
    ResultsError,
    above_zero,
    check_interval,
    near_or_below,
    seed_checks,
    validate_results,
)
from talktosolve.experiment.summary import terminal_summary
from talktosolve.stats import run_delta_report


def scattered(n_problems: int, right: int, value: float, seed: int) -> np.ndarray:
    """Per-problem scores: `right` problems scored `value`, at random places, the others 0."""
    out = np.zeros(n_problems)
    out[np.random.default_rng(seed).choice(n_problems, right, replace=False)] = value
    return out


def binomial(n_problems: int, p: float, seed: int, answers: int = 4) -> np.ndarray:
    """Per-problem scores as an evaluation writes them: the mean of `answers` graded answers, each right with p."""
    return np.random.default_rng(seed).binomial(answers, p, n_problems) / answers


def test_chat_beats_base_needs_the_interval_above_zero_not_a_higher_accuracy():
    # 0.032 against 0.031 on 300 noisy problems: the old bare `>` passed it
    team, base = scattered(300, 38, 0.25, seed=1), scattered(300, 37, 0.25, seed=2)
    assert team.mean() > base.mean()
    d = run_delta_report(team, base)
    assert d["lo"] < 0 < d["hi"] and not above_zero(d)
    # a real gain passes
    assert above_zero(run_delta_report(binomial(300, 0.29, seed=3), binomial(300, 0.03, seed=4)))


def test_cross_play_below_pair_needs_the_interval_above_zero_not_a_lower_cross_play():
    team, cross = binomial(300, 0.30, seed=5), binomial(300, 0.30, seed=6)
    if team.mean() <= cross.mean():
        team, cross = cross, team
    assert cross.mean() < team.mean()  # the old bare `<` passed it
    assert not above_zero(run_delta_report(team, cross))
    assert above_zero(run_delta_report(binomial(300, 0.29, seed=7), binomial(300, 0.08, seed=8)))


def test_cut_near_base_needs_the_whole_interval_within_the_margin():
    # 0.042 against 0.0 on 24 problems: the old bare `<= base + margin` passed it, but 24 problems cannot rule out
    # a gain of twice the margin
    cut, base = scattered(24, 1, 1.0, seed=9), np.zeros(24)
    assert cut.mean() <= base.mean() + CUT_MARGIN
    d = run_delta_report(cut, base)
    assert d["hi"] > CUT_MARGIN and not near_or_below(d)
    assert near_or_below(run_delta_report(binomial(300, 0.01, seed=10), binomial(300, 0.03, seed=11)))


def test_the_micro_recipes_figures_still_pass():
    # chat pairs 0.39-0.51 against an untrained pair of 0.123 and cross-play of 0.15-0.16; cut pairs 0.003-0.024
    # against the chat arm's base (the checks' base when the chat arm ran) and the cut arm's own (0.013)
    base, base_cut = binomial(300, 0.123, seed=12), binomial(300, 0.013, seed=13)
    for i, (p_team, p_cross) in enumerate([(0.389, 0.163), (0.513, 0.163), (0.422, 0.151)]):
        team, cross = binomial(300, p_team, seed=20 + i), binomial(300, p_cross, seed=30 + i)
        assert above_zero(run_delta_report(team, base)) and above_zero(run_delta_report(team, cross))
    for i, p_cut in enumerate([0.018, 0.003, 0.024]):
        cut = binomial(300, p_cut, seed=40 + i)
        assert near_or_below(run_delta_report(cut, base)) and near_or_below(run_delta_report(cut, base_cut))


def with_intervals(results: dict, chat_minus_base: float = 0.3) -> dict:
    """`results` with every seed's `minus_base` and `minus_cross_play` and the checks decided on them."""
    r = copy.deepcopy(results)
    for arm, entry in r["arms"].items():
        for s in entry["seeds"]:
            gain = chat_minus_base if arm == "chat" else -0.02
            team = binomial(60, 0.1 + max(gain, 0), seed=50 + int(s))
            entry["seeds"][s]["minus_base"] = run_delta_report(team, binomial(60, 0.1 - min(gain, 0), seed=60))
            entry["seeds"][s]["minus_cross_play"] = run_delta_report(team, binomial(60, 0.1, seed=70 + int(s)))
    r["checks"].update(seed_checks(r["arms"], SEEDS))
    return r


def test_seed_checks_read_the_interval_beside_each_seed():
    r = with_intervals(make_results())
    validate_results(r)
    for check, (arm, key, rule) in SEED_CHECKS.items():
        for s in map(str, SEEDS):
            d = r["arms"][arm]["seeds"][s][key]
            assert check_interval(r, check, s) is d and r["checks"][check][s] is rule(d)
    assert r["checks"]["chat_beats_base"] == {"0": True, "1": True, "2": True}
    assert seed_checks({"chat": r["arms"]["chat"]}, SEEDS)["cut_near_base"] == {}  # an arm not run


@pytest.mark.parametrize("mutate, path", [
    (lambda r: r["checks"]["chat_beats_base"].__setitem__("1", False), r"checks\.chat_beats_base\.1: is False"),
    (lambda r: r["arms"]["chat"]["seeds"]["0"]["minus_base"].__setitem__("lo", 0.9),
     r"arms\.chat\.seeds\.0\.minus_base\.delta: .* outside"),
    (lambda r: r["arms"]["cut"]["seeds"]["2"].__setitem__("minus_cross_play", 0.1),
     r"arms\.cut\.seeds\.2\.minus_cross_play: must be a delta entry"),
])
def test_checks_that_disagree_with_their_intervals_fail_validation(mutate, path):
    r = with_intervals(make_results())
    mutate(r)
    with pytest.raises(ResultsError, match=path):
        validate_results(r)


def test_results_written_before_the_intervals_still_validate_and_report():
    r = make_results()
    validate_results(r)
    assert check_interval(r, "chat_beats_base", "0") is None
    assert "| chat_beats_base | 0 | ✓ |  |" in render_markdown(r)


def test_the_report_shows_the_interval_each_check_was_decided_on():
    r = with_intervals(make_results(), chat_minus_base=0.0)
    failed = [s for s, ok in r["checks"]["chat_beats_base"].items() if not ok]
    assert failed  # no gain: the interval straddles 0
    d = r["arms"]["chat"]["seeds"][failed[0]]["minus_base"]
    shown = f"{d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
    assert f"| chat_beats_base | {failed[0]} | ✗ | {shown} |" in render_markdown(r)
    assert f"chat_beats_base[{failed[0]}] ({shown})" in terminal_summary(r)
