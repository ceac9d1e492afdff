"""talktosolve.results (schema validation) and talktosolve.report (report.md, report.html, plots, terminal summary)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from talktosolve.report import PLOTS, terminal_summary, write_report
from talktosolve.results import SCHEMA_PATH, ResultsError, validate_results
from talktosolve.stats import mean_ci_report, paired_delta_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEEDS = (0, 1, 2)
N_PROBLEMS = 60


def _scores(rng, p: float, n: int = N_PROBLEMS) -> list[float]:
    """Per-problem scores: the mean of 4 graded answers, each right with probability p."""
    return [float(x) for x in rng.binomial(4, p, size=n) / 4]


def _talk(send, use, ask, agree) -> dict:
    given = None if use is None else min(1.0, use + 0.05)
    return {
        "send_a": send, "send_b": None if send is None else max(0.0, send - 0.04), "use_a": use,
        "use_b": None if use is None else max(0.0, use - 0.03), "ask_a": ask, "ask_b": ask / 2, "agree": agree,
        "use_given_sent_a": given, "use_given_sent_b": given, "chars_a": 412.5, "chars_b": 380.25,
        "send": send, "use": use, "use_given_sent": given, "ask": 0.75 * ask, "n_send": 230, "n_use": 228,
    }


def _eval(arm: str, a: str, b: str, scores: list[float], talk: dict) -> dict:
    ci = mean_ci_report(np.array([scores]))
    acc = float(np.mean(scores))
    return {"arm": arm, "player_a": a, "player_b": b, "accuracy": acc, "lo": ci["lo"], "hi": ci["hi"],
            "acc_a": min(1.0, acc + 0.01), "acc_b": max(0.0, acc - 0.01), "n_problems": len(scores),
            "n_chats": 2 * len(scores), "talk": talk, "tokens_per_message": 87.125, "truncated_share": 0.015}


def make_results() -> dict:
    """A realistic results.json of a 2 arms x 3 seeds run, built by hand (numbers like the seed's)."""
    rng = np.random.default_rng(7)
    chat_p = {0: 0.37, 1: 0.39, 2: 0.30}
    cross_p = {("chat", 0): 0.2, ("chat", 1): 0.22, ("chat", 2): 0.4, ("cut", 0): 0.03, ("cut", 1): 0.03,
               ("cut", 2): 0.02}  # chat seed 2: its trained A does better with the base as B
    cut_p = {0: 0.03, 1: 0.04, 2: 0.02}
    evals, scores = {}, {"chat": [], "cut": []}
    evals["base-chat"] = _eval("chat", "base", "base", _scores(rng, 0.11), _talk(0.67, 0.30, 0.6, 0.4))
    evals["base-cut"] = _eval("cut", "base", "base", _scores(rng, 0.03), _talk(0.66, 0.02, 0.6, 0.1))
    for arm, ps in (("chat", chat_p), ("cut", cut_p)):
        for s in SEEDS:
            sc = _scores(rng, ps[s])
            scores[arm].append(sc)
            talk = _talk(0.94 if arm == "chat" else 0.5, 0.75 if arm == "chat" else 0.01, 0.1, 0.8)
            if arm == "chat" and s == 2:
                talk = _talk(0.79, 0.46, 0.2, 0.5)
            evals[f"{arm}-s{s}"] = _eval(arm, f"runs/{arm}-s{s}", f"runs/{arm}-s{s}", sc, talk)
            evals[f"cross-{arm}-s{s}"] = _eval(arm, f"runs/{arm}-s{s}", "base", _scores(rng, cross_p[arm, s]),
                                               _talk(0.9, 0.3, 0.1, 0.5))
    arms = {}
    for arm in ("chat", "cut"):
        ci = mean_ci_report(np.array(scores[arm]))
        arms[arm] = {"seeds": {str(s): {"accuracy": evals[f"{arm}-s{s}"]["accuracy"],
                                        "lo": evals[f"{arm}-s{s}"]["lo"], "hi": evals[f"{arm}-s{s}"]["hi"],
                                        "cross_play": evals[f"cross-{arm}-s{s}"]["accuracy"]} for s in SEEDS},
                     "accuracy": ci["mean"], "lo": ci["lo"], "hi": ci["hi"], "method": ci["method"],
                     "warning": ci["warning"]}
    comp = paired_delta_report(np.array(scores["chat"]), np.array(scores["cut"]))
    curves = {}
    for arm in ("chat", "cut"):
        for s in SEEDS:
            top = chat_p[s] if arm == "chat" else cut_p[s]
            curves[f"{arm}-s{s}"] = [
                {"step": t, "reward": float(np.clip(0.1 + (top - 0.1) * t / 20 + rng.normal(0, 0.05), 0, 1)),
                 "send": 0.6 + 0.015 * t if arm == "chat" else 0.6, "use": None if t == 3 else 0.3 + 0.02 * t,
                 "ask": 0.5 - 0.02 * t} for t in range(1, 21)]
    base = evals["base-chat"]["accuracy"]
    return {
        "schema_version": 1,
        "preset": "micro",
        "config": {"arms": ["chat", "cut"], "seeds": list(SEEDS), "train": {"steps": 20, "lr": 1e-4}},
        "run": {"model": "micro", "versions": {"python": "3.11.2", "torch": "2.11.0", "transformers": None,
                                               "peft": None, "talktosolve": "0.1.0"},
                "arms": ["chat", "cut"], "seeds": list(SEEDS), "steps": 20, "device": "cpu", "gpu": None,
                "wall_seconds": 312.4567, "gpu_seconds": None, "started": "2025-01-02T03:04:05+00:00",
                "finished": "2025-01-02T03:09:17+00:00"},
        "data": {"n_train": 1024, "n_test": 300, "eligibility": None},
        "evals": evals,
        "arms": arms,
        "comparison": comp,
        "checks": {
            "halves_hold_numbers": True, "facts_disjoint_and_complete": True, "cut_never_sees_partner": True,
            "interval_excludes_zero": comp["excludes_zero"],
            "chat_beats_base": {str(s): evals[f"chat-s{s}"]["accuracy"] > base for s in SEEDS},
            "cut_near_base": {str(s): evals[f"cut-s{s}"]["accuracy"] <= evals["base-cut"]["accuracy"] + 0.05
                              for s in SEEDS},
            "cross_play_below_pair": {str(s): evals[f"cross-chat-s{s}"]["accuracy"] < evals[f"chat-s{s}"]["accuracy"]
                                      for s in SEEDS},
        },
        "curves": curves,
    }


@pytest.fixture(scope="module")
def results() -> dict:
    r = make_results()
    return json.loads(json.dumps(r))  # exactly what results.json holds after a round trip


# ------------------------------------------------------------------------------------------------ validation

def test_schema_file_is_a_valid_draft_2020_12_schema():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$schema"].endswith("2020-12/schema")
    jsonschema.Draft202012Validator.check_schema(schema)


def test_synthetic_results_validate(results):
    validate_results(results)


@pytest.mark.parametrize("mutate, path", [
    (lambda r: r["evals"]["chat-s1"].__setitem__("accuracy", 1.5), "evals.chat-s1.accuracy"),
    (lambda r: r["evals"]["base-chat"]["talk"].__setitem__("send", -0.1), "evals.base-chat.talk.send"),
    (lambda r: r["run"].pop("gpu_seconds"), "run"),
    (lambda r: r["checks"]["chat_beats_base"].__setitem__("1", "yes"), "checks.chat_beats_base.1"),
    (lambda r: r["curves"]["cut-s2"][4].__setitem__("reward", None), "curves.cut-s2[4].reward"),
    (lambda r: r["comparison"].__setitem__("delta", float("nan")), "comparison.delta"),
    (lambda r: r["evals"].pop("cross-cut-s1"), "evals"),
    (lambda r: r["evals"]["cut-s0"].__setitem__("arm", "chat"), "evals.cut-s0.arm"),
    (lambda r: r["arms"]["chat"]["seeds"].pop("2"), "arms.chat.seeds"),
    (lambda r: r["checks"].__setitem__("interval_excludes_zero", not r["comparison"]["excludes_zero"]),
     "checks.interval_excludes_zero"),
])
def test_broken_results_fail_with_the_path(results, mutate, path):
    broken = copy.deepcopy(results)
    mutate(broken)
    with pytest.raises(ResultsError) as err:
        validate_results(broken)
    assert f"{path}:" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_talk_rates_may_be_null(results):
    r = copy.deepcopy(results)
    r["evals"]["chat-s0"]["talk"].update(send=None, use=None, use_given_sent=None)
    validate_results(r)


def test_one_arm_run_has_no_comparison(results):
    r = copy.deepcopy(results)
    r["run"]["arms"] = ["chat"]
    for name in [n for n in r["evals"] if "cut" in n]:
        del r["evals"][name]
    del r["arms"]["cut"]
    r["curves"] = {k: v for k, v in r["curves"].items() if k.startswith("chat")}
    r["checks"]["cut_near_base"] = {}
    r["checks"]["interval_excludes_zero"] = None
    with pytest.raises(ResultsError, match="comparison"):
        validate_results(r)
    r["comparison"] = None
    validate_results(r)
    assert "verdict: no chat-vs-cut comparison" in terminal_summary(r)


# -------------------------------------------------------------------------------------------------- report

def test_write_report(results, tmp_path):
    written = write_report(results, tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert names == {"report.md", "report.html"} | {f"plots/{p}" for p in PLOTS}
    for path in written:
        assert path.exists() and path.stat().st_size > 0
    for name in PLOTS:
        data = (tmp_path / "plots" / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert b"Software" not in data and b"matplotlib" not in data.lower()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]

    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    comp = results["comparison"]
    assert f"{comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}]" in md
    assert ("excludes 0" if comp["excludes_zero"] else "includes 0") in md
    for key in results["checks"]:
        assert key in md
    assert results["checks"]["cross_play_below_pair"]["2"] is False
    assert "| cross_play_below_pair | 2 | ✗ |" in md  # per-seed maps are expanded, a failure shows ✗
    assert "| cross_play_below_pair | 0 | ✓ |" in md
    assert "| halves_hold_numbers |  | ✓ |" in md
    assert f"{results['evals']['cross-chat-s0']['accuracy']:.3f}" in md
    assert "GPU time | –" in md  # None on CPU
    assert "312.457 s" in md
    for name in PLOTS:
        assert f"](plots/{name})" in md

    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    for name in PLOTS:
        assert f'src="plots/{name}"' in page
    assert "<link" not in page and "<script" not in page


def test_writing_twice_is_byte_identical(results, tmp_path):
    first = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in write_report(results, tmp_path / "a")}
    again = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in write_report(results, tmp_path / "a")}
    other = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in write_report(results, tmp_path / "b")}
    assert first == again == other


def test_write_report_validates_first(results, tmp_path):
    broken = copy.deepcopy(results)
    broken["arms"]["cut"]["accuracy"] = 2.0
    with pytest.raises(ResultsError, match=r"arms\.cut\.accuracy"):
        write_report(broken, tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_terminal_summary(results):
    text = terminal_summary(results)
    text.encode("ascii")  # plain text any terminal prints
    comp = results["comparison"]
    assert f"delta chat - cut: {comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}]" in text
    assert "verdict: the interval" in text
    assert "checks: " in text and "failed: cross_play_below_pair[seed 2]" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("evaluation"))
    rows = lines[header + 2: header + 2 + len(results["evals"])]
    assert len({len(r) for r in rows}) == 1  # aligned columns: every evaluation row has the same width
    row = next(line for line in lines if line.startswith("base-chat "))
    ev = results["evals"]["base-chat"]
    assert f"{ev['accuracy']:.3f}" in row and f"[{ev['lo']:.3f}, {ev['hi']:.3f}]" in row
    assert "0.670" in row and "0.300" in row
