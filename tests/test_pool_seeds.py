"""`bench/pool_seeds.py` pools the seeds of several recipe folders into one chat-vs-cut comparison. Every committed
comparison.json is what the script computes today from the folders it names, so a figure the docs quote from one
follows from the committed evaluations; a seed pooled twice, or a folder without what pooling reads, is one line."""

import json
import shutil
from pathlib import Path

import pytest
from helpers import bench_script

pool_seeds = bench_script("pool_seeds")
ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = Path("bench") / "results" / "experiments"


@pytest.mark.parametrize("experiment", ["paper-qwen2.5-coder-1.5b", "paper-stable-pairs-qwen2.5-coder-1.5b",
                                        "paper-stable-warmup-pairs-qwen2.5-coder-1.5b"])
def test_a_committed_pooled_comparison_is_what_the_script_computes_from_its_folders(experiment, monkeypatch):
    monkeypatch.chdir(ROOT)  # the command it records names the folders as given, from the repository's root
    out = EXPERIMENTS / experiment / "comparison.json"
    recorded = json.loads(out.read_text())
    got = pool_seeds.pool([out.parent / folder for folder in recorded["folders"]], out)
    assert json.loads(json.dumps(got)) == recorded


def test_a_seed_in_two_folders_is_refused(tmp_path):
    folder = ROOT / EXPERIMENTS / "paper-stable-warmup-pairs-qwen2.5-coder-1.5b" / "seed-2"
    copy = tmp_path / "seed-2-again"
    shutil.copytree(folder, copy)
    with pytest.raises(SystemExit, match="seed 2 of the chat arm is also in another folder"):
        pool_seeds.pool([folder, copy], tmp_path / "comparison.json")


def test_a_folder_named_twice_is_refused_rather_than_pooled_once(tmp_path):
    folder = ROOT / EXPERIMENTS / "paper-stable-warmup-pairs-qwen2.5-coder-1.5b" / "seed-2"
    with pytest.raises(SystemExit, match="named twice"):
        pool_seeds.pool([folder, folder / ".." / "seed-2"], tmp_path / "comparison.json")


def test_a_folder_without_results_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="holds no results.json"):
        pool_seeds.pool([tmp_path / "not-a-recipe"], tmp_path / "comparison.json")


def test_a_folder_without_an_evaluations_scores_is_one_line(tmp_path):
    copy = tmp_path / "seed-2"
    shutil.copytree(ROOT / EXPERIMENTS / "paper-stable-warmup-pairs-qwen2.5-coder-1.5b" / "seed-2", copy)
    (copy / "evals" / "cut-s2" / "summary.json").unlink()
    with pytest.raises(SystemExit, match=r"holds no evals/cut-s2/summary.json"):
        pool_seeds.pool([copy], tmp_path / "comparison.json")
