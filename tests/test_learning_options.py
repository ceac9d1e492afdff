"""The learning options (informative groups, a training pool, a KL penalty to the base): each off by default with
the run keys of before, and each doing what its docstring says on the micro world's base and on tiny models."""

import json
from pathlib import Path

import pytest

from talktosolve.config import config_key, make_config
from talktosolve.experiment.train import is_done, run_config, train, train_runs
from talktosolve.learning.informative import chosen, informative
from talktosolve.store import read_jsonl
from talktosolve.task.tasks import load_problems

DATA = Path(__file__).parent / "data"


def test_with_the_options_off_presets_keep_the_run_keys_they_had_before_the_options():
    """Keys computed by the code before the options existed: finished runs of these presets stay finished."""
    assert config_key(run_config(make_config("paper"), "chat", 0)) == "862856d12f78b882"
    assert config_key(run_config(make_config("micro"), "chat", 0)) == "1ab697b55588fbad"
    six = make_config("paper", {"train": {"runs_per_process": 6}})
    assert config_key(run_config(six, "chat", 2)) == "e9747d26d699159c"


def test_a_finished_real_weights_run_is_done_under_its_config_and_in_a_larger_group(tmp_path):
    """The run of record's chat-s2 (six runs to a process) is done under its own config, and still done when the
    recipe grows to twelve runs a process; not under another learning rate."""
    import shutil

    run = tmp_path / "chat-s2"
    shutil.copytree(DATA / "paper-coder-1.5b-chat-s2", run)
    saved = json.loads((run / "config.json").read_text())
    values = {k: v for k, v in saved.items() if k not in ("key", "arm", "seed", "trained_with")}
    cfg = make_config(None, values)
    assert config_key(run_config(cfg, "chat", 2)) == saved["key"] == json.loads((run / "done.json").read_text())["key"]
    assert is_done(run, cfg, "chat", 2)
    twelve = make_config(None, {**values, "train": {**values["train"], "runs_per_process": 12}})
    assert is_done(run, twelve, "chat", 2)
    other = make_config(None, {**values, "train": {**values["train"], "runs_per_process": 12, "lr": 3e-4}})
    assert not is_done(run, other, "chat", 2) and not is_done(run, cfg, "chat", 3)


def micro_config(**train):
    return make_config("micro", {"data": {"n_train": 64, "n_test": 8}, "eval": {"n_problems": 4},
                                 "train": {"steps": 2, "problems_per_step": 4, "checkpoint_every": 2, **train}})


@pytest.fixture(scope="module")
def micro_runs(tmp_path_factory):
    """Two steps of the chat arm on the micro base: plain, with informative groups (one draw, four, and four two
    a pass), with a pool and with a KL penalty; each run's folder."""
    root = tmp_path_factory.mktemp("options")
    settings = {"plain": {}, "one_draw": {"dynamic_sampling": True, "max_draws": 1},
                "draws": {"dynamic_sampling": True, "max_draws": 4},
                "two_a_pass": {"dynamic_sampling": True, "max_draws": 4, "draw_batches": 2},
                "pool": {"pool_chats": 2, "pool_min": 1}, "kl": {"kl_coef": 0.1}}
    out = {}
    for name, train_settings in settings.items():
        cfg = micro_config(**train_settings)
        problems, _, _ = load_problems(cfg, root / "data")
        train(cfg, "chat", 0, root / name, problems, progress=False)
        out[name] = root / name
    return out


def without_draws(chats):
    return [{k: v for k, v in c.items() if k not in ("draw", "trained")} for c in chats]


@pytest.mark.slow
def test_informative_groups_with_one_draw_are_the_plain_step(micro_runs):
    plain, one = micro_runs["plain"], micro_runs["one_draw"]
    assert without_draws(read_jsonl(one / "transcripts.jsonl")) == read_jsonl(plain / "transcripts.jsonl")
    for a, b in zip(read_jsonl(plain / "metrics.jsonl"), read_jsonl(one / "metrics.jsonl")):
        assert a["loss/policy"] == b["loss/policy"] and a["train/reward"] == b["train/reward"]


