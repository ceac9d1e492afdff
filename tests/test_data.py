"""GSM8K loading (malformed rows reported, never dropped), reproducible selection, problems files, real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from talktosolve.task.data import (
    DataError,
    Problem,
    build_datasets,
    choose,
    format_summary,
    load_gsm8k,
    parse_gold,
    read_problems,
    write_problems,
)
from talktosolve.task.numbers import has_number
from talktosolve.task.split import split_problem

REAL_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"


def row(i: int, gold: str = "7") -> dict:
    return {"question": f"Tom has {i} apples. Jim has {i + 1} pears. How many fruits are there?",
            "answer": f"They add up.\n#### {gold}"}


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.fixture
def gsm(tmp_path):
    """A small GSM8K-shaped folder: 12 eligible + 2 ineligible train rows, 6 eligible test rows."""
    folder = tmp_path / "gsm"
    folder.mkdir()
    train = [row(i) for i in range(12)]
    train.insert(3, {"question": "Tom has apples. How many?", "answer": "#### 1"})
    train.insert(7, {"question": "Tom has three apples. Jim has 4. How many?", "answer": "#### 7"})
    write_jsonl(folder / "train.jsonl", train)
    write_jsonl(folder / "test.jsonl", [row(i, "1,000") for i in range(6)])
    return folder


def test_parse_gold():
    assert parse_gold("blah\n#### 1,000") == "1000"
    assert parse_gold("#### -3 ") == "-3"
    assert parse_gold("a #### 1\n#### 2.5") == "2.5"
    with pytest.raises(DataError, match="no '####"):
        parse_gold("72")
    with pytest.raises(DataError, match="not a number"):
        parse_gold("#### seventy")


def test_malformed_rows_are_reported_with_lines(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [
        row(0),                                   # line 1 ok
        "{not json",                              # line 2
        {"question": "Q?"},                       # line 3: no answer
        "",                                       # line 4: blank, not a row
        {"question": "Q?", "answer": "72"},       # line 5: no ####
        {"question": "Q?", "answer": "#### x"},   # line 6: gold not a number
        [1, 2],                                   # line 7: not an object
        row(1),                                   # line 8 ok
    ])
    rows, issues = load_gsm8k(path, "train")
    assert [r["line"] for r in rows] == [1, 8]
    assert [r["index"] for r in rows] == [0, 6]  # blank line 4 is not a row
    assert [i.line for i in issues] == [2, 3, 5, 6, 7]
    reasons = [i.reason for i in issues]
    assert "bad JSON" in reasons[0]
    assert "missing field 'answer'" in reasons[1]
    assert "no '####" in reasons[2]
    assert "not a number" in reasons[3]
    assert "not a JSON object" in reasons[4]
    assert issues[0].where == f"{path}:2"

    with pytest.raises(DataError, match=r"train\.jsonl:2: bad JSON"):
        load_gsm8k(path, "train", strict=True)


def test_a_line_that_is_not_utf8_is_one_malformed_row(tmp_path, gsm):
    path = tmp_path / "train.jsonl"
    path.write_bytes(json.dumps(row(0)).encode() + b"\n" + b'{"question": "Tom has \xff apples."}\n'
                     + json.dumps(row(1)).encode() + b"\n")
    rows, issues = load_gsm8k(path, "train")
    assert [r["line"] for r in rows] == [1, 3]
    assert [(i.line, i.index) for i in issues] == [(2, 1)]
    assert "not UTF-8" in issues[0].reason and "0xff" in issues[0].reason
    with pytest.raises(DataError, match=r"train\.jsonl:2: not UTF-8"):
        load_gsm8k(path, "train", strict=True)

    with open(gsm / "train.jsonl", "ab") as f:
        f.write(b"\xc3\x28 latin-1 or worse\n")
    summary = build_datasets(gsm, tmp_path / "out", n_train=2, n_test=2)
    assert summary["splits"]["train"]["malformed"][0]["line"] == 15
    with pytest.raises(DataError, match=r"train\.jsonl:15: not UTF-8"):
        build_datasets(gsm, tmp_path / "strict", n_train=2, n_test=2, strict=True)

    problems = tmp_path / "problems.jsonl"
    problems.write_bytes(b"\xff\n")
    with pytest.raises(DataError, match=r"problems\.jsonl:1: not UTF-8"):
        read_problems(problems)


def test_empty_and_wrong_fields_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match="no rows"):
        load_gsm8k(empty, "train")
    wrong = write_jsonl(tmp_path / "wrong.jsonl", [{"problem": "Q?", "solution": "#### 1"}] * 3)
    with pytest.raises(DataError, match=r"none of its 3 rows is usable.*missing field 'question'.*problem"):
        load_gsm8k(wrong, "train")


def test_missing_source_and_layouts(tmp_path, gsm):
    with pytest.raises(DataError, match="does not exist.*--gsm8k"):
        load_gsm8k(tmp_path / "nowhere", "train")
    with pytest.raises(DataError, match="no train split"):
        load_gsm8k(tmp_path, "train")
    with pytest.raises(DataError, match="unknown split"):
        load_gsm8k(gsm, "validation")
    rows, issues = load_gsm8k(gsm / "test.jsonl", "test")  # a single file serves the split asked for
    assert len(rows) == 6 and not issues and rows[0]["gold"] == "1000"


def test_hub_errors_name_the_local_flag(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DataError, match=r"datasets.*--gsm8k PATH"):
        load_gsm8k(None, "train")

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(DataError, match=r"openai/gsm8k.*no network.*--gsm8k PATH"):
        load_gsm8k(None, "test")


def test_parquet_hub_layout(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    (tmp_path / "main").mkdir()
    rows = [row(i) for i in range(5)] + [{"question": "Q?", "answer": "no gold"}]
    pq.write_table(pa.Table.from_pylist(rows[:3]), tmp_path / "main" / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[3:]), tmp_path / "main" / "train-00001-of-00002.parquet")
    loaded, issues = load_gsm8k(tmp_path, "train")
    assert [r["index"] for r in loaded] == [0, 1, 2, 3, 4]
    assert [(i.index, i.line) for i in issues] == [(5, 6)]


def test_choose_is_reproducible_and_in_order():
    pool = list(range(100))
    a, b = choose(10, pool, 3), choose(10, pool, 3)
    assert a == b == sorted(a) and len(set(a)) == 10
    assert choose(10, pool, 4) != a


def test_build_datasets(tmp_path, gsm):
    out = tmp_path / "out"
    summary = build_datasets(gsm, out, n_train=5, n_test=3, seed=1)
    train = read_problems(out / "train.jsonl")
    test = read_problems(out / "test.jsonl")
    assert len(train) == 5 and len(test) == 3
    ids = [int(p.id.split("-")[1]) for p in train]
    assert ids == sorted(ids) and all(p.id.startswith("train-") for p in train)
    assert all(p.gold == "1000" for p in test)
    source = {f"{split}-{r['index']}": r["question"] for split in ("train", "test") for r in load_gsm8k(gsm, split)[0]}
    for p in train + test:
        assert any(has_number(f) for f in p.facts_a) and any(has_number(f) for f in p.facts_b)
        # a problem holds all its facts in text order, as the splitter cut them; no hands are stored
        cut = split_problem(source[p.id])
        assert (p.facts, p.question) == (cut.facts, cut.question) and len(p.facts) == 2
    assert all(set(json.loads(line)) == {"id", "question", "facts", "gold"}
               for line in (out / "train.jsonl").read_text().splitlines())
    assert summary["seats"] == ["A", "B"]

    elig = [json.loads(x) for x in (out / "eligibility_train.jsonl").read_text().splitlines()]
    assert [e["index"] for e in elig] == list(range(14))
    assert elig[3] == {"index": 3, "eligible": False, "reason": "too_few_facts"}
    assert elig[7]["reason"] == "no_number_in_hand_A"
    s = summary["splits"]["train"]
    assert s["rows"] == 14 and s["eligible"] == 12 and s["chosen"] == 5
    assert s["by_reason"] == {"ok": 12, "no_number_in_hand_A": 1, "too_few_facts": 1}
    assert "too_few_facts" in format_summary(summary)

    # the same seed chooses the same problems; another seed, others
    build_datasets(gsm, tmp_path / "again", n_train=5, n_test=3, seed=1)
    assert (tmp_path / "again" / "train.jsonl").read_text() == (out / "train.jsonl").read_text()
    build_datasets(gsm, tmp_path / "other", n_train=5, n_test=3, seed=2)
    assert (tmp_path / "other" / "train.jsonl").read_text() != (out / "train.jsonl").read_text()
    assert not list(out.glob("*.tmp"))


def test_build_datasets_deals_eligibility_to_every_seat(tmp_path):
    """With three seats a problem needs a fact per seat and a number in every hand: two-fact rows and rows whose
    third fact has no number are refused with the seat named; a built problem's hands each hold a number."""
    from talktosolve.arms import deal_round_robin

    folder = tmp_path / "gsm"
    folder.mkdir()
    three = [{"question": f"Tom has {i} apples. Jim has {i + 1} pears. Ann has {i + 2} figs. How many?",
              "answer": "#### 3"} for i in range(4)]
    train = three + [row(0), {"question": "Tom has 1 apple. Jim has 2 pears. Ann has figs. How many?",
                              "answer": "#### 3"}]
    write_jsonl(folder / "train.jsonl", train)
    write_jsonl(folder / "test.jsonl", three)
    summary = build_datasets(folder, tmp_path / "out", n_train=4, n_test=2, seats=("A", "B", "C"))
    assert summary["seats"] == ["A", "B", "C"]
    assert summary["splits"]["train"]["by_reason"] == {"ok": 4, "too_few_facts": 1, "no_number_in_hand_C": 1}
    for p in read_problems(tmp_path / "out" / "train.jsonl"):
        hands = deal_round_robin(p.facts, ("A", "B", "C"))
        assert all(len(h) == 1 and any(has_number(f) for f in h) for h in hands.values())
    # the same rows with two seats: every row with two facts or more is eligible
    two = build_datasets(folder, tmp_path / "two", n_train=6, n_test=2)
    assert two["splits"]["train"]["by_reason"] == {"ok": 6}


