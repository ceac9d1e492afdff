"""`bench/first_steps.py` finds the last step two runs of one seed drew the same chats and averages each span of
their steps side by side."""

import json
from pathlib import Path

from helpers import bench_script

first_steps = bench_script("first_steps")


def step(n, reward=0.03, tokens=12000, grad_norm=0.07):
    row = {k: 0.5 for k in first_steps.DRAWN}
    row.update({"step": n, "train/reward": reward, "perf/tokens": tokens, "train/draws": 8, "talk/send": 0.4,
                "loss/grad_norm": grad_norm})
    return row


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_runs_agree_until_a_drawn_chats_figure_differs_and_a_learning_figure_does_not_count():
    a = [step(0, grad_norm=0.06995), step(1), step(2, tokens=9000), step(3)]
    b = [step(0, grad_norm=0.06998), step(1), step(2, tokens=12000), step(3)]
    assert first_steps.same_through(a, b) == 1  # step 0's gradient norms differ: the chats were the same
    assert first_steps.same_through([step(0, reward=0.1)], [step(0)]) == -1


def test_spans_average_each_run_and_a_step_logged_again_counts_once(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [step(0, reward=0.0), step(1, reward=0.2), step(1, reward=0.4),
                                     step(2, reward=0.6), step(3, reward=0.8)])  # step 1 logged twice
    b = write(tmp_path / "b.jsonl", [step(0, reward=0.0)] + [step(s, reward=0.0, tokens=6000) for s in range(1, 6)])
    out = tmp_path / "out.json"
    assert first_steps.main([str(a), str(b), "--labels", "warm", "none", "--span", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["steps"] == 4 and result["same_chats_through_step"] == 0
    assert [p["steps"] for p in result["spans"]] == [[0, 1], [2, 3]]
    assert result["spans"][0]["warm"]["reward"] == 0.2  # (0.0 + 0.4) / 2: the later line of step 1
    assert result["spans"][1]["warm"]["reward"] == 0.7 and result["spans"][0]["none"]["tokens"] == 9000
    assert "same drawn chats through step 0 of 4" in capsys.readouterr().out


def test_wrong_input_is_one_line_and_exit_2(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [step(0), step(1)])
    out = str(tmp_path / "x.json")
    for argv in ([str(a), str(tmp_path / "missing.jsonl"), "--out", out],
                 [str(a), str(a), "--labels", "x", "x", "--out", out],
                 [str(a), str(a), "--steps", "5", "--out", out]):
        assert first_steps.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert not Path(out).exists()
