"""GSM8K in, split-fact problems out.

The rules:

- Source: a local folder (`train.jsonl`/`test.jsonl`, `train.parquet`/`test.parquet`, or the Hub layout
  `main/train-*.parquet`), a single `.jsonl`/`.parquet` file (read for whichever split is asked), or None for the
  Hub (`openai/gsm8k`, config `main`, through the optional `datasets` package).
- A row needs `question` and `answer` strings. Gold = the text after the last `####` in the answer, stripped,
  commas removed; it must be a plain number (`72`, `-3`, `0.5`).
- A row's index is its 0-based position among the source's rows (blank lines are not rows); problem ids are
  `"{split}-{index}"`, so an id names the same GSM8K problem whatever was chosen.
- A malformed row (bytes that are not UTF-8, bad JSON, missing field, no `####`, a gold that is not a number) is
  never dropped silently: it is reported as an `Issue` with its 1-based line and the reason, and skipped; with
  `strict=True` the first one raises `DataError` naming `file:line`. A source with no usable row at all is a
  `DataError`.
- `build_datasets` splits every row (`talktosolve.task.split`), records each row's eligibility, and draws the problems
  with `random.Random(seed)` among the eligible ones (a sample, then kept in source order), separately per
  split, so the choice is the same on every machine. Too few eligible problems is a `DataError`. Every file is
  written atomically (temporary sibling, then rename), and only after both splits loaded and drew cleanly.

Pure Python, no torch.
"""

from __future__ import annotations

import glob
import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from talktosolve.store import write_text
from talktosolve.task.split import split_problem

HUB_NAME, HUB_CONFIG = "openai/gsm8k", "main"
SPLITS = ("train", "test")
_GOLD = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


class DataError(ValueError):
    """A data source or a problems file that cannot be used as it is; the message says where and why."""


@dataclass
class Issue:
    """One malformed source row: where it is and what is wrong with it."""
    split: str
    index: int  # 0-based row, the same numbering as problem ids
    line: int  # 1-based line of a .jsonl file (row + 1 for parquet and the Hub)
    reason: str
    file: str = ""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Problem:
    """A split-fact problem: its facts in text order, the question every seat gets, and the gold answer.

    Who holds which fact is not part of the problem: an arm deals the facts to a protocol's seats
    (`arms.Arm.hands`). `facts_a`/`facts_b` are the two-seat round-robin hands (facts 1, 3, ... and 2, 4, ...)."""

    id: str
    question: str
    facts: list[str] = field(default_factory=list)
    gold: str = ""

    @property
    def facts_a(self) -> list[str]:
        return list(self.facts[0::2])

    @property
    def facts_b(self) -> list[str]:
        return list(self.facts[1::2])

    def to_json(self) -> dict:
        return {"id": self.id, "question": self.question, "facts": list(self.facts), "gold": self.gold}

    @classmethod
    def from_json(cls, obj: Any) -> "Problem":
        """Build from a dict, checking each field; raises DataError naming the field at fault. Files written
        before problems held `facts` (two hands `facts_a`, `facts_b`) are read too: their facts interleaved."""
        if not isinstance(obj, dict):
            raise DataError(f"a problem must be a JSON object, got {type(obj).__name__}")
        for key in ("id", "question", "gold"):
            if key not in obj:
                raise DataError(f"missing field '{key}'")
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise DataError(f"field '{key}' must be a non-empty string, got {obj[key]!r}")
        keys = ("facts",) if "facts" in obj or "facts_a" not in obj else ("facts_a", "facts_b")
        for key in keys:
            if key not in obj:
                raise DataError(f"missing field '{key}'")
            facts = obj[key]
            if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
                raise DataError(f"field '{key}' must be a list of strings, got {facts!r}")
        if keys == ("facts",):
            facts = list(obj["facts"])
        else:
            a, b = obj["facts_a"], obj["facts_b"]
            if not 0 <= len(a) - len(b) <= 1:
                raise DataError(f"fields 'facts_a' and 'facts_b' are not two round-robin hands ({len(a)} and "
                                f"{len(b)} facts)")
            facts = [f for pair in zip(a, b + [None]) for f in pair if f is not None]
        return cls(obj["id"], obj["question"], facts, obj["gold"])


# ---------------------------------------------------------------------------------------------------------------
# reading GSM8K

def parse_gold(answer: str) -> str:
    """`"... #### 1,000"` -> `"1000"`; raises DataError if there is no `####` or no plain number after it."""
    if "####" not in answer:
        raise DataError("answer has no '#### <number>' line")
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not _GOLD.fullmatch(gold):
        raise DataError(f"gold after '####' is not a number: {gold!r}")
    return gold


