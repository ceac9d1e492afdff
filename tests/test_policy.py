"""Where a model comes from: which path is a GGUF checkpoint, and the errors a user can act on. Loading a real
GGUF file is tested in `test_real_model.py`."""

import importlib.util

import pytest

from talktosolve.cli import main
from talktosolve.model.policy import ModelError, gguf_file


def dummy(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")
    return path


@pytest.fixture
def gguf_installed(monkeypatch):
    """`gguf_file` checks that the package is importable; these tests need no real one."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "gguf" else real(name, *a))


def test_a_gguf_file_or_a_folder_holding_one_names_the_file(tmp_path, gguf_installed):
    file = dummy(tmp_path / "one" / "model.Q4_1.gguf")
    assert gguf_file(str(file)) == file
    assert gguf_file(str(file.parent)) == file


def test_a_transformers_folder_or_hub_id_is_not_gguf(tmp_path, gguf_installed):
    dummy(tmp_path / "hf" / "model.gguf")
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert gguf_file(str(tmp_path / "hf")) is None
    assert gguf_file(str(tmp_path / "empty")) is None
    assert gguf_file("Qwen/Qwen2.5-1.5B-Instruct") is None


def test_a_folder_of_several_gguf_files_asks_for_one(tmp_path, gguf_installed):
    dummy(tmp_path / "many" / "a.Q4_1.gguf")
    dummy(tmp_path / "many" / "a.Q8_0.gguf")
    with pytest.raises(ModelError, match="holds 2 GGUF files.*a.Q4_1.gguf, a.Q8_0.gguf.*name one"):
        gguf_file(str(tmp_path / "many"))


def test_a_missing_gguf_file_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="No GGUF file at"):
        gguf_file(str(tmp_path / "nowhere.gguf"))


def test_a_gguf_model_without_the_gguf_package_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    file = dummy(tmp_path / "m" / "model.gguf")
    code = main(["train", "--preset", "micro", "--arm", "chat", "--out", str(tmp_path / "run"), "--quiet",
                 "--set", f"model.name_or_path={file}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "is a GGUF file, which needs the `gguf` package: pip install 'talktosolve[gguf]'" in err


def test_a_model_without_a_chat_template_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_dir, bare)
    (bare / "chat_template.jinja").unlink()  # where transformers saves a tokenizer's template
    code = main(["train", "--preset", "micro", "--arm", "chat", "--out", str(tmp_path / "run"), "--quiet",
                 "--set", f"model.name_or_path={bare}"])
    err = capsys.readouterr().err
    assert code == 2 and "has no chat template; use a chat (Instruct) model" in err
