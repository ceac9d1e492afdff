"""Exact resume: `kill -9` the reduced micro recipe at random moments, rerun the same command, and get the same
results.json as an uninterrupted run (bit-identical on CPU, apart from wall-time fields)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

TIME_FIELDS = {"started", "finished", "wall_seconds", "train_seconds", "gpu_seconds", "seconds"}


def strip_times(obj):
    if isinstance(obj, dict):
        return {k: strip_times(v) for k, v in obj.items() if k not in TIME_FIELDS}
    if isinstance(obj, list):
        return [strip_times(v) for v in obj]
    return obj


def command(out):
    return [sys.executable, "-m", "talktosolve.cli", "recipe", "--preset", "tiny", "--out", str(out), "--quiet"]


def env():
    # Same threads in every process: CPU float results depend on how work is split across threads.
    return {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "0"}


def test_kill_anywhere_and_rerun_gives_the_same_results(tmp_path):
    ref = tmp_path / "ref"
    began = time.perf_counter()
    subprocess.run(command(ref), check=True, env=env(), capture_output=True, timeout=900)
    full = time.perf_counter() - began
    want = strip_times(json.loads((ref / "results.json").read_text()))

    out = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    # Kill at moments spread over the whole run (start-up, training, evaluation, report), then let it finish.
    for fraction in sorted(rng.uniform(0.1, 0.6) for _ in range(4)):
        proc = subprocess.Popen(command(out), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=fraction * full)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    done = subprocess.run(command(out), env=env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    got = strip_times(json.loads((out / "results.json").read_text()))
    print(f"\nresume: {kills} kill -9s survived; results.json identical to the uninterrupted run")
    assert kills >= 2
    differ = sorted(k for k in want["evals"] if got["evals"][k] != want["evals"][k])
    sums = {r.name: (json.loads((ref / "runs" / r.name / "done.json").read_text())["weights_checksum"],
                     json.loads((r / "done.json").read_text())["weights_checksum"]) for r in (out / "runs").iterdir()}
    assert got == want, f"evaluations that differ: {differ}; weights (uninterrupted, resumed): {sums}"
    # And the logs hold each step exactly once.
    for run in (out / "runs").iterdir():
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps))
