"""talktosolve.experiment.results (schema validation) and talktosolve.experiment.report (report.md, report.html, plots, terminal summary)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from talktosolve.experiment.plan import eval_kind
from talktosolve.experiment.report import PLOTS, render_markdown, write_report
from talktosolve.experiment.results import SCHEMA_PATH, ResultsError, find_eval, validate_results
from talktosolve.experiment.summary import terminal_summary
from talktosolve.stats import mean_ci_report, paired_delta_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEEDS = (0, 1, 2)
N_PROBLEMS = 60
CHATS_PER_PROBLEM = 2

PAPER = {"seats": ["A", "B"], "order": ["A", "B", "A", "B"], "limits": [160, 160, 384, 384], "finals": [2, 3]}
THREE = {"seats": ["A", "B", "C"], "order": ["A", "B", "C", "A", "B", "C"], "limits": [160, 160, 160, 384, 384, 384],
         "finals": [3, 4, 5]}

# Success rates of each evaluation's graded answers (numbers like the seed's).
BASE_P = {"chat": 0.11, "cut": 0.03, "full": 0.30}
TEAM_P = {"chat": {0: 0.37, 1: 0.39, 2: 0.30}, "cut": {0: 0.03, 1: 0.04, 2: 0.02}, "full": {0: 0.6, 1: 0.62, 2: 0.58}}
CROSS_P = {"chat": {0: 0.2, 1: 0.22, 2: 0.4},  # chat seed 2: its trained first seat does better with the base
           "cut": {0: 0.03, 1: 0.03, 2: 0.02}, "full": {0: 0.4, 1: 0.41, 2: 0.39}}
OTHERS_P = {"chat": {0: 0.15, 1: 0.18, 2: 0.2}, "cut": {0: 0.02, 1: 0.03, 2: 0.03}, "full": {0: 0.35, 1: 0.36, 2: 0.3}}


def _scores(rng, p: float, n_seats: int, n: int = N_PROBLEMS) -> list[float]:
    """Per-problem scores: the mean of the graded answers (every seat of every chat), each right with
    probability p."""
    k = n_seats * CHATS_PER_PROBLEM
    return [float(x) for x in rng.binomial(k, p, size=n) / k]


def _talk(seats, send, use, ask, agree) -> dict:
    given = None if use is None else min(1.0, use + 0.05)
    per_seat = {}
    for i, seat in enumerate(seats):
        per_seat[seat] = {"send": None if send is None else max(0.0, send - 0.04 * i),
                          "use": None if use is None else max(0.0, use - 0.03 * i), "use_given_sent": given,
                          "ask": ask / (i + 1), "chars": 412.5 - 32.25 * i}
    return {"send": send, "use": use, "use_given_sent": given, "ask": 0.75 * ask, "agree": agree, "n_send": 230,
            "n_use": 228, "seats": per_seat}


def _eval(arm: str, seats: dict, scores: list[float], talk: dict) -> dict:
    ci = mean_ci_report(np.array([scores]))
    acc = float(np.mean(scores))
    per_seat = {seat: float(np.clip(acc + 0.01 * (1 - i), 0, 1)) for i, seat in enumerate(seats)}
    return {"arm": arm, "seats": dict(seats), "accuracy": acc, "lo": ci["lo"], "hi": ci["hi"], "acc": per_seat,
            "n_problems": len(scores), "n_chats": CHATS_PER_PROBLEM * len(scores), "talk": talk,
            "tokens_per_message": 87.125, "truncated_share": 0.015}


def make_results(protocol: dict = PAPER, arms=("chat", "cut"), comparisons=("chat-cut",)) -> dict:
    """A realistic results.json (schema 2) of a run of `arms` x 3 seeds with `protocol`'s seats, built by hand."""
    rng = np.random.default_rng(7)
    seats = protocol["seats"]
    n = len(seats)

    def team(first, rest):
        return dict(zip(seats, [first] + [rest] * (n - 1)))

    runs = {f"{arm}-s{s}": {"arm": arm, "seed": s} for arm in arms for s in SEEDS}
    evals, scores = {}, {arm: [] for arm in arms}
    for arm in arms:
        evals[f"base-{arm}"] = _eval(arm, team("base", "base"), _scores(rng, BASE_P[arm], n),
                                     _talk(seats, 0.67 - 0.01 * len(evals), 0.30 if arm != "cut" else 0.02, 0.6, 0.4))
    for arm in arms:
        for s in SEEDS:
            run = f"{arm}-s{s}"
            sc = _scores(rng, TEAM_P[arm][s], n)
            scores[arm].append(sc)
            talk = _talk(seats, 0.5 if arm == "cut" else 0.94, 0.01 if arm == "cut" else 0.75, 0.1, 0.8)
            if arm == "chat" and s == 2:
                talk = _talk(seats, 0.79, 0.46, 0.2, 0.5)
            evals[run] = _eval(arm, team(run, run), sc, talk)
            evals[f"cross-{run}"] = _eval(arm, team(run, "base"), _scores(rng, CROSS_P[arm][s], n),
                                          _talk(seats, 0.9, 0.3, 0.1, 0.5))
            evals[f"cross-others-{run}"] = _eval(arm, team("base", run), _scores(rng, OTHERS_P[arm][s], n),
                                                 _talk(seats, 0.85, 0.25, 0.1, 0.45))
    arm_entries = {}
    for arm in arms:
        ci = mean_ci_report(np.array(scores[arm]))
        arm_entries[arm] = {
            "seeds": {str(s): {"accuracy": evals[f"{arm}-s{s}"]["accuracy"], "lo": evals[f"{arm}-s{s}"]["lo"],
                               "hi": evals[f"{arm}-s{s}"]["hi"],
                               "cross_play": evals[f"cross-{arm}-s{s}"]["accuracy"],
                               "cross_play_others": evals[f"cross-others-{arm}-s{s}"]["accuracy"]} for s in SEEDS},
            "accuracy": ci["mean"], "lo": ci["lo"], "hi": ci["hi"], "method": ci["method"], "warning": ci["warning"]}
    comps = {}
    for text in comparisons:
        a, b = text.split("-")
        if a in arms and b in arms:
            rep = paired_delta_report(np.array(scores[a]), np.array(scores[b]))
            comps[text] = {"a": a, "b": b, **rep}
        else:
            comps[text] = None
    curves = {}
    for run, r in runs.items():
        top = TEAM_P[r["arm"]][r["seed"]]
        curves[run] = [
            {"step": t, "reward": float(np.clip(0.1 + (top - 0.1) * t / 20 + rng.normal(0, 0.05), 0, 1)),
             "send": 0.6 + 0.015 * t if r["arm"] != "cut" else 0.6, "use": None if t == 3 else 0.3 + 0.02 * t,
             "ask": 0.5 - 0.02 * t} for t in range(1, 21)]
    base = evals["base-chat" if "chat" in arms else f"base-{arms[0]}"]["accuracy"]
    checks = {
        "hands_hold_numbers": True, "hands_disjoint_and_complete": True, "views_respect_arms": True,
        "interval_excludes_zero": {k: None if c is None else c["excludes_zero"] for k, c in comps.items()},
        "chat_beats_base": {str(s): evals[f"chat-s{s}"]["accuracy"] > base for s in SEEDS} if "chat" in arms else {},
        "cut_near_base": {str(s): evals[f"cut-s{s}"]["accuracy"] <= base + 0.05 for s in SEEDS}
        if "cut" in arms else {},
        "cross_play_below_pair": {str(s): evals[f"cross-chat-s{s}"]["accuracy"] < evals[f"chat-s{s}"]["accuracy"]
                                  for s in SEEDS} if "chat" in arms else {},
    }
    return {
        "schema_version": 2,
        "preset": "micro",
        "config": {"arms": list(arms), "seeds": list(SEEDS), "comparisons": list(comparisons),
                   "train": {"steps": 20, "lr": 1e-4}},
        "run": {"model": "micro", "versions": {"python": "3.11.2", "torch": "2.11.0", "transformers": None,
                                               "peft": None, "talktosolve": "0.1.0"},
                "protocol": copy.deepcopy(protocol), "arms": list(arms), "seeds": list(SEEDS), "steps": 20,
                "device": "cpu", "gpu": None, "wall_seconds": 312.4567, "gpu_seconds": None,
                "started": "2025-01-02T03:04:05+00:00", "finished": "2025-01-02T03:09:17+00:00"},
        "data": {"n_train": 1024, "n_test": 300, "eligibility": None},
        "runs": runs,
        "evals": evals,
        "arms": arm_entries,
        "comparisons": comps,
        "checks": checks,
        "curves": curves,
    }