@pytest.mark.slow
def test_informative_groups_raise_the_share_of_groups_learned_from_that_carry_a_signal(micro_runs):
    """Each step draws until 4 groups are informative (or 4 batches), learns from exactly 4 groups, the first
    informative ones in the order drawn; the share of learned groups with a signal is at least the first
    batch's, and above it on some step."""
    chats = read_jsonl(micro_runs["draws"] / "transcripts.jsonl")
    metrics = read_jsonl(micro_runs["draws"] / "metrics.jsonl")
    rose = False
    for m in metrics:
        step = [c for c in chats if c["step"] == m["step"]]
        groups: dict = {}
        for c in step:
            groups.setdefault((c["draw"], c["problem_id"]), []).append(c)
        drawn = list(groups.values())
        rewards = [[c["reward"] for c in g] for g in drawn]
        trained = [i for i, g in enumerate(drawn) if g[0]["trained"]]
        assert trained == chosen(rewards, 4) and all(all(c["trained"] == g[0]["trained"] for c in g) for g in drawn)
        assert m["train/draws"] == 1 + max(c["draw"] for c in step) <= 4
        assert m["train/groups_drawn"] == len(drawn)
        first = [informative(r) for r, g in zip(rewards, drawn) if g[0]["draw"] == 0]
        learned = [informative(rewards[i]) for i in trained]
        assert sum(learned) / 4 >= sum(first) / len(first)
        rose |= sum(learned) / 4 > sum(first) / len(first)
        if m["train/draws"] < 4:
            assert all(learned), "it stopped drawing because 4 groups were informative"
        for g in drawn:
            if not g[0]["trained"]:
                assert all(c["advantage"] == 0 for c in g)
    assert rose


@pytest.mark.slow
def test_batches_played_two_a_pass_hold_the_problems_they_hold_drawn_one_at_a_time(micro_runs):
    """With `draw_batches=2` a step draws 2 or 4 batches (whole passes, at most `max_draws`), each batch holds the
    problems it holds when batches are drawn one at a time, and the step learns from the first informative groups
    in the order drawn."""
    def batches(run):
        out: dict = {}
        for c in read_jsonl(run / "transcripts.jsonl"):
            out.setdefault((c["step"], c["draw"]), set()).add(c["problem_id"])
        return out

    two, one = batches(micro_runs["two_a_pass"]), batches(micro_runs["draws"])
    for key in two.keys() & one.keys():
        assert two[key] == one[key], key
    chats = read_jsonl(micro_runs["two_a_pass"] / "transcripts.jsonl")
    for m in read_jsonl(micro_runs["two_a_pass"] / "metrics.jsonl"):
        step = [c for c in chats if c["step"] == m["step"]]
        assert m["train/draws"] in (2, 4) and m["train/draws"] == 1 + max(c["draw"] for c in step)
        groups: dict = {}
        for c in step:
            groups.setdefault((c["draw"], c["problem_id"]), []).append(c)
        drawn = list(groups.values())
        assert [i for i, g in enumerate(drawn) if g[0]["trained"]] == chosen([[c["reward"] for c in g]
                                                                             for g in drawn], 4)


@pytest.mark.slow
def test_a_pool_trains_only_on_problems_the_untrained_team_solved_and_is_played_once(micro_runs, tmp_path):
    run = micro_runs["pool"]
    pool = read_jsonl(run / "pool" / "chat" / "chats.jsonl")
    assert len(pool) == 64 * 2, "every training problem, pool_chats chats each"
    solved = {c["problem_id"] for c in pool if c["reward"] > 0}
    assert 4 <= len(solved) < 64
    assert {c["problem_id"] for c in read_jsonl(run / "transcripts.jsonl")} <= solved
    summary = run / "pool" / "chat" / "summary.json"
    before = summary.stat().st_mtime_ns
    cfg = micro_config(pool_chats=2, pool_min=1, steps=3)  # a longer run: the pool is the same, read again
    problems, _, _ = load_problems(cfg, tmp_path / "data")
    train(cfg, "chat", 1, tmp_path / "again", problems, progress=False, pool_dir=run / "pool")
    assert summary.stat().st_mtime_ns == before