def test_build_datasets_malformed_rows_and_errors(tmp_path, gsm):
    with open(gsm / "test.jsonl", "a") as f:
        f.write("{broken\n")
    out = tmp_path / "out"
    summary = build_datasets(gsm, out, n_train=2, n_test=2)
    elig = [json.loads(x) for x in (out / "eligibility_test.jsonl").read_text().splitlines()]
    assert elig[-1]["index"] == 6 and not elig[-1]["eligible"] and elig[-1]["reason"].startswith("malformed: bad JSON")
    assert summary["splits"]["test"]["by_reason"]["malformed"] == 1
    assert summary["splits"]["test"]["malformed"][0]["line"] == 7
    assert "test.jsonl:7" in format_summary(summary)

    with pytest.raises(DataError, match=r"test\.jsonl:7"):
        build_datasets(gsm, tmp_path / "strict", n_train=2, n_test=2, strict=True)
    with pytest.raises(DataError, match=r"only 6 eligible.*n_test=7"):
        build_datasets(gsm, tmp_path / "few", n_train=2, n_test=7)
    assert not (tmp_path / "few").exists()  # nothing written when a split fails
    with pytest.raises(DataError, match="single file"):
        build_datasets(gsm / "train.jsonl", tmp_path / "x")


def test_problems_round_trip_and_validation(tmp_path):
    problems = [Problem("train-0", "How many?", ["A has 1.", "B has 2."], "3"),
                Problem("train-4", "Why?", ["C has 3.", "D has 4.", "E has 5."], "12")]
    path = tmp_path / "p.jsonl"
    write_problems(path, problems)
    assert read_problems(path) == problems
    assert Problem.from_json(problems[0].to_json()) == problems[0]
    assert problems[0].to_json() == {"id": "train-0", "question": "How many?", "facts": ["A has 1.", "B has 2."],
                                     "gold": "3"}

    bad = problems[0].to_json()
    del bad["gold"]
    write_jsonl(path, [problems[1].to_json(), bad])
    with pytest.raises(DataError, match=r"p\.jsonl:2: missing field 'gold'"):
        read_problems(path)
    write_jsonl(path, [dict(problems[0].to_json(), facts="A has 1.")])
    with pytest.raises(DataError, match=r":1: field 'facts' must be a list of strings"):
        read_problems(path)
    no_facts = problems[0].to_json()
    del no_facts["facts"]
    write_jsonl(path, [no_facts])
    with pytest.raises(DataError, match=r":1: missing field 'facts'"):
        read_problems(path)
    write_jsonl(path, [problems[0].to_json(), problems[0].to_json()])
    with pytest.raises(DataError, match="already used on line 1"):
        read_problems(path)
    with pytest.raises(DataError, match="problem 0: field 'question'"):
        write_problems(path, [Problem("x", "", [], "1")])
    with pytest.raises(DataError, match="does not exist"):
        read_problems(tmp_path / "missing.jsonl")