VARIANTS = {
    "two seats, chat and cut": {},
    "three seats": {"protocol": THREE},
    "one arm": {"arms": ("chat",)},
    "three arms, two comparisons": {"arms": ("chat", "cut", "full"), "comparisons": ("chat-cut", "full-chat")},
}


def _round_trip(r: dict) -> dict:
    return json.loads(json.dumps(r))  # exactly what results.json holds after a round trip


@pytest.fixture(scope="module")
def results() -> dict:
    return _round_trip(make_results())


@pytest.fixture(scope="module", params=list(VARIANTS))
def any_results(request) -> dict:
    return _round_trip(make_results(**VARIANTS[request.param]))


# ------------------------------------------------------------------------------------------------ validation

def test_schema_file_is_a_valid_draft_2020_12_schema():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$schema"].endswith("2020-12/schema")
    assert schema["properties"]["schema_version"] == {"const": 2}
    jsonschema.Draft202012Validator.check_schema(schema)


def test_synthetic_results_of_any_seats_and_arms_validate(any_results):
    validate_results(any_results)


def _extra_eval(r: dict) -> None:
    """A team the recipe never plays: two different runs of one arm side by side."""
    ev = copy.deepcopy(r["evals"]["chat-s0"])
    ev["seats"] = {"A": "chat-s0", "B": "chat-s1"}
    r["evals"]["chat-s0-with-chat-s1"] = ev


