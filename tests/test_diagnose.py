"""`talktosolve diagnose`: figures read from a run's own files (boxed answers, groups with a signal, lengths)."""

import json
import shutil

import pytest

from talktosolve.cli import main
from talktosolve.diagnose import chat_figures, diagnose, signal, table, training_figures
from talktosolve.store import read_json


def chat(step, problem, answers, correct, reward, advantage, tokens=(5, 5, 3, 3), truncated=(False,) * 4):
    return {"step": step, "problem_id": problem, "answers": answers, "correct": correct, "reward": reward,
            "advantage": advantage,
            "messages": [{"tokens": n, "truncated": t} for n, t in zip(tokens, truncated)]}


def test_boxed_counts_answers_without_a_box_and_right_when_boxed_only_boxed_ones():
    chats = [chat(0, "p", {"A": "3", "B": None}, {"A": True, "B": False}, 0.5, 0.0),
             chat(0, "p", {"A": "4", "B": "5"}, {"A": False, "B": False}, 0.0, 0.0)]
    f = chat_figures(chats)
    assert f["boxed"] == 3 / 4
    assert f["right_when_boxed"] == 1 / 3
    assert f["reward"] == 0.25


def test_lengths_and_truncation_are_per_message_position():
    chats = [chat(0, "p", {"A": None}, {"A": False}, 0.0, 0.0, tokens=(10, 2), truncated=(True, False)),
             chat(0, "q", {"A": None}, {"A": False}, 0.0, 0.0, tokens=(20, 4), truncated=(False, False))]
    f = chat_figures(chats)
    assert f["tokens"] == [15, 3]
    assert f["truncated"] == [0.5, 0.0]


def test_signal_is_the_share_of_groups_with_a_nonzero_advantage():
    chats = [chat(0, "p", {}, {}, 1.0, 0.5), chat(0, "p", {}, {}, 0.0, -0.5),   # a group with signal
             chat(0, "q", {}, {}, 0.0, 0.0), chat(0, "q", {}, {}, 0.0, 0.0),    # all equal: none
             chat(1, "p", {}, {}, 0.0, 0.0), chat(1, "p", {}, {}, 0.0, 0.0)]    # same problem, next step: none
    assert signal(chats) == 1 / 3


def test_training_bins_split_the_steps_in_order():
    chats = [chat(s, "p", {"A": "1" if s >= 4 else None}, {"A": s >= 4}, float(s >= 4), 0.0) for s in range(8)]
    f = training_figures(list(reversed(chats)), bins=4)
    assert [b["steps"] for b in f["bins"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [b["boxed"] for b in f["bins"]] == [0.0, 0.0, 1.0, 1.0]
    assert f["steps"] == [0, 7] and f["boxed"] == 0.5
    assert len(training_figures(chats[:2], bins=4)["bins"]) == 2  # fewer steps than bins: a bin per step


def test_diagnose_reads_every_run_and_evaluation_of_a_recipe(tiny_recipe):
    found = diagnose(tiny_recipe.out)
    runs = sorted(p.name for p in (tiny_recipe.out / "runs").iterdir())
    evals = sorted(p.name for p in (tiny_recipe.out / "evals").iterdir() if (p / "chats.jsonl").is_file())
    assert sorted(found["runs"]) == runs and sorted(found["evals"]) == evals
    for name, ev in found["evals"].items():
        # every problem has the same number of chats, so the mean chat reward is the evaluation's accuracy
        assert ev["reward"] == pytest.approx(read_json(tiny_recipe.out / "evals" / name / "summary.json")["accuracy"])
    for name, run in found["runs"].items():
        rewards = [json.loads(line)["train/reward"] for line in open(tiny_recipe.out / "runs" / name / "metrics.jsonl")]
        assert run["reward"] == pytest.approx(sum(rewards) / len(rewards))
    text = table(found)
    assert all(name in text for name in runs + evals)


def test_cli_diagnose_prints_the_table_and_writes_diagnosis_json(tiny_recipe, tmp_path, capsys):
    folder = tmp_path / "rec"
    shutil.copytree(tiny_recipe.out, folder)
    assert main(["diagnose", str(folder / "runs" / "chat-s0"), "--bins", "2"]) == 0
    out = capsys.readouterr().out
    assert "chat-s0" in out and "signal" in out
    assert len(read_json(folder / "runs" / "chat-s0" / "diagnosis.json")["runs"]["chat-s0"]["bins"]) == 2


def test_cli_diagnose_refuses_a_folder_it_cannot_read_in_one_line(tiny_recipe, tmp_path, capsys):
    assert main(["diagnose", str(tiny_recipe.out / "evals")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "no run, evaluation or recipe" in err
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    (empty_run / "config.json").write_text(json.dumps({"arm": "chat", "key": "k"}))
    assert main(["diagnose", str(empty_run)]) == 2
    assert "no training transcripts" in capsys.readouterr().err