def test_two_hands_are_views_of_the_facts():
    p = Problem("train-4", "Why?", ["C has 3.", "D has 4.", "E has 5."], "12")
    assert p.facts_a == ["C has 3.", "E has 5."] and p.facts_b == ["D has 4."]
    p.facts_a.append("F has 6.")  # a copy: the problem's facts are untouched
    assert p.facts == ["C has 3.", "D has 4.", "E has 5."]
    with pytest.raises(AttributeError):
        p.facts_a = ["x"]


def test_files_of_two_hands_are_read_as_facts_in_text_order(tmp_path):
    """Problems files written before problems held `facts` (hands `facts_a`, `facts_b`) read back interleaved;
    two lists that are not round-robin hands are refused."""
    path = write_jsonl(tmp_path / "old.jsonl", [
        {"id": "train-0", "question": "Why?", "facts_a": ["C has 3.", "E has 5."], "facts_b": ["D has 4."],
         "gold": "12"},
        {"id": "train-1", "question": "How many?", "facts_a": ["A has 1."], "facts_b": ["B has 2."], "gold": "3"},
    ])
    assert read_problems(path) == [Problem("train-0", "Why?", ["C has 3.", "D has 4.", "E has 5."], "12"),
                                   Problem("train-1", "How many?", ["A has 1.", "B has 2."], "3")]
    for a, b in ((["A has 1."], ["B has 2.", "D has 4."]), (["A has 1.", "C has 3.", "E has 5."], ["B has 2."])):
        write_jsonl(path, [{"id": "train-0", "question": "Why?", "facts_a": a, "facts_b": b, "gold": "1"}])
        with pytest.raises(DataError, match="not two round-robin hands"):
            read_problems(path)
    write_jsonl(path, [{"id": "train-0", "question": "Why?", "facts_a": "A has 1.", "facts_b": [], "gold": "1"}])
    with pytest.raises(DataError, match=r":1: field 'facts_a' must be a list of strings"):
        read_problems(path)
    write_jsonl(path, [{"id": "train-0", "question": "Why?", "facts_a": ["A has 1."], "gold": "1"}])
    with pytest.raises(DataError, match=r":1: missing field 'facts_b'"):
        read_problems(path)