def _duplicate_eval(r: dict) -> None:
    """The other side recorded as a second cross-play: the other side itself is then missing."""
    r["evals"]["cross-others-chat-s0"]["seats"] = dict(r["evals"]["cross-chat-s0"]["seats"])


@pytest.mark.parametrize("mutate, path", [
    (lambda r: r["evals"]["chat-s1"].__setitem__("accuracy", 1.5), "evals.chat-s1.accuracy"),
    (lambda r: r["evals"]["base-chat"]["talk"].__setitem__("send", -0.1), "evals.base-chat.talk.send"),
    (lambda r: r["evals"]["base-chat"]["talk"]["seats"]["B"].__setitem__("use", 1.1),
     "evals.base-chat.talk.seats.B.use"),
    (lambda r: r["evals"]["chat-s0"]["talk"]["seats"]["A"].pop("chars"), "evals.chat-s0.talk.seats.A"),
    (lambda r: r["run"].pop("gpu_seconds"), "run"),
    (lambda r: r["run"].pop("protocol"), "run"),
    (lambda r: r["run"]["protocol"].__setitem__("finals", [2]), "run.protocol"),
    (lambda r: r["run"]["protocol"].__setitem__("order", ["A", "B", "C", "B"]), "run.protocol"),
    (lambda r: r.__setitem__("schema_version", 1), "schema_version"),
    (lambda r: r["checks"]["chat_beats_base"].__setitem__("1", "yes"), "checks.chat_beats_base.1"),
    (lambda r: r["checks"].pop("views_respect_arms"), "checks"),
    (lambda r: r["curves"]["cut-s2"][4].__setitem__("reward", None), "curves.cut-s2[4].reward"),
    (lambda r: r["comparisons"]["chat-cut"].__setitem__("delta", float("nan")), "comparisons.chat-cut.delta"),
    (lambda r: r["comparisons"]["chat-cut"].__setitem__("delta", r["comparisons"]["chat-cut"]["hi"] + 0.01),
     "comparisons.chat-cut.delta"),
    (lambda r: r["comparisons"]["chat-cut"].update(a="cut", b="chat"), "comparisons.chat-cut"),
    (lambda r: r["comparisons"]["chat-cut"].pop("n_seeds_b"), "comparisons.chat-cut"),
    (lambda r: r["comparisons"].pop("chat-cut"), "comparisons"),
    (lambda r: r["evals"].pop("cross-cut-s1"), "evals"),
    (lambda r: r["evals"].pop("cross-others-chat-s2"), "evals"),
    (_duplicate_eval, "evals"),
    (_extra_eval, "evals.chat-s0-with-chat-s1"),
    (lambda r: r["evals"]["cut-s0"].__setitem__("arm", "full"), "evals.cut-s0.arm"),
    (lambda r: r["evals"]["cut-s0"].__setitem__("arm", "chat"), "evals.cut-s0.seats.A"),  # not a chat-arm run
    (lambda r: r["evals"]["cross-chat-s1"]["seats"].__setitem__("B", "runs/chat-s1"), "evals.cross-chat-s1.seats.B"),
    (lambda r: r["evals"]["chat-s1"].__setitem__("seats", {"B": "chat-s1", "A": "chat-s1"}), "evals.chat-s1.seats"),
    (lambda r: r["evals"]["chat-s1"]["acc"].pop("B"), "evals.chat-s1.acc"),
    (lambda r: r["evals"]["chat-s1"]["acc"].__setitem__("C", 0.5), "evals.chat-s1.acc"),
    (lambda r: r["runs"]["chat-s1"].__setitem__("seed", 2), "runs.chat-s1"),
    (lambda r: r["runs"].pop("cut-s0"), "runs"),
    (lambda r: r["arms"]["chat"]["seeds"].pop("2"), "arms.chat.seeds"),
    (lambda r: r["arms"]["chat"]["seeds"]["0"].pop("cross_play_others"), "arms.chat.seeds.0"),
    (lambda r: r["checks"]["interval_excludes_zero"].__setitem__(
        "chat-cut", not r["comparisons"]["chat-cut"]["excludes_zero"]), "checks.interval_excludes_zero.chat-cut"),
    (lambda r: r["checks"]["interval_excludes_zero"].pop("chat-cut"), "checks.interval_excludes_zero"),
    (lambda r: r["checks"]["cut_near_base"].pop("1"), "checks.cut_near_base"),
])
def test_broken_results_fail_with_the_path(results, mutate, path):
    broken = copy.deepcopy(results)
    mutate(broken)
    with pytest.raises(ResultsError) as err:
        validate_results(broken)
    assert f"{path}:" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_talk_of_other_seats_than_the_protocols_fails_with_the_path(results):
    broken = copy.deepcopy(results)
    talk = broken["evals"]["chat-s0"]["talk"]
    talk["seats"] = {"A": talk["seats"]["A"], "X": talk["seats"]["B"]}
    with pytest.raises(ResultsError, match=r"evals\.chat-s0\.talk\.seats:"):
        validate_results(broken)


