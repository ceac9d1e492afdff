"""`bench/profile_moves.py` times one call's decode under the engine's rule for moving rows, the rule before, and
none."""

import json
import subprocess
import sys
from pathlib import Path

from helpers import bench_script

profile_moves = bench_script("profile_moves")


def test_the_rule_before_moves_rows_only_into_half_the_batch():
    assert profile_moves.halves(192, 384, 16) is None and profile_moves.halves(128, 384, 16) == 128  # powers of two
    assert profile_moves.halves(60, 192, 16) == 64 and profile_moves.halves(3, 192, 16) == 16


def test_a_cpu_smoke_run_times_every_rule_and_ends_rows_at_random(tiny_model_dir, tmp_path):
    out = tmp_path / "moves.json"
    bench = Path(__file__).resolve().parents[1] / "bench"
    subprocess.run([sys.executable, str(bench / "profile_moves.py"), "--model-dir", str(tiny_model_dir), "--out",
                    str(out), "--device", "cpu", "--rows", "24", "--slots", "2", "--prompt-tokens", "20",
                    "--new-tokens", "40", "--stop-share", "0.05", "--repeat", "1"], check=True, capture_output=True,
                   cwd=bench)
    res = json.loads(out.read_text())
    assert [r["rule"] for r in res["rules"]] == ["whole", "halves", "quarters"]
    assert res["rules"][0]["rows_equal_to_whole"] == 24
    assert 1 < res["row_lengths"]["mean"] < 40  # rows end at random, before the limit on average
