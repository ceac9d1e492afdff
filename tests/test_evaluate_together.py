"""Evaluations played together (`eval.batch_evals`): several teams' chats in the same engine passes, each seat
through its own adapter in one slot-mode engine, written as the same folders one-at-a-time evaluation writes."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from talktosolve.config import make_config
from talktosolve.experiment.evaluate import Team, evaluate_teams, seat_team, slot_lineups
from talktosolve.experiment.plan import pass_groups
from talktosolve.experiment.train import train_runs
from talktosolve.protocol import protocol_of
from talktosolve.store import read_json, read_jsonl
from talktosolve.task.tasks import load_problems


def config(device="cpu", **eval_):
    # The micro base (it writes messages; a random model stops at once), near-greedy decoding: every row's token
    # is its own argmax, whatever else shares its batch.
    return make_config("micro", {
        "model": {"finetune": "lora", "lora_r": 4},
        "data": {"n_train": 16, "n_test": 8},
        "eval": {"n_problems": 6, "chats_per_problem": 2, "batch_chats": 8, **eval_},
        "chat": {"max_message_tokens": 6, "max_final_tokens": 5, "temperature": 1e-4},
        "train": {"steps": 2, "problems_per_step": 2, "checkpoint_every": 1, "runs_per_process": 2, "lr": 1e-2},
        "device": device,
    })


def test_evaluations_are_grouped_in_the_fewest_passes_of_sizes_as_equal_as_possible():
    """38 evaluations at batch_evals=6 are three passes of 6 and four of 5 (not six of 6 and a seventh of 2); for
    every count and bound: the fewest passes, none above the bound, sizes within one, the larger first, in order."""
    assert [len(g) for g in pass_groups(list(range(38)), 6)] == [6, 6, 6, 5, 5, 5, 5]
    assert [len(g) for g in pass_groups(list(range(20)), 6)] == [5, 5, 5, 5]
    assert pass_groups([], 6) == []
    for n in range(40):
        for at_most in range(1, 9):
            groups = pass_groups(list(range(n)), at_most)
            sizes = [len(g) for g in groups]
            assert [i for g in groups for i in g] == list(range(n))
            assert len(groups) == -(-n // at_most) and max(sizes, default=0) <= at_most
            assert sizes == sorted(sizes, reverse=True) and max(sizes, default=0) - min(sizes, default=0) <= 1


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two LoRA runs of the chat arm whose adapters learned (stand-in rewards: a random model is never right)."""
    import talktosolve.team.reward

    def score(chats, protocol):
        for c in chats:
            right = len(c.turns[-1].text) % 2 == 1
            c.answers = {seat: None for seat in protocol.seats}
            c.correct = {seat: right for seat in protocol.seats}
            c.reward = float(right)

    real = talktosolve.team.reward.score_chats
    talktosolve.team.reward.score_chats = score
    try:
        cfg = config()
        train_set, _, _ = load_problems(cfg)
        root = tmp_path_factory.mktemp("together")
        runs = [("chat", 0, root / "chat-s0"), ("chat", 1, root / "chat-s1")]
        train_runs(cfg, runs, train_set, progress=False)
    finally:
        talktosolve.team.reward.score_chats = real
    # Two short steps barely move a greedy message: set each adapter's B to weights of its own, so that every
    # slot (and the base) writes other messages and a row read through the wrong one would show.
    for k, (*_, out) in enumerate(runs):
        path = out / "final" / "adapter_model.safetensors"
        g = torch.Generator().manual_seed(k)
        weights = {n: (torch.randn(t.shape, generator=g) * 0.3 if "lora_B" in n else t)
                   for n, t in load_file(path).items()}
        save_file(weights, path)
    return [str(out) for *_, out in runs]


def teams(runs, root):
    r0, r1 = runs
    return [Team(root / "base-chat", "chat", {}), Team(root / "base-cut", "cut", {}),
            Team(root / "chat-s0", "chat", {"A": r0, "B": r0}), Team(root / "cross", "chat", {"A": r0}),
            Team(root / "mixed", "chat", {"A": r0, "B": r1}), Team(root / "cut-s1", "cut", {"A": r1, "B": r1})]


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_evaluations_played_together_equal_one_at_a_time_under_greedy_decoding(two_runs, tmp_path, monkeypatch,
                                                                               device):
    import talktosolve.experiment.evaluate as ev

    cfg_alone, cfg_together = config(device), config(device, batch_evals=6)
    _, test_set, _ = load_problems(cfg_alone)
    alone = evaluate_teams(cfg_alone, teams(two_runs, tmp_path / "alone"), test_set, progress=False)
    passes = []
    real = ev._evaluate_together
    monkeypatch.setattr(ev, "_evaluate_together", lambda *a, **k: passes.append(len(a[2])) or real(*a, **k))
    together = evaluate_teams(cfg_together, teams(two_runs, tmp_path / "together"), test_set, progress=False)
    assert passes == [6], "the six evaluations shared one engine's passes"
    for team, a, t in zip(teams(two_runs, tmp_path), alone, together):
        assert t["scores"] == a["scores"] and t["seats"] == a["seats"] and t["key"] == a["key"]
        chats = [read_jsonl(tmp_path / side / team.out_dir.name / "chats.jsonl") for side in ("alone", "together")]
        assert [[m["text"] for m in c["messages"]] for c in chats[0]] == \
               [[m["text"] for m in c["messages"]] for c in chats[1]]
        assert (tmp_path / "together" / team.out_dir.name / "config.json").is_file()
    # Each slot was read: the base, run 0 and run 1 in seat A write three different sets of first messages.
    firsts = [[c["messages"][0]["text"] for c in read_jsonl(tmp_path / "together" / n / "chats.jsonl")]
              for n in ("base-chat", "chat-s0", "cut-s1")]
    assert firsts[0] != firsts[1] != firsts[2] != firsts[0]