def _check_row(obj: Any) -> tuple[str, str, str]:
    """(question, answer, gold) of a raw row, or DataError with the reason."""
    if not isinstance(obj, dict):
        raise DataError(f"row is not a JSON object ({type(obj).__name__})")
    for key in ("question", "answer"):
        if key not in obj:
            raise DataError(f"missing field '{key}' (fields: {sorted(obj)})")
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise DataError(f"field '{key}' must be a non-empty string")
    return obj["question"], obj["answer"], parse_gold(obj["answer"])


def _jsonl_rows(path: Path):
    """Yield (line, parsed object or DataError) for each non-blank line."""
    # Lines are cut as bytes (at \n, \r\n or \r, as editors number them) and decoded one by one, so a line that
    # is not UTF-8 is one malformed row rather than a file refused whole.
    for line, raw_bytes in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            raw = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as e:
            yield line, DataError(f"not UTF-8 text: byte {raw_bytes[e.start]:#04x} at column {e.start + 1}")
            continue
        if not raw.strip():
            continue
        try:
            yield line, json.loads(raw)
        except json.JSONDecodeError as e:
            yield line, DataError(f"bad JSON: {e.msg} (column {e.colno})")


def _parquet_rows(paths: list[Path]):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading {paths[0]} needs pyarrow: pip install 'talktosolve[hub]', "
                        "or convert the file to .jsonl") from None
    line = 0
    for path in paths:
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several types for a bad file
            raise DataError(f"{path}: cannot read parquet ({e})") from None
        for obj in table.to_pylist():
            line += 1
            yield line, obj


def _hub_rows(split: str):
    try:
        import datasets
    except ImportError:
        raise DataError("reading GSM8K from the Hub needs the `datasets` package (pip install 'talktosolve[hub]'); "
                        "or pass a local copy with --gsm8k PATH (a folder holding train.jsonl and test.jsonl)") from None
    try:
        ds = datasets.load_dataset(HUB_NAME, HUB_CONFIG, split=split)
    except Exception as e:  # offline, no such split, rate limits: all end the same way for the user
        raise DataError(f"could not load {HUB_NAME} ({split}) from the Hub: {type(e).__name__}: {e}. "
                        "If you are offline, pass a local copy with --gsm8k PATH "
                        "(a folder holding train.jsonl and test.jsonl)") from None
    for i, obj in enumerate(ds, start=1):
        yield i, dict(obj)


def _split_files(folder: Path, split: str) -> list[Path]:
    """The file(s) holding `split` in a local folder, in the first layout that matches."""
    for pattern in (f"{split}.jsonl", f"{split}.parquet", f"main/{split}-*.parquet", f"{split}-*.parquet",
                    f"data/{split}-*.parquet", f"main/{split}.jsonl"):
        found = sorted(Path(p) for p in glob.glob(str(folder / pattern)))
        if found:
            return found
    raise DataError(f"no {split} split in {folder}: expected {split}.jsonl, {split}.parquet or "
                    f"main/{split}-*.parquet (the Hub layout)")


def _source_rows(source: str | Path | None, split: str):
    """(label for messages, iterator of (line, object or DataError))."""
    if source is None:
        return f"{HUB_NAME}:{split}", _hub_rows(split)
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"GSM8K source {path} does not exist (pass --gsm8k PATH to a folder or a .jsonl/.parquet file)")
    files = _split_files(path, split) if path.is_dir() else [path]
    first = files[0]
    if first.suffix == ".jsonl":
        if len(files) > 1:
            raise DataError(f"several {split} files in {path}: {[str(f) for f in files]}")
        return str(first), _jsonl_rows(first)
    if first.suffix == ".parquet":
        return str(first) if len(files) == 1 else f"{path}/{split}-*.parquet", _parquet_rows(files)
    raise DataError(f"{first}: unknown file type {first.suffix!r}; GSM8K must be .jsonl or .parquet")


