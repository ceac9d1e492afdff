"""The whole recipe end to end on a tiny model: schema-valid results.json (v2), report and plots; a rerun skips
all; a changed setting redoes only what it affects; the transcript check catches leaks; one arm alone.

The tests that read a finished recipe share one run (`tiny_recipe`, conftest.py) and change only copies of it.
"""

import json
import shutil

import pytest

from talktosolve.cli import main
from talktosolve.experiment.results import validate_results

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
    out, printed = tiny_recipe.out, tiny_recipe.printed
    assert "delta chat - cut" in printed and "checks:" in printed
    results = json.loads((out / "results.json").read_text())
    validate_results(results)
    assert results["schema_version"] == 2
    assert results["run"]["protocol"] == {"seats": ["A", "B"], "order": ["A", "B", "A", "B"], "limits": [16, 16, 36, 36],
                                          "finals": [2, 3]}
    assert results["runs"] == {f"{a}-s{s}": {"arm": a, "seed": s} for a in ("chat", "cut") for s in (0, 1)}
    runs = [f"{a}-s{s}" for a in ("chat", "cut") for s in (0, 1)]
    assert set(results["evals"]) == {"base-chat", "base-cut"} | set(runs) | {f"cross-{r}" for r in runs} \
        | {f"cross-others-{r}" for r in runs}
    # Each evaluation records its arm and who sat where; the folder names are for reading only.
    assert results["evals"]["base-cut"]["arm"] == "cut"
    assert results["evals"]["base-cut"]["seats"] == {"A": "base", "B": "base"}
    assert results["evals"]["chat-s1"]["seats"] == {"A": "chat-s1", "B": "chat-s1"}
    assert results["evals"]["cross-cut-s0"]["seats"] == {"A": "cut-s0", "B": "base"}
    assert results["evals"]["cross-others-chat-s0"]["seats"] == {"A": "base", "B": "chat-s0"}
    assert all(set(ev["acc"]) == {"A", "B"} and set(ev["talk"]["seats"]) == {"A", "B"}
               for ev in results["evals"].values())
    assert results["arms"]["chat"]["seeds"]["1"]["cross_play_others"] == \
        results["evals"]["cross-others-chat-s1"]["accuracy"]
    checks = results["checks"]
    assert checks["hands_hold_numbers"] is True and checks["hands_disjoint_and_complete"] is True
    assert checks["views_respect_arms"] is True
    assert set(checks["chat_beats_base"]) == {"0", "1"}
    comp = results["comparisons"]["chat-cut"]
    assert set(results["comparisons"]) == {"chat-cut"} and (comp["a"], comp["b"]) == ("chat", "cut")
    assert (comp["n_seeds_a"], comp["n_seeds_b"]) == (2, 2)
    assert checks["interval_excludes_zero"] == {"chat-cut": comp["excludes_zero"]}
    for name in ("report.md", "report.html", "plots/learning_curves.png", "plots/accuracy.png", "plots/talk.png",
                 "plots/cross_play.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "plots/accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert comp["delta"] == pytest.approx(results["arms"]["chat"]["accuracy"] - results["arms"]["cut"]["accuracy"])


def test_the_influence_stage_replays_every_team_and_reports_the_cut_check(tiny_recipe):
    out = tiny_recipe.out
    results = json.loads((out / "results.json").read_text())
    inf = results["influence"]
    teams = ["base-chat", "base-cut", "chat-s0", "chat-s1", "cut-s0", "cut-s1"]
    assert sorted(inf["evals"]) == teams and inf["n_problems"] == 6 and inf["kinds"] == ["remove", "replace", "renumber"]
    for name in teams:
        assert (out / "evals" / name / "influence" / "influence.json").is_file()
        figures = inf["evals"][name]["figures"]
        assert [(f["turn"], f["writer"], f["listener"]) for f in figures[::3]] == [(0, "A", "B"), (1, "B", "A"), (2, "A", "B")]
    # In the cut arm no listener is ever shown the message, so no ablation can move an answer.
    assert all(f["drop"]["mean"] == 0 and f["flip"]["mean"] == 0 for name in teams if "cut" in name
               for f in inf["evals"][name]["figures"])
    assert results["checks"]["cut_influence_zero"] is True
    chat = inf["arms"]["chat"]
    assert len(chat["base"]) == len(chat["trained"]) == len(chat["trained_minus_base"]) == 9
    assert chat["trained"][0]["n_models"] == 2 and chat["base"][0]["n_models"] == 1
    assert "influence: the listener's accuracy drop" in tiny_recipe.printed
    assert (out / "plots/influence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Message influence" in (out / "report.md").read_text()


def test_rerun_skips_every_stage(tiny_model_dir, tiny_recipe, tmp_path):
    out = copy_of(tiny_recipe, tmp_path)
    results = json.loads((out / "results.json").read_text())
    # Every stage is current under the same config, so nothing is trained or evaluated again.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.suffix in (".jsonl", ".safetensors")
              or p.name == "summary.json"}
    assert recipe(tiny_model_dir, out) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    again = json.loads((out / "results.json").read_text())
    assert again["evals"] == results["evals"] and again["comparisons"] == results["comparisons"]


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


def test_more_seeds_train_only_the_new_runs_and_pool_every_seed(tiny_model_dir, tiny_recipe, tmp_path):
    """Seeds 0, 1 grown to 0, 1, 2: the finished runs and their evaluations are read back, not redone; only the
    new seed's runs train and play; the comparison pools all three seeds."""
    out = copy_of(tiny_recipe, tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.suffix in (".jsonl", ".safetensors")
              or p.name == "summary.json"}
    assert recipe(tiny_model_dir, out, "seeds=0,1,2") == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert (out / "runs" / "chat-s2" / "done.json").exists() and (out / "evals" / "cut-s2" / "summary.json").exists()
    results = json.loads((out / "results.json").read_text())
    assert results["comparisons"]["chat-cut"]["n_seeds_a"] == 3 == results["comparisons"]["chat-cut"]["n_seeds_b"]


def test_views_check_catches_a_leak(tiny_recipe, tmp_path):
    """`views_respect_arms` holds on the recipe's own transcripts of every arm, and fails on each kind of leak: a
    cut seat shown a partner's message, a hand holding a fact its arm does not deal it, a chat transcript
    claiming the cut arm."""
    import copy

    from talktosolve.config import make_config
    from talktosolve.experiment.assemble import views_respect_arms
    from talktosolve.protocol import protocol_of
    from talktosolve.store import read_jsonl, write_text

    out = tiny_recipe.out
    cfg = make_config("tiny")
    protocol = protocol_of(cfg.chat)
    cut, chat = out / "evals" / "base-cut" / "chats.jsonl", out / "evals" / "base-chat" / "chats.jsonl"
    training = [out / "runs" / run / "transcripts.jsonl" for run in ("chat-s0", "cut-s1")]
    assert views_respect_arms([cut, chat] + training, protocol, cfg.chat)
    chats, chat_chats = read_jsonl(cut), read_jsonl(chat)

    def check(records, name="leak.jsonl") -> bool:
        path = tmp_path / name
        write_text(path, "".join(json.dumps(c) + "\n" for c in records))
        return views_respect_arms([path], protocol, cfg.chat)

    assert check(chats) and check(chat_chats)  # rewritten unchanged, they still pass
    # Show B, in its final view, A's final message: the check must notice.
    leak = copy.deepcopy(chats)
    view = leak[0]["messages"][3]["view"]
    view[-1]["content"] = view[-1]["content"].replace("(no message)", chats[0]["messages"][2]["text"] or "x", 1)
    assert view != chats[0]["messages"][3]["view"]
    assert not check(leak)
    # Deal B one of A's facts as well.
    leak = copy.deepcopy(chats)
    leak[0]["hands"]["B"] = leak[0]["hands"]["B"] + leak[0]["hands"]["A"][:1]
    assert not check(leak)
    # A chat-arm transcript is no cut transcript: its views show the partner's messages.
    leak = copy.deepcopy(chat_chats)
    leak[0]["arm"] = "cut"
    assert not check(leak)


def test_parallel_runs_train_in_separate_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "rec"
    assert recipe(tiny_model_dir, out, "parallel_runs=2", "seeds=0", "train.steps=1") == 0
    for name in ("chat-s0", "cut-s0"):
        assert (out / "runs" / name / "done.json").exists()
    validate_results(json.loads((out / "results.json").read_text()))


def test_parallel_runs_read_each_arms_training_pool_from_the_recipe_folder(tmp_path):
    """The pre-pass is played once, into the recipe's pool/, not once per training process into its run folder
    (the micro base: the tiny model never solves a problem, and a pool needs problems the team solved)."""
    out = tmp_path / "rec"
    sets = ["parallel_runs=2", "arms=chat", "seeds=0,1", "train.steps=1", "train.pool_chats=2", "eval.n_problems=8",
            "data.n_train=32", "eval.cross_seed=false"]
    assert main(["recipe", "--preset", "tiny", "--out", str(out), "--quiet",
                 *[arg for s in sets for arg in ("--set", s)]]) == 0
    assert len((out / "pool" / "chat" / "chats.jsonl").read_text().splitlines()) == 32 * 2
    assert not list((out / "runs").glob("*/pool")), "a training process played its own pre-pass"
    for name in ("chat-s0", "chat-s1"):
        assert (out / "runs" / name / "done.json").exists()


def test_one_arm_recipe_has_a_null_comparison_and_a_report(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "rec"
    assert recipe(tiny_model_dir, out, "arms=chat", "seeds=0", "train.steps=1") == 0
    assert "delta chat-cut: - (an arm was not run)" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    validate_results(results)
    assert results["comparisons"] == {"chat-cut": None}
    assert results["checks"]["interval_excludes_zero"] == {"chat-cut": None}
    assert results["checks"]["cut_near_base"] == {} and set(results["checks"]["chat_beats_base"]) == {"0"}
    assert set(results["evals"]) == {"base-chat", "chat-s0", "cross-chat-s0", "cross-others-chat-s0"}
    assert "no chat-cut comparison" in (out / "report.md").read_text(encoding="utf-8")


def test_runs_per_process_trains_the_recipe_runs_side_by_side(tiny_model_dir, tmp_path, evaluation_order):
    """Also: with every run trained before the evaluations, the teams of one model in every seat are evaluated
    before any cross-play (a recipe stopped during its evaluations has the arms' comparison)."""
    out = tmp_path / "rec"
    assert recipe(tiny_model_dir, out, "train.runs_per_process=2", "seeds=0", "train.steps=1",
                  "model.finetune=lora") == 0
    for name in ("chat-s0", "cut-s0"):
        rows = [json.loads(line) for line in (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        assert rows and all(r["perf/shared_runs"] == 2 for r in rows)
    results = json.loads((out / "results.json").read_text())
    validate_results(results)
    assert evaluation_order[:4] == ["base-chat", "base-cut", "chat-s0", "cut-s0"]
    assert sorted(evaluation_order) == sorted(results["evals"])
