"""Every subcommand, given each kind of wrong argument, ends in one line on stderr and exit status 2, having
written nothing: no traceback, no usage dump, no half-made folder.

The kinds: a missing path, a path of the wrong kind, a value of the wrong type, a value out of range, an unknown
key or option, an empty folder, and a folder written by another command (real ones, from one tiny recipe run);
then an input the command would silently ignore, and a mistake that used to be found only after work began.
Below the cases: what a new user meets besides mistakes (the default preset, a Hub that cannot be reached,
--version, fast --help, the recipe's summary and what a rerun says).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from talktosolve.cli import main

pytestmark = pytest.mark.slow  # the folders of other commands come from one tiny recipe run (shared)

ROOT = Path(__file__).resolve().parents[1]

# (subcommand, kind of mistake, arguments); {name} is a path from the `paths` fixture.
CASES = [
    ("data", "missing path", "--gsm8k {missing} --out {new}"),
    ("data", "missing argument", "--gsm8k {gsm8k}"),
    ("data", "wrong kind", "--gsm8k {gsm8k}/train.jsonl --out {new}"),  # one file holds one split
    ("data", "wrong kind", "--gsm8k {gsm8k} --out {file}"),
    ("data", "wrong kind", "--gsm8k {gsm8k} --out {file}/sub"),
    ("data", "wrong type", "--gsm8k {gsm8k} --out {new} --n-train many"),
    ("data", "wrong type", "--gsm8k {gsm8k} --out {new} --seed 1.5"),
    ("data", "out of range", "--gsm8k {gsm8k} --out {new} --n-train -1"),
    ("data", "out of range", "--gsm8k {gsm8k} --out {new} --n-train 1000"),
    ("data", "out of range", "--gsm8k {gsm8k} --out {new} --seed -1"),
    ("data", "unknown key", "--gsm8k {gsm8k} --out {new} --n-trian 3"),
    ("data", "empty folder", "--gsm8k {empty} --out {new}"),
    ("data", "another command's folder", "--gsm8k {data} --out {new}"),
    ("data", "another command's folder", "--gsm8k {run} --out {new}"),
    ("data", "another command's folder", "--gsm8k {gsm8k} --out {run}"),
    ("data", "another command's folder", "--gsm8k {gsm8k} --out {recipe}"),

    ("train", "missing path", "--arm chat --out {new} --preset {missing}.json"),
    ("train", "missing path", "--arm chat --out {new} --gsm8k {missing}"),
    ("train", "missing path", "--arm chat --out {new} --set model.name_or_path={missing}"),
    ("train", "missing argument", "--out {new}"),
    ("train", "wrong kind", "--arm chat --out {file}"),
    ("train", "wrong kind", "--arm chat --out {new} --preset {folder_json}"),
    ("train", "wrong kind", "--arm chat --out {new} --preset {not_json}"),
    ("train", "wrong type", "--arm chat --out {new} --set train.lr=abc"),
    ("train", "wrong type", "--arm chat --out {new} --set train.steps=1.5"),
    ("train", "wrong type", "--arm chat --out {new} --set model.gradient_checkpointing=maybe"),
    ("train", "wrong type", "--arm chat --out {new} --seed x"),
    ("train", "wrong type", "--arm chat --out {new} --preset {typo_preset}"),
    ("train", "out of range", "--arm chat --out {new} --set train.steps=-1"),
    ("train", "out of range", "--arm chat --out {new} --set train.lr=0"),
    ("train", "out of range", "--arm chat --out {new} --set train.checkpoint_every=0"),
    ("train", "out of range", "--arm chat --out {new} --set train.dynamic_sampling=true --set train.max_draws=2 "
                              "--set train.draw_batches=3"),
    ("train", "out of range", "--arm chat --out {new} --set chat.temperature=0 --set train.grad_clip=-1"),
    ("train", "out of range", "--arm chat --out {new} --seed -3"),
    ("train", "out of range", "--arm chat --out {new} --set device=gpu"),
    ("train", "unknown key", "--arm chat --out {new} --set train.lrr=1"),
    ("train", "unknown key", "--arm chat --out {new} --set train=3"),
    ("train", "unknown key", "--arm chats --out {new}"),
    ("train", "unknown key", "--arm chat --out {new} --bogus"),
    ("train", "empty folder", "--arm chat --out {new} --gsm8k {empty}"),
    ("train", "another command's folder", "--arm chat --out {eval}"),
    ("train", "missing path", "--arm chat --out {new} --set train.partners=0.5 --set train.partner={missing}"),
    ("train", "unknown key", "--arm chat --out {new} --set model.adapters=each"),
    ("train", "another command's folder", "--arm chat --out {recipe}"),
    ("train", "another command's folder", "--arm chat --out {new} --gsm8k {run}"),
    ("train", "another command's folder", "--arm chat --out {new} --preset {run}/config.json"),

    ("eval", "missing path", "--a {missing} --out {new}"),
    ("eval", "missing path", "--b {missing} --out {new}"),
    ("eval", "wrong kind", "--a {file} --out {new}"),
    ("eval", "wrong kind", "--a {run} --out {file}"),
    ("eval", "wrong kind", "--a {run} --out {file}/sub"),
    ("eval", "wrong type", "--out {new} --set eval.n_problems=many"),
    ("eval", "wrong type", "--out {new} --set seeds=0,x"),
    ("eval", "out of range", "--out {new} --set eval.n_problems=0"),
    ("eval", "out of range", "--out {new} --set eval.n_problems=1000"),
    ("eval", "unknown key", "--out {new} --set eval.nproblems=3"),
    ("eval", "unknown key", "--out {new} --arm talk"),
    ("eval", "empty folder", "--a {empty} --out {new}"),
    ("eval", "another command's folder", "--a {eval} --out {new}"),
    ("eval", "another command's folder", "--a {recipe} --out {new}"),
    ("eval", "another command's folder", "--a {data} --out {new}"),
    ("eval", "another command's folder", "--a {unfinished} --out {new}"),
    ("eval", "another command's folder", "--a {model} --out {new}"),
    ("eval", "another command's folder", "--a {run} --out {run}"),
    ("eval", "wrong type", "--a {run} --role A --out {new}"),
    ("eval", "unknown key", "--a {run} --role A=C --out {new}"),

    ("compare", "missing path", "--chat {missing} --cut {eval_cut}"),
    ("compare", "missing argument", "--chat {eval}"),
    ("compare", "wrong kind", "--chat {file} --cut {eval_cut}"),
    ("compare", "wrong type", "--chat {not_a_summary} --cut {eval_cut}"),
    ("compare", "out of range", "--chat {eval} --cut {other_problems}"),
    ("compare", "unknown key", "--chat {eval} --cut {eval_cut} --bogus"),
    ("compare", "empty folder", "--chat {eval} --cut {empty}"),
    ("compare", "another command's folder", "--chat {run} --cut {eval_cut}"),
    ("compare", "another command's folder", "--chat {recipe} --cut {eval_cut}"),
    ("compare", "another command's folder", "--chat {eval} --cut {data}"),

    ("influence", "missing path", "--eval {missing}"),
    ("influence", "missing argument", ""),
    ("influence", "wrong kind", "--eval {file}"),
    ("influence", "wrong type", "--eval {eval} --turns x"),
    ("influence", "out of range", "--eval {eval} --turns 9"),
    ("influence", "out of range", "--eval {eval} --set eval.influence_problems=1"),
    ("influence", "unknown key", "--eval {eval} --set eval.influence_kind=remove"),
    ("influence", "empty folder", "--eval {empty}"),
    ("influence", "another command's folder", "--eval {run}"),
    ("influence", "another command's folder", "--eval {recipe}"),
    ("influence", "another command's folder", "--eval {eval} --preset micro"),  # evaluated under another config

    ("recipe", "missing path", "--out {new} --preset {missing}.json"),
    ("recipe", "missing path", "--out {new} --gsm8k {missing}"),
    ("recipe", "missing path", "--out {new} --set model.name_or_path={missing}"),
    ("recipe", "wrong kind", "--out {file}"),
    ("recipe", "wrong kind", "--out {new} --preset {folder_json}"),
    ("recipe", "wrong type", "--out {new} --set parallel_runs=two"),
    ("recipe", "wrong type", "--out {new} --set model.name_or_path=none"),
    ("recipe", "out of range", "--out {new} --set seeds="),
    ("recipe", "out of range", "--out {new} --set parallel_runs=0"),
    ("recipe", "out of range", "--out {new} --set arms=chat,talk"),
    ("recipe", "out of range", "--out {new} --set train.runs_per_process=2 --set model.finetune=full"),
    ("recipe", "unknown key", "--out {new} --set trian.steps=1"),
    ("recipe", "unknown key", "--out {new} --set train.lr"),
    ("recipe", "empty folder", "--out {new} --gsm8k {empty}"),
    ("recipe", "another command's folder", "--out {run}"),
    ("recipe", "another command's folder", "--out {eval}"),
    ("recipe", "another command's folder", "--out {data}"),

    ("diagnose", "missing path", "{missing}"),
    ("diagnose", "missing argument", ""),
    ("diagnose", "wrong kind", "{file}"),
    ("diagnose", "wrong type", "{recipe} --bins x"),
    ("diagnose", "out of range", "{recipe} --bins 0"),
    ("diagnose", "unknown key", "{recipe} --steps 3"),
    ("diagnose", "empty folder", "{empty}"),
    ("diagnose", "another command's folder", "{data}"),
    ("diagnose", "another command's folder", "{model}"),
    ("diagnose", "another command's folder", "{unfinished}"),  # a run with no step written yet
    ("micro-base", "wrong kind", "--out {file}"),
    ("micro-base", "wrong kind", "--out {file}/sub"),
    ("micro-base", "wrong type", "--seed abc"),
    ("micro-base", "out of range", "--seed -1"),
    ("micro-base", "out of range", f"--seed {2**64}"),
    ("micro-base", "unknown key", "--steps 3"),
    ("micro-base", "another command's folder", "--out {run}"),
    ("micro-base", "another command's folder", "--out {recipe}"),

    ("", "unknown key", "trian"),
    ("", "missing argument", ""),

    # Inputs a command would ignore without a word: refused like any other mistake.
    ("train", "ignored input", "--arm chat --out {new} --gsm8k {gsm8k}"),  # the micro task makes its own problems
    ("eval", "ignored input", "--out {new} --gsm8k {gsm8k}"),
    ("recipe", "ignored input", "--out {new} --gsm8k {gsm8k}"),
    ("recipe", "ignored input", "--out {new} --set data.gsm8k={gsm8k}"),
    # one shared adapter for every seat: nothing to swap (the run's own base model, so only the roles are wrong)
    ("eval", "ignored input", "--a {run} --role A=B --role B=A --out {new} --set model.name_or_path={model}"),
    ("eval", "ignored input", "--role A=B --role B=A --out {new}"),  # the base in every seat
    ("eval", "ignored input", "--out {new} --log tensorboard"),  # an evaluation logs no metrics
    ("compare", "ignored input", "--chat {eval} --cut {eval}"),
    ("compare", "ignored input", "--chat {eval} {eval} --cut {eval_cut}"),

    # Mistakes once found only after a model was loaded or a file written (wandb is made unimportable below).
    ("train", "late failure", "--arm chat --out {new} --log wandb"),
    ("recipe", "late failure", "--out {new} --log wandb"),
    ("recipe", "late failure", "--out {new} --preset paper --set model.name_or_path={model} --gsm8k {one_split} "
                               "{small}"),
    ("train", "late failure", "--arm chat --out {new} --preset paper --set model.name_or_path={model} "
                              "--gsm8k {one_split} {small}"),
    ("eval", "late failure", "--out {new} --preset paper --set model.name_or_path={model} --gsm8k {one_split} "
                             "{small}"),
    # good data, a missing model: the problems built from the data must not be left behind
    ("train", "late failure", "--arm chat --out {new} --preset paper --gsm8k {gsm8k} {small} "
                              "--set model.name_or_path={missing}"),
    ("recipe", "late failure", "--out {new} --preset paper --gsm8k {gsm8k} {small} --set model.name_or_path={missing}"),
]

# The commands that run a model get the tiny preset (unless a case gives its own): a case that slipped through
# would start a small run, not a paper-sized one. `data` asks for as many problems as the tiny GSM8K holds, so
# that the mistake a case makes is the only one in it.
RUNS_A_MODEL = ("train", "eval", "recipe")
DATA_SIZES = ["--n-train", "2", "--n-test", "1"]
SMALL = "--set data.n_train=2 --set data.n_test=1 --set train.problems_per_step=2 --set eval.n_problems=1"
"""The paper preset's sizes cut to the tiny GSM8K's (a case that gives it makes one mistake only)."""


@pytest.fixture(scope="module")
def paths(tiny_recipe, tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """Every path a case names: missing ones, files, empty folders, and folders real commands wrote."""
    root = tmp_path_factory.mktemp("cli-errors")
    gsm8k = root / "gsm8k"
    gsm8k.mkdir()
    for split, n in (("train", 4), ("test", 3)):
        rows = [{"question": f"Tom has {i + 2} apples. Jim has {i + 3} pears. How many fruits are there?",
                 "answer": f"They add up.\n#### {2 * i + 5}"} for i in range(n)]
        (gsm8k / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["data", "--gsm8k", str(gsm8k), "--out", str(root / "data"), *DATA_SIZES]) == 0
    rec = tiny_recipe.out
    p = {"missing": root / "no-such-thing", "file": root / "a-file.txt",
         "empty": root / "empty", "folder_json": root / "folder.json", "not_json": root / "not-json.json",
         "typo_preset": root / "typo.json", "gsm8k": gsm8k, "data": root / "data", "recipe": rec,
         "run": rec / "runs" / "chat-s0", "eval": rec / "evals" / "chat-s0", "eval_cut": rec / "evals" / "cut-s0",
         "unfinished": root / "unfinished", "not_a_summary": root / "not-a-summary",
         "other_problems": root / "other-problems", "model": tiny_model_dir, "one_split": root / "one-split"}
    p["file"].write_text("not a folder\n")
    p["empty"].mkdir()
    p["folder_json"].mkdir()
    p["not_json"].write_text("{train: steps}\n")
    p["typo_preset"].write_text(json.dumps({"train": {"lr": "3e-4"}}))
    p["unfinished"].mkdir()
    shutil.copy(p["run"] / "config.json", p["unfinished"] / "config.json")
    p["one_split"].mkdir()  # GSM8K without its test split
    shutil.copy(gsm8k / "train.jsonl", p["one_split"] / "train.jsonl")
    p["not_a_summary"].mkdir()
    (p["not_a_summary"] / "summary.json").write_text("[1, 2, 3]\n")
    shutil.copytree(p["eval_cut"], p["other_problems"])
    summary = json.loads((p["other_problems"] / "summary.json").read_text())
    summary["problem_ids"] = summary["problem_ids"][::-1]
    (p["other_problems"] / "summary.json").write_text(json.dumps(summary))
    return p


def argv(command: str, args: str, paths: dict[str, Path]) -> list[str]:
    filled = args.format(small=SMALL, **{k: str(v) for k, v in paths.items()}).split()
    if command in RUNS_A_MODEL:
        filled += ["--quiet"] + ([] if "--preset" in filled else ["--preset", "tiny"])
    if command == "data" and "--n-train" not in filled:
        filled += DATA_SIZES
    return ([command] if command else []) + filled


def snapshot(*roots: Path) -> dict:
    return {str(f): (f.stat().st_size, f.stat().st_mtime_ns) for root in roots for f in root.rglob("*")}


@pytest.mark.parametrize("command, kind, args", CASES, ids=[f"{c or 'talktosolve'}: {k}: {a}" for c, k, a in CASES])
def test_a_wrong_argument_ends_in_one_line_and_exit_2_with_nothing_written(command, kind, args, paths, capsys,
                                                                          monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a missing model path must not turn into a download attempt
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, as where it is not installed
    monkeypatch.chdir(tmp_path)
    paths = {**paths, "new": tmp_path / "new-out"}  # an output folder that must not come into being
    roots = (paths["file"].parent, paths["recipe"], tmp_path)
    before = snapshot(*roots)
    try:
        code = main(argv(command, args, paths))
    except BaseException as e:  # noqa: BLE001 - what escapes main is a traceback for the user
        pytest.fail(f"{type(e).__name__} escaped main: {e}")
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert snapshot(*roots) == before
    assert not paths["new"].exists()


def test_every_subcommand_and_every_kind_of_mistake_is_tried():
    from talktosolve.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    assert {c for c, _, _ in CASES if c} == commands
    kinds = {"missing path", "wrong kind", "wrong type", "out of range", "unknown key", "empty folder",
             "another command's folder"}
    for command in commands:
        tried = {k for c, k, _ in CASES if c == command}
        # micro-base reads no path: it has no missing input, and an empty --out is a valid one
        assert tried >= kinds - ({"missing path", "empty folder"} if command == "micro-base" else set()), command


@pytest.mark.parametrize("args", [["train", "--arm", "chat", "--out", "x", "--set", "train.lr=abc"],
                                  ["compare", "--chat", "no-such-eval", "--cut", "no-such-eval"]])
def test_the_command_line_process_ends_in_one_line_too(args, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "talktosolve.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_mistake_in_the_data_is_named_before_the_model_is_looked_for(paths, capsys, monkeypatch, tmp_path):
    """The paper preset's model is not at hand here (offline): the error is still the data's, found first."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for command in (["train", "--arm", "chat"], ["eval"], ["recipe"]):
        code = main([*command, "--preset", "paper", "--gsm8k", str(paths["one_split"]), "--out",
                     str(tmp_path / "new"), "--quiet", *SMALL.split()])
        err = capsys.readouterr().err
        assert code == 2 and "no test split" in err and err.count("\n") == 1, err
        assert not (tmp_path / "new").exists()


