"""`bench/adam_early.py` traces AdamW as the trainer sets it up: its first update is `lr` per coordinate whatever
the gradient, later updates on noise are smaller, a warm-up scales the first ones down, and one gradient goes on
moving the weights through steps with none."""

import json
import math
from types import SimpleNamespace

import pytest
from helpers import bench_script

adam_early = bench_script("adam_early")


def train(warmup: int = 0):
    return SimpleNamespace(lr=1e-4, betas=(0.9, 0.999), warmup_steps=warmup)


def test_the_first_update_is_lr_per_coordinate_and_later_updates_on_noise_are_smaller():
    u = adam_early.noise(train(), steps=40, n=20_000, seed=0)
    assert math.isclose(u[0], 1.0, rel_tol=1e-3)  # bias-corrected m/sqrt(v) = g/|g| at the first step
    assert u[39] < 0.3 and all(a > b for a, b in zip(u[:4], u[1:5]))


def test_a_warmup_scales_the_first_update_by_one_over_its_steps():
    u = adam_early.noise(train(warmup=10), steps=12, n=20_000, seed=0)
    assert math.isclose(u[0], 0.1, rel_tol=1e-3)
    assert u[0] < u[4] < 0.3


def test_one_gradient_keeps_moving_the_weights_through_empty_steps():
    moved = adam_early.one_then_empty(train(), steps=20, n=1_000, seed=0)
    assert math.isclose(moved[0], 1.0, rel_tol=1e-3)
    assert all(b > a for a, b in zip(moved, moved[1:])) and moved[-1] > 5


def test_the_script_writes_both_schedules_and_refuses_a_bad_argument(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert adam_early.main(["--steps", "5", "--coordinates", "100", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["schedules"]) == {"no_warmup", "warmup_10"}
    assert len(result["schedules"]["warmup_10"]["noise_update"]) == 5
    with pytest.raises(SystemExit) as e:
        adam_early.main(["--steps", "1", "--out", str(out)])
    assert e.value.code == 2 and "--steps must be 2 or more" in capsys.readouterr().err