def test_talk_rates_may_be_null(results):
    r = copy.deepcopy(results)
    r["evals"]["chat-s0"]["talk"].update(send=None, use=None, use_given_sent=None)
    r["evals"]["chat-s0"]["talk"]["seats"]["B"].update(send=None, use=None, use_given_sent=None, chars=None)
    validate_results(r)


def test_evaluations_are_identified_by_their_records_not_their_names(results):
    """Every entry is one kind of evaluation, read from who sits where; renamed, the results stay valid and the
    report's cross-play figures are the same."""
    kinds = {name: eval_kind(ev) for name, ev in results["evals"].items()}
    assert kinds["base-cut"] == ("base", None)
    assert kinds["chat-s1"] == ("team", "chat-s1")
    assert kinds["cross-cut-s2"] == ("cross", "cut-s2")
    assert kinds["cross-others-chat-s0"] == ("cross_others", "chat-s0")
    assert find_eval(results, "cut", "cross_others", "cut-s1") == ("cross-others-cut-s1",
                                                                   results["evals"]["cross-others-cut-s1"])
    assert find_eval(results, "chat", "team", "cut-s1") is None  # a run of the other arm

    renamed = copy.deepcopy(results)
    renamed["evals"] = {f"e{i}": ev for i, ev in enumerate(results["evals"].values())}
    validate_results(renamed)

    def cross_play_section(md: str) -> str:
        return md[md.index("## Cross-play"):md.index("## Run")]

    section = cross_play_section(render_markdown(results))
    assert section == cross_play_section(render_markdown(renamed))
    seed1 = results["arms"]["chat"]["seeds"]["1"]
    assert (f"| chat | 1 | {results['evals']['base-chat']['accuracy']:.3f} | {seed1['accuracy']:.3f} | "
            f"{seed1['cross_play']:.3f} | {seed1['cross_play_others']:.3f} | "
            f"{seed1['cross_play'] - seed1['accuracy']:+.3f} |") in section


