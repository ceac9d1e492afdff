"""The whole recipe end to end on a tiny model: schema-valid results.json, report and plots; a rerun skips all.

The tests that read a finished recipe share one run (`tiny_recipe`, conftest.py) and change only copies of it.
"""

import json
import shutil

import pytest

from talktosolve.cli import main
from talktosolve.results import validate_results

pytestmark = pytest.mark.slow


def recipe(model_dir, out, *extra):
    args = ["recipe", "--preset", "tiny", "--out", str(out), "--quiet", "--set", f"model.name_or_path={model_dir}"]
    for s in extra:
        args += ["--set", s]
    return main(args)


def copy_of(run, tmp_path):
    shutil.copytree(run.out, tmp_path / "rec")
    return tmp_path / "rec"


def test_recipe_writes_valid_results_report_and_plots(tiny_recipe):
    out = tiny_recipe.out
    assert "delta chat - cut" in tiny_recipe.printed and "checks:" in tiny_recipe.printed
    results = json.loads((out / "results.json").read_text())
    validate_results(results)
    assert set(results["evals"]) == {"base-chat", "base-cut", "chat-s0", "chat-s1", "cut-s0", "cut-s1",
                                     "cross-chat-s0", "cross-chat-s1", "cross-cut-s0", "cross-cut-s1"}
    checks = results["checks"]
    assert checks["halves_hold_numbers"] and checks["facts_disjoint_and_complete"]
    assert checks["cut_never_sees_partner"] is True
    assert set(checks["chat_beats_base"]) == {"0", "1"}
    for name in ("report.md", "report.html", "plots/learning_curves.png", "plots/accuracy.png", "plots/talk.png",
                 "plots/cross_play.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "plots/accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["comparison"]["delta"] == pytest.approx(
        results["arms"]["chat"]["accuracy"] - results["arms"]["cut"]["accuracy"])


def test_rerun_skips_every_stage(tiny_model_dir, tiny_recipe, tmp_path):
    out = copy_of(tiny_recipe, tmp_path)
    results = json.loads((out / "results.json").read_text())
    # Every stage is current under the same config, so nothing is trained or evaluated again.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.suffix in (".jsonl", ".safetensors")
              or p.name == "summary.json"}
    assert recipe(tiny_model_dir, out) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    again = json.loads((out / "results.json").read_text())
    assert again["evals"] == results["evals"] and again["comparison"] == results["comparison"]


def test_changed_setting_redoes_only_what_it_affects(tiny_model_dir, tiny_recipe, tmp_path):
    out = copy_of(tiny_recipe, tmp_path)
    train_log = out / "runs" / "chat-s0" / "metrics.jsonl"
    before = train_log.stat().st_mtime_ns
    base_eval = out / "evals" / "base-chat" / "summary.json"
    base_before = json.loads(base_eval.read_text())["key"]
    # A different evaluation seed: training stays, every evaluation is redone.
    assert recipe(tiny_model_dir, out, "eval.seed=7") == 0
    assert train_log.stat().st_mtime_ns == before
    assert json.loads(base_eval.read_text())["key"] != base_before


def test_cut_transcript_check_catches_a_leak(tiny_recipe, tmp_path):
    from talktosolve.config import make_config
    from talktosolve.recipe import cut_never_sees_partner
    from talktosolve.store import read_jsonl, write_text

    path = tmp_path / "chats.jsonl"
    shutil.copy(tiny_recipe.out / "evals" / "base-cut" / "chats.jsonl", path)
    cfg = make_config("tiny")
    assert cut_never_sees_partner([path], cfg.chat)
    chats = read_jsonl(path)
    # Show B, in its final view, A's first message: the check must notice.
    leak = chats[0]["messages"][3]["view"]
    leak[-1]["content"] = leak[-1]["content"].replace("(no message)", chats[0]["messages"][2]["text"] or "x", 1)
    write_text(path, "".join(json.dumps(c) + "\n" for c in chats))
    assert not cut_never_sees_partner([path], cfg.chat)


def test_parallel_runs_train_in_separate_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "rec"
    assert recipe(tiny_model_dir, out, "parallel_runs=2", "seeds=0", "train.steps=1") == 0
    for name in ("chat-s0", "cut-s0"):
        assert (out / "runs" / name / "done.json").exists()
    validate_results(json.loads((out / "results.json").read_text()))


def test_runs_per_process_trains_the_recipe_runs_side_by_side(tiny_model_dir, tmp_path):
    out = tmp_path / "rec"
    assert recipe(tiny_model_dir, out, "train.runs_per_process=2", "seeds=0", "train.steps=1",
                  "model.finetune=lora") == 0
    for name in ("chat-s0", "cut-s0"):
        rows = [json.loads(line) for line in (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        assert rows and all(r["perf/shared_runs"] == 2 for r in rows)
    validate_results(json.loads((out / "results.json").read_text()))
