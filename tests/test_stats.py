"""talktosolve.stats: the chat-vs-cut paired delta, its interval, and the t quantile behind it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from talktosolve.stats import (
    mean_ci,
    mean_ci_report,
    naive_paired_interval,
    paired_delta,
    paired_delta_report,
    run_delta_report,
    t_cdf,
    t_quantile,
)

# ----------------------------------------------------------------------------------------------- t quantile

@pytest.mark.parametrize("q, df, want", [
    (0.975, 1, 12.7062047),
    (0.975, 2, 4.3026527),
    (0.975, 3, 3.1824463),
    (0.975, 4, 2.7764451),
    (0.975, 5, 2.5705818),
    (0.975, 10, 2.2281389),
    (0.975, 30, 2.0422725),
    (0.975, 120, 1.9799304),
    (0.95, 5, 2.0150484),
    (0.995, 4, 4.6040949),
    (0.9, 1, 3.0776835),
    (0.975, math.inf, 1.9599640),
])
def test_t_quantile_table(q, df, want):
    assert t_quantile(q, df) == pytest.approx(want, abs=2e-7)
    assert t_quantile(1 - q, df) == pytest.approx(-want, abs=2e-7)


def _t_cdf_by_quadrature(t: float, df: float) -> float:
    x = np.linspace(0.0, t, 200_001)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    f = np.exp(logc - (df + 1) / 2 * np.log1p(x * x / df))
    h = x[1] - x[0]
    return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


@pytest.mark.parametrize("q, df", [(0.975, 2.5), (0.975, 3.7), (0.95, 1.3), (0.995, 17.2), (0.975, 6000.0)])
def test_t_quantile_fractional_df_round_trip(q, df):
    t = t_quantile(q, df)
    assert t_cdf(t, df) == pytest.approx(q, abs=1e-12)
    assert _t_cdf_by_quadrature(t, df) == pytest.approx(q, abs=1e-9)  # independent of the incomplete beta


def test_t_quantile_monotone_in_df():
    qs = [t_quantile(0.975, df) for df in (1, 1.5, 2, 2.5, 3, 5, 10, 100, 1e4, math.inf)]
    assert all(a > b for a, b in zip(qs, qs[1:]))


def test_t_quantile_rejects_bad_args():
    for q, df in [(0.0, 3), (1.0, 3), (0.5, 0), (0.5, -1)]:
        with pytest.raises(ValueError):
            t_quantile(q, df)


# ------------------------------------------------------------------------------------------- known truths

def test_identical_arms_give_zero_delta():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, size=(3, 50)) / 4
    d, lo, hi = paired_delta(x, x.copy())
    assert d == 0.0
    assert lo <= 0.0 <= hi


def test_constant_shift_single_seed_is_exact():
    rng = np.random.default_rng(2)
    cut = rng.uniform(0.0, 0.5, size=(1, 40))
    chat = cut + 0.25
    r = paired_delta_report(chat, cut)
    assert r["delta"] == pytest.approx(0.25)
    assert r["lo"] == pytest.approx(0.25) and r["hi"] == pytest.approx(0.25)
    assert r["method"] == "problem-only"
    assert r["warning"] and "1 training seed" in r["warning"]
    assert r["excludes_zero"] is True


def test_delta_is_difference_of_grand_means_with_unequal_seed_counts():
    rng = np.random.default_rng(3)
    chat = rng.integers(0, 5, size=(3, 30)) / 4
    cut = rng.integers(0, 5, size=(2, 30)) / 4
    d, lo, hi = paired_delta(chat, cut)
    assert d == pytest.approx(chat.mean() - cut.mean())
    assert lo < d < hi


def _reference_interval(chat, cut, level=0.95):
    """The documented formula, written out with explicit loops (independent of the vectorised code)."""
    s_c, p = chat.shape
    s_k = cut.shape[0]
    d = [sum(chat[s][j] for s in range(s_c)) / s_c - sum(cut[s][j] for s in range(s_k)) / s_k for j in range(p)]
    dbar = sum(d) / p
    var_d = sum((x - dbar) ** 2 for x in d) / (p - 1)
    v = var_d / p
    parts = [(var_d / p, p - 1)]
    for y in (chat, cut):
        s = y.shape[0]
        rows = [sum(y[i][j] for j in range(p)) / p for i in range(s)]
        cols = [sum(y[i][j] for i in range(s)) / s for j in range(p)]
        g = sum(rows) / s
        var_rows = sum((r - g) ** 2 for r in rows) / (s - 1)
        ms = sum((y[i][j] - rows[i] - cols[j] + g) ** 2 for i in range(s) for j in range(p)) / ((s - 1) * (p - 1))
        sb2 = var_rows - ms / p
        if sb2 > 0:
            v += sb2 / s
            parts += [(var_rows / s, s - 1), (-ms / (s * p), (s - 1) * (p - 1))]
    df = v * v / sum(c * c / k for c, k in parts)
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(v)
    return dbar, dbar - half, dbar + half, df


def test_matches_hand_written_formula():
    rng = np.random.default_rng(4)
    p = 25
    diff = rng.uniform(0.2, 0.6, size=p)
    chat = np.clip(diff + 0.2 + rng.normal(0, 0.08, size=(3, 1)) + rng.normal(0, 0.1, size=(3, p)), 0, 1)
    cut = np.clip(diff + rng.normal(0, 0.03, size=(4, 1)) + rng.normal(0, 0.1, size=(4, p)), 0, 1)
    want = _reference_interval(chat, cut)
    r = paired_delta_report(chat, cut, level=0.95)
    assert (r["delta"], r["lo"], r["hi"]) == pytest.approx(want[:3], abs=1e-12)
    assert r["df"] == pytest.approx(want[3], rel=1e-10)
    assert r["method"] == "problem+seed" and r["warning"] is None
    assert r["n_seeds_a"] == 3 and r["n_seeds_b"] == 4 and r["n_problems"] == p
    assert r["se_seed"] > r["se_problem"]  # the seeds differ by design
    # a wider level gives a wider interval, the estimate unchanged
    r99 = paired_delta_report(chat, cut, level=0.99)
    assert r99["delta"] == r["delta"] and r99["lo"] < r["lo"] and r99["hi"] > r["hi"]


def test_seed_spread_widens_the_interval_and_naive_does_not_see_it():
    rng = np.random.default_rng(5)
    base = rng.integers(0, 5, size=(1, 200)) / 4
    cut = np.repeat(base, 3, axis=0)
    chat_same = np.clip(np.repeat(base + 0.3, 3, axis=0), 0, 1)
    chat_spread = np.clip(base + np.array([[0.1], [0.3], [0.5]]), 0, 1)
    _, lo1, hi1 = paired_delta(chat_same, cut)
    _, lo2, hi2 = paired_delta(chat_spread, cut)
    assert (hi2 - lo2) > 5 * (hi1 - lo1)
    _, nlo, nhi = naive_paired_interval(chat_spread, cut)
    assert (nhi - nlo) < (hi2 - lo2) / 5


def test_one_arm_single_seed_keeps_the_other_seed_term():
    rng = np.random.default_rng(6)
    chat = rng.integers(0, 5, size=(3, 60)) / 4
    cut = rng.integers(0, 5, size=(1, 60)) / 4
    r = paired_delta_report(chat, cut)
    assert r["method"] == "problem+seed(chat only)"
    assert "cut" in r["warning"]


def test_seed_argument_does_not_change_result():
    rng = np.random.default_rng(7)
    chat = rng.integers(0, 5, size=(3, 40)) / 4
    cut = rng.integers(0, 5, size=(3, 40)) / 4
    assert paired_delta(chat, cut, seed=0) == paired_delta(chat, cut, seed=123)


def test_mean_ci_is_paired_delta_against_zero():
    rng = np.random.default_rng(8)
    y = np.clip(rng.uniform(0.1, 0.7, size=(1, 80)) + rng.normal(0, 0.05, size=(3, 1)), 0, 1)
    m, lo, hi = mean_ci(y)
    d, dlo, dhi = paired_delta(y, np.zeros((2, 80)))
    assert (m, lo, hi) == pytest.approx((d, dlo, dhi), abs=1e-12)
    assert m == pytest.approx(y.mean())
    r = mean_ci_report(y)
    assert r["n_seeds"] == 3 and r["method"] == "problem+seed"
    # clipped to [0, 1]
    m0, lo0, hi0 = mean_ci(np.zeros((3, 10)))
    assert (m0, lo0, hi0) == (0.0, 0.0, 0.0)
    _, lo1, _ = mean_ci(np.array([[0, 0, 0, 0, 0, 0, 0, 0.25]]))
    assert lo1 == 0.0


def test_naive_paired_interval_is_paired_t():
    chat = np.array([[0.5, 0.75, 1.0, 0.25, 0.5]])
    cut = np.array([[0.25, 0.5, 0.5, 0.25, 0.0]])
    d = (chat - cut).ravel()
    half = 2.7764451 * d.std(ddof=1) / math.sqrt(5)
    est, lo, hi = naive_paired_interval(chat, cut)
    assert est == pytest.approx(d.mean())
    assert (lo, hi) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-6)
    # with one seed per arm the problem-only paired_delta is the same interval
    assert paired_delta(chat, cut) == pytest.approx((est, lo, hi), abs=1e-12)


# ---------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("chat, cut, match", [
    (np.zeros(10), np.zeros((3, 10)), "2-D"),
    (np.zeros((3, 10)), np.zeros((2, 3, 10)), "2-D"),
    (np.zeros((0, 10)), np.zeros((3, 10)), "at least 1 seed"),
    (np.zeros((3, 1)), np.zeros((3, 1)), "at least 2 problems"),
    (np.zeros((3, 10)), np.zeros((3, 11)), "same problems"),
    (np.full((3, 10), np.nan), np.zeros((3, 10)), "finite"),
    (np.zeros((3, 10)), np.full((3, 10), np.inf), "finite"),
    (np.full((3, 10), 1.5), np.zeros((3, 10)), r"\[0, 1\]"),
    (np.full((3, 10), -0.1), np.zeros((3, 10)), r"\[0, 1\]"),
    ([["a", "b"]], [[0.0, 0.0]], "numeric"),
])
def test_validation(chat, cut, match):
    with pytest.raises(ValueError, match=match):
        paired_delta(chat, cut)


def test_validation_level_and_other_entry_points():
    ok = np.zeros((3, 10))
    for level in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="level"):
            paired_delta(ok, ok, level=level)
    with pytest.raises(ValueError):
        mean_ci(np.zeros(10))
    with pytest.raises(ValueError):
        naive_paired_interval(np.zeros((3, 10)), np.zeros((3, 9)))


def test_accepts_lists():
    d, lo, hi = paired_delta([[0.5, 0.75, 1.0], [0.25, 0.5, 0.75]], [[0.0, 0.25, 0.25]])
    assert d == pytest.approx(0.625 - 0.5 / 3)


# ---------------------------------------------------------------------------------------------- simulation

def _simulate(rng, n_exp, *, seed_sd_chat, seed_sd_cut, n_seeds=3, n_problems=300, delta=0.3, n_answers=4):
    """n_exp experiments at once: returns chat [N, S, P], cut [N, S, P] and the true delta / true chat mean.

    Problem difficulty is shared by both arms (drawn afresh per experiment: the problems are a sample); the chat
    arm's per-problem advantage varies around `delta`; each training seed shifts its arm's accuracy by a normal
    seed effect; each score is the mean of `n_answers` graded answers (binomial noise)."""
    shape_p = (n_exp, 1, n_problems)
    base = rng.uniform(0.15, 0.45, size=shape_p)                      # shared difficulty (cut-arm accuracy)
    adv = rng.uniform(-0.1, 0.1, size=shape_p)                        # problem x arm interaction, mean 0
    b_chat = rng.normal(0.0, seed_sd_chat, size=(n_exp, n_seeds, 1))
    b_cut = rng.normal(0.0, seed_sd_cut, size=(n_exp, n_seeds, 1))
    p_chat = np.clip(base + delta + adv + b_chat, 0.0, 1.0)
    p_cut = np.clip(base + b_cut, 0.0, 1.0)
    chat = rng.binomial(n_answers, p_chat) / n_answers
    cut = rng.binomial(n_answers, p_cut) / n_answers
    return chat, cut, delta, 0.30 + delta


def _coverage(chat, cut, truth, fn):
    hits = 0
    for c, k in zip(chat, cut):
        _, lo, hi = fn(c, k)
        hits += lo <= truth <= hi
    return hits / len(chat)


def test_simulated_coverage():
    rng = np.random.default_rng(20260509)
    n = 400

    chat, cut, delta, chat_mean = _simulate(rng, n, seed_sd_chat=0.08, seed_sd_cut=0.02)
    cov = _coverage(chat, cut, delta, paired_delta)
    cov_naive = _coverage(chat, cut, delta, naive_paired_interval)
    cov_mean = _coverage(chat, cut, chat_mean, lambda c, k: mean_ci(c))

    chat0, cut0, delta0, chat_mean0 = _simulate(rng, n, seed_sd_chat=0.0, seed_sd_cut=0.0)
    cov0 = _coverage(chat0, cut0, delta0, paired_delta)
    cov0_naive = _coverage(chat0, cut0, delta0, naive_paired_interval)
    cov0_mean = _coverage(chat0, cut0, chat_mean0, lambda c, k: mean_ci(c))

    print(f"\n[coverage, {n} simulated experiments, 3 seeds/arm, 300 problems, nominal 0.95]"
          f"\n  seeds differ (sd 0.08 chat, 0.02 cut): paired_delta {cov:.3f}  naive {cov_naive:.3f}"
          f"  mean_ci(chat) {cov_mean:.3f}"
          f"\n  no seed effects:                       paired_delta {cov0:.3f}  naive {cov0_naive:.3f}"
          f"  mean_ci(chat) {cov0_mean:.3f}")

    assert 0.90 <= cov <= 0.99
    assert cov_naive < 0.80
    assert 0.90 <= cov_mean <= 0.99
    assert cov0 >= 0.90
    assert cov0_mean >= 0.90


# --------------------------------------------------------------------------------------- one team against another

def test_run_delta_report_is_the_paired_t_interval_of_one_team_against_another():
    rng = np.random.default_rng(3)
    a, b = rng.binomial(4, 0.3, 200) / 4, rng.binomial(4, 0.2, 200) / 4
    r = run_delta_report(a, b)
    assert (r["delta"], r["lo"], r["hi"]) == pytest.approx(naive_paired_interval(a[None], b[None]))
    assert r["delta"] == pytest.approx(a.mean() - b.mean())
    assert r["method"] == "problem-only (one team each)" and r["warning"] is None
    assert (r["n_seeds_a"], r["n_seeds_b"], r["n_problems"], r["se_seed"]) == (1, 1, 200, 0.0)
    assert r["excludes_zero"] is (r["lo"] > 0 or r["hi"] < 0)
    # pairing by problem: a constant shift on every problem is known exactly
    assert run_delta_report(np.full(50, 0.5), np.full(50, 0.25))["lo"] == pytest.approx(0.25)


def test_run_delta_report_rejects_teams_of_other_problems():
    with pytest.raises(ValueError, match="same problems"):
        run_delta_report([0.0, 1.0, 0.5], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        run_delta_report([0.0, 1.5], [0.0, 1.0])
