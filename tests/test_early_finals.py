"""`bench/early_finals.py` puts each run's first-span finals length beside its last-span reward, and splits the
chat runs at a length into those that reached a reward bar and those that did not, with a Fisher exact test."""

import json
import math
from pathlib import Path

from helpers import bench_script

early_finals = bench_script("early_finals")


def span(steps, reward, finals):
    return {"steps": steps, "reward": reward, "tokens": [100.0, 100.0, *finals]}


def diagnosis(folder: Path, runs: dict, arms: dict | None = None) -> Path:
    """A folder with a diagnosis of `runs` and a results.json naming each run's arm (`arms`, else its name's)."""
    folder.mkdir(parents=True)
    arms = arms or {name: name.split("-")[0] for name in runs}
    (folder / "results.json").write_text(json.dumps({"runs": {n: {"arm": a, "seed": 0} for n, a in arms.items()}}))
    body = {"runs": {name: {"finals": [2, 3], "verdict": "learning",
                            "bins": [span([0, 19], 0.03, first), span([60, 79], last, [50.0, 50.0])]}
                     for name, (first, last) in runs.items()},
            "evals": {"chat-s0": {"reward": 0.25}}}
    (folder / "diagnosis.json").write_text(json.dumps(body))
    return folder


def test_fisher_one_sided_is_the_hypergeometric_tail():
    # no short run of 6 reached the bar, 8 of 14 longer ones did: P = C(14, 8) / C(20, 8)
    assert math.isclose(early_finals.fisher_one_sided(0, 6, 8, 6), math.comb(14, 8) / math.comb(20, 8))
    assert math.isclose(early_finals.fisher_one_sided(1, 0, 0, 1), 1.0)  # the whole tail


def test_chat_runs_are_split_at_the_first_spans_finals_and_cut_runs_left_out(tmp_path, capsys):
    a = diagnosis(tmp_path / "a", {"chat-s0": ([10.0, 12.0], 0.05), "chat-s1": ([80.0, 60.0], 0.30),
                                   "cut-s0": ([5.0, 5.0], 0.50)})
    b = diagnosis(tmp_path / "b", {"chat-s2": ([40.0, 20.0], 0.10)})
    out = tmp_path / "out.json"
    assert early_finals.main([str(a), str(b), "--short", "30", "--bar", "0.2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["finals_tokens_first"] for r in result["runs"]] == [5.0, 11.0, 30.0, 70.0]  # sorted by it
    assert result["runs"][1]["held_out"] == 0.25 and result["runs"][2]["held_out"] is None
    split = result["split"]
    assert split["short"] == {"runs": 1, "reached_bar": 0}  # chat-s0; the cut run is not counted
    assert split["longer"] == {"runs": 2, "reached_bar": 1}  # chat-s2 at exactly 30 tokens is not short
    assert "0 of 1 reached 0.2; the rest: 1 of 2" in capsys.readouterr().out


def test_a_folder_without_a_diagnosis_is_one_line_and_exit_2(tmp_path, capsys):
    assert early_finals.main([str(tmp_path), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "talktosolve diagnose" in err
    assert not (tmp_path / "x.json").exists()


def test_a_runs_arm_is_read_from_results_json_not_from_its_name(tmp_path):
    # a variant's runs are named for the variant (`solo-s0`) and play in an arm; a name says nothing reliable
    a = diagnosis(tmp_path / "a", {"solo-s0": ([80.0, 60.0], 0.30), "chat-s1": ([10.0, 10.0], 0.05)},
                  arms={"solo-s0": "chat", "chat-s1": "cut"})
    out = tmp_path / "out.json"
    assert early_finals.main([str(a), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {r["run"]: r["arm"] for r in result["runs"]} == {"solo-s0": "chat", "chat-s1": "cut"}
    assert result["split"]["short"]["runs"] == 0 and result["split"]["longer"]["runs"] == 1


def test_a_runs_arm_is_read_from_the_recipes_config_without_results(tmp_path):
    from talktosolve.config import make_config

    a = diagnosis(tmp_path / "a", {"chat-s0": ([80.0, 60.0], 0.30), "cut-s0": ([10.0, 10.0], 0.05)})
    (a / "results.json").unlink()
    cfg = make_config("tiny", {"seeds": [0], "variant": {"name": "solo", "arm": "chat"}})
    (a / "config.json").write_text(json.dumps({"preset": "tiny", **cfg.to_dict()}))
    assert early_finals.run_arms(a) == {"chat-s0": "chat", "cut-s0": "cut", "solo-s0": "chat"}
    assert early_finals.main([str(a), "--out", str(tmp_path / "out.json")]) == 0


def test_a_folder_without_results_or_config_is_one_line_and_exit_2(tmp_path, capsys):
    a = diagnosis(tmp_path / "a", {"chat-s0": ([80.0, 60.0], 0.30)})
    (a / "results.json").unlink()
    assert early_finals.main([str(a), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.json" in err


def test_a_diagnosed_run_the_records_do_not_plan_is_one_line_and_exit_2(tmp_path, capsys):
    a = diagnosis(tmp_path / "a", {"chat-s0": ([80.0, 60.0], 0.30)}, arms={"chat-s1": "chat"})
    assert early_finals.main([str(a), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "chat-s0" in err