def test_real_gsm8k(tmp_path):
    if not (REAL_GSM8K / "train.jsonl").exists():
        pytest.skip(f"GSM8K not found at {REAL_GSM8K} (shared assets absent)")
    summary = build_datasets(REAL_GSM8K, tmp_path, n_train=1024, n_test=300, seed=0)
    print()
    print(format_summary(summary))
    train, test = read_problems(tmp_path / "train.jsonl"), read_problems(tmp_path / "test.jsonl")
    assert len(train) == 1024 and len(test) == 300
    for p in train + test:
        assert any(has_number(f) for f in p.facts_a), p.id
        assert any(has_number(f) for f in p.facts_b), p.id
    for split, n in (("train", 7473), ("test", 1319)):
        s = summary["splits"][split]
        assert s["rows"] == n and not s["malformed"]
        assert sum(s["by_reason"].values()) == n and s["by_reason"]["ok"] == s["eligible"]


def test_a_first_line_that_is_not_utf8_leaves_a_folder_read_as_raw_gsm8k(tmp_path, gsm):
    from talktosolve.config import make_config
    from talktosolve.task.tasks import load_problems

    train = gsm / "train.jsonl"
    train.write_bytes(b"\xff\n" + train.read_bytes())
    cfg = make_config(None, {"data": {"gsm8k": str(gsm), "n_train": 2, "n_test": 2}, "eval": {"n_problems": 2},
                             "train": {"problems_per_step": 2}})
    train_set, test_set, summary = load_problems(cfg, tmp_path / "data")
    assert len(train_set) == 2 and len(test_set) == 2
    assert summary["splits"]["train"]["malformed"][0]["line"] == 1
