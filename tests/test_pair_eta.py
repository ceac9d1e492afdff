"""`bench/pair_eta.py` projects how long a running recipe folder still needs: its steps left at the pace of its
last steps (a step's wall time: the runs' shares summed), then its evaluations' given time."""

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import bench_script

eta = bench_script("pair_eta")
SEED_2 = (Path(__file__).resolve().parents[1] / "bench" / "results" / "experiments"
          / "paper-stable-warmup-pairs-qwen2.5-coder-1.5b" / "seed-2")


def rows(*seconds: float) -> list[dict]:
    return [{"step": i, "perf/seconds": s} for i, s in enumerate(seconds)]


def test_the_pace_is_the_runs_shares_summed_over_the_last_steps_after_the_first():
    # Step 0 compiles (60 s); steps 1-12 of the pair take 10 + 5 s, of which the pace takes the last 10.
    chat, cut = rows(40, *[10] * 12), rows(20, *[5] * 12)
    assert eta.seconds_left([chat, cut], steps=20, eval_seconds=100) == 7 * 15 + 100
    chat[-1]["perf/seconds"] = 30  # a slower last step moves the pace by a tenth of the difference
    assert eta.seconds_left([chat, cut], steps=20, eval_seconds=100) == pytest.approx(7 * 17 + 100)


def test_with_only_the_first_step_done_its_time_is_the_pace():
    assert eta.seconds_left([rows(40), rows(20)], steps=3, eval_seconds=0) == 2 * 60


def test_a_step_one_run_has_not_logged_yet_is_not_done():
    assert eta.seconds_left([rows(4, 2, 2), rows(1, 1)], steps=4, eval_seconds=0) == 2 * 3


def test_no_step_logged_by_every_run_is_no_projection():
    assert eta.seconds_left([rows(4), []], steps=4, eval_seconds=10) is None
    assert eta.seconds_left([], steps=4, eval_seconds=10) is None


def test_once_training_ended_what_is_left_is_the_evaluations_time_less_the_time_since():
    assert eta.seconds_left([], steps=80, eval_seconds=180, since_trained=50) == 130
    assert eta.seconds_left([], steps=80, eval_seconds=180, since_trained=500) == 0


def recipe_folder(tmp_path: Path, steps_done: int) -> Path:
    """Seed 2's committed pair as its recipe folder looked after `steps_done` steps."""
    folder = tmp_path / "warm-s2"
    (folder / "runs").mkdir(parents=True)
    shutil.copy(SEED_2 / "config.json", folder / "config.json")
    for run in ("chat-s2", "cut-s2"):
        (folder / "runs" / run).mkdir()
        lines = (SEED_2 / "metrics" / f"{run}.jsonl").read_text().splitlines()[:steps_done]
        (folder / "runs" / run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_folder_mid_training_is_projected_from_its_metrics(tmp_path):
    folder = recipe_folder(tmp_path, 72)
    per = [[json.loads(line) for line in (SEED_2 / "metrics" / f"{r}.jsonl").read_text().splitlines()]
           for r in ("chat-s2", "cut-s2")]
    pace = sum(per[0][i]["perf/seconds"] + per[1][i]["perf/seconds"] for i in range(62, 72)) / 10
    assert eta.folder_left(folder, eval_seconds=120) == pytest.approx(8 * pace + 120)


def test_a_folder_whose_runs_are_done_has_its_evaluations_left(tmp_path):
    folder = recipe_folder(tmp_path, 80)
    for run in ("chat-s2", "cut-s2"):
        (folder / "runs" / run / "done.json").write_text("{}")
        os.utime(folder / "runs" / run / "done.json", (1000.0, 1000.0))
    assert eta.folder_left(folder, eval_seconds=120, now=1030.0) == 90


def test_the_command_prints_whole_seconds_or_says_in_one_line_why_it_cannot(tmp_path, capsys):
    assert eta.main([str(recipe_folder(tmp_path, 72)), "--eval-seconds", "120"]) == 0
    assert capsys.readouterr().out.strip().isdigit()
    assert eta.main([str(tmp_path / "none"), "--eval-seconds", "120"]) == 1
    assert "holds no config.json yet" in capsys.readouterr().err
    assert eta.main([str(recipe_folder(tmp_path / "b", 0)), "--eval-seconds", "120"]) == 1
    assert "no step of" in capsys.readouterr().err