@pytest.mark.slow
def test_groups_of_evaluations_are_as_equal_as_batch_evals_allows_and_share_one_slot_engine(two_runs, tmp_path,
                                                                                            monkeypatch):
    """Six evaluations at batch_evals=4 are played as two groups of 3 (not 4 and 2), the second in the first's
    slot engine (the base is loaded once), and each evaluation's chats are those of one at a time (greedy)."""
    import talktosolve.experiment.evaluate as ev

    cfg = config(batch_evals=4)
    _, test_set, _ = load_problems(cfg)
    alone = evaluate_teams(config(), teams(two_runs, tmp_path / "alone"), test_set, progress=False)
    passes, loads = [], []
    real_together, real_load = ev._evaluate_together, ev.load_player_model
    monkeypatch.setattr(ev, "_evaluate_together", lambda *a, **k: passes.append(len(a[2])) or real_together(*a, **k))
    monkeypatch.setattr(ev, "load_player_model", lambda *a, **k: loads.append(a[1]) or real_load(*a, **k))
    together = evaluate_teams(cfg, teams(two_runs, tmp_path / "together"), test_set, progress=False)
    assert passes == [3, 3]
    assert len(loads) == 1, "the second group reused the first group's slot engine"
    for team, a, t in zip(teams(two_runs, tmp_path), alone, together):
        assert t["scores"] == a["scores"] and t["key"] == a["key"]
        chats = [read_jsonl(tmp_path / side / team.out_dir.name / "chats.jsonl") for side in ("alone", "together")]
        assert [[m["text"] for m in c["messages"]] for c in chats[0]] == \
               [[m["text"] for m in c["messages"]] for c in chats[1]]


@pytest.mark.slow
def test_a_rerun_with_another_batch_evals_redoes_no_evaluation(two_runs, tmp_path):
    cfg = config(batch_evals=3)
    _, test_set, _ = load_problems(cfg)
    first = evaluate_teams(cfg, teams(two_runs, tmp_path), test_set, progress=False)
    written = {p: p.read_bytes() for p in tmp_path.glob("*/summary.json")}
    again = evaluate_teams(config(), teams(two_runs, tmp_path), test_set, progress=False)
    assert [a["scores"] for a in again] == [f["scores"] for f in first]
    assert {p: p.read_bytes() for p in tmp_path.glob("*/summary.json")} == written


def test_adapters_of_another_shape_are_not_put_in_one_engine(two_runs, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(two_runs[1], other)
    config_file = other / "final" / "adapter_config.json"
    adapter = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**adapter, "r": adapter["r"] * 2}))
    cfg = config(batch_evals=2)
    protocol = protocol_of(cfg.chat)
    same = [seat_team(cfg, protocol, Team(tmp_path / n, "chat", {"A": r}))
            for n, r in (("a", two_runs[0]), ("b", two_runs[1]))]
    assert slot_lineups(cfg, same) is not None
    mixed = [same[0], seat_team(cfg, protocol, Team(tmp_path / "c", "chat", {"A": str(other)}))]
    assert slot_lineups(cfg, mixed) is None


def test_an_out_of_memory_in_evaluations_played_together_names_batch_evals():
    import torch

    from talktosolve.experiment.evaluate import EvaluationError, says_what_to_lower

    cfg = config(batch_evals=8)
    with pytest.raises(EvaluationError, match=r"eval\.batch_evals \(now 8; --set eval\.batch_evals=4\)"):
        with says_what_to_lower(cfg, "eval 8 together", teams=8):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")


@pytest.mark.slow
def test_the_recipe_with_batch_evals_writes_every_evaluation_and_reruns_as_a_no_op(tiny_model_dir, tmp_path,
                                                                                   evaluation_order):
    """Also: the teams of one model in every seat are played first (a recipe stopped during its evaluations has
    the arms' comparison)."""
    from talktosolve.cli import main
    from talktosolve.experiment.results import validate_results

    args = ["recipe", "--preset", "tiny", "--out", str(tmp_path / "rec"), "--quiet",
            "--set", f"model.name_or_path={tiny_model_dir}", "--set", "model.finetune=lora",
            "--set", "eval.influence=false", "--set", "eval.batch_evals=20"]
    assert main(args) == 0
    results = read_json(tmp_path / "rec" / "results.json")
    validate_results(results)
    folders = sorted(p.parent.name for p in (tmp_path / "rec" / "evals").glob("*/summary.json"))
    assert folders == sorted(results["evals"]) and len(folders) == 14
    own = ["base-chat", "base-cut", "chat-s0", "chat-s1", "cut-s0", "cut-s1"]
    assert evaluation_order[:6] == own and sorted(evaluation_order) == folders
    before = {p: p.read_bytes() for p in (tmp_path / "rec" / "evals").glob("*/summary.json")}
    assert main(args[:-1] + ["eval.batch_evals=1"]) == 0
    assert {p: p.read_bytes() for p in (tmp_path / "rec" / "evals").glob("*/summary.json")} == before
