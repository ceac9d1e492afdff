"""The partner-mixture recipe end to end (`tiny-partners`: tiny plus the variant `mix`, the chat arm trained with
half its problems seating the frozen base, and the cross-seed matrix): schema-valid results holding the variant
and the matrix, the partner record in the variant's transcripts, the report's heat map; a rerun skips all."""

import json

import pytest

from talktosolve.cli import main
from talktosolve.experiment.results import find_eval, validate_results
from talktosolve.store import read_jsonl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-partners") / "rec"
    assert main(["recipe", "--preset", "tiny-partners", "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_the_variant_runs_are_recorded_and_compared_with_their_arm(run):
    out, results = run
    validate_results(results)
    assert results["runs"]["mix-s1"] == {"arm": "chat", "seed": 1, "variant": "mix"}
    v = results["variant"]
    assert (v["name"], v["arm"], v["partners"]) == ("mix", "chat", 0.5)
    assert set(v["against_arm"]) == {"team", "cross", "cross_others", "both_sides"}
    team = [find_eval(results, "chat", "team", f"{line}-s{s}")[1]["accuracy"] for line in ("mix", "chat")
            for s in (0, 1)]
    assert v["against_arm"]["team"]["delta"] == pytest.approx((team[0] + team[1] - team[2] - team[3]) / 2)


def test_the_matrix_diagonal_is_each_team_and_its_cells_are_the_cross_seed_evaluations(run):
    _, results = run
    assert set(results["cross_seed"]) == {"chat", "cut", "mix"}
    m = results["cross_seed"]["chat"]
    assert m["runs"] == ["chat-s0", "chat-s1"]
    for i, a in enumerate(m["runs"]):
        for j, b in enumerate(m["runs"]):
            seats = {"A": a, "B": b}
            (entry,) = [e for e in results["evals"].values() if e["seats"] == seats]
            assert m["accuracy"][i][j] == entry["accuracy"]
    assert results["evals"]["chat-s0-with-chat-s1"]["seats"] == {"A": "chat-s0", "B": "chat-s1"}


def test_half_of_each_step_of_a_mix_run_seats_the_base(run):
    out, _ = run
    rows = read_jsonl(out / "runs" / "mix-s0" / "transcripts.jsonl")
    for step in {r["step"] for r in rows}:
        mine = [r for r in rows if r["step"] == step]
        assert sum(r["partner_seat"] is not None for r in mine) == len(mine) // 2
    assert "partner_seat" not in read_jsonl(out / "runs" / "chat-s0" / "transcripts.jsonl")[0]


def test_the_report_draws_the_matrix_and_a_rerun_skips_everything(run, capsys):
    out, results = run
    report = (out / "report.md").read_text()
    assert "## Cross-seed matrix" in report and "## Variant mix" in report
    assert (out / "plots" / "cross_seed.png").stat().st_size > 0
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.suffix in (".jsonl", ".safetensors")
              or p.name == "summary.json"}
    assert main(["recipe", "--preset", "tiny-partners", "--out", str(out), "--quiet"]) == 0
    assert "self - cross-seed chat" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((out / "results.json").read_text())["cross_seed"] == results["cross_seed"]


def test_a_missing_cross_seed_evaluation_or_an_unasked_section_fails_with_its_path(run):
    import copy

    from talktosolve.experiment.results import ResultsError

    _, results = run
    broken = copy.deepcopy(results)
    del broken["evals"]["mix-s1-with-mix-s0"]
    with pytest.raises(ResultsError, match=r"missing the evaluation of arm chat with seats \['mix-s1', 'mix-s0'\]"):
        validate_results(broken)
    broken = copy.deepcopy(results)
    broken["config"]["eval"]["cross_seed"] = False
    with pytest.raises(ResultsError, match="cross_seed: must be present exactly when"):
        validate_results(broken)
    broken = copy.deepcopy(results)
    broken["cross_seed"]["chat"]["accuracy"][0][1] = 0.99
    with pytest.raises(ResultsError, match=r"cross_seed.chat.accuracy\[0\]\[1\]"):
        validate_results(broken)
    broken = copy.deepcopy(results)
    broken["config"]["variant"]["name"] = ""
    with pytest.raises(ResultsError, match="variant: must be present exactly when"):
        validate_results(broken)
