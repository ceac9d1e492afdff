"""`bench/watched_timing.py` dates a recipe cut short from the files `watch` kept: training ends at the last
metrics row, summaries written close together are one group of evaluations, and the unplayed ones are projected
at the later groups' mean."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from helpers import bench_script

BENCH = Path(__file__).resolve().parents[1] / "bench"
DAY = datetime(2026, 12, 7, tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def script():
    return bench_script("watched_timing")


def written(path: Path, text: str, at: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (DAY + at, DAY + at))


def kept(tmp_path: Path) -> Path:
    """Two runs of three steps trained by 100 s; five summaries in groups of 2, 2 and 1 at 130, 160 and 185 s."""
    for i, run in enumerate(["chat-s0", "cut-s0"]):
        rows = [{"step": s, "perf/seconds": 10.0 + s, "perf/sample_seconds": 8.0, "perf/learn_seconds": 2.0}
                for s in range(3)]
        written(tmp_path / "runs" / run / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows), 99 + i)
    for name, at in [("base-chat", 129), ("base-cut", 130), ("chat-s0", 159), ("cut-s0", 160), ("cross", 185)]:
        written(tmp_path / "evals" / name / "summary.json", "{}", at)
    return tmp_path


def test_stages_are_dated_by_the_kept_files_and_the_rest_projected(script, tmp_path):
    t = script.timing(kept(tmp_path), DAY + 10, DAY + 190, planned=8, gap=5.0)
    assert t["seconds_to_seen"] == 180
    assert (t["training"]["runs"], t["training"]["steps"], t["training"]["wall"]) == (2, 3, 90)
    e = t["evaluations"]
    assert e["groups"] == [2, 2, 1] and e["group_seconds"] == [30, 30, 25] and e["wall"] == 85
    assert e["played_in_order"] == [["base-chat", "base-cut"], ["chat-s0", "cut-s0"], ["cross"]]
    # 3 left in groups of at most 2: two more groups at the mean of the groups after the first, 27.5 s.
    assert t["projected"] == {"evaluations": 8, "groups_left": 2, "later_group_mean": 27.5,
                              "evaluations_wall": 140, "to_the_last_evaluation": 230}


def test_the_command_reads_clock_times_on_the_files_day(tmp_path):
    folder = kept(tmp_path / "w")
    done = subprocess.run([sys.executable, str(BENCH / "watched_timing.py"), str(folder), "--started", "00:00:10",
                           "--seen", "00:03:10", "--out", str(tmp_path / "t.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    t = json.loads((tmp_path / "t.json").read_text())
    assert t["started"] == "00:00:10" and t["training"]["wall"] == 90 and "projected" not in t


@pytest.mark.parametrize("args, says", [
    (["--started", "8:15"], "'8:15' is not a time as HH:MM:SS"),
    (["--started", "00:00:10", "--empty"], "holds no runs/*/metrics.jsonl; unpack watch.tgz into it"),
    (["--started", "00:02:00"], "written from 00:01:39 to 00:03:05, not between --started 00:02:00 and --seen"),
])
def test_a_mistake_is_one_line(tmp_path, args, says):
    folder = tmp_path / "empty" if "--empty" in args else kept(tmp_path / "w")
    folder.mkdir(exist_ok=True)
    args = [a for a in args if a != "--empty"]
    done = subprocess.run([sys.executable, str(BENCH / "watched_timing.py"), str(folder), *args, "--seen", "00:03:10"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
