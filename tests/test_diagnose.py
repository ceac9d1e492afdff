"""`talktosolve diagnose`: figures read from a run's own files (boxed answers, groups with a signal, lengths)."""

import json
import shutil

import pytest

from talktosolve.cli import main
from talktosolve.experiment.diagnose import (
    chat_figures,
    diagnose,
    final_turns,
    signal,
    table,
    training_figures,
    verdict,
)
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


def test_signal_counts_every_drawn_group_whose_rewards_differ_not_only_those_learned_from():
    """With informative groups a step learns from the first problems_per_step groups whose rewards differ; the
    ones drawn beyond them carry no advantage in the transcripts, yet they had a signal."""
    learned = [{**chat(0, "p", {}, {}, 1.0, 0.5), "draw": 0, "trained": True},
               {**chat(0, "p", {}, {}, 0.0, -0.5), "draw": 0, "trained": True}]
    beyond = [{**chat(0, problem, {}, {}, r, None), "draw": 0, "trained": False}
              for problem in ("q", "r") for r in (1.0, 0.0)]
    flat = [{**chat(0, "s", {}, {}, 0.0, None), "draw": 0, "trained": False} for _ in range(2)]
    assert signal(learned + beyond + flat) == 3 / 4


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
    run = read_json(folder / "runs" / "chat-s0" / "diagnosis.json")["runs"]["chat-s0"]
    assert len(run["bins"]) == 2
    # the run's verdict, from its figures, is printed after the legend and written beside them
    assert run["finals"] == [2, 3] and run["verdict"] in ("too short", "collapsed messages", "learned then lost",
                                                          "learning", "guessed finals", "rambling to the limit",
                                                          "no signal", "stalled")
    assert "columns:" in out and f"chat-s0   {run['verdict']}: {run['why']}" in out


