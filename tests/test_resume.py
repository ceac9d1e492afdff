"""Exact resume: `kill -9` the reduced micro recipe (two seats) at random moments, rerun the same command, and get
the same results.json as an uninterrupted run (bit-identical on CPU, apart from wall-time fields). The three-seat
recipe's own is in test_teams_recipe.py, beside the run it is held to.

The moments are drawn by progress, not by clock: a kill lands a random fraction of a second after the run has
written its k-th stage output (a checkpoint, a finished run, an evaluation), for k spread over the whole run, so
the test kills as often on a loaded machine as on an idle one."""

import json
import subprocess

import pytest
from helpers import kill_and_rerun, recipe_command, recipe_env, stage_outputs

pytestmark = pytest.mark.slow


def test_two_seats_kill_anywhere_and_rerun_gives_the_same_results(tmp_path):
    ref = tmp_path / "ref"
    subprocess.run(recipe_command(ref, "tiny"), check=True, env=recipe_env(), capture_output=True, timeout=900)
    kill_and_rerun(tmp_path / "killed", "tiny", 4, ref, json.loads((ref / "results.json").read_text()),
                   stage_outputs(ref))
