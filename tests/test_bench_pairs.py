"""bench/pairs.sh, the driver of a recipe split by seed across GPU leases, on the tiny model: seeds run in order,
each later seed reusing the untrained team's evaluations; a seed kept by bench/real_weights.sh resumes from its
pieces; a group of seeds is one folder of runs in one process; a deadline too near starts nothing, and one moved
while a recipe runs stops it there; a user's mistake is one line and exit code 2."""

import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from helpers import recipe_env, strip_times

BENCH = Path(__file__).resolve().parents[1] / "bench"
SETS = ("--set model.finetune=lora --set model.lora_r=4 --set data.n_train=16 --set data.n_test=8 "
        "--set eval.n_problems=4 --set chat.max_message_tokens=6 --set chat.max_final_tokens=5 "
        "--set train.steps=2 --set train.problems_per_step=2 --set train.runs_per_process=2")


def pairs(work: Path, *args: str, sets: str = SETS, min_start: str | None = None,
          **env_more: str) -> subprocess.CompletedProcess:
    env = {**recipe_env(), "WORK": str(work), "PRESET": "micro", "SETS": sets, "PYTHON": sys.executable,
           **({"MIN_START": min_start} if min_start else {}), **env_more}
    return subprocess.run(["bash", str(BENCH / "pairs.sh"), *args], env=env, capture_output=True, text=True)