def test_cli_diagnose_refuses_a_folder_it_cannot_read_in_one_line(tiny_recipe, tmp_path, capsys):
    assert main(["diagnose", str(tiny_recipe.out / "evals")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "no run, evaluation or recipe" in err
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    (empty_run / "config.json").write_text(json.dumps({"arm": "chat", "key": "k"}))
    assert main(["diagnose", str(empty_run)]) == 2
    assert "no training transcripts" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ verdicts

def figures(rewards, signal=0.3, boxed=0.9, tokens=(60, 60, 120, 120), truncated=(0.1, 0.1, 0.05, 0.05),
            last=None, finals=(2, 3)):
    """A run's figures as `training_figures` gives them, spans of 20 steps with these rewards; `last` overrides
    the last span's figures (where the run ended up)."""
    bins = [{"steps": [20 * i, 20 * i + 19], "chats": 640, "reward": r, "boxed": boxed, "right_when_boxed": None,
             "tokens": list(tokens), "truncated": list(truncated), "signal": signal} for i, r in enumerate(rewards)]
    bins[-1].update(last or {})
    return {"steps": [0, 20 * len(rewards) - 1], "reward": sum(rewards) / len(rewards), "signal": signal,
            "bins": bins, "finals": None if finals is None else list(finals)}


def names(v):
    return v["verdict"], [n["verdict"] for n in v["notes"]]


def test_learning_is_a_reward_that_rose_and_held():
    v = verdict(figures([0.047, 0.130, 0.243, 0.384], signal=0.44))
    assert names(v) == ("learning", [])
    assert "0.047 in steps 0-19 to 0.384 in steps 60-79" in v["why"]
    # a dip from the best span that keeps most of the gain is still learning
    assert names(verdict(figures([0.05, 0.30, 0.40, 0.36])))[0] == "learning"


def test_from_a_weak_start_a_doubling_by_more_than_the_noise_is_learning():
    # micro-weak-stable's seed 0: from 0.041 to 0.123, a rise under 0.10 but three times where it started
    v = verdict(figures([0.041, 0.066, 0.091, 0.123], signal=0.43, last={"tokens": [7, 7, 10, 15], "boxed": 0.88}))
    assert names(v) == ("learning", ["guessed finals"])
    # a doubling within the noise, or a rise under 0.10 from a start that is not weak, is not
    assert names(verdict(figures([0.02, 0.03, 0.04, 0.045])))[0] == "stalled"
    v = verdict(figures([0.054, 0.08, 0.10, 0.113]))
    assert names(v)[0] == "stalled" and "(from under" not in v["why"]
    assert "(from under 0.05: under 2x or 0.05)" in verdict(figures([0.02, 0.03, 0.04, 0.045]))["why"]


def test_learned_then_lost_is_a_best_span_well_above_the_last():
    v = verdict(figures([0.066, 0.157, 0.174, 0.077], signal=0.37))
    assert names(v) == ("learned then lost", [])
    assert "0.174 in steps 40-59" in v["why"] and "0.077 in steps 60-79" in v["why"]
    # a drop within the noise is not a loss; nor is a fall from where the run started
    assert names(verdict(figures([0.10, 0.13, 0.10, 0.09])))[0] == "stalled"
    assert names(verdict(figures([0.20, 0.15, 0.12, 0.10])))[0] == "stalled"


def test_stalled_is_a_flat_reward_with_signal_to_learn_from():
    v = verdict(figures([0.054, 0.101, 0.083, 0.102], signal=0.25,
                        last={"truncated": [0.99, 0.97, 0.50, 0.39], "tokens": [159, 159, 314, 248]}))
    assert names(v) == ("stalled", [])  # half of the finals at their limit is not yet rambling
    assert "a rise under 0.10" in v["why"]


def test_no_signal_is_too_few_groups_with_a_nonzero_advantage():
    v = verdict(figures([0.017, 0.022, 0.020, 0.013], signal=0.098))
    assert names(v) == ("no signal", [])
    assert "10% of groups" in v["why"]


def test_guessed_finals_are_short_boxed_finals_and_come_before_no_signal():
    v = verdict(figures([0.027, 0.032, 0.015, 0.020], signal=0.097,
                        last={"tokens": [47, 52, 12.2, 8.4], "boxed": 0.96}))
    assert names(v) == ("guessed finals", ["no signal"])
    assert "finals of 12 and 8 tokens, 96% boxed" in v["why"]
    # long enough to hold some working, or mostly unboxed: not a bare guess
    assert names(verdict(figures([0.02] * 4, signal=0.1, last={"tokens": [47, 52, 30, 8]})))[0] == "no signal"
    assert names(verdict(figures([0.02] * 4, signal=0.1, last={"tokens": [47, 52, 9, 8], "boxed": 0.3})))[0] \
        == "no signal"


def test_rambling_is_finals_at_their_limit():
    v = verdict(figures([0.022, 0.028, 0.023, 0.052], signal=0.173,
                        last={"tokens": [153, 151, 261, 319], "truncated": [0.88, 0.87, 0.65, 0.81]}))
    assert names(v) == ("rambling to the limit", ["no signal"])
    assert "messages 88% and 87%, finals 65% and 81%" in v["why"]
    # messages at their limit alone do not make it: learning runs fill theirs too
    assert names(verdict(figures([0.02] * 4, signal=0.1, last={"truncated": [1.0, 1.0, 0.2, 0.3]})))[0] \
        == "no signal"


def test_collapsed_messages_are_a_token_or_two_and_nothing_boxed():
    v = verdict(figures([0.017, 0.016, 0.0, 0.0], signal=0.061,
                        last={"tokens": [2.2, 1.4, 1.1, 1.1], "boxed": 0.0, "truncated": [0.0] * 4}))
    assert names(v) == ("collapsed messages", ["no signal"])
    assert "messages of 2.2 and 1.4 tokens, 0% of final answers boxed" in v["why"]
    # short messages whose finals still box an answer have not collapsed
    assert names(verdict(figures([0.02] * 4, signal=0.1, last={"tokens": [2, 2, 9, 8], "boxed": 0.9}))) \
        == ("guessed finals", ["no signal"])


def test_too_short_is_a_single_span():
    v = verdict(figures([0.3], signal=0.1))
    assert names(v) == ("too short", ["no signal"])


def test_without_known_finals_the_rules_on_finals_do_not_apply():
    f = figures([0.02] * 4, signal=0.1, last={"tokens": [47, 52, 12, 8], "truncated": [0.9, 0.9, 0.9, 0.9]},
                finals=None)
    assert names(verdict(f)) == ("no signal", [])


def test_final_turns_come_from_the_config_else_the_speakers():
    msgs = [{"speaker": s, "tokens": 1, "truncated": False} for s in "ABAB"]
    chats = [{"messages": msgs, "answers": {"A": None, "B": None}}]
    assert final_turns(chats) == [2, 3]
    config = {"chat": {"seats": ["A", "B"], "order": ["A", "B", "A", "B"], "max_final_tokens": 384,
                       "max_message_tokens": 160, "turn_tokens": [], "final_turns": [0, 3]}}
    assert final_turns(chats, config) == [0, 3]
    unnamed = [{"messages": [{"tokens": 1, "truncated": False}] * 5, "answers": {"A": None, "B": None}}]
    assert final_turns(unnamed) == [3, 4]


def test_diagnose_writes_each_runs_verdict_and_prints_a_legend(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for step in range(8):
        for problem in "pq":
            for k in range(2):  # a group whose two chats differ: every group carries a signal
                right = k == 0 and step >= 4
                c = chat(step, problem, {"A": "1", "B": "1"}, {"A": right, "B": right}, float(right),
                         0.5 if k == 0 else -0.5, tokens=(20, 20, 40, 40))
                for m, s in zip(c["messages"], "ABAB"):
                    m["speaker"] = s
                rows.append(c)
    (run / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = diagnose(run)
    fig = found["runs"]["run"]
    assert fig["finals"] == [2, 3]
    assert (fig["verdict"], fig["notes"]) == ("learning", [])
    text = table(found)
    assert "columns:" in text and "right|boxed  the share of the boxed final answers" in text
    assert "the finals (graded) are messages 3 and 4" in text
    assert "run       learning: reward 0.000 in steps 0-1 to 0.500 in steps 6-7" in text
