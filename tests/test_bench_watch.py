"""bench/real_weights.sh watch keeps a folder (a GPU call's $OUT) current while a detached recipe runs, so that a
call the lease cuts short still brings back the runs' metrics and the log; it returns after one last copy once
the recipe has ended, and a mistake is one line."""

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "real_weights.sh"


def script_env(work: Path, tools: Path | None = None) -> dict[str, str]:
    """The script's environment: its work folder, the recipe folder in it, and `tools` first on PATH if given."""
    env = {**os.environ, "WORK": str(work), "RUN": str(work / "paper")}
    if tools is not None:
        env["PATH"] = f"{tools}:{os.environ['PATH']}"
    return env


def watch(*args: str, work: Path) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(SCRIPT), "watch", *args], env=script_env(work), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run(*args: str, work: Path, tools: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=script_env(work, tools), cwd=cwd, capture_output=True,
                          text=True, timeout=20)


def stand_in(tmp_path: Path, name: str, body: str) -> Path:
    """An executable `name` running the shell lines `body`, in a folder of its own to put first on PATH: that
    folder."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    (tools / name).write_text("#!/bin/sh\n" + body)
    (tools / name).chmod(0o755)
    return tools


def members(tgz: Path) -> dict[str, str]:
    with tarfile.open(tgz) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_watch_copies_while_the_recipe_runs_and_once_more_after_it_ends(tmp_path):
    work = tmp_path / "work"
    metrics = work / "paper" / "runs" / "chat-s0" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"step": 0}\n')
    (work / "paper" / "config.json").write_text("{}")
    (work / "paper" / "runs" / "chat-s0" / "weights.safetensors").write_text("not copied")
    (work / "recipe.log").write_text("step 0\n")
    # Stands in for the recipe `start` left running: it ends when the test closes its input, and is not reaped
    # until the test is done (a zombie, as a detached recipe whose parent never waits for it).
    recipe = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    (work / "recipe.pid").write_text(f"{recipe.pid}\n")
    out = tmp_path / "out"
    watcher = watch(str(out), "0.2", work=work)
    deadline = time.monotonic() + 10
    while not (out / "watch.tgz").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert members(out / "watch.tgz") == {"runs/chat-s0/metrics.jsonl": '{"step": 0}\n', "config.json": "{}"}, \
        "a copy while it runs"
    assert watcher.poll() is None, "watch returned while the recipe was still running"
    # What the recipe writes last, just before it ends, is in the copy made after its end.
    metrics.write_text('{"step": 0}\n{"step": 1}\n')
    (work / "paper" / "evals" / "base-chat").mkdir(parents=True)
    (work / "paper" / "evals" / "base-chat" / "summary.json").write_text("{}")
    with (work / "recipe.log").open("a") as log:
        log.write("step 1\n")
    recipe.stdin.close()
    try:
        assert watcher.wait(timeout=20) == 0, watcher.stderr.read()
    finally:
        watcher.kill()  # a watch that never returned does not outlive the test
        recipe.wait()
    assert members(out / "watch.tgz") == {"runs/chat-s0/metrics.jsonl": '{"step": 0}\n{"step": 1}\n',
                                          "evals/base-chat/summary.json": "{}", "config.json": "{}"}
    assert (out / "recipe.log.tail").read_text() == "step 0\nstep 1\n"
    assert sorted(p.name for p in out.iterdir()) == ["recipe.log.tail", "watch.tgz"], "no half-written files left"


@pytest.mark.parametrize("args, code, says", [
    ([], 2, "usage: bash bench/real_weights.sh watch DEST [SECONDS]"),
    (["out"], 1, "recipe.pid: start the recipe (bash"),
])
def test_a_watch_that_cannot_run_says_why_in_one_line(tmp_path, args, code, says):
    done = watch(*[str(tmp_path / a) for a in args], work=tmp_path / "work")
    _, err = done.communicate(timeout=20)
    assert done.returncode == code
    assert says in err and len(err.strip().splitlines()) == 1


def test_a_file_that_changes_while_tar_reads_it_still_gives_a_copy(tmp_path):
    # GNU tar exits 1 when a file changed as it read it (a step appending its metrics) but writes the archive: a
    # tar that always exits 1 stands in for that moment, so the copy must still be made.
    tools = stand_in(tmp_path, "tar", f'"{shutil.which("tar")}" "$@"\nexit 1\n')
    work = tmp_path / "work"
    metrics = work / "paper" / "runs" / "chat-s0" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"step": 0}\n')
    (work / "recipe.log").write_text("step 0\n")
    (work / "recipe.pid").write_text("999999999\n")  # no such process: the recipe has ended, one copy is made
    done = run("watch", str(tmp_path / "out"), "0.2", work=work, tools=tools)
    assert done.returncode == 0, done.stderr
    assert members(tmp_path / "out" / "watch.tgz") == {"runs/chat-s0/metrics.jsonl": '{"step": 0}\n'}


def test_time_starts_the_recipe_timed_and_detached_and_watch_brings_back_its_timing(tmp_path):
    work = tmp_path / "work"
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text("{}")  # converted already: `model` has nothing to do
    (work / "gsm8k").mkdir()
    # Stands in for the GPU machine's python3: records what it was asked to run, and writes the timing as
    # bench/recipe_timing.py does when the recipe ends.
    tools = stand_in(tmp_path, "python3", f'printf "%s\\n" "$@" > "{work}/args"\n'
                                          f'echo \'{{"finished": true}}\' > "{work}/timing.json"\n')
    started = run("time", "0" * 64, "--set", "seeds=0,1", work=work, tools=tools, cwd=SCRIPT.parents[1])
    assert started.returncode == 0 and "timed" in started.stdout, started.stderr
    assert (work / "recipe.pid").read_text().strip().isdigit()
    deadline = time.monotonic() + 10
    while not (work / "timing.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (work / "args").read_text().split("\n")[:4] == ["bench/recipe_timing.py", "--out",
                                                           str(work / "timing.json"), "--"]
    assert "--out\n" + str(work / "paper") in (work / "args").read_text()
    assert (work / "args").read_text().rstrip().endswith("--set\nseeds=0,1"), "the caller's settings come last"
    done = run("watch", str(tmp_path / "out"), "0.2", work=work, tools=tools)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "timing.json").read_text() == '{"finished": true}\n'


def test_start_runs_the_recipe_detached_with_the_callers_settings_last(tmp_path):
    work = tmp_path / "work"
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text("{}")
    (work / "gsm8k").mkdir()
    tools = stand_in(tmp_path, "python3",
                     f'printf "%s\\n" "$@" > "{work}/args.part"\nmv "{work}/args.part" "{work}/args"\n')
    started = run("start", "0" * 64, "--set", "seeds=0,1", work=work, tools=tools, cwd=SCRIPT.parents[1])
    assert started.returncode == 0 and "started pid" in started.stdout, started.stderr
    deadline = time.monotonic() + 10
    while not (work / "args").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    args = (work / "args").read_text().split("\n")
    assert args[:5] == ["-m", "talktosolve.cli", "recipe", "--preset", "paper"]
    assert "\n".join(args).rstrip().endswith("--set\ntrain.runs_per_process=6\n--set\nseeds=0,1")


@pytest.mark.parametrize("verb", ["start", "time"])
def test_start_or_time_without_the_models_checksum_says_how_to_call_it(tmp_path, verb):
    done = run(verb, work=tmp_path / "work")
    assert done.returncode == 2
    assert done.stderr.strip() == f"usage: bash bench/real_weights.sh {verb} SHA256 [--set KEY=VALUE ...]"
