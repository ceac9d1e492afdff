"""Which command wrote a folder, told by the files each command writes first, so that a command handed the
wrong folder says so before it reads or writes anything.

    recipe    config.json holding `preset`, or results.json          (`talktosolve recipe`)
    run       config.json holding `arm` and `key`, or done.json      (`talktosolve train`)
    eval      summary.json or chats.jsonl                            (`talktosolve eval`)
    data      eligibility_train.jsonl                                (`talktosolve data`)
    adapter   adapter_config.json or talktosolve_full.json           (a run's final/ folder)
    model     config.json beside model.safetensors                   (`talktosolve micro-base`, any HF model)

Anything else (raw GSM8K, an empty or unrelated folder) has no kind. An output folder may be new, empty, of no
kind, or of its own command's kind (which resumes it); never another command's, whose files it would mix with or
overwrite. Pure Python.
"""

from __future__ import annotations

import json
from pathlib import Path

KINDS = {
    "recipe": "a recipe folder (written by `talktosolve recipe`)",
    "run": "a training run (written by `talktosolve train`)",
    "eval": "an evaluation (written by `talktosolve eval`)",
    "data": "split-fact problems (written by `talktosolve data`)",
    "adapter": "trained weights (a run's final/ folder)",
    "model": "a base model folder (as `talktosolve micro-base` writes)",
}


class FolderError(ValueError):
    """A path argument that is missing, of the wrong kind, or written by another command."""


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def folder_kind(path: str | Path) -> str | None:
    """The kind of folder `path` is (see the module doc), or None."""
    path = Path(path)
    if not path.is_dir():
        return None
    config = _json(path / "config.json")
    config = config if isinstance(config, dict) else {}
    if "preset" in config or (path / "results.json").is_file():
        return "recipe"
    if {"arm", "key"} <= set(config) or (path / "done.json").is_file():
        return "run"
    if (path / "summary.json").is_file() or (path / "chats.jsonl").is_file():
        return "eval"
    if (path / "eligibility_train.jsonl").is_file():
        return "data"
    if (path / "adapter_config.json").is_file() or (path / "talktosolve_full.json").is_file():
        return "adapter"
    if config and (path / "model.safetensors").is_file():
        return "model"
    return None


def check_output(path: str | Path, kind: str) -> Path:
    """`path` as an output folder of a command that writes `kind` folders; FolderError when it cannot be one."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FolderError(f"{path} is a file; give a folder to write into (a new one is made).")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise FolderError(f"{parent} is a file, so {path} cannot be made inside it; give another folder.")
            break
    found = folder_kind(path)
    if found is not None and found != kind:
        raise FolderError(f"{path} is {KINDS[found]}; writing {KINDS[kind].split(' (')[0]} into it would mix the "
                          "two. Give a new or empty folder.")
    return path


def _existing_folder(path: Path) -> Path:
    if not path.exists():
        raise FolderError(f"{path} does not exist.")
    if not path.is_dir():
        raise FolderError(f"{path} is a file; give a folder.")
    if not any(path.iterdir()):
        raise FolderError(f"{path} is an empty folder.")
    return path


def check_player(path: str | Path) -> Path:
    """A trained player: a finished run folder, or a folder of trained weights."""
    path = _existing_folder(Path(path))
    found = folder_kind(path)
    if found == "run" and not (path / "final").is_dir():
        raise FolderError(f"{path} is a training run that has not finished (no final/); rerun its `talktosolve "
                          "train` command to finish it.")
    if found == "model":
        raise FolderError(f"{path} is {KINDS[found]}; a base model is chosen with --set model.name_or_path={path}, "
                          "and --a/--b take trained weights (a run folder written by `talktosolve train`).")
    if found not in ("run", "adapter"):
        what = KINDS[found] if found else "no run or trained weights"
        raise FolderError(f"{path} is {what}; give a run folder written by `talktosolve train` (or its final/).")
    return path


def check_evaluation(path: str | Path) -> Path:
    """A finished evaluation folder (its summary.json)."""
    path = _existing_folder(Path(path))
    found = folder_kind(path)
    if found == "recipe":
        raise FolderError(f"{path} is {KINDS[found]}; its evaluations are the folders in {path / 'evals'}.")
    if found != "eval":
        what = KINDS[found] if found else "not an evaluation"
        raise FolderError(f"{path} is {what}; give folders written by `talktosolve eval`.")
    summary = _json(path / "summary.json")
    if not isinstance(summary, dict) or not {"scores", "problem_ids"} <= set(summary):
        raise FolderError(f"{path} holds no finished evaluation (no readable summary.json); rerun its "
                          "`talktosolve eval` command.")
    return path


def check_diagnosable(path: str | Path) -> Path:
    """A folder `talktosolve diagnose` reads: a training run, an evaluation or a recipe."""
    path = _existing_folder(Path(path))
    found = folder_kind(path)
    if found not in ("run", "eval", "recipe"):
        what = KINDS[found] if found else "no run, evaluation or recipe"
        raise FolderError(f"{path} is {what}; give a folder written by `talktosolve train`, `eval` or `recipe`.")
    return path


def holds_roles(path: str | Path) -> bool:
    """Whether a player folder (a run, or its final/) holds one set of trained weights per seat
    (`model.adapters=per_role`, in `final/{seat}/`): the only weights whose roles `--role` can swap."""
    path = Path(path)
    weights = path / "final" if (path / "final").is_dir() else path

    def holds(folder: Path) -> bool:
        return any((folder / name).is_file() for name in ("adapter_config.json", "talktosolve_full.json",
                                                          "model.safetensors"))

    return weights.is_dir() and not holds(weights) and any(holds(d) for d in weights.iterdir() if d.is_dir())


def check_source(path: str | Path, *, built: bool) -> Path:
    """A GSM8K source: a .jsonl/.parquet file or a folder of them; `built` also accepts problems written by
    `talktosolve data`. The files inside are checked where they are read (`talktosolve.task.data`)."""
    path = Path(path)
    if path.is_file():
        return path
    path = _existing_folder(path)
    found = folder_kind(path)
    if found == "data" and not built:
        raise FolderError(f"{path} holds problems already split by `talktosolve data`; pass it to train, eval or "
                          "recipe with --gsm8k, or give `data` the raw GSM8K folder.")
    if found not in (None, "data"):
        raise FolderError(f"{path} is {KINDS[found]}, not GSM8K; give a folder holding train.jsonl and test.jsonl.")
    return path
