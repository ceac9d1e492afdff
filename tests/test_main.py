"""`python -m talktosolve` is the `talktosolve` command."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "talktosolve", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_python_dash_m_talktosolve_runs_the_command_line(tmp_path):
    done = run("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: talktosolve") and "recipe" in done.stdout
    done = run("compare", "--chat", "no-such-eval", "--cut", "no-such-eval", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: argument --chat: no-such-eval does not exist")
