"""`bench/recipe_timing.py` times a recipe's command from start to results and splits the time by what the folder
it wrote says: the stages' own seconds and the rest."""

import json

import pytest
from helpers import bench_script


@pytest.fixture(scope="module")
def timing_script():
    return bench_script("recipe_timing")


def test_a_recipe_folders_time_splits_into_its_stages_and_the_rest(timing_script, tiny_recipe):
    results = json.loads((tiny_recipe.out / "results.json").read_text())
    evals = sum(json.loads(f.read_text())["seconds"] for f in tiny_recipe.out.glob("evals/*/summary.json"))
    wall = results["run"]["wall_seconds"] + 30.0
    command = "talktosolve recipe --preset tiny"
    t = timing_script.timing(tiny_recipe.out, [{"command": command, "wall_seconds": 10.0, "returncode": 1},
                                               {"command": command, "wall_seconds": wall - 10, "returncode": 0}])
    assert t["wall_seconds"] == round(wall, 1) and len(t["invocations"]) == 2
    assert t["runs"] == len(list(tiny_recipe.out.glob("runs/*/done.json"))) > 0
    assert t["evaluations"] == len(list(tiny_recipe.out.glob("evals/*/summary.json"))) > 0
    assert t["stages"]["training"] == round(results["run"]["train_seconds"], 1)
    assert t["stages"]["evaluations"] == pytest.approx(evals, abs=0.06)
    # The stages the recipe counts add up to its own time of all stages; the rest is what the command spent beside.
    stages = t["stages"]["training"] + t["stages"]["evaluations"] + t["stages"]["influence"]
    assert stages == pytest.approx(results["run"]["wall_seconds"], abs=0.2)
    assert t["stages"]["rest"] == pytest.approx(30.0, abs=0.06)
    assert t["gpu_minutes"] is None and t["minutes"] == round(wall / 60, 2)
    assert t["training"]["training"] == pytest.approx(results["run"]["train_seconds"], abs=0.15)


def test_it_refuses_a_folder_that_exists_and_arguments_without_an_out_folder(timing_script, tmp_path):
    with pytest.raises(SystemExit, match="exists; a resumed recipe would time only"):
        timing_script.main(["--out", str(tmp_path / "t.json"), "--", "--preset", "tiny", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="with its --out folder"):
        timing_script.main(["--out", str(tmp_path / "t.json"), "--", "--preset", "tiny"])
    with pytest.raises(SystemExit, match="the recipe's arguments: unrecognized arguments: --bogus"):
        timing_script.main(["--out", str(tmp_path / "t.json"), "--", "--preset", "tiny", "--out",
                            str(tmp_path / "rec"), "--bogus"])
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_a_failed_recipe_leaves_its_time_and_a_rerun_after_it_counts_both(timing_script, tmp_path, capsys):
    rec, first, second = tmp_path / "rec", tmp_path / "first.json", tmp_path / "t.json"
    with pytest.raises(SystemExit, match=f"rerun with --after {first}"):
        timing_script.main(["--out", str(first), "--", "--preset", "tiny", "--out", str(rec), "--quiet",
                            "--set", "train.lr=fast"])
    failed = json.loads(first.read_text())
    assert failed["finished"] is False and [i["returncode"] for i in failed["invocations"]] == [2]
    assert timing_script.main(["--out", str(second), "--after", str(first), "--", "--preset", "tiny", "--out",
                               str(rec), "--quiet"]) == 0
    t = json.loads(second.read_text())
    results = json.loads((rec / "results.json").read_text())
    assert t["finished"] is True and [i["returncode"] for i in t["invocations"]] == [2, 0]
    assert t["wall_seconds"] == pytest.approx(sum(i["wall_seconds"] for i in t["invocations"]), abs=0.06)
    assert t["wall_seconds"] > results["run"]["wall_seconds"] and t["stages"]["rest"] > 0
    assert t["command"] == f"talktosolve recipe --preset tiny --out {rec} --quiet"
    assert t["runs"] == len(results["runs"]) and "GPU minutes" not in capsys.readouterr().out
    # A finished timing, or another folder's, is not one to resume after.
    with pytest.raises(SystemExit, match="is not an unfinished timing of"):
        timing_script.main(["--out", str(tmp_path / "x.json"), "--after", str(second), "--", "--preset", "tiny",
                            "--out", str(rec)])
    with pytest.raises(SystemExit, match="is not an unfinished timing of"):
        timing_script.main(["--out", str(tmp_path / "x.json"), "--after", str(first), "--", "--preset", "tiny",
                            "--out", str(tmp_path / "other")])
