"""The three-seat recipe end to end (`tiny-3`: seats A, B, C; turns A, B, C, A, B, C; arms chat, cut, full on the
micro-teams base): schema-valid results with every seat, arm and comparison; transcripts that follow the protocol
and the arms' deals; the report; a rerun that skips everything; and a run killed anywhere (`kill -9`) and rerun
that ends as the uninterrupted one."""

import json
import shutil

import pytest
from helpers import kill_and_rerun

from talktosolve.cli import main
from talktosolve.experiment.results import find_eval, validate_results
from talktosolve.store import read_jsonl

pytestmark = pytest.mark.slow

SEATS = ["A", "B", "C"]


@pytest.fixture(scope="module")
def run(tiny3_cli):
    return tiny3_cli.out, tiny3_cli.results


def test_results_hold_every_seat_arm_and_comparison(run):
    out, results = run
    validate_results(results)
    assert results["run"]["protocol"] == {"seats": SEATS, "order": SEATS * 2, "limits": [16] * 3 + [36] * 3,
                                          "finals": [3, 4, 5]}
    assert results["run"]["arms"] == ["chat", "cut", "full"]
    assert set(results["comparisons"]) == {"chat-cut", "full-chat"}
    full_chat = results["comparisons"]["full-chat"]
    assert (full_chat["a"], full_chat["b"]) == ("full", "chat")
    assert full_chat["delta"] == pytest.approx(results["arms"]["full"]["accuracy"] - results["arms"]["chat"]["accuracy"])
    for entry in results["evals"].values():
        assert list(entry["seats"]) == SEATS and list(entry["acc"]) == SEATS and list(entry["talk"]["seats"]) == SEATS
    cross = find_eval(results, "chat", "cross", "chat-s0")[1]
    assert cross["seats"] == {"A": "chat-s0", "B": "base", "C": "base"}
    others = find_eval(results, "chat", "cross_others", "chat-s1")[1]
    assert others["seats"] == {"A": "base", "B": "chat-s1", "C": "chat-s1"}
    checks = results["checks"]
    assert checks["views_respect_arms"] is True and checks["hands_hold_numbers"] is True
    assert set(checks["interval_excludes_zero"]) == {"chat-cut", "full-chat"}


def test_transcripts_follow_the_protocol_and_each_arms_deal(run):
    out, _ = run
    for arm in ("chat", "cut", "full"):
        chats = read_jsonl(out / "evals" / f"{arm}-s0" / "chats.jsonl")
        assert chats and all(c["arm"] == arm for c in chats)
        for c in chats:
            assert [m["speaker"] for m in c["messages"]] == SEATS * 2
            if arm == "full":
                assert all(hand == c["facts"] for hand in c["hands"].values())
            else:
                assert [c["hands"][s] for s in SEATS] == [c["facts"][k::3] for k in range(3)]
            assert c["reward"] == pytest.approx(sum(c["correct"].values()) / 3)
        # In the full arm no seat has numbers of its own, so send and use are undefined, never 0.
    full_talk = json.loads((out / "evals" / "full-s0" / "summary.json").read_text())["talk"]
    assert full_talk["send"] is None and full_talk["use"] is None


def test_report_names_every_seat_and_a_rerun_skips_everything(run, capsys, tmp_path):
    shared, results = run
    out = tmp_path / "rec"
    shutil.copytree(shared, out)  # the rerun rewrites results.json and the report: not in the shared folder
    report = (out / "report.md").read_text()
    assert "seats A, B, C; turns A, B, C, A, B, C" in report
    assert "| C send / use |" in report and "full − chat = " in report
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.suffix in (".jsonl", ".safetensors")
              or p.name == "summary.json"}
    assert main(["recipe", "--preset", "tiny-3", "--out", str(out), "--quiet"]) == 0
    assert "delta full - chat" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    again = json.loads((out / "results.json").read_text())
    assert again["evals"] == results["evals"] and again["comparisons"] == results["comparisons"]


def test_influence_covers_every_listener_of_three_seats(run):
    _, results = run
    figures = results["influence"]["evals"]["chat-s0"]["figures"]
    pairs = {(f["turn"], f["writer"], f["listener"]) for f in figures}
    # Turn 2 (C) is heard by A and B before their finals; turn 4 (B) only by C.
    assert {(2, "C", "A"), (2, "C", "B"), (4, "B", "C")} <= pairs and not any(t == 5 for t, _, _ in pairs)
    assert results["checks"]["cut_influence_zero"] is True


def test_three_seats_kill_anywhere_and_rerun_gives_the_same_results(tmp_path, tiny3_cli):
    """The suite's own run of the three-seat recipe is the uninterrupted reference."""
    kill_and_rerun(tmp_path / "killed", "tiny-3", 2, tiny3_cli.out, tiny3_cli.results, tiny3_cli.stages)