def test_a_hub_model_that_cannot_be_reached_fails_in_one_line_within_seconds(capsys, monkeypatch, tmp_path):
    import time

    from huggingface_hub import constants

    # A Hub on a port where nothing listens, online mode: where the Hub would be asked, and refuses at once.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))  # nothing cached either
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    began = time.monotonic()
    code = main(["train", "--arm", "chat", "--out", str(tmp_path / "new"), "--quiet",
                 "--set", "model.name_or_path=nobody/no-such-model"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "nobody/no-such-model" in err and "HF_HUB_OFFLINE" in err
    assert time.monotonic() - began < 10
    assert not (tmp_path / "new").exists()


def test_train_and_eval_default_to_the_preset_recipe_defaults_to():
    from talktosolve.cli import build_parser

    parser = build_parser()
    recipe = parser.parse_args(["recipe"]).preset
    assert recipe == "micro"  # the one that runs on a laptop CPU with nothing downloaded
    assert parser.parse_args(["train", "--arm", "chat", "--out", "x"]).preset == recipe
    assert parser.parse_args(["eval", "--out", "x"]).preset == recipe


def test_version_is_printed(capsys):
    from talktosolve import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"talktosolve {__version__}"


def test_help_loads_no_model_library():
    """--help on every command answers at once: torch and transformers are imported by the commands that run."""
    script = ("import sys\nfrom talktosolve.cli import build_parser, main\n"
              "commands = [[]] + [[c] for c in build_parser()._subparsers._group_actions[0].choices]\n"
              "for command in commands:\n"
              "    try:\n        main(command + ['--help'])\n    except SystemExit as e:\n        assert e.code == 0\n"
              "heavy = sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)\n"
              "assert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_option_of_every_command_says_what_it_is():
    from talktosolve.cli import build_parser

    parser = build_parser()
    for name, sub in [("talktosolve", parser), *parser._subparsers._group_actions[0].choices.items()]:
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {'/'.join(action.option_strings)} has no help text"


def test_the_summary_header_and_time_line_read_plainly(tiny_recipe):
    from talktosolve.experiment.summary import terminal_summary

    results = json.loads((tiny_recipe.out / "results.json").read_text())
    printed = terminal_summary(results)
    header, time_line = printed.splitlines()[0], printed.splitlines()[-1]
    assert header.endswith("seeds 0, 1; 3 steps"), header  # not a list that seems to hold "1, 3"
    assert results["run"]["gpu_seconds"] is None and "GPU" not in time_line, time_line  # a CPU run
    results["run"].update(gpu="NVIDIA H200", gpu_seconds=12.5)
    assert terminal_summary(results).splitlines()[-1].endswith("GPU 12.500 s")


def test_a_rerun_says_what_it_found_done_and_estimates_only_what_will_run(tiny_recipe, tiny_model_dir, capsys,
                                                                         tmp_path):
    out = tmp_path / "rec"
    shutil.copytree(tiny_recipe.out, out)  # the shared folder stays as it is; a moved recipe folder resumes
    shutil.rmtree(out / "evals" / "chat-s1" / "influence")  # one influence replay left to do
    code = main(["recipe", "--preset", "tiny", "--out", str(out), "--quiet",
                 "--set", f"model.name_or_path={tiny_model_dir}"])
    assert code == 0
    err = capsys.readouterr().err
    assert f"resuming {out}: 4 of 4 runs trained, 14 of 14 evaluations done, 5 of 6 influence replays done" in err, err
    assert "influence: 1 evaluation x " in err, err  # the one replay left, not all six


def test_the_test_extra_installs_what_the_tests_read():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(dep.startswith("pyarrow") for dep in project["project"]["optional-dependencies"]["test"])
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert not [m for m in markers if "device tool" in m], markers  # a user has pytest, not our tooling
