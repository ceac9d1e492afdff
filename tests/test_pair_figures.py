"""`bench/pair_figures.py` computes a pair's provenance figures from its runs' metrics: spans of training reward
and talk, a step's wall time as the runs' shares summed, and steps grouped by how many batches each run drew. The
committed warm-up pair's provenance holds figures the script reproduces."""

import json
from pathlib import Path

import pytest
from helpers import bench_script

figures = bench_script("pair_figures")
EXPERIMENTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "experiments"


def row(step, reward, draws, sample, learn=1.0, tokens=100):
    return {"step": step, "train/reward": reward, "train/draws": draws, "train/informative_share": 0.5,
            "talk/send": 0.5, "talk/use": 0.25, "perf/tokens": tokens, "perf/seconds": sample + learn,
            "perf/sample_seconds": sample, "perf/learn_seconds": learn, "perf/peak_gpu_gb": 10.0 + step}


def pair(folder: Path, chat: list[dict], cut: list[dict], layout: str = "recipe") -> Path:
    for name, rows in (("chat-s0", chat), ("cut-s0", cut)):
        f = folder / "runs" / name / "metrics.jsonl" if layout == "recipe" else folder / "metrics" / f"{name}.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_steps_time_is_the_runs_shares_summed_and_passes_group_steps_by_draws(tmp_path):
    chat = [row(0, 0.0, 8, 20.0), row(1, 0.1, 4, 3.0), row(2, 0.2, 4, 5.0), row(3, 0.3, 4, 4.0)]
    cut = [row(0, 0.0, 8, 10.0), row(1, 0.0, 4, 3.0), row(2, 0.0, 8, 5.0), row(3, 0.1, 8, 6.0)]
    runs = figures.load(pair(tmp_path / "p", chat, cut))
    s = figures.seconds(runs)
    assert s["step_0"] == 32.0 and s["training"] == 32.0 + 8.0 + 12.0 + 12.0
    assert s["step_mean_steps_1_3"] == pytest.approx((8 + 12 + 12) / 3, abs=0.01)
    assert s["sample_mean_steps_1_3"] == pytest.approx((6 + 10 + 10) / 3, abs=0.01)
    assert s["learn_mean_steps_1_3"] == 2.0 and s["peak_gpu_gb"] == 13.0
    p = figures.passes(runs)
    assert p["runs"] == ["chat-s0", "cut-s0"]
    assert p["draws_4_4"] == {"steps": 1, "first": 1, "last": 1, "sample_seconds_mean": 6.0, "tokens_mean": 200}
    assert p["draws_4_8"] == {"steps": 2, "first": 2, "last": 3, "sample_seconds_mean": 10.0, "tokens_mean": 200}


def test_training_figures_are_means_over_spans_the_last_one_shorter(tmp_path):
    chat = [row(i, i / 10, 4, 1.0) for i in range(5)]
    runs = figures.load(pair(tmp_path / "p", chat, chat, layout="committed"))
    t = figures.training(runs, width=2)["chat-s0"]
    assert [k for k in t if k.startswith("reward")] == ["reward_steps_0_1", "reward_steps_2_3", "reward_steps_4_4"]
    assert t["reward_steps_0_1"] == 0.05 and t["reward_steps_4_4"] == 0.4
    assert t["draws_steps_0_1"] == 4 and t["use_steps_4_4"] == 0.25 and "draws_steps_2_3" not in t


def test_runs_that_disagree_on_their_steps_are_refused(tmp_path):
    folder = pair(tmp_path / "p", [row(0, 0, 4, 1.0), row(1, 0, 4, 1.0)], [row(0, 0, 4, 1.0)])
    with pytest.raises(SystemExit, match="do not all hold steps 0 to N once each"):
        figures.load(folder)
    with pytest.raises(SystemExit, match="holds no runs/"):
        figures.load(tmp_path / "empty")


@pytest.mark.parametrize("seed", [1, 0, 2, 3, 4, 5])
def test_the_committed_warmup_pairs_provenance_is_what_the_script_computes(seed):
    """Seed 1's figures are the provenance's top level, each later pair's its `seed_K` block."""
    folder = EXPERIMENTS / "paper-stable-warmup-pairs-qwen2.5-coder-1.5b"
    recorded = json.loads((folder / "provenance.json").read_text())
    recorded = recorded.get(f"seed_{seed}", recorded)
    runs = figures.load(folder / f"seed-{seed}")
    for name, got in figures.training(runs).items():
        assert recorded["training"][name] == got
    assert figures.seconds(runs).items() <= recorded["seconds"].items()
    assert {k: v for k, v in recorded["passes"].items() if k != "note"} == figures.passes(runs)
