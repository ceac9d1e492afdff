"""bench/real_weights.sh carries torch inductor's compile cache from one GPU lease to the next: `save-cache`
packs the folder torch compiles into, `load-cache` unpacks it where the next process looks, and a mistake is
one line."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "real_weights.sh"


def cache(cmd: str, *args: str, cache_dir: Path, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "WORK": str(work)}
    return subprocess.run(["bash", str(SCRIPT), cmd, *args], env=env, capture_output=True, text=True)


def files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_saved_cache_loads_into_the_next_machines_cache_folder_file_for_file(tmp_path):
    old = tmp_path / "lease-1" / "torchinductor_root"
    (old / "fxgraph" / "ab").mkdir(parents=True)
    (old / "fxgraph" / "ab" / "entry").write_bytes(b"\x00compiled graph\xff")
    (old / "triton" / "0" / "k1").mkdir(parents=True)
    (old / "triton" / "0" / "k1" / "kernel.cubin").write_bytes(os.urandom(4096))
    saved = cache("save-cache", str(tmp_path / "inductor.tgz"), cache_dir=old, work=tmp_path / "w1")
    assert saved.returncode == 0, saved.stderr
    new = tmp_path / "lease-2" / "torchinductor_root"  # not there yet: a fresh machine
    loaded = cache("load-cache", str(tmp_path / "inductor.tgz"), cache_dir=new, work=tmp_path / "w2")
    assert loaded.returncode == 0, loaded.stderr
    assert files(new) == files(old) and len(files(new)) == 2


@pytest.mark.parametrize("cmd, arg, code, says", [
    ("save-cache", "out.tgz", 1, "no compile cache at"),
    ("load-cache", "missing.tgz", 1, "no file"),
    ("save-cache", None, 2, "usage: bash bench/real_weights.sh save-cache FILE"),
])
def test_a_cache_command_that_cannot_run_says_why_in_one_line(tmp_path, cmd, arg, code, says):
    done = cache(cmd, *([str(tmp_path / arg)] if arg else []), cache_dir=tmp_path / "none", work=tmp_path / "w")
    assert done.returncode == code
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