def stages_when_done(work: Path, timeout: float = 300) -> list[str]:
    """The stages' names once the detached sequence has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        stages = (work / "stages").read_text().splitlines() if (work / "stages").exists() else []
        if stages and stages[-1].startswith("sequence end"):
            return [" ".join(s.split()[:-2]) for s in stages]
        time.sleep(0.5)
    raise AssertionError(f"the sequence did not end in {timeout} s: {(work / 'recipe.log').read_text()[-2000:]}")


@pytest.mark.slow
def test_seeds_run_in_order_reuse_the_untrained_evaluations_and_a_kept_seed_resumes(tiny_model_dir, tmp_path):
    work = tmp_path / "real"
    work.mkdir()
    shutil.copytree(tiny_model_dir, work / "model")
    assert pairs(work, "run", "+600", "0", "1").returncode == 0
    assert stages_when_done(work) == ["seed 0 start", "seed 0 end rc=0", "seed 1 start", "seed 1 end rc=0",
                                      "sequence end"]
    base = sorted(e.name for e in (work / "stable-s0" / "evals").iterdir() if e.name.startswith("base-"))
    copied = [work / "stable-s1" / "evals" / b / "summary.json" for b in base]
    assert base and all(c.read_bytes() == (work / "stable-s0" / "evals" / b / "summary.json").read_bytes()
                        for b, c in zip(base, copied))
    # Seed 1's untrained evaluations are seed 0's, copied in before it trained and never played again.
    trained = (work / "stable-s1" / "runs" / "chat-s1" / "done.json").stat().st_mtime
    assert all(c.stat().st_mtime < trained for c in copied)
    assert (work / "stable-s1" / "results.json").exists()
    # What comes back from the lease: the folder without weights, with the logs of the sequence.
    pack = subprocess.run(["bash", str(BENCH / "real_weights.sh"), "pack", str(tmp_path / "s1.tgz")],
                          env={**recipe_env(), "WORK": str(work), "RUN": str(work / "stable-s1")},
                          capture_output=True, text=True)
    assert pack.returncode == 0, pack.stderr
    with tarfile.open(tmp_path / "s1.tgz") as tar:
        names = set(tar.getnames())
    assert {"./results.json", "./runs/chat-s1/metrics.jsonl", "recipe.log", "stages"} <= names
    assert not any(n.endswith(".safetensors") or "/checkpoints" in n or "transcripts" in n for n in names)

    # The next lease: the same paths (the model's is in each run's key), seed 0 carried in as kept pieces.
    keep = subprocess.run(["bash", str(BENCH / "real_weights.sh"), "keep", str(tmp_path / "keep")],
                          env={**recipe_env(), "RUN": str(work / "stable-s0")}, capture_output=True, text=True)
    assert keep.returncode == 0, keep.stderr
    results = strip_times(json.loads((work / "stable-s0" / "results.json").read_text()))
    work.rename(tmp_path / "last-lease")
    work.mkdir()
    shutil.copytree(tmp_path / "last-lease" / "model", work / "model")
    shutil.copytree(tmp_path / "keep", work / "keep-s0")
    assert pairs(work, "run", "+600", "0").returncode == 0
    assert stages_when_done(work) == ["seed 0 resumed", "seed 0 start", "seed 0 end rc=0", "sequence end"]
    assert f"resuming {work}/stable-s0: 2 of 2 runs trained" in (work / "recipe.log").read_text()
    assert strip_times(json.loads((work / "stable-s0" / "results.json").read_text())) == results


@pytest.mark.parametrize("seconds, min_start", [(30, None), (300, "400")])
def test_a_deadline_too_near_starts_no_seed(tiny_model_dir, tmp_path, seconds, min_start):
    """Too near: under a minute by default, under MIN_START seconds where it is set."""
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    assert pairs(tmp_path, "run", f"+{seconds}", "0", min_start=min_start).returncode == 0
    assert stages_when_done(tmp_path, 30) == ["seed 0 not started: the deadline is near", "sequence end"]
    assert not (tmp_path / "recipe.log").read_text().strip()


def test_a_deadline_brought_forward_stops_the_running_seed_and_starts_no_other(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    assert pairs(tmp_path, "run", "+600", "0", "1").returncode == 0
    end = time.monotonic() + 120
    while not ((tmp_path / "stages").exists() and (tmp_path / "stages").read_text().startswith("seed 0 start")):
        assert time.monotonic() < end, "seed 0 did not start"
        time.sleep(0.2)
    moved = pairs(tmp_path, "later", "+0")
    assert moved.returncode == 0 and moved.stdout.startswith("deadline ")
    stages = stages_when_done(tmp_path, 120)
    # SIGTERM at the moved deadline: the recipe stops (128 + 15) and seed 1 never starts.
    assert stages[1].startswith("deadline moved to ") and stages[:1] + stages[2:] == [
        "seed 0 start", "seed 0 end rc=143", "sequence end"], stages
    assert not (tmp_path / "stable-s0" / "results.json").exists()
    assert not (tmp_path / "stable-s1").exists()


def deadline_passes(tiny_model_dir: Path, work: Path, eval_seconds: str) -> list[str]:
    """A pair of 40 steps run with FINISH_BY 15 minutes away, its deadline brought to now once both runs have
    logged a step (a pace to project from), and `eval_seconds` for its evaluations. -> the stages. Enough steps
    that the deadline, read every two seconds, comes while the pair still trains: a stop asked in its last step
    or after it no longer stops it."""
    shutil.copytree(tiny_model_dir, work / "model")
    sets = SETS.replace("train.steps=2", "train.steps=40")
    assert pairs(work, "run", "+600", "0", sets=sets, FINISH_BY="+900", EVAL_SECONDS=eval_seconds).returncode == 0
    metrics = [work / "stable-s0" / "runs" / r / "metrics.jsonl" for r in ("chat-s0", "cut-s0")]
    end = time.monotonic() + 120
    while not all(m.exists() and m.read_text() for m in metrics):
        assert time.monotonic() < end, "the pair logged no step"
        time.sleep(0.2)
    assert pairs(work, "later", "+0").returncode == 0
    return stages_when_done(work, 300)


def test_a_pair_that_would_end_by_finish_by_goes_on_past_its_deadline(tiny_model_dir, tmp_path):
    stages = deadline_passes(tiny_model_dir, tmp_path, eval_seconds="0")
    assert stages[0] == "seed 0 start" and stages[1].startswith("deadline moved to ")
    assert stages[2].startswith("seed 0 needs about ") and " s: deadline moved to " in stages[2], stages
    assert stages[3:] == ["seed 0 end rc=0", "sequence end"]
    assert (tmp_path / "stable-s0" / "results.json").exists()


def test_a_pair_that_would_not_end_by_finish_by_stops_at_its_deadline(tiny_model_dir, tmp_path):
    stages = deadline_passes(tiny_model_dir, tmp_path, eval_seconds="5000")
    assert stages[:1] + stages[2:] == ["seed 0 start", "seed 0 end rc=143", "sequence end"], stages
    assert not (tmp_path / "stable-s0" / "results.json").exists()


@pytest.mark.slow
def test_a_group_of_seeds_is_one_folder_whose_runs_share_one_process(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    sets = SETS.replace(" --set train.runs_per_process=2", "")
    assert pairs(tmp_path, "run", "+600", "0,1", sets=sets).returncode == 0
    assert stages_when_done(tmp_path) == ["seed 0,1 start", "seed 0,1 end rc=0", "sequence end"]
    results = json.loads((tmp_path / "stable-s0-1" / "results.json").read_text())
    assert sorted(results["runs"]) == ["chat-s0", "chat-s1", "cut-s0", "cut-s1"]
    config = json.loads((tmp_path / "stable-s0-1" / "config.json").read_text())
    assert config["seeds"] == [0, 1] and config["train"]["runs_per_process"] == 4


@pytest.mark.slow
def test_a_run_started_while_the_model_converts_waits_for_it(tiny_model_dir, tmp_path):
    (tmp_path / "model.converting").touch()  # what bench/real_weights.sh model leaves while it converts
    assert pairs(tmp_path, "run", "+600", "0").returncode == 0
    time.sleep(3)
    assert not (tmp_path / "stable-s0").exists(), "nothing starts before the model is whole"
    shutil.copytree(tiny_model_dir, tmp_path / "model.part")
    (tmp_path / "model.part").rename(tmp_path / "model")
    (tmp_path / "model.converting").unlink()
    assert stages_when_done(tmp_path) == ["model converted", "seed 0 start", "seed 0 end rc=0", "sequence end"]
    assert (tmp_path / "stable-s0" / "results.json").exists()


def test_a_conversion_that_ends_without_a_model_ends_the_sequence(tmp_path):
    (tmp_path / "model.converting").touch()
    assert pairs(tmp_path, "run", "+600", "0").returncode == 0
    time.sleep(1)
    (tmp_path / "model.converting").unlink()
    assert stages_when_done(tmp_path, timeout=30) == [
        "no model: its conversion ended without one, or the deadline came", "sequence end"]
    assert not (tmp_path / "stable-s0").exists()


def test_the_model_step_marks_a_conversion_under_way_and_clears_the_mark(tmp_path):
    """`real_weights.sh model` holds the marker while it converts and removes it however it ends (here it fails,
    the pieces being no GGUF file)."""
    (tmp_path / "piece.00").write_bytes(b"not a gguf")
    seen = subprocess.Popen(["bash", "-c", f"until [ -f {tmp_path}/model.converting ]; do sleep 0.05; done; echo seen"],
                            stdout=subprocess.PIPE, text=True)
    done = subprocess.run(["bash", str(BENCH / "real_weights.sh"), "model", "0" * 64],
                          env={**recipe_env(), "WORK": str(tmp_path), "PYTHON": sys.executable},
                          capture_output=True, text=True, cwd=BENCH.parent, timeout=120)
    assert done.returncode != 0
    assert seen.communicate(timeout=10)[0].strip() == "seen"
    assert not (tmp_path / "model.converting").exists() and not (tmp_path / "model").exists()


USAGE = "usage: bash bench/pairs.sh run +SECONDS K[,K...] ... | later +SECONDS"


@pytest.mark.parametrize("args, says", [
    (["run", "600", "0"], USAGE),
    (["run", "+600"], USAGE),
    (["go"], USAGE),
    (["run", "+600", "1-2"], USAGE),
    (["run", "+600", "1,"], USAGE),
    (["later", "600"], USAGE),
    (["run", "+600", "0"], "no model; run bench/real_weights.sh model SHA256 first"),
    (["later", "+600"], "no deadline to move; start with bash bench/pairs.sh run"),
])
def test_a_wrong_command_says_what_to_do_in_one_line(tmp_path, args, says):
    done = pairs(tmp_path, *args)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1


FINISH_BY_SAYS = ": give the lease's end as +SECONDS from now, no sooner than the deadline +600"


@pytest.mark.parametrize("env, says", [
    ({"FINISH_BY": "900"}, "FINISH_BY=900" + FINISH_BY_SAYS),
    ({"FINISH_BY": "+300"}, "FINISH_BY=+300" + FINISH_BY_SAYS),
    ({"EVAL_SECONDS": "2m"}, "EVAL_SECONDS=2m: give it as whole seconds, e.g. EVAL_SECONDS=180"),
])
def test_a_finish_by_or_eval_seconds_that_cannot_be_read_is_refused_in_one_line(tiny_model_dir, tmp_path, env, says):
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    done = pairs(tmp_path, "run", "+600", "0", **env)
    assert done.returncode == 2 and done.stderr.strip() == says
    assert not (tmp_path / "stages").exists()


def test_a_min_start_that_is_not_seconds_is_refused_in_one_line(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    done = pairs(tmp_path, "run", "+600", "0", min_start="10m")
    assert done.returncode == 2 and done.stderr.strip() == "MIN_START=10m: give it as whole seconds, e.g. MIN_START=600"
    assert not (tmp_path / "stages").exists()
