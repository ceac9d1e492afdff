"""Every subcommand, given each kind of wrong argument, ends in one line on stderr and exit status 2, having
written nothing: no traceback, no usage dump, no half-made folder.

The kinds: a missing path, a path of the wrong kind, a value of the wrong type, a value out of range, an unknown
key or option, an empty folder, and a folder written by another command (real ones, from one tiny recipe run).
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
]

# The commands that run a model get the tiny preset (unless a case gives its own): a case that slipped through
# would start a small run, not a paper-sized one. `data` asks for as many problems as the tiny GSM8K holds, so
# that the mistake a case makes is the only one in it.
RUNS_A_MODEL = ("train", "eval", "recipe")
DATA_SIZES = ["--n-train", "2", "--n-test", "1"]


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
         "other_problems": root / "other-problems", "model": tiny_model_dir}
    p["file"].write_text("not a folder\n")
    p["empty"].mkdir()
    p["folder_json"].mkdir()
    p["not_json"].write_text("{train: steps}\n")
    p["typo_preset"].write_text(json.dumps({"train": {"lr": "3e-4"}}))
    p["unfinished"].mkdir()
    shutil.copy(p["run"] / "config.json", p["unfinished"] / "config.json")
    p["not_a_summary"].mkdir()
    (p["not_a_summary"] / "summary.json").write_text("[1, 2, 3]\n")
    shutil.copytree(p["eval_cut"], p["other_problems"])
    summary = json.loads((p["other_problems"] / "summary.json").read_text())
    summary["problem_ids"] = summary["problem_ids"][::-1]
    (p["other_problems"] / "summary.json").write_text(json.dumps(summary))
    return p


def argv(command: str, args: str, paths: dict[str, Path]) -> list[str]:
    filled = args.format(**{k: str(v) for k, v in paths.items()}).split()
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

