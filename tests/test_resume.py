"""Exact resume: `kill -9` the reduced micro recipes (two seats, and three seats with three arms) at random
moments, rerun the same command, and get the same results.json as an uninterrupted run (bit-identical on CPU,
apart from wall-time fields).

The moments are drawn by progress, not by clock: a kill lands a random fraction of a second after the run has
written its k-th stage output (a checkpoint, a finished run, an evaluation), for k spread over the whole run, so
the test kills as often on a loaded machine as on an idle one."""

import json
import random
import signal
import subprocess
import time

import pytest
from helpers import recipe_command, recipe_env, stage_outputs

pytestmark = pytest.mark.slow

TIME_FIELDS = {"started", "finished", "wall_seconds", "train_seconds", "gpu_seconds", "seconds"}


def strip_times(obj):
    if isinstance(obj, dict):
        return {k: strip_times(v) for k, v in obj.items() if k not in TIME_FIELDS}
    if isinstance(obj, list):
        return [strip_times(v) for v in obj]
    return obj


@pytest.mark.parametrize("preset, n_kills", [("tiny", 4), ("tiny-3", 2)])
def test_kill_anywhere_and_rerun_gives_the_same_results(tmp_path, request, preset, n_kills):
    if preset == "tiny-3":  # the suite's own run of it is the uninterrupted reference
        shared = request.getfixturevalue("tiny3_cli")
        ref, results, total = shared.out, shared.results, shared.stages
    else:
        ref = tmp_path / "ref"
        subprocess.run(recipe_command(ref, preset), check=True, env=recipe_env(), capture_output=True, timeout=900)
        results, total = json.loads((ref / "results.json").read_text()), stage_outputs(ref)
    want = strip_times(results)

    out = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    # Kill at moments spread over the whole run (start-up, training, evaluation, report), then let it finish.
    for target in sorted(rng.sample(range(0, total - 2), n_kills)):
        proc = subprocess.Popen(recipe_command(out, preset), env=recipe_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None and stage_outputs(out) <= target:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run(recipe_command(out, preset), env=recipe_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    got = strip_times(json.loads((out / "results.json").read_text()))
    print(f"\nresume: {kills} kill -9s survived; results.json identical to the uninterrupted run")
    assert kills == n_kills
    differ = sorted(k for k in want["evals"] if got["evals"][k] != want["evals"][k])
    sums = {r.name: (json.loads((ref / "runs" / r.name / "done.json").read_text())["weights_checksum"],
                     json.loads((r / "done.json").read_text())["weights_checksum"]) for r in (out / "runs").iterdir()}
    assert got == want, f"evaluations that differ: {differ}; weights (uninterrupted, resumed): {sums}"
    # And the logs hold each step exactly once.
    for run in (out / "runs").iterdir():
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps))