def test_a_pool_smaller_than_a_step_fails_in_one_line_naming_the_settings(tmp_path):
    import talktosolve.experiment.pool as pool
    from talktosolve.experiment.train import TrainingError

    cfg = micro_config(pool_chats=2, pool_min=2, problems_per_step=4)
    problems, _, _ = load_problems(cfg, tmp_path / "data")
    folder = tmp_path / "pool" / "chat"
    folder.mkdir(parents=True)
    # A finished pre-pass in which the untrained team solved nothing twice: nothing is played again.
    from talktosolve.experiment.evaluate import Team, seat_team
    from talktosolve.protocol import protocol_of

    key = seat_team(pool.pool_config(cfg, len(problems)), protocol_of(cfg.chat), Team(folder, "chat", {})).key
    (folder / "chats.jsonl").write_text("".join(json.dumps({"problem_id": p.id, "reward": 0.5 * (i < 3)}) + "\n"
                                                for i, p in enumerate(problems) for _ in range(2)))
    (folder / "summary.json").write_text(json.dumps({"key": key}))
    with pytest.raises(TrainingError, match=r"holds 3 problems .* fewer than train.problems_per_step \(4\)") as e:
        train(cfg, "chat", 0, tmp_path / "run", problems, progress=False, pool_dir=tmp_path / "pool")
    assert "\n" not in str(e.value) and not (tmp_path / "run" / "config.json").exists()


@pytest.mark.slow
def test_the_kl_penalty_is_zero_at_the_base_and_positive_once_the_policy_moved(micro_runs):
    """Under full fine-tuning the reference is a frozen copy of the base: step 0's policy is the base (k3 = 0
    exactly), step 1's has moved."""
    metrics = read_jsonl(micro_runs["kl"] / "metrics.jsonl")
    assert metrics[0]["loss/kl"] == pytest.approx(0.0, abs=1e-7)
    assert metrics[1]["loss/kl"] > 0
    assert "loss/kl" not in read_jsonl(micro_runs["plain"] / "metrics.jsonl")[0]


@pytest.mark.slow
def test_every_option_runs_in_runs_sharing_a_process_under_lora(tiny_model_dir, tmp_path, monkeypatch):
    """Two runs (chat, cut) in one process with informative groups and a KL penalty: both finish and log their
    KL; the cut arm (stand-in rewards always 0) never finds an informative group, so it draws to the cap."""
    from test_shared_runs import rewards_by_arm

    rewards_by_arm(monkeypatch)
    cfg = make_config("micro", {
        "model": {"name_or_path": str(tiny_model_dir), "finetune": "lora", "lora_r": 4},
        "data": {"n_train": 16, "n_test": 8}, "eval": {"n_problems": 4},
        "chat": {"max_message_tokens": 6, "max_final_tokens": 5},
        "train": {"steps": 2, "problems_per_step": 2, "checkpoint_every": 1, "runs_per_process": 2,
                  "dynamic_sampling": True, "max_draws": 3, "kl_coef": 0.1}})
    problems, _, _ = load_problems(cfg, tmp_path / "data")
    train_runs(cfg, [("chat", 0, tmp_path / "chat-s0"), ("cut", 0, tmp_path / "cut-s0")], problems, progress=False)
    for arm in ("chat", "cut"):
        metrics = read_jsonl(tmp_path / f"{arm}-s0" / "metrics.jsonl")
        assert [m["step"] for m in metrics] == [0, 1] and all(m["loss/kl"] >= 0 for m in metrics)
        assert (tmp_path / f"{arm}-s0" / "done.json").exists()
    cut = read_jsonl(tmp_path / "cut-s0" / "metrics.jsonl")
    assert all(m["train/draws"] == 3 and m["train/informative_share"] == 0 for m in cut), \
        "no group of the cut arm is ever informative: it draws to the cap"


@pytest.mark.slow
def test_the_kl_penalty_holds_a_run_that_drifts_from_the_base_nearer_to_it(tmp_path):
    """At a learning rate that sends the micro recipe adrift (3e-3: its KL to the base climbs by nats per token
    within a few steps and its reward falls to 0), a KL penalty of 0.5 keeps it at under half that distance.
    Both runs measure the distance the same way (a penalty of 1e-9 changes nothing but logs it); the first
    update is the same in both (at the base the penalty's gradient is 0)."""
    kl = {}
    for beta in (1e-9, 0.5):
        cfg = micro_config(steps=8, lr=3e-3, kl_coef=beta)
        problems, _, _ = load_problems(cfg, tmp_path / "data")
        train(cfg, "chat", 0, tmp_path / str(beta), problems, progress=False)
        kl[beta] = [m["loss/kl"] for m in read_jsonl(tmp_path / str(beta) / "metrics.jsonl")]
    assert kl[1e-9][1] == pytest.approx(kl[0.5][1], rel=1e-4)
    drift, held = sum(kl[1e-9][2:]) / 6, sum(kl[0.5][2:]) / 6
    assert drift > 2.0 and held < drift / 2, (kl[1e-9], kl[0.5])