def test_one_arm_run_has_a_null_comparison():
    r = _round_trip(make_results(arms=("chat",)))
    assert r["comparisons"] == {"chat-cut": None} and r["checks"]["interval_excludes_zero"] == {"chat-cut": None}
    validate_results(r)
    # A comparison whose arm was not run must be null, and its check with it.
    full = _round_trip(make_results())
    broken = copy.deepcopy(r)
    broken["comparisons"]["chat-cut"] = full["comparisons"]["chat-cut"]
    with pytest.raises(ResultsError, match=r"comparisons\.chat-cut: must be null"):
        validate_results(broken)
    broken = copy.deepcopy(r)
    broken["checks"]["interval_excludes_zero"]["chat-cut"] = True
    with pytest.raises(ResultsError, match=r"checks\.interval_excludes_zero\.chat-cut: must be null"):
        validate_results(broken)
    # ... and the cut arm's check map is empty.
    broken = copy.deepcopy(r)
    broken["checks"]["cut_near_base"] = {"0": True}
    with pytest.raises(ResultsError, match=r"checks\.cut_near_base"):
        validate_results(broken)
    # Both arms run: the comparison may not be null.
    broken = copy.deepcopy(full)
    broken["comparisons"]["chat-cut"] = None
    broken["checks"]["interval_excludes_zero"]["chat-cut"] = None
    with pytest.raises(ResultsError, match=r"comparisons\.chat-cut: is null but"):
        validate_results(broken)
    text = terminal_summary(r)
    assert "delta chat-cut: - (an arm was not run)" in text
    assert "verdict: no chat-cut comparison: this run has only the chat arm" in text
    md = render_markdown(r)
    assert "Verdict: no chat-cut comparison: this run has only the chat arm." in md
    assert "| cut_near_base | – | – |" in md  # a check that does not apply
    assert "| interval_excludes_zero | chat-cut | – |" in md


# -------------------------------------------------------------------------------------------------- report

def test_write_report_writes_every_file_for_any_seats_and_arms(any_results, tmp_path):
    written = write_report(any_results, tmp_path)
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
    seats = any_results["run"]["protocol"]["seats"]
    for name, ev in any_results["evals"].items():
        assert f"| {name} |" in md  # every evaluation has its row
        assert f"{ev['accuracy']:.3f}" in md
    for key, comp in any_results["comparisons"].items():
        if comp is not None:
            assert f"{comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}]" in md
            assert f"| interval_excludes_zero | {key} | {'✓' if comp['excludes_zero'] else '✗'} |" in md
    for key in any_results["checks"]:
        assert key in md
    header = "| evaluation | who | accuracy | 95% interval | " + " | ".join(seats) + " | problems |"
    assert header in md  # one accuracy column per seat
    for seat in seats:
        assert f"{seat} send / use" in md
    assert "seats " + ", ".join(seats) + "; turns " + ", ".join(any_results["run"]["protocol"]["order"]) in md
    for arm in any_results["run"]["arms"]:
        assert f"| {arm} (all seeds) |" in md
    for name in PLOTS:
        assert f"](plots/{name})" in md

    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    for name in PLOTS:
        assert f'src="plots/{name}"' in page
    assert "<link" not in page and "<script" not in page


def test_report_shows_the_paper_run(results, tmp_path):
    write_report(results, tmp_path)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    comp = results["comparisons"]["chat-cut"]
    assert f"chat − cut = {comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}]" in md
    assert ("excludes 0" if comp["excludes_zero"] else "includes 0") in md
    assert f"{comp['n_seeds_a']} chat and {comp['n_seeds_b']} cut training seeds" in md
    assert results["checks"]["cross_play_below_pair"]["2"] is False
    assert "| cross_play_below_pair | 2 | ✗ |" in md  # per-seed maps are expanded, a failure shows ✗
    assert "| cross_play_below_pair | 0 | ✓ |" in md
    assert "| hands_hold_numbers |  | ✓ |" in md
    assert "| views_respect_arms |  | ✓ |" in md
    assert f"{results['evals']['cross-chat-s0']['accuracy']:.3f}" in md
    assert f"{results['evals']['cross-others-chat-s0']['accuracy']:.3f}" in md
    assert "| cross-chat-s0 | trained A (chat-s0) + base B |" in md
    assert "| cross-others-cut-s1 | base A + trained B (cut-s1) |" in md
    assert "GPU time | –" in md  # None on CPU
    assert "312.457 s" in md


def test_report_names_the_cpu_a_run_ran_on(results, tmp_path):
    """Pinned CPU figures can differ across processor makers, so the Run table names the machine when recorded."""
    res = copy.deepcopy(results)
    res["run"]["cpu"] = {"pins": {"OMP_NUM_THREADS": "1"}, "pinned": "before torch was imported", "threads": 1,
                         "processor": {"vendor": "AuthenticAMD", "model": "AMD EPYC", "avx512": True}}
    validate_results(res)
    write_report(res, tmp_path)
    assert "| CPU | AuthenticAMD AMD EPYC, AVX-512; 1 thread(s); pins OMP_NUM_THREADS=1" in \
        (tmp_path / "report.md").read_text(encoding="utf-8")


