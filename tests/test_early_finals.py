"""`bench/early_finals.py` puts each run's first-span finals length beside its last-span reward, and splits the
chat runs at a length into those that reached a reward bar and those that did not, with a Fisher exact test."""

import importlib.util
import json
import math
from pathlib import Path

spec = importlib.util.spec_from_file_location("early_finals", Path(__file__).parents[1] / "bench" / "early_finals.py")
early_finals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(early_finals)


def span(steps, reward, finals):
    return {"steps": steps, "reward": reward, "tokens": [100.0, 100.0, *finals]}


def diagnosis(folder: Path, runs: dict) -> Path:
    folder.mkdir(parents=True)
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