def load_gsm8k(source: str | Path | None, split: str, *, strict: bool = False) -> tuple[list[dict], list[Issue]]:
    """Rows `{index, line, question, answer, gold}` of one GSM8K split, and the malformed rows as Issues."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; GSM8K has {list(SPLITS)}")
    label, raw_rows = _source_rows(source, split)
    rows, issues = [], []
    for index, (line, obj) in enumerate(raw_rows):
        try:
            if isinstance(obj, DataError):
                raise obj
            question, answer, gold = _check_row(obj)
        except DataError as e:
            if strict:
                raise DataError(f"{label}:{line}: {e}") from None
            issues.append(Issue(split, index, line, str(e), label))
            continue
        rows.append({"index": index, "line": line, "question": question, "answer": answer, "gold": gold})
    if not rows and not issues:
        raise DataError(f"{label}: no rows (the file is empty)")
    if not rows:
        raise DataError(f"{label}: none of its {len(issues)} rows is usable; first: line {issues[0].line}: "
                        f"{issues[0].reason}. GSM8K rows need 'question' and 'answer' ending in '#### <number>'")
    return rows, issues


# ---------------------------------------------------------------------------------------------------------------
# building the split-fact datasets

def choose(n: int, pool: list, seed: int) -> list:
    """`n` items of `pool` drawn with random.Random(seed), returned in pool order."""
    picks = sorted(random.Random(seed).sample(range(len(pool)), n))
    return [pool[i] for i in picks]


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def build_datasets(source: str | Path | None, out_dir: str | Path, *, n_train: int = 1024, n_test: int = 300,
                   seed: int = 0, strict: bool = False, seats=("A", "B")) -> dict:
    """Split every GSM8K row, draw `n_train`/`n_test` eligible problems, write them; return a summary.

    Writes `train.jsonl`/`test.jsonl` (Problem records) and `eligibility_{split}.jsonl` (one line per source row:
    index, eligible, reason; malformed rows have reason `malformed: ...`).
    """
    if source is not None and Path(source).expanduser().is_file():
        raise DataError(f"build_datasets needs both splits, but {source} is a single file; pass a folder holding "
                        "train.jsonl and test.jsonl (or leave --gsm8k out to read the Hub)")
    wanted = {"train": n_train, "test": n_test}
    for split, n in wanted.items():
        if not isinstance(n, int) or n < 0:
            raise DataError(f"n_{split} must be a non-negative integer, got {n!r}")
    out_dir = Path(out_dir)
    files: dict[str, str] = {}
    summary: dict[str, Any] = {"source": str(source) if source is not None else HUB_NAME, "seed": seed,
                               "seats": list(seats),
                               "out_dir": str(out_dir), "splits": {}}
    for split, n in wanted.items():
        rows, issues = load_gsm8k(source, split, strict=strict)
        records, eligible = [], []
        for row in rows:
            sp = split_problem(row["question"], seats)
            records.append({"index": row["index"], "eligible": sp.eligible, "reason": sp.reason})
            if sp.eligible:
                eligible.append(Problem(f"{split}-{row['index']}", sp.question, sp.facts, row["gold"]))
        records += [{"index": i.index, "eligible": False, "reason": f"malformed: {i.reason}"} for i in issues]
        records.sort(key=lambda r: r["index"])
        if len(eligible) < n:
            raise DataError(f"the {split} split has only {len(eligible)} eligible problems (of {len(records)} rows); "
                            f"asked for n_{split}={n}. Ask for fewer.")
        chosen = choose(n, eligible, seed)
        by_reason: dict[str, int] = {}
        for r in records:
            key = "malformed" if r["reason"].startswith("malformed") else r["reason"]
            by_reason[key] = by_reason.get(key, 0) + 1
        summary["splits"][split] = {
            "rows": len(records), "eligible": len(eligible), "chosen": len(chosen),
            "by_reason": dict(sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
            "malformed": [i.to_json() for i in issues],
        }
        files[f"{split}.jsonl"] = _jsonl([p.to_json() for p in chosen])
        files[f"eligibility_{split}.jsonl"] = _jsonl(records)
    # Written only now, so a failure in either split leaves out_dir as it was.
    for name, text in files.items():
        write_text(out_dir / name, text)
    return summary


def format_summary(summary: dict) -> str:
    """Counts by reason per split, for the terminal."""
    lines = [f"GSM8K from {summary['source']} (seed {summary['seed']})"]
    for split, s in summary["splits"].items():
        lines.append(f"  {split}: {s['rows']} rows, {s['eligible']} eligible, {s['chosen']} chosen")
        for reason, count in s["by_reason"].items():
            lines.append(f"    {reason:<28} {count:>6}  ({100 * count / max(s['rows'], 1):.1f}%)")
        for issue in s["malformed"][:5]:
            lines.append(f"    malformed {issue['file']}:{issue['line']}: {issue['reason']}")
        if len(s["malformed"]) > 5:
            lines.append(f"    ... and {len(s['malformed']) - 5} more malformed rows")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# problems files

def read_problems(path: str | Path) -> list[Problem]:
    """Problems from a JSONL file written by `write_problems`/`build_datasets`, each line checked."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"problems file {path} does not exist (build it with build_datasets)")
    problems, seen = [], {}
    for line, obj in _jsonl_rows(path):
        try:
            if isinstance(obj, DataError):
                raise obj
            problem = Problem.from_json(obj)
        except DataError as e:
            raise DataError(f"{path}:{line}: {e}") from None
        if problem.id in seen:
            raise DataError(f"{path}:{line}: id {problem.id!r} already used on line {seen[problem.id]}")
        seen[problem.id] = line
        problems.append(problem)
    return problems


def write_problems(path: str | Path, problems: list[Problem]) -> None:
    """Write problems as JSONL, atomically; each is checked the way `read_problems` checks it."""
    records = []
    for i, p in enumerate(problems):
        try:
            records.append(Problem.from_json(p.to_json() if isinstance(p, Problem) else p).to_json())
        except DataError as e:
            raise DataError(f"problem {i}: {e}") from None
    write_text(Path(path), _jsonl(records))