def test_report_of_three_seats_names_every_seat():
    r = _round_trip(make_results(protocol=THREE))
    md = render_markdown(r)
    assert "· 3 seats ·" in md
    assert "| cross-chat-s0 | trained A (chat-s0) + base B, C |" in md
    assert "| cross-others-chat-s0 | base A + trained B, C (chat-s0) |" in md
    ev = r["evals"]["chat-s1"]
    assert (f"| chat-s1 | trained team chat-s1 | {ev['accuracy']:.3f} | [{ev['lo']:.3f}, {ev['hi']:.3f}] | "
            f"{ev['acc']['A']:.3f} | {ev['acc']['B']:.3f} | {ev['acc']['C']:.3f} | {ev['n_problems']} |") in md
    c = r["evals"]["base-chat"]["talk"]["seats"]["C"]
    assert f"{c['send']:.3f} / {c['use']:.3f}" in md
    assert "final turns 3, 4, 5" in md
    # Three seats: an evaluation with the run in two seats of three is none of the recipe's.
    broken = copy.deepcopy(r)
    broken["evals"]["cross-chat-s0"]["seats"]["C"] = "chat-s0"
    with pytest.raises(ResultsError, match=r"evals"):
        validate_results(broken)
    broken = copy.deepcopy(r)
    broken["evals"]["chat-s0"]["acc"].pop("C")
    with pytest.raises(ResultsError, match=r"evals\.chat-s0\.acc:"):
        validate_results(broken)


def test_report_of_several_comparisons_heads_each_and_judges_the_first():
    r = _round_trip(make_results(**VARIANTS["three arms, two comparisons"]))
    md = render_markdown(r)
    chat_cut, full_chat = r["comparisons"]["chat-cut"], r["comparisons"]["full-chat"]
    assert (full_chat["a"], full_chat["b"]) == ("full", "chat")
    assert f"**full − chat = {full_chat['delta']:+.3f}" in md and f"**chat − cut = {chat_cut['delta']:+.3f}" in md
    text = terminal_summary(r)
    assert f"delta full - chat: {full_chat['delta']:+.3f}" in text
    verdict = next(line for line in text.splitlines() if line.startswith("verdict: "))
    assert ("chat" in verdict and "cut" in verdict) and "full" not in verdict


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_writing_twice_is_byte_identical(variant, tmp_path):
    results = _round_trip(make_results(**VARIANTS[variant]))
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
    comp = results["comparisons"]["chat-cut"]
    assert f"delta chat - cut: {comp['delta']:+.3f} [{comp['lo']:+.3f}, {comp['hi']:+.3f}]" in text
    assert "verdict: the interval" in text
    assert "checks: " in text and "failed: cross_play_below_pair[2]" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("evaluation"))
    rows = lines[header + 2: header + 2 + len(results["evals"])]
    assert len(rows) == len(results["evals"]) and len({len(r) for r in rows}) == 1  # aligned columns
    assert {r.split()[0] for r in rows} == set(results["evals"])  # every evaluation, once
    row = next(line for line in lines if line.startswith("base-chat "))
    ev = results["evals"]["base-chat"]
    assert f"{ev['accuracy']:.3f}" in row and f"[{ev['lo']:.3f}, {ev['hi']:.3f}]" in row
    assert "0.670" in row and "0.300" in row
    table = next(i for i, line in enumerate(lines) if line.startswith("trained model"))
    assert "cross-play (A)" in lines[table] and "other side" in lines[table]
    cross = next(line for line in lines[table:] if line.startswith("chat-s2 "))
    seed2 = results["arms"]["chat"]["seeds"]["2"]
    assert f"{seed2['cross_play']:.3f}" in cross and f"{seed2['cross_play_others']:.3f}" in cross


def test_terminal_summary_of_any_seats_and_arms_is_ascii(any_results):
    text = terminal_summary(any_results)
    text.encode("ascii")
    assert "seats " + ", ".join(any_results["run"]["protocol"]["seats"]) in text
    for key, comp in any_results["comparisons"].items():
        if comp is None:
            assert f"delta {key}: - (an arm was not run)" in text
        else:
            assert f"delta {comp['a']} - {comp['b']}: {comp['delta']:+.3f}" in text
