"""Run-folder I/O that never leaves a half-written file behind.

Whole files (JSON, checkpoints, reports) are written to a temporary sibling, flushed, fsynced and renamed into
place: a reader sees the old file or the new one, never a torn one. Logs (metrics, transcripts) are JSONL,
appended one line at a time and flushed; on resume a torn last line (a kill mid-write) is detected and cut off,
and lines past the checkpoint being resumed are dropped, so a resumed run writes each step exactly once.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would have given: mkstemp's 0600 would hide results from other users


def write_bytes(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_default) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def _default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def append_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Append rows as JSON lines and flush them to disk."""
    data = "".join(json.dumps(r, default=_default) + "\n" for r in rows)
    if not data:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of a JSONL log (a torn last line is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def truncate_jsonl(path: Path, keep: "callable") -> int:
    """Keep the leading complete lines for which `keep(row)` holds; cut a torn tail and later lines.

    Returns the number of lines kept. Used on resume, so a log ends exactly at the checkpoint it resumes from.
    """
    path = Path(path)
    if not path.exists():
        return 0
    kept_bytes = 0
    kept = 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break
            if not keep(row):
                break
            kept_bytes += len(raw)
            kept += 1
    if kept_bytes != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(kept_bytes)
            f.flush()
            os.fsync(f.fileno())
    return kept
